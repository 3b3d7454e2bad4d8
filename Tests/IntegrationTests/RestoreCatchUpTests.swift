import BucketSync
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Issue 15, restore: a device restored from an older backup rejoins as a new site, catches up on what compaction
// pruned since (from the user's newest database in the bucket), its unexported changes keep their edit clocks and
// lose to later edits elsewhere, and its old site's cursor no longer holds back compaction.

@Suite("restore: catching up after compaction, old edits stay old, cursors")
struct RestoreCatchUpTests {
    /// Restores `device`'s backup `id` as `rtsync backup restore` does.
    func restore(_ device: LTDevice, backup id: String) throws {
        _ = try BackupManager(database: device.home.database, folder: device.home.backups, keep: 10).restore(id: id, outbox: device.home.outbox)
    }

    func backup(_ device: LTDevice) throws -> String {
        try BackupManager(database: device.home.database, folder: device.home.backups, keep: 10).create().id
    }

    @Test func restoreOlderThanCompaction_catchesUpOnPrunedDiffs_andSeesItIsBehind() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        let oldBackup = try backup(b)
        try a.insertThing("rst-a1", title: "made after B's backup")
        try a.execute("UPDATE things SET title = 'renamed after the backup' WHERE id = (SELECT id FROM things WHERE id <> 'rst-a1' ORDER BY id LIMIT 1)")
        let renamed = try ltScalar(a.db, "SELECT id FROM things WHERE title = 'renamed after the backup'")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        #expect(try b.thingTitle("rst-a1") == "made after B's backup")
        // Every device applied everything: compaction prunes all of it.
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(c.kept == 0 && !c.pruned.isEmpty, "\(c)")

        try restore(b, backup: oldBackup)
        #expect(try b.thingTitle("rst-a1") == nil, "the backup predates the row")
        let status = try SyncDatabase(path: b.db.path)
        #expect(try status.needsCatchUp(), "a restored database knows it is behind")
        #expect(try DeviceStatus.gather(home: b.home).catchUpPending)
        let report = try await b.sync()
        #expect(report.ok, "\(report.phases)")
        #expect(report.phases.contains { $0.name == "catch-up" && $0.ok }, "\(report.phases)")
        #expect(try b.thingTitle("rst-a1") == "made after B's backup", "the row from a pruned diff came back")
        if let renamed { #expect(try ltScalar(b.db, "SELECT title FROM things WHERE id = ?", [renamed]) == .text("renamed after the backup")) }
        #expect(try !SyncDatabase(path: b.db.path).needsCatchUp())
        #expect(try !DeviceStatus.gather(home: b.home).catchUpPending)
        _ = try await LTSyncScenarios.rounds(devices, 2)
        try LTSyncScenarios.expectIdentical(devices)
    }

    /// A restored database compacts only after a sync caught it up: its snapshot would be the one devices catch up
    /// from, and it lacks what was pruned since the backup. Changes not yet exported go out before a snapshot.
    @Test func restoredDatabase_compactsOnlyOnceCaughtUp_andPendingChangesAreExportedFirst() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        let old = try backup(b)
        try a.insertThing("rst-pruned", title: "made after B's backup")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        _ = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        try restore(b, backup: old)
        await #expect(throws: SyncEngineError.catchUpPending(path: b.home.database.path)) {
            _ = try await Compactor(home: b.home, remote: b.remote, retry: ltShortRetry).run()
        }
        #expect(try b.thingTitle("rst-pruned") == nil)
        #expect(try await b.sync().ok)
        #expect(try b.thingTitle("rst-pruned") == "made after B's backup")
        try b.insertThing("rst-unexported", title: "not exported when B compacts")
        let c = try await Compactor(home: b.home, remote: b.remote, retry: ltShortRetry).run()
        #expect(!c.snapshotKey.isEmpty)
        #expect(try SyncDatabase(path: b.db.path).pendingChangeCount() == 0, "the compaction exported the pending insert first")
        #expect(b.outbox().count == 1, "\(b.outbox())")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        #expect(try a.thingTitle("rst-unexported") == "not exported when B compacts")
        try LTSyncScenarios.expectIdentical(devices)
    }

    @Test func restoredUnexportedEdits_keepTheirClocks_andLoseToLaterEditsElsewhere() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        try b.insertThing("rst-old", title: "B's first version")
        try b.insertThing("rst-del", title: "deleted later")
        let withUnexported = try backup(b)  // holds both inserts, not exported yet
        _ = try await LTSyncScenarios.rounds(devices, 2)
        #expect(try a.thingTitle("rst-old") == "B's first version")
        try a.execute("UPDATE things SET title = 'A edited it later' WHERE id = 'rst-old'")
        try a.execute("DELETE FROM things WHERE id = 'rst-del'")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        try restore(b, backup: withUnexported)
        _ = try await LTSyncScenarios.rounds(devices, 3)
        for d in devices {
            #expect(try d.thingTitle("rst-old") == "A edited it later", "\(d.name): the restored old edit must not win")
            #expect(try d.thingTitle("rst-del") == nil, "\(d.name): the deleted row must not come back")
        }
        try LTSyncScenarios.expectIdentical(devices)
    }

    @Test func restore_oldSiteCursorIsRemoved_soCompactionPrunesAgain() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        let user = try a.home.loadSettings().userID
        let oldSite = try b.siteID()
        let id = try backup(b)
        try restore(b, backup: id)
        #expect(try b.siteID() != oldSite, "a restored copy is a new site")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let cursors = try await a.remote.list(prefix: "\(user)/devices/").map(\.key)
        #expect(!cursors.contains(Compactor.cursorKey(user: user, site: oldSite)), "\(cursors)")
        #expect(cursors.contains(Compactor.cursorKey(user: user, site: try b.siteID())), "\(cursors)")
        try a.insertThing("rst-after", title: "after the restore")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(c.kept == 0 && !c.pruned.isEmpty, "diffs applied after the restore are pruned: \(c)")
    }

    /// A diff the device exported after its backup and had not uploaded when it was restored is uploaded, not
    /// removed as the leftover of a crashed export.
    @Test func restore_diffExportedButNotUploaded_isStillDelivered() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        let id = try backup(b)
        try b.insertThing("rst-outbox", title: "exported, not uploaded")
        _ = try SyncDatabase(path: b.db.path).exportChanges(to: b.home.outbox)
        #expect(b.outbox().count == 1)
        try restore(b, backup: id)
        _ = try await LTSyncScenarios.rounds(devices, 2)
        #expect(try a.thingTitle("rst-outbox") == "exported, not uploaded")
        #expect(try b.thingTitle("rst-outbox") == "exported, not uploaded", "the restored device gets its own lost row back too")
        try LTSyncScenarios.expectIdentical(devices)
    }

    /// Devices that joined from another device's database in the bucket (a copy, not a restore) leave that device's
    /// cursor alone: removing it would let compaction prune diffs the live device has not applied.
    @Test func devicesJoinedFromTheBucket_keepTheOtherDevicesCursors() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let a = devices[0]
        try a.insertThing("cur-a", title: "so every device publishes")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let user = try a.home.loadSettings().userID
        let cursors = Set(try await a.remote.list(prefix: "\(user)/devices/").map(\.key))
        for d in devices {
            #expect(cursors.contains(Compactor.cursorKey(user: user, site: try d.siteID())), "\(d.name)'s cursor: \(cursors)")
        }
        for d in devices { #expect(try SyncDatabase(path: d.db.path).retiredSites().isEmpty, "\(d.name)") }
    }
}
