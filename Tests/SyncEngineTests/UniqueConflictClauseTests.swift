import DiffFormat
import Foundation
@testable import RTSQLite
@testable import SyncEngine
import Testing

/// UNIQUE constraints with a conflict clause of their own (REPLACE, IGNORE, ROLLBACK, FAIL), which SQLite applies
/// without raising the error the merge relies on: every write of the merge says `OR ABORT`, so a collision fails the
/// set path's insert (the per-row merge then takes the table) and reaches the per-row merge's collision rule. Written
/// by a review of the set path's new rows in UNIQUE tables (with `ON CONFLICT REPLACE` the set insert had silently
/// deleted the holder of the value; with `ROLLBACK` the diff was quarantined). Twins compare every apply.
extension BulkKnownRowsTests {
    static func uniqueSQL(_ clause: String) -> String {
        "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT, n INTEGER, UNIQUE(extra)\(clause))"
    }

    /// Rows 2..<20: plain known updates of body (merged as a set).
    func plainUpdates(_ w: DiffWriter, born: Clock) throws {
        for i in 2..<20 { try update(w, i, [.text("new \(i)"), .text("extra \(i)"), .integer(Int64(i))], changed: ["body"], clock: clock(1_000), born: born) }
    }

    func newRow(_ w: DiffWriter, id: String, extra: String) throws {
        let c = clock(2_000)
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text(id), .text("fresh"), .text(extra), .integer(100)], clock: c, born: c))
    }

    /// What a diff does to n0 before or after a new row takes n0's UNIQUE value.
    enum ClauseScenario: String, CaseIterable, Sendable {
        /// A delete of n0 merged as a set, then the new row: the set insert collides (it runs first), so the per-row
        /// merge takes the table.
        case deleteThenNewRow
        /// A delete of n0 left to the per-row merge (it logs a conflict: "third" edited the body unseen), then the new row.
        case deleteLeftThenNewRow
        /// A known update of n0's body left to the per-row merge (it overwrites "third"'s unseen edit), then the new row.
        case updateLeftThenNewRow
        /// No row left at all: the new row, then a known update of n0 to the body it has (its clock taken).
        case newRowThenUpdateOfTheHolder
    }

    @Test(arguments: ClauseScenario.allCases, ["", " ON CONFLICT REPLACE", " ON CONFLICT IGNORE", " ON CONFLICT ROLLBACK", " ON CONFLICT FAIL"])
    func uniqueClause_newRowTakingTheValueOfARowTheDiffAlsoChanges(_ scenario: ClauseScenario, _ clause: String) throws {
        let box = try Sandbox("unique-clause")
        let born = clock(20_000)
        let b = try twinsWithNotes(box, count: 20, born: born, sql: Self.uniqueSQL(clause))
        if scenario == .deleteLeftThenNewRow || scenario == .updateLeftThenNewRow {
            try thirdDeviceEditsBodies(box, b, rows: 0..<1, clock: clock(10_000, "third"), born: born)
        }
        let w = try writer(box)
        try w.addTable(Self.notes)
        switch scenario {
        case .deleteThenNewRow, .deleteLeftThenNewRow:
            try w.append(RowChange(table: "notes", operation: .delete, values: [.text("n0"), .null, .null, .null], clock: clock(1_000), born: born))
            try newRow(w, id: "new1", extra: "extra 0")
        case .updateLeftThenNewRow:
            try update(w, 0, [.text("mine 0"), .text("extra 0"), .integer(0)], changed: ["body"], clock: clock(1_000), born: born)
            try newRow(w, id: "new1", extra: "extra 0")
        case .newRowThenUpdateOfTheHolder:
            try newRow(w, id: "new1", extra: "extra 0")
            try update(w, 0, [.text("body 0"), .text("extra 0"), .integer(0)], changed: ["body"], clock: clock(1_000), born: born)
        }
        try plainUpdates(w, born: born)
        try b.apply(try w.finish())
    }

    /// NOCASE unique: a new row 'EXTRA 0' after a set delete of n0 ('extra 0'), and one beside a row holding it.
    @Test func uniqueNoCase_newRowsAfterADeleteAndBesideAHolder() throws {
        let box = try Sandbox("unique-nocase")
        let born = clock(20_000)
        let b = try twinsWithNotes(box, count: 20, born: born, sql: "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT COLLATE NOCASE UNIQUE, n INTEGER)")
        let w = try writer(box)
        try w.addTable(Self.notes)
        try w.append(RowChange(table: "notes", operation: .delete, values: [.text("n0"), .null, .null, .null], clock: clock(1_000), born: born))
        try newRow(w, id: "new1", extra: "EXTRA 0")
        try newRow(w, id: "new2", extra: "EXTRA 1")
        try newRow(w, id: "new3", extra: "nothing")
        try plainUpdates(w, born: born)
        try b.apply(try w.finish())
        let w2 = try writer(box)
        try w2.addTable(Self.notes)
        try newRow(w2, id: "new4", extra: "NOTHING ELSE")
        try w2.append(RowChange(table: "notes", operation: .upsert, values: [.text("new5"), .text("x"), .null, .integer(1)], clock: clock(1_500), born: clock(1_500)))
        try w2.append(RowChange(table: "notes", operation: .upsert, values: [.text("new6"), .text("x"), .null, .integer(1)], clock: clock(1_500), born: clock(1_500)))
        for i in 2..<20 { try update(w2, i, [.text("again \(i)"), .text("extra \(i)"), .integer(Int64(i))], changed: ["body"], clock: clock(500), born: born) }
        try b.apply(try w2.finish())
    }
}
