import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// A change's clock comes from when it was made, not from when it was exported: a device that syncs late must
/// not override newer edits made elsewhere, and an edit made after applying a remote one still wins over it.
@Suite("Edit-time clocks")
struct EditTimeClockTests {
    static let hour: Int64 = 3_600_000

    /// Two or more copies of a small database (`items(id TEXT PRIMARY KEY, a TEXT, b INTEGER, c REAL)`, keys k0…k2).
    static func replicas(_ box: Sandbox, _ names: [String]) throws -> [Replica] {
        let base = try ConvergencePropertyTests.makeBase(in: box, uniqueA: false)
        return try names.map { try box.replica($0, source: base) }
    }

    static func rowChanges(_ file: URL) throws -> [RowChange] {
        var out: [RowChange] = []
        try DiffReader(url: file).forEachChange { out.append($0) }
        return out
    }

    /// The issue's scenario: c2 edits, later c1 edits the same column, c1 exports first, then c2.
    @Test(arguments: [false, true])
    func laterEdit_winsEverywhere_evenWhenTheOlderEditIsExportedLast(applyBeforeExport: Bool) throws {
        let box = try Sandbox("edit-time-late-export")
        let r = try Self.replicas(box, ["c1", "c2"])
        let c1 = r[0], c2 = r[1]
        try c2.exec("UPDATE items SET a = 'older, from c2' WHERE id = 'k0'")
        tick()
        try c1.exec("UPDATE items SET a = 'newer, from c1' WHERE id = 'k0'")
        tick()
        let f1 = try c1.exportFile()
        tick()
        if applyBeforeExport {
            // c2 receives the newer edit while its own older one is still unexported: the older one loses here,
            // is logged, and is not sent out again.
            #expect(c2.apply(f1).status == .applied)
            #expect(try c2.value("SELECT a FROM items WHERE id = 'k0'") == .text("newer, from c1"))
            #expect(try c2.export() == nil, "the losing edit must not be exported")
        } else {
            let f2 = try c2.exportFile()
            #expect(c1.apply(f2).status == .applied)
            #expect(c2.apply(f1).status == .applied)
            let refused = try c1.conflicts()
            #expect(refused.count == 1 && refused.first?.winner == "local" && refused.first?.remoteValue == .text("older, from c2"), "\(refused)")
        }
        for x in [c1, c2] { #expect(try x.value("SELECT a FROM items WHERE id = 'k0'") == .text("newer, from c1"), "\(x.name)") }
        let lost = try c2.conflicts()
        #expect(lost.count == 1, "\(lost)")
        #expect(lost.first?.winner == "remote" && lost.first?.localValue == .text("older, from c2"))
        #expect(lost.first?.localClock?.site == (try c2.db.siteID()), "the losing edit is logged with its own clock")
        try expectSameData(c1, c2)
    }

    /// An edit made right after applying a remote edit wins over it, even on a device whose wall clock is an hour
    /// behind, and a device an hour ahead does not win over an edit made after its own was seen.
    @Test(arguments: [-hour, hour])
    func editMadeAfterApplyingRemoteEdit_winsWhateverTheSkew(skewOfSecondDevice: Int64) throws {
        let box = try Sandbox("edit-time-skew")
        let r = try Self.replicas(box, ["c1", "c2"])
        let c1 = r[0], c2 = r[1]
        try c2.db.shiftWallClockForTesting(milliseconds: skewOfSecondDevice)
        try c1.db.shiftWallClockForTesting(milliseconds: -skewOfSecondDevice)
        try c1.exec("UPDATE items SET a = 'first, c1', b = 10 WHERE id = 'k1'")
        let f1 = try c1.exportFile()
        #expect(c2.apply(f1).status == .applied)
        try c2.exec("UPDATE items SET a = 'after seeing c1, c2' WHERE id = 'k1'")
        let f2 = try c2.exportFile()
        let first = try #require(try Self.rowChanges(f1).first), second = try #require(try Self.rowChanges(f2).first)
        #expect(second.clock > first.clock)
        #expect(c1.apply(f2).status == .applied)
        for x in [c1, c2] {
            #expect(try x.value("SELECT a, b FROM items WHERE id = 'k1'") == .text("after seeing c1, c2"), "\(x.name)")
            #expect(try x.rows("SELECT b FROM items WHERE id = 'k1'") == [[.integer(10)]])
        }
        // c2 had seen c1's value: overwriting it is no conflict.
        #expect(try c1.conflicts().isEmpty)
        try expectSameData(c1, c2)
    }

    /// Changes coalesced for one row keep the newest edit time of each column: c1 edits a, then c2 edits a and b,
    /// then c1 edits b. a is c2's and b is c1's on both devices, whichever exports first.
    @Test(arguments: [false, true])
    func coalescedChanges_keepTheNewestEditTimeOfEachColumn(secondExportsFirst: Bool) throws {
        let box = try Sandbox("edit-time-coalesce")
        let r = try Self.replicas(box, ["c1", "c2"])
        let c1 = r[0], c2 = r[1]
        try c1.exec("UPDATE items SET a = 'c1 early' WHERE id = 'k2'")
        tick()
        try c2.exec("UPDATE items SET a = 'c2 middle', b = 20 WHERE id = 'k2'")
        tick()
        try c1.exec("UPDATE items SET b = 30 WHERE id = 'k2'")
        tick()
        let f2 = secondExportsFirst ? try c2.exportFile() : nil
        let f1 = try c1.exportFile()
        let later = try f2 ?? c2.exportFile()
        let change = try #require(try Self.rowChanges(f1).first)
        #expect(change.changedColumns == ["a", "b"])
        #expect(change.clock(forColumn: "a") < change.clock(forColumn: "b"), "each column keeps the time of its own last edit")
        #expect(c1.apply(later).status == .applied)
        #expect(c2.apply(f1).status == .applied)
        for x in [c1, c2] { #expect(try x.rows("SELECT a, b FROM items WHERE id = 'k2'") == [[.text("c2 middle"), .integer(30)]], "\(x.name)") }
        try expectSameData(c1, c2)
    }

    /// A row inserted and then updated before export is sent born at its insert, the update with its own clock.
    @Test func insertThenUpdate_beforeExport_sendsBirthAndLaterColumnClock() throws {
        let box = try Sandbox("edit-time-insert")
        let c1 = try Self.replicas(box, ["c1"])[0]
        try c1.exec("INSERT INTO items VALUES ('k9', 'new', 1, NULL)")
        tick()
        try c1.exec("UPDATE items SET b = 2 WHERE id = 'k9'")
        let change = try #require(try Self.rowChanges(try c1.exportFile()).first)
        #expect(change.changedColumns == nil)
        #expect(change.clock == change.born)
        #expect(change.clock(forColumn: "b") > change.born)
        #expect(change.clock(forColumn: "a") == change.born)
    }

    /// Clocks are unique per site and increase in capture order, also for rows one statement writes, and a change
    /// made after an export is later than everything that export published.
    @Test func clocksOfOneSite_areUniqueAndIncreaseInCaptureOrder() throws {
        let box = try Sandbox("edit-time-unique")
        let c1 = try Self.replicas(box, ["c1"])[0]
        try c1.exec("UPDATE items SET b = b + 1")
        try c1.exec("INSERT INTO items VALUES ('k5', 'x', 1, NULL), ('k6', 'y', 2, NULL)")
        try c1.exec("DELETE FROM items WHERE id = 'k0'")
        let clocks = try c1.rows("SELECT hlc FROM rtsync_changes ORDER BY seq").compactMap { $0[0].int64 }
        #expect(clocks.count == 6)
        #expect(zip(clocks, clocks.dropFirst()).allSatisfy { $0 < $1 }, "\(clocks)")
        let wall = HLC.wallMilliseconds()
        #expect(clocks.allSatisfy { abs(HLC(rawValue: $0).milliseconds - wall) < 60_000 }, "clocks follow the wall clock")
        let published = try #require(try Self.rowChanges(try c1.exportFile()).flatMap { [$0.clock] + Array($0.columnClocks.values) }.max())
        try c1.exec("UPDATE items SET a = 'after export' WHERE id = 'k1'")
        let next = try #require(try c1.value("SELECT hlc FROM rtsync_changes")?.int64)
        #expect(next > published.hlc.rawValue)
    }

    /// A device whose clock runs an hour ahead keeps issuing clocks in order after its clock is corrected.
    @Test func clockSetBack_keepsClocksIncreasing() throws {
        let box = try Sandbox("edit-time-setback")
        let c1 = try Self.replicas(box, ["c1"])[0]
        try c1.db.shiftWallClockForTesting(milliseconds: Self.hour)
        try c1.exec("UPDATE items SET a = 'ahead' WHERE id = 'k0'")
        let ahead = try #require(try Self.rowChanges(try c1.exportFile()).first).clock
        try c1.db.shiftWallClockForTesting(milliseconds: 0)
        try c1.exec("UPDATE items SET a = 'corrected' WHERE id = 'k0'")
        let corrected = try #require(try Self.rowChanges(try c1.exportFile()).first).clock
        #expect(corrected > ahead)
    }

    /// A diff whose `seen` claims more of the receiver's changes than the receiver ever published is rejected: it
    /// would overwrite the receiver's edits without a conflict record.
    @Test func diffClaimingToHaveSeenUnpublishedChanges_isRejected() throws {
        let box = try Sandbox("edit-time-forged-seen")
        let r = try Self.replicas(box, ["c1", "c2"])
        let c1 = r[0], c2 = r[1]
        try c1.exec("UPDATE items SET a = 'c1 edit' WHERE id = 'k0'")
        let published = try #require(try Self.rowChanges(try c1.exportFile()).first).clock
        tick()
        try c2.exec("UPDATE items SET a = 'c2 edit' WHERE id = 'k0'")
        let honest = try c2.exportFile()
        let site1 = try c1.db.siteID()
        func forged(seen: Int64) throws -> URL {
            let source = try Connection(path: c2.dbURL.path, mode: .readOnly)
            let def = try #require(try TableDefinition.read(table: "items", from: source))
            let change = try #require(try Self.rowChanges(honest).first)
            let folder = box.path("forged-\(seen)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let w = try DiffWriter(directory: folder, kind: .changes, authorUser: "user-c2", authorSite: try c2.db.siteID(),
                                   sequence: 7...7, seen: [site1: seen])
            try w.addTable(def)
            try w.append(change)
            return try w.finish()
        }
        let report = c1.apply(try forged(seen: Int64.max))
        #expect(report.status == .rejected)
        #expect(report.reason?.contains("claims to have seen") == true, "\(report.reason ?? "")")
        #expect(try c1.value("SELECT a FROM items WHERE id = 'k0'") == .text("c1 edit"))
        // Claiming exactly what was published is what an honest device that applied it would say.
        #expect(c1.apply(try forged(seen: published.hlc.rawValue)).status == .applied)
        #expect(try c1.value("SELECT a FROM items WHERE id = 'k0'") == .text("c2 edit"))
        #expect(try c1.conflicts().isEmpty, "the author had seen c1's edit")
    }

    /// A database tracked by an earlier version (changes without clocks, triggers without them) is upgraded on
    /// its next export: the triggers take edit times, and changes captured before get clocks in capture order.
    @Test func databaseTrackedByEarlierVersion_isUpgradedOnExport() throws {
        let box = try Sandbox("edit-time-upgrade")
        let c1 = try Self.replicas(box, ["c1"])[0]
        let tid = try #require(try c1.value("SELECT tid FROM rtsync_tracked WHERE name = 'items'")?.int64)
        for kind in ["ins", "upd", "key", "del"] { try c1.exec("DROP TRIGGER IF EXISTS rtsync_\(kind)_\(tid)") }
        try c1.exec("""
            CREATE TRIGGER rtsync_upd_\(tid) AFTER UPDATE ON "items" WHEN OLD."id" IS NEW."id" BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), quote(NEW."id"), 2, (OLD."a" IS NOT NEW."a") << 1); END;
            DELETE FROM rtsync_upgrades WHERE name IN ('edit-clocks', 'nul-key-text');
            """)
        try c1.exec("UPDATE items SET a = 'old trigger' WHERE id = 'k0'")
        try c1.exec("UPDATE items SET a = 'old trigger too' WHERE id = 'k1'")
        #expect(try c1.rows("SELECT hlc FROM rtsync_changes") == [[.integer(0)], [.integer(0)]])
        let changes = try Self.rowChanges(try c1.exportFile())
        #expect(changes.count == 2)
        #expect(changes.allSatisfy { $0.clock.hlc.rawValue > 0 })
        #expect(changes[0].clock < changes[1].clock)
        let triggers = try c1.rows("SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'items'").compactMap { $0[0].string }
        #expect(triggers.count == 5 && triggers.allSatisfy { $0.contains("julianday('now')") })
    }
}

extension EditTimeClockTests {
    /// A site's diff ids sort in the order it wrote them also across processes and when the wall clock went back:
    /// the last id is kept in the database.
    @Test func diffIDs_increaseAcrossProcesses_andWhenTheClockGoesBack() throws {
        let box = try Sandbox("edit-time-ids")
        let c1 = try Self.replicas(box, ["c1"])[0]
        // An id from a later second than now, as a process with a clock ahead (or an earlier process) left it.
        let ahead = KSUID.generate(at: Date().addingTimeInterval(3_600))
        try c1.exec("UPDATE rtsync_site SET last_diff_id = ?", [.text(ahead.string)])
        var ids: [String] = []
        for i in 0..<3 {
            try c1.exec("UPDATE items SET b = ? WHERE id = 'k0'", [.integer(Int64(100 + i))])
            ids.append(try c1.exportFile().deletingPathExtension().lastPathComponent)
        }
        #expect(ids.allSatisfy { $0 > ahead.string }, "\(ids) after \(ahead)")
        #expect(ids == ids.sorted() && Set(ids).count == 3)
    }
}
