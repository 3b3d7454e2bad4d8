import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Two writes outside the merge's own inserts and updates that a table's conflict clauses could steer: the merge's
/// hand-written `ON DELETE SET NULL` (a child arriving after its parent was deleted here) and restoring a conflict's
/// losing value. Each must behave as plain SQLite's ABORT would: no other row deleted, no write dropped or changed
/// behind the caller's back.
@Suite("Conflict clauses: FK SET NULL and conflict restore")
struct ConflictClauseGapsTests {
    // MARK: - (1) ON DELETE SET NULL carried out by the merge

    /// A reference declared `NOT NULL ON CONFLICT REPLACE DEFAULT 'inbox'` with `ON DELETE SET NULL`: SQLite's own
    /// action runs as OR ABORT, so deleting a referenced folder fails (NOT NULL) rather than moving the note to
    /// 'inbox'. A adds a note in 'work' while B deletes 'work'. A gets the delete (SQLite's action: rejected); B gets
    /// the note after its delete (the merge's action) and must do the same, not file the note under 'inbox'.
    @Test func setNullOnNotNullOnConflictReplaceReference_childAfterParentDelete_failsLikeSQLitesOwnAction() throws {
        let box = try Sandbox("gap-fk")
        let base = try box.baseDatabase("""
            CREATE TABLE folders(id TEXT PRIMARY KEY NOT NULL, name TEXT);
            CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, body TEXT,
                folder TEXT NOT NULL ON CONFLICT REPLACE DEFAULT 'inbox' REFERENCES folders(id) ON DELETE SET NULL);
            INSERT INTO folders VALUES ('inbox', 'Inbox'), ('work', 'Work');
            """)
        let a = try box.replica("A", source: base), b = try box.replica("B", source: base)
        try a.exec("INSERT INTO notes VALUES ('n1', 'hello', 'work')")
        let fa = try a.exportFile()
        tick()
        try b.exec("DELETE FROM folders WHERE id = 'work'")
        let fb = try b.exportFile()
        let bBefore = try b.dump()

        let atA = a.apply(fb)
        #expect(atA.status == .rejected, "SQLite's own SET NULL: \(atA.status) \(atA.reason ?? "")")
        #expect(atA.reason?.contains("NOT NULL") == true, "\(atA.reason ?? "")")

        let atB = b.apply(fa)
        #expect(atB.status == atA.status, "the merge's SET NULL: \(atB.status) \(atB.reason ?? "")")
        #expect(atB.reason?.contains("NOT NULL") == true, "\(atB.reason ?? "")")
        #expect(try b.rows("SELECT folder FROM notes WHERE id = 'n1'").isEmpty, "the note was filed under the column default")
        #expect(try b.dump() == bBefore)
    }

    // MARK: - (2) Restoring a losing value another row now holds

    /// k1's name: A wrote 'carl', B 'dora' later (B wins; A logs 'carl'). Then A gives 'carl' to k2 and restores the
    /// entry. Whatever the UNIQUE constraint's own clause, the restore fails with a message naming the table, column,
    /// value and the row holding it; k2 is not deleted (REPLACE), the restore not dropped as if done (IGNORE), nothing
    /// changes and the entry stays open. Once k2 lets go of 'carl' the restore succeeds and reaches B.
    @Test(arguments: ["", " ON CONFLICT REPLACE", " ON CONFLICT IGNORE", " ON CONFLICT FAIL", " ON CONFLICT ROLLBACK"])
    func restoringAValueAnotherRowHolds_failsNamingTheHolder_andChangesNothing(clause: String) throws {
        let box = try Sandbox("gap-restore")
        let base = try box.baseDatabase("""
            CREATE TABLE people(id TEXT PRIMARY KEY NOT NULL, name TEXT UNIQUE\(clause), note TEXT);
            INSERT INTO people VALUES ('k1', 'ann', NULL), ('k2', 'bob', NULL);
            """)
        let a = try box.replica("A", source: base), b = try box.replica("B", source: base)
        try exchangeConcurrentEdits(a, "UPDATE people SET name = 'carl' WHERE id = 'k1'", then: b, "UPDATE people SET name = 'dora' WHERE id = 'k1'")
        let entry = try #require(try a.conflicts(table: "people").first { $0.losingValue == .text("carl") })
        try a.exec("UPDATE people SET name = 'carl' WHERE id = 'k2'")
        let before = try a.fullDump()

        var thrown: Error?
        do { try a.db.restoreConflict(id: entry.id) } catch { thrown = error }
        let message = thrown.map { "\($0)" } ?? "no error"
        guard case .cannotRestore(let id, _)? = thrown as? SyncEngineError else {
            Issue.record("clause '\(clause)': expected cannotRestore, got \(message)")
            #expect(try a.rows("SELECT id, name FROM people ORDER BY id") == [[.text("k1"), .text("dora")], [.text("k2"), .text("carl")]])
            return
        }
        #expect(id == entry.id)
        for part in ["'people'", "'name'", "'carl'", "'k2'"] { #expect(message.contains(part), "\(clause): \(message)") }
        let after = try a.fullDump()
        #expect(after == before, "\(clause): \(firstDifference(before, after) ?? "")")
        #expect(try a.db.conflict(id: entry.id).restored == false)

        try a.exec("UPDATE people SET name = 'eve' WHERE id = 'k2'")
        try a.db.restoreConflict(id: entry.id)
        #expect(try a.rows("SELECT id, name FROM people ORDER BY id") == [[.text("k1"), .text("carl")], [.text("k2"), .text("eve")]])
        #expect(b.apply(try a.exportFile()).status == .applied)
        try expectSameData(a, b)
    }

    /// A restore is a local edit: the app's own triggers keep their conflict handling. An audit trigger's
    /// `INSERT OR REPLACE` into a table that already holds the row must still replace it (a restore written with
    /// `OR ABORT` in a table without a clause of its own would make the trigger's REPLACE fail).
    @Test func restoringIntoATableWhoseTriggerReplaces_keepsTheTriggersConflictHandling() throws {
        let box = try Sandbox("gap-restore-trigger")
        let base = try box.baseDatabase("""
            CREATE TABLE people(id TEXT PRIMARY KEY NOT NULL, name TEXT UNIQUE, note TEXT);
            CREATE TABLE audit(id TEXT PRIMARY KEY NOT NULL, last TEXT);
            INSERT INTO people VALUES ('k1', 'ann', NULL), ('k2', 'bob', NULL);
            INSERT INTO audit VALUES ('k1', 'ann');
            CREATE TRIGGER people_audit AFTER UPDATE OF name ON people BEGIN
                INSERT OR REPLACE INTO audit(id, last) VALUES (new.id, new.name);
            END;
            """)
        let a = try box.replica("A", source: base), b = try box.replica("B", source: base)
        try exchangeConcurrentEdits(a, "UPDATE people SET name = 'carl' WHERE id = 'k1'", then: b, "UPDATE people SET name = 'dora' WHERE id = 'k1'")
        let entry = try #require(try a.conflicts(table: "people").first { $0.losingValue == .text("carl") })
        try a.db.restoreConflict(id: entry.id)
        #expect(try a.rows("SELECT name FROM people WHERE id = 'k1'") == [[.text("carl")]])
        #expect(try a.rows("SELECT last FROM audit WHERE id = 'k1'") == [[.text("carl")]])
    }

    // MARK: - (3) A RESTRICT key the merge turns into SET NULL, in both arrival orders

    static func device(_ name: String, _ box: Sandbox, _ base: URL) throws -> Replica {
        let r = try Replica(name: name, source: base, in: box, user: "user-1", track: false)
        _ = try r.db.track(tables: ["folders", "notes"])
        try r.db.setUserID("user-1")
        return r
    }

    /// notes.folder REFERENCES folders (NO ACTION, nullable: the merge turns it into SET NULL); an app trigger keeps a
    /// "last changed" row with `INSERT OR REPLACE` in an untracked table. A adds a note in 'work' while B deletes
    /// 'work'. A gets the delete (`dropReferences` sets the note's folder NULL), B gets the note after its delete
    /// (`applyDeleteActionsForDeletedParents` does): both must apply it and end alike. Saying `OR ABORT` there (right for
    /// a declared SET NULL, as SQLite's own action does) made the trigger's REPLACE fail on B only, and B quarantined
    /// A's diff (found by a review; fails without the fix).
    @Test func restrictKeyTurnedSetNull_sameOutcomeInBothOrders() throws {
        let box = try Sandbox("review-fk-order")
        let base = try box.baseDatabase("""
            CREATE TABLE folders(id TEXT PRIMARY KEY NOT NULL, name TEXT);
            CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, body TEXT, folder TEXT REFERENCES folders(id));
            CREATE TABLE app_state(k TEXT PRIMARY KEY NOT NULL, v TEXT);
            CREATE TRIGGER notes_touched AFTER UPDATE OF folder ON notes BEGIN
                INSERT OR REPLACE INTO app_state(k, v) VALUES ('notes_changed', new.id);
            END;
            INSERT INTO app_state VALUES ('notes_changed', '');
            INSERT INTO folders VALUES ('inbox', 'Inbox'), ('work', 'Work');
            """)
        let a = try Self.device("A", box, base), b = try Self.device("B", box, base)
        try a.exec("INSERT INTO notes VALUES ('n1', 'hello', 'work')")
        let fa = try a.exportFile()
        tick()
        try b.exec("DELETE FROM folders WHERE id = 'work'")
        let fb = try b.exportFile()

        let atA = a.apply(fb)
        let atB = b.apply(fa)
        #expect(atA.status == atB.status, "A (child first, then delete): \(atA.status) \(atA.reason ?? ""); B (delete first, then child): \(atB.status) \(atB.reason ?? "")")
        #expect(atB.status == .applied, "B: \(atB.status) \(atB.reason ?? "")")
        #expect(try a.rows("SELECT id, folder FROM notes") == b.rows("SELECT id, folder FROM notes"))
    }
}
