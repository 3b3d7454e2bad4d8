import Foundation
@testable import BucketClient

/// A test store that passes every call to `base`; a conforming store replaces only the calls it watches or breaks.
protocol ForwardingStore: ObjectStore {
    var base: any ObjectStore { get }
}

extension ForwardingStore {
    var displayName: String { base.displayName }
    var requestCounter: RequestCounter { base.requestCounter }
    func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        try await base.list(prefix: prefix, startAfter: startAfter, maxKeys: maxKeys, continuationToken: continuationToken)
    }
    func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data { try await base.get(key: key, range: range, ifMatch: ifMatch) }
    func download(key: String, to fileURL: URL) async throws -> ObjectInfo { try await base.download(key: key, to: fileURL) }
    func head(key: String) async throws -> ObjectInfo { try await base.head(key: key) }
    func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo { try await base.put(key: key, data: data, ifNoneMatch: ifNoneMatch) }
    func put(key: String, fileURL: URL) async throws -> ObjectInfo { try await base.put(key: key, fileURL: fileURL) }
    func delete(key: String) async throws { try await base.delete(key: key) }
}
