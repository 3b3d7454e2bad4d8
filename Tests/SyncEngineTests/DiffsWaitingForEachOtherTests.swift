import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Diffs that each refer to rows the other brings are applied together. Found by the CLI chaos harness (seed 2375's
/// sibling 3202, about two runs in three on the code of 6b399f5 too): a tag lost a UNIQUE collision on device A, so
/// the child row of the same diff that referred to it was left without its tag; the author's next diff settled that
/// child (its reference set to NULL) but brought it back as a new incarnation referring to a parent only the first
/// diff brings. Each diff alone left a foreign key unresolved, both were deferred at every sync, and A never converged.
@Suite("Diffs waiting for each other")
struct DiffsWaitingForEachOtherTests {
    let k = BulkKnownRowsTests()
    static let schema = """
        CREATE TABLE parent(id TEXT PRIMARY KEY NOT NULL, name TEXT);
        CREATE TABLE child(id TEXT PRIMARY KEY NOT NULL, parent_id TEXT REFERENCES parent(id) ON DELETE CASCADE, label TEXT);
        """
    static let parent = TableDefinition(name: "parent", columns: [ColumnDefinition(name: "id", type: "TEXT", notNull: true, primaryKey: 1), ColumnDefinition(name: "name", type: "TEXT")])
    static let child = TableDefinition(name: "child", columns: [
        ColumnDefinition(name: "id", type: "TEXT", notNull: true, primaryKey: 1), ColumnDefinition(name: "parent_id", type: "TEXT"), ColumnDefinition(name: "label", type: "TEXT"),
    ], foreignKeys: [ForeignKeyDefinition(columns: ["parent_id"], table: "parent", referencedColumns: ["id"], onDelete: "CASCADE", onUpdate: "NO ACTION")])

    func diff(_ box: Sandbox, _ rows: [RowChange]) throws -> URL {
        let w = try k.writer(box)
        try w.addTable(Self.parent)
        try w.addTable(Self.child)
        for r in rows { try w.append(r) }
        return try w.finish()
    }

    func up(_ t: String, _ v: [SQLValue], _ c: Clock) -> RowChange { RowChange(table: t, operation: .upsert, values: v, clock: c, born: c) }

    @Test func twoDiffsReferringToEachOthersRows_applyTogether_inEitherOrderOfArrival() throws {
        for firstAlone in [false, true] {
            let box = try Sandbox("waiting-for-each-other")
            let device = try k.device(box, "B", Self.schema)
            // X: parent Q, and child c1 of parent P; Y: parent P, and child c2 of parent Q.
            let x = try diff(box, [up("parent", [.text("Q"), .text("q")], k.clock(50)), up("child", [.text("c1"), .text("P"), .text("one")], k.clock(49))])
            let y = try diff(box, [up("parent", [.text("P"), .text("p")], k.clock(40)), up("child", [.text("c2"), .text("Q"), .text("two")], k.clock(39))])
            if firstAlone {
                // X arrives alone first and waits; Y comes with the next sync.
                let r = device.db.apply(diffs: [x])
                #expect(r.map(\.status) == [.deferred], "\(r)")
            }
            let reports = device.db.apply(diffs: [x, y])
            #expect(reports.map(\.status) == [.applied, .applied], "\(reports.map { "\($0.status) \($0.reason ?? "")" })")
            #expect(try device.rows("SELECT id, parent_id FROM child ORDER BY id") == [[.text("c1"), .text("P")], [.text("c2"), .text("Q")]])
            #expect(try device.rows("PRAGMA foreign_key_check").isEmpty)
            #expect(try device.rows("SELECT count(*) FROM rtsync_applied") == [[.integer(2)]])
        }
    }

    /// When the diffs together still leave a reference unresolved, none of them is applied and none is quarantined:
    /// they wait, as each did alone.
    @Test func diffsThatStillWaitTogether_stayDeferred_andNothingChanges() throws {
        let box = try Sandbox("waiting-together-unresolved")
        let device = try k.device(box, "B", Self.schema)
        let x = try diff(box, [up("parent", [.text("Q"), .text("q")], k.clock(50)), up("child", [.text("c1"), .text("P"), .text("one")], k.clock(49))])
        let y = try diff(box, [up("child", [.text("c2"), .text("Q"), .text("two")], k.clock(39)), up("child", [.text("c3"), .text("R"), .text("three")], k.clock(38))])
        let before = try device.rows("SELECT * FROM child")
        let reports = device.db.apply(diffs: [x, y], quarantine: box.path("quarantine"))
        #expect(reports.map(\.status) == [.deferred, .deferred], "\(reports)")
        #expect(try device.rows("SELECT * FROM child") == before)
        #expect(try device.rows("SELECT count(*) FROM parent") == [[.integer(0)]])
        let quarantined = (try? FileManager.default.contentsOfDirectory(atPath: box.path("quarantine").path)) ?? []
        #expect(quarantined.isEmpty)
        #expect(FileManager.default.fileExists(atPath: x.path) && FileManager.default.fileExists(atPath: y.path))
    }
}
