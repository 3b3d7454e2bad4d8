import Foundation
import Testing
@testable import BucketClient

/// Passes every call to `base`, but lists at most `pageSize` keys per LIST, so a few objects span several pages.
struct SmallPageStore: ForwardingStore {
    let base: any ObjectStore
    let pageSize: Int
    func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        try await base.list(prefix: prefix, startAfter: startAfter, maxKeys: pageSize, continuationToken: continuationToken)
    }
}

/// Listing several media folders at once: as few LIST pages as possible, and only keys of the wanted folders.
///
/// S3 runs on the moto server without signature checks: these listings send `prefix` and `start-after`
/// values containing `/`, which moto's checker mishandles (see ``MotoServer/store(prefix:tweak:)``).
@Suite struct FolderListingTests {
    enum ListingBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case local, s3
        var testDescription: String { rawValue }
        func makeStore() async throws -> (any ObjectStore)? {
            switch self {
            case .local: return try LocalFolderStore(root: makeTemporaryFolder().appendingPathComponent("bucket"))
            case .s3: return MotoServer.skipRequested ? nil : try await MotoServer.anonymous.value.store()
            }
        }
    }

    @Test func folderSet_sortsDropsNestedFoldersAndFindsTheParent() {
        let set = FolderSet(["alice/recordings/", "alice/images", "alice/images/2024/", "alice/recordings/"])
        #expect(set.folders == ["alice/images/", "alice/recordings/"])
        #expect(set.parent == "alice/")
        #expect(FolderSet(["a/b/c/", "a/b/d/"]).parent == "a/b/")
        #expect(FolderSet(["a/x/", "b/x/"]).parent == "")
        #expect(FolderSet(["alice/images/"]).parent == "alice/images/")
        #expect(FolderSet.key("alice/images/\u{301}x.jpg", isIn: "alice/images/"))  // a combining mark after "/"
        #expect(!FolderSet.key("alice/images-old/x", isIn: "alice/images/"))
    }

    @Test(arguments: ListingBackend.allCases)
    func twoFoldersWithNothingBetween_costOneList(_ backend: ListingBackend) async throws {
        guard let store = try await backend.makeStore() else { return }
        for key in ["alice/backups/b.sqlite", "alice/images/i1.jpg", "alice/images/sub/i2.jpg", "alice/recordings/r1.m4a",
                    "alice/zz/after", "bob/images/other.jpg"] {
            try await store.put(key: key, data: Data(key.utf8))
        }
        store.requestCounter.reset()
        let keys = try await store.listFolders(["alice/recordings/", "alice/images/"]).map(\.key)
        #expect(keys == ["alice/images/i1.jpg", "alice/images/sub/i2.jpg", "alice/recordings/r1.m4a"])
        #expect(store.requestCounter.snapshot == ["ListObjectsV2": 1])
        store.requestCounter.reset()
        #expect(try await store.listFolders([]).isEmpty)
        #expect(store.requestCounter.total == 0)
    }

    @Test(arguments: ListingBackend.allCases)
    func pagesThroughWantedFolders_andJumpsOverTheFolderBetween(_ backend: ListingBackend) async throws {
        guard let base = try await backend.makeStore() else { return }
        let images = (1...5).map { "alice/images/i\($0).jpg" }
        let inbound = (1...7).map { "alice/inbound/d\($0).sqlite" }
        let recordings = (1...4).map { "alice/recordings/r\($0).m4a" }
        let others = ["alice/backups/b.sqlite", "alice/images-old/x.jpg", "alice/images.txt", "alice/zz/after", "bob/images/q.jpg"]
        for key in images + inbound + recordings + others { try await base.put(key: key, data: Data(key.utf8)) }
        let store = SmallPageStore(base: base, pageSize: 3)
        store.requestCounter.reset()
        let listed = try await store.listFolders(["alice/images/", "alice/recordings/"])
        #expect(listed.map(\.key) == images + recordings)
        #expect(listed.first?.size == Int64(images[0].utf8.count))
        // Pages of 3 from just before images/: [images-old/x, images.txt, i1], [i2, i3, i4], [i5, d1, d2] ends in
        // inbound/, so the next LIST starts just before recordings/: [r1, r2, r3], [r4, zz/after] (last page).
        // Paging through inbound/ instead would have cost 3 more LISTs.
        #expect(store.requestCounter.snapshot == ["ListObjectsV2": 5])
    }

    @Test(arguments: ListingBackend.allCases)
    func stopsAtTheLastWantedFolder_withoutPagingThroughLaterFolders(_ backend: ListingBackend) async throws {
        guard let base = try await backend.makeStore() else { return }
        let images = ["alice/images/a.jpg", "alice/images/b.jpg"]
        let keys = ["alice/backups/1", "alice/backups/2"] + images + (1...9).map { "alice/inbound/\($0)" }
        for key in keys { try await base.put(key: key, data: Data("x".utf8)) }
        let store = SmallPageStore(base: base, pageSize: 2)
        store.requestCounter.reset()
        let listed = try await store.listFolders(["alice/images/", "alice/recordings/"])
        #expect(listed.map(\.key) == images)
        // recordings/ is empty: [a, b] (truncated, inside images/), then [inbound/1, inbound/2] ends in a gap, so
        // the next LIST starts just before recordings/ and finds nothing: 3 LISTs, not the 7 of paging through inbound/.
        #expect(store.requestCounter.snapshot == ["ListObjectsV2": 3])
    }
}
