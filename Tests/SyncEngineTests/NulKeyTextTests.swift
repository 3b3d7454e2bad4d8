import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// A TEXT key holding a NUL byte: SQLite's `quote()` ends at the NUL, so `k` and `k` NUL `x` once shared the key
/// text `'k'`. The row with the NUL was never sent (its change was logged under `'k'`, and export sent the row `k`
/// or a delete of it instead). Such keys now have a key text of their own (`T'<hex>'`) in every path.
@Suite("TEXT keys holding a NUL byte")
struct NulKeyTextTests {
    static let nulKey = "k\u{0}x"

    func pair(_ box: Sandbox, _ ddl: String = "CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT)") throws -> (Replica, Replica) {
        let base = try box.baseDatabase(ddl)
        return (try box.replica("a", source: base), try box.replica("b", source: base))
    }

    /// Exports `from` and applies the diff to `to`, expecting it applied.
    func send(_ from: Replica, to: Replica, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let report = to.apply(try from.exportFile(sourceLocation: sourceLocation))
        #expect(report.status == .applied, "\(report)", sourceLocation: sourceLocation)
    }

    @Test func rowAndItsPrefix_bothSync_throughInsertUpdateDelete() throws {
        let box = try Sandbox("nulkey-prefix")
        let (a, b) = try pair(box)
        try a.exec("INSERT INTO t VALUES (?, 'prefix')", [.text("k")])
        try a.exec("INSERT INTO t VALUES (?, 'nul')", [.text(Self.nulKey)])
        try send(a, to: b)
        #expect(try b.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("nul"))
        try expectSameData(a, b)

        try a.exec("UPDATE t SET v = 'nul2' WHERE id = ?", [.text(Self.nulKey)])
        try send(a, to: b)
        #expect(try b.value("SELECT v FROM t WHERE id = 'k'") == .text("prefix"))
        try expectSameData(a, b)

        try a.exec("DELETE FROM t WHERE id = ?", [.text(Self.nulKey)])
        try send(a, to: b)
        #expect(try b.value("SELECT count(*) FROM t") == .integer(1))
        try expectSameData(a, b)
    }

    /// The row with the NUL alone on one device, its prefix on the other: the prefix must not be deleted or
    /// overwritten, and both end with both rows, edited concurrently on each side.
    @Test func prefixOnTheOtherDevice_isNotTouched() throws {
        let box = try Sandbox("nulkey-other")
        let (a, b) = try pair(box)
        try b.exec("INSERT INTO t VALUES ('k', 'b''s row')")
        try send(b, to: a)
        try a.exec("INSERT INTO t VALUES (?, 'a''s row')", [.text(Self.nulKey)])
        try a.exec("UPDATE t SET v = 'edited on a' WHERE id = 'k'")
        try b.exec("UPDATE t SET v = 'edited on b' WHERE id = 'k'")
        tick()
        let fa = try a.exportFile(), fb = try b.exportFile()
        #expect(a.apply(fb).status == .applied)
        #expect(b.apply(fa).status == .applied)
        try expectSameData(a, b)
        #expect(try b.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("a's row"))
        #expect(try b.value("SELECT count(*) FROM t") == .integer(2))
    }

    /// Keys of several columns, one of them TEXT with a NUL, and a key that is only a NUL.
    @Test func compositeKeys() throws {
        let box = try Sandbox("nulkey-composite")
        let (a, b) = try pair(box, "CREATE TABLE t(g TEXT, n INTEGER, v TEXT, PRIMARY KEY (g, n))")
        for (g, n) in [("k", 1), (Self.nulKey, 1), ("\u{0}", 1), ("k\u{0}", 1), ("k", 2)] {
            try a.exec("INSERT INTO t VALUES (?, ?, ?)", [.text(g), .integer(Int64(n)), .text("\(g.utf8.count)-\(n)")])
        }
        try send(a, to: b)
        #expect(try b.value("SELECT count(*) FROM t") == .integer(5))
        try a.exec("UPDATE t SET v = 'changed' WHERE g = ? AND n = 1", [.text("k\u{0}")])
        try a.exec("DELETE FROM t WHERE g = ?", [.text("\u{0}")])
        try send(a, to: b)
        try expectSameData(a, b)
        #expect(try b.value("SELECT count(*) FROM t") == .integer(4))
    }

    /// Enough rows for the set export and the set paths of apply, against the per-row merge: same result, and every
    /// row arrives.
    @Test func setPaths_agreeWithThePerRowMerge() throws {
        let box = try Sandbox("nulkey-sets")
        let (a, b) = try pair(box)
        let filler = String(repeating: "x", count: 60)
        // Every fifth key holds a NUL after the text of the key before it.
        func key(_ i: Int) -> String { i % 5 == 0 ? "r\(i - 1)\u{0}\(i)" : "r\(i)" }
        for i in 0..<1_400 { try a.exec("INSERT INTO t VALUES (?, ?)", [.text(key(i)), .text("\(i)\(filler)")]) }
        let twins = try Twins(box, b)
        try twins.apply(try a.exportFile())
        #expect(try twins.bulk.value("SELECT count(*) FROM t") == a.value("SELECT count(*) FROM t"))
        try expectSameData(a, twins.bulk)
        try a.exec("UPDATE t SET v = v || '!'")
        let second = try a.exportFile()
        // A diff with such a key is merged row by row (the set paths key rows by `quote()`).
        let r = try twins.applyCountingSetRows(second)
        #expect(r.bulk.updated == 1_400 && r.setRows == 0, "\(r)")
        try expectSameData(a, twins.bulk)
        // The other rows, beside the rows with a NUL here: as a set.
        try a.exec("UPDATE t SET v = v || '?' WHERE instr(id, char(0)) = 0")
        let third = try twins.applyCountingSetRows(try a.exportFile())
        #expect(third.bulk.updated == 1_120 && third.setRows == 1_120, "\(third)")
        try expectSameData(a, twins.bulk)
    }

    /// A database tracked by an earlier version: its triggers logged a row with a NUL under its prefix's key
    /// text. The upgrade re-makes the triggers and logs each such row once, so it reaches the other device.
    @Test func upgrade_logsRowsTheOldTriggersMissed() throws {
        let box = try Sandbox("nulkey-upgrade")
        let (a, b) = try pair(box)
        try a.exec("INSERT INTO t VALUES ('k', 'prefix')")
        try send(a, to: b)
        // As the old triggers did: the insert logged as 'k' (export then finds the row 'k' unchanged).
        let tid = try #require(a.value("SELECT tid FROM rtsync_tracked WHERE name = 't'")?.int64)
        try a.exec("DROP TRIGGER rtsync_ins_\(tid); DROP TRIGGER rtsync_rep_\(tid)")
        try a.exec("INSERT INTO t VALUES (?, 'missed')", [.text(Self.nulKey)])
        try a.exec("DELETE FROM rtsync_upgrades WHERE name = 'nul-key-text'")
        try send(a, to: b)
        #expect(try b.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("missed"))
        try expectSameData(a, b)
        #expect(try a.value("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = 'rtsync_ins_\(tid)'") == .integer(1))
        try a.exec("UPDATE t SET v = 'after' WHERE id = ?", [.text(Self.nulKey)])
        try send(a, to: b)
        try expectSameData(a, b)
    }

    /// A conflict on the row with the NUL is logged under its own key and restores onto that row.
    @Test func conflictRestore_findsTheRow() throws {
        let box = try Sandbox("nulkey-conflict")
        let (a, b) = try pair(box)
        try a.exec("INSERT INTO t VALUES ('k', 'prefix'), (?, 'start')", [.text(Self.nulKey)])
        try send(a, to: b)
        try b.exec("UPDATE t SET v = 'b wins?' WHERE id = ?", [.text(Self.nulKey)])
        tick()
        try a.exec("UPDATE t SET v = 'a wins' WHERE id = ?", [.text(Self.nulKey)])
        let fa = try a.exportFile()
        #expect(b.apply(fa).status == .applied)
        let conflict = try #require(try b.conflicts(table: "t").first)
        #expect(KeyCodec.decode(conflict.key) == [.text(Self.nulKey)], "\(conflict.key)")
        try b.db.restoreConflict(id: conflict.id)
        #expect(try b.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("b wins?"))
        #expect(try b.value("SELECT v FROM t WHERE id = 'k'") == .text("prefix"))
    }

    /// Key texts made in SQL (as the triggers make them) decode to the values, in UTF-8 and UTF-16 databases;
    /// without a NUL they are `quote()`'s, as Swift makes them.
    @Test(arguments: ["UTF-8", "UTF-16le"])
    func keyCodec_roundTrips(encoding: String) throws {
        let db = try Connection(path: ":memory:")
        try db.execute("PRAGMA encoding = '\(encoding)'")
        let utf8 = try SyncDatabase.storesUTF8(db)
        #expect(utf8 == (encoding == "UTF-8"))
        for values: [SQLValue] in [[.text("k\u{0}x")], [.text("\u{0}")], [.text("a'b\u{0}'\"\\,\n\u{1F}é")], [.text("k\u{0}"), .integer(3)],
                                   [.blob([0, 1])], [.text("plain")], [.text("'J\"")], [.integer(0), .text("\u{0}\u{0}")]] {
            let sql = "SELECT " + (1...values.count).map { SyncDatabase.keyValueText("?\($0)", utf8: utf8) }.joined(separator: " || ',' || ")
            let text = try #require(try db.scalar(sql, values)?.string)
            #expect(KeyCodec.decode(text) == values, "\(text)")
            let exact = values.map { KeyCodec.exactText($0) }
            if !exact.contains(nil) { #expect(text == exact.map { $0! }.joined(separator: ",")) }
            #expect(exact.contains(nil) == values.contains { $0.string?.utf8.contains(0) == true })
        }
    }

    /// A UTF-16 database (the key's NUL is looked for in the text there, not in the stored bytes).
    @Test func utf16Database_syncsTheRowAndItsPrefix() throws {
        let box = try Sandbox("nulkey-utf16")
        let base = box.path("base.sqlite")
        let conn = try Connection(path: base.path)
        try conn.execute("PRAGMA encoding = 'UTF-16le'; PRAGMA journal_mode = WAL; CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); PRAGMA wal_checkpoint(TRUNCATE)")
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        try a.exec("INSERT INTO t VALUES ('k', 'prefix'), (?, 'nul'), ('plain', 'p')", [.text(Self.nulKey)])
        try send(a, to: b)
        #expect(try b.value("SELECT count(*) FROM t") == .integer(3))
        try a.exec("UPDATE t SET v = 'nul2' WHERE id = ?", [.text(Self.nulKey)])
        try a.exec("DELETE FROM t WHERE id = 'plain'")
        try send(a, to: b)
        try expectSameData(a, b)
        #expect(try a.value("SELECT count(*) FROM rtsync_changes") == .integer(0))
    }
}
