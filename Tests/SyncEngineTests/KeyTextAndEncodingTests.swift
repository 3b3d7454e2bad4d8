@testable import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Apply binds carried values straight from the diff, claims keys with SQLite's `quote()` and hashes the
/// content from SQLite's bytes. These tests pin that key texts agree between its paths (including text keys
/// with a NUL byte, where `quote()` stops) and that text which is not valid UTF-8 never gets in.
@Suite("Incoming key texts and text encoding")
struct KeyTextAndEncodingTests {
    /// A diff of `notes` (one row change per entry) from site `other`.
    func notesDiff(_ box: Sandbox, _ changes: [RowChange]) throws -> URL {
        let writer = try incomingWriter(box, site: "other")
        try writer.addTable(notesTable())
        for c in changes { try writer.append(c) }
        return try writer.finish()
    }

    func clock(_ offset: Int64) -> Clock {
        Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds() - 60_000 + offset, counter: 0), site: "other")
    }

    /// Rows of `notes` whose id is exactly `id` (bound, so NUL bytes count).
    func count(_ db: SyncDatabase, id: String) throws -> Int64? {
        try db.query("SELECT count(*) FROM notes WHERE id = ?", [.text(id)]).first?.first?.int64
    }

    /// A delete that arrives before the (older) insert of the same row must win: the insert is not new to
    /// this device, its key has a tombstone. The short path claims the key with SQLite's `quote()`, which stops
    /// at a NUL byte, while the delete's full merge recorded the tombstone under the Swift key text (whole
    /// string): for a key with a NUL byte the claim does not collide and the deleted row comes back.
    @Test(arguments: [false, true])
    func deleteBeforeOlderInsert_deleteWins(keyHasNUL: Bool) throws {
        let key = keyHasNUL ? "k\u{0}a" : "ka"
        let box = try Sandbox("keytext-nul-delete")
        let db = try notesDatabase(box)
        let born = clock(0), deleted = clock(1_000)
        let delete = try notesDiff(box, [RowChange(table: "notes", operation: .delete, values: [.text(key), .null], clock: deleted, born: born)])
        let insert = try notesDiff(box, [RowChange(table: "notes", operation: .upsert, values: [.text(key), .text("zombie")], clock: born, born: born)])

        #expect(db.apply(diff: delete, quarantine: box.path("q")).status == .applied)
        let report = db.apply(diff: insert, quarantine: box.path("q"))
        #expect(report.status == .applied, "\(report)")
        #expect(try count(db, id: key) == 0, "the deleted row came back (\(report))")
        let bookkeeping = try db.query("SELECT hex(pk), del_hlc FROM rtsync_rows WHERE pk <> '''n1'''")
        #expect(!bookkeeping.contains { $0[1] == .null }, "live bookkeeping for a deleted key: \(bookkeeping)")
    }

    /// One new row whose clock differs from its born clock: `rtsync_rows` (claimed with `quote()`) and its column
    /// clocks (written with the Swift key text) must name the row by the same key text.
    @Test(arguments: [false, true])
    func newRowWithColumnClocks_bookkeepingUsesOneKeyText(keyHasNUL: Bool) throws {
        let key = keyHasNUL ? "k\u{0}a" : "ka"
        let box = try Sandbox("keytext-nul-clocks")
        let db = try notesDatabase(box)
        let diff = try notesDiff(box, [RowChange(table: "notes", operation: .upsert, values: [.text(key), .text("body")], clock: clock(5_000), born: clock(0))])
        let report = db.apply(diff: diff, quarantine: box.path("q"))
        #expect(report.status == .applied && report.inserted == 1, "\(report)")
        let rowKeys = Set(try db.query("SELECT hex(pk) FROM rtsync_rows WHERE pk <> '''n1'''").compactMap { $0[0].string })
        let clockKeys = Set(try db.query("SELECT DISTINCT hex(pk) FROM rtsync_clocks WHERE pk <> '''n1'''").compactMap { $0[0].string })
        #expect(!clockKeys.isEmpty)
        #expect(clockKeys.isSubset(of: rowKeys), "rtsync_rows \(rowKeys) vs rtsync_clocks \(clockKeys)")
    }

    /// Writes the digest of a one-table `notes` diff as a writer hashing the bytes *as stored* would
    /// (docs/diff-format.md section 8: values "as stored in the file"; TEXT is tag 3, 8-byte length, bytes).
    func redigestAsStored(_ url: URL) throws {
        let db = try Connection(path: url.path, mode: .readWrite)
        var tables = CanonicalHasher()
        for r in try db.rows("SELECT id, name, columns, constraints, schema_hash FROM rtsync_tables ORDER BY id") { tables.add(r) }
        var rows = CanonicalHasher()
        let carried = ["id", "body"].map { "typeof(n.\($0)), CASE typeof(n.\($0)) WHEN 'text' THEN CAST(n.\($0) AS BLOB) ELSE n.\($0) END" }
        for r in try db.rows("SELECT r.tid, r.rid, r.op, r.born, r.born_site, r.hlc, r.site, r.changed, " + carried.joined(separator: ", ")
                             + " FROM rtsync_rows r JOIN notes n ON n.rowid = r.rid ORDER BY r.rowid") {
            rows.add(r[0..<8])
            for i in stride(from: 8, to: r.count, by: 2) {
                guard r[i] == .text("text"), case .blob(let bytes) = r[i + 1] else { rows.add(r[i + 1]); continue }
                rows.addRaw([3] + CanonicalHasher.bigEndian(UInt64(bytes.count)) + bytes)
            }
        }
        let meta = try DiffReader(url: url, rowValidation: .whileReading).metadata
        let digest = CanonicalHasher.digest(meta: meta.digestedValues, tables: tables, rows: rows, cells: CanonicalHasher())
        try db.execute("UPDATE rtsync_meta SET digest = ?", [.text(digest)])
    }

    /// docs/diff-format.md section 8: text must be valid UTF-8. A file whose digest covers invalid bytes as
    /// stored is rejected; were it applied, the bytes would be written as they are, and later full merges,
    /// which decode them (U+FFFD), would no longer find the row.
    /// `rtsync_key_value(text, i)`, which the set-based export decodes key texts with: TEXT and INTEGER parts
    /// decode to their values (quotes and commas inside texts included); anything else gives 0, whose `quote()`
    /// differs from the part, so the export checks and goes row by row.
    @Test func keyValueFunction_decodesTextAndIntegerParts_andGivesZeroForTheRest() throws {
        let box = try Sandbox("key-value-function")
        _ = try Connection(path: box.path("k.sqlite").path)
        let db = try SyncDatabase(path: box.path("k.sqlite").path)
        func value(_ text: String, _ i: Int64) throws -> SQLValue? { try db.query("SELECT rtsync_key_value(?, ?)", [.text(text), .integer(i)]).first?.first }
        #expect(try value("'abc',3", 0) == .text("abc"))
        #expect(try value("'abc',3", 1) == .integer(3))
        #expect(try value("'x'',y',''','''", 0) == .text("x',y") && value("'x'',y',''','''", 1) == .text("','"))
        #expect(try value("'',-9223372036854775808", 0) == .text("") && value("'',-9223372036854775808", 1) == .integer(.min))
        #expect(try value("9223372036854775807", 0) == .integer(.max))
        #expect(try value("'naïve ☃'", 0) == .text("naïve ☃"))
        // Not TEXT or INTEGER, malformed, or no such part: 0.
        for (text, i) in [("9223372036854775808", 0), ("1.5,'a'", 0), ("NULL", 0), ("X'00ff'", 0), ("J\"a\\u0000b\"", 0), ("'a',3", 2),
                          ("'unclosed", 0), ("'a'b,1", 0), ("-", 0), ("", 0), ("1,", 1), ("'a''", 0)] as [(String, Int64)] {
            #expect(try value(text, i) == .integer(0), "\(text) [\(i)]")
        }
        #expect(try db.query("SELECT rtsync_key_value(NULL, 0), rtsync_key_value(7, 0)").first == [.integer(0), .integer(0)])
    }

    @Test func invalidUTF8Text_isRejected_andNeverStored() throws {
        let box = try Sandbox("keytext-utf8")
        let db = try notesDatabase(box)
        // Two diffs of the same (foreign) writer: the row, then an update of its body.
        let first = try notesDiff(box, [RowChange(table: "notes", operation: .upsert, values: [.text("kX"), .text("one")], clock: clock(0), born: clock(0))])
        let second = try notesDiff(box, [RowChange(table: "notes", operation: .upsert, values: [.text("kX"), .text("two")], changedColumns: ["body"], clock: clock(1_000), born: clock(0))])
        for url in [first, second] {
            try Connection(path: url.path, mode: .readWrite).execute("UPDATE notes SET id = CAST(X'6BFF' AS TEXT)")  // 'k', then a lone 0xFF byte
            try redigestAsStored(url)
        }

        let report = db.apply(diff: first, quarantine: box.path("q"))
        #expect(report.status == .rejected, "invalid UTF-8 text passed the digest check: \(report)")
        _ = db.apply(diff: second, quarantine: box.path("q"))
        let stored = try db.query("SELECT hex(id), body FROM notes WHERE id <> 'n1' ORDER BY body")
        #expect(!stored.contains { $0[0] == .text("6BFF") }, "invalid UTF-8 stored as is: \(stored)")
        #expect(stored.count <= 1, "one row of the writer became \(stored.count): \(stored)")
    }
}
