import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Found by the roll-up property (seed 12920) and present without roll-ups: with last-writer-wins deletes, a delete
// made here and not exported yet, met by a later update of some columns from another device, brings the row back
// with those columns and erases the others here. The pending delete was dropped with nothing sent in its place, so
// the other devices kept the values the delete had erased.

@Suite("last-writer-wins deletes: a pending delete met by a later update")
struct LWWDeletePendingTests {
    @Test(arguments: [TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins)])
    func pendingDelete_metByALaterPartialUpdate_sendsWhatItErased(policy: TablePolicy) throws {
        let box = try Sandbox("lwwpending")
        let base = try box.baseDatabase("CREATE TABLE items (id TEXT PRIMARY KEY, a TEXT, b INTEGER, c REAL); INSERT INTO items VALUES ('k2', 'a0', 42, 22.0)")
        let a = try box.replica("A", source: base, policies: ["items": policy])
        let c = try box.replica("C", source: base, policies: ["items": policy])
        try a.exec("DELETE FROM items WHERE id = 'k2'")
        Thread.sleep(forTimeInterval: 0.005)
        try c.exec("UPDATE items SET a = NULL, c = 1.5 WHERE id = 'k2'")
        #expect(a.apply(try c.exportFile()).status == .applied)
        // The update is later than the delete: the row is back with C's columns, b erased by the delete.
        #expect(try a.rows("SELECT a, b, c FROM items WHERE id = 'k2'") == [[.null, .null, .real(1.5)]])
        let log = try a.rows("SELECT tid, pk, op, cols, hlc FROM rtsync_changes")
        let sent = try #require(try a.export(), "the erasure must be sent; change log: \(log)")
        #expect(c.apply(URL(fileURLWithPath: sent.file)).status == .applied)
        #expect(try c.rows("SELECT a, b, c FROM items WHERE id = 'k2'") == [[.null, .null, .real(1.5)]])
        #expect(try a.dump() == c.dump())
    }
}
