import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

@Suite("Change tracking and export")
struct TrackingTests {
    @Test func track_runTwice_isHarmlessAndKeepsSiteID() throws {
        let box = try Sandbox("track")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let site = try a.db.siteID()
        let first = try a.db.trackedTables().map(\.name)
        try a.db.track()
        try a.db.track()
        #expect(try a.db.siteID() == site)
        #expect(try a.db.trackedTables().map(\.name) == first)
        #expect(first == ["accounts", "evidence", "owners", "requests", "things", "translations"])
        // One set of triggers per table, not duplicates: five, or four for a table of key columns only
        // (owners), which has no update trigger.
        let triggers = try a.value("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'rtsync_%'")
        let keyOnly = try a.value("SELECT count(*) FROM rtsync_tracked t WHERE NOT EXISTS (SELECT 1 FROM pragma_table_info(t.name) WHERE pk = 0)")
        #expect(keyOnly == .integer(1))
        #expect(triggers == .integer(Int64(5 * first.count - 1)))
        // Still captures exactly one change per write.
        try a.exec("UPDATE things SET color = 'red' WHERE id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'")
        #expect(try a.db.pendingChangeCount() == 1)
    }

    @Test func siteID_reopenedDatabase_staysTheSame() throws {
        let box = try Sandbox("site")
        let a = try box.replica("A", fixture: "routines-logs")
        let site = try a.db.siteID()
        #expect(!site.isEmpty)
        let reopened = try SyncDatabase(path: a.dbURL.path)
        try reopened.track()
        #expect(try reopened.siteID() == site)
        let b = try box.replica("B", fixture: "routines-logs")
        #expect(try b.db.siteID() != site)
    }

    /// Found by a diff fuzzer: SQLite folds only ASCII letters, so `étab` and `ÉTAB` (or two such columns) are
    /// distinct to it; every reader rejected the diffs holding both, while the writer recorded them as sent.
    @Test func track_namesDifferingOnlyInNonASCIICase_areRefusedWithReason() throws {
        let box = try Sandbox("non-ascii-case")
        let a = try box.replica("A", fixture: "routines-logs")
        try a.exec(#"CREATE TABLE "étab"(id TEXT PRIMARY KEY NOT NULL, v TEXT); CREATE TABLE "ÉTAB"(id TEXT PRIMARY KEY NOT NULL, w INTEGER)"#)
        try a.exec(#"CREATE TABLE pair(id TEXT PRIMARY KEY NOT NULL, "é" TEXT, "É" TEXT)"#)
        var refused: [String] = []
        for table in ["étab", "ÉTAB", "pair"] {
            do {
                try a.db.track(tables: [table])
            } catch SyncEngineError.untrackableTable(let name, let reason, let hint) {
                #expect(reason.contains("non-ASCII"), "\(reason)")
                #expect(hint.contains("rename"))
                refused.append(name)
            }
        }
        #expect(refused.count == 2 && refused.contains("pair"), "one of étab and ÉTAB is tracked, the other and pair refused: \(refused)")
        let tracked = try a.db.trackedTables().map(\.name)
        #expect(!tracked.contains("pair") && tracked.filter { ["étab", "ÉTAB"].contains($0) }.count == 1, "\(tracked)")
    }

    @Test func track_tableWithoutPrimaryKey_isRefusedWithReason() throws {
        let box = try Sandbox("nopk")
        let a = try box.replica("A", fixture: "routines-logs")
        try a.exec("CREATE TABLE notes(body TEXT, at TEXT)")
        do {
            try a.db.track(tables: ["notes"])
            Issue.record("tracking a table without a primary key succeeded")
        } catch let error as SyncEngineError {
            guard case .untrackableTable(let table, let reason, let hint) = error else {
                Issue.record("unexpected error \(error)"); return
            }
            #expect(table == "notes")
            #expect(reason.contains("PRIMARY KEY"))
            #expect(hint.contains("PRIMARY KEY"))
        }
        #expect(try !a.db.trackedTables().map(\.name).contains("notes"))
        // track --all refuses as a whole too, naming the table.
        #expect(throws: SyncEngineError.self) { try a.db.track() }
    }

    /// A key column compared under NOCASE or RTRIM while its PRIMARY KEY declares another collation: rows are found
    /// with `k = ?`, under the column's collation, so 'abc' and 'ABC' (two keys) would be one row to rtsync. Refused
    /// when a table starts being tracked; the reverse (a BINARY column under a NOCASE key) and a collation declared
    /// on the column alone are tracked; running track again over such a table tracked before (as a version before
    /// this check tracked it) stays harmless.
    @Test func track_keyColumnCollatedOtherThanItsPrimaryKey_isRefusedWithReason() throws {
        let box = try Sandbox("key-collation")
        let source = box.path("source.sqlite")
        try Connection(path: source.path).execute("CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT)")
        let a = try Replica(name: "A", source: source, in: box, user: "u", track: false)
        try a.db.track(tables: ["notes"])  // not --all: a table created later is tracked when named
        for (table, collation) in [("p", "NOCASE"), ("q", "RTRIM")] {
            try a.exec("CREATE TABLE \(table)(k TEXT COLLATE \(collation), n INTEGER, v TEXT, PRIMARY KEY (k COLLATE BINARY, n))")
            do {
                try a.db.track(tables: [table])
                Issue.record("tracking \(table) succeeded")
            } catch SyncEngineError.untrackableTable(let name, let reason, let hint) {
                #expect(name == table && reason.contains("'k' compares with COLLATE \(collation)") && reason.contains("declares COLLATE BINARY"), "\(reason)")
                #expect(hint.contains("declare the collation on the column itself"), "\(hint)")
            }
        }
        try a.exec("CREATE TABLE r(k TEXT, v TEXT, PRIMARY KEY (k COLLATE NOCASE))")
        try a.exec("CREATE TABLE s(k TEXT COLLATE NOCASE PRIMARY KEY, v TEXT)")
        try a.db.track(tables: ["r", "s"])
        // Tracked by `--all` after its creation (at the next export), then track again: harmless.
        // `track --all` refuses as a whole while such a table is untracked.
        #expect(throws: SyncEngineError.self) { try a.db.track() }
        try a.exec("DROP TABLE p; DROP TABLE q")
        try a.db.track()
        try a.createTableTrackedLater("CREATE TABLE q(k TEXT COLLATE RTRIM, v TEXT, PRIMARY KEY (k COLLATE BINARY))")
        #expect(try a.db.trackedTables().map(\.name).contains("q"))
        try a.db.track()
        try a.db.track(tables: ["q"])
    }

    @Test func untrack_removesTriggersAndBookkeeping_keepsRows() throws {
        let box = try Sandbox("untrack")
        let a = try box.replica("A", fixture: "record-thing-demo")
        try a.exec("UPDATE things SET title = 'Cans' WHERE id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'")
        _ = try a.export()
        let before = try a.dump()
        try a.db.untrack()
        let leftovers = try a.rows("SELECT type, name FROM sqlite_schema WHERE name LIKE 'rtsync%'")
        #expect(leftovers.isEmpty, "left behind: \(leftovers)")
        #expect(!a.db.isTracked)
        #expect(try a.dump() == before)
        // Writes are no longer captured anywhere, and they still work.
        try a.exec("UPDATE things SET title = 'Headphones' WHERE id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'")
        #expect(try a.value("SELECT title FROM things WHERE id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'") == .text("Headphones"))
        #expect(throws: SyncEngineError.self) { try a.db.pendingChangeCount() }
    }

    @Test func writesFromSecondConnection_areCapturedAndExported() throws {
        let box = try Sandbox("secondconn")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        do {
            let other = try Connection(path: a.dbURL.path, mode: .readWrite)
            try other.execute("UPDATE translations SET value = 'Sachen' WHERE lang = 'de' AND key = 'ui.things'")
            try other.execute("INSERT INTO translations VALUES ('fr', 'ui.things', 'Choses', 'ui')")
        }
        #expect(try a.db.pendingChangeCount() == 2)
        let file = try a.exportFile()
        #expect(b.apply(file).status == .applied)
        #expect(try b.value("SELECT value FROM translations WHERE lang = 'de' AND key = 'ui.things'") == .text("Sachen"))
        #expect(try b.value("SELECT value FROM translations WHERE lang = 'fr' AND key = 'ui.things'") == .text("Choses"))
    }

    @Test func export_nothingPending_returnsNilAndWritesNoFile() throws {
        let box = try Sandbox("empty")
        let a = try box.replica("A", fixture: "routines-logs")
        #expect(try a.export() == nil)
        #expect(try a.outboxFiles().isEmpty)
        try a.exec("UPDATE logs SET message = 'ran 6 km' WHERE id = '2siG1aaaaaaaaaaaaaaaaaaaaaa'")
        #expect(try a.export() != nil)
        #expect(try a.export() == nil)
        #expect(try a.outboxFiles().count == 1)
        // An update that changes nothing is not a change either.
        try a.exec("UPDATE logs SET message = message")
        #expect(try a.export() == nil)
        #expect(try a.outboxFiles().count == 1)
    }

    @Test func export_insertThenDeleteOfNewRow_exportsNothing() throws {
        let box = try Sandbox("insdel")
        let a = try box.replica("A", fixture: "routines-logs")
        try a.exec("INSERT INTO logs VALUES ('2siG1ccccccccccccccccccccc', NULL, 'userA', '2025-01-02T07:00:00Z', 'tmp')")
        try a.exec("UPDATE logs SET message = 'tmp2' WHERE id = '2siG1ccccccccccccccccccccc'")
        try a.exec("DELETE FROM logs WHERE id = '2siG1ccccccccccccccccccccc'")
        #expect(try a.db.pendingChangeCount() == 3)
        #expect(try a.export() == nil)
        #expect(try a.outboxFiles().isEmpty)
        #expect(try a.db.pendingChangeCount() == 0)
    }

    @Test func export_severalUpdatesToOneRow_coalesceToOneChangeWithUnionOfColumns() throws {
        let box = try Sandbox("coalesce")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let key = "id = '2siF0NDzx8GWL1tBd6vx9shlVBj'"
        try a.exec("UPDATE things SET color = 'gold' WHERE \(key)")
        try a.exec("UPDATE things SET title = 'Notebook' WHERE \(key)")
        try a.exec("UPDATE things SET color = 'space grey' WHERE \(key)")
        let result = try #require(try a.export())
        #expect(result.rows == 1)
        let changes = try DiffReader(url: URL(fileURLWithPath: result.file)).changes()
        #expect(changes.count == 1)
        let change = try #require(changes.first)
        #expect(change.operation == .upsert)
        #expect(Set(change.changedColumns ?? []) == ["color", "title"])
        let def = try #require(try DiffReader(url: URL(fileURLWithPath: result.file)).tables.first { $0.name == "things" })
        #expect(change.values[try #require(def.columnIndex("color"))] == .text("space grey"))
        #expect(change.values[try #require(def.columnIndex("title"))] == .text("Notebook"))
    }
}
