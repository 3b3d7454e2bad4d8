import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Property: devices of two app versions (the newer one's migration adds a column) edit one table at random, with
/// `INSERT OR REPLACE` (a new incarnation of a row), updates of either version's columns, deletes and re-inserts,
/// and exchange diffs in part and out of order (an edit often arrives before the insert it follows). The older
/// devices run the migration at random points, and now and then one merges another's database (a catch-up). Once every device has it and everything is delivered, every device
/// holds the same rows and nothing is left aside. Written after the CLI chaos harness found seeds 4305 and 4769
/// (values kept aside for the wrong incarnation of a row, and none kept for a row replaced by an edit); it found
/// seed 9511 itself (a row made from an edit on an older device, which then migrated, kept the default).
@Suite("Values kept aside across app versions (property-based)")
struct AsideVersionsPropertyTests {
    static let older = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, qty INTEGER); INSERT INTO things VALUES ('t0', 'chair', 1), ('t1', 'lamp', 2)"
    static let migration = "ALTER TABLE things ADD COLUMN rating INTEGER"

    @Test(arguments: ConvergencePropertyTests.seeds(from: 9500, ci: 10))
    func randomEditsOnOlderAndNewerDevices_endIdenticalOnceAllMigrated(seed: Int) throws {
        var rng = SeededGenerator(seed: UInt64(seed))
        let box = try Sandbox("aside-versions-\(seed)")
        let base = box.path("base.sqlite")
        try Connection(path: base.path).execute(Self.older)
        let replicas = try ["a", "b", "c"].map { try box.replica($0, source: base, user: "u") }
        // One device of the newer version from the start; the others migrate at a random round (or at the end).
        var migrated = [true, false, false]
        try replicas[0].db.migrate(sql: Self.migration)
        let migrateAt = [0, Int.random(in: 1...5, using: &rng), Int.random(in: 1...5, using: &rng)]
        let keys = (0..<5).map { "t\($0)" }
        var diffs: [URL] = []
        var trace: [String] = []
        for round in 0..<5 {
            for (i, r) in replicas.enumerated() {
                if !migrated[i] && migrateAt[i] == round {
                    try r.db.migrate(sql: Self.migration)
                    migrated[i] = true
                    trace.append("\(r.name) migrates")
                }
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    let id = keys.randomElement(using: &rng)!
                    let n = Int64(Int.random(in: 0...99, using: &rng))
                    let sql: String
                    switch Int.random(in: 0..<10, using: &rng) {
                    case 0..<2: sql = migrated[i] ? "INSERT OR REPLACE INTO things VALUES ('\(id)', 'r\(n)', \(n), \(n % 7))" : "INSERT OR REPLACE INTO things VALUES ('\(id)', 'r\(n)', \(n))"
                    case 2: sql = migrated[i] ? "INSERT OR IGNORE INTO things VALUES ('\(id)', 'i\(n)', \(n), \(n % 5))" : "INSERT OR IGNORE INTO things VALUES ('\(id)', 'i\(n)', \(n))"
                    case 3..<5: sql = "UPDATE things SET title = 'u\(n)' WHERE id = '\(id)'"
                    case 5: sql = "UPDATE things SET qty = \(n) WHERE id = '\(id)'"
                    case 6..<8: sql = migrated[i] ? "UPDATE things SET rating = \(n % 9) WHERE id = '\(id)'" : "UPDATE things SET qty = qty + 1 WHERE id = '\(id)'"
                    case 8: sql = "DELETE FROM things WHERE id = '\(id)'"
                    default: sql = migrated[i] ? "UPDATE things SET rating = NULL, title = 'n\(n)' WHERE id = '\(id)'" : "UPDATE things SET title = 'o\(n)' WHERE id = '\(id)'"
                    }
                    try r.exec(sql)
                    trace.append("\(r.name): \(sql)")
                    tick()
                }
                if let e = try r.export() { diffs.append(URL(fileURLWithPath: e.file)); trace.append("\(r.name) exports \(URL(fileURLWithPath: e.file).lastPathComponent)") }
            }
            // Now and then a device merges another's database as a state diff (the catch-up after a restore).
            if Int.random(in: 0..<4, using: &rng) == 0 {
                let i = Int.random(in: 0..<3, using: &rng), j = (i + Int.random(in: 1...2, using: &rng)) % 3
                let scratch = box.path("scratch-\(round)")
                try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
                let report = try replicas[i].db.catchUp(from: replicas[j].dbURL, scratch: scratch)
                trace.append("\(replicas[i].name) catches up from \(replicas[j].name): \(report.status)")
                #expect(report.status == .applied, "seed \(seed): \(report)")
            }
            // Each device receives a random part of what exists, in random order.
            for r in replicas {
                let part = diffs.filter { _ in Bool.random(using: &rng) }.shuffled(using: &rng)
                for f in part {
                    let report = r.apply(f)
                    trace.append("\(r.name) applies \(f.lastPathComponent): \(report.status)")
                    #expect(report.status != .rejected, "seed \(seed): \(r.name) rejected \(f.lastPathComponent): \(report.reason ?? "")")
                }
            }
        }
        for (i, r) in replicas.enumerated() where !migrated[i] {
            try r.db.migrate(sql: Self.migration)
            trace.append("\(r.name) migrates")
        }
        try exchangeUntilQuiet(replicas, diffs: &diffs, rng: &rng, label: "aside versions seed \(seed)")
        let dumps = try replicas.map { try $0.rows("SELECT id, title, qty, rating FROM things ORDER BY id") }
        #expect(dumps[0] == dumps[1] && dumps[1] == dumps[2], "seed \(seed):\n\(dumps)\n\(trace.joined(separator: "\n"))")
        for r in replicas { #expect(try r.db.asideValues(table: "things").isEmpty, "seed \(seed): \(r.name) has values aside") }
    }
}
