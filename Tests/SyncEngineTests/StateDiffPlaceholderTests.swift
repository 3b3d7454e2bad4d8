import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// A device of an older app version keeps a newer version's column aside; its database, as the snapshot a catch-up
/// merges (`writeStateDiff`), carries that column with a NULL placeholder for rows it has no value of (rows it made
/// itself, new incarnations it made). Found by the CLI chaos harness (seed 2375): a device of the newer version
/// catching up from such a snapshot wrote the placeholder into `rating INTEGER NOT NULL DEFAULT 7` ("NOT NULL
/// constraint failed"), so its catch-up failed at every sync and it never converged. The placeholder is now left out,
/// as a column a diff lacks: the row gets what the same rows get from the older device's diffs.
@Suite("State diffs: placeholders of columns kept aside")
struct StateDiffPlaceholderTests {
    static let newSchema = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, rating INTEGER NOT NULL DEFAULT 7, note TEXT DEFAULT 'n')"

    /// `old` (things without the newer columns) after it applied a newer device's row, made a row, and replaced one;
    /// `viaDiffs`, a newer device that received those rows as diffs; `viaSnapshot`, one that has to catch up.
    func scenario(_ box: Sandbox, rows: Int) throws -> (old: Replica, viaDiffs: Replica, viaSnapshot: Replica) {
        let oldURL = box.path("old.sqlite"), newURL = box.path("new.sqlite")
        try Connection(path: oldURL.path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT); INSERT INTO things VALUES ('t1', 'chair')")
        try Connection(path: newURL.path).execute(Self.newSchema + "; INSERT INTO things VALUES ('t1', 'chair', 9, 'seat')")
        let old = try box.replica("old", source: oldURL)
        let viaDiffs = try box.replica("viaDiffs", source: newURL)
        let viaSnapshot = try box.replica("viaSnapshot", source: newURL)
        try viaDiffs.exec("INSERT INTO things VALUES ('t2', 'lamp', 4, 'x')")
        let newer = try viaDiffs.exportFile()
        #expect(old.apply(newer).status == .applied && viaSnapshot.apply(newer).status == .applied)
        tick()
        for i in 0..<rows { try old.exec("INSERT INTO things VALUES (?, 'desk')", [.text("r\(i)")]) }
        try old.exec("INSERT OR REPLACE INTO things VALUES ('t1', 'armchair')")  // a new incarnation without the newer columns
        let fromOld = try old.exportFile()
        #expect(viaDiffs.apply(fromOld).status == .applied)
        return (old, viaDiffs, viaSnapshot)
    }

    @Test(arguments: [3, 3_000])
    func newerDeviceCatchingUpFromAnOlderDevicesSnapshot_getsWhatTheDiffsGive(rows: Int) throws {
        let box = try Sandbox("state-diff-placeholder-\(rows)")
        let (old, viaDiffs, viaSnapshot) = try scenario(box, rows: rows)
        #expect(try old.db.asideValues(table: "things") == ["'t2'": ["rating": .integer(4), "note": .text("x")]])
        let scratch = box.path("scratch-\(rows)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        if rows > 100 { viaSnapshot.db.bulkApplyMinimumBytes = 0 }
        let report = try viaSnapshot.db.catchUp(from: old.dbURL, scratch: scratch)
        #expect(report.status == .applied, "\(report)")
        #expect(try viaSnapshot.rows("SELECT id, title, rating, note FROM things WHERE id IN ('t1', 't2', 'r0') ORDER BY id") == [
            [.text("r0"), .text("desk"), .integer(7), .text("n")],
            [.text("t1"), .text("armchair"), .integer(7), .text("n")],
            [.text("t2"), .text("lamp"), .integer(4), .text("x")],
        ])
        #expect(try viaSnapshot.rows("SELECT * FROM things ORDER BY id") == viaDiffs.rows("SELECT * FROM things ORDER BY id"))
    }

    /// The same on the set path that writes a whole table of new rows (`insertNewRowsInBulk`): a device of the newer
    /// version with none of the rows, whose newer columns are nullable with a default (so a placeholder written there
    /// would be stored, not refused).
    @Test func newRowsInBulk_leaveThePlaceholdersOut() throws {
        let box = try Sandbox("state-diff-placeholder-bulk")
        let oldURL = box.path("old.sqlite"), newURL = box.path("new.sqlite"), emptyURL = box.path("empty.sqlite")
        let newer = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, rating INTEGER DEFAULT 7, note TEXT DEFAULT 'n')"
        try Connection(path: oldURL.path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT)")
        try Connection(path: newURL.path).execute(newer)
        try Connection(path: emptyURL.path).execute(newer)
        let old = try box.replica("old", source: oldURL), new = try box.replica("new", source: newURL), empty = try box.replica("empty", source: emptyURL)
        try new.exec("INSERT INTO things VALUES ('t2', 'lamp', 4, 'x')")
        #expect(old.apply(try new.exportFile()).status == .applied)
        for i in 0..<2_000 { try old.exec("INSERT INTO things VALUES (?, 'desk')", [.text(String(format: "r%05d", i))]) }
        let scratch = box.path("scratch")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        empty.db.bulkApplyMinimumBytes = 0
        let report = try empty.db.catchUp(from: old.dbURL, scratch: scratch)
        #expect(report.status == .applied && report.inserted == 2_001, "\(report)")
        #expect(try empty.rows("SELECT count(*) FROM things WHERE rating IS 7 AND note IS 'n'") == [[.integer(2_000)]])
        #expect(try empty.rows("SELECT rating, note FROM things WHERE id = 't2'") == [[.integer(4), .text("x")]])
    }

    /// An older device catching up from another older device's snapshot keeps aside only the values that device had:
    /// a placeholder kept aside would be moved into the column by its own migration, NULL where the default belongs.
    @Test func olderDeviceCatchingUp_keepsNoPlaceholderAside() throws {
        let box = try Sandbox("state-diff-placeholder-aside")
        let oldSchema = "CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT)"
        let urls = ["old", "other", "new"].map { box.path("\($0).sqlite") }
        try Connection(path: urls[0].path).execute(oldSchema)
        try Connection(path: urls[1].path).execute(oldSchema)
        try Connection(path: urls[2].path).execute("CREATE TABLE things(id TEXT PRIMARY KEY NOT NULL, title TEXT, rating INTEGER DEFAULT 7)")
        let old = try box.replica("old", source: urls[0]), other = try box.replica("other", source: urls[1]), new = try box.replica("new", source: urls[2])
        try new.exec("INSERT INTO things VALUES ('t2', 'lamp', 4)")
        #expect(old.apply(try new.exportFile()).status == .applied)
        try old.exec("INSERT INTO things VALUES ('r0', 'desk')")
        let scratch = box.path("scratch")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let report = try other.db.catchUp(from: old.dbURL, scratch: scratch)
        #expect(report.status == .applied && report.inserted == 2, "\(report)")
        #expect(try other.db.asideValues(table: "things") == ["'t2'": ["rating": .integer(4)]])
        // The older app's migration adds the column: r0 has the default, as on every device of the newer version.
        try other.exec("ALTER TABLE things ADD COLUMN rating INTEGER DEFAULT 7")
        _ = try other.export()
        #expect(try other.rows("SELECT id, rating FROM things ORDER BY id") == [[.text("r0"), .integer(7)], [.text("t2"), .integer(4)]])
    }
}
