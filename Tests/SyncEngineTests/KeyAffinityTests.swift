import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Incoming keys are matched as SQLite matches them: a key sent in another storage class than the local column
/// holds (`'1'` for an INTEGER key, `1` for a TEXT key) is the same row, and the merge rules apply to it.
@Suite("Keys in another storage class")
struct KeyAffinityTests {
    static let schema = """
        CREATE TABLE notes(id INTEGER PRIMARY KEY NOT NULL, body TEXT);
        CREATE TABLE tags(name TEXT PRIMARY KEY NOT NULL, color TEXT);
        INSERT INTO notes VALUES (1, 'one'), (4, 'four');
        INSERT INTO tags VALUES ('1', 'red');
        """

    static func device(_ box: Sandbox) throws -> Replica {
        let url = box.path("base.sqlite")
        let c = try Connection(path: url.path)
        try c.execute(Self.schema)
        return try box.replica("B", source: url)
    }

    /// A diff from another device, written by hand: `table` declared with `keyType`, one row of `values`
    /// stamped with the given clock (born at the zero clock, as rows that predate tracking are).
    static func forgedDiff(_ box: Sandbox, table: String, keyType: String, valueColumn: String, values: [SQLValue], hlc: Int64,
                           changed: [String]? = nil, operation: RowOperation = .upsert) throws -> URL {
        let folder = box.path("forged-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let keyName = table == "notes" ? "id" : "name"
        let def = TableDefinition(name: table, columns: [ColumnDefinition(name: keyName, type: keyType, notNull: true, primaryKey: 1),
                                                         ColumnDefinition(name: valueColumn, type: "TEXT")])
        let w = try DiffWriter(directory: folder, kind: .changes, authorUser: "user-B", authorSite: "site-X", sequence: 1...1)
        try w.addTable(def)
        let clock = Clock(hlc: HLC(rawValue: hlc), site: "site-X")
        try w.append(RowChange(table: table, operation: operation, values: values, changedColumns: changed, clock: clock, born: .zero))
        return try w.finish()
    }

    @Test func integerKeySentAsText_meetsTheLocalUnexportedEdit_andLosesToIt() throws {
        let box = try Sandbox("key-affinity-text")
        let b = try Self.device(box)
        try b.exec("UPDATE notes SET body = 'newer, here' WHERE id = 1")
        let diff = try Self.forgedDiff(box, table: "notes", keyType: "TEXT", valueColumn: "body", values: [.text("1"), .text("old, 1970")],
                                       hlc: HLC(milliseconds: 1000, counter: 0).rawValue, changed: ["body"])
        let report = b.apply(diff)
        #expect(report.status == .applied, "\(report.reason ?? "")")
        #expect(try b.rows("SELECT id, typeof(id), body FROM notes WHERE id = 1") == [[.integer(1), .text("integer"), .text("newer, here")]])
        let conflicts = try b.conflicts()
        #expect(conflicts.count == 1 && conflicts.first?.winner == "local" && conflicts.first?.key == "1", "\(conflicts)")
        #expect(try b.value("SELECT count(*) FROM rtsync_rows WHERE typeof(pk) <> 'text' OR pk = '''1'''") == .integer(0), "bookkeeping keyed by the local key text")
    }

    @Test func textKeySentAsNumber_isTheSameRow() throws {
        let box = try Sandbox("key-affinity-number")
        let b = try Self.device(box)
        let diff = try Self.forgedDiff(box, table: "tags", keyType: "INTEGER", valueColumn: "color", values: [.integer(1), .text("blue")],
                                       hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0).rawValue, changed: ["color"])
        #expect(b.apply(diff).status == .applied)
        #expect(try b.rows("SELECT name, typeof(name), color FROM tags") == [[.text("1"), .text("text"), .text("blue")]])
    }

    @Test(arguments: [SQLValue.text(" 4"), .text("4.0"), .text("4e0")])
    func keyThatWouldChangeWhenStored_rejectsTheDiff_databaseUnchanged(key: SQLValue) throws {
        let box = try Sandbox("key-affinity-lossy")
        let b = try Self.device(box)
        let before = try b.fullDump()
        let diff = try Self.forgedDiff(box, table: "notes", keyType: "TEXT", valueColumn: "body", values: [key, .text("x")],
                                       hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0).rawValue, changed: ["body"])
        let report = b.apply(diff)
        #expect(report.status == .rejected)
        #expect(report.reason?.contains("would change when stored") == true, "\(report.reason ?? "")")
        #expect(try b.fullDump() == before)
    }

    @Test func deleteOfIntegerKeySentAsReal_deletesTheRow() throws {
        let box = try Sandbox("key-affinity-real")
        let b = try Self.device(box)
        let diff = try Self.forgedDiff(box, table: "notes", keyType: "", valueColumn: "body", values: [.real(4.0), .null],
                                       hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0).rawValue, operation: .delete)
        #expect(b.apply(diff).status == .applied)
        #expect(try b.rows("SELECT id FROM notes ORDER BY id") == [[.integer(1)]])
    }

    @Test func affinityRules_followSQLite() throws {
        // What SQLite itself stores, for each affinity and value, against KeyAffinity.normalize (which may refuse a
        // value SQLite would change, never give another one).
        let c = try Connection(path: ":memory:")
        // Upper, lower and mixed case, and the rules' order ("floating point" holds INT, "CHARINT" both).
        let types = ["INTEGER", "TEXT", "BLOB", "REAL", "NUMERIC", "VARCHAR(10)", "DOUBLE", "", "int", "BigInt", "floating point",
                     "varchar(10)", "Clob", "doubLE precision", "Float", "real", "blob", "CHARINT", "decimal(10,5)", "xyz", "boolean",
                     "nchar(5)", "unsigned big int", "datetime"]
        try c.execute("CREATE TABLE t(" + types.enumerated().map { "c\($0.offset) \($0.element)" }.joined(separator: ", ") + ")")
        let values: [SQLValue] = [.integer(7), .real(7.0), .real(7.5), .text("7"), .text("abc"), .text("-12"), .integer(-3)]
        for v in values {
            try c.execute("DELETE FROM t")
            try c.execute("INSERT INTO t VALUES (" + types.map { _ in "?" }.joined(separator: ", ") + ")", Array(repeating: v, count: types.count))
            let stored = try #require(try c.rows("SELECT * FROM t").first)
            for (i, type) in types.enumerated() {
                let ours = try KeyAffinity(declaredType: type).normalize(v) { d in try c.scalar("SELECT CAST(? AS TEXT)", [.real(d)])?.string ?? "" }
                if let ours {
                    #expect(ours == stored[i], "\(v) into \(type): SQLite stores \(stored[i]), normalize gives \(ours)")
                } else {
                    #expect(stored[i] != v, "\(v) into \(type) is refused although SQLite stores it unchanged")
                }
            }
        }
    }
}

/// INSERT OR REPLACE from a connection without recursive triggers (the sqlite3 shell, most apps) deletes rows
/// without firing delete triggers: those deletes are captured all the same, and what REPLACE, UPSERT or an
/// ignored insert leaves in place is not sent as a delete.
@Suite("REPLACE and unique indexes")
struct ReplaceCaptureTests {
    static func device(_ box: Sandbox, _ name: String, base: URL) throws -> Replica { try box.replica(name, source: base) }

    static func base(_ box: Sandbox) throws -> URL {
        let url = box.path("base.sqlite")
        let c = try Connection(path: url.path)
        try c.execute("""
            CREATE TABLE items(id TEXT PRIMARY KEY NOT NULL, code TEXT, v TEXT);
            CREATE UNIQUE INDEX items_code ON items(code);
            INSERT INTO items VALUES ('a', 'A', 'one'), ('b', 'B', 'two');
            """)
        return url
    }

    /// Writes through a second connection with SQLite's defaults (recursive_triggers off), like the sqlite3 shell.
    static func plainWrite(_ r: Replica, _ sql: String) throws {
        let c = try Connection(path: r.dbURL.path, mode: .readWrite)
        c.setBusyTimeout(milliseconds: 5_000)
        try c.execute(sql)
    }

    @Test func replaceTakingAnotherRowsUniqueValue_capturesThatRowsDelete() throws {
        let box = try Sandbox("replace-unique")
        let url = try Self.base(box)
        let a = try Self.device(box, "A", base: url), b = try Self.device(box, "B", base: url)
        try Self.plainWrite(a, "INSERT OR REPLACE INTO items VALUES ('c', 'B', 'three')")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.rows("SELECT id, code FROM items ORDER BY id") == [[.text("a"), .text("A")], [.text("c"), .text("B")]])
        try expectSameData(a, b)
    }

    @Test func replaceOfRowPredatingTracking_thenDelete_sendsTheDelete() throws {
        let box = try Sandbox("replace-then-delete")
        let url = try Self.base(box)
        let a = try Self.device(box, "A", base: url), b = try Self.device(box, "B", base: url)
        try Self.plainWrite(a, "INSERT OR REPLACE INTO items VALUES ('a', 'A', 'replaced'); DELETE FROM items WHERE id = 'a'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.rows("SELECT id FROM items ORDER BY id") == [[.text("b")]])
    }

    @Test func ignoredInsertAndUpsert_sendNoDelete() throws {
        let box = try Sandbox("replace-ignored")
        let url = try Self.base(box)
        let a = try Self.device(box, "A", base: url), b = try Self.device(box, "B", base: url)
        try Self.plainWrite(a, """
            INSERT OR IGNORE INTO items VALUES ('x', 'A', 'ignored');
            INSERT INTO items VALUES ('b', 'B', 'upserted') ON CONFLICT(id) DO UPDATE SET v = excluded.v;
            """)
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.rows("SELECT id, v FROM items ORDER BY id") == [[.text("a"), .text("one")], [.text("b"), .text("upserted")]])
        try expectSameData(a, b)
    }

    /// Two devices give different keys the same value of a column under a CREATE UNIQUE INDEX: the row created
    /// first keeps it on both, instead of both diffs being rejected.
    @Test func uniqueIndexCollision_rowCreatedFirstKeepsTheValue_onBoth() throws {
        let box = try Sandbox("unique-index")
        let url = try Self.base(box)
        let a = try Self.device(box, "A", base: url), b = try Self.device(box, "B", base: url)
        try a.exec("INSERT INTO items VALUES ('from-a', 'Z', 'a')")
        tick()
        try b.exec("INSERT INTO items VALUES ('from-b', 'Z', 'b')")
        let fa = try a.exportFile(), fb = try b.exportFile()
        #expect(a.apply(fb).status == .applied)
        #expect(b.apply(fa).status == .applied)
        // The loser's removal travels as a change of its own (one more exchange).
        if let more = try b.export() { #expect(a.apply(URL(fileURLWithPath: more.file)).status == .applied) }
        if let more = try a.export() { #expect(b.apply(URL(fileURLWithPath: more.file)).status == .applied) }
        for r in [a, b] { #expect(try r.rows("SELECT id FROM items WHERE code = 'Z'") == [[.text("from-a")]], "\(r.name)") }
        try expectSameData(a, b)
    }
}
