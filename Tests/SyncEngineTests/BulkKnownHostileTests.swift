@testable import DiffFormat
import Foundation
@testable import RTSQLite
@testable import SyncEngine
import Testing

/// Hostile and unusual diffs fed to the set merge of rows a device already has (`mergeKnownRowsInBulk`): each is
/// applied to `Twins` (one copy allowed the set paths, one merging every row) and must give the same report,
/// rows, bookkeeping, clocks and conflicts, or the same rejection with the database unchanged.
@Suite("Hostile diffs against the set merge of known rows")
struct BulkKnownHostileTests {
    let k = BulkKnownRowsTests()
    static let notes = BulkKnownRowsTests.notes
    static let rows = 200

    func clock(_ msAgo: Int64, _ site: String = "other") -> Clock { k.clock(msAgo, site) }

    /// Twins holding notes n0…n(count-1), born at `born` on "other", with bodies long enough to look real.
    func twins(_ box: Sandbox, count: Int = rows, born: Clock, sql: String = BulkKnownRowsTests.schema) throws -> Twins {
        try k.twinsWithNotes(box, count: count, born: born, sql: sql)
    }

    /// A diff writer for `site` (user "u-other").
    func writer(_ box: Sandbox, site: String = "other", seen: [String: Int64] = [:]) throws -> DiffWriter {
        try k.writer(box, site: site, seen: seen)
    }

    func update(_ w: DiffWriter, _ i: Int, body: String, extra: SQLValue? = nil, n: SQLValue? = nil, changed: [String]?, clock: Clock, born: Clock,
                cells: [String: Clock] = [:]) throws {
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n\(i)"), .text(body), extra ?? .text("extra \(i)"), n ?? .integer(Int64(i))],
                               changedColumns: changed, clock: clock, born: born, columnClocks: cells))
    }

    func delete(_ w: DiffWriter, _ i: Int, clock: Clock, born: Clock, cells: [String: Clock] = [:]) throws {
        try w.append(RowChange(table: "notes", operation: .delete, values: [.text("n\(i)"), .null, .null, .null], clock: clock, born: born, columnClocks: cells))
    }

    /// A finished diff of `table` by `site`, filled by `fill` (the writer released before it returns, so the file
    /// can be forged).
    func diff(_ box: Sandbox, site: String = "other", seen: [String: Int64] = [:], table: TableDefinition = notes, _ fill: (DiffWriter) throws -> Void) throws -> URL {
        let w = try writer(box, site: site, seen: seen)
        try w.addTable(table)
        try fill(w)
        return try w.finish()
    }

    /// Opens a finished diff read-write and lets `body` change it.
    func forge(_ url: URL, _ body: (Connection) throws -> Void) throws {
        let c = try Connection(path: url.path, mode: .readWrite)
        try body(c)
    }

    /// Replaces the declared SQL of table `name` in the file (the stored records are left as they are).
    func redeclare(_ c: Connection, _ name: String, _ sql: String) throws {
        try c.execute("PRAGMA writable_schema = ON")
        try c.execute("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?", [.text(sql), .text(name)])
        try c.execute("PRAGMA writable_schema = OFF")
    }

    /// Recomputes and stores the content digest of any diff (tables, rows joined with their carried values, cells),
    /// as a writer would have: a forger's file then fails only on what the reader checks beside the digest.
    func redigest(_ url: URL) throws {
        let db = try Connection(path: url.path, mode: .readWrite)
        // The metadata as the writer stored it (canonical texts), read directly: a forged file may fail the reader.
        let meta = try db.rows("SELECT diff_id, kind, author_user, author_site, seq_first, seq_last, created_at, seen FROM rtsync_meta")[0]
        var tables = CanonicalHasher()
        var names: [Int64: String] = [:]
        for r in try db.rows("SELECT id, name, columns, constraints, schema_hash FROM rtsync_tables ORDER BY id") {
            tables.add(r)
            names[r[0].int64!] = r[1].string!
        }
        var rows = CanonicalHasher()
        for r in try db.rows("SELECT tid, rid, op, born, born_site, hlc, site, changed FROM rtsync_rows ORDER BY rowid") {
            rows.add(r)
            guard let tid = r[0].int64, let name = names[tid] else { continue }
            if let carried = try db.rows("SELECT * FROM \(quoteIdentifier(name)) WHERE rowid = ?", [r[1]]).first { rows.add(carried) }
        }
        var cells = CanonicalHasher()
        if try db.scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'rtsync_cells'")?.int64 == 1 {
            for r in try db.rows("SELECT tid, rid, col, hlc, site FROM rtsync_cells ORDER BY rowid") { cells.add(r) }
        }
        let digest = CanonicalHasher.digest(meta: meta, tables: tables, rows: rows, cells: cells)
        try db.execute("UPDATE rtsync_meta SET digest = ?", [.text(digest)])
    }

    /// Applies `file` to the twins and expects both to reject it for the same reason, each database unchanged.
    func expectRejectedAlike(_ b: Twins, _ file: URL, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let before = try Twins.comparableDump(b.bulk), beforeRows = try Twins.comparableDump(b.perRow)
        let r = try b.apply(file, sourceLocation: sourceLocation)
        #expect(r.bulk.status == .rejected && r.perRow.status == .rejected, "\(what): \(r.bulk) / \(r.perRow)", sourceLocation: sourceLocation)
        let after = try Twins.comparableDump(b.bulk), afterRows = try Twins.comparableDump(b.perRow)
        // The applied-diffs table may record the rejection; app tables, clocks and bookkeeping must not move.
        for name in ["notes", "rtsync_rows", "rtsync_clocks", "rtsync_conflicts"] {
            #expect(after[name] == before[name], "\(what): \(name) changed on the bulk twin", sourceLocation: sourceLocation)
            #expect(afterRows[name] == beforeRows[name], "\(what): \(name) changed on the per-row twin", sourceLocation: sourceLocation)
        }
    }

    // MARK: Hostile structure of rtsync_rows

    /// A forged `rtsync_rows` whose `changed` column is declared `COLLATE NOCASE` (the reader checks column names
    /// and stored values, not declared collations, and the digest covers values only: the file is valid). Half the
    /// rows say `["body"]`, half `["BODY"]`; the per-row merge takes every body. Before the set path refused files
    /// that declare a collation, `SELECT DISTINCT changed` folded the two spellings into one text, the rows with
    /// the other spelling matched no mask, counted as known updates of no column and kept their old bodies.
    @Test func changedDeclaredNoCase_bothSpellings_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-nocase-changed")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        let file = try diff(box) { w in
            for i in 0..<Self.rows { try update(w, i, body: "new body \(i) " + String(repeating: "x", count: 40), changed: [i % 2 == 0 ? "body" : "BODY"], clock: clock(1_000), born: born) }
        }
        try forge(file) { c in
            let sql = try #require(try c.scalar("SELECT sql FROM sqlite_schema WHERE name = 'rtsync_rows'")?.string)
            #expect(sql.contains("changed TEXT)"))
            try redeclare(c, "rtsync_rows", sql.replacingOccurrences(of: "changed TEXT)", with: "changed TEXT COLLATE NOCASE)"))
        }
        _ = try DiffReader(url: file)   // passes every check of an upfront reader
        let r = try b.applyCountingSetRows(file)
        #expect(r.perRow.status == .applied && r.perRow.updated == Self.rows, "\(r.perRow)")
        #expect(r.bulk.updated == Self.rows, "bulk: \(r.bulk); set-merged rows \(r.setRows)")
        #expect(try b.bulk.value("SELECT count(*) FROM notes WHERE body LIKE 'new body %'") == .integer(Int64(Self.rows)))
    }

    /// Same for `RTRIM`: `["body"]` and `["body"] ` (valid JSON, a trailing space) are one text to DISTINCT.
    /// (The trailing space is forged and the digest recomputed.)
    @Test func changedDeclaredRTrim_trailingSpace_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-rtrim-changed")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        let file = try diff(box) { w in
            for i in 0..<Self.rows { try update(w, i, body: "new body \(i) " + String(repeating: "y", count: 40), changed: ["body"], clock: clock(1_000), born: born) }
        }
        try forge(file) { c in
            try c.execute("UPDATE rtsync_rows SET changed = changed || ' ' WHERE rowid % 2 = 0")
            let sql = try #require(try c.scalar("SELECT sql FROM sqlite_schema WHERE name = 'rtsync_rows'")?.string)
            try redeclare(c, "rtsync_rows", sql.replacingOccurrences(of: "changed TEXT)", with: "changed TEXT COLLATE RTRIM)"))
        }
        try redigest(file)
        _ = try DiffReader(url: file)
        let r = try b.apply(file)
        #expect(r.perRow.status == .applied && r.perRow.updated == Self.rows, "\(r.perRow)")
        #expect(r.bulk.updated == Self.rows, "\(r.bulk)")
    }

    /// Other collations on `op`, `site` and `born_site` of a forged `rtsync_rows`: the file goes to the per-row merge
    /// (any declared collation does), with the same result.
    @Test func rowsTableWithNoCaseOpAndSites_mergesAsPerRow() throws {
        let box = try Sandbox("hostile-nocase-sites")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        // A third device's clocks under "Third", then the author (site "other") edits after seeing "third" only.
        let third = clock(10_000, "Third")
        let w0 = try writer(box, site: "Third")
        try w0.addTable(Self.notes)
        for i in 0..<20 { try update(w0, i, body: "third \(i)", changed: ["body"], clock: third, born: born) }
        try b.apply(try w0.finish())
        let file = try diff(box, seen: ["third": third.hlc.rawValue]) { w in
            for i in 0..<Self.rows { try update(w, i, body: "later \(i)", changed: ["body"], clock: clock(1_000), born: born) }
        }
        try forge(file) { c in
            let sql = try #require(try c.scalar("SELECT sql FROM sqlite_schema WHERE name = 'rtsync_rows'")?.string)
            try redeclare(c, "rtsync_rows", sql.replacingOccurrences(of: "op TEXT NOT NULL", with: "op TEXT COLLATE NOCASE NOT NULL")
                .replacingOccurrences(of: "born_site TEXT", with: "born_site TEXT COLLATE NOCASE")
                .replacingOccurrences(of: " site TEXT,", with: " site TEXT COLLATE NOCASE,"))
        }
        let r = try b.applyCountingSetRows(file)
        #expect(r.setRows == 0, "a declared collation leaves the file to the per-row merge")
        #expect(r.bulk.status == .applied && r.bulk.conflicts == 20, "\(r.bulk)")
    }

    /// A forged carried table whose columns are declared `COLLATE NOCASE` (which would make a key in other letters
    /// the same key to SQL over the file): the reader refuses the file, so neither merge writes anything.
    @Test func carriedColumnsDeclaredNoCase_areRejected() throws {
        let box = try Sandbox("hostile-nocase-carried")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        let file = try diff(box) { w in
            try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("N1"), .text("new"), .null, .integer(1)], clock: clock(2_000), born: clock(2_000)))
            for i in 2..<Self.rows { try update(w, i, body: i % 2 == 0 ? "BODY \(i)" : "body \(i)", changed: ["body"], clock: clock(1_000), born: born) }
        }
        try forge(file) { c in
            try redeclare(c, "notes", "CREATE TABLE \"notes\" (\"id\" TEXT COLLATE NOCASE, \"body\" TEXT COLLATE NOCASE, \"extra\" COLLATE NOCASE, \"n\")")
        }
        let before = try b.bulk.fullDump()
        let r = try b.applyCountingSetRows(file)
        #expect(r.setRows == 0)
        #expect(r.bulk.status == .rejected && r.bulk.reason?.contains("carried table is declared as") == true, "\(r.bulk)")
        #expect(try b.bulk.fullDump() == before)
    }

    // MARK: `changed` lists

    /// `changed` texts that are the same list in other JSON (spaces, an escaped letter, a trailing newline), forged
    /// with the digest recomputed: each distinct text gets its own mask, as the per-row merge decodes them.
    @Test func changedListsInOtherJSONSpellings_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-json-spellings")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        let file = try diff(box) { w in
            for i in 0..<Self.rows { try update(w, i, body: "json \(i)", n: .integer(Int64(-i)), changed: ["body", "n"], clock: clock(1_000), born: born) }
        }
        try forge(file) { c in
            try c.execute(#"UPDATE rtsync_rows SET changed = CASE rowid % 4 WHEN 0 THEN '[ "body" , "n" ]' WHEN 1 THEN '["bo\u0064y","n"]' WHEN 2 THEN '["body","n"]' || char(10) ELSE changed END"#)
        }
        try redigest(file)
        _ = try DiffReader(url: file)
        let r = try b.applyCountingSetRows(file)
        #expect(r.bulk.status == .applied && r.bulk.updated == Self.rows, "\(r.bulk)")
        #expect(r.setRows == Self.rows, "the set path ran")
    }

    /// Lists naming a column twice, the key column, other spellings, nothing at all: as the per-row merge reads them.
    @Test func changedListsWithDuplicatesKeyCaseAndEmpty_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-changed-lists")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        let lists: [[String]] = [["body", "body"], ["id", "body"], ["ID"], ["BODY"], ["Body", "n", "N"], [], ["extra", "EXTRA", "id"], ["n", "body", "extra", "id"]]
        let w = try writer(box)
        try w.addTable(Self.notes)
        for i in 0..<Self.rows {
            try update(w, i, body: "b\(i % 3)", extra: .text("e\(i % 4)"), n: .integer(Int64(i % 5)), changed: lists[i % lists.count], clock: clock(1_000), born: born)
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.bulk.status == .applied && r.bulk.conflicts == 0, "\(r.bulk)")
        #expect(r.setRows == Self.rows, "merged as a set")
        #expect(try b.bulk.value("SELECT count(*) FROM rtsync_clocks WHERE col = 'id'") == b.perRow.value("SELECT count(*) FROM rtsync_clocks WHERE col = 'id'"))
    }

    /// Found by a diff fuzzer: a list naming one column 2,001 times was applied by the set path and rejected by the
    /// per-row merge (`UPDATE … SET "body" = ?, "body" = ?, …`: too many columns), so devices diverged. The reader
    /// now hands each column once to both.
    @Test func changedListNamingAColumnThousandsOfTimes_appliesAlikeOnBothPaths() throws {
        let box = try Sandbox("hostile-changed-2001")
        let born = clock(20_000)
        let b = try twins(box, born: born)
        let w = try writer(box)
        try w.addTable(Self.notes)
        for i in 0..<Self.rows {
            try update(w, i, body: "many \(i)", changed: i == 7 ? Array(repeating: "body", count: 2_001) + ["BODY"] : ["body"], clock: clock(1_000), born: born)
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.bulk.status == .applied && r.bulk.updated == Self.rows, "\(r.bulk)")
        #expect(try b.perRow.value("SELECT body FROM notes WHERE id = 'n7'") == .text("many 7"))
    }

    /// 64 distinct `changed` texts (spellings of the same names) are merged as a set; 65 go to the per-row merge.
    @Test(arguments: [64, 65])
    func manyDistinctChangedLists_mergeAsPerRow(_ count: Int) throws {
        let box = try Sandbox("hostile-many-lists-\(count)")
        let born = clock(20_000)
        let b = try twins(box, count: 100, born: born)
        func spellings(_ name: String) -> [String] {
            let chars = Array(name)
            return (0..<(1 << chars.count)).map { m in String(chars.enumerated().map { m >> $0.offset & 1 == 1 ? Character($0.element.uppercased()) : $0.element }) }
        }
        var lists = spellings("extra").map { [$0] } + spellings("body").map { [$0] } + spellings("body").map { ["n", $0] } + [["N"], ["N", "extra"]]
        lists = Array(lists.prefix(count))
        #expect(Set(lists.map { JSON.encode($0) }).count == count)
        let w = try writer(box)
        try w.addTable(Self.notes)
        for i in 0..<100 {
            try update(w, i, body: "many \(i)", extra: .text("x\(i)"), n: .integer(Int64(-i)), changed: lists[i % lists.count], clock: clock(1_000), born: born)
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.bulk.status == .applied && r.bulk.conflicts == 0, "\(r.bulk)")
        #expect(r.setRows == (count <= 64 ? 100 : 0))
    }

    // MARK: Cell clocks

    /// Cells on deletes, on columns the row did not change, on the key column, with the author's site (stored
    /// NULL), an empty site, another spelling, negative and very old clocks, clocks later than the row's.
    @Test func cellClocksOfEveryKind_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-cells")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let third = clock(20_000, "third")
        try k.thirdDeviceEditsBodies(box, b, rows: 0..<40, clock: third, born: born)
        let w = try writer(box, seen: ["third": third.hlc.rawValue])
        try w.addTable(Self.notes)
        let cellKinds: [[String: Clock]] = [
            ["body": clock(5_000)],                                         // later than the local clock, the author's site (NULL)
            ["body": clock(5_000, "")],                                     // empty site
            ["BODY": Clock(hlc: HLC(rawValue: -5), site: "other")],         // negative, another spelling
            ["body": Clock(hlc: HLC(rawValue: 1), site: "fourth")],         // very old, another site
            ["extra": clock(500)],                                          // a column the row did not change
            ["id": clock(500), "n": clock(25_000, "fourth")],               // the key column; n older than born
            ["body": clock(500, "fourth"), "extra": clock(500, "")],
            [:],
        ]
        for i in 0..<Self.rows {
            if i % 11 == 10 {
                try delete(w, i, clock: clock(2_000), born: born, cells: i % 2 == 0 ? ["body": clock(2_500)] : [:])
            } else {
                let body = i % 3 == 0 ? "third \(i)" : "cells \(i)"
                try update(w, i, body: body, n: .integer(Int64(i + 1)), changed: i % 5 == 0 ? nil : ["body", "n"], clock: clock(1_000), born: born, cells: cellKinds[i % cellKinds.count])
            }
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.setRows > 0, "the set path ran")
        #expect(r.bulk.status == .applied, "\(r.bulk)")
    }

    /// A cell clock two days ahead (the row's own clock fine) is rejected whichever path starts.
    @Test func cellClockFarAhead_isRejectedAlike() throws {
        let box = try Sandbox("hostile-cell-ahead")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let w = try writer(box)
        try w.addTable(Self.notes)
        for i in 0..<Self.rows {
            try update(w, i, body: "ahead \(i)", changed: ["body"], clock: clock(1_000), born: born, cells: i == Self.rows - 3 ? ["body": clock(-2 * 86_400_000)] : [:])
        }
        try expectRejectedAlike(b, try w.finish(), "cell ahead")
    }

    // MARK: Rows and references

    /// Forged `rtsync_rows` entries (digest recomputed): an op in other letters, an unknown op, a real clock, a
    /// reference to no carried row, a carried row referenced twice: each rejected alike, the database unchanged.
    @Test(arguments: ["UPSERT", "Delete", "merge", "real-hlc", "real-born", "dangling", "twice", "blob-site", "text-tid"])
    func forgedRowsEntries_areRejectedAlike(_ kind: String) throws {
        let box = try Sandbox("hostile-rows-\(kind)")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let file = try diff(box) { w in
            for i in 0..<Self.rows { try update(w, i, body: "forged \(i)", changed: ["body"], clock: clock(1_000), born: born) }
        }
        let target = Int64(Self.rows - 5)
        try forge(file) { c in
            switch kind {
            case "UPSERT", "Delete", "merge": try c.execute("UPDATE rtsync_rows SET op = ? WHERE rowid = ?", [.text(kind), .integer(target)])
            case "real-hlc": try c.execute("UPDATE rtsync_rows SET hlc = 1.5 WHERE rowid = ?", [.integer(target)])
            case "real-born": try c.execute("UPDATE rtsync_rows SET born = 1.5 WHERE rowid = ?", [.integer(target)])
            case "dangling": try c.execute("UPDATE rtsync_rows SET rid = 99999 WHERE rowid = ?", [.integer(target)])
            case "twice": try c.execute("UPDATE rtsync_rows SET rid = rid - 1 WHERE rowid = ?", [.integer(target)])
            case "blob-site": try c.execute("UPDATE rtsync_rows SET site = X'6F74686572' WHERE rowid = ?", [.integer(target)])
            case "text-tid": try c.execute("UPDATE rtsync_rows SET tid = 'x' WHERE rowid = ?", [.integer(target)])
            default: Issue.record("unknown kind")
            }
        }
        try redigest(file)
        try expectRejectedAlike(b, file, kind)
    }

    /// The same key twice (two rids, other values and clocks), and a key both updated and deleted: the per-row merge
    /// meets them in file order, so the set path leaves the table.
    @Test func sameKeyTwice_mergesAsPerRow() throws {
        let box = try Sandbox("hostile-key-twice")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        for (what, extra) in [("update twice", 0), ("update then delete", 1), ("delete then update", 2)] {
            let w = try writer(box)
            try w.addTable(Self.notes)
            for i in 0..<Self.rows { try update(w, i, body: "\(what) \(i)", changed: ["body"], clock: clock(Int64(5_000 - extra * 1_000)), born: born) }
            switch extra {
            case 0: try update(w, 7, body: "again", changed: ["body", "n"], clock: clock(6_000), born: born)
            case 1: try delete(w, 8, clock: clock(500), born: born)
            default: try update(w, 9, body: "after", changed: ["body"], clock: clock(100), born: born)
            }
            let r = try b.applyCountingSetRows(try w.finish())
            #expect(r.bulk.status == .applied, "\(what): \(r.bulk)")
            #expect(r.setRows == 0, "\(what)")
        }
    }

    // MARK: Values and keys of other storage classes

    /// Text in an INTEGER column, a blob and an integer in a TEXT column, a real equal to an integer, NULLs,
    /// text with a NUL, keys with a trailing space or in other letters (new rows): as the per-row merge.
    @Test func valuesOfOtherStorageClasses_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-classes")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let w = try writer(box)
        try w.addTable(Self.notes)
        let odd: [(SQLValue, SQLValue)] = [(.text("7"), .text("body")), (.real(3.0), .blob([0x62, 0x6F])), (.text("x"), .integer(12)),
                                           (.null, .null), (.integer(Int64.max), .text("a\u{0}b")), (.real(-0.0), .real(2.5)), (.text(" 5"), .text("body 4 "))]
        for i in 0..<Self.rows {
            let (n, body) = odd[i % odd.count]
            try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n\(i)"), body, .text("extra \(i)"), n], changedColumns: ["body", "n"], clock: clock(1_000), born: born))
        }
        for key in ["n1 ", "N2", "n3\u{A0}"] {
            try w.append(RowChange(table: "notes", operation: .upsert, values: [.text(key), .text("new"), .null, .integer(0)], clock: clock(900), born: clock(900)))
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.setRows > 0, "the set path ran")
        #expect(r.bulk.status == .applied, "\(r.bulk)")
    }

    /// A text key with a NUL ('n3' + NUL): SQLite's quote() stops at the NUL, so its key text is that of 'n3' and
    /// the set path leaves the table (a key twice); the per-row merge decides, alike on both twins.
    @Test func textKeyWithNUL_mergesAsPerRow() throws {
        let box = try Sandbox("hostile-nul-key")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let file = try diff(box) { w in
            for i in 0..<Self.rows { try update(w, i, body: "nul \(i)", changed: ["body"], clock: clock(1_000), born: born) }
            try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n3\u{0}"), .text("new"), .null, .integer(0)], clock: clock(900), born: clock(900)))
        }
        let r = try b.apply(file)
        #expect(r.bulk.status == r.perRow.status, "\(r.bulk)")
    }

    /// Twins made from `sql` holding rows 0…rows-1 with keys `key(i)`, born at `born` on "other".
    func twins(_ box: Sandbox, _ sql: String, key: (Int) -> SQLValue, born: Clock) throws -> Twins {
        let b = try Twins(box, try k.device(box, "B", sql))
        let w = try writer(box)
        try w.addTable(Self.notes)
        for i in 0..<Self.rows { try w.append(RowChange(table: "notes", operation: .upsert, values: [key(i), .text("body \(i)"), .null, .integer(Int64(i))], clock: born, born: born)) }
        try b.apply(try w.finish())
        return b
    }

    /// An INTEGER key table: keys as reals equal to integers (1.0), as texts ('2'), blobs, and beyond: the per-row
    /// merge converts them, so the table goes to it.
    @Test func keysOfOtherStorageClasses_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-key-classes")
        let born = clock(30_000)
        let b = try twins(box, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT, extra TEXT, n INTEGER)", key: { .integer(Int64($0)) }, born: born)
        for (what, key) in [("real", SQLValue.real(3.0)), ("text", .text("4")), ("blob", .blob([0x35])), ("text not a number", .text("five"))] {
            let w = try writer(box)
            try w.addTable(Self.notes)
            for i in 0..<Self.rows where i != 3 && i != 4 { try w.append(RowChange(table: "notes", operation: .upsert, values: [.integer(Int64(i)), .text("\(what) \(i)"), .null, .integer(Int64(i))], changedColumns: ["body"], clock: clock(1_000), born: born)) }
            try w.append(RowChange(table: "notes", operation: .upsert, values: [key, .text("odd key"), .null, .integer(0)], changedColumns: ["body"], clock: clock(900), born: born))
            let r = try b.apply(try w.finish())
            #expect(r.bulk.status == r.perRow.status, "\(what): \(r.bulk)")
        }
    }

    /// A table without a type on its key (any storage class kept): a real key -0.0 against the local 0.0 (equal by
    /// `IS`, and both quote() to '0.0'), with the key column named in `changed` and the body changed. The per-row
    /// merge's `take` writes every taken column, the key included; the set path never writes key columns, so it
    /// kept 0.0 (rows compare equal as `SQLValue`s, the stored bytes did not). REAL keys now go to the per-row merge.
    @Test func untypedKeyNegativeZero_mergesAsPerRow() throws {
        let box = try Sandbox("hostile-negative-zero")
        let born = clock(30_000)
        let b = try twins(box, "CREATE TABLE notes(id PRIMARY KEY, body TEXT, extra TEXT, n INTEGER)", key: { .real(Double($0)) }, born: born)
        let w = try writer(box)
        try w.addTable(Self.notes)
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.real(-0.0), .text("minus zero"), .null, .integer(0)], changedColumns: ["id", "body"], clock: clock(1_000), born: born))
        for i in 1..<Self.rows { try w.append(RowChange(table: "notes", operation: .upsert, values: [.real(Double(i)), .text("later \(i)"), .null, .integer(Int64(i))], changedColumns: ["body"], clock: clock(1_000), born: born)) }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.setRows == 0, "REAL keys are left to the per-row merge")
        #expect(r.bulk.status == .applied, "\(r.bulk)")
        func signs(_ t: Replica) throws -> [Bool] { try t.rows("SELECT id FROM notes WHERE id = 0").map { r -> Bool in if case .real(let d) = r[0] { return d.sign == .minus } else { return false } } }
        let bulkSigns = try signs(b.bulk), rowSigns = try signs(b.perRow)
        #expect(bulkSigns == rowSigns, "the key's sign of zero: set path \(bulkSigns.map { $0 ? "-0.0" : "0.0" }), per-row \(rowSigns.map { $0 ? "-0.0" : "0.0" })")
    }

    // MARK: Clocks and births

    /// Born clocks other than the device's record of the row (older, later, another site, the empty site),
    /// negative clocks, a row clock equal to the local one with another site, and deletes of each kind.
    @Test func bornClocksAndOddClocks_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-born")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let w = try writer(box)
        try w.addTable(Self.notes)
        let borns: [Clock] = [born, clock(40_000), clock(25_000), Clock(hlc: born.hlc, site: "fourth"), Clock(hlc: born.hlc, site: ""), Clock(hlc: born.hlc, site: "Other"),
                              Clock(hlc: HLC(rawValue: -1), site: "other"), .zero]
        let clocks: [Clock] = [clock(1_000), born, Clock(hlc: born.hlc, site: "p"), Clock(hlc: born.hlc, site: "A"), Clock(hlc: HLC(rawValue: -100), site: "other"), clock(1_000, "")]
        for i in 0..<Self.rows {
            let bc = borns[i % borns.count], c = clocks[(i / borns.count) % clocks.count]
            if i % 9 == 4 { try delete(w, i, clock: c, born: bc) } else { try update(w, i, body: "born \(i % 4)", changed: ["body"], clock: c, born: bc) }
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.setRows > 0, "the set path ran")
        #expect(r.bulk.status == .applied, "\(r.bulk)")
    }

    /// Sites that are empty or not ASCII, in row clocks, born clocks and cells: as the per-row merge.
    @Test func emptyAndNonASCIISites_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-sites")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        for (what, site) in [("empty", ""), ("latin", "\u{F8}ther"), ("kelvin", "\u{212A}"), ("decomposed", "e\u{301}")] {
            let w = try writer(box)
            try w.addTable(Self.notes)
            for i in 0..<Self.rows {
                let c = i % 7 == 0 ? clock(2_000, site) : clock(2_000)
                try update(w, i, body: "\(what) \(i)", changed: ["body", "n"], clock: c, born: born, cells: i % 13 == 0 ? ["n": clock(1_500, site)] : [:])
            }
            let r = try b.applyCountingSetRows(try w.finish())
            #expect(r.bulk.status == .applied, "\(what): \(r.bulk)")
            // Only ASCII sites are compared by bytes: the empty site is merged as a set, the others row by row.
            #expect((r.setRows > 0) == (what == "empty"), "\(what)")
        }
    }

    // MARK: Columns

    /// A diff lacking a nullable local column (an older app version), and one carrying a column this table lacks.
    @Test func missingAndExtraColumns_mergeAsPerRow() throws {
        let box = try Sandbox("hostile-columns")
        let born = clock(30_000)
        let b = try twins(box, born: born)
        let short = TableDefinition(name: "notes", columns: [
            ColumnDefinition(name: "id", type: "TEXT", primaryKey: 1), ColumnDefinition(name: "body", type: "TEXT"), ColumnDefinition(name: "N", type: "INTEGER"),
        ])
        let w = try writer(box)
        try w.addTable(short)
        for i in 0..<Self.rows {
            try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n\(i)"), .text("short \(i)"), .integer(Int64(i * 2))], changedColumns: i % 3 == 0 ? nil : ["body", "n"], clock: clock(2_000), born: born))
        }
        let r = try b.applyCountingSetRows(try w.finish())
        #expect(r.bulk.status == .applied && r.bulk.updated == Self.rows, "\(r.bulk)")
        #expect(r.setRows > 0, "merged as a set")

        let wide = TableDefinition(name: "notes", columns: Self.notes.columns + [ColumnDefinition(name: "later", type: "TEXT")])
        let w2 = try writer(box)
        try w2.addTable(wide)
        for i in 0..<Self.rows {
            try w2.append(RowChange(table: "notes", operation: .upsert, values: [.text("n\(i)"), .text("wide \(i)"), .null, .integer(Int64(i)), .text("l\(i)")], changedColumns: ["body", "later"], clock: clock(1_000), born: born))
        }
        let r2 = try b.apply(try w2.finish())
        #expect(r2.bulk.status == r2.perRow.status, "\(r2.bulk)")
    }

    /// Declared collations are found outside quoted names and strings only: a column named `collated_at` keeps the
    /// set paths.
    @Test func declaresCollation_looksOutsideQuotedNamesAndStrings() throws {
        #expect(Merger.declaresCollation(#"CREATE TABLE t ("x" TEXT COLLATE NOCASE)"#))
        #expect(Merger.declaresCollation(#"CREATE TABLE t (x TEXT collate "nocase")"#))
        #expect(Merger.declaresCollation(#"CREATE TABLE "a""collate" (x TEXT CoLLaTe RTRIM)"#))
        #expect(!Merger.declaresCollation(#"CREATE TABLE "collateral" ("collated_at" TEXT, [collate] INT, `Collate` INT, y DEFAULT 'collate', "a""collate")"#))
        // Comments are skipped, and a quote inside one opens nothing.
        #expect(Merger.declaresCollation("CREATE TABLE t(tid INTEGER, changed /* don't */ TEXT COLLATE NOCASE /* ' */)"))
        #expect(Merger.declaresCollation("CREATE TABLE t(tid INTEGER, -- it's\n changed TEXT COLLATE NOCASE -- '\n)"))
        #expect(!Merger.declaresCollation("CREATE TABLE t(x TEXT /* collate nocase */, y TEXT -- collate\n)"))
        #expect(Merger.declaresCollation("CREATE TABLE t(x TEXT /* unclosed */ COLLATE NOCASE /*"))

        let sql = "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, collated_at TEXT, n INTEGER)"
        let box = try Sandbox("known-collated-name")
        let a = try k.device(box, "A", sql)
        let b = try Twins(box, try k.device(box, "B", sql))
        for i in 0..<Self.rows { try a.exec("INSERT INTO notes VALUES (?, ?, ?, ?)", [.text("n\(i)"), .text(String(repeating: "body \(i) ", count: 20)), .text("x"), .integer(Int64(i))]) }
        try b.apply(try a.exportFile())
        tick()
        try a.exec("UPDATE notes SET collated_at = 'y ' || id")
        let r = try b.applyCountingSetRows(try a.exportFile())
        #expect(r.bulk.updated == Self.rows)
        #expect(r.setRows == Self.rows)
    }
}
