import Foundation

/// One object in a remote store listing.
public struct RemoteObject: Sendable, Hashable {
    /// Full key.
    public var key: String
    /// Size in bytes.
    public var size: Int64
    /// Entity tag, if the store has one.
    public var etag: String?

    /// Makes a listing entry.
    public init(key: String, size: Int64, etag: String? = nil) {
        self.key = key
        self.size = size
        self.etag = etag
    }
}

/// Failures a remote store reports in terms SyncEngine acts on.
public enum RemoteStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The key does not exist.
    case notFound(key: String)
    /// A conditional put found the key already there (so a retried upload is not duplicated).
    case alreadyExists(key: String)
    /// The bucket itself does not exist (a wrong name or URL, or one not created yet); retrying cannot help.
    case bucketNotFound(bucket: String)
    /// Anything else (network, permissions), with the store's own text.
    case failed(key: String, reason: String)

    /// What the user can do about `error`, when it is a remote failure with a clear remedy.
    public static func hint(for error: Error) -> String? {
        switch error as? RemoteStoreError {
        case .bucketNotFound: return "create the bucket, or fix the bucket URL (the settings' bucket)"
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .bucketNotFound(let b): return "bucket not found (\(b))"
        case .notFound(let k): return "no such object (\(k))"
        case .alreadyExists(let k): return "object already exists (\(k))"
        // The store's own text often names the key already.
        case .failed(let k, let r): return r.contains(k) ? r : "\(r) (\(k))"
        }
    }
}

/// The storage SyncEngine needs from a bucket: list, download, upload, delete. BucketClient's stores are
/// adapted to it by the caller, so SyncEngine does not depend on a particular backend.
public protocol RemoteStore: Sendable {
    /// Every object whose key starts with `prefix`, in key order.
    func list(prefix: String) async throws -> [RemoteObject]
    /// Downloads an object into a local file (replacing it only when the download completed).
    func download(key: String, to file: URL) async throws
    /// Downloads a listed object into a local file, installing it only when it has the size the listing gave.
    func download(_ object: RemoteObject, to file: URL) async throws
    /// The bytes of a listed object of at most `limit` bytes, read into memory with the size the listing gave (no
    /// staging file: a catch-up's hundreds of small diffs); nil when this store delivers objects only through
    /// ``download(_:to:)`` (the default).
    func contents(of object: RemoteObject, limit: Int64) async throws -> Data?
    /// Uploads a local file; with `ifAbsent`, fails with `RemoteStoreError.alreadyExists` when the key exists.
    func upload(file: URL, key: String, ifAbsent: Bool) async throws
    /// Deletes an object (no error when it is already gone).
    func delete(key: String) async throws
    /// Whether the store is a local folder (local storage counts as local in every tier).
    var isLocal: Bool { get }
    /// Requests issued so far (for reports; idle sync must cost one LIST).
    var requestsMade: Int { get }
    /// Removes temp files that interrupted writes left in the folders `prefixes` name, once unchanged for `age`
    /// seconds; returns what it removed. Only a local-folder store has any (an S3 put is all or nothing).
    func removeStaleTemporaryFiles(prefixes: [String], olderThan age: TimeInterval) async -> [String]
    /// Gives up the uploads of files in `folder` (to `keyPrefix` + file name) that a stopped run left open on the
    /// server, named by their resume files there; returns what it aborted or removed. Call it only for files
    /// whose keys no other writer uses (backups), holding the home's lock. Only an S3 store has any.
    func abandonInterruptedUploads(in folder: URL, keyPrefix: String) async -> [String]
    /// Key prefixes whose objects this store encrypts client-side (none by default); sync refuses a store that does
    /// not encrypt what the home's settings ask for.
    var encryptedPrefixes: [String] { get }
}

extension RemoteStore {
    /// No client-side encryption.
    public var encryptedPrefixes: [String] { [] }
    /// Objects only through files.
    public func contents(of object: RemoteObject, limit: Int64) async throws -> Data? { nil }
}

extension RemoteStore {
    /// Downloads beside `file` with ``download(key:to:)`` and installs the result only when its size is the one
    /// the listing gave; otherwise fails with ``RemoteStoreError/failed(key:reason:)`` (retried by callers).
    public func download(_ object: RemoteObject, to file: URL) async throws {
        let staging = URL(fileURLWithPath: file.path + ".rtsync-check")
        defer { try? FileManager.default.removeItem(at: staging) }
        try await download(key: object.key, to: staging)
        let size = ((try? FileManager.default.attributesOfItem(atPath: staging.path))?[.size] as? NSNumber)?.int64Value ?? -1
        guard size == object.size else {
            throw RemoteStoreError.failed(key: object.key, reason: "download has the wrong size: got \(size) bytes, the bucket lists \(object.size); nothing was installed")
        }
        try? FileManager.default.removeItem(at: file)
        try FileManager.default.moveItem(at: staging, to: file)
    }

    /// Nothing to remove (stores without temp files of their own).
    public func removeStaleTemporaryFiles(prefixes: [String], olderThan age: TimeInterval) async -> [String] { [] }
    /// Nothing to abort (stores without multipart uploads).
    public func abandonInterruptedUploads(in folder: URL, keyPrefix: String) async -> [String] { [] }
}

/// Retries of whole remote steps (a listing, an upload, a download) with exponential backoff, full jitter and a
/// bound on total time. Each request inside a step has its own HTTP-level retries (`BucketClient.RetryPolicy`).
public struct RemoteRetryPolicy: Sendable {
    /// Attempts at most.
    public var maxAttempts: Int
    /// First delay.
    public var baseDelay: Duration
    /// Largest single delay.
    public var maxDelay: Duration
    /// Give up once this much time has passed.
    public var totalTimeout: Duration

    /// Makes a policy.
    public init(maxAttempts: Int = 4, baseDelay: Duration = .milliseconds(200), maxDelay: Duration = .seconds(2), totalTimeout: Duration = .seconds(10)) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.totalTimeout = totalTimeout
    }

    /// Runs `body`, retrying failures other than `notFound` until attempts or time run out.
    public func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let clock = ContinuousClock()
        let start = clock.now
        var attempt = 0
        while true {
            attempt += 1
            do { return try await body() } catch {
                // Definite answers are not retried: the object is missing, or a conditional put found it there.
                if case RemoteStoreError.notFound = error { throw error }
                if case RemoteStoreError.alreadyExists = error { throw error }
                if case RemoteStoreError.bucketNotFound = error { throw error }
                let elapsed = clock.now - start
                if attempt >= maxAttempts || elapsed >= totalTimeout { throw error }
                let cap = min(maxDelay, baseDelay * (1 << min(attempt - 1, 16)))
                let jitter = Double.random(in: 0...1)
                let delay = min(cap * jitter, totalTimeout - elapsed)
                try await Task.sleep(for: delay)
            }
        }
    }
}

extension RemoteStore {
    /// Downloads the newest `*.sqlite` under `prefix` (keys are KSUID-named, so the largest key is the newest)
    /// into `file`, retrying network steps. Returns the object, or nil when there is none.
    public func downloadNewestDatabase(prefix: String, to file: URL, retry: RemoteRetryPolicy) async throws -> RemoteObject? {
        let objects = try await retry.run { try await list(prefix: prefix) }.filter { $0.key.hasSuffix(".sqlite") }
        guard let newest = objects.max(by: { $0.key < $1.key }) else { return nil }
        try await retry.run { try await download(newest, to: file) }
        return newest
    }
}
