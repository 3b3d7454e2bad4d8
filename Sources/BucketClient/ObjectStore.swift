import Foundation

/// A small storage-only interface to a bucket: list, get (optionally ranged), head, put, delete.
///
/// Keys are relative to the store's root (the `prefix` of `s3://bucket/prefix`, or the folder of
/// `file:///path`). Both backends report a missing object as ``BucketError/notFound(key:)``.
public protocol ObjectStore: Sendable {
    /// A short human description of where the store points, without secrets (e.g. `s3://bucket/prefix`).
    var displayName: String { get }

    /// Counts the requests (or filesystem operations) this store has issued, by operation name.
    var requestCounter: RequestCounter { get }

    /// Lists one page of objects whose keys start with `prefix`, in key order.
    /// - Throws: ``BucketError`` on failure.
    func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage

    /// Every object in the given folders (key prefixes ending in `/`), in key order; the default lists them in as few
    /// pages as it can (``listFolders(_:)`` in FolderListing.swift), a wrapping store may map what it returns.
    func listFolders(_ folders: [String]) async throws -> [ObjectInfo]

    /// Returns the bytes of an object, or of `range` of it; fails with `.preconditionFailed` when `ifMatch` does not match.
    func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data

    /// Downloads an object into `fileURL` through a `.partial` file that is renamed when complete.
    ///
    /// An interrupted download resumes from the partial file when the object is unchanged.
    /// A failed or truncated download never replaces an existing `fileURL`.
    @discardableResult
    func download(key: String, to fileURL: URL) async throws -> ObjectInfo

    /// Downloads like ``download(key:to:)`` an object whose size (and ETag) a listing or HEAD gave as `listed`:
    /// a download of another size is retried and then fails with ``BucketError/sizeMismatch(key:expected:received:)``
    /// unless the object was replaced since (its ETag changed and the server confirms the new size); nothing is
    /// installed at `fileURL` when it fails.
    @discardableResult
    func download(key: String, to fileURL: URL, expecting listed: ObjectInfo?) async throws -> ObjectInfo

    /// Downloads like ``download(key:to:expecting:)`` and returns the SHA-256 (lowercase hex) of the installed bytes.
    ///
    /// With `flushing` false a store may install the file before its bytes reach stable storage (S3 does; the
    /// default always flushes): the caller must then make it durable (fsync, or one `syncfs` for many files)
    /// before it records the file anywhere a crash leaves behind.
    func downloadReturningSHA256(key: String, to fileURL: URL, expecting listed: ObjectInfo?,
                                 flushing: Bool) async throws -> (info: ObjectInfo, sha256: String)

    /// Returns size, ETag and modification date of an object.
    func head(key: String) async throws -> ObjectInfo

    /// Stores `data` under `key`; with `ifNoneMatch` the put fails with `.preconditionFailed` when the key exists.
    @discardableResult
    func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo

    /// Stores the contents of a local file under `key` (multipart and resumable for large files on S3).
    @discardableResult
    func put(key: String, fileURL: URL) async throws -> ObjectInfo

    /// Stores a local file like ``put(key:fileURL:)`` and returns the SHA-256 (lowercase hex) of the bytes stored.
    ///
    /// S3 hashes each byte once for both the request signature and this result; the default reads the file
    /// twice (hash, then put).
    func putReturningSHA256(key: String, fileURL: URL) async throws -> (info: ObjectInfo, sha256: String)

    /// Deletes an object; deleting a missing key succeeds (as on S3).
    func delete(key: String) async throws

    /// Copies `source` to `target` inside the bucket without moving the bytes through this machine, when the
    /// backend can; nil when it cannot (callers then download and put).
    /// - Throws: ``BucketError/notFound(key:)`` when `source` does not exist; other ``BucketError``s on failure.
    func serverSideCopy(from source: String, to target: String) async throws -> ObjectInfo?

    /// The object an upload of `fileURL` to `key` completed before the process stopped, when the upload's resume
    /// file is still there and the object holds exactly that file (the resume file is then removed); else nil.
    func finishedUpload(key: String, fileURL: URL) async throws -> ObjectInfo?
}

extension ObjectStore {
    /// Downloads beside `fileURL` with ``download(key:to:)``, then installs the file only when its size is the one
    /// `listed` gives or, the object having been replaced since it was listed (another ETag), the one a HEAD gives
    /// now; retried like the stores' own checks, then ``BucketError/sizeMismatch(key:expected:received:)``.
    @discardableResult
    public func download(key: String, to fileURL: URL, expecting listed: ObjectInfo?) async throws -> ObjectInfo {
        guard var expected = listed else { return try await download(key: key, to: fileURL) }
        let staging = URL(fileURLWithPath: fileURL.path + ".rtsync-check")
        defer { try? FileManager.default.removeItem(at: staging) }
        var attempt = 0
        while true {
            let info = try await download(key: key, to: staging)
            let size = FileStat.of(staging.path)?.size ?? -1
            if size == expected.size {
                try LocalFiles.moveAtomically(staging, to: fileURL)
                return info
            }
            attempt += 1
            if attempt >= RetryPolicy().maxAttempts { throw BucketError.sizeMismatch(key: key, expected: expected.size, received: size) }
            if expected.etag.isEmpty || (!info.etag.isEmpty && info.etag != expected.etag) {
                expected = try await head(key: key)
            }
        }
    }

    /// Downloads with ``download(key:to:expecting:)`` (flushed either way), then hashes the installed file.
    public func downloadReturningSHA256(key: String, to fileURL: URL, expecting listed: ObjectInfo?,
                                        flushing: Bool) async throws -> (info: ObjectInfo, sha256: String) {
        let info = try await download(key: key, to: fileURL, expecting: listed)
        return (info, try LocalFiles.sha256Hex(of: fileURL))
    }

    /// Nil: the store cannot copy inside the bucket.
    public func serverSideCopy(from source: String, to target: String) async throws -> ObjectInfo? { nil }

    /// Nil: stores whose uploads leave no resume file have nothing to finish.
    public func finishedUpload(key: String, fileURL: URL) async throws -> ObjectInfo? { nil }

    /// Hashes the file, then stores it with ``put(key:fileURL:)``.
    public func putReturningSHA256(key: String, fileURL: URL) async throws -> (info: ObjectInfo, sha256: String) {
        let sha256 = try LocalFiles.sha256Hex(of: fileURL)
        return (try await put(key: key, fileURL: fileURL), sha256)
    }

    /// Lists every object under `prefix`, following continuation tokens page by page.
    public func listAll(prefix: String, startAfter: String? = nil) async throws -> [ObjectInfo] {
        var result: [ObjectInfo] = []
        var token: String? = nil
        repeat {
            let page = try await list(prefix: prefix, startAfter: token == nil ? startAfter : nil, maxKeys: nil, continuationToken: token)
            result.append(contentsOf: page.objects)
            token = page.nextContinuationToken
        } while token != nil
        return result
    }

    /// Returns the whole object.
    public func get(key: String) async throws -> Data {
        try await get(key: key, range: nil, ifMatch: nil)
    }

    /// Returns the whole object, checked against the size `listed` gives (from a listing or HEAD): a body of
    /// another size is fetched again (with the size a new HEAD gives when the object was replaced, its ETag
    /// changed), then fails with ``BucketError/sizeMismatch(key:expected:received:)``.
    public func get(key: String, expecting listed: ObjectInfo) async throws -> Data {
        var expected = listed
        var attempt = 0
        while true {
            let data = try await get(key: key)
            if Int64(data.count) == expected.size { return data }
            attempt += 1
            if attempt >= RetryPolicy().maxAttempts {
                throw BucketError.sizeMismatch(key: key, expected: expected.size, received: Int64(data.count))
            }
            let now = try await head(key: key)
            if expected.etag.isEmpty || now.etag != expected.etag { expected = now }
        }
    }

    /// Stores `data` under `key`, replacing any existing object.
    @discardableResult
    public func put(key: String, data: Data) async throws -> ObjectInfo {
        try await put(key: key, data: data, ifNoneMatch: false)
    }

    /// Returns whether an object exists under `key`.
    public func exists(key: String) async throws -> Bool {
        do {
            _ = try await head(key: key)
            return true
        } catch BucketError.notFound {
            return false
        }
    }
}
