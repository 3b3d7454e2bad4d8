import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An ``ObjectStore`` over a local folder (`file:///path`): the embedded default and the test backend.
///
/// Keys map to files below the root; keys that could escape it are refused with
/// ``BucketError/unsafeKey(key:reason:)``. Every write goes to a hidden temporary file in the
/// destination folder and is renamed into place, so readers never see a partial object.
/// ETags are derived from size and modification time (no hashing on listing).
public struct LocalFolderStore: ObjectStore {
    /// The folder that holds the objects.
    public let root: URL
    /// Counts operations by S3-style name (`ListObjectsV2`, `GetObject`, ...).
    public let requestCounter = RequestCounter()

    static let temporaryPrefix = ".rtsync-tmp-"

    /// Creates a store over `root`, creating the folder when `create` is true.
    public init(root: URL, create: Bool = true) throws {
        self.root = root.standardizedFileURL
        if create {
            do {
                try FileManager.default.createDirectory(at: self.root, withIntermediateDirectories: true)
            } catch {
                throw BucketError.localIO(path: root.path, description: error.localizedDescription)
            }
        } else if FileStat.of(self.root.path)?.isDirectory != true {
            throw BucketError.bucketNotFound(bucket: root.path)
        }
    }

    /// `file://` URL of the root.
    public var displayName: String { root.absoluteString }

    func info(key: String, stat: FileStat) -> ObjectInfo {
        ObjectInfo(key: key, size: stat.size,
                   etag: String(stat.size, radix: 16) + "-" + String(stat.mtimeNanoseconds, radix: 16),
                   lastModified: stat.modificationDate)
    }

    func statObject(_ key: String) throws -> (URL, FileStat) {
        let url = try SafeKey.fileURL(root: root, key: key)
        guard let st = FileStat.of(url.path), st.isRegularFile else { throw BucketError.notFound(key: key) }
        return (url, st)
    }

    // MARK: - Listing

    /// Lists objects under `prefix` in UTF-8 byte order; the continuation token is the last key returned.
    public func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        requestCounter.record("ListObjectsV2")
        let limit = max(1, min(maxKeys ?? 1000, 1000))
        let after = continuationToken ?? startAfter
        // Walk only the deepest folder the prefix names.
        let folderPart = prefix.range(of: "/", options: .backwards).map { String(prefix[..<$0.upperBound]) } ?? ""
        var start = root
        if !folderPart.isEmpty {
            guard let segs = try? SafeKey.segments(of: String(folderPart.dropLast())) else {
                return ObjectPage(objects: [], nextContinuationToken: nil)
            }
            for s in segs { start.appendPathComponent(s, isDirectory: true) }
        }
        var keys: [(String, FileStat)] = []
        walk(start, keyPrefix: folderPart) { key, st in
            if key.hasPrefix(prefix), after.map({ $0.utf8.lexicographicallyPrecedes(key.utf8) }) ?? true {
                keys.append((key, st))
            }
        }
        keys.sort { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
        let page = keys.prefix(limit).map { info(key: $0.0, stat: $0.1) }
        let next = keys.count > limit ? page.last?.key : nil
        return ObjectPage(objects: Array(page), nextContinuationToken: next)
    }

    private func walk(_ folder: URL, keyPrefix: String, _ visit: (String, FileStat) -> Void) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path) else { return }
        for name in names where !name.hasPrefix(Self.temporaryPrefix) {
            let url = folder.appendingPathComponent(name)
            // Symbolic links are skipped: they could lead outside the root.
            guard let st = FileStat.of(url.path, followSymlinks: false) else { continue }
            if st.isDirectory {
                walk(url, keyPrefix: keyPrefix + name + "/", visit)
            } else if st.isRegularFile {
                visit(keyPrefix + name, st)
            }
        }
    }

    // MARK: - Reading

    /// Reads an object or a byte range of it.
    public func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data {
        requestCounter.record("GetObject")
        let (url, st) = try statObject(key)
        if let ifMatch, ifMatch != info(key: key, stat: st).etag { throw BucketError.preconditionFailed(key: key) }
        guard let handle = FileHandle(forReadingAtPath: url.path) else { throw BucketError.notFound(key: key) }
        defer { try? handle.close() }
        do {
            guard let range else { return try handle.readToEnd() ?? Data() }
            if range.start >= st.size { return Data() }
            try handle.seek(toOffset: UInt64(range.start))
            let end = min(range.end ?? (st.size - 1), st.size - 1)
            return try handle.read(upToCount: Int(end - range.start + 1)) ?? Data()
        } catch {
            throw BucketError.localIO(path: url.path, description: error.localizedDescription)
        }
    }

    /// Copies an object to `fileURL` through `fileURL.partial`, renamed only when complete.
    @discardableResult
    public func download(key: String, to fileURL: URL) async throws -> ObjectInfo {
        try await download(key: key, to: fileURL, expecting: nil)
    }

    /// Copies an object like ``download(key:to:)``; the copy is installed only when it has the size the object had
    /// both before and after copying (an object replaced during the copy is copied again). The object's current
    /// size is the truth here: a different `listed` size means it was replaced since the listing (its ETag, size and
    /// modification time, changed with it).
    @discardableResult
    public func download(key: String, to fileURL: URL, expecting listed: ObjectInfo?) async throws -> ObjectInfo {
        var attempt = 0
        while true {
            let (info, copied, after) = try copyOnce(key: key, to: fileURL)
            if copied == info.size, let after, self.info(key: key, stat: after) == info {
                try LocalFiles.moveAtomically(URL(fileURLWithPath: fileURL.path + ".partial"), to: fileURL)
                TransferProgress.current?.record(bytes: info.size, key: key, objectSize: info.size, finishedObject: true)
                return info
            }
            try? FileManager.default.removeItem(atPath: fileURL.path + ".partial")
            attempt += 1
            if attempt >= RetryPolicy().maxAttempts { throw BucketError.sizeMismatch(key: key, expected: info.size, received: copied) }
        }
    }

    /// Copies the object to `fileURL.partial`; returns its info before the copy, the bytes copied and its stat after.
    func copyOnce(key: String, to fileURL: URL) throws -> (ObjectInfo, Int64, FileStat?) {
        requestCounter.record("GetObject")
        let (url, st) = try statObject(key)
        let partial = URL(fileURLWithPath: fileURL.path + ".partial")
        try LocalFiles.createParent(of: fileURL)
        try? FileManager.default.removeItem(at: partial)
        TransferProgress.current?.record(bytes: 0, key: key, objectSize: st.size)
        do {
            try FileManager.default.copyItem(at: url, to: partial)
            try LocalFiles.flush(partial)
        } catch {
            try? FileManager.default.removeItem(at: partial)
            throw BucketError.localIO(path: partial.path, description: error.localizedDescription)
        }
        let copied = FileStat.of(partial.path)?.size ?? -1
        return (info(key: key, stat: st), copied, FileStat.of(url.path))
    }

    /// Size, ETag and modification time of an object.
    public func head(key: String) async throws -> ObjectInfo {
        requestCounter.record("HeadObject")
        let (_, st) = try statObject(key)
        return info(key: key, stat: st)
    }

    // MARK: - Writing

    /// Writes `data` atomically; with `ifNoneMatch` fails when the key exists (no overwrite race: uses `link`).
    @discardableResult
    public func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo {
        requestCounter.record("PutObject")
        let url = try SafeKey.fileURL(root: root, key: key)
        if FileStat.of(url.path)?.isDirectory == true {
            throw BucketError.unsafeKey(key: key, reason: "a folder of that name exists")
        }
        let tmp = try LocalFiles.writeTemporary(data, beside: url)
        if ifNoneMatch {
            guard try LocalFiles.linkIfAbsent(tmp, to: url) else { throw BucketError.preconditionFailed(key: key) }
        } else {
            try LocalFiles.moveAtomically(tmp, to: url)
        }
        let (_, st) = try statObject(key)
        return info(key: key, stat: st)
    }

    /// Copies a local file in atomically.
    @discardableResult
    public func put(key: String, fileURL: URL) async throws -> ObjectInfo {
        requestCounter.record("PutObject")
        let url = try SafeKey.fileURL(root: root, key: key)
        try LocalFiles.createParent(of: url)
        let tmp = LocalFiles.temporaryURL(beside: url)
        do {
            try FileManager.default.copyItem(at: fileURL, to: tmp)
            try LocalFiles.flush(tmp)
        } catch {
            try? FileManager.default.removeItem(at: tmp)
            throw BucketError.localIO(path: fileURL.path, description: error.localizedDescription)
        }
        try LocalFiles.moveAtomically(tmp, to: url)
        let (_, st) = try statObject(key)
        TransferProgress.current?.record(bytes: st.size, key: key, objectSize: st.size, finishedObject: true)
        return info(key: key, stat: st)
    }

    /// Stores an object whose bytes `write` puts into the temporary file it is given (beside the object), flushed and
    /// renamed into place when `write` returns: what a wrapping store uses to write its bytes (ciphertext) straight
    /// into the folder instead of into a file that is then copied.
    /// - Throws: what `write` throws (nothing is stored then), or ``BucketError`` for the folder.
    @discardableResult
    public func put(key: String, writing write: (URL) throws -> Void) throws -> ObjectInfo {
        requestCounter.record("PutObject")
        let url = try SafeKey.fileURL(root: root, key: key)
        if FileStat.of(url.path)?.isDirectory == true {
            throw BucketError.unsafeKey(key: key, reason: "a folder of that name exists")
        }
        try LocalFiles.createParent(of: url)
        let tmp = LocalFiles.temporaryURL(beside: url)
        do {
            try write(tmp)
            try LocalFiles.flush(tmp)
        } catch {
            try? FileManager.default.removeItem(at: tmp)
            throw error
        }
        try LocalFiles.moveAtomically(tmp, to: url)
        let (_, st) = try statObject(key)
        TransferProgress.current?.record(bytes: st.size, key: key, objectSize: st.size, finishedObject: true)
        return info(key: key, stat: st)
    }

    /// Removes hidden temp files (`.rtsync-tmp-*`) that interrupted writes left in the folders `prefixes` name (not
    /// below them): at once when the name says this machine wrote it from a process that is gone, else once
    /// unchanged for `age` seconds (a write in progress keeps its file's time current, and the folder may be shared
    /// with other machines, whose process ids mean nothing here). Returns the paths removed.
    @discardableResult
    public func removeStaleTemporaryFiles(prefixes: [String], olderThan age: TimeInterval) -> [String] {
        var removed: [String] = []
        for prefix in prefixes {
            let folderPart = prefix.range(of: "/", options: .backwards).map { String(prefix[..<$0.lowerBound]) } ?? ""
            var folder = root
            if !folderPart.isEmpty {
                guard let segs = try? SafeKey.segments(of: folderPart) else { continue }
                for s in segs { folder.appendPathComponent(s, isDirectory: true) }
            }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [] where name.hasPrefix(Self.temporaryPrefix) {
                let url = folder.appendingPathComponent(name)
                guard let st = FileStat.of(url.path, followSymlinks: false), st.isRegularFile,
                      TemporaryOwner.isOrphan(name, prefix: Self.temporaryPrefix) || Date().timeIntervalSince(st.modificationDate) >= age else { continue }
                if unlink(url.path) == 0 { removed.append(url.path) }
            }
        }
        return removed
    }

    /// The same for the folder `prefix` names and every folder below it (media folders have subfolders).
    @discardableResult
    public func removeStaleTemporaryFiles(under prefix: String, olderThan age: TimeInterval) -> [String] {
        var folders = [prefix.hasSuffix("/") ? prefix : prefix + "/"]
        var removed: [String] = []
        while let next = folders.popLast() {
            removed += removeStaleTemporaryFiles(prefixes: [next], olderThan: age)
            guard let segs = try? SafeKey.segments(of: String(next.dropLast())) else { continue }
            let folder = segs.reduce(root) { $0.appendingPathComponent($1, isDirectory: true) }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [] where !name.hasPrefix(".") {
                if FileStat.of(folder.appendingPathComponent(name).path, followSymlinks: false)?.isDirectory == true { folders.append(next + name + "/") }
            }
        }
        return removed
    }

    /// Removes an object and any folders it leaves empty; a missing key is not an error.
    public func delete(key: String) async throws {
        requestCounter.record("DeleteObject")
        let url = try SafeKey.fileURL(root: root, key: key)
        if unlink(url.path) != 0 && errno != ENOENT {
            throw BucketError.localIO(path: url.path, description: LocalFiles.errnoText())
        }
        var folder = url.deletingLastPathComponent().standardizedFileURL
        while folder.path.count > root.path.count, rmdir(folder.path) == 0 {
            folder = folder.deletingLastPathComponent().standardizedFileURL
        }
    }
}
