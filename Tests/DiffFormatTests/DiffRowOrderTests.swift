@testable import DiffFormat
import Foundation
import RTSQLite
import Testing

/// The reader follows `rtsync_rows` through the carried tables with a scan in rowid order and falls back to a
/// lookup for references out of that order. These diffs are rewritten so their references are out of order (or
/// repeated) and then given a correct digest, so only the reader's reference handling can tell them apart.
@Suite("Diff row order")
struct DiffRowOrderTests {
    /// Renumbers the carried `items` rows so the row that had rowid `i` gets `mapping[i]`, updates `rtsync_rows`
    /// to match, and writes the digest of the result (as a writer would have).
    func renumber(_ url: URL, _ mapping: [Int64: Int64]) throws {
        let db = try Connection(path: url.path, mode: .readWrite)
        try db.execute("BEGIN")
        // Through negative rowids, so no new number collides with an old one.
        for (old, new) in mapping {
            try db.execute("UPDATE items SET rowid = ? WHERE rowid = ?", [.integer(-new), .integer(old)])
            try db.execute("UPDATE rtsync_rows SET rid = ? WHERE rid = ?", [.integer(-new), .integer(old)])
        }
        try db.execute("UPDATE items SET rowid = -rowid WHERE rowid < 0")
        try db.execute("UPDATE rtsync_rows SET rid = -rid WHERE rid < 0")
        try db.execute("COMMIT")
        try redigest(db)
    }

    /// Recomputes and stores the digest of a diff of `items` without cell clocks, the way the reader checks it.
    func redigest(_ db: Connection) throws {
        var tables = CanonicalHasher()
        for r in try db.rows("SELECT id, name, columns, constraints, schema_hash FROM rtsync_tables ORDER BY id") { tables.add(r) }
        var rows = CanonicalHasher()
        for r in try db.rows("SELECT r.tid, r.rid, r.op, r.born, r.born_site, r.hlc, r.site, r.changed, i.* FROM rtsync_rows r JOIN items i ON i.rowid = r.rid ORDER BY r.rowid") {
            rows.add(r)
        }
        let reader = try DiffReader(url: URL(fileURLWithPath: db.path), rowValidation: .whileReading)
        let digest = CanonicalHasher.digest(meta: reader.metadata.digestedValues, tables: tables, rows: rows, cells: CanonicalHasher())
        try db.execute("UPDATE rtsync_meta SET digest = ?", [.text(digest)])
    }

    func changes(_ url: URL) throws -> [RowChange] { try DiffReader(url: url).changes() }

    @Test(arguments: [
        [1: 5, 2: 4, 3: 3, 4: 2, 5: 1],      // every reference goes backwards
        [1: 1, 2: 3, 3: 2, 4: 5, 5: 4],      // pairs swapped
        [1: 3, 2: 4, 3: 5, 4: 1, 5: 2],      // the scan passes rows referenced later
    ] as [[Int64: Int64]])
    func referencesOutOfOrder_readTheSameChanges(_ mapping: [Int64: Int64]) throws {
        let dir = try TemporaryDirectory()
        let inOrder = try writeItemsDiff(in: dir.url, rowCount: 5)
        let expected = try changes(inOrder)
        let copyDir = dir.url.appendingPathComponent("copy")
        try FileManager.default.createDirectory(at: copyDir, withIntermediateDirectories: true)
        let shuffled = copyDir.appendingPathComponent(inOrder.lastPathComponent)
        try FileManager.default.copyItem(at: inOrder, to: shuffled)
        try renumber(shuffled, mapping)
        let rids = try Connection(path: shuffled.path, mode: .readOnly).rows("SELECT rid FROM rtsync_rows ORDER BY rowid").compactMap { $0[0].int64 }
        #expect(rids == (1...5).map { mapping[$0]! })
        #expect(try changes(shuffled) == expected)
    }

    @Test(arguments: [[1, 1], [2, 1, 2], [3, 1, 2, 1]] as [[Int64]])
    func carriedRowReferencedTwice_isRejected(_ references: [Int64]) throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: references.count)
        let db = try Connection(path: url.path, mode: .readWrite)
        for (i, rid) in references.enumerated() {
            try db.execute("UPDATE rtsync_rows SET rid = ? WHERE rowid = ?", [.integer(rid), .integer(Int64(i + 1))])
        }
        try redigest(db)
        guard case .invalidRow(_, "items", _, let reason)? = openingError(url) else {
            Issue.record("expected .invalidRow")
            return
        }
        #expect(reason.contains("referenced twice"))
    }
}
