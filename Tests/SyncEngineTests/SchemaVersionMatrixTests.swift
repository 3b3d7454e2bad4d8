import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Three versions of one app's schema (Fixtures/databases/planner-v1…v3: a column added, a column renamed, a
/// column dropped, a NOT NULL column with and without a default, a new table, a key type change) syncing with
/// each other both ways: no diff is refused, every row lands (a new row lacking a value this version requires
/// waits visibly until one is declared), the columns both versions have end equal, the older app's own
/// positional INSERT keeps working, and values of a newer version survive an older device's upgrade.
@Suite("Schema versions: every version with every other")
struct SchemaVersionMatrixTests {
    static let versions = [1, 2, 3]
    static let pairs: [(Int, Int)] = versions.flatMap { a in versions.map { (a, $0) } }

    /// The app's own edits at version `v` (`tag` makes keys unique per device).
    static func edit(_ r: Replica, version v: Int, tag: String, n: Int) throws {
        switch v {
        case 1:
            try r.exec("INSERT INTO routines VALUES (?, ?, ?)", [.integer(Int64(100 * n + 1)), .text("row-\(tag)"), .text("v1 notes")])
            try r.exec("INSERT INTO requests VALUES (?, ?, ?)", [.text(String(100 * n + 2)), .text("https://\(tag)"), .text("new")])
            try r.exec("UPDATE records SET reps = reps + 1, weight = 70 WHERE id = 'r2'")
        case 2:
            try r.exec("INSERT INTO routines VALUES (?, ?, ?, ?)", [.integer(Int64(100 * n + 1)), .text("row-\(tag)"), .null, .text("red")])
            try r.exec("INSERT INTO requests VALUES (?, ?, ?, ?)", [.text(String(100 * n + 2)), .text("https://\(tag)"), .text("new"), .text("video")])
            try r.exec("INSERT INTO tags VALUES (?, ?)", [.text("t-\(tag)"), .text("label \(tag)")])
            try r.exec("UPDATE routines SET color = 'blue' WHERE id = 1")
        default:
            try r.exec("INSERT INTO routines VALUES (?, ?, ?)", [.integer(Int64(100 * n + 1)), .text("row-\(tag)"), .text("green")])
            try r.exec("INSERT INTO requests VALUES (?, ?, ?, ?, ?)", [.integer(Int64(100 * n + 2)), .text("https://\(tag)"), .text("new"), .text("doc"), .integer(3)])
            try r.exec("INSERT INTO tags VALUES (?, ?, ?)", [.text("t-\(tag)"), .text("label \(tag)"), .real(0.5)])
            try r.exec("UPDATE routines SET color = 'blue' WHERE id = 1")
        }
        try r.exec("UPDATE records SET reps = ? WHERE id = 'r1'", [.integer(Int64(10 + n))])
        try r.exec("DELETE FROM records WHERE id = 'r2'")
    }

    /// The columns both replicas' tables have, in the first one's order.
    static func commonColumns(_ a: Replica, _ b: Replica, _ table: String) throws -> [String] {
        let ca = try a.rows("SELECT name FROM pragma_table_info(?)", [.text(table)]).compactMap { $0[0].string }
        let cb = Set(try b.rows("SELECT name FROM pragma_table_info(?)", [.text(table)]).compactMap { $0[0].string?.lowercased() })
        return ca.filter { cb.contains($0.lowercased()) }
    }

    /// Rows of the common columns, compared as text (a key may be TEXT on one side and INTEGER on the other).
    static func commonRows(_ r: Replica, _ table: String, _ columns: [String]) throws -> [[SQLValue]] {
        try r.rows("SELECT " + columns.map { "CAST(\(quoteIdentifier($0)) AS TEXT)" }.joined(separator: ", ") + " FROM \(quoteIdentifier(table)) ORDER BY 1")
    }

    @Test(arguments: pairs)
    func versionsSyncBothWays_everyRowLands_commonColumnsEqual_olderAppStillWorks(a va: Int, b vb: Int) throws {
        let box = try Sandbox("matrix\(va)\(vb)")
        // A version that requires a value older ones do not send declares it for sync.
        let policies: (Int) -> [String: TablePolicy] = { $0 == 3 ? ["requests": TablePolicy(syncDefaults: ["priority": "0"])] : [:] }
        let a = try box.replica("A", fixture: "planner-v\(va)", policies: policies(va))
        let b = try box.replica("B", fixture: "planner-v\(vb)", policies: policies(vb))
        try Self.edit(a, version: va, tag: "a", n: 1)
        try Self.edit(b, version: vb, tag: "b", n: 2)
        var diffs: [URL] = []
        var rng = SeededGenerator(seed: UInt64(va * 10 + vb))
        try exchangeUntilQuiet([a, b], diffs: &diffs, rng: &rng, label: "v\(va)-v\(vb)")
        for r in [a, b] {
            let held = try r.db.heldRows()
            #expect(held.isEmpty, "\(r.name): \(held)")
            #expect(try r.rows("PRAGMA foreign_key_check").isEmpty)
        }
        for table in ["routines", "records", "requests", "tags"] {
            let columns = try Self.commonColumns(a, b, table)
            guard !columns.isEmpty else { continue }
            #expect(try Self.commonRows(a, table, columns) == Self.commonRows(b, table, columns), "v\(va)-v\(vb) \(table) (\(columns))")
        }
        // Every device's rows landed on the other.
        for r in [a, b] {
            #expect(try r.rows("SELECT id FROM routines WHERE id IN (101, 201) ORDER BY id") == [[.integer(101)], [.integer(201)]], "\(r.name)")
            #expect(try r.rows("SELECT CAST(id AS TEXT) FROM requests WHERE CAST(id AS TEXT) IN ('102', '202') ORDER BY 1") == [[.text("102")], [.text("202")]], "\(r.name)")
            #expect(try r.rows("SELECT id FROM records WHERE id = 'r2'").isEmpty)
        }
        // Each app's own positional INSERT still works: sync left its tables as it made them.
        for (r, v) in [(a, va), (b, vb)] {
            let width = try r.rows("SELECT count(*) FROM pragma_table_info('routines')")[0][0]
            #expect(width == .integer(v == 2 ? 4 : 3), "\(r.name): routines has the columns version \(v) made")
            try Self.edit(r, version: v, tag: "\(r.name)2", n: r.name == "A" ? 3 : 4)
        }
    }

    /// A version-3 value (a routine's color) reaches a version-1 device, which upgrades to version 2 later: the
    /// value is in its new column, and both devices end equal.
    @Test func newerValue_survivesAnOlderDevice_andItsUpgrade() throws {
        let box = try Sandbox("matrix-upgrade")
        let v3 = try box.replica("new", fixture: "planner-v3")
        let v1 = try box.replica("old", fixture: "planner-v1")
        try v3.exec("UPDATE routines SET color = 'teal' WHERE id = 2")
        try v3.exec("INSERT INTO routines VALUES (7, 'curl', 'amber')")
        #expect(v1.apply(try v3.exportFile()).status == .applied)
        #expect(try v1.rows("SELECT id, name FROM routines WHERE id = 7") == [[.integer(7), .text("curl")]])
        // The version-1 app upgrades to version 2 (its own migration).
        try v1.exec("""
            ALTER TABLE routines ADD COLUMN color TEXT;
            ALTER TABLE requests ADD COLUMN type TEXT NOT NULL DEFAULT 'image';
            CREATE TABLE IF NOT EXISTS tags(id TEXT PRIMARY KEY NOT NULL, label TEXT NOT NULL)
            """)
        #expect(try v1.export() == nil, "the upgrade moved kept values in and sends nothing")
        #expect(try v1.rows("SELECT id, color FROM routines ORDER BY id") == [[.integer(1), .null], [.integer(2), .text("teal")], [.integer(7), .text("amber")]])
        try v1.exec("UPDATE routines SET color = 'gold' WHERE id = 7")
        #expect(v3.apply(try v1.exportFile()).status == .applied)
        #expect(try v3.value("SELECT color FROM routines WHERE id = 7") == .text("gold"))
    }
}
