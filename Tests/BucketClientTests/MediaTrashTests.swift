import Foundation
import Testing
@testable import BucketClient

/// Issue #16: deletions travel between devices through a trash in the bucket, so a mistaken delete is recoverable.
@Suite struct MediaTrashTests {
    let base = MediaSyncTests()

    func remove(_ f: MediaSyncTests.Fixture, _ path: String) throws {
        try FileManager.default.removeItem(at: f.documents.appendingPathComponent(path))
    }

    @Test func deleteOnOneDevice_movesTheObjectToTrash_otherDeviceDeletesItsUnchangedCopy_restoreBringsItBack() async throws {
        let a = try base.makeFixture()
        let b = base.otherDevice(of: a)
        try a.write("images/receipt.jpg", "bytes of the receipt")
        _ = try await a.sync { $0.delete = true }
        _ = try await b.sync { $0.delete = true }
        #expect(b.read("images/receipt.jpg") == "bytes of the receipt")

        try remove(a, "images/receipt.jpg")
        let deleted = try await a.sync { $0.delete = true }
        #expect(deleted.deletedRemote == ["images/receipt.jpg"])
        #expect(try await a.store.exists(key: "alice/images/receipt.jpg") == false)
        let trash = MediaTrash(store: a.store, user: "alice", scratch: a.root)
        let items = try await trash.list()
        #expect(items.map(\.path) == ["images/receipt.jpg"])
        #expect(items.first?.key.hasPrefix("alice/trash/") == true)
        #expect(try await a.store.get(key: items[0].key) == Data("bytes of the receipt".utf8))

        let propagated = try await b.sync { $0.delete = true }
        #expect(propagated.deletedLocal == ["images/receipt.jpg"])
        #expect(b.read("images/receipt.jpg") == nil)
        // Deleted everywhere, nothing comes back on the next runs.
        let idle = try await a.sync { $0.delete = true }
        #expect(idle.downloaded.isEmpty && idle.uploaded.isEmpty)

        let restored = try await trash.restore(path: "images/receipt.jpg")
        #expect(restored.path == "images/receipt.jpg")
        #expect(try await trash.list().isEmpty)
        let back = try await b.sync { $0.delete = true }
        #expect(back.downloaded == ["images/receipt.jpg"])
        #expect(b.read("images/receipt.jpg") == "bytes of the receipt")
    }

    @Test func deletedOnOneDevice_butEditedOnTheOther_isKeptAndUploadedAgain_theEditWins() async throws {
        let a = try base.makeFixture()
        let b = base.otherDevice(of: a)
        try a.write("recordings/take.m4a", "v1")
        _ = try await a.sync { $0.delete = true }
        _ = try await b.sync { $0.delete = true }
        try remove(a, "recordings/take.m4a")
        _ = try await a.sync { $0.delete = true }
        try await Task.sleep(nanoseconds: 10_000_000)
        try b.write("recordings/take.m4a", "v2 edited on b")

        let report = try await b.sync { $0.delete = true }
        #expect(report.deletedLocal.isEmpty)
        #expect(report.keptOverDelete == ["recordings/take.m4a"])
        #expect(report.uploaded == ["recordings/take.m4a"])
        #expect(b.read("recordings/take.m4a") == "v2 edited on b")
        let again = try await a.sync { $0.delete = true }
        #expect(again.downloaded == ["recordings/take.m4a"])
        #expect(a.read("recordings/take.m4a") == "v2 edited on b")
    }

    @Test func deletionThroughTheTrash_reachesADeviceWithDeletionsOff_butAnObjectRemovedOtherwiseIsUploadedAgain() async throws {
        let a = try base.makeFixture()
        let b = base.otherDevice(of: a)
        try a.write("images/trashed.jpg", "t")
        try a.write("images/removed.jpg", "r")
        _ = try await a.sync()
        _ = try await b.sync()
        try await Task.sleep(nanoseconds: 1_100_000_000)  // the trash stamp has whole seconds
        try remove(a, "images/trashed.jpg")
        _ = try await a.sync { $0.delete = true }
        try await a.store.delete(key: "alice/images/removed.jpg")  // not through the trash (`bucket rm`, another tool)

        let report = try await b.sync()  // deletions off on this device
        #expect(report.deletedLocal == ["images/trashed.jpg"])
        #expect(report.uploaded == ["images/removed.jpg"])
        #expect(b.read("images/trashed.jpg") == nil)
        #expect(try await b.store.exists(key: "alice/images/trashed.jpg") == false)

        // A trash entry older than this device's copy (deleted once, then made again) does not delete it.
        try b.write("images/trashed.jpg", "made again")
        _ = try await b.sync()
        try await b.store.delete(key: "alice/images/trashed.jpg")
        let again = try await b.sync()
        #expect(again.deletedLocal.isEmpty)
        #expect(again.uploaded == ["images/trashed.jpg"])
        #expect(b.read("images/trashed.jpg") == "made again")
    }

    @Test func localDelete_ofAFileEditedInTheBucketSince_downloadsTheEdit_andTrashesNothing() async throws {
        let a = try base.makeFixture()
        let b = base.otherDevice(of: a)
        try a.write("images/x.jpg", "v1")
        _ = try await a.sync()
        _ = try await b.sync()
        try await Task.sleep(nanoseconds: 10_000_000)
        try b.write("images/x.jpg", "v2 from b")
        _ = try await b.sync()
        try remove(a, "images/x.jpg")

        let report = try await a.sync { $0.delete = true }
        #expect(report.deletedRemote.isEmpty)
        #expect(report.downloaded == ["images/x.jpg"])
        #expect(a.read("images/x.jpg") == "v2 from b")
        #expect(try await MediaTrash(store: a.store, user: "alice", scratch: a.root).list().isEmpty)
    }

    /// A recording moved to the trash is copied by the server on S3 (CopyObject; moto and rclone serve s3), not
    /// downloaded and uploaded again.
    @Test(arguments: Backend.allCases)
    func move_onS3_copiesOnTheServer_andKeepsTheBytes_forAKeyThatNeedsEncoding(_ backend: Backend) async throws {
        // moto without signature checks for s3 (its checker refuses some of these names; see MotoServer.store).
        let made = backend == .s3 ? try await FolderListingTests.ListingBackend.s3.makeStore() : try await backend.makeStore()
        guard let store = made else { return }
        let user = "u\(UInt32.random(in: 0...UInt32.max))"
        let path = "recordings/take 1+\u{E9}%.m4a"
        let bytes = Data((0..<70_000).map { UInt8($0 % 241) })
        try await store.put(key: "\(user)/\(path)", data: bytes)
        let trash = MediaTrash(store: store, user: user, scratch: try makeTemporaryFolder())
        store.requestCounter.reset()

        let key = try await trash.move(path: path)

        if backend != .local {
            #expect(store.requestCounter.count("CopyObject") == 1)
            #expect(store.requestCounter.count("GetObject") == 0)
        }
        #expect(try await store.get(key: key) == bytes)
        #expect(try await store.exists(key: "\(user)/\(path)") == false)
        #expect(try await trash.restore(path: path).key == key)
        #expect(try await store.get(key: "\(user)/\(path)") == bytes)
        try await store.delete(key: "\(user)/\(path)")
    }

    @Test func restore_ofAPathTheTrashDoesNotHold_orThatExists_failsNamingTheKey() async throws {
        let f = try base.makeFixture()
        let trash = MediaTrash(store: f.store, user: "alice", scratch: f.root)
        await #expect(throws: BucketError.notFound(key: "alice/trash/<date>/images/none.jpg")) {
            try await trash.restore(path: "images/none.jpg")
        }
        try await f.store.put(key: "alice/images/a.jpg", data: Data("live".utf8))
        try await f.store.put(key: trash.key(for: "images/a.jpg", at: Date()), data: Data("old".utf8))
        await #expect(throws: BucketError.preconditionFailed(key: "alice/images/a.jpg")) {
            try await trash.restore(path: "images/a.jpg")
        }
        #expect(try await f.store.get(key: "alice/images/a.jpg") == Data("live".utf8))
    }

    @Test func trash_isPrunedAfterTrashDays_atMostOnceADay_andIdleRunsStayOneListing() async throws {
        let f = try base.makeFixture()
        let trash = MediaTrash(store: f.store, user: "alice", scratch: f.root)
        let old = trash.key(for: "images/old.jpg", at: Date().addingTimeInterval(-31 * 86_400))
        let recent = trash.key(for: "images/recent.jpg", at: Date().addingTimeInterval(-29 * 86_400))
        try await f.store.put(key: old, data: Data("o".utf8))
        try await f.store.put(key: recent, data: Data("r".utf8))

        let withoutDeletes = try await f.sync()
        #expect(withoutDeletes.trashPruned.isEmpty)
        #expect(try await f.store.exists(key: old))

        let first = try await f.sync { $0.delete = true }
        #expect(first.trashPruned == [old])
        #expect(try await f.store.exists(key: old) == false)
        #expect(try await f.store.exists(key: recent))
        #expect(try MediaManifest.load(from: f.manifest).trashPrunedAt != nil)
        let idle = try await f.sync { $0.delete = true }
        #expect(idle.requests == 1)
        #expect(idle.trashPruned.isEmpty)
    }
}
