import Foundation
import RTSQLite
import SyncEngine
import Testing

/// A column renamed between app versions (planner v1 `records.weight`, v2 and v3 `records.load_kg`): with the rename
/// declared (`TablePolicy.renamed`), or learned from this database's own RENAME COLUMN, a value sent under either
/// name lands in the column the receiver has; clocks decide between the names; without either, the older device
/// keeps the newer name's values aside and a round trip through it loses nothing.
@Suite("Columns renamed between app versions")
struct RenamedColumnTests {
    static let renamed = ["records": TablePolicy(renamed: ["weight": "load_kg"])]
    /// Version 3 requires a value older versions do not send (see SchemaVersionMatrixTests).
    static func policies(_ v: Int, declared: Bool) -> [String: TablePolicy] {
        var p: [String: TablePolicy] = declared ? renamed : [:]
        if v == 3 { p["requests"] = TablePolicy(syncDefaults: ["priority": "0"]) }
        return p
    }
    static func weightColumn(_ v: Int) -> String { v == 1 ? "weight" : "load_kg" }

    static func weight(_ r: Replica, _ v: Int, _ id: String) throws -> SQLValue? {
        try r.value("SELECT \(weightColumn(v)) FROM records WHERE id = ?", [.text(id)])
    }

    @Test(arguments: SchemaVersionMatrixTests.pairs.filter { $0.0 != $0.1 })
    func declaredRename_everyVersionPair_valuesLandUnderEitherName_laterEditWins(a va: Int, b vb: Int) throws {
        let box = try Sandbox("renamed\(va)\(vb)")
        let a = try box.replica("A", fixture: "planner-v\(va)", policies: Self.policies(va, declared: true))
        let b = try box.replica("B", fixture: "planner-v\(vb)", policies: Self.policies(vb, declared: true))
        // A new row and an edit of an existing one, each under the sender's name.
        try a.exec("INSERT INTO records(id, reps, \(Self.weightColumn(va))) VALUES ('ra', 1, 11.5)")
        try a.exec("UPDATE records SET \(Self.weightColumn(va)) = 101 WHERE id = 'r1'")
        let ra = b.apply(try a.exportFile())
        #expect(ra.status == .applied && ra.columnsKeptAside.isEmpty, "\(ra)")
        #expect(try Self.weight(b, vb, "ra") == .real(11.5))
        #expect(try Self.weight(b, vb, "r1") == .real(101))
        // The other way, and concurrent edits of the column under its two names: the later one wins on both sides.
        try b.exec("UPDATE records SET \(Self.weightColumn(vb)) = 62 WHERE id = 'r2'")
        try b.exec("UPDATE records SET \(Self.weightColumn(vb)) = 12.5 WHERE id = 'ra'")
        tick()
        try a.exec("UPDATE records SET \(Self.weightColumn(va)) = 13.5 WHERE id = 'ra'")
        let fromB = try b.exportFile(), fromA = try a.exportFile()
        #expect(a.apply(fromB).status == .applied)
        #expect(b.apply(fromA).status == .applied)
        for (r, v) in [(a, va), (b, vb)] {
            #expect(try Self.weight(r, v, "r2") == .real(62), "\(r.name)")
            #expect(try Self.weight(r, v, "ra") == .real(13.5), "\(r.name): the later edit wins")
            #expect(try r.db.asideValues(table: "records").isEmpty, "\(r.name)")
        }
        // The earlier edit is in A's conflict log as the loser.
        let logged = try a.conflicts(table: "records").filter { $0.column.lowercased() == Self.weightColumn(va) }
        #expect(logged.contains { $0.remoteValue == .real(12.5) }, "\(logged)")
    }

    /// No rename known on the old device: it keeps the new name's values aside, its own edits under the old name still
    /// land on the newer device (which has the rename declared), and its upgrade (its own RENAME COLUMN) puts the
    /// later value of the two in the column.
    @Test func undeclaredOnTheOldDevice_newNameKeptAside_roundTripLosesNothing_upgradeSettlesByClock() throws {
        let box = try Sandbox("renamed-aside")
        let old = try box.replica("old", fixture: "planner-v1")
        let new = try box.replica("new", fixture: "planner-v3", policies: Self.policies(3, declared: true))
        try new.exec("UPDATE records SET load_kg = 120 WHERE id = 'r1'")
        try new.exec("UPDATE records SET load_kg = 65 WHERE id = 'r2'")
        let r1 = old.apply(try new.exportFile())
        #expect(r1.status == .applied && r1.columnsKeptAside == ["records.load_kg"], "\(r1)")
        #expect(try old.value("SELECT weight FROM records WHERE id = 'r1'") == .real(100), "no rename known here: the old column is untouched")
        #expect(try old.db.asideValues(table: "records")["'r1'"] == ["load_kg": .real(120)])
        // A round trip through the old device: its edit of another column leaves the newer value alone...
        try old.exec("UPDATE records SET reps = 9 WHERE id = 'r1'")
        #expect(new.apply(try old.exportFile()).status == .applied)
        #expect(try new.rows("SELECT reps, load_kg FROM records WHERE id = 'r1'") == [[.integer(9), .real(120)]])
        // ...and its later edit under the old name wins there.
        tick()
        try old.exec("UPDATE records SET weight = 70 WHERE id = 'r2'")
        #expect(new.apply(try old.exportFile()).status == .applied)
        #expect(try new.value("SELECT load_kg FROM records WHERE id = 'r2'") == .real(70))
        // The old app upgrades (its own migration renames the column): r1 takes the newer device's later value,
        // r2 keeps its own later one; nothing is sent, and both devices hold the same.
        try old.db.migrate(sql: "ALTER TABLE records RENAME COLUMN weight TO load_kg")
        #expect(try old.export() == nil)
        #expect(try old.rows("SELECT id, load_kg FROM records ORDER BY id") == new.rows("SELECT id, load_kg FROM records ORDER BY id"))
        #expect(try old.rows("SELECT load_kg FROM records WHERE id = 'r1'") == [[.real(120)]])
        #expect(try old.db.asideValues(table: "records").isEmpty)
    }

    /// A device that renamed the column itself (through `migrate`, or the app's own ALTER TABLE) merges diffs of
    /// devices still on the old name into it without any config, with the column's clocks kept across the rename.
    @Test(arguments: [true, false])
    func ownRenameColumn_learned_oldDevicesEditsLandInTheRenamedColumn(throughMigrate: Bool) throws {
        let box = try Sandbox("renamed-learned")
        let upgraded = try box.replica("upgraded", fixture: "planner-v1")
        let old = try box.replica("old", fixture: "planner-v1")
        // Concurrent edits of r1 before the upgrade, the upgraded device's later: its clock must stay with the column
        // across the rename, so the old device's earlier edit loses there.
        try old.exec("UPDATE records SET weight = 1 WHERE id = 'r1'")
        tick()
        try upgraded.exec("UPDATE records SET weight = 105 WHERE id = 'r1'")
        let sql = "ALTER TABLE records RENAME COLUMN weight TO load_kg"
        if throughMigrate { try upgraded.db.migrate(sql: sql) } else { try upgraded.exec(sql) }
        let early = try upgraded.exportFile(), stale = try old.exportFile()
        #expect(upgraded.apply(stale).status == .applied)
        #expect(try upgraded.value("SELECT load_kg FROM records WHERE id = 'r1'") == .real(105), "the later edit keeps its clock across the rename")
        #expect(old.apply(early).status == .applied)
        #expect(try old.value("SELECT weight FROM records WHERE id = 'r1'") == .real(1), "no rename known on the old device: kept aside")
        // A later edit under the old name lands in the renamed column.
        tick()
        try old.exec("UPDATE records SET weight = 66, reps = 3 WHERE id = 'r2'")
        #expect(upgraded.apply(try old.exportFile()).status == .applied)
        #expect(try upgraded.rows("SELECT reps, load_kg FROM records WHERE id = 'r2'") == [[.integer(3), .real(66)]])
        #expect(try upgraded.db.asideValues(table: "records").isEmpty, "nothing kept aside: the rename is known")
        try old.db.migrate(sql: sql)
        #expect(try old.export() == nil)
        #expect(try upgraded.export() == nil)
        #expect(try old.rows("SELECT id, reps, load_kg FROM records ORDER BY id") == upgraded.rows("SELECT id, reps, load_kg FROM records ORDER BY id"))
        #expect(try old.value("SELECT load_kg FROM records WHERE id = 'r1'") == .real(105))
    }

    /// A migration that renames a column and also drops another cannot run beside the witness: it still runs, and
    /// the rename is then not learned (a diff under the old name is kept aside), as the README says.
    @Test func migrationThatAlsoDropsAColumn_runs_renameNotLearned() throws {
        let box = try Sandbox("renamed-drop")
        let upgraded = try box.replica("upgraded", fixture: "planner-v1")
        let old = try box.replica("old", fixture: "planner-v1")
        try upgraded.db.migrate(sql: "ALTER TABLE records RENAME COLUMN weight TO load_kg; ALTER TABLE routines DROP COLUMN notes")
        #expect(try upgraded.rows("SELECT name FROM pragma_table_info('routines') ORDER BY cid") == [[.text("id")], [.text("name")]])
        try old.exec("UPDATE records SET weight = 77 WHERE id = 'r1'")
        let r = upgraded.apply(try old.exportFile())
        #expect(r.status == .applied && r.columnsKeptAside.contains("records.weight"), "\(r)")
        // Declaring it afterwards moves the kept value in.
        try upgraded.db.applyPolicies(Self.renamed)
        _ = try upgraded.export()
        #expect(try upgraded.value("SELECT load_kg FROM records WHERE id = 'r1'") == .real(77))
    }

    /// A table renamed away (its triggers go with it) and made again with another column where the old one was is
    /// no RENAME COLUMN: nothing is learned, and the old name's values are kept aside, not put in the new column.
    @Test func tableRebuiltUnderTheSameName_otherColumnInPlace_noRenameLearned() throws {
        let box = try Sandbox("renamed-rebuilt")
        let upgraded = try box.replica("upgraded", fixture: "planner-v1")
        let old = try box.replica("old", fixture: "planner-v1")
        try upgraded.exec("""
            ALTER TABLE records RENAME TO records_before;
            CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, routine_id INTEGER REFERENCES routines(id) ON DELETE SET NULL, reps INTEGER, note TEXT);
            INSERT INTO records(id, routine_id, reps) SELECT id, routine_id, reps FROM records_before
            """)
        try old.exec("UPDATE records SET weight = 90 WHERE id = 'r1'")
        let r = upgraded.apply(try old.exportFile())
        #expect(r.status == .applied && r.columnsKeptAside == ["records.weight"], "\(r)")
        #expect(try upgraded.rows("SELECT note FROM records WHERE id = 'r1'") == [[.null]])
        #expect(try upgraded.db.asideValues(table: "records")["'r1'"] == ["weight": .real(90)])
    }

    @Test func policyConfig_readsRenamed_refusesAColumnMappedToItself_andTrackedTablesShowIt() throws {
        let box = try Sandbox("renamed-config")
        let good = box.path("good.json"), bad = box.path("bad.json")
        try Data(#"{"tables": {"records": {"renamed": {"weight": "load_kg"}}}}"#.utf8).write(to: good)
        try Data(#"{"tables": {"records": {"renamed": {"weight": "Weight"}}}}"#.utf8).write(to: bad)
        let loaded = try PolicyConfig.load(from: good)
        #expect(loaded["records"]?.renamed == ["weight": "load_kg"])
        #expect(throws: SyncEngineError.self) { try PolicyConfig.load(from: bad) }
        let a = try box.replica("A", fixture: "planner-v1")
        try a.db.applyPolicies(loaded)
        #expect(try a.db.trackedTables().first { $0.name == "records" }?.policy.renamed == ["weight": "load_kg"])
        // Declaring no rename removes the declared one.
        try a.db.setPolicy(TablePolicy(), for: "records")
        #expect(try a.db.trackedTables().first { $0.name == "records" }?.policy.renamed == [:])
    }

    // MARK: Property: random edits on an old and a new device

    /// Random inserts, updates (under each device's name) and deletes of `records` on a version-1 and a version-3
    /// device, exchanged in random order: with the rename declared on both, every row ends with the same value in
    /// `weight` and `load_kg`; with it declared on neither (the v3 device renamed the column itself), the same holds
    /// once the v1 device upgrades.
    @Test(arguments: ConvergencePropertyTests.seeds(from: 9000, ci: 12))
    func randomEditsOnOldAndNewDevice_everyValueEndsWhereItBelongs(seed: Int) throws {
        for declared in [true, false] {
            var rng = SeededGenerator(seed: UInt64(seed) &* 2 &+ (declared ? 1 : 0))
            let box = try Sandbox("renamed-prop\(seed)")
            let old = try box.replica("old", fixture: "planner-v1", policies: declared ? Self.renamed : [:])
            let new = try box.replica("new", fixture: "planner-v1", policies: declared ? Self.renamed : [:])
            try new.db.migrate(sql: "ALTER TABLE records RENAME COLUMN weight TO load_kg")
            let ids = (0..<6).map { "p\($0)" } + ["r1", "r2"]
            var diffs: [URL] = []
            for round in 0..<4 {
                for (r, column) in [(old, "weight"), (new, "load_kg")] {
                    for _ in 0..<Int.random(in: 1...4, using: &rng) {
                        let id = ids.randomElement(using: &rng)!
                        let value = SQLValue.real(Double(Int.random(in: 0...999, using: &rng)))
                        switch Int.random(in: 0..<10, using: &rng) {
                        case 0..<3: try r.exec("INSERT OR IGNORE INTO records(id, reps, \(column)) VALUES (?, ?, ?)", [.text(id), .integer(Int64(round)), value])
                        case 3..<8: try r.exec("UPDATE records SET \(column) = ? WHERE id = ?", [value, .text(id)])
                        case 8: try r.exec("UPDATE records SET reps = ? WHERE id = ?", [.integer(Int64(round * 10)), .text(id)])
                        default: try r.exec("DELETE FROM records WHERE id = ?", [.text(id)])
                        }
                        tick()
                    }
                }
                try exchangeUntilQuiet([old, new], diffs: &diffs, rng: &rng, label: "renamed seed \(seed)")
            }
            if !declared {
                try old.db.migrate(sql: "ALTER TABLE records RENAME COLUMN weight TO load_kg")
                try exchangeUntilQuiet([old, new], diffs: &diffs, rng: &rng, label: "renamed seed \(seed) after upgrade")
            }
            let oldColumn = declared ? "weight" : "load_kg"
            let oldRows = try old.rows("SELECT id, reps, \(oldColumn) FROM records ORDER BY id")
            let newRows = try new.rows("SELECT id, reps, load_kg FROM records ORDER BY id")
            #expect(oldRows == newRows, "seed \(seed), declared \(declared)")
            #expect(try old.db.asideValues(table: "records").isEmpty && new.db.asideValues(table: "records").isEmpty, "seed \(seed), declared \(declared)")
        }
    }
}
