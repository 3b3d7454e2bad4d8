import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Convergence on the real schemas rtsync ships fixtures for (and the Record Thing database where present):
/// random inserts (copies of existing rows under new keys), updates (values taken from other rows of the same
/// column, so they fit the column), REPLACE and deletes on three replicas with skewed clocks, diffs delivered in
/// random order with duplicates. Every write that the schema refuses is skipped, as an app would see it fail.
@Suite("Convergence on real schemas (property-based)")
struct SchemaPropertyTests {
    static var fixtures: [URL] {
        var out = ["record-thing-demo", "routine-records", "routines-logs"].map(fixtureURL)
        if FileManager.default.fileExists(atPath: recordThingURL.path) { out.append(recordThingURL) }
        return out
    }

    struct Table {
        var name: String
        var columns: [String]
        var keys: [String]
        var keyTypes: [String]
    }

    static func tables(_ r: Replica) throws -> [Table] {
        try r.db.trackedTables().compactMap { t in
            let info = try r.rows("SELECT name, type, pk FROM pragma_table_info(?) ORDER BY cid", [.text(t.name)])
            let keys = info.filter { ($0[2].int64 ?? 0) > 0 }.sorted { ($0[2].int64 ?? 0) < ($1[2].int64 ?? 0) }
            guard !keys.isEmpty else { return nil }
            return Table(name: t.name, columns: info.compactMap { $0[0].string }, keys: keys.compactMap { $0[0].string }, keyTypes: keys.map { $0[1].string ?? "" })
        }
    }

    static func q(_ name: String) -> String { "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

    /// One random write; false when the schema refused it (nothing changed).
    static func randomEdit(_ r: Replica, _ tables: [Table], _ rng: inout SeededGenerator, tag: String, counter: inout Int) throws {
        guard let t = tables.randomElement(using: &rng) else { return }
        let rows = try r.rows("SELECT " + t.columns.map(q).joined(separator: ", ") + " FROM " + q(t.name) + " ORDER BY rowid LIMIT 40")
        func newKey(_ i: Int) -> SQLValue {
            counter += 1
            return KeyAffinityKind(t.keyTypes[i]) == .integer ? .integer(Int64(900_000 + counter * 10 + Int.random(in: 0..<10, using: &rng)))
                : .text("\(tag)-\(counter)")
        }
        let keyIndexes = t.keys.compactMap { t.columns.firstIndex(of: $0) }
        do {
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<3:
                // A copy of a row under a new key (or, for REPLACE, sometimes an existing one).
                guard var row = rows.randomElement(using: &rng) else { return }
                let replace = Int.random(in: 0..<4, using: &rng) == 0
                if !(replace && Bool.random(using: &rng)) { for (i, k) in keyIndexes.enumerated() { row[k] = newKey(i) } }
                try r.exec("INSERT OR \(replace ? "REPLACE" : "IGNORE") INTO " + q(t.name) + " (" + t.columns.map(q).joined(separator: ", ") + ") VALUES ("
                           + t.columns.map { _ in "?" }.joined(separator: ", ") + ")", row)
            case 3..<8:
                guard let row = rows.randomElement(using: &rng), let other = rows.randomElement(using: &rng) else { return }
                let candidates = t.columns.indices.filter { !keyIndexes.contains($0) }
                guard let c = candidates.randomElement(using: &rng) else { return }
                try r.exec("UPDATE OR IGNORE " + q(t.name) + " SET " + q(t.columns[c]) + " = ? WHERE "
                           + keyIndexes.map { q(t.columns[$0]) + " = ?" }.joined(separator: " AND "), [other[c]] + keyIndexes.map { row[$0] })
            default:
                guard let row = rows.randomElement(using: &rng) else { return }
                try r.exec("DELETE FROM " + q(t.name) + " WHERE " + keyIndexes.map { q(t.columns[$0]) + " = ?" }.joined(separator: " AND "), keyIndexes.map { row[$0] })
            }
        } catch let e as SQLiteError where e.isConstraintViolation {
            // The schema refused the write (a foreign key, NOT NULL, CHECK): the app would have seen an error.
        }
    }

    enum KeyAffinityKind { case integer, other
        init(_ type: String) { self = type.uppercased().contains("INT") ? .integer : .other }
    }

    @Test(arguments: fixtures, ConvergencePropertyTests.seeds(from: 6000, ci: 6))
    func randomWritesOnRealSchemas_randomDelivery_endIdentical(fixture: URL, seed: Int) throws {
        var rng = SeededGenerator(seed: UInt64(seed))
        let box = try Sandbox("schemaprop\(seed)")
        let replicas = try ["A", "B", "C"].map { try box.replica($0, source: fixture) }
        for r in replicas { try r.db.shiftWallClockForTesting(milliseconds: Int64.random(in: -3_600_000...3_600_000, using: &rng)) }
        let tables = try Self.tables(replicas[0])
        var counter = 0
        var diffs: [URL] = []
        let label = "\(fixture.lastPathComponent) seed \(seed)"
        for round in 0..<3 {
            for r in replicas {
                for _ in 0..<Int.random(in: 0...5, using: &rng) { try Self.randomEdit(r, tables, &rng, tag: "\(r.name)\(round)", counter: &counter) }
                if let e = try r.export() { diffs.append(URL(fileURLWithPath: e.file)) }
            }
            for r in replicas { deliverRandomly(diffs.filter { _ in Bool.random(using: &rng) }, to: r, rng: &rng, label: label) }
        }
        try exchangeUntilQuiet(replicas, diffs: &diffs, rng: &rng, label: label)
        for r in replicas { #expect(try r.db.pendingChangeCount() == 0, "\(label): \(r.name) still has changes") }
        let reference = try replicas[0].dump()
        for r in replicas.dropFirst() {
            let d = try r.dump()
            #expect(d == reference, "\(label): A and \(r.name) differ: \(firstDifference(reference, d) ?? "")")
        }
    }
}
