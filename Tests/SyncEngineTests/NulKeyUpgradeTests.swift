import Foundation
import DiffFormat
import RTSQLite
@testable import SyncEngine
import Testing

/// TEXT keys holding a NUL byte (8417cb4), from its review: the upgrade of databases tracked before, groups of
/// diffs, hostile key texts.
@Suite("TEXT keys holding a NUL byte: upgrade, groups, hostile key texts")
struct NulKeyUpgradeTests {
    static let nulKey = "k\u{0}x"

    /// Both replicas made from one base that already holds a row with a NUL in its key (as a database shipped with
    /// the app, or a device that joined from a snapshot, has), tracked "by an earlier version": the upgrade marker
    /// is removed on both, as a database tracked before 8417cb4 lacks it.
    func oldPair(_ box: Sandbox) throws -> (Replica, Replica) {
        let base = try box.baseDatabase("CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT); INSERT INTO t VALUES ('k', 'prefix'), ('k' || char(0) || 'x', 'v0')")
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        for r in [a, b] { try r.exec("DELETE FROM rtsync_upgrades WHERE name = 'nul-key-text'") }
        return (a, b)
    }

    /// The upgrade logs every such row as an insert made now, on every device that has it. Device b, which never
    /// touched the row, upgrades while applying a's diffs, after a edited the row: b's "insert" is later than a's
    /// edit, so the edit is lost on b, and then everywhere.
    @Test func upgrade_doesNotOverwriteAnEditMadeElsewhere() throws {
        let box = try Sandbox("nulreview-upgrade-edit")
        let (a, b) = try oldPair(box)
        let first = try a.exportFile()          // a upgrades: its row logged as new
        tick()
        try a.exec("UPDATE t SET v = 'edited on a' WHERE id = ?", [.text(Self.nulKey)])
        let second = try a.exportFile()
        tick()
        for f in [first, second] { #expect(b.apply(f).status == .applied) }   // b upgrades here, then merges
        if let back = try b.export() { #expect(a.apply(URL(fileURLWithPath: back.file)).status == .applied) }
        #expect(try b.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("edited on a"))
        #expect(try a.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("edited on a"))
        try expectSameData(a, b)
    }

    /// The same base row on two devices, neither edits it: the upgrade alone must not make conflict entries.
    @Test func upgrade_onBothDevices_makesNoConflicts() throws {
        let box = try Sandbox("nulreview-upgrade-both")
        let (a, b) = try oldPair(box)
        let fa = try a.exportFile()
        tick()
        let fb = try b.exportFile()
        let ra = a.apply(fb), rb = b.apply(fa)
        #expect(ra.status == .applied && rb.status == .applied)
        #expect(ra.conflicts + rb.conflicts == 0, "a: \(ra); b: \(rb)")
        #expect(try a.conflicts().isEmpty && b.conflicts().isEmpty)
        try expectSameData(a, b)
    }

    /// What an earlier version's trigger left in the change log for a row with a NUL inserted since the last export:
    /// an insert under the prefix's key text `'k'`. The upgrade logs the row itself, but leaves that entry, which now
    /// names the row `k`: export sends `k` as a new row of this device (born now), though `k` was never touched here,
    /// and it overrides b's concurrent edit of `k`.
    @Test func upgrade_staleInsertUnderThePrefixKey_doesNotResendThePrefixRow() throws {
        let box = try Sandbox("nulreview-stale")
        let base = try box.baseDatabase("CREATE TABLE t(id TEXT PRIMARY KEY, v TEXT)")
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        try a.exec("INSERT INTO t VALUES ('k', 'prefix')")
        #expect(b.apply(try a.exportFile()).status == .applied)
        tick()
        // a, before the upgrade: the insert of the row with the NUL logged under 'k', as quote() made it.
        let tid = try #require(a.value("SELECT tid FROM rtsync_tracked WHERE name = 't'")?.int64)
        try a.exec("DROP TRIGGER rtsync_ins_\(tid); DROP TRIGGER rtsync_rep_\(tid)")
        try a.exec("INSERT INTO t VALUES (?, 'nul')", [.text(Self.nulKey)])
        try a.exec("INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) SELECT ?, ?, 1, NULL, \(SyncDatabase.captureClockSQL)", [.integer(tid), .text("'k'")])
        try a.exec("DELETE FROM rtsync_upgrades WHERE name = 'nul-key-text'")
        tick()
        try b.exec("UPDATE t SET v = 'edited on b' WHERE id = 'k'")
        tick()
        let fa = try a.exportFile()
        let sent = try DiffReader(url: fa).changes().map { $0.values[0] }
        #expect(!sent.contains(.text("k")), "row 'k' sent again by a: \(sent)")
        #expect(b.apply(fa).status == .applied)
        let logged = try b.conflicts().map { "\($0.key) \($0.column) lost \($0.losingValue)" }
        #expect(try b.value("SELECT v FROM t WHERE id = 'k'") == .text("edited on b"), "b's edit of 'k' lost to a's resent row: \(logged)")
        if let back = try b.export() { #expect(a.apply(URL(fileURLWithPath: back.file)).status == .applied) }
        #expect(try b.value("SELECT v FROM t WHERE id = ?", [.text(Self.nulKey)]) == .text("nul"))
        try expectSameData(a, b)
    }

    /// Hostile key texts: nil or the right values, never a crash.
    @Test func keyCodec_hostileTexts() {
        let cases: [(String, [SQLValue]?)] = [
            ("J\"", nil), ("J\"a", nil), ("J\"\\\"", nil), ("J\"\\", nil), ("J\"\\q\"", nil), ("J", nil), ("Jx", nil),
            ("J\"a\\\"b\"", [.text("a\"b")]), ("J\"a\"x", nil), ("J\"a\"J\"b\"", nil), ("J\"\\u00\"", nil),
            ("J\"\\u0000\"", [.text("\u{0}")]), ("'a',J\"b\\u0000\",3", [.text("a"), .text("b\u{0}"), .integer(3)]),
            ("J\"\\ud800\"", nil), ("J\"a,b\\u0000\",NULL", [.text("a,b\u{0}"), .null]),
        ]
        for (text, expected) in cases {
            let got = KeyCodec.decode(text)
            #expect(got == expected || (expected == nil && got == nil), "\(text): \(String(describing: got))")
        }
    }

    /// Groups of small diffs (one transaction, savepoints) against one diff at a time, keys with NUL bytes.
    @Test func groups_agreeWithOneByOne() throws {
        let box = try Sandbox("nulreview-groups")
        let base = try box.baseDatabase("CREATE TABLE t(g TEXT, n INTEGER, v TEXT, PRIMARY KEY (g, n))")
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        let twins = try GroupTwins(box, b)
        var files: [URL] = []
        try a.exec("INSERT INTO t VALUES ('k', 1, 'p'), (?, 1, 'n'), (?, 2, 'm')", [.text(Self.nulKey), .text("\u{0}")])
        files.append(try a.exportFile())
        tick()
        try a.exec("UPDATE t SET v = 'n2' WHERE g = ?", [.text(Self.nulKey)])
        try a.exec("DELETE FROM t WHERE g = ?", [.text("\u{0}")])
        files.append(try a.exportFile())
        let reports = try twins.apply(files + files)
        #expect(reports.allSatisfy { $0.status == .applied || $0.status == .skipped })
        try expectSameData(a, twins.grouped)
    }
}
