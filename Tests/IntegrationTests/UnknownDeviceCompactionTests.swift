import BucketSync
import DiffFormat
import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing

/// Compaction prunes the diffs every device it knows (by its cursor) has applied. A device whose cursor had not
/// reached the bucket yet (a device that had only run init, or a first device whose syncs had nothing to send) was
/// not waited for, and the diffs pruned meanwhile never reached it (found by the CLI chaos harness).
@Suite("compaction and devices it does not know yet")
struct UnknownDeviceCompactionTests {
    /// A device over an app's own database (init finds it: source `.existing`), with one table.
    static func existingDevice(_ dir: TemporaryDirectory, _ bucket: LTBucket, _ name: String, user: String? = nil) async throws -> LTDevice {
        let home = ltHome(dir, name)
        try ltEditSettings(home) { $0.tier = .free; $0.bucket = bucket.url }
        try home.createFolders()
        if user == nil {
            try Connection(path: home.database.path).execute("CREATE TABLE t(id TEXT PRIMARY KEY NOT NULL, v TEXT)")
        }
        let device = LTDevice(name: name, home: home, remote: try bucket.open())
        let result = try await InitChain(home: home, remote: device.remote, joinUser: user, bundledAsset: nil, retry: ltShortRetry).run()
        try #require(result.source == (user == nil ? .existing : .bucket), "\(name): \(result.attempts)")
        return device
    }

    static func ids(_ d: LTDevice) throws -> [String] {
        try Connection(path: d.db.path, mode: .readOnly).rows("SELECT id FROM t ORDER BY id").compactMap { $0[0].string }
    }

    static func user(_ d: LTDevice) throws -> String { try SyncDatabase(path: d.db.path).userID() }

    /// A inserts r1 and syncs; then B joins A's user from the bucket (and does not sync).
    static func rowThenJoin(_ dir: TemporaryDirectory) async throws -> (a: LTDevice, b: LTDevice) {
        let bucket = LTBucket.local(dir)
        let a = try await existingDevice(dir, bucket, "A")
        try a.execute("INSERT INTO t VALUES ('r1', 'before B joined')")
        #expect(try await a.sync().ok)
        return (a, try await existingDevice(dir, bucket, "B", user: try user(a)))
    }

    @Test func firstDeviceWhoseSyncsSentNothing_isWaitedForByCompaction() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let bucket = LTBucket.local(dir)
        let a = try await Self.existingDevice(dir, bucket, "A")
        #expect(try await a.sync().ok)  // nothing to send
        let b = try await Self.existingDevice(dir, bucket, "B", user: try Self.user(a))
        #expect(try await b.sync().ok)
        try b.execute("INSERT INTO t VALUES ('r1', 'from B')")
        #expect(try await b.sync().ok)
        _ = try await Compactor(home: b.home, remote: b.remote, retry: ltShortRetry).run()

        #expect(try await a.sync().ok)

        #expect(try Self.ids(a) == ["r1"])
    }

    @Test func deviceThatOnlyRanInit_isWaitedForByCompaction() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let (a, b) = try await Self.rowThenJoin(dir)  // B: no sync yet
        try a.execute("INSERT INTO t VALUES ('r2', 'after B joined')")
        #expect(try await a.sync().ok)
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(c.devices.count == 2, "B's cursor was published by its init: \(c.devices)")

        #expect(try await b.sync().ok)

        #expect(try Self.ids(b) == ["r1", "r2"])
    }

    /// A device whose cursor never reached the bucket (its init could not publish it, or an older version's)
    /// catches up from the snapshot of a compaction that did not wait for it, when it first publishes its cursor.
    @Test func deviceUnknownToACompaction_catchesUpFromItsSnapshotWhenItFirstPublishes() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let (a, b) = try await Self.rowThenJoin(dir)
        // As if B's init had not published its cursor.
        try await b.remote.delete(key: Compactor.cursorKey(user: try Self.user(b), site: try b.siteID()))
        try Connection(path: b.db.path, mode: .readWrite).execute("DROP TABLE rtsync_cursor_published")
        try a.execute("INSERT INTO t VALUES ('r2', 'after B joined')")
        #expect(try await a.sync().ok)
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(c.devices.count == 1 && !c.pruned.isEmpty, "\(c)")

        let report = try await b.sync()

        #expect(report.ok, "\(report.phases)")
        #expect(report.phases.contains { $0.name == "catch-up" && $0.ok }, "\(report.phases)")
        #expect(try Self.ids(b) == ["r1", "r2"])
        #expect(try SyncDatabase(path: b.db.path).cursorPublished())
        // The next syncs neither catch up again nor publish when idle.
        let idle = try await b.sync()
        #expect(!idle.phases.contains { $0.name == "catch-up" })
        #expect(idle.requests == 1, "\(idle.requests)")
    }
}
