import CZlib
import Foundation

/// How a diff travels through a bucket: compressed with zlib behind a short header, and expanded again into the
/// SQLite file `<KSUID>.sqlite` a device stores and opens.
///
/// A diff is a SQLite database, mostly empty pages: a one-row diff is 5 KiB as a file and a few hundred bytes
/// compressed. The object in the bucket is `magic` (8 bytes), the expanded size (8 bytes, big-endian), then a zlib
/// stream (RFC 1950, whose Adler-32 checks the expanded bytes). A reader accepts an object that starts with the
/// SQLite header as it is (diffs uploaded by versions before this encoding) and refuses one whose stream is damaged,
/// truncated, followed by other bytes, or expands past its declared size or the limit it is given (a compression
/// bomb). Encryption, when on, wraps the compressed object (compress first, then encrypt).
public enum DiffTransport {
    /// The first bytes of a compressed diff object.
    public static let magic: [UInt8] = Array("RTSYNCZ1".utf8)
    /// Bytes before the zlib stream: `magic` and the expanded size.
    public static let headerSize = 16
    /// Bytes of expanded output written at a time.
    static let chunk = 256 * 1024

    /// Whether `head` (the first bytes of an object or file) starts with the compressed-diff header.
    public static func isCompressed(_ head: Data) -> Bool {
        head.count >= magic.count && head.prefix(magic.count).elementsEqual(magic)
    }

    /// Whether the file at `url` starts with the compressed-diff header.
    public static func isCompressed(file url: URL) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: url.path) else { return false }
        defer { try? handle.close() }
        return isCompressed((try? handle.read(upToCount: magic.count)) ?? Data())
    }

    /// `data` (a diff file's bytes) compressed, behind the header.
    /// - Throws: `DiffFormatError.writeFailed` when zlib fails (out of memory).
    public static func compress(_ data: Data, name: String, level: Int32 = 6) throws -> Data {
        var stream = z_stream()
        guard rtsync_deflate_init(&stream, level) == Z_OK else { throw DiffFormatError.writeFailed(file: name, reason: "zlib could not start compressing") }
        defer { deflateEnd(&stream) }
        var out = Data(magic)
        withUnsafeBytes(of: UInt64(data.count).bigEndian) { out.append(contentsOf: $0) }
        let bound = Int(deflateBound(&stream, uLong(data.count)))
        var buffer = [UInt8](repeating: 0, count: bound)
        let status: Int32 = data.withUnsafeBytes { input in
            buffer.withUnsafeMutableBytes { output in
                stream.next_in = UnsafeMutablePointer(mutating: input.bindMemory(to: Bytef.self).baseAddress)
                stream.avail_in = uInt(input.count)
                stream.next_out = output.bindMemory(to: Bytef.self).baseAddress
                stream.avail_out = uInt(output.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        guard status == Z_STREAM_END else { throw DiffFormatError.writeFailed(file: name, reason: "zlib could not compress the diff (status \(status))") }
        out.append(contentsOf: buffer.prefix(Int(stream.total_out)))
        return out
    }

    /// Expands a compressed diff (`data`, header included) into `output` (a new file), or only checks that it
    /// would expand when `output` is nil; returns the expanded size. `name` is what errors name (the object or file).
    /// - Throws: `DiffFormatError.badCompression` when the header or the stream is wrong, or the stream expands
    ///   past its declared size or `limit`; `.writeFailed` when `output` cannot be written. Nothing is left at
    ///   `output` after an error.
    @discardableResult
    public static func expand(_ data: Data, name: String, limit: Int64, to output: URL?) throws -> Int64 {
        func bad(_ reason: String) -> DiffFormatError { .badCompression(file: name, reason: reason) }
        guard isCompressed(data), data.count >= headerSize else { throw bad("no compressed-diff header") }
        let declared = data.subdata(in: magic.count..<headerSize).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard declared <= UInt64(max(0, limit)) else {
            throw bad("declares \(declared) bytes expanded, over the limit of \(limit) bytes (refused unexpanded, as a compression bomb)")
        }
        // One open (FileManager.createFile would write an empty file beside it and rename it over, a second new
        // file for every diff of a catch-up).
        var fd: Int32 = -1
        if let output {
            fd = open(output.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard fd >= 0 else {
                throw DiffFormatError.writeFailed(file: output.path, reason: "cannot create the expanded file (\(String(cString: strerror(errno))))")
            }
        }
        var finished = false
        defer {
            if fd >= 0 { close(fd) }
            if !finished, let output { unlink(output.path) }
        }
        var stream = z_stream()
        guard rtsync_inflate_init(&stream) == Z_OK else { throw bad("zlib could not start expanding") }
        defer { inflateEnd(&stream) }
        var total: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: chunk)
        let compressed = data.subdata(in: headerSize..<data.count)
        try compressed.withUnsafeBytes { input in
            stream.next_in = UnsafeMutablePointer(mutating: input.bindMemory(to: Bytef.self).baseAddress)
            stream.avail_in = uInt(input.count)
            while true {
                let (status, produced): (Int32, Int) = buffer.withUnsafeMutableBytes { out in
                    stream.next_out = out.bindMemory(to: Bytef.self).baseAddress
                    stream.avail_out = uInt(out.count)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    return (status, out.count - Int(stream.avail_out))
                }
                total += Int64(produced)
                if total > Int64(declared) { throw bad("expands past the \(declared) bytes its header declares (refused, as a compression bomb)") }
                if produced > 0, fd >= 0, !buffer.withUnsafeBytes({ writeAll(fd, UnsafeRawBufferPointer(rebasing: $0.prefix(produced))) }) {
                    throw DiffFormatError.writeFailed(file: output?.path ?? name, reason: String(cString: strerror(errno)))
                }
                switch status {
                case Z_STREAM_END:
                    guard stream.avail_in == 0 else { throw bad("\(stream.avail_in) byte(s) follow the compressed stream") }
                    guard total == Int64(declared) else { throw bad("expands to \(total) bytes, not the \(declared) its header declares") }
                    return
                case Z_OK:
                    continue
                case Z_BUF_ERROR:
                    // No progress possible: the input ended before the stream did.
                    throw bad("the compressed stream is truncated (ends after \(total) of \(declared) bytes)")
                default:
                    let message = stream.msg.map { String(cString: $0) } ?? "status \(status)"
                    throw bad("the compressed stream is damaged (\(message))")
                }
            }
        }
        finished = true
        return total
    }

    /// Installs the object downloaded at `staging` as the diff file `file`: expanded when it is compressed, moved as
    /// it is otherwise (a diff from a version before compression, or anything else, which apply then checks). A
    /// compressed object that does not expand is installed as it came too, so apply quarantines it with the reason
    /// (`DiffReader` names it); `name` (the object key) is what the expansion error names.
    /// - Returns: the reason it did not expand, or nil.
    @discardableResult
    public static func install(_ staging: URL, as file: URL, name: String, limit: Int64 = DiffLimits.default.maxFileBytes) throws -> String? {
        var problem: String?
        if isCompressed(file: staging) {
            problem = try expandIntoPlace(try Data(contentsOf: staging, options: .mappedIfSafe), as: file, name: name, limit: limit)
            if problem == nil { unlink(staging.path); return nil }
        }
        try move(staging, to: file)
        return problem
    }

    /// Installs the bytes of a diff object read into memory as the diff file `file`, as ``install(_:as:name:limit:)-(URL,_,_,_)``
    /// does with a downloaded file: expanded when compressed, written as they came otherwise (and when they do not
    /// expand, so that apply quarantines them with the reason). One new file, renamed into place when complete.
    /// - Returns: the reason it did not expand, or nil.
    @discardableResult
    public static func install(_ data: Data, as file: URL, name: String, limit: Int64 = DiffLimits.default.maxFileBytes) throws -> String? {
        var problem: String?
        if isCompressed(data) {
            problem = try expandIntoPlace(data, as: file, name: name, limit: limit)
            if problem == nil { return nil }
        }
        let partial = partialFile(for: file)
        let fd = open(partial.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw DiffFormatError.writeFailed(file: partial.path, reason: String(cString: strerror(errno))) }
        let reason = data.withUnsafeBytes { writeAll(fd, $0) } ? nil : String(cString: strerror(errno))
        close(fd)
        if let reason { unlink(partial.path); throw DiffFormatError.writeFailed(file: partial.path, reason: reason) }
        try move(partial, to: file)
        return problem
    }

    /// Where a diff file is written before it is renamed into place (a sync removes one a killed run left).
    static func partialFile(for file: URL) -> URL { URL(fileURLWithPath: file.path + ".expanding", isDirectory: false) }

    /// Expands the compressed `data` into `file` through its partial file, renamed into place when complete: nil;
    /// or, when the bytes do not expand (`.badCompression`), the reason, with nothing left behind.
    static func expandIntoPlace(_ data: Data, as file: URL, name: String, limit: Int64) throws -> String? {
        let partial = partialFile(for: file)
        do {
            try expand(data, name: name, limit: limit, to: partial)
            try move(partial, to: file)
            return nil
        } catch let e as DiffFormatError {
            unlink(partial.path)
            guard case .badCompression = e else { throw e }
            return e.reason
        }
    }

    /// Writes all of `bytes` to `fd` (retrying interrupted and partial writes); false with `errno` set on failure.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 { if errno == EINTR { continue }; return false }
            offset += n
        }
        return true
    }

    /// Renames `source` over `target` (one atomic step on the same filesystem).
    static func move(_ source: URL, to target: URL) throws {
        guard rename(source.path, target.path) == 0 else {
            throw DiffFormatError.writeFailed(file: target.path, reason: String(cString: strerror(errno)))
        }
    }
}
