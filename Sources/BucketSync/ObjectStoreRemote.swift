import BucketClient
import DiffFormat
import Foundation
import SyncEngine

/// Lets SyncEngine use a BucketClient store (S3 or local folder) as its `RemoteStore`.
public struct ObjectStoreRemote: RemoteStore {
    /// The wrapped store.
    public let store: any ObjectStore
    /// Whether the bucket URL was a local folder.
    public let isLocal: Bool

    /// Wraps a store.
    public init(store: any ObjectStore, isLocal: Bool) {
        self.store = store
        self.isLocal = isLocal
    }

    /// Opens the store a bucket URL names (`s3://bucket/prefix`, `file:///path`, or an absolute path).
    /// - Throws: `BucketError.unsupportedURL` for anything else.
    public static func open(_ url: String) throws -> ObjectStoreRemote {
        let store = try makeObjectStore(urlString: url)
        return ObjectStoreRemote(store: store, isLocal: store is LocalFolderStore)
    }

    public var requestsMade: Int { store.requestCounter.total }

    public func list(prefix: String) async throws -> [RemoteObject] {
        try await mapped(prefix) { try await store.listAll(prefix: prefix).map { RemoteObject(key: $0.key, size: $0.size, etag: $0.etag) } }
    }

    public func download(key: String, to file: URL) async throws {
        try await mapped(key) {
            do { _ = try await store.download(key: key, to: file) } catch {
                if try await !acceptPlainShare(key: key, to: file, after: error) { throw error }
            }
            try refuseUnexpectedCiphertext(key: key, at: file)
        }
    }

    /// Downloads a listed object with its listed size and ETag as what the store must deliver (see
    /// `ObjectStore.download(key:to:expecting:)`).
    public func download(_ object: RemoteObject, to file: URL) async throws {
        let listed = ObjectInfo(key: object.key, size: object.size, etag: object.etag ?? "", lastModified: nil)
        try await mapped(object.key) {
            do { _ = try await store.download(key: object.key, to: file, expecting: listed) } catch {
                if try await !acceptPlainShare(key: object.key, to: file, after: error) { throw error }
            }
            try refuseUnexpectedCiphertext(key: object.key, at: file)
        }
    }

    /// Reads a listed object into memory when the store does not encrypt on the client (an `EncryptingStore` has
    /// its own download path for plain shares and key checks: nil, files only) and it is no larger than `limit`.
    /// Fails like ``download(_:to:)`` when the bytes are not the listed size or are client-side ciphertext.
    public func contents(of object: RemoteObject, limit: Int64) async throws -> Data? {
        guard !(store is EncryptingStore), object.size <= limit else { return nil }
        return try await mapped(object.key) {
            // A local folder's object is read at most one byte past the listed size (a file grown since the listing
            // fails the size check without being read whole); S3 answers the whole object with its checksum.
            let data = try await store.get(key: object.key, range: isLocal ? ByteRange(start: 0, end: object.size) : nil, ifMatch: nil)
            guard Int64(data.count) == object.size else {
                throw RemoteStoreError.failed(key: object.key, reason: "download has the wrong size: got \(data.count) bytes, the bucket lists \(object.size); nothing was installed")
            }
            // As `refuseUnexpectedCiphertext`: an encrypted object where this store encrypts nothing.
            if data.starts(with: EncryptionFormat.magic) { throw EncryptionError.encryptionOff(object: object.key) }
            return data
        }
    }

    public func upload(file: URL, key: String, ifAbsent: Bool) async throws {
        try await mapped(key) {
            if ifAbsent {
                // Diffs are small: a conditional single put makes a retried upload harmless. They travel
                // compressed (DiffTransport), before any encryption the store adds.
                var data = try Data(contentsOf: file)
                if Self.travelsCompressed(key), data.starts(with: Self.sqliteHeader) { data = try DiffTransport.compress(data, name: key) }
                _ = try await store.put(key: key, data: data, ifNoneMatch: true)
            } else {
                _ = try await store.put(key: key, fileURL: file)
            }
        }
    }

    /// The bucket as it is, without client-side encryption (published keys, parcels, key backups and temp files live
    /// there as they are).
    var rawStore: any ObjectStore { (store as? EncryptingStore)?.inner ?? store }

    public func removeStaleTemporaryFiles(prefixes: [String], olderThan age: TimeInterval) async -> [String] {
        (rawStore as? LocalFolderStore)?.removeStaleTemporaryFiles(prefixes: prefixes, olderThan: age) ?? []
    }

    public func delete(key: String) async throws {
        try await mapped(key) { try await store.delete(key: key) }
    }

    /// Whether objects at `key` are diffs, which are uploaded compressed: `<user>/inbound/<name>.sqlite`. Downloads
    /// deliver the object as it is; `Syncer` expands it (`DiffTransport.install`).
    public static func travelsCompressed(_ key: String) -> Bool {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 3 && parts[1] == "inbound" && !parts[0].isEmpty && parts[2].hasSuffix(".sqlite")
    }

    /// The first 16 bytes of every SQLite database file.
    static let sqliteHeader = Data("SQLite format 3\0".utf8)

    /// Maps BucketClient's errors to the cases SyncEngine acts on.
    private func mapped<T>(_ key: String, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let e as BucketError {
            switch e {
            case .notFound: throw RemoteStoreError.notFound(key: key)
            case .preconditionFailed: throw RemoteStoreError.alreadyExists(key: key)
            case .bucketNotFound(let bucket): throw RemoteStoreError.bucketNotFound(bucket: bucket)
            default: throw RemoteStoreError.failed(key: key, reason: e.description)
            }
        }
    }
}
