import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Two divergences the property `randomEditsLeftUnexportedWhenDiffsArrive_rowAndDeletePolicies_endIdentical` found
/// (seeds 10618 and 10565), each as a scenario: three replicas of the items table, every diff delivered everywhere,
/// and the replicas must end identical.
@Suite("row versions and deletes meeting edits not yet exported")
struct RowIncarnationScenarioTests {
    /// A short pause so that the next edit's wall clock is later than the last one's.
    static func tick() { usleep(5_000) }

    /// B inserts a key itself while another device's version of that key is deleted elsewhere; B refuses that
    /// delete (its own insert is newer), then deletes its own row before exporting. The older version's insert,
    /// arriving at B last, must not bring the row back: B's delete goes out born with B's insert, and B keeps knowing
    /// the older version is gone.
    @Test(arguments: [TablePolicy(.lwwColumn), TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins), TablePolicy(.lwwRow)])
    func olderVersionDeletedElsewhere_whileAnUnexportedNewerOneComesAndGoes_staysDeletedEverywhere(_ policy: TablePolicy) throws {
        let box = try Sandbox("incarnations")
        let base = try ConvergencePropertyTests.makeBase(in: box, uniqueA: false)
        let (a, b, c) = try (box.replica("A", source: base, policies: ["items": policy]), box.replica("B", source: base, policies: ["items": policy]),
                             box.replica("C", source: base, policies: ["items": policy]))
        try a.exec("INSERT INTO items VALUES ('k3', 'from A', 1, NULL)")
        let inserted = try a.exportFile()
        #expect(c.apply(inserted).status == .applied)
        Self.tick()
        try c.exec("DELETE FROM items WHERE id = 'k3'")
        let deleted = try c.exportFile()
        Self.tick()
        try b.exec("INSERT INTO items VALUES ('k3', 'from B', 2, NULL)")
        #expect(b.apply(deleted).status == .applied)
        #expect(try b.value("SELECT a FROM items WHERE id = 'k3'") == .text("from B"), "B's newer row outlives the older one's delete")
        try b.exec("DELETE FROM items WHERE id = 'k3'")
        let ownDelete = try b.exportFile()
        #expect(b.apply(inserted).status == .applied)
        #expect(try b.value("SELECT count(*) FROM items WHERE id = 'k3'") == .integer(0), "the older version's late insert came back on B")
        for r in [a, c] { #expect(r.apply(ownDelete).status == .applied) }
        #expect(a.apply(deleted).status == .applied)
        let reference = try a.dump()
        for r in [b, c] {
            let d = try r.dump()
            #expect(d == reference, "A and \(r.name) differ: \(firstDifference(reference, d) ?? "")")
        }
        #expect(try a.value("SELECT count(*) FROM items WHERE id = 'k3'") == .integer(0))
    }

    /// In an `lww-row` table with last-writer-wins deletes, a delete meets a row version made after it: the row
    /// survives whole on every device (the one that wrote it, the one that took it whole before the delete came, and
    /// the one that deleted it and takes it back), instead of some devices erasing the columns the later version did
    /// not change.
    @Test func lwwRowTable_deleteOlderThanARowVersion_rowSurvivesWholeOnEveryDevice() throws {
        let box = try Sandbox("lwwrow-delete")
        let policy = ["items": TablePolicy(.lwwRow, onDeleteConflict: .lastWriterWins)]
        let base = try ConvergencePropertyTests.makeBase(in: box, uniqueA: false)
        let (a, b, c) = try (box.replica("A", source: base, policies: policy), box.replica("B", source: base, policies: policy),
                             box.replica("C", source: base, policies: policy))
        try a.exec("DELETE FROM items WHERE id = 'k0'")
        let deleted = try a.exportFile()
        Self.tick()
        try c.exec("UPDATE items SET a = NULL WHERE id = 'k0'")
        let edited = try c.exportFile()
        #expect(b.apply(edited).status == .applied)
        #expect(b.apply(deleted).status == .applied)
        #expect(a.apply(edited).status == .applied)
        #expect(c.apply(deleted).status == .applied)
        for r in [a, b, c] {
            #expect(try r.rows("SELECT a, b, c FROM items WHERE id = 'k0'") == [[.null, .integer(0), .real(0.5)]], "\(r.name)")
        }
        let reference = try a.dump()
        for r in [b, c] {
            let d = try r.dump()
            #expect(d == reference, "A and \(r.name) differ: \(firstDifference(reference, d) ?? "")")
        }
    }
}
