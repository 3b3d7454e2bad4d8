import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

@Suite("Hostile diffs")
struct HostileDiffTests {
    /// A diff for `notes` whose extra column names try to break out of identifier quoting: a `"` followed by a
    /// combining mark (one Swift Character, but still a quote byte to SQLite), a comment opener, and a default
    /// literal that would close the comment and run COMMIT; DELETE FROM notes; BEGIN.
    func hostileDiff(in dir: URL) throws -> URL {
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let writer = try DiffWriter(directory: dir, kind: .changes, authorUser: "mallory", authorSite: "evil-site", expectedRows: 1)
        let c1 = "a\"\u{301} /* ", c2 = "*/ FROM notes WHERE rowid = ? --"
        try writer.addTable(TableDefinition(name: "notes", columns: [
            ColumnDefinition(name: "id", type: "TEXT", primaryKey: 1),
            ColumnDefinition(name: "body", type: "TEXT"),
            ColumnDefinition(name: c1, type: "TEXT", defaultValue: "'*/ ; COMMIT; DELETE FROM notes; BEGIN; --'"),
            ColumnDefinition(name: c2, type: "TEXT"),
        ]))
        let clock = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: "evil-site")
        try writer.append(RowChange(table: "notes", operation: .upsert, values: [.text("n9"), .text("hi"), .text("x"), .text("y")],
                                    clock: clock, born: clock))
        return try writer.finish()
    }

    @Test func columnNamesWithQuoteAndCombiningMark_neverRunSQL_rowsIntactAndNamesLiteral() throws {
        let box = try Sandbox("hostile-names")
        let path = box.path("local.sqlite")
        do {
            let c = try Connection(path: path.path)
            try c.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT); INSERT INTO notes VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three')")
        }
        let db = try SyncDatabase(path: path.path)
        try db.track(tables: ["notes"])
        try db.setPolicy(TablePolicy(addColumns: true), for: "notes")  // the names reach ALTER TABLE
        let report = db.apply(diff: try hostileDiff(in: box.path("in")), quarantine: box.path("q"))

        // Whatever the outcome, the DELETE smuggled in the names never ran and the transaction held.
        let ids = try db.query("SELECT id FROM notes ORDER BY id").compactMap { $0[0].string }
        #expect(ids.starts(with: ["n1", "n2", "n3"]), "rows: \(ids), report: \(report)")
        if report.status == .applied {
            let columns = try db.query("SELECT name FROM pragma_table_info('notes')").compactMap { $0[0].string }
            let c1 = "a\"\u{301} /* ", c2 = "*/ FROM notes WHERE rowid = ? --"
            #expect(columns.contains(c1))
            #expect(columns.contains(c2))
            #expect(ids == ["n1", "n2", "n3", "n9"])
        }
    }

    @Test func quoteIdentifier_quoteFollowedByCombiningMark_isDoubledByteForByte() {
        let name = "a\"\u{301}b", expectedName = "\"a\"\"\u{301}b\""
        let text = "it'\u{301}s", expectedText = "'it''\u{301}s'"
        let quotedName = Array(quoteIdentifier(name).utf8), quotedText = Array(quoteLiteral(text).utf8)
        #expect(quotedName == Array(expectedName.utf8))
        #expect(quotedText == Array(expectedText.utf8))
    }

    @Test func createTableSQL_literalDefaultWithQuoteAndCombiningMark_isDropped() throws {
        let def = TableDefinition(name: "t", columns: [
            ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
            ColumnDefinition(name: "v", type: "TEXT", defaultValue: "'x'\u{301}); DROP TABLE t; --'"),
        ])
        let sql = try def.createTableSQL()
        let smuggled = sql.contains("DROP TABLE")
        #expect(!smuggled, "\(sql)")
    }
}

@Suite("Untracked tables")
struct UntrackedTableTests {
    @Test func diffNamingExistingUntrackedTable_isRejected_andTableUntouched() throws {
        let box = try Sandbox("untracked")
        let sender = box.path("sender.sqlite"), receiver = box.path("receiver.sqlite")
        for path in [sender, receiver] {
            let c = try Connection(path: path.path)
            try c.execute("CREATE TABLE shared (id TEXT PRIMARY KEY, v TEXT); CREATE TABLE secrets (id TEXT PRIMARY KEY, v TEXT); INSERT INTO secrets VALUES ('s1', 'mine')")
        }
        let a = try SyncDatabase(path: sender.path)
        try a.track(tables: ["shared", "secrets"])
        try a.execute("UPDATE secrets SET v = 'overwritten' WHERE id = 's1'")
        let diff = try #require(try a.exportChanges(to: box.path("out")))
        let b = try SyncDatabase(path: receiver.path)
        try b.track(tables: ["shared"])  // secrets stays local-only here

        let report = b.apply(diff: URL(fileURLWithPath: diff.file), quarantine: box.path("q"))
        #expect(report.status == .rejected)
        #expect(report.reason?.contains("not tracked") == true)
        #expect(try b.query("SELECT v FROM secrets WHERE id = 's1'").first?.first == .text("mine"))
        #expect(try b.trackedTables().map(\.name) == ["shared"])
    }
}

@Suite("Clock bounds")
struct ClockBoundTests {
    @Test func diffWithClockTwoDaysAhead_isRejected_andDatabaseUnchanged() throws {
        let box = try Sandbox("future-clock")
        let db = try notesDatabase(box)
        let writer = try incomingWriter(box, site: "skewed")
        try writer.addTable(notesTable())
        let future = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds() + 2 * 86_400_000, counter: 0), site: "skewed")
        try writer.append(RowChange(table: "notes", operation: .upsert, values: [.text("n1"), .text("from the future")],
                                    changedColumns: ["body"], clock: future, born: .zero))
        let report = db.apply(diff: try writer.finish(), quarantine: box.path("q"))
        #expect(report.status == .rejected)
        #expect(report.reason?.contains("more than a day ahead") == true)
        #expect(try db.query("SELECT body FROM notes").first?.first == .text("one"))
    }
}

@Suite("Table name case")
struct TableNameCaseTests {
    @Test func diffSpellingTableInOtherCase_withNewColumn_addsColumnAndKeepsOneTrackingEntry() throws {
        let box = try Sandbox("name-case")
        let db = try notesDatabase(box)
        try db.setPolicy(TablePolicy(addColumns: true), for: "notes")
        let writer = try incomingWriter(box, site: "other")
        try writer.addTable(notesTable(name: "Notes", extra: [ColumnDefinition(name: "tag", type: "TEXT")]))
        let clock = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: "other")
        try writer.append(RowChange(table: "Notes", operation: .upsert, values: [.text("n2"), .text("two"), .text("x")], clock: clock, born: clock))
        let report = db.apply(diff: try writer.finish(), quarantine: box.path("q"))
        #expect(report.status == .applied, "\(report)")
        #expect(try db.trackedTables().map(\.name) == ["notes"])
        #expect(try db.query("SELECT tag FROM notes WHERE id = 'n2'").first?.first == .text("x"))
        // Capture still works after the column was added (triggers re-made for the new column list).
        try db.execute("UPDATE notes SET tag = 'y' WHERE id = 'n1'")
        #expect(try db.pendingChangeCount() == 1)
    }
}

// MARK: - Shared setup

/// A tracked database with `notes(id TEXT PRIMARY KEY, body TEXT)` holding row n1.
func notesDatabase(_ box: Sandbox) throws -> SyncDatabase {
    let path = box.path("local.sqlite")
    do {
        let c = try Connection(path: path.path)
        try c.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT); INSERT INTO notes VALUES ('n1', 'one')")
    }
    let db = try SyncDatabase(path: path.path)
    try db.track(tables: ["notes"])
    return db
}

/// The `notes` definition as a diff from another device would carry it.
func notesTable(name: String = "notes", extra: [ColumnDefinition] = []) -> TableDefinition {
    TableDefinition(name: name, columns: [ColumnDefinition(name: "id", type: "TEXT", primaryKey: 1), ColumnDefinition(name: "body", type: "TEXT")] + extra)
}

/// A writer for a diff from another device (`site`) in the sandbox's `in` folder.
func incomingWriter(_ box: Sandbox, site: String) throws -> DiffWriter {
    let dir = box.path("in")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return try DiffWriter(directory: dir, kind: .changes, authorUser: "u", authorSite: site, expectedRows: 1)
}
