import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// The capture triggers themselves: what each kind of write leaves in `rtsync_changes` and what export makes of it.
@Suite("Capture triggers")
struct CaptureTriggerTests {
    /// A database with the given tables, WAL mode, from which replicas are copied.
    static func base(_ box: Sandbox, _ ddl: String) throws -> URL { try box.baseDatabase(ddl) }

    static func tid(_ r: Replica, _ table: String) throws -> Int64 {
        try #require(try r.value("SELECT tid FROM rtsync_tracked WHERE name = ?", [.text(table)])?.int64)
    }

    /// (pk, op) of the pending changes of one table, in order.
    static func log(_ r: Replica, _ table: String) throws -> [String] {
        try r.rows("SELECT pk, op FROM rtsync_changes WHERE tid = ? ORDER BY seq", [.integer(try tid(r, table))])
            .map { "\($0[0].string ?? "?") \($0[1].int64 ?? -1)" }
    }

    static func changes(_ file: URL) throws -> [RowChange] { try DiffReader(url: file).changes() }

    @Test func keyChange_isCapturedAsDeleteAndInsert_andMovesTheRowOnApply() throws {
        let box = try Sandbox("capture-key")
        let url = try Self.base(box, """
            CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, body TEXT, n INTEGER);
            INSERT INTO notes VALUES ('a', 'first', 1), ('b', 'second', 2);
            """)
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        try a.exec("UPDATE notes SET id = 'c', body = 'moved' WHERE id = 'a'")
        #expect(try Self.log(a, "notes") == ["'a' 3", "'c' 1"])
        let file = try a.exportFile()
        let ops = try Self.changes(file).map { "\($0.operation) \($0.values[0].sqlLiteral)" }
        #expect(ops == ["delete 'a'", "upsert 'c'"])
        #expect(b.apply(file).status == .applied)
        #expect(try b.rows("SELECT id, body, n FROM notes ORDER BY id") == [[.text("b"), .text("second"), .integer(2)],
                                                                             [.text("c"), .text("moved"), .integer(1)]])
        // Setting the key to the value it has is no key change: only the other column is recorded.
        try a.exec("UPDATE notes SET id = id, n = 5 WHERE id = 'b'")
        #expect(try Self.log(a, "notes") == ["'b' 2"])
        let second = try Self.changes(try a.exportFile())
        #expect(second.map(\.operation) == [.upsert])
        #expect(second.first?.changedColumns == ["n"])
    }

    /// The update trigger names no columns (so a column added after tracking is captured); an update that changes
    /// nothing leaves a change with no column in its mask, and export sends nothing for it.
    @Test func updateThatSetsOnlyTheKeyToItsValue_exportsNothing() throws {
        let box = try Sandbox("capture-samekey")
        let a = try box.replica("A", fixture: "routines-logs")
        try a.exec("UPDATE logs SET id = id")
        #expect(try a.rows("SELECT cols FROM rtsync_changes").allSatisfy { $0 == [.integer(0)] })
        #expect(try a.export() == nil)
        #expect(try a.db.pendingChangeCount() == 0)
    }

    @Test func integerPrimaryKey_keyTextIsQuoteText_andRowidUpdatesAreKeyChanges() throws {
        let box = try Sandbox("capture-rowid")
        let url = try Self.base(box, """
            CREATE TABLE n(id INTEGER PRIMARY KEY, v TEXT);
            CREATE TABLE d(id INTEGER PRIMARY KEY DESC, v TEXT);
            """)
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        // INTEGER PRIMARY KEY is the rowid: its key text is built without quote() and must equal quote()'s.
        try a.exec("INSERT INTO n VALUES (-5, 'x'), (0, 'y'), (9223372036854775807, 'z'), (-9223372036854775808, 'w')")
        #expect(try Self.log(a, "n") == ["-5 1", "0 1", "9223372036854775807 1", "-9223372036854775808 1"])
        #expect(try a.value("SELECT count(*) FROM rtsync_changes c JOIN n ON c.pk = quote(n.id) AND typeof(c.pk) = 'text'") == .integer(4))
        // INTEGER PRIMARY KEY DESC is not the rowid and may hold text: it keeps quote().
        try a.exec("INSERT INTO d VALUES ('abc', 'x'), (7, 'y')")
        #expect(try Self.log(a, "d") == ["'abc' 1", "7 1"])
        #expect(b.apply(try a.exportFile()).status == .applied)
        try expectSameData(a, b)

        // The rowid alias changes when the rowid is set under any of its names.
        try a.exec("UPDATE n SET rowid = 6 WHERE id = -5")
        try a.exec("UPDATE n SET oid = 7, v = 'x2' WHERE id = 6")
        try a.exec("UPDATE n SET _rowid_ = 8 WHERE id = 7")
        try a.exec("UPDATE n SET v = 'y2' WHERE id = 0")
        try a.exec("DELETE FROM n WHERE id = 9223372036854775807")
        #expect(try Self.log(a, "n") == ["-5 3", "6 1", "6 3", "7 1", "7 3", "8 1", "0 2", "9223372036854775807 3"])
        #expect(b.apply(try a.exportFile()).status == .applied)
        try expectSameData(a, b)
        #expect(try b.rows("SELECT id, v FROM n ORDER BY id") == [[.integer(-9223372036854775808), .text("w")], [.integer(0), .text("y2")],
                                                                 [.integer(8), .text("x2")]])
    }

    @Test func tableOfKeyColumnsOnly_capturesInsertsDeletesAndKeyChanges() throws {
        let box = try Sandbox("capture-keysonly")
        let url = try Self.base(box, """
            CREATE TABLE tags(thing TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (thing, tag));
            INSERT INTO tags VALUES ('t1', 'red'), ('t1', 'blue');
            """)
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        // No update trigger: an update can only change the key.
        #expect(try a.value("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = 'rtsync_upd_' || ?", [.integer(try Self.tid(a, "tags"))]) == .integer(0))
        try a.exec("UPDATE tags SET tag = tag")
        #expect(try a.db.pendingChangeCount() == 0)
        try a.exec("UPDATE tags SET tag = 'green' WHERE tag = 'red'")
        try a.exec("INSERT INTO tags VALUES ('t2', 'it''s')")
        try a.exec("DELETE FROM tags WHERE tag = 'blue'")
        #expect(try Self.log(a, "tags") == ["'t1','red' 3", "'t1','green' 1", "'t2','it''s' 1", "'t1','blue' 3"])
        #expect(b.apply(try a.exportFile()).status == .applied)
        try expectSameData(a, b)
    }

    @Test func tableWiderThan62Columns_recordsExactlyTheChangedColumns() throws {
        let box = try Sandbox("capture-wide")
        let names = (1...70).map { "c\($0)" }
        // The key sits in the middle, so the text mask has a '0' for it between compared columns.
        let columns = names.enumerated().map { $0.offset == 40 ? "\($0.element) TEXT PRIMARY KEY NOT NULL" : "\($0.element) INTEGER" }
        let url = try Self.base(box, """
            CREATE TABLE wide(\(columns.joined(separator: ", ")));
            INSERT INTO wide(c41, c1, c70) VALUES ('k', 1, 70);
            """)
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        try a.exec("UPDATE wide SET c1 = 2, c40 = 40, c42 = 42, c70 = 70 WHERE c41 = 'k'")
        let mask = try #require(try a.value("SELECT cols FROM rtsync_changes"))
        guard case .text(let bits) = mask else { Issue.record("expected a text mask past 62 columns, got \(mask)"); return }
        #expect(bits.count == 70)
        #expect(bits == "1" + String(repeating: "0", count: 38) + "101" + String(repeating: "0", count: 28))
        let changes = try Self.changes(try a.exportFile())
        #expect(changes.count == 1)
        #expect(changes.first?.changedColumns == ["c1", "c40", "c42"])
        // An update that changes nothing exports nothing.
        try a.exec("UPDATE wide SET c1 = c1, c70 = 70")
        #expect(try a.export() == nil)
        #expect(b.apply(try #require(try a.outboxFiles().last)).status == .applied)
        try expectSameData(a, b)
    }

    @Test func trackAgain_replacesTriggersOfAnOlderVersion() throws {
        let box = try Sandbox("capture-upgrade")
        let url = try Self.base(box, "CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, body TEXT); INSERT INTO notes VALUES ('a', 'x');")
        let a = try box.replica("A", source: url)
        let tid = try Self.tid(a, "notes")
        // The four triggers as an earlier rtsync made them (every UPDATE fired two triggers).
        for kind in ["ins", "upd", "key", "del"] { try a.exec("DROP TRIGGER rtsync_\(kind)_\(tid)") }
        try a.exec("""
            CREATE TRIGGER rtsync_ins_\(tid) AFTER INSERT ON "notes" BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), quote(NEW."id"), 1, NULL); END;
            CREATE TRIGGER rtsync_upd_\(tid) AFTER UPDATE ON "notes" WHEN OLD."id" IS NEW."id" BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), quote(NEW."id"), 2, (OLD."id" IS NOT NEW."id") | ((OLD."body" IS NOT NEW."body") << 1)); END;
            CREATE TRIGGER rtsync_key_\(tid) AFTER UPDATE ON "notes" WHEN NOT (OLD."id" IS NEW."id") BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), quote(OLD."id"), 3, NULL);
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), quote(NEW."id"), 1, NULL); END;
            CREATE TRIGGER rtsync_del_\(tid) AFTER DELETE ON "notes" BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), quote(OLD."id"), 3, NULL); END;
            """)
        // A change the old triggers recorded is still exported after the upgrade.
        try a.exec("UPDATE notes SET body = 'y'")
        try a.db.track()
        let triggers = try a.rows("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'notes' ORDER BY name")
        #expect(triggers.compactMap { $0[0].string } == ["rtsync_del_\(tid)", "rtsync_ins_\(tid)", "rtsync_key_\(tid)", "rtsync_rep_\(tid)", "rtsync_upd_\(tid)"])
        #expect(triggers.allSatisfy { ($0[1].string ?? "").contains("INSERT INTO rtsync_changes") })
        #expect(triggers.filter { ($0[1].string ?? "").contains("AFTER UPDATE OF") }.count == 1, "only the key trigger names columns")
        try a.exec("UPDATE notes SET id = 'b'")
        #expect(try Self.log(a, "notes") == ["'a' 2", "'a' 3", "'b' 1"])
        let changes = try Self.changes(try a.exportFile())
        #expect(changes.map { "\($0.operation) \($0.values[0].sqlLiteral)" } == ["delete 'a'", "upsert 'b'"])
    }
}
