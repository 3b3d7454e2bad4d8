import Foundation
import RTSyncTestSupport
import RTSQLite
import Testing

/// Defects found by the CLI chaos harness (`tools/chaos/cli_chaos.py`), each reduced to a few steps of the real
/// `rtsync` binary and the `sqlite3` shell on devices of one user sharing a local-folder bucket. Each test states
/// what the README promises; on the code they were written against (2c94cd7), all seven failed.
@Suite("chaos findings",
       .enabled(if: findExecutable("sqlite3") != nil, "needs the sqlite3 shell (scripts/test.sh installs it)"))
struct ChaosFindingsTests {
    /// One device: its home folder and, when set, the faketime offset of its clock.
    struct Device {
        let home: URL
        var skew: String? = nil
        var db: String { home.appendingPathComponent("support/primary.sqlite").path }
    }

    /// Runs rtsync for `device` (under faketime when its clock is skewed); expects exit 0.
    @discardableResult
    static func rt(_ device: Device?, _ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
        let binary = try #require(RTSyncBinary.url, "rtsync binary not found; build it or set RTSYNC_BIN", sourceLocation: sourceLocation)
        let r: CommandResult
        if let skew = device?.skew {
            let faketime = try #require(findExecutable("faketime"), "needs faketime", sourceLocation: sourceLocation)
            r = try runUnderFaketime(URL(fileURLWithPath: faketime), offset: skew, [binary.path] + arguments)
        } else {
            r = try runCommand(binary, arguments)
        }
        #expect(r.status == 0, "rtsync \(arguments.joined(separator: " ")): \(r.stdout)\(r.stderr)", sourceLocation: sourceLocation)
        return r
    }

    static func sync(_ device: Device) throws { try rt(device, ["sync", "--home", device.home.path]) }

    /// The first device: a database with `schema`, initialized for sync; returns it and the user id.
    static func firstDevice(_ dir: TemporaryDirectory, schema: String, skew: String? = nil) throws -> (Device, String) {
        let device = Device(home: dir.file("A"), skew: skew)
        try FileManager.default.createDirectory(at: device.home.appendingPathComponent("support"), withIntermediateDirectories: true)
        try sqliteShell(device.db, schema)
        let out = try rt(device, ["init", "--home", device.home.path, "--bucket", "file://" + dir.file("bucket").path, "--json"])
        let user = try #require(try jsonObject(out.stdout)["userId"] as? String)
        return (device, user)
    }

    /// A device joining `user` from the bucket (`rtsync init --user`).
    static func join(_ dir: TemporaryDirectory, _ name: String, user: String, sync first: Bool = true) throws -> Device {
        let device = Device(home: dir.file(name))
        try rt(device, ["init", "--home", device.home.path, "--bucket", "file://" + dir.file("bucket").path, "--user", user])
        if first { try sync(device) }
        return device
    }

    static func rows(_ device: Device, _ sql: String) throws -> [String] {
        try Connection(path: device.db, mode: .readOnly).rows(sql).map { row in row.map { $0.sqlLiteral }.joined(separator: "|") }
    }

    /// 1. Two devices that joined from the same bucket backup, whose author's clock was ahead of theirs, give their
    /// diffs the same ids (`rtsync_site.last_diff_id` is copied with the database and `proposedDiffID` takes its
    /// successor); the second upload meets the first's object, is taken for "already uploaded", and its rows never
    /// reach anyone.
    @Test(.enabled(if: findExecutable("faketime") != nil, "needs faketime (scripts/test.sh installs it)"))
    func devicesJoinedFromOneBackup_neverShareADiffID() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, v TEXT)", skew: "+1d")
        try sqliteShell(a.db, "INSERT INTO t VALUES ('a1', 'from A')")
        try Self.sync(a)
        let b = try Self.join(dir, "B", user: user, sync: false)
        let c = try Self.join(dir, "C", user: user, sync: false)
        try sqliteShell(b.db, "INSERT INTO t VALUES ('b1', 'from B')")
        try sqliteShell(c.db, "INSERT INTO t VALUES ('c1', 'from C')")
        for _ in 0..<3 { for d in [b, c, a] { try Self.sync(d) } }
        for d in [a, b, c] {
            #expect(try Self.rows(d, "SELECT id FROM t ORDER BY id") == ["'a1'", "'b1'", "'c1'"], "\(d.home.lastPathComponent)")
        }
    }

    /// 2. Diffs a compaction prunes between a device's `init` and its first sync never reach that device: it had no
    /// cursor yet, and its first sync does not catch up from the snapshot (no catch-up was marked at init, since no
    /// snapshot existed then). Nothing reports it (`status` shows no gaps).
    @Test func compactionBetweenInitAndFirstSync_losesNothingForTheNewDevice() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, v TEXT)")
        try sqliteShell(a.db, "INSERT INTO t VALUES ('r1', 'before B joined')")
        try Self.sync(a)
        let b = try Self.join(dir, "B", user: user, sync: false)
        try sqliteShell(a.db, "INSERT INTO t VALUES ('r2', 'after B joined')")
        try Self.sync(a)
        try Self.rt(a, ["compact", "--home", a.home.path])
        for _ in 0..<2 { try Self.sync(b); try Self.sync(a) }
        #expect(try Self.rows(b, "SELECT id FROM t ORDER BY id") == ["'r1'", "'r2'"])
    }

    /// 3. A newer incarnation of a row (INSERT OR REPLACE) made on a device without a column of a newer app version
    /// replaces the row "whole" on the devices of the older schema, but the device that has the column keeps its old
    /// value there (`replaceWhole` writes only the diff's columns): after every device adds the column, the replicas
    /// differ for good.
    @Test func newIncarnationFromAnOlderSchema_replacesTheWholeRowEverywhere() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, v TEXT)")
        try sqliteShell(a.db, "INSERT INTO t VALUES ('r', 'v0')")
        try Self.sync(a)
        let b = try Self.join(dir, "B", user: user)
        try Self.rt(b, ["migrate", "--home", b.home.path, "ALTER TABLE t ADD COLUMN extra TEXT"])
        try sqliteShell(b.db, "UPDATE t SET extra = 'from B' WHERE id = 'r'")
        try Self.sync(b); try Self.sync(a)
        Thread.sleep(forTimeInterval: 1)
        try sqliteShell(a.db, "INSERT OR REPLACE INTO t VALUES ('r', 'new row')")
        for _ in 0..<2 { try Self.sync(a); try Self.sync(b) }
        try Self.rt(a, ["migrate", "--home", a.home.path, "ALTER TABLE t ADD COLUMN extra TEXT"])
        for _ in 0..<3 { try Self.sync(a); try Self.sync(b) }
        #expect(try Self.rows(a, "SELECT * FROM t") == Self.rows(b, "SELECT * FROM t"))
    }

    /// 4. A device of the older schema that gets the update of a row before the diff that inserted it (a delayed
    /// diff) keeps aside only the columns the update changed (`keepAside` skips the others although the merge made the
    /// row here); once it adds the column, the late insert's value ties with the column's unknown clock and is
    /// dropped: that device keeps the column's default while the author keeps the value.
    @Test func updateBeforeInsert_onAnOlderSchema_keepsTheNewerColumnsValue() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, a TEXT, b TEXT)")
        try Self.sync(a)
        let d = try Self.join(dir, "D", user: user)
        try Self.rt(d, ["migrate", "--home", d.home.path, "ALTER TABLE t ADD COLUMN flag INTEGER NOT NULL DEFAULT 0"])
        try sqliteShell(d.db, "INSERT INTO t(id, a, b, flag) VALUES ('r', 'a0', 'b0', -715)")
        try Self.sync(d)
        // The insert's diff is delayed: moved out of inbound, put back later.
        let inbound = dir.file("bucket").appendingPathComponent(user).appendingPathComponent("inbound")
        let held = dir.file("held")
        try FileManager.default.createDirectory(at: held, withIntermediateDirectories: true)
        let names = try FileManager.default.contentsOfDirectory(atPath: inbound.path)
        for n in names { try FileManager.default.moveItem(at: inbound.appendingPathComponent(n), to: held.appendingPathComponent(n)) }
        try sqliteShell(d.db, "UPDATE t SET a = 'a1' WHERE id = 'r'")
        try Self.sync(d)
        try Self.sync(a)
        try Self.rt(a, ["migrate", "--home", a.home.path, "ALTER TABLE t ADD COLUMN flag INTEGER NOT NULL DEFAULT 0"])
        for n in names { try FileManager.default.moveItem(at: held.appendingPathComponent(n), to: inbound.appendingPathComponent(n)) }
        for _ in 0..<2 { try Self.sync(a); try Self.sync(d) }
        #expect(try Self.rows(d, "SELECT * FROM t") == ["'r'|'a1'|'b0'|-715"])
        #expect(try Self.rows(a, "SELECT * FROM t") == Self.rows(d, "SELECT * FROM t"))
    }

    /// 5. The first device (`init` on an existing database) publishes its cursor only from a sync that exports or
    /// applies something (`InitChain.finish` writes the pending-cursor marker only for other sources). Until then a
    /// compaction on another device does not know it and prunes diffs it never applied; it never gets those rows.
    @Test func firstDeviceWithIdleSyncs_isKnownToCompaction() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, v TEXT)")
        try Self.sync(a)
        let b = try Self.join(dir, "B", user: user)
        try sqliteShell(b.db, "INSERT INTO t VALUES ('r1', 'from B')")
        try Self.sync(b)
        try Self.rt(b, ["compact", "--home", b.home.path])
        for _ in 0..<2 { try Self.sync(a); try Self.sync(b) }
        #expect(try Self.rows(a, "SELECT id FROM t") == ["'r1'"])
    }

    /// 6. `backup create --upload` puts a database holding a row never exported into `<user>/backups/`, where new
    /// devices start. Deleted before the next export, the row's insert and delete coalesce to nothing, so no delete is
    /// ever sent and a device that joins from that backup keeps the row for good. (`Compactor` exports pending changes
    /// before its snapshot for this very reason; the CLI's uploaded backup does not.)
    @Test func uploadedBackup_neverResurrectsARowDeletedBeforeItsExport() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, v TEXT)")
        try sqliteShell(a.db, "INSERT INTO t VALUES ('keep', 'x')")
        try Self.sync(a)
        try sqliteShell(a.db, "INSERT INTO t VALUES ('ghost', 'never exported')")
        try Self.rt(a, ["backup", "create", "--home", a.home.path, "--upload"])
        try sqliteShell(a.db, "DELETE FROM t WHERE id = 'ghost'")
        try Self.sync(a)
        let b = try Self.join(dir, "B", user: user)
        for _ in 0..<2 { try Self.sync(a); try Self.sync(b) }
        #expect(try Self.rows(b, "SELECT id FROM t ORDER BY id") == ["'keep'"])
    }

    /// 7. A delete from a device of a newer app version, refused here because this device made a newer incarnation of
    /// the row, keeps NULL aside for the newer version's columns (`keepAside` after `mergeDelete`: a delete carries no
    /// values). When this device then adds the column as `NOT NULL DEFAULT 0`, `adoptAsideColumns` moves that NULL in:
    /// `rtsync migrate` fails every time, and when the app runs its own ALTER TABLE, every later export fails.
    @Test func refusedDeleteFromANewerSchema_neverBlocksTheMigration() throws {
        let dir = try TemporaryDirectory()
        let (a, user) = try Self.firstDevice(dir, schema: "CREATE TABLE t (id TEXT PRIMARY KEY NOT NULL, v TEXT)")
        try sqliteShell(a.db, "INSERT INTO t VALUES ('r', 'v0')")
        try Self.sync(a)
        let c = try Self.join(dir, "C", user: user)
        let migration = "ALTER TABLE t ADD COLUMN flag INTEGER NOT NULL DEFAULT 0"
        try Self.rt(c, ["migrate", "--home", c.home.path, migration])
        try sqliteShell(a.db, "INSERT OR REPLACE INTO t VALUES ('r', 'A made it again')")
        try sqliteShell(c.db, "DELETE FROM t WHERE id = 'r'")
        try Self.sync(c)
        try Self.sync(a)
        try Self.rt(a, ["migrate", "--home", a.home.path, migration])
        for _ in 0..<2 { try Self.sync(a); try Self.sync(c) }
        #expect(try Self.rows(a, "SELECT * FROM t") == Self.rows(c, "SELECT * FROM t"))
    }
}
