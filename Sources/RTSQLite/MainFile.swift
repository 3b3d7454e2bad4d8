import CSQLite
import Foundation

extension Connection {
    /// Copies this connection's main database file into a new file `destination`, reading through SQLite's own
    /// open file (`SQLITE_FCNTL_FILE_POINTER`). Nothing opens and closes the database file a second time in this
    /// process, which would release every POSIX lock the process holds on it (https://sqlite.org/howtocorrupt.html
    /// section 2.2). Call it inside a transaction so the file cannot change underneath.
    /// - Returns: the number of bytes copied.
    /// - Throws: `SQLiteError` when SQLite cannot read the file, `POSIXError` when `destination` cannot be written.
    public func copyMainFile(to destination: URL) throws -> Int64 {
        let file = try mainFile()
        guard let methods = file.pointee.pMethods, let xRead = methods.pointee.xRead, let xFileSize = methods.pointee.xFileSize else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "the database file has no read method (\(path))")
        }
        var size: sqlite3_int64 = 0
        let sizeRC = xFileSize(file, &size)
        guard sizeRC == SQLITE_OK else { throw SQLiteError(code: sizeRC, message: "cannot read the size of \(path)") }
        let out = open(destination.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard out >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        var failure: Error?
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 4096)
        defer { buffer.deallocate() }
        var offset: sqlite3_int64 = 0
        copying: while offset < size {
            let amount = Int32(min(sqlite3_int64(chunk), size - offset))
            let rc = xRead(file, buffer, amount, offset)
            // A short read fills the rest with zeros: the file shrank, which only a checkpoint past this
            // connection's snapshot could do, and those pages are then not part of it.
            guard rc == SQLITE_OK || rc == SQLITE_IOERR | (2 << 8) else {  // SQLITE_IOERR_SHORT_READ
                failure = SQLiteError(code: rc, message: "cannot read \(path) at offset \(offset)")
                break
            }
            var written = 0
            while written < Int(amount) {
                let n = write(out, buffer + written, Int(amount) - written)
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = POSIXError(.init(rawValue: errno) ?? .EIO)
                    break copying
                }
                written += n
            }
            offset += sqlite3_int64(amount)
        }
        if close(out) != 0, failure == nil { failure = POSIXError(.init(rawValue: errno) ?? .EIO) }
        if let failure {
            unlink(destination.path)
            throw failure
        }
        return Int64(size)
    }

    /// The first `count` bytes of the main database file (its header), read through SQLite's own open file
    /// like `copyMainFile`; bytes past the end of the file are zero.
    public func readMainFileHeader(count: Int = 100) throws -> [UInt8] {
        let file = try mainFile()
        guard let methods = file.pointee.pMethods, let xRead = methods.pointee.xRead else {
            throw SQLiteError(code: SQLITE_MISUSE, message: "the database file has no read method (\(path))")
        }
        var bytes = [UInt8](repeating: 0, count: count)
        let rc = bytes.withUnsafeMutableBytes { xRead(file, $0.baseAddress, Int32(count), 0) }
        guard rc == SQLITE_OK || rc == SQLITE_IOERR | (2 << 8) else {  // SQLITE_IOERR_SHORT_READ zero-fills
            throw SQLiteError(code: rc, message: "cannot read the header of \(path)")
        }
        return bytes
    }

    /// The open descriptor SQLite holds for the main database file, when its VFS is a unix one and the
    /// descriptor verifiably refers to the same file as `path` (device and inode); otherwise nil. For calls
    /// that need a descriptor (a FICLONE clone) without opening, and later closing, the file again.
    public func mainFileDescriptor() -> Int32? {
        guard let file = try? mainFile(), file.pointee.pMethods != nil else { return nil }
        var name: UnsafeMutablePointer<CChar>?
        guard sqlite3_file_control(handle, "main", SQLITE_FCNTL_VFSNAME, &name) == SQLITE_OK, let name else { return nil }
        let vfs = String(cString: name)
        sqlite3_free(name)
        // The VFS name is "unix", "unix-excl", ... (or "x/unix" when a shim VFS wraps it, whose file differs).
        guard vfs.hasPrefix("unix") else { return nil }
        let fd = rtsync_unix_file_descriptor(file)
        var held = stat(), named = stat()
        guard fd >= 0, fcntl(fd, F_GETFD) != -1, fstat(fd, &held) == 0, stat(path, &named) == 0,
              held.st_dev == named.st_dev, held.st_ino == named.st_ino else { return nil }
        return fd
    }

    /// SQLite's open file of the main database.
    func mainFile() throws -> UnsafeMutablePointer<sqlite3_file> {
        var file: UnsafeMutablePointer<sqlite3_file>?
        let rc = sqlite3_file_control(handle, "main", SQLITE_FCNTL_FILE_POINTER, &file)
        guard rc == SQLITE_OK, let file else { throw SQLiteError(code: rc == SQLITE_OK ? SQLITE_NOTFOUND : rc, message: "no open database file (\(path))") }
        return file
    }
}
