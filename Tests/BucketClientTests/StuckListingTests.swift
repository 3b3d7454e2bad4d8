import Foundation
import Testing
@testable import BucketClient

/// A server that ignores `start-after` and keeps handing out the same page (a fault no real store here
/// produces on demand, hence a fake): `listFolders` must fail with a clear error, not loop forever.
@Suite struct StuckListingTests {
    struct StuckStore: ObjectStore {
        let displayName = "stuck"
        let requestCounter = RequestCounter()
        func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
            requestCounter.record("ListObjectsV2")
            return ObjectPage(objects: [ObjectInfo(key: "u/inbound/a.sqlite", size: 1, etag: "e", lastModified: nil)],
                              nextContinuationToken: "again")
        }
        func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data { throw BucketError.notFound(key: key) }
        func download(key: String, to fileURL: URL) async throws -> ObjectInfo { throw BucketError.notFound(key: key) }
        func head(key: String) async throws -> ObjectInfo { throw BucketError.notFound(key: key) }
        func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo { throw BucketError.notFound(key: key) }
        func put(key: String, fileURL: URL) async throws -> ObjectInfo { throw BucketError.notFound(key: key) }
        func delete(key: String) async throws {}
    }

    @Test func listFolders_serverNotAdvancing_failsWithInvalidResponse() async throws {
        let store = StuckStore()
        await #expect(throws: BucketError.self) { _ = try await store.listFolders(["u/images/", "u/recordings/"]) }
        #expect(store.requestCounter.count("ListObjectsV2") == 2)
    }
}
