import Foundation
import RTSQLite
import SyncEngine
import Testing

/// While a diff is merged, the capture triggers must not record the merge's writes (no echo). When the schema holds
/// nothing but those triggers, as `track` makes them, apply turns them off for its own connection instead of
/// dropping and re-creating them: the schema stays as it was, so the app's connections keep their compiled
/// statements. These tests check that the triggers are on again after every way an apply can end, and that
/// databases with other triggers (the app's) or capture triggers that are not current still get the old way.
@Suite("Capture triggers during apply")
struct CaptureOffDuringApplyTests {
    static let schema = """
        CREATE TABLE items(id TEXT PRIMARY KEY NOT NULL, name TEXT, qty INTEGER);
        INSERT INTO items VALUES ('a', 'apple', 1), ('b', 'bread', 2)
        """

    /// A sandbox (keep it: its folder goes when it is released) and two replicas of one user.
    static func pair(_ label: String) throws -> (Sandbox, Replica, Replica) {
        let box = try Sandbox(label)
        let base = try box.baseDatabase(schema)
        return (box, try box.replica("one", source: base, user: "u"), try box.replica("two", source: base, user: "u"))
    }

    /// `PRAGMA schema_version` of `r`'s file, read on a connection of its own (as the app's would).
    static func schemaVersion(_ r: Replica) throws -> Int64 {
        try #require(try Connection(path: r.dbURL.path).scalar("PRAGMA schema_version")?.int64)
    }

    /// A local edit through the sync database's own connection, and one through another connection, are both
    /// captured (the triggers fire again after the apply).
    static func expectCaptureOn(_ r: Replica, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let before = try r.db.pendingChangeCount()
        try r.exec("UPDATE items SET qty = qty + 100 WHERE id = 'a'")
        #expect(try r.db.pendingChangeCount() == before + 1, "a write on the sync connection is captured", sourceLocation: sourceLocation)
        try Connection(path: r.dbURL.path).execute("UPDATE items SET name = name || '!' WHERE id = 'a'")
        #expect(try r.db.pendingChangeCount() == before + 2, "a write on another connection is captured", sourceLocation: sourceLocation)
    }

    @Test func applyOfPlainDiffs_changesNoSchema_capturesNothing_andLeavesCaptureOn() throws {
        let (box, one, two) = try Self.pair("capture-off-plain")
        defer { withExtendedLifetime(box) {} }
        try one.exec("UPDATE items SET name = 'green apple' WHERE id = 'a'")
        try one.exec("INSERT INTO items VALUES ('c', 'cheese', 3)")
        let first = try one.exportFile()
        try one.exec("DELETE FROM items WHERE id = 'b'")
        let second = try one.exportFile()
        let version = try Self.schemaVersion(two)
        #expect(two.apply(first).status == .applied)
        #expect(try Self.schemaVersion(two) == version, "a merge without schema changes leaves the schema as it was")
        #expect(try two.db.pendingChangeCount() == 0, "the merge's writes are not captured")
        #expect(try two.rows("SELECT id, name FROM items ORDER BY id") == [[.text("a"), .text("green apple")], [.text("b"), .text("bread")], [.text("c"), .text("cheese")]])
        try Self.expectCaptureOn(two)
        _ = try two.export()
        // The same in a group (several diffs in one transaction).
        try one.exec("UPDATE items SET qty = 9 WHERE id = 'c'")
        let third = try one.exportFile()
        let versionBeforeGroup = try Self.schemaVersion(two)
        #expect(two.db.apply(diffs: [second, third]).map(\.status) == [.applied, .applied])
        #expect(try Self.schemaVersion(two) == versionBeforeGroup)
        #expect(try two.db.pendingChangeCount() == 0)
        #expect(try two.rows("SELECT id, qty FROM items ORDER BY id") == [[.text("a"), .integer(101)], [.text("c"), .integer(9)]])
        try Self.expectCaptureOn(two)
    }

    /// A diff rejected in the middle of its merge (its digest does not match what it carries, found only once every
    /// row was read and merged) leaves the capture triggers on, alone and in a group.
    @Test func rejectedDiff_leavesCaptureOn() throws {
        let (box, one, two) = try Self.pair("capture-off-rejected")
        try one.exec("UPDATE items SET name = 'red apple' WHERE id = 'a'")
        let good = try one.exportFile()
        try one.exec("UPDATE items SET name = 'rye bread' WHERE id = 'b'")
        let tampered = try one.exportFile()
        // A value changed after the digest was written.
        let changed = box.path("changed")
        try FileManager.default.createDirectory(at: changed, withIntermediateDirectories: true)
        let bad = changed.appendingPathComponent(tampered.lastPathComponent)
        try FileManager.default.copyItem(at: tampered, to: bad)
        try Connection(path: bad.path).execute("UPDATE items SET name = 'forged'")
        let alone = two.apply(bad)
        #expect(alone.status == .rejected)
        #expect(try two.db.pendingChangeCount() == 0)
        try Self.expectCaptureOn(two)
        try two.exec("DELETE FROM rtsync_changes")
        // In a group: the good diff stays applied, the bad one is rejected, capture is on after the commit.
        try FileManager.default.createDirectory(at: two.quarantine, withIntermediateDirectories: true)
        let again = changed.appendingPathComponent("again")
        try FileManager.default.createDirectory(at: again, withIntermediateDirectories: true)
        let bad2 = again.appendingPathComponent(tampered.lastPathComponent)
        try FileManager.default.copyItem(at: tampered, to: bad2)
        try Connection(path: bad2.path).execute("UPDATE items SET name = 'forged'")
        #expect(two.db.apply(diffs: [good, bad2]).map(\.status) == [.applied, .rejected])
        #expect(try two.value("SELECT name FROM items WHERE id = 'a'") == .text("red apple"))
        #expect(try two.db.pendingChangeCount() == 0)
        try Self.expectCaptureOn(two)
    }

    /// The app's own triggers fire for the merge's writes, as before: with one in the schema the capture triggers are
    /// dropped and re-created instead of turned off (which would turn the app's off too).
    @Test func appTrigger_stillFiresDuringApply() throws {
        let (box, one, two) = try Self.pair("capture-off-app-trigger")
        defer { withExtendedLifetime(box) {} }
        try two.exec("CREATE TABLE audit(id TEXT, name TEXT)")
        try two.exec("CREATE TRIGGER app_audit AFTER UPDATE OF name ON items BEGIN INSERT INTO audit VALUES (NEW.id, NEW.name); END")
        try one.exec("UPDATE items SET name = 'pear' WHERE id = 'a'")
        #expect(two.apply(try one.exportFile()).status == .applied)
        #expect(try two.rows("SELECT id, name FROM audit") == [[.text("a"), .text("pear")]])
        #expect(try two.db.pendingChangeCount() == 0)
        try Self.expectCaptureOn(two)
        #expect(try two.rows("SELECT count(*) FROM audit") == [[.integer(2)]], "and for the later edit of the name")
    }

    /// A capture trigger that is missing (dropped by hand, or made by an earlier version) is re-created by an apply,
    /// as it was before triggers could be turned off.
    @Test func missingCaptureTrigger_isRecreatedByApply() throws {
        let (box, one, two) = try Self.pair("capture-off-missing")
        defer { withExtendedLifetime(box) {} }
        let tid = try #require(try two.value("SELECT tid FROM rtsync_tracked WHERE name = 'items'")?.int64)
        try two.exec("DROP TRIGGER rtsync_upd_\(tid)")
        try one.exec("UPDATE items SET qty = 5 WHERE id = 'a'")
        #expect(two.apply(try one.exportFile()).status == .applied)
        #expect(try two.value("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = 'rtsync_upd_\(tid)'") == .integer(1))
        try Self.expectCaptureOn(two)
    }

    /// Turning triggers off reaches statements compiled while they were on (SQLite compiles them again), and turning
    /// them on again reaches those compiled while they were off: a statement kept on the connection never writes
    /// past the switch.
    @Test func switchingTriggers_reachesStatementsCompiledBefore() throws {
        let box = try Sandbox("capture-off-compiled")
        let db = try Connection(path: box.path("t.sqlite").path)
        try db.execute("CREATE TABLE t(x); CREATE TABLE log(x); CREATE TRIGGER t_log AFTER INSERT ON t BEGIN INSERT INTO log VALUES (NEW.x); END")
        let insert = try db.prepare("INSERT INTO t VALUES (?)")
        try insert.run([.integer(1)])
        try db.setMainTriggers(enabled: false)
        #expect(!db.mainTriggersEnabled)
        try insert.run([.integer(2)])
        try db.setMainTriggers(enabled: true)
        #expect(db.mainTriggersEnabled)
        try insert.run([.integer(3)])
        #expect(try db.rows("SELECT x FROM log ORDER BY x") == [[.integer(1)], [.integer(3)]])
        // Another connection's writes fire them while this one has them off.
        try db.setMainTriggers(enabled: false)
        try Connection(path: box.path("t.sqlite").path).execute("INSERT INTO t VALUES (4)")
        #expect(try db.rows("SELECT x FROM log ORDER BY x") == [[.integer(1)], [.integer(3)], [.integer(4)]])
    }

    /// A diff that brings a new table: created and tracked here, its rows not captured, later writes to it captured.
    @Test func diffBringingANewTable_capturesNothing_thenCapturesLocalWrites() throws {
        let (box, one, two) = try Self.pair("capture-off-new-table")
        defer { withExtendedLifetime(box) {} }
        try Connection(path: one.dbURL.path).execute("CREATE TABLE tags(name TEXT PRIMARY KEY NOT NULL, color TEXT); INSERT INTO tags VALUES ('home', 'blue')")
        let report = two.apply(try one.exportFile())
        #expect(report.status == .applied && report.tablesCreated == ["tags"])
        #expect(try two.db.pendingChangeCount() == 0)
        try two.exec("INSERT INTO tags VALUES ('work', 'red')")
        #expect(try two.db.pendingChangeCount() == 1)
        // The table's capture triggers are current: the next apply changes no schema.
        try one.exec("UPDATE tags SET color = 'green' WHERE name = 'home'")
        let diff = try one.exportFile()
        let version = try Self.schemaVersion(two)
        #expect(two.apply(diff).status == .applied)
        #expect(try Self.schemaVersion(two) == version)
        #expect(try two.rows("SELECT name, color FROM tags ORDER BY name") == [[.text("home"), .text("green")], [.text("work"), .text("red")]])
        #expect(try two.db.pendingChangeCount() == 1)
    }

    /// A diff that adds a column (the receiver's policy adds them) changes the schema and still leaves the capture
    /// triggers current and on.
    @Test func diffAddingAColumn_leavesCurrentTriggersOn() throws {
        let (box, one, two) = try Self.pair("capture-off-new-column")
        defer { withExtendedLifetime(box) {} }
        try one.db.migrate(sql: "ALTER TABLE items ADD COLUMN note TEXT")
        try one.exec("UPDATE items SET note = 'ripe' WHERE id = 'a'")
        let diff = try one.exportFile()
        try two.db.applyPolicies(["items": TablePolicy(.lwwColumn, addColumns: true)])
        let report = two.apply(diff)
        #expect(report.status == .applied)
        #expect(report.columnsAdded == ["items.note"])
        #expect(try two.value("SELECT note FROM items WHERE id = 'a'") == .text("ripe"))
        #expect(try two.db.pendingChangeCount() == 0)
        try two.exec("UPDATE items SET note = 'soft' WHERE id = 'b'")
        #expect(try two.db.pendingChangeCount() == 1, "an update of the added column is captured")
    }
}
