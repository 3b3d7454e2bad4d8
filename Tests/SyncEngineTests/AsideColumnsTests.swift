import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Columns of a newer app version are kept aside on an older device (its table and its positional INSERTs stay
/// as they were), and move into the table when the older app's own migration adds them, so a value from a newer
/// device survives the trip through an older one.
@Suite("Columns of newer app versions, kept aside")
struct AsideColumnsTests {
    static func devices(_ box: Sandbox) throws -> (old: Replica, new: Replica) {
        let oldURL = box.path("old.sqlite"), newURL = box.path("new.sqlite")
        try Connection(path: oldURL.path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT); INSERT INTO things VALUES ('t1', 'chair')")
        try Connection(path: newURL.path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, rating INTEGER); INSERT INTO things VALUES ('t1', 'chair', NULL)")
        return (try box.replica("old", source: oldURL), try box.replica("new", source: newURL))
    }

    @Test func newerColumn_keptAside_tableUntouched_thenAdoptedByTheOldAppsMigration() throws {
        let box = try Sandbox("aside")
        let (old, new) = try Self.devices(box)
        try new.exec("UPDATE things SET rating = 4 WHERE id = 't1'")
        try new.exec("INSERT INTO things VALUES ('t2', 'lamp', 5)")
        let r1 = old.apply(try new.exportFile())
        #expect(r1.status == .applied && r1.columnsKeptAside == ["things.rating"] && r1.columnsAdded.isEmpty, "\(r1)")
        #expect(try old.rows("SELECT name FROM pragma_table_info('things') ORDER BY cid") == [[.text("id")], [.text("title")]], "the old app's table is as it made it")
        try old.exec("INSERT INTO things VALUES ('t3', 'desk')")  // the old app's positional insert still works
        #expect(try old.db.asideValues(table: "things") == ["'t1'": ["rating": .integer(4)], "'t2'": ["rating": .integer(5)]])
        // A later change of the column replaces the value kept aside; an older one does not.
        tick()
        try new.exec("UPDATE things SET rating = 3 WHERE id = 't1'")
        #expect(old.apply(try new.exportFile()).status == .applied)
        #expect(try old.db.asideValues(table: "things")["'t1'"] == ["rating": .integer(3)])
        // The old device's own edits flow to the new one and leave its rating alone.
        try old.exec("UPDATE things SET title = 'armchair' WHERE id = 't1'")
        #expect(new.apply(try old.exportFile()).status == .applied)
        #expect(try new.rows("SELECT title, rating FROM things WHERE id = 't1'") == [[.text("armchair"), .integer(3)]])
        // The old device's app is upgraded: its migration adds the column; the kept values move into it, as
        // nothing this device edited.
        try old.exec("ALTER TABLE things ADD COLUMN rating INTEGER")
        let after = try old.export()
        #expect(after.map { _ in "a diff" } == nil, "moving the kept values exports nothing")
        #expect(try old.rows("SELECT id, rating FROM things ORDER BY id") == [[.text("t1"), .integer(3)], [.text("t2"), .integer(5)], [.text("t3"), .null]])
        #expect(try old.db.asideValues(table: "things").isEmpty)
        try old.exec("INSERT INTO things VALUES ('t4', 'rug', 2)")
        #expect(try old.db.pendingChangeCount() == 1)
        #expect(new.apply(try old.exportFile()).status == .applied)
        try expectSameData(old, new)
        // And the clocks came along: an older edit of the column does not win over the value moved in.
        #expect(try old.value("SELECT rating FROM things WHERE id = 't1'") == .integer(3))
    }

    /// Found by the CLI chaos harness: an update that reaches the older device before the insert it follows makes
    /// the whole row there; its values of the newer columns were dropped (only the changed ones were kept), so after
    /// the older app's migration the row had the default where every other device had the value.
    @Test func updateArrivingBeforeItsInsert_keepsEveryNewerColumnAside() throws {
        let box = try Sandbox("aside-update-first")
        let (old, new) = try Self.devices(box)
        try new.exec("INSERT INTO things VALUES ('t2', 'lamp', -715)")
        let insert = try new.exportFile()
        tick()
        try new.exec("UPDATE things SET title = 'floor lamp' WHERE id = 't2'")
        #expect(old.apply(try new.exportFile()).status == .applied)
        #expect(try old.db.asideValues(table: "things")["'t2'"] == ["rating": .integer(-715)])
        #expect(old.apply(insert).status == .applied)
        try old.exec("ALTER TABLE things ADD COLUMN rating INTEGER")
        _ = try old.export()
        #expect(try old.rows("SELECT title, rating FROM things WHERE id = 't2'") == [[.text("floor lamp"), .integer(-715)]])
        try expectSameData(old, new)
    }

    /// Found by the CLI chaos harness: a delete refused here (this device made a newer incarnation of the row) kept
    /// its NULLs aside (a delete carries no values); the app's migration adding the column NOT NULL then failed on
    /// every try, and so did every export after the app migrated by itself.
    @Test func refusedDelete_keepsNothingAside_andANotNullColumnCanBeAdded() throws {
        let box = try Sandbox("aside-refused-delete")
        let (old, new) = try Self.devices(box)
        tick()
        try old.exec("INSERT OR REPLACE INTO things VALUES ('t1', 'made again here')")
        try new.exec("DELETE FROM things WHERE id = 't1'")
        #expect(old.apply(try new.exportFile()).status == .applied)
        #expect(try old.value("SELECT title FROM things WHERE id = 't1'") == .text("made again here"))
        #expect(try old.db.asideValues(table: "things").isEmpty)
        try old.db.migrate(sql: "ALTER TABLE things ADD COLUMN rating INTEGER NOT NULL DEFAULT 0")
        #expect(try old.value("SELECT rating FROM things WHERE id = 't1'") == .integer(0))
        #expect(try old.export() != nil)
    }

    /// Found by the CLI chaos harness: a new incarnation of a row (INSERT OR REPLACE) made by an older app version
    /// replaced the row on a newer device but left the old incarnation's value in the column the older version lacks,
    /// while the older device, once migrated, had the default: never a mixed row.
    @Test func newIncarnationFromAnOlderVersion_leavesTheNewerColumnsAsANewRowHasThem() throws {
        let box = try Sandbox("aside-new-incarnation")
        let (old, new) = try Self.devices(box)
        try new.exec("UPDATE things SET rating = 4 WHERE id = 't1'")
        #expect(old.apply(try new.exportFile()).status == .applied)
        tick()
        try old.exec("INSERT OR REPLACE INTO things VALUES ('t1', 'made again')")
        #expect(new.apply(try old.exportFile()).status == .applied)
        #expect(try new.rows("SELECT title, rating FROM things WHERE id = 't1'") == [[.text("made again"), .null]])
        try old.exec("ALTER TABLE things ADD COLUMN rating INTEGER")
        _ = try old.export()
        try expectSameData(old, new)
    }

    @Test func deletedRow_dropsWhatWasKeptAside() throws {
        let box = try Sandbox("aside-delete")
        let (old, new) = try Self.devices(box)
        try new.exec("INSERT INTO things VALUES ('t2', 'lamp', 5)")
        #expect(old.apply(try new.exportFile()).status == .applied)
        tick()
        try new.exec("DELETE FROM things WHERE id = 't2'")
        #expect(old.apply(try new.exportFile()).status == .applied)
        #expect(try old.db.asideValues(table: "things").isEmpty)
    }
}
