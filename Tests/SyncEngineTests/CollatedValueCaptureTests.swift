import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// An update is captured when a value's bytes change, whatever the column's collation: the triggers compared values
/// with `IS` under the column's own collation, so `'abc'` to `'ABC'` in a NOCASE column (or a trailing space under
/// RTRIM) logged an empty mask and the edit never left the device; in a column without a type, `1` to `1.0` likewise.
@Suite("Capture: value changes under a collation or a storage class")
struct CollatedValueCaptureTests {
    static let ddl = "CREATE TABLE people(id TEXT PRIMARY KEY, name TEXT COLLATE NOCASE, code TEXT COLLATE RTRIM, n, r REAL); "
        + "INSERT INTO people VALUES ('p1', 'alice', 'x', 1, 2.5)"

    /// Two devices from one base of `ddl`.
    func pair(_ label: String, _ ddl: String = ddl) throws -> (Replica, Replica) {
        let box = try Sandbox(label)
        let base = try box.baseDatabase(ddl)
        return (try box.replica("a", source: base), try box.replica("b", source: base))
    }

    /// Exports `from` and applies to `to`; expects the same data (storage classes and bytes included).
    func send(_ from: Replica, to: Replica, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try from.export()
        #expect(result != nil, "nothing exported", sourceLocation: sourceLocation)
        if let result { #expect(to.apply(URL(fileURLWithPath: result.file)).status == .applied, sourceLocation: sourceLocation) }
        let sql = "SELECT id, hex(name), hex(code), typeof(n), n, r FROM people ORDER BY id"
        #expect(try from.rows(sql) == to.rows(sql), sourceLocation: sourceLocation)
    }

    @Test func caseChangeUnderNOCASE_isSent() throws {
        let (a, b) = try pair("capture-nocase")
        try a.exec("UPDATE people SET name = 'Alice' WHERE id = 'p1'")
        try send(a, to: b)
        #expect(try b.value("SELECT name FROM people WHERE id = 'p1'") == .text("Alice"))
    }

    @Test func trailingSpaceUnderRTRIM_isSent() throws {
        let (a, b) = try pair("capture-rtrim")
        try a.exec("UPDATE people SET code = 'x  ' WHERE id = 'p1'")
        try send(a, to: b)
    }

    @Test func integerToEqualRealInAColumnWithoutType_isSent() throws {
        let (a, b) = try pair("capture-int-real")
        try a.exec("UPDATE people SET n = 1.0 WHERE id = 'p1'")
        try send(a, to: b)
        #expect(try b.value("SELECT typeof(n) FROM people WHERE id = 'p1'") == .text("real"))
    }

    /// The set paths (a diff over 64 KiB, and every size with `bulkApplyMinimumBytes = 0`) take the same values.
    @Test func caseChanges_throughTheSetPaths_matchThePerRowMerge() throws {
        let box = try Sandbox("capture-nocase-sets")
        let rows = (0..<300).map { "('q\($0)', 'name \($0)', 'c', \($0), 0.5)" }.joined(separator: ", ")
        let base = try box.baseDatabase(Self.ddl + "; INSERT INTO people VALUES " + rows)
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        let twins = try Twins(box, b)
        try a.exec("UPDATE people SET name = upper(name), n = n + 0.0")
        let r = try twins.applyCountingSetRows(try a.exportFile())
        #expect(r.bulk.updated == 301, "\(r)")
        let sql = "SELECT id, hex(name), typeof(n) FROM people ORDER BY id"
        #expect(try twins.bulk.rows(sql) == a.rows(sql))
    }

    /// A no-op update still logs nothing to send.
    @Test func sameBytes_logsNothing() throws {
        let box = try Sandbox("capture-same")
        let base = try box.baseDatabase(Self.ddl)
        let a = try box.replica("a", source: base)
        try a.exec("UPDATE people SET name = 'alice', n = 1, code = 'x' WHERE id = 'p1'")
        #expect(try a.export() == nil)
    }

    /// 'café' in NFC edited to its NFD spelling (other bytes, the same text to Swift's `==`): captured (bytes
    /// differ) and written on the receiving device, by the per-row merge and the set paths alike (the merge compared
    /// values with Swift's `==` and left the NFC bytes in place).
    @Test func nfcToNFD_isWrittenOnTheOtherDevice() throws {
        let box = try Sandbox("capture-nfd")
        let rows = (0..<300).map { "('q\($0)', 'caf\u{E9} \($0)', 'c', \($0), 0.5)" }.joined(separator: ", ")
        let base = try box.baseDatabase(Self.ddl + "; INSERT INTO people VALUES " + rows)
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        let twins = try Twins(box, b)
        // One row (a small diff), then every row (over the set paths' threshold).
        try a.exec("UPDATE people SET name = ? WHERE id = 'q1'", [.text("cafe\u{301} 1")])
        try twins.apply(try a.exportFile())
        try a.exec("UPDATE people SET name = replace(name, ?, ?)", [.text("caf\u{E9}"), .text("cafe\u{301}")])
        try twins.apply(try a.exportFile())
        let sql = "SELECT id, hex(name) FROM people ORDER BY id"
        #expect(try twins.bulk.rows(sql) == a.rows(sql))
        #expect(try twins.perRow.rows(sql) == a.rows(sql))
    }
}
