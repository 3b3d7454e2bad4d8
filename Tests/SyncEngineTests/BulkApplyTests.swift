import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Apply writes rows new to a device table by table (`INSERT … SELECT` from the attached diff) and leaves every
/// other row to the per-row merge. Each test applies the same diff to two identical copies of one device, one
/// with the bulk writes turned off, and expects the same database: rows, bookkeeping, conflict log, triggers.
@Suite("Applying new rows in bulk")
struct BulkApplyTests {
    /// Two copies of one tracked device (same site id and state); the second merges every row one by one.
    func twins(_ box: Sandbox, _ device: Replica, policies: [String: TablePolicy] = [:]) throws -> (bulk: Replica, perRow: Replica) {
        let user = try #require(device.value("SELECT user_id FROM rtsync_site")?.string)
        let bulk = try box.replica(device.name + "-bulk", source: device.dbURL, user: user, policies: policies)
        let perRow = try box.replica(device.name + "-rows", source: device.dbURL, user: user, policies: policies)
        perRow.db.bulkApply = false
        return (bulk, perRow)
    }

    /// Applies `file` to both twins; expects the same report and the same database.
    @discardableResult
    func applyToBoth(_ file: URL, _ twins: (bulk: Replica, perRow: Replica), sourceLocation: SourceLocation = #_sourceLocation) throws -> ApplyReport {
        // Each twin gets its own copy: a rejected file is moved to the twin's quarantine.
        func copy(for twin: Replica) throws -> URL {
            let folder = twin.dir.appendingPathComponent("incoming")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let target = folder.appendingPathComponent(file.lastPathComponent)
            try FileManager.default.copyItem(at: file, to: target)
            return target
        }
        let a = twins.bulk.apply(try copy(for: twins.bulk)), b = twins.perRow.apply(try copy(for: twins.perRow))
        #expect(a.status == b.status && a.reason == b.reason, "bulk: \(a.status) \(a.reason ?? ""); per row: \(b.status) \(b.reason ?? "")", sourceLocation: sourceLocation)
        func counts(_ r: ApplyReport) -> [Int] { [r.inserted, r.updated, r.deleted, r.conflicts] }
        #expect(counts(a) == counts(b),
                "bulk: \(a); per row: \(b)", sourceLocation: sourceLocation)
        let x = try comparableDump(twins.bulk), y = try comparableDump(twins.perRow)
        #expect(x == y, "the databases differ: \(firstDifference(x, y) ?? "")", sourceLocation: sourceLocation)
        #expect(try twins.bulk.value("SELECT count(*) FROM pragma_database_list WHERE name = 'rtsync_diff'") == .integer(0),
                "the diff is still attached", sourceLocation: sourceLocation)
        return a
    }

    /// Every table with bookkeeping, the times of applying and logging blanked, plus the triggers.
    func comparableDump(_ r: Replica) throws -> [String: TableDump] {
        var dump = try r.fullDump()
        for (table, column) in [("rtsync_applied", "applied_at"), ("rtsync_conflicts", "at")] {
            guard var t = dump[table], let i = t.columns.firstIndex(of: column) else { continue }
            for j in t.rows.indices { t.rows[j][i] = .null }
            t.rows.sort { $0.map(\.sqlLiteral).joined(separator: "|") < $1.map(\.sqlLiteral).joined(separator: "|") }
            dump[table] = t
        }
        dump["(triggers)"] = TableDump(columns: ["name", "sql"], rows: try r.rows("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' ORDER BY name"))
        return dump
    }

    /// Keys of every kind (text with quotes and non-ASCII, negative integers, composite keys), REAL and NULL
    /// values: all new to the device, so all written in bulk, with the bookkeeping the per-row merge writes.
    /// A later diff with updates and more new rows writes only the new ones in bulk.
    @Test func newRows_areWrittenInBulk_asThePerRowMergeWritesThem() throws {
        let box = try Sandbox("bulk-new")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let device = try box.replica("B", fixture: "record-thing-demo")
        let b = try twins(box, device)
        for i in 0..<300 { try a.exec("INSERT INTO translations VALUES (?, ?, ?, NULL)", [.text(i % 3 == 0 ? "it's" : "naïve ☃"), .text("key.\(i)"), .text("value \(i)")]) }
        for i in 0..<40 { try a.exec("INSERT INTO requests(id, url, type, status, created_at) VALUES (?, ?, 'image', 'new', ?)", [.integer(Int64(-i - 1)), .text("https://example.com/\(i)"), .real(Double(i) + 0.25)]) }
        for i in 0..<25 { try a.exec("INSERT INTO things(id, account_id, title, created_at) VALUES (?, 'acct', ?, 1.5e300)", [.text("thing-\(i)"), .text("Thing \(i)")]) }
        let first = try applyToBoth(try a.exportFile(), b)
        #expect(first.status == .applied && first.inserted == 365, "\(first)")
        #expect(b.bulk.db.bulkRowsWritten == 365)
        #expect(b.perRow.db.bulkRowsWritten == 0)

        tick()
        try a.exec("UPDATE translations SET value = 'changed' WHERE key IN ('key.1', 'key.2')")
        try a.exec("DELETE FROM requests WHERE id = -3")
        for i in 300..<310 { try a.exec("INSERT INTO translations VALUES ('it''s', ?, 'late', 'ctx')", [.text("key.\(i)")]) }
        let second = try applyToBoth(try a.exportFile(), b)
        #expect(second.status == .applied && second.inserted == 10 && second.updated == 2 && second.deleted == 1, "\(second)")
        #expect(b.bulk.db.bulkRowsWritten == 375)
        try expectSameData(a, b.bulk)
    }

    /// Rows that are not new here are left to the per-row merge, table by table or row by row: a key present
    /// without history, a key inserted and deleted here and not yet exported, a local edit not yet exported,
    /// and a UNIQUE value another key holds here (which sends its whole table to the per-row merge).
    @Test func rowsWithLocalHistory_areLeftToThePerRowMerge() throws {
        let box = try Sandbox("bulk-mixed")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let device = try box.replica("B", fixture: "record-thing-demo")
        let tid = try #require(device.value("SELECT tid FROM rtsync_tracked WHERE name = 'translations'")?.int64)
        try device.exec("DROP TRIGGER rtsync_ins_\(tid)")
        try device.exec("INSERT INTO translations VALUES ('mx', 'untracked', 'from before tracking', NULL)")
        try device.db.track()
        try device.exec("INSERT INTO translations VALUES ('mx', 'gone', 'inserted then deleted here', NULL)")
        try device.exec("DELETE FROM translations WHERE lang = 'mx' AND key = 'gone'")
        try device.exec("INSERT INTO requests(id, url, type, status) VALUES (500, 'https://example.com/taken', 'image', 'new')")
        try device.exec("UPDATE things SET color = 'red' WHERE id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'")
        tick()
        for i in 0..<100 { try a.exec("INSERT INTO translations VALUES ('mx', ?, 'new', NULL)", [.text("k\(i)")]) }
        try a.exec("INSERT INTO translations VALUES ('mx', 'untracked', 'from A', NULL)")
        try a.exec("INSERT INTO translations VALUES ('mx', 'gone', 'from A', NULL)")
        try a.exec("INSERT INTO requests(id, url, type, status) VALUES (501, 'https://example.com/taken', 'image', 'new')")
        for i in 0..<5 { try a.exec("INSERT INTO requests(id, url, type, status) VALUES (?, ?, 'image', 'new')", [.integer(Int64(600 + i)), .text("https://example.com/free\(i)")]) }
        try a.exec("UPDATE things SET color = 'blue' WHERE id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'")
        let b = try twins(box, device)
        let report = try applyToBoth(try a.exportFile(), b)
        #expect(report.status == .applied, "\(report)")
        // The 100 plain new translations; the two keys with history here and all of requests took the merge.
        #expect(b.bulk.db.bulkRowsWritten == 100)
        #expect(try b.bulk.value("SELECT value FROM translations WHERE lang = 'mx' AND key = 'untracked'") == .text("from A"))
    }

    /// A row whose columns carry different clocks (born in an earlier diff this device has not seen) needs
    /// column clocks, which only the per-row merge writes; the rest of the table is still written in bulk.
    @Test func rowsWithColumnClocks_areLeftToThePerRowMerge() throws {
        let box = try Sandbox("bulk-clocks")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let device = try box.replica("B", fixture: "record-thing-demo")
        let b = try twins(box, device)
        for i in 0..<20 { try a.exec("INSERT INTO translations VALUES ('cc', ?, 'v1', NULL)", [.text("k\(i)")]) }
        let born = try a.exportFile()
        tick()
        try a.exec("UPDATE translations SET value = 'v2' WHERE lang = 'cc' AND key IN ('k1', 'k2', 'k3')")
        for i in 20..<30 { try a.exec("INSERT INTO translations VALUES ('cc', ?, 'v1', NULL)", [.text("k\(i)")]) }
        let later = try a.exportFile()
        // The later diff first: k1-k3 are new here but carry a born clock older than their value's clock.
        let first = try applyToBoth(later, b)
        #expect(first.inserted == 13, "\(first)")
        #expect(b.bulk.db.bulkRowsWritten == 10)
        let second = try applyToBoth(born, b)
        #expect(second.status == .applied, "\(second)")
        #expect(b.bulk.db.bulkRowsWritten == 27)
        try expectSameData(a, b.bulk)
    }

    /// Owner-only tables: rows owned by the diff's author are written in bulk, others refused by the merge.
    @Test func ownerOnlyTable_writesTheAuthorsRowsInBulk_andRefusesTheRest() throws {
        let policies = ["logs": TablePolicy(.appendOnly), "routines": TablePolicy(.ownerOnly, ownerColumn: "owner_id")]
        let box = try Sandbox("bulk-owner")
        let a = try box.replica("A", fixture: "routines-logs", user: "userA", policies: policies)
        let device = try box.replica("B", fixture: "routines-logs", user: "userB", policies: policies)
        let b = try twins(box, device, policies: policies)
        for i in 0..<10 { try a.exec("INSERT INTO routines(id, owner_id, name) VALUES (?, 'userA', 'mine')", [.text("r\(i)")]) }
        try a.exec("INSERT INTO routines(id, owner_id, name) VALUES ('r-theirs', 'userB', 'not mine')")
        for i in 0..<10 { try a.exec("INSERT INTO logs(id, routine_id, author_id, at) VALUES (?, ?, 'userA', '2026-01-01')", [.text("l\(i)"), .text("r\(i)")]) }
        let report = try applyToBoth(try a.exportFile(), b)
        #expect(report.status == .applied, "\(report)")
        #expect(b.bulk.db.bulkRowsWritten == 20)
        #expect(try b.bulk.value("SELECT count(*) FROM routines WHERE id = 'r-theirs'") == .integer(0))
    }

    /// What this connection sees of an attached diff must be plain tables: a carried table with a generated
    /// column (invisible to the reader's checks, which only look at declared columns) is not attached for
    /// bulk writes; the per-row merge applies the diff instead, reading only the declared columns.
    @Test func diffWithAGeneratedColumn_isMergedRowByRow() throws {
        let box = try Sandbox("bulk-hidden")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let device = try box.replica("B", fixture: "record-thing-demo")
        let b = try twins(box, device)
        for i in 0..<20 { try a.exec("INSERT INTO translations VALUES ('gg', ?, 'v', NULL)", [.text("k\(i)")]) }
        let file = try a.exportFile()
        do {
            let raw = try Connection(path: file.path)
            try raw.execute("ALTER TABLE translations ADD COLUMN extra AS (length(value) * 2)")
        }
        let report = try applyToBoth(file, b)
        #expect(report.status == .applied && report.inserted == 20, "\(report)")
        #expect(b.bulk.db.bulkRowsWritten == 0)
    }

    /// A damaged row found after the bulk writes (here by the digest) rolls them back with everything else.
    @Test func digestMismatch_rollsBackTheBulkWrites() throws {
        let box = try Sandbox("bulk-digest")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let device = try box.replica("B", fixture: "record-thing-demo")
        let b = try twins(box, device)
        for i in 0..<50 { try a.exec("INSERT INTO translations VALUES ('dd', ?, 'v', NULL)", [.text("k\(i)")]) }
        let file = try a.exportFile()
        do {
            let raw = try Connection(path: file.path)
            try raw.execute("UPDATE translations SET value = 'w' WHERE key = 'k49'")
        }
        let before = try b.bulk.fullDump()
        let report = try applyToBoth(file, b)
        #expect(report.status == .rejected && report.reason?.contains("digest") == true, "\(report)")
        let after = try b.bulk.fullDump()
        #expect(after == before, "database changed: \(firstDifference(before, after) ?? "")")
    }
}
