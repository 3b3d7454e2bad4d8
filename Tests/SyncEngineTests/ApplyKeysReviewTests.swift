import DiffFormat
import Foundation
@testable import RTSQLite
@testable import SyncEngine
import Testing

/// The set paths of apply (`bulkInsert`, `mergeKnownRowsInBulk`) against the per-row merge for unusual keys
/// (written by a review of the apply side): keys of several columns, affinities, collations, encodings. Each test
/// applies the same diff to `Twins` and expects the same report, rows and bookkeeping.
@Suite("Apply: set paths and unusual keys (review)")
struct ApplyKeysReviewTests {
    let k = BulkKnownRowsTests()

    func clock(_ msAgo: Int64, _ site: String = "other") -> Clock { k.clock(msAgo, site) }

    /// A table definition as a diff carries it: (name, type, position in the key).
    func table(_ name: String, _ cols: [(String, String, Int)]) -> TableDefinition {
        TableDefinition(name: name, columns: cols.map { ColumnDefinition(name: $0.0, type: $0.1, primaryKey: $0.2) })
    }

    /// A finished diff of `def` by `site`, with `rows` appended in order.
    func diff(_ box: Sandbox, site: String = "other", seen: [String: Int64] = [:], _ defs: [TableDefinition], _ rows: [RowChange]) throws -> URL {
        let w = try k.writer(box, site: site, seen: seen)
        for d in defs { try w.addTable(d) }
        for r in rows { try w.append(r) }
        return try w.finish()
    }

    func up(_ t: String, _ v: [SQLValue], changed: [String]? = nil, clock: Clock, born: Clock) -> RowChange {
        RowChange(table: t, operation: .upsert, values: v, changedColumns: changed, clock: clock, born: born)
    }

    func del(_ t: String, _ v: [SQLValue], clock: Clock, born: Clock) -> RowChange {
        RowChange(table: t, operation: .delete, values: v, clock: clock, born: born)
    }

    /// Twins made of `sql` (a fresh database; `encoding` set before the tables are made). `trackedLater`: the table
    /// is created after tracking (`Replica.createTableTrackedLater`), as `track` refuses a key column whose collation
    /// differs from its PRIMARY KEY's.
    func twins(_ box: Sandbox, _ sql: String, encoding: String? = nil, trackedLater: Bool = false) throws -> Twins {
        guard trackedLater else { return try Twins(box, try k.device(box, "B", (encoding.map { "PRAGMA encoding = '\($0)';\n" } ?? "") + sql)) }
        let device = try k.device(box, "B", "CREATE TABLE placeholder(id TEXT PRIMARY KEY)")
        try device.createTableTrackedLater(sql)
        return try Twins(box, device)
    }

    // MARK: - Collation of the key column differs from the collation of the primary key

    /// `k` compares NOCASE, the primary key BINARY ('abc' and 'ABC' are two rows). The diff re-inserts 'ABC' (a
    /// tombstone here: left to the per-row merge) and then brings a new row 'abc' (written as a set). In file order,
    /// 'ABC' is inserted, then 'abc' beside it (two rows). Had the set path inserted 'abc' first, the per-row merge of
    /// 'ABC' would find it with `k = ?` (NOCASE) and replace it: a table whose key columns compare other than by
    /// bytes leaves no rows one by one (`keyColumnsCompareOtherThanByBytes`).
    @Test(arguments: ["NOCASE", "RTRIM"])
    func keyColumnNoCase_primaryKeyBinary_leftRowMeetsANewRowOfTheSet(_ collation: String) throws {
        let box = try Sandbox("akr-nocase-pk-binary")
        let sql = "CREATE TABLE t(k TEXT COLLATE \(collation), v TEXT, PRIMARY KEY (k COLLATE BINARY))"
        let abc = collation == "NOCASE" ? "abc" : "ABC "
        let b = try twins(box, sql, trackedLater: true)
        let def = table("t", [("k", "TEXT", 1), ("v", "TEXT", 0)])
        let born = clock(60_000)
        // Rows n0…n19 and ABC, born on "other"; then ABC deleted there.
        try b.apply(try diff(box, [def], (0..<20).map { up("t", [.text("n\($0)"), .text("v\($0)")], clock: born, born: born) }
                                      + [up("t", [.text("ABC"), .text("first")], clock: born, born: born)]))
        try b.apply(try diff(box, [def], [del("t", [.text("ABC"), .null], clock: clock(50_000), born: born)]))
        let reborn = clock(40_000), later = clock(30_000)
        var rows: [RowChange] = [up("t", [.text("ABC"), .text("again")], clock: reborn, born: reborn),
                                 up("t", [.text(abc), .text("new")], clock: later, born: later)]
        rows += (0..<20).map { up("t", [.text("n\($0)"), .text("w\($0)")], changed: ["v"], clock: later, born: born) }
        let r = try b.applyCountingSetRows(try diff(box, [def], rows))
        let bulkRows = try b.bulk.rows("SELECT k, v FROM t WHERE k = 'ABC' ORDER BY k COLLATE BINARY"), perRows = try b.perRow.rows("SELECT k, v FROM t WHERE k = 'ABC' ORDER BY k COLLATE BINARY")
        #expect(bulkRows == perRows, "rows merged as sets: \(r.setRows)")
    }

    /// The same table: a delete of 'ABC', a key never seen here (left to the per-row merge, which keeps a tombstone),
    /// then a new row 'abc'. In file order the delete finds nothing and 'abc' is inserted; had the set path inserted
    /// 'abc' first, the per-row merge of the delete would find it with `k = ?` (NOCASE) and delete it.
    @Test(arguments: ["NOCASE", "RTRIM"])
    func keyColumnNoCase_primaryKeyBinary_leftDeleteMeetsANewRowOfTheSet(_ collation: String) throws {
        let box = try Sandbox("akr-nocase-pk-binary-del")
        let b = try twins(box, "CREATE TABLE t(k TEXT COLLATE \(collation), v TEXT, PRIMARY KEY (k COLLATE BINARY))", trackedLater: true)
        let abc = collation == "NOCASE" ? "abc" : "ABC "
        let def = table("t", [("k", "TEXT", 1), ("v", "TEXT", 0)])
        let born = clock(60_000)
        try b.apply(try diff(box, [def], (0..<20).map { up("t", [.text("n\($0)"), .text("v\($0)")], clock: born, born: born) }))
        let later = clock(30_000)
        var rows: [RowChange] = [del("t", [.text("ABC"), .null], clock: clock(35_000), born: clock(40_000)),
                                 up("t", [.text(abc), .text("new")], clock: later, born: later)]
        rows += (0..<20).map { up("t", [.text("n\($0)"), .text("w\($0)")], changed: ["v"], clock: later, born: born) }
        let r = try b.applyCountingSetRows(try diff(box, [def], rows))
        #expect(try b.bulk.rows("SELECT k, v FROM t WHERE k = 'ABC'") == b.perRow.rows("SELECT k, v FROM t WHERE k = 'ABC'"), "rows merged as sets: \(r.setRows)")
    }

    // MARK: - UTF-16

    /// Two UTF-16 devices with an untyped key (INTEGER and REAL kept apart: `numberKeys`). The sender's set export
    /// attaches its diff to its own connection, so the file is UTF-16 too, and the receiver can attach it. The
    /// set paths built key texts with `keyValueText(utf8: true)`, whose NUL test looks for a zero byte in the
    /// stored bytes: every UTF-16 text has one. A UTF-16 database now attaches no diff: row by row.
    @Test(arguments: ["UTF-16le", "UTF-16be"])
    func utf16Devices_untypedKey_newRowsOfASetExport(_ encoding: String) throws {
        let box = try Sandbox("akr-utf16")
        let sql = "CREATE TABLE t(k PRIMARY KEY, v TEXT)"
        let a = try k.device(box, "A", "PRAGMA encoding = '\(encoding)';\n" + sql)
        a.db.setExportMinimumRows = 1
        let b = try twins(box, sql, encoding: encoding)
        for i in 0..<100 { try a.exec("INSERT INTO t VALUES (?, ?)", [i % 2 == 0 ? .text("n\(i)") : .integer(Int64(i)), .text("v\(i)")]) }
        let file = try a.exportFile()
        #expect(try Connection(path: file.path).scalar("PRAGMA encoding") == .text(encoding), "the set export writes a diff in the device's encoding")
        #expect(a.db.setExportsWritten == 1)
        try b.apply(file)
        // A UTF-16 database is merged row by row: the set paths' SQL reads text as UTF-8 bytes (their key text took
        // every UTF-16 text for one holding a NUL, and filed 'n0' under `J"n0"`).
        #expect(b.bulk.db.bulkRowsWritten == 0)
        #expect(try b.bulk.rows("SELECT pk FROM rtsync_rows ORDER BY pk") == b.perRow.rows("SELECT pk FROM rtsync_rows ORDER BY pk"))
        // A later edit here is captured under the key text the triggers make: it must name the row's bookkeeping.
        for twin in [b.bulk, b.perRow] { try twin.exec("UPDATE t SET v = 'here' WHERE k = 'n0'") }
        #expect(try b.bulk.value("SELECT count(*) FROM rtsync_changes c JOIN rtsync_rows r ON r.tid = c.tid AND r.pk = c.pk") == .integer(1),
                "the local edit of 'n0' names the row's bookkeeping")
    }
    // MARK: - STRICT tables: ANY keeps every storage class

    /// A STRICT table's ANY key column stores 1 and '1' as two keys (the set export's review test sends both). The
    /// receiver took ANY for NUMERIC affinity (`KeyAffinity(declaredType: "ANY")`, right only outside STRICT
    /// tables), so the per-row merge converted '1' to 1 and the two rows became one; ANY in a STRICT table is now
    /// taken as it is (no conversion).
    @Test(arguments: ["CREATE TABLE s(a ANY, b INTEGER, v TEXT, PRIMARY KEY (a, b)) STRICT", "CREATE TABLE s(a ANY PRIMARY KEY, b INTEGER, v TEXT) STRICT"])
    func strictAnyKey_textDigitsAndInteger_areTwoRows(_ sql: String) throws {
        let box = try Sandbox("akr-strict-any")
        let a = try k.device(box, "A", sql)
        let b = try twins(box, sql)
        try a.exec("INSERT INTO s VALUES (1, 1, 'int'), ('1', 1, 'text'), ('x', 2, 'x'), (2.5, 3, 'real')")
        let r = try b.apply(try a.exportFile())
        #expect(r.bulk.status == .applied, "\(r.bulk)")
        try expectSameData(a, b.bulk)
        try expectSameData(a, b.perRow)
    }

    /// The same column given the text '2.5' or the REAL 3.0 (kept as they are by ANY): the receiver rejected the diff
    /// ('2.5' "would change when stored") and stored 3.0 as the INTEGER 3.
    @Test func strictAnyKey_numericLookingText_andIntegralReal() throws {
        let box = try Sandbox("akr-strict-any2")
        let sql = "CREATE TABLE s(a ANY PRIMARY KEY, v TEXT) STRICT"
        for (value, what) in [(SQLValue.text("2.5"), "text 2.5"), (.real(3.0), "real 3.0")] {
            let a = try k.device(box, "A-\(what)", sql)
            let b = try Twins(box, try k.device(box, "B-\(what)", sql))
            try a.exec("INSERT INTO s VALUES (?, 'v')", [value])
            let r = try b.apply(try a.exportFile())
            #expect(r.perRow.status == .applied, "\(what): \(r.perRow.status) \(r.perRow.reason ?? "")")
            let here = try b.perRow.rows("SELECT a, typeof(a) FROM s"), there = try a.rows("SELECT a, typeof(a) FROM s")
            #expect(here == there, "\(what): receiver \(here), sender \(there)")
        }
    }

    // MARK: - Random diffs over unusual keys

    /// A receiver's table and the definition the diffs carry (the sender's: its key types may differ).
    struct KeySchema {
        let sql: String
        let def: TableDefinition
        /// The diff's key columns (by position in `def.columns`).
        var keyPositions: [Int] { def.columns.indices.filter { def.columns[$0].primaryKey > 0 } }
    }

    static func def(_ cols: [(String, String, Int)]) -> TableDefinition {
        TableDefinition(name: "t", columns: cols.map { ColumnDefinition(name: $0.0, type: $0.1, primaryKey: $0.2) })
    }

    static let schemas: [KeySchema] = [
        // Key order unlike column order.
        KeySchema(sql: "CREATE TABLE t(a TEXT, b INTEGER, v TEXT, w INTEGER, PRIMARY KEY (b, a))",
                  def: def([("a", "TEXT", 2), ("b", "INTEGER", 1), ("v", "TEXT", 0), ("w", "INTEGER", 0)])),
        // Untyped and NUMERIC keys, WITHOUT ROWID.
        KeySchema(sql: "CREATE TABLE t(v TEXT, a, b NUMERIC, w, PRIMARY KEY (a, b)) WITHOUT ROWID",
                  def: def([("v", "TEXT", 0), ("a", "", 1), ("b", "NUMERIC", 2), ("w", "", 0)])),
        // Consistent NOCASE and RTRIM keys.
        KeySchema(sql: "CREATE TABLE t(a TEXT COLLATE NOCASE, b TEXT COLLATE RTRIM, v TEXT, w, PRIMARY KEY (a, b))",
                  def: def([("a", "TEXT", 1), ("b", "TEXT", 2), ("v", "TEXT", 0), ("w", "", 0)])),
        // The rowid as key.
        KeySchema(sql: "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, w)", def: def([("id", "INTEGER", 1), ("v", "TEXT", 0), ("w", "", 0)])),
        // Four key columns, one REAL, in reverse order.
        KeySchema(sql: "CREATE TABLE t(a INTEGER, b TEXT, c, d REAL, v TEXT, w, PRIMARY KEY (d, c, b, a))",
                  def: def([("a", "INTEGER", 4), ("b", "TEXT", 3), ("c", "", 2), ("d", "REAL", 1), ("v", "TEXT", 0), ("w", "", 0)])),
        // The sender's key is INTEGER, the receiver's TEXT; and the reverse.
        KeySchema(sql: "CREATE TABLE t(a TEXT, b TEXT, v TEXT, w, PRIMARY KEY (a, b))",
                  def: def([("a", "INTEGER", 1), ("b", "TEXT", 2), ("v", "TEXT", 0), ("w", "", 0)])),
        KeySchema(sql: "CREATE TABLE t(a INT, v TEXT, w, PRIMARY KEY (a)) WITHOUT ROWID", def: def([("a", "TEXT", 1), ("v", "TEXT", 0), ("w", "", 0)])),
        // NOCASE key column with a NOCASE primary key declared on it, and a key with an INTEGER PRIMARY KEY DESC (not the rowid).
        KeySchema(sql: "CREATE TABLE t(a TEXT, b INTEGER, v TEXT, w, PRIMARY KEY (a COLLATE NOCASE, b))",
                  def: def([("a", "TEXT", 1), ("b", "INTEGER", 2), ("v", "TEXT", 0), ("w", "", 0)])),
        KeySchema(sql: "CREATE TABLE t(id INTEGER PRIMARY KEY DESC, v TEXT, w)", def: def([("id", "INTEGER", 1), ("v", "TEXT", 0), ("w", "", 0)])),
    ]

    static let long = String(repeating: "k',", count: 3_000)
    static let keyPool: [SQLValue] = [
        .integer(1), .text("1"), .real(1.0), .integer(12), .text("12"), .text(" 7"), .text("7"), .integer(7), .integer(0), .integer(-1),
        .integer(.max), .integer(.min), .text("a"), .text("A"), .text("a "), .text("it's"), .text("IT'S"), .text(","), .text("','"), .text(""),
        .text("x,y"), .text("NULL"), .blob([0x31]), .blob([]), .real(2.5), .text("2.5"), .text(long), .text(long + "x"), .text("é"), .text("É"),
    ]
    static let valuePool: [SQLValue] = [.null, .integer(1), .text("1"), .real(1.5), .text("v"), .text("V"), .blob([1, 2]), .text(""), .integer(-5), .text("é")]

    /// Seeds of `randomDiffs_twinsAgree`: twins of one device apply random diffs (new rows, updates of one column,
    /// whole rows, deletes, re-inserts, keys twice, keys in other storage classes and letters) by two other devices.
    @Test(arguments: 0..<36)
    func randomDiffs_twinsAgree(seed: Int) throws {
        var g = SeededGenerator(seed: UInt64(seed) &* 7_919 &+ 17)
        let schema = Self.schemas[seed % Self.schemas.count]
        let box = try Sandbox("akr-random-\(seed)")
        let b = try twins(box, schema.sql)
        let keyPositions = schema.keyPositions
        let columns = schema.def.columns
        // The receiver's declared type of each key column of the diff.
        let localTypes: [String] = try keyPositions.map { p in
            try #require(b.bulk.value("SELECT type FROM pragma_table_info('t') WHERE name = ? COLLATE NOCASE", [.text(columns[p].name)])?.string)
        }
        var counter = 0
        // A clean diff has only keys natural for the local columns, no key twice and no key in other letters.
        var dirty = false
        /// A key value natural for a local column declared `type` (now and then one of `keyPool`, which may not be).
        func keyValue(_ type: String) -> SQLValue {
            counter += 1
            let n = Int64(counter)
            if dirty, Int.random(in: 0..<30, using: &g) == 0 { return Self.keyPool.randomElement(using: &g)! }
            let texts: [SQLValue] = [.text("k\(n)"), .text("K\(n)"), .text("it's \(n)"), .text(",\(n)"), .text("'\(n)',"), .text("\(n) "), .text(Self.long + "\(n)"),
                                     .text("É\(n)"), .text(""), .text("\(n)"), .text("x,\(n)")]
            switch KeyAffinity(declaredType: type) {
            case .integer, .numeric: return [.integer(n), .integer(-n), .integer(Int64.max - n)][Int.random(in: 0..<3, using: &g)]
            case .text: return texts.randomElement(using: &g)!
            case .real: return .real(Double(n) + 0.5)
            case .blob: return [.integer(n), .text("\(n)"), .blob([UInt8(n & 0xFF), 0x27]), texts.randomElement(using: &g)!][Int.random(in: 0..<4, using: &g)]
            }
        }
        func key() -> [SQLValue] { localTypes.map(keyValue) }
        func row(_ key: [SQLValue]) -> [SQLValue] {
            var values: [SQLValue] = []
            var k = key.makeIterator()
            for c in columns { values.append(c.primaryKey > 0 ? k.next()! : Self.valuePool.randomElement(using: &g)!) }
            return values
        }
        func keyOf(_ values: [SQLValue]) -> [SQLValue] { keyPositions.map { values[$0] } }
        var known: [(key: [SQLValue], born: Clock)] = []
        var ms: Int64 = 600_000
        func next(_ site: String = "other") -> Clock { ms -= 1_000; return clock(ms, site) }
        var setRows = 0, applied = 0
        // Round 0: new rows.
        let born0 = next()
        var first: [RowChange] = []
        for _ in 0..<40 {
            let kv = key()
            first.append(up("t", row(kv), clock: born0, born: born0))
            known.append((kv, born0))
        }
        var r = try b.applyCountingSetRows(try diff(box, [schema.def], first))
        setRows += r.setRows
        if r.bulk.status == .applied { applied += 1 }
        for round in 1..<6 {
            // Sometimes an unexported local edit of one row, alike on both twins (its clock fixed).
            if Int.random(in: 0..<3, using: &g) == 0 {
                let keys = keyPositions.map { quoteIdentifier(columns[$0].name) }.joined(separator: ", ")
                let offset = Int.random(in: 0..<20, using: &g)
                let edit = Bool.random(using: &g) ? "UPDATE t SET v = 'local' WHERE (\(keys)) IN (SELECT \(keys) FROM t ORDER BY \(keys) LIMIT 1 OFFSET \(offset))"
                    : "DELETE FROM t WHERE (\(keys)) IN (SELECT \(keys) FROM t ORDER BY \(keys) LIMIT 1 OFFSET \(offset))"
                let editClock = HLC(milliseconds: HLC.wallMilliseconds() - ms + 500, counter: 0).rawValue
                for twin in [b.bulk, b.perRow] {
                    try twin.exec(edit)
                    try twin.exec("UPDATE rtsync_changes SET hlc = ?", [.integer(editClock)])
                }
            }
            dirty = Int.random(in: 0..<3, using: &g) == 0
            let site = round % 3 == 2 ? "third" : "other"
            let c = next(site)
            var rows: [RowChange] = []
            // A clean diff names each known key once.
            var unused = known.shuffled(using: &g)
            for _ in 0..<Int.random(in: 20...60, using: &g) {
                var pick = Int.random(in: 0..<20, using: &g)
                if !dirty, pick == 14 || pick == 15 { pick = 0 }
                guard let old = dirty ? known.randomElement(using: &g) : unused.popLast() else { break }
                switch pick {
                case 0..<9:
                    let changed: [String]? = [["v"], ["w"], ["v", "w"], nil, [columns[keyPositions[0]].name, "v"]][Int.random(in: 0..<5, using: &g)]
                    rows.append(up("t", row(old.key), changed: changed, clock: c, born: old.born))
                case 9..<12:
                    rows.append(del("t", row(old.key).map { _ in .null }.enumerated().map { i, v in keyPositions.contains(i) ? old.key[keyPositions.firstIndex(of: i)!] : v }, clock: c, born: old.born))
                case 12..<14:
                    // A re-insert of a known key (a new incarnation).
                    rows.append(up("t", row(old.key), clock: c, born: c))
                case 14..<16:
                    // The key in another storage class or letters.
                    let variant = old.key.map { v -> SQLValue in
                        switch v {
                        case .integer(let n): return [.text(String(n)), .real(Double(n)), v][Int.random(in: 0..<3, using: &g)]
                        case .text(let t): return [.text(t.uppercased()), .text(t + " "), Int64(t).map { .integer($0) } ?? v][Int.random(in: 0..<3, using: &g)]
                        default: return v
                        }
                    }
                    rows.append(up("t", row(variant), changed: ["v"], clock: c, born: old.born))
                default:
                    let kv = key()
                    rows.append(up("t", row(kv), clock: c, born: c))
                    known.append((kv, c))
                }
            }
            // Sometimes one key twice.
            if dirty, Int.random(in: 0..<4, using: &g) == 0, let twice = rows.randomElement(using: &g) { rows.append(twice) }
            let seen: [String: Int64] = Bool.random(using: &g) ? [(site == "other" ? "third" : "other"): c.hlc.rawValue] : [:]
            r = try b.applyCountingSetRows(try diff(box, site: site, seen: seen, [schema.def], rows))
            setRows += r.setRows
            if r.bulk.status == .applied { applied += 1 }
            if ProcessInfo.processInfo.environment["AKR_TRACE"] != nil { print("  seed \(seed) round \(round) dirty \(dirty) rows \(rows.count) set \(r.setRows) \(r.bulk.status) \(r.bulk.reason ?? "")") }
            _ = keyOf
        }
        if ProcessInfo.processInfo.environment["AKR_TRACE"] != nil { print("seed \(seed): applied \(applied) of 6, rows merged as sets \(setRows), new rows in bulk \(b.bulk.db.bulkRowsWritten)") }
    }

    // MARK: - A diff whose carried table declares column types

    /// The reader checks the carried table's column names, not their declared types (rtsync writes none). A diff that
    /// declares `body INTEGER` would give the carried column INTEGER affinity in the set path's `same` test
    /// (`lv IS rv`, `rv` without `+`): the local TEXT '5' would be taken for 5 and differ from the incoming '5'. Held:
    /// the reader's quick_check refuses TEXT that looks like a number in an INTEGER column, so both twins reject it.
    @Test func carriedColumnDeclaredInteger_isRejectedAlike() throws {
        let h = BulkKnownHostileTests()
        let box = try Sandbox("akr-declared-type")
        let born = clock(60_000)
        let b = try h.twins(box, count: 40, born: born)
        try b.apply(try h.diff(box) { w in for i in 0..<40 { try h.update(w, i, body: "5", changed: ["body"], clock: clock(50_000), born: born) } })
        let file = try h.diff(box) { w in for i in 0..<40 { try h.update(w, i, body: "5", changed: ["body"], clock: clock(40_000), born: born) } }
        try h.forge(file) { c in try h.redeclare(c, "notes", "CREATE TABLE \"notes\"(\"id\", \"body\" INTEGER, \"extra\", \"n\")") }
        try h.expectRejectedAlike(b, file, "body declared INTEGER")
    }

    // MARK: - Things that held

    /// The receiver migrates its key column INTEGER → TEXT after receiving rows (its bookkeeping keeps the key texts
    /// of integers), then takes diffs from a sender still on INTEGER and from one that migrated too: updates, deletes
    /// and new rows. The set paths must leave what they cannot match to the per-row merge.
    @Test func receiverMigratedItsKeyColumn_thenDiffsOfBothKeyTypes() throws {
        let box = try Sandbox("akr-migrated")
        let b0 = try k.device(box, "B", "CREATE TABLE m(k INT, v TEXT, w, PRIMARY KEY (k))")
        let intDef = table("m", [("k", "INT", 1), ("v", "TEXT", 0), ("w", "", 0)]), textDef = table("m", [("k", "TEXT", 1), ("v", "TEXT", 0), ("w", "", 0)])
        let born = clock(60_000)
        let b = try Twins(box, b0)
        try b.apply(try diff(box, [intDef], (0..<60).map { up("m", [.integer(Int64($0)), .text("v\($0)"), .null], clock: born, born: born) }))
        for twin in [b.bulk, b.perRow] {
            try twin.db.migrate(sql: "CREATE TABLE m2(k TEXT, v TEXT, w, PRIMARY KEY (k)); INSERT INTO m2 SELECT k, v, w FROM m; DROP TABLE m; ALTER TABLE m2 RENAME TO m;")
        }
        for (def, text) in [(intDef, false), (textDef, true)] {
            let c = clock(text ? 20_000 : 40_000)
            var rows: [RowChange] = []
            for i in 0..<60 {
                let key: SQLValue = text ? .text("\(i)") : .integer(Int64(i))
                switch i % 4 {
                case 0: rows.append(del("m", [key, .null, .null], clock: c, born: born))
                case 1: rows.append(up("m", [key, .text("w\(i)"), .integer(1)], changed: ["v"], clock: c, born: born))
                default: break
                }
            }
            for i in 100..<140 { rows.append(up("m", [text ? .text("\(i)") : .integer(Int64(i)), .text("new"), .null], clock: c, born: c)) }
            let r = try b.applyCountingSetRows(try diff(box, [def], rows))
            #expect(r.bulk.status == .applied, "\(r.bulk)")
        }
    }

    /// UTF-16 devices with typed keys (TEXT and INTEGER: `quote()` key texts, no NUL test), new rows then updates and
    /// deletes from the sender's set exports: as the per-row merge (the set merge of known rows declines UTF-16, whose
    /// texts all look non-ASCII to its byte-length test).
    @Test func utf16Devices_typedCompositeKeys_asThePerRowMerge() throws {
        let box = try Sandbox("akr-utf16-typed")
        let sql = "CREATE TABLE p(a TEXT, v TEXT, b INTEGER, PRIMARY KEY (b, a))"
        let a = try k.device(box, "A", "PRAGMA encoding = 'UTF-16le';\n" + sql)
        a.db.setExportMinimumRows = 1
        let b = try twins(box, sql, encoding: "UTF-16le")
        for i in 0..<80 { try a.exec("INSERT INTO p VALUES (?, ?, ?)", [.text(["x'\(i)", "é\(i)", ",\(i)", ""][i % 4]), .text("v"), .integer(Int64(i))]) }
        try b.apply(try a.exportFile())
        tick()
        try a.exec("UPDATE p SET v = 'w' WHERE b % 2 = 0")
        try a.exec("DELETE FROM p WHERE b % 5 = 0")
        let second = try a.exportFile()
        try b.apply(second)
        try expectSameData(a, b.bulk)
    }
}
