import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Convergence with foreign-key actions, a unique index and REPLACE: parents are deleted (and their keys reused)
/// while children are edited elsewhere; whatever ON DELETE SET NULL / CASCADE does on one device reaches the others.
@Suite("Convergence with foreign keys (property-based)")
struct ForeignKeyPropertyTests {
    static let parentKeys: [Int64] = [1, 2, 3, 4]
    static let childKeys = (0..<6).map { "c\($0)" }

    static func makeBase(in box: Sandbox) throws -> URL {
        let url = box.path("base.sqlite")
        let conn = try Connection(path: url.path)
        try conn.execute("""
            PRAGMA journal_mode = WAL;
            CREATE TABLE routines(id INTEGER PRIMARY KEY, name TEXT);
            CREATE UNIQUE INDEX routines_name ON routines(name);
            CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, routine_id INTEGER REFERENCES routines(id) ON DELETE SET NULL, reps INTEGER);
            CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, routine_id INTEGER NOT NULL REFERENCES routines(id) ON DELETE CASCADE, body TEXT);
            INSERT INTO routines VALUES (1, 'squat'), (2, 'bench');
            INSERT INTO records VALUES ('c0', 1, 5), ('c1', 2, 8);
            INSERT INTO notes VALUES ('c0', 1, 'deep'), ('c1', 2, 'pause');
            PRAGMA wal_checkpoint(TRUNCATE);
            """)
        return url
    }

    static let trace = ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_TRACE"] != nil

    static func randomEdit(_ r: Replica, _ rng: inout SeededGenerator, tag: String) throws {
        try randomEditOnce(r, &rng, tag: tag)
        if trace {
            print("TRACE \(r.name) edit -> routines \(try r.rows("SELECT id, name FROM routines ORDER BY id").map { $0.map(\.sqlLiteral).joined(separator: ":") }) records \(try r.rows("SELECT id, routine_id FROM records ORDER BY id").map { $0.map(\.sqlLiteral).joined(separator: ":") }) notes \(try r.rows("SELECT id, routine_id FROM notes ORDER BY id").map { $0.map(\.sqlLiteral).joined(separator: ":") }) changes \(try r.rows("SELECT pk, op FROM rtsync_changes ORDER BY seq").map { $0.map(\.sqlLiteral).joined(separator: ":") })")
        }
    }

    static func randomEditOnce(_ r: Replica, _ rng: inout SeededGenerator, tag: String) throws {
        let parents = try r.rows("SELECT id FROM routines").compactMap { $0[0].int64 }
        let pid = parentKeys.randomElement(using: &rng)!
        let child = childKeys.randomElement(using: &rng)!
        let name = SQLValue.text(["squat", "bench", "row", "press", "curl"].randomElement(using: &rng)!)
        switch Int.random(in: 0..<10, using: &rng) {
        case 0:
            try r.exec("DELETE FROM routines WHERE id = ?", [.integer(pid)])
        case 1:
            // A key deleted elsewhere may be reused here (SQLite reuses INTEGER PRIMARY KEY values).
            try r.exec("INSERT OR IGNORE INTO routines VALUES (?, ?)", [.integer(pid), name])
        case 2:
            try r.exec("INSERT OR REPLACE INTO routines VALUES (?, ?)", [.integer(pid), name])
        case 3, 4:
            guard let p = parents.randomElement(using: &rng) else { return }
            try r.exec("INSERT INTO records VALUES (?, ?, ?) ON CONFLICT(id) DO UPDATE SET routine_id = excluded.routine_id", [.text(child), .integer(p), .integer(Int64.random(in: 1...10, using: &rng))])
        case 5:
            try r.exec("UPDATE records SET reps = ? WHERE id = ?", [.integer(Int64.random(in: 1...10, using: &rng)), .text(child)])
        case 6:
            guard let p = parents.randomElement(using: &rng) else { return }
            try r.exec("INSERT OR IGNORE INTO notes VALUES (?, ?, ?)", [.text(child), .integer(p), .text("\(tag)")])
        case 7:
            try r.exec("UPDATE notes SET body = ? WHERE id = ?", [.text("\(tag)-\(Int.random(in: 0..<9, using: &rng))"), .text(child)])
        case 8:
            try r.exec("DELETE FROM records WHERE id = ?", [.text(child)])
        default:
            try r.exec("UPDATE OR IGNORE routines SET name = ? WHERE id = ?", [name, .integer(pid)])
        }
    }

    static func describe(_ file: URL) throws -> String {
        var parts: [String] = []
        try DiffReader(url: file).forEachChange { c in
            func short(_ k: Clock) -> String { "\(k.hlc.description.dropFirst(11).prefix(16))@\(k.site.suffix(3))" }
            parts.append("\(c.table) \(c.operation) \(c.values.map(\.sqlLiteral).joined(separator: ",")) born \(short(c.born)) clock \(short(c.clock))"
                         + c.columnClocks.map { " \($0.key)=\(short($0.value))" }.joined())
        }
        return parts.joined(separator: " | ")
    }

    @Test(arguments: ConvergencePropertyTests.seeds(from: 5000, ci: 25))
    func parentsDeletedWhileChildrenEditedElsewhere_randomDelivery_endIdentical(seed: Int) throws {
        var rng = SeededGenerator(seed: UInt64(seed))
        let box = try Sandbox("fkprop\(seed)")
        let base = try Self.makeBase(in: box)
        let replicas = try ["A", "B", "C"].map { try box.replica($0, source: base) }
        if seed % 2 == 1 { for r in replicas { try r.db.shiftWallClockForTesting(milliseconds: Int64.random(in: -3_600_000...3_600_000, using: &rng)) } }
        var diffs: [URL] = []
        let label = "seed \(seed)"
        let onApply: ((Replica, URL, ApplyReport) -> Void)? = !Self.trace ? nil : { r, f, report in
            print("TRACE \(r.name) apply \(f.lastPathComponent.dropFirst(14).prefix(8)) \(report.status) ins \(report.inserted) upd \(report.updated) del \(report.deleted) conf \(report.conflicts) -> records \((try? r.rows("SELECT id, routine_id FROM records ORDER BY id").map { $0.map(\.sqlLiteral).joined(separator: ":") }) ?? []) notes \((try? r.rows("SELECT id, routine_id FROM notes ORDER BY id").map { $0.map(\.sqlLiteral).joined(separator: ":") }) ?? []) routines \((try? r.rows("SELECT id FROM routines ORDER BY id").map { $0.map(\.sqlLiteral).joined(separator: ":") }) ?? [])")
        }
        let onExport: ((Replica, URL) -> Void)? = !Self.trace ? nil : { r, f in
            print("TRACE \(r.name) export \(f.lastPathComponent.dropFirst(14).prefix(8)) \((try? Self.describe(f)) ?? "")")
        }
        for round in 0..<4 {
            for r in replicas {
                for _ in 0..<Int.random(in: 0...4, using: &rng) { try Self.randomEdit(r, &rng, tag: "\(r.name)\(round)") }
                if let e = try r.export() {
                    diffs.append(URL(fileURLWithPath: e.file))
                    onExport?(r, URL(fileURLWithPath: e.file))
                }
            }
            for r in replicas { deliverRandomly(diffs.filter { _ in Bool.random(using: &rng) }, to: r, rng: &rng, label: label, onApply: onApply) }
        }
        try exchangeUntilQuiet(replicas, diffs: &diffs, rng: &rng, label: label, onExport: onExport, onApply: onApply)
        for r in replicas {
            #expect(try r.db.pendingChangeCount() == 0, "seed \(seed): \(r.name) still has changes")
            #expect(try r.rows("PRAGMA foreign_key_check").isEmpty, "seed \(seed): \(r.name) has dangling references")
        }
        if Self.trace {
            for r in replicas {
                for c in try r.conflicts() { print("TRACE \(r.name) conflict \(c.table) \(c.key) \(c.column) local \(c.localValue) \(c.localClock.map { "\($0)" } ?? "-") remote \(c.remoteValue) \(c.remoteClock.map { "\($0)" } ?? "-") winner \(c.winner): \(c.reason)") }
                for c in try r.rows("SELECT tid, pk, col, hlc, site FROM rtsync_clocks ORDER BY tid, pk, col") { print("TRACE \(r.name) clock \(c.map(\.sqlLiteral).joined(separator: " "))") }
            }
        }
        let reference = try replicas[0].dump()
        for r in replicas.dropFirst() {
            let d = try r.dump()
            #expect(d == reference, "seed \(seed): A and \(r.name) differ: \(firstDifference(reference, d) ?? "")")
        }
    }

    /// The lift-me case: removing a routine nulls its records' reference on every device, also a record pointed at
    /// it on another device before the removal arrived there; the overwritten reference is in the conflict log.
    @Test(arguments: [false, true])
    func removedRoutine_nullsEveryRecordsReference_onEveryDevice(referenceArrivesFirst: Bool) throws {
        let box = try Sandbox("fk-routine")
        let base = try Self.makeBase(in: box)
        let a = try box.replica("A", source: base), b = try box.replica("B", source: base)
        try b.exec("UPDATE records SET routine_id = 1 WHERE id = 'c1'")
        try b.exec("INSERT INTO records VALUES ('c7', 1, 3)")
        let fb = try b.exportFile()
        tick()
        if referenceArrivesFirst { #expect(a.apply(fb).status == .applied) }
        try a.exec("DELETE FROM routines WHERE id = 1")
        let fa = try a.exportFile()
        if !referenceArrivesFirst { #expect(a.apply(fb).status == .applied) }
        #expect(b.apply(fa).status == .applied)
        for _ in 0..<3 {
            let more = [try a.export(), try b.export()].compactMap { $0 }.map { URL(fileURLWithPath: $0.file) }
            if more.isEmpty { break }
            for f in more { a.apply(f); b.apply(f) }
        }
        for r in [a, b] {
            #expect(try r.rows("SELECT id, routine_id FROM records ORDER BY id") == [[.text("c0"), .null], [.text("c1"), .null], [.text("c7"), .null]], "\(r.name)")
            #expect(try r.rows("SELECT id FROM notes ORDER BY id") == [[.text("c1")]], "\(r.name): CASCADE")
        }
        try expectSameData(a, b)
        // A routine removed after its new references were seen overrides them knowingly: nothing to log. Removed
        // concurrently, the references it overrides are logged.
        let logged = try (a.conflicts() + b.conflicts()).filter { $0.reason.contains("ON DELETE") }
        #expect(logged.isEmpty == referenceArrivesFirst, "\(logged)")
    }
}
