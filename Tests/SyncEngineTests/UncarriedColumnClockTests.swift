import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// A row made on a device from an update that arrived before the row's insert, sent by a device of an older app
/// version (which lacks a column): the column gets its default here, and must not claim the row's birth clock, or the
/// value the row was born with loses a tie when the insert arrives. Found by the CLI chaos harness (seed 3594): a
/// device that joined from an old snapshot received an older device's edit of a row before the newer device's
/// re-insert of it, and kept `memo` NULL where every other device has the value.
@Suite("Columns a diff does not carry")
struct UncarriedColumnClockTests {
    /// `new` inserts a row with the newer column; `old` (the older version) edits it; `late` (newer or older) gets
    /// nothing yet. Returns the devices and both diffs.
    static func scenario(_ box: Sandbox, lateIsNewer: Bool) throws -> (new: Replica, late: Replica, insert: URL, update: URL) {
        let urls = ["new", "old", "late"].map { box.path("\($0).sqlite") }
        let newer = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, rating INTEGER)"
        let older = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT)"
        for (url, sql) in zip(urls, [newer, older, lateIsNewer ? newer : older]) { try Connection(path: url.path).execute(sql) }
        let new = try box.replica("new", source: urls[0]), old = try box.replica("old", source: urls[1]), late = try box.replica("late", source: urls[2])
        try new.exec("INSERT INTO things VALUES ('t1', 'chair', 5)")
        let insert = try new.exportFile()
        #expect(old.apply(insert).status == .applied)
        tick()
        try old.exec("UPDATE things SET title = 'armchair' WHERE id = 't1'")
        return (new, late, insert, try old.exportFile())
    }

    @Test func insertArrivingAfterAnOlderVersionsUpdate_bringsTheNewerColumn() throws {
        let box = try Sandbox("uncarried-column-clock")
        let (new, late, insert, update) = try Self.scenario(box, lateIsNewer: true)
        // The late device gets the older version's update first (it makes the row), then the insert.
        #expect(late.apply(update).status == .applied)
        #expect(try late.rows("SELECT title, rating FROM things") == [[.text("armchair"), .null]])
        let report = late.apply(insert)
        #expect(report.status == .applied, "\(report)")  // the insert's older title is logged as the loser, as always
        #expect(try late.rows("SELECT title, rating FROM things") == [[.text("armchair"), .integer(5)]])
        #expect(new.apply(update).status == .applied)
        try expectSameData(new, late)
    }

    /// The same on a device of the older version, which does not have the column yet: a row made there from another
    /// older device's edit gets the column from its own migration later, and the value the row was born with (the
    /// newer device's insert, arriving after the migration) must win over the default there. Found by
    /// AsideVersionsPropertyTests (seed 9511).
    @Test func olderDeviceMigratingBeforeTheInsertArrives_getsTheValueTheRowWasBornWith() throws {
        let box = try Sandbox("uncarried-column-migrated")
        let (new, late, insert, update) = try Self.scenario(box, lateIsNewer: false)
        // The late device (older version too) gets the edit first, then runs its migration, then gets the insert.
        #expect(late.apply(update).status == .applied)
        try late.db.migrate(sql: "ALTER TABLE things ADD COLUMN rating INTEGER")
        #expect(try late.rows("SELECT title, rating FROM things") == [[.text("armchair"), .null]])
        #expect(late.apply(insert).status == .applied)
        #expect(try late.rows("SELECT title, rating FROM things") == [[.text("armchair"), .integer(5)]])
        #expect(new.apply(update).status == .applied)
        try expectSameData(new, late)
    }

    /// A column renamed by the migration keeps its values and clocks: the note of a row made from an edit gives
    /// only columns a migration adds a zero clock.
    @Test func renamedColumn_keepsItsClock_onARowMadeFromAnEdit() throws {
        let box = try Sandbox("uncarried-column-renamed")
        let urls = ["a", "b"].map { box.path("\($0).sqlite") }
        for u in urls { try Connection(path: u.path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, weight REAL)") }
        let a = try box.replica("a", source: urls[0]), b = try box.replica("b", source: urls[1])
        try a.exec("INSERT INTO things VALUES ('t1', 'chair', 2.5)")
        let insert = try a.exportFile()
        tick()
        try a.exec("UPDATE things SET title = 'armchair' WHERE id = 't1'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        try b.db.migrate(sql: "ALTER TABLE things RENAME COLUMN weight TO load_kg")
        #expect(try b.rows("SELECT title, load_kg FROM things") == [[.text("armchair"), .real(2.5)]])
        #expect(try b.rows("SELECT count(*) FROM rtsync_clocks WHERE col = 'load_kg' AND hlc = 0") == [[.integer(0)]])
        try b.db.migrate(sql: "ALTER TABLE things ADD COLUMN rating INTEGER")
        #expect(try b.rows("SELECT col FROM rtsync_clocks WHERE hlc = 0") == [[.text("rating")]])
        #expect(b.apply(insert).status == .applied)
        #expect(try b.rows("SELECT title, load_kg FROM things") == [[.text("armchair"), .real(2.5)]])
    }
}
