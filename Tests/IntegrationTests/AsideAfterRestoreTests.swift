import BucketSync
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Issue 20: what a device carries for other app versions survives its restore and reaches a new device. Values of a
// newer version's columns kept aside (rtsync_aside) and rows held back (rtsync_held) are only in this device's
// database: the device that sent them does not send them again, and compaction may prune the diff that brought them.
// A restored device catches up from the last compaction's snapshot (a state diff), and a new device starts from it.

@Suite("kept-aside values and held rows survive restore, compaction and new devices")
struct AsideAfterRestoreTests {
    /// Two devices of one user, started from `fixture` (a planner version) as the app's bundled database.
    func devices(_ dir: TemporaryDirectory, fixture: String) async throws -> [LTDevice] {
        let asset = dir.file("\(fixture).sqlite")
        try FileManager.default.copyItem(at: RTSyncBinary.packageRoot.appendingPathComponent("Fixtures/databases/\(fixture).sqlite"), to: asset)
        var out: [LTDevice] = []
        var user: String?
        for name in ["A", "B"] {
            let home = ltHome(dir, name)
            try ltEditSettings(home) { $0.tier = .free; $0.bucket = LTBucket.local(dir).url }
            let device = LTDevice(name: name, home: home, remote: try LTBucket.local(dir).open())
            let result = try await InitChain(home: home, remote: device.remote, joinUser: user, bundledAsset: asset, retry: ltShortRetry).run()
            user = result.userId
            let first = try await device.sync()
            try #require(first.ok, "\(name): \(first.phases)")
            out.append(device)
        }
        return out
    }

    /// A diff of another app version's device outside this bucket (it reaches the devices as `rtsync diff apply`
    /// would bring it): `edit` runs on a tracked copy of `fixture`.
    func otherVersionDiff(_ dir: TemporaryDirectory, fixture: String, _ edit: String) throws -> URL {
        let path = dir.file("other-\(fixture).sqlite")
        try FileManager.default.copyItem(at: RTSyncBinary.packageRoot.appendingPathComponent("Fixtures/databases/\(fixture).sqlite"), to: path)
        let other = try SyncDatabase(path: path.path)
        try other.track()
        try other.setUserID("other-install")
        try other.execute(edit)
        let out = dir.file("other-out")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        return URL(fileURLWithPath: try #require(try other.exportChanges(to: out)).file)
    }

    func backup(_ d: LTDevice) throws -> String { try BackupManager(database: d.home.database, folder: d.home.backups, keep: 10).create().id }
    func restore(_ d: LTDevice, backup id: String) throws {
        _ = try BackupManager(database: d.home.database, folder: d.home.backups, keep: 10).restore(id: id, outbox: d.home.outbox)
    }

    /// Joins a new device `name` to the user's bucket: it starts from the last compaction's snapshot.
    func join(_ dir: TemporaryDirectory, _ name: String, user: String, fixture: String) async throws -> LTDevice {
        let asset = dir.file("asset-\(name).sqlite")
        try FileManager.default.copyItem(at: RTSyncBinary.packageRoot.appendingPathComponent("Fixtures/databases/\(fixture).sqlite"), to: asset)
        let home = ltHome(dir, name)
        try ltEditSettings(home) { $0.tier = .free; $0.bucket = LTBucket.local(dir).url }
        let device = LTDevice(name: name, home: home, remote: try LTBucket.local(dir).open())
        let result = try await InitChain(home: home, remote: device.remote, joinUser: user, bundledAsset: asset, retry: ltShortRetry).run()
        #expect(result.source == .bucket, "\(result.attempts)")
        let first = try await device.sync()
        #expect(first.ok, "\(first.phases)")
        return device
    }

    @Test func valueKeptAsideForANewerVersion_survivesRestoreAndANewDevice_andLandsAtTheUpgrade() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await devices(dir, fixture: "planner-v1")
        let a = devices[0]
        let user = try a.home.loadSettings().userID
        let before = try backup(a)
        // A version-3 device writes colors (a column version 1 lacks); version-1 device A keeps them aside.
        let v3 = try otherVersionDiff(dir, fixture: "planner-v3", "UPDATE routines SET color = 'teal' WHERE id = 2; INSERT INTO routines VALUES (7, 'curl', 'amber')")
        let applied = try SyncDatabase(path: a.db.path).apply(diff: v3)
        #expect(applied.status == .applied && applied.columnsKeptAside.contains("routines.color"), "\(applied)")
        try a.execute("UPDATE routines SET name = 'deep squat' WHERE id = 1")  // a diff for compaction to prune
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(!c.pruned.isEmpty, "\(c)")

        // A restores its backup from before the values came; its catch-up brings them back from the snapshot.
        try restore(a, backup: before)
        #expect(try SyncDatabase(path: a.db.path).asideValues(table: "routines").isEmpty, "the backup predates the values")
        let synced = try await a.sync()
        #expect(synced.ok && synced.phases.contains { $0.name == "catch-up" && $0.ok }, "\(synced.phases)")
        #expect(try SyncDatabase(path: a.db.path).asideValues(table: "routines") == ["2": ["color": .text("teal")], "7": ["color": .text("amber")]])

        // A new version-1 device starts from the snapshot.
        let d = try await join(dir, "D", user: user, fixture: "planner-v1")
        // Both upgrade (the app's own migration adds the column): the values are there.
        for device in [a, d] {
            try SyncDatabase(path: device.db.path).migrate(sql: "ALTER TABLE routines ADD COLUMN color TEXT")
            _ = try await device.sync()
            #expect(try ltScalar(device.db, "SELECT color FROM routines WHERE id = 2") == .text("teal"), "\(device.name)")
            #expect(try ltScalar(device.db, "SELECT color FROM routines WHERE id = 7") == .text("amber"), "\(device.name)")
        }
    }

    @Test func rowHeldBack_survivesRestore_andIsPlacedOnceAValueIsDeclared() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await devices(dir, fixture: "planner-v3")
        let a = devices[0]
        let before = try backup(a)
        // A version-1 device's new request lacks priority (NOT NULL, no default in version 3): A holds it back.
        let v1 = try otherVersionDiff(dir, fixture: "planner-v1", "INSERT INTO requests VALUES ('42', 'https://example.com/held', 'new')")
        let applied = try SyncDatabase(path: a.db.path).apply(diff: v1)
        #expect(applied.status == .applied && applied.held == 1, "\(applied)")
        try a.execute("UPDATE routines SET name = 'deep squat' WHERE id = 1")  // a diff for compaction to prune
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(!c.pruned.isEmpty, "\(c)")

        try restore(a, backup: before)
        #expect(try SyncDatabase(path: a.db.path).heldRows().isEmpty, "the backup predates the row")
        let synced = try await a.sync()
        #expect(synced.ok, "\(synced.phases)")
        #expect(try SyncDatabase(path: a.db.path).heldRows().map(\.key) == ["42"], "held again after the catch-up")
        try SyncDatabase(path: a.db.path).setPolicy(TablePolicy(syncDefaults: ["priority": "0"]), for: "requests")
        _ = try await a.sync()
        #expect(try ltScalar(a.db, "SELECT url FROM requests WHERE id = 42") == .text("https://example.com/held"))
        #expect(try SyncDatabase(path: a.db.path).heldRows().isEmpty)
    }
}
