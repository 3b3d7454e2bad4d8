import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Size and modification time of a local file, read with one `stat` call.
struct FileStat: Sendable, Hashable {
    var size: Int64
    /// Modification time in nanoseconds since 1970.
    var mtimeNanoseconds: Int64
    var isRegularFile: Bool
    var isDirectory: Bool
    /// Device and inode: the file's identity, whatever name reached it.
    var device: UInt64 = 0
    var inode: UInt64 = 0

    /// Whether both were read from the same file (a filesystem that normalizes names opens one file for two names).
    func isSameFile(as other: FileStat) -> Bool { device == other.device && inode == other.inode }

    var modificationDate: Date {
        Date(timeIntervalSince1970: Double(mtimeNanoseconds) / 1_000_000_000)
    }

    /// Returns nil when the path does not exist (or cannot be stat'ed).
    /// With `followSymlinks: false` a symbolic link is neither a regular file nor a folder.
    static func of(_ path: String, followSymlinks: Bool = true) -> FileStat? {
        var st = stat()
        guard (followSymlinks ? stat(path, &st) : lstat(path, &st)) == 0 else { return nil }
        #if canImport(Darwin)
        let ns = Int64(st.st_mtimespec.tv_sec) * 1_000_000_000 + Int64(st.st_mtimespec.tv_nsec)
        #else
        let ns = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
        #endif
        let type = st.st_mode & S_IFMT
        return FileStat(size: Int64(st.st_size), mtimeNanoseconds: ns,
                        isRegularFile: type == S_IFREG, isDirectory: type == S_IFDIR,
                        device: UInt64(truncatingIfNeeded: st.st_dev), inode: UInt64(truncatingIfNeeded: st.st_ino))
    }
}

/// Small filesystem helpers shared by the local backend, downloads and media sync.
enum LocalFiles {
    static func errnoText() -> String { String(cString: strerror(errno)) }

    /// Removes a downloaded file and what a resumable download of it leaves beside it (`.partial`, `.partial.etag`).
    static func removeDownload(at url: URL) {
        for suffix in ["", ".partial", ".partial.etag"] { unlink(url.path + suffix) }
    }

    /// Creates the parent folder of `url` when missing.
    static func createParent(of url: URL) throws {
        let parent = url.deletingLastPathComponent()
        // One stat instead of FileManager's walk when the folder is there already (the common case, per download).
        if FileStat.of(parent.path)?.isDirectory == true { return }
        do {
            try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true)
        } catch {
            throw BucketError.localIO(path: parent.path, description: error.localizedDescription)
        }
    }

    /// A temporary file name beside `url`, hidden from listings: `.rtsync-tmp-<host>~<pid>-<UUID>`, so a later run
    /// on the same machine can tell that the process writing it is gone (`TemporaryOwner`).
    static func temporaryURL(beside url: URL) -> URL {
        url.deletingLastPathComponent().appendingPathComponent(".rtsync-tmp-\(TemporaryOwner.tag)-\(UUID().uuidString)")
    }

    /// Writes `data` to a temporary file beside `url`, flushes it, and returns the temporary URL.
    static func writeTemporary(_ data: Data, beside url: URL) throws -> URL {
        try createParent(of: url)
        let tmp = temporaryURL(beside: url)
        do {
            try data.write(to: tmp)
            try flush(tmp)
        } catch {
            try? FileManager.default.removeItem(at: tmp)
            throw BucketError.localIO(path: tmp.path, description: error.localizedDescription)
        }
        return tmp
    }

    /// Flushes a file's contents to stable storage, so a rename after a crash never exposes an empty file.
    static func flush(_ url: URL) throws {
        let fd = open(url.path, O_RDONLY)
        guard fd >= 0 else { throw BucketError.localIO(path: url.path, description: errnoText()) }
        defer { close(fd) }
        if fsync(fd) != 0 { throw BucketError.localIO(path: url.path, description: errnoText()) }
    }

    /// Makes the bytes of files written without an fsync durable. On Linux one `syncfs` of each filesystem holding
    /// one of them: one journal commit and disk flush for any number of files (it also writes out what other
    /// programs have pending on that filesystem). Elsewhere, or with `RTSYNC_MEDIA_DURABILITY=fsync` in the
    /// environment, an fsync of each file. A file removed meanwhile is skipped.
    /// - Throws: ``BucketError/localIO(path:description:)`` when a flush fails.
    static func makeDurable(_ files: [URL]) throws {
        #if os(Linux)
        if let syncfs = syncfsFunction, !durabilityByFsync {
            var filesystems = Set<UInt64>()
            for url in files {
                let folder = url.deletingLastPathComponent().path
                guard let st = FileStat.of(folder), filesystems.insert(st.device).inserted else { continue }
                try flush(folder, folder: true) { syncfs($0) }
            }
            return
        }
        #endif
        for url in files { try flush(url.path, folder: false) { fsync($0) } }
    }

    /// Makes the names of files just renamed into place durable: an fsync of each folder holding one.
    static func makeNamesDurable(_ files: [URL]) throws {
        for folder in Set(files.map { $0.deletingLastPathComponent().path }).sorted() { try flush(folder, folder: true) { fsync($0) } }
        for url in files { flushes.record("durable \(url.path)") }
    }

    /// Files made durable, for tests: `fsync <path>` for a download flushed on its own before it was installed at
    /// `path`, `durable <path>` for a file installed by media sync after its bytes and then its name were made
    /// durable in a batch.
    static let flushes = RequestCounter()

    /// Opens `path` (a folder with `folder`) and runs `call` (fsync, syncfs) on it; a path gone meanwhile is skipped.
    static func flush(_ path: String, folder: Bool, _ call: (Int32) -> Int32) throws {
        let fd = open(path, folder ? O_RDONLY | O_DIRECTORY | O_CLOEXEC : O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return }
            throw BucketError.localIO(path: path, description: "cannot open to flush: \(errnoText())")
        }
        defer { close(fd) }
        if call(fd) != 0 { throw BucketError.localIO(path: path, description: "cannot flush: \(errnoText())") }
    }

    /// `RTSYNC_MEDIA_DURABILITY=fsync`: ``makeDurable(_:)`` fsyncs each file even where `syncfs` exists (to compare).
    static let durabilityByFsync = ProcessInfo.processInfo.environment["RTSYNC_MEDIA_DURABILITY"] == "fsync"

    #if os(Linux)
    /// glibc's `syncfs(2)`, which Swift's Glibc module does not declare: looked up once.
    static let syncfsFunction: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()
    #endif

    /// Atomically replaces `destination` with `source` (same filesystem).
    static func moveAtomically(_ source: URL, to destination: URL) throws {
        if rename(source.path, destination.path) != 0 {
            let text = errnoText()
            try? FileManager.default.removeItem(at: source)
            throw BucketError.localIO(path: destination.path, description: text)
        }
    }

    /// Atomically publishes `source` as `destination` only if `destination` does not exist.
    /// Returns false when it exists.
    static func linkIfAbsent(_ source: URL, to destination: URL) throws -> Bool {
        defer { try? FileManager.default.removeItem(at: source) }
        if link(source.path, destination.path) == 0 { return true }
        if errno == EEXIST { return false }
        throw BucketError.localIO(path: destination.path, description: errnoText())
    }

    /// Runs blocking work (encrypting a large file, an fsync) on a global dispatch queue, so the few threads of
    /// Swift's cooperative pool keep serving the other transfers of a run in the meantime.
    static func offPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Streams a file through SHA-256 and returns the lowercase hex digest.
    static func sha256Hex(of url: URL) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: url.path) else {
            throw BucketError.localIO(path: url.path, description: "cannot open for reading")
        }
        defer { try? handle.close() }
        var hasher = Hashing.SHA256Stream()
        while true {
            let chunk: Data
            do { chunk = try handle.read(upToCount: 1 << 20) ?? Data() } catch {
                throw BucketError.localIO(path: url.path, description: error.localizedDescription)
            }
            if chunk.isEmpty { break }
            hasher.update(chunk)
        }
        return hasher.finalizeHex()
    }
}

/// Who wrote a temporary file: this machine's name and the writing process's id, as its name records them.
enum TemporaryOwner {
    /// This machine's name (letters, digits and dashes, at most 32) and this process's id.
    static let tag: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        let host = gethostname(&buffer, buffer.count) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "host"
        let safe = String(host.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) || $0 == "-" }.prefix(32).map(Character.init))
        return "\(safe.isEmpty ? "host" : safe)~\(getpid())"
    }()

    /// Whether a temporary file's name says this machine wrote it from a process that no longer runs (then it
    /// is the leftover of an interrupted write and may go at once). Names of other machines, of live processes,
    /// and in any other form say nothing: those wait for the age rule.
    static func isOrphan(_ name: String, prefix: String) -> Bool {
        guard name.hasPrefix(prefix) else { return false }
        let rest = name.dropFirst(prefix.count)
        guard let tilde = rest.firstIndex(of: "~") else { return false }
        let host = rest[..<tilde]
        let afterHost = rest[rest.index(after: tilde)...]
        guard let dash = afterHost.firstIndex(of: "-"), let pid = Int32(afterHost[..<dash]), pid > 0 else { return false }
        guard host == tag.split(separator: "~").first ?? "" else { return false }
        if pid == getpid() { return false }
        return kill(pid, 0) == -1 && errno == ESRCH
    }
}
