import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Apply takes a short path for rows this device has never seen (two statements instead of a full merge)
/// and checks rows and the content digest while it applies them. These tests pin what must not change.
@Suite("Applying rows new to a device")
struct ApplyNewRowsTests {
    /// Many new rows, a byte of the last one changed: the digest check at the end must undo every row
    /// already written, including its bookkeeping.
    @Test func tamperedDiffOfNewRows_isRejectedAfterTheLastRow_andLeavesNothingBehind() throws {
        let box = try Sandbox("newrows-digest")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        for i in 0..<200 { try a.exec("INSERT INTO translations VALUES ('xx', 'key.\(i)', 'value \(i)', 'ctx')") }
        try a.exec("INSERT INTO translations VALUES ('xx', 'key.last', 'Zebra', 'ctx')")
        let good = try a.exportFile()
        var bytes = [UInt8](try Data(contentsOf: good))
        let needle = Array("Zebra".utf8)
        let at = try #require((0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[at] = UInt8(ascii: "C")
        let file = box.path("incoming").appendingPathComponent(good.lastPathComponent)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: file)
        let before = try b.fullDump()
        let report = b.apply(file)
        #expect(report.status == .rejected)
        #expect(report.reason?.contains("digest") == true, "\(report.reason ?? "")")
        #expect(report.inserted == 0)
        #expect(report.quarantinedTo != nil)
        let after = try b.fullDump()
        #expect(after == before, "database changed: \(firstDifference(before, after) ?? "")")
        // The intact file applies every row.
        let applied = b.apply(good)
        #expect(applied.status == .applied && applied.inserted == 201)
        #expect(try b.value("SELECT count(*) FROM translations WHERE lang = 'xx'") == .integer(201))
    }

    /// The short path builds key texts with SQLite's quote(), the full merge in Swift: for keys with quotes,
    /// non-ASCII text and negative integers they must be the same text, or a later change to a row applied by
    /// the short path would not find the row's bookkeeping (and the capture triggers' texts would differ too).
    @Test func keysAppliedByTheShortPath_haveTheBookkeepingTheFullMergeLooksUp() throws {
        let box = try Sandbox("newrows-keytext")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let keys = ["it's", "''", "naïve ☃ 𝄞", "a,b", "-1", "1.5e300"]
        for k in keys { try a.exec("INSERT INTO translations VALUES ('kt', ?, 'v1', 'ctx')", [.text(k)]) }
        try a.exec("INSERT INTO requests(id, url, type, status) VALUES (-77, 'https://example.com/kt', 'image', 'new')")
        let first = b.apply(try a.exportFile())
        #expect(first.status == .applied && first.inserted == keys.count + 1, "\(first)")
        let tid = try #require(try b.value("SELECT tid FROM rtsync_tracked WHERE name = 'translations'")?.int64)
        let mismatched = try b.value("""
            SELECT count(*) FROM translations t WHERE t.lang = 'kt'
              AND NOT EXISTS (SELECT 1 FROM rtsync_rows r WHERE r.tid = ? AND r.pk = quote(t.lang) || ',' || quote(t.key))
            """, [.integer(tid)])
        #expect(mismatched == .integer(0), "rows applied without bookkeeping under the triggers' key text")

        tick()
        try a.exec("UPDATE translations SET value = 'v2' WHERE lang = 'kt'")
        try a.exec("UPDATE requests SET status = 'done' WHERE id = -77")
        let second = b.apply(try a.exportFile())
        #expect(second.status == .applied && second.updated == keys.count + 1 && second.inserted == 0, "\(second)")
        #expect(second.conflicts == 0, "the rows' own history was not found: \(second)")
        let entries = try b.value("SELECT count(*) FROM rtsync_rows WHERE tid = ? AND pk LIKE ?", [.integer(tid), .text("'kt',%")])
        #expect(entries == .integer(Int64(keys.count)))
        try expectSameData(a, b)
    }

    /// A key that exists here without any rtsync history (data from before tracking) is not "new":
    /// the insert falls back to the full merge, which keeps the whole incoming row (it was born later).
    @Test func insertOfKeyPresentLocallyWithoutHistory_takesTheFullMerge() throws {
        let box = try Sandbox("newrows-present")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        // B gets the key outside rtsync's view (as if it predated tracking): no change row, no rtsync_rows entry.
        try b.exec("DROP TRIGGER IF EXISTS rtsync_ins_\(try #require(b.value("SELECT tid FROM rtsync_tracked WHERE name = 'translations'")?.int64))")
        try b.exec("INSERT INTO translations VALUES ('yy', 'greeting', 'hallo', 'b')")
        try b.db.track()
        #expect(try b.value("SELECT count(*) FROM rtsync_rows WHERE pk LIKE '%greeting%'") == .integer(0))
        try a.exec("INSERT INTO translations VALUES ('yy', 'greeting', 'hello', 'a')")
        let report = b.apply(try a.exportFile())
        #expect(report.status == .applied)
        #expect(report.inserted == 0 && report.updated == 1, "\(report)")
        #expect(try b.value("SELECT value FROM translations WHERE lang = 'yy' AND key = 'greeting'") == .text("hello"))
        // The overwritten local value is in the conflict log, and the key now has its bookkeeping.
        #expect(try b.conflicts(table: "translations").contains { $0.localValue == .text("hallo") })
        #expect(try b.value("SELECT count(*) FROM rtsync_rows WHERE pk LIKE '%greeting%'") == .integer(1))
    }

    /// A UNIQUE collision found by the short path's insert must leave no bookkeeping for the losing key
    /// beyond what the full merge writes; the replicas still converge.
    @Test func newRowCollidingOnUnique_resolvesLikeTheFullMerge() throws {
        let box = try Sandbox("newrows-unique")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("INSERT INTO requests(id, url, type, status) VALUES (9001, 'https://example.com/same', 'image', 'new')")
        tick()
        try b.exec("INSERT INTO requests(id, url, type, status) VALUES (9002, 'https://example.com/same', 'image', 'new')")
        _ = try exchange([a, b])
        _ = try exchange([a, b])
        try expectSameData(a, b)
        #expect(try a.value("SELECT count(*) FROM requests WHERE url = 'https://example.com/same'") == .integer(1))
    }

    /// A database tracked by an earlier version may hold column clocks for a key without an `rtsync_rows`
    /// entry (and without the row). Apply repairs that once before merging, so the incoming row takes the full
    /// merge, which clears the stale clocks instead of keeping them beside a fresh row.
    @Test func staleClocksFromAnEarlierVersion_areRepairedBeforeApply() throws {
        let box = try Sandbox("newrows-upgrade")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let tid = try #require(b.value("SELECT tid FROM rtsync_tracked WHERE name = 'translations'")?.int64)
        let site = try #require(b.value("SELECT site_id FROM rtsync_site")?.string)
        // As an earlier version could leave it: a clock an hour ahead for a key with no row and no entry.
        let ahead = (HLC.wallMilliseconds() + 3_600_000) << 16
        try b.exec("INSERT INTO rtsync_clocks(tid, pk, col, hlc, site) VALUES (?, ?, 'value', ?, ?)",
                   [.integer(tid), .text("'zz','k'"), .integer(ahead), .text(site)])
        try b.exec("DROP TABLE rtsync_upgrades")

        try a.exec("INSERT INTO translations VALUES ('zz', 'k', 'first', 'c')")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.value("SELECT value FROM translations WHERE lang = 'zz' AND key = 'k'") == .text("first"))
        #expect(try b.value("SELECT count(*) FROM rtsync_clocks WHERE tid = ? AND pk = ?", [.integer(tid), .text("'zz','k'")]) == .integer(0))
        #expect(try b.value("SELECT count(*) FROM rtsync_upgrades WHERE name = 'clock-rows'") == .integer(1))

        // A later edit on A wins on B: no stale clock from the past stands in its way.
        tick()
        try a.exec("UPDATE translations SET value = 'second' WHERE lang = 'zz' AND key = 'k'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.value("SELECT value FROM translations WHERE lang = 'zz' AND key = 'k'") == .text("second"))
        try expectSameData(a, b)
    }

    /// A diff skipped without merging (this device's own, or one applied before) is still checked first:
    /// a damaged copy is rejected and quarantined, not recorded as handled.
    @Test func damagedCopyOfOwnOrAppliedDiff_isRejectedNotSkipped() throws {
        let box = try Sandbox("newrows-skips")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("INSERT INTO translations VALUES ('qq', 'k', 'Walrus', 'c')")
        let good = try a.exportFile()
        #expect(b.apply(good).status == .applied)
        var bytes = [UInt8](try Data(contentsOf: good))
        let needle = Array("Walrus".utf8)
        let at = try #require((0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[at] = UInt8(ascii: "B")
        for replica in [a, b] {
            let file = box.path("incoming-\(replica.name)").appendingPathComponent(good.lastPathComponent)
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(bytes).write(to: file)
            let report = replica.apply(file)
            #expect(report.status == .rejected, "\(replica.name): \(report.status) \(report.reason ?? "")")
            #expect(report.quarantinedTo != nil)
        }
    }
}
