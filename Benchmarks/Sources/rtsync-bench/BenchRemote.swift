import BucketClient
import Foundation
import SyncEngine

/// SyncEngine's RemoteStore over a BucketClient store. The root package's adapter (BucketSync.ObjectStoreRemote)
/// is not a library product, so this mirrors it line for line: conditional single put for diffs, file put
/// otherwise, listAll for listings.
struct BenchRemote: RemoteStore {
    let store: any ObjectStore
    let isLocal: Bool

    var requestsMade: Int { store.requestCounter.total }

    func list(prefix: String) async throws -> [RemoteObject] {
        try await mapped(prefix) { try await store.listAll(prefix: prefix).map { RemoteObject(key: $0.key, size: $0.size, etag: $0.etag) } }
    }

    func download(key: String, to file: URL) async throws {
        try await mapped(key) { _ = try await store.download(key: key, to: file) }
    }

    func upload(file: URL, key: String, ifAbsent: Bool) async throws {
        try await mapped(key) {
            if ifAbsent {
                _ = try await store.put(key: key, data: try Data(contentsOf: file), ifNoneMatch: true)
            } else {
                _ = try await store.put(key: key, fileURL: file)
            }
        }
    }

    func delete(key: String) async throws {
        try await mapped(key) { try await store.delete(key: key) }
    }

    private func mapped<T>(_ key: String, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let e as BucketError {
            switch e {
            case .notFound: throw RemoteStoreError.notFound(key: key)
            case .preconditionFailed: throw RemoteStoreError.alreadyExists(key: key)
            default: throw RemoteStoreError.failed(key: key, reason: e.description)
            }
        }
    }
}
