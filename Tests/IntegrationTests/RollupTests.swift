import BucketSync
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Issue 19, aim 4: a device that was offline while another synced many times merges that device's roll-up (the
// present state of the rows its small diffs touched) instead of downloading and opening each diff.

@Suite("roll-ups")
struct RollupTests {
    /// Keys in inbound, split into diffs and roll-ups.
    static func inbound(_ device: LTDevice) async throws -> (diffs: [String], rollups: [String]) {
        let user = try device.home.loadSettings().userID
        let keys = try await device.remote.list(prefix: "\(user)/inbound/").map(\.key)
        return (keys.filter { !$0.hasSuffix(SyncDatabase.rollupSuffix) }, keys.filter { $0.hasSuffix(SyncDatabase.rollupSuffix) })
    }

    @Test func offlineDevice_mergesTheRollup_insteadOfEachDiff() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b, c) = (devices[0], devices[1], devices[2])
        let headphones = "2siF0MQxlcAmWuBgrPsNUQrOdcv"
        // B edits a row A edits too, and deletes one A updates: the roll-up must merge as the diffs would.
        try b.execute("UPDATE things SET title = 'Headphones (B, offline)' WHERE id = ?", [.text(headphones)])
        for i in 0..<24 {
            switch i % 4 {
            case 0: try a.insertThing("a-\(i)", title: "made by A, sync \(i)")
            case 1: try a.execute("UPDATE things SET title = ? WHERE id = ?", [.text("Headphones (A \(i))"), .text(headphones)])
            case 2: try a.execute("UPDATE things SET description = ? WHERE id = ?", [.text("edited \(i)"), .text("a-\(i - 2)")])
            default:
                if i % 8 == 3 { try a.execute("DELETE FROM things WHERE id = ?", [.text("a-\(i - 3)")]) }
                else { try a.execute("UPDATE things SET title = ? WHERE id = ?", [.text("retitled at \(i)"), .text("a-\(i - 3)")]) }
            }
            let r = try await a.sync()
            #expect(r.ok, "A's sync \(i): \(r.phases)")
        }
        let listed = try await Self.inbound(a)
        #expect(listed.rollups.count == 1, "A keeps one roll-up in inbound: \(listed.rollups)")

        let synced = try await b.sync()
        #expect(synced.ok, "\(synced.phases)")
        let merged = synced.applied.filter { $0.file.hasSuffix(SyncDatabase.rollupSuffix) }
        #expect(merged.count == 1 && merged.first?.status == .applied, "\(synced.applied.map { "\($0.file): \($0.status) \($0.reason ?? "")" })")
        #expect(synced.downloaded.count <= 2, "B downloaded \(synced.downloaded.count) diffs besides the roll-up: \(synced.downloaded)")
        // The covered diffs are recorded with their sequence numbers: no gap shows.
        #expect(try SyncDatabase(path: b.db.path).sequenceGaps().isEmpty)

        // Everyone converges, B's concurrent edit resolved as without the roll-up (the later edit wins, the loser logged).
        _ = try await LTSyncScenarios.rounds(devices, 2)
        try LTSyncScenarios.expectIdentical(devices)
        #expect(try b.thingTitle("a-0") == nil, "a-0's delete at sync 3 must reach B")
        #expect(try b.thingTitle("a-4") == "retitled at 7")
        #expect(try ltScalar(b.db, "SELECT description FROM things WHERE id = 'a-4'")?.string == "edited 6")
        #expect(try b.thingTitle(headphones) == "Headphones (A 21)", "A's edits came later than B's")
        _ = c
    }

    /// Through moto S3 too: the roll-up travels compressed like a diff and is listed beside them.
    @Test func offlineDevice_mergesTheRollup_throughS3() async throws {
        let bucket = try await LTBucket.s3()
        defer { Task { await LTSyncScenarios.cleanUp(bucket) } }
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, bucket)
        let (a, b) = (devices[0], devices[1])
        for i in 0..<18 {
            try a.insertThing("s3-\(i)", title: "made by A, sync \(i)")
            let r = try await a.sync()
            #expect(r.ok, "\(r.phases)")
        }
        #expect(try await Self.inbound(a).rollups.count == 1)
        let synced = try await b.sync()
        #expect(synced.ok, "\(synced.phases)")
        #expect(synced.phases.contains { $0.name == "rollup" && $0.summary.hasPrefix("merged") }, "\(synced.phases)")
        // The roll-up was made at A's 16th sync (the threshold); the two diffs after it are downloaded (a new
        // roll-up waits until 8 more, half the threshold, have come).
        #expect(synced.downloaded.count == 2, "\(synced.downloaded)")
        try LTSyncScenarios.expectIdentical([a, b])
    }

    /// With every device up to date (their cursors list A's diffs), A uploads no roll-up however many diffs it has
    /// in inbound, and reads the cursors only every few syncs.
    @Test func devicesUpToDate_noRollupIsMade() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b, c) = (devices[0], devices[1], devices[2])
        var cursorReads = 0
        var lastChecked: SQLValue?
        for i in 0..<30 {
            try a.insertThing("up-\(i)", title: "made by A, sync \(i)")
            let r = try await a.sync()
            #expect(r.ok, "\(r.phases)")
            #expect(!r.phases.contains { $0.name == "rollup" }, "sync \(i): \(r.phases)")
            // Each look at the cursors is recorded with the number of candidates it saw.
            let checked = try? ltScalar(a.db, "SELECT candidates FROM rtsync_rollup_check")
            if let checked, checked != lastChecked { cursorReads += 1; lastChecked = checked }
            _ = try await b.sync()
            _ = try await c.sync()
        }
        #expect(try await Self.inbound(a).rollups.isEmpty)
        // Candidates pass the threshold (16) at sync 16, then a look every 8: syncs 16 and 24.
        #expect(cursorReads >= 1 && cursorReads <= 3, "A read the cursors in \(cursorReads) of 30 syncs")
        try LTSyncScenarios.expectIdentical(devices)
    }

    @Test func rollupsOff_noneIsUploaded_andTheDiffsStillConverge() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        for d in devices { try ltEditSettings(d.home) { $0.rollupThreshold = 0 } }
        let (a, b) = (devices[0], devices[1])
        for i in 0..<20 {
            try a.insertThing("a-\(i)", title: "made by A, sync \(i)")
            _ = try await a.sync()
        }
        #expect(try await Self.inbound(a).rollups.isEmpty)
        let synced = try await b.sync()
        #expect(synced.downloaded.count >= 20)
        try LTSyncScenarios.expectIdentical([a, b])
    }

    @Test func tamperedRollup_isNotUsed_andTheDiffsAreApplied() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        for i in 0..<18 {
            try a.insertThing("a-\(i)", title: "made by A, sync \(i)")
            _ = try await a.sync()
        }
        let key = try #require(try await Self.inbound(a).rollups.first)
        // Replace the roll-up with one whose covered list names a diff it does not carry, without a matching digest.
        let scratch = try TemporaryDirectory()
        let local = scratch.url.appendingPathComponent("r.sqlite")
        let obj = try #require(try await a.remote.list(prefix: key).first)
        try await a.remote.download(obj, to: local.appendingPathExtension("z"))
        try DiffTransport.install(local.appendingPathExtension("z"), as: local, name: key)
        let db = try Connection(path: local.path)
        try db.execute("DELETE FROM rtsync_covers WHERE rowid = (SELECT min(rowid) FROM rtsync_covers)")
        try db.execute("UPDATE rtsync_cells SET hlc = hlc")
        try await a.remote.delete(key: key)
        try await a.remote.upload(file: local, key: key, ifAbsent: true)

        let synced = try await b.sync()
        let used = synced.applied.filter { $0.file.hasSuffix(SyncDatabase.rollupSuffix) }
        #expect(used.allSatisfy { $0.status != .applied }, "\(used.map { "\($0.status) \($0.reason ?? "")" })")
        #expect(synced.downloaded.count >= 18)
        try LTSyncScenarios.expectIdentical([a, b])
    }
}
