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
    @Test func insertArrivingAfterAnOlderVersionsUpdate_bringsTheNewerColumn() throws {
        let box = try Sandbox("uncarried-column-clock")
        let urls = ["new", "old", "late"].map { box.path("\($0).sqlite") }
        let newer = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, rating INTEGER)"
        try Connection(path: urls[0].path).execute(newer)
        try Connection(path: urls[1].path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT)")
        try Connection(path: urls[2].path).execute(newer)
        let new = try box.replica("new", source: urls[0]), old = try box.replica("old", source: urls[1]), late = try box.replica("late", source: urls[2])
        try new.exec("INSERT INTO things VALUES ('t1', 'chair', 5)")
        let insert = try new.exportFile()
        #expect(old.apply(insert).status == .applied)
        tick()
        try old.exec("UPDATE things SET title = 'armchair' WHERE id = 't1'")
        let update = try old.exportFile()
        // The late device gets the older version's update first (it makes the row), then the insert.
        #expect(late.apply(update).status == .applied)
        #expect(try late.rows("SELECT title, rating FROM things") == [[.text("armchair"), .null]])
        let report = late.apply(insert)
        #expect(report.status == .applied, "\(report)")  // the insert's older title is logged as the loser, as always
        #expect(try late.rows("SELECT title, rating FROM things") == [[.text("armchair"), .integer(5)]])
        #expect(new.apply(update).status == .applied)
        try expectSameData(new, late)
    }
}
