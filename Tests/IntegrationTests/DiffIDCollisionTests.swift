import BucketSync
import DiffFormat
import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing

/// Devices that joined from one backup continue from the same last diff id. When the backup's author had a clock
/// ahead of theirs, each made its next id as "last id plus one": the same name, so the second upload was taken for a
/// retry of the first and its rows never reached anyone (found by the CLI chaos harness).
@Suite("diff ids: copies of one database never name two diffs alike")
struct DiffIDCollisionTests {
    /// Sets `device`'s last diff id, as a device whose clock was ahead left it in the backup others joined from.
    static func setLastDiffID(_ device: LTDevice, _ id: KSUID) throws {
        try Connection(path: device.db.path, mode: .readWrite).execute("UPDATE rtsync_site SET last_diff_id = ?", [.text(id.string)])
    }

    @Test func twoDevicesContinuingFromOneLastIDAheadOfTheClock_bothRowsArriveEverywhere() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let bucket = LTBucket.local(dir)
        let devices = try await LTSyncScenarios.makeDevices(dir, bucket)
        let (b, c) = (devices[1], devices[2])
        let ahead = KSUID.generate(at: Date().addingTimeInterval(86_400))
        try Self.setLastDiffID(b, ahead)
        try Self.setLastDiffID(c, ahead)
        try b.insertThing("from-b", title: "B's row")
        try c.insertThing("from-c", title: "C's row")

        _ = try await LTSyncScenarios.rounds(devices, 2)

        for d in devices {
            #expect(try d.thingTitle("from-b") == "B's row", "\(d.name)")
            #expect(try d.thingTitle("from-c") == "C's row", "\(d.name)")
        }
        try LTSyncScenarios.expectIdentical(devices)
    }

    @Test func anotherDiffUnderTheSameName_isNotTakenForAnEarlierUpload_andTheDiffStaysInTheOutbox() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let bucket = LTBucket.local(dir)
        let devices = try await LTSyncScenarios.makeDevices(dir, bucket)
        let (b, c) = (devices[1], devices[2])
        // Both exports stay in their outboxes (the upload fails before reaching the bucket).
        try b.insertThing("from-b", title: "B's row")
        try c.insertThing("from-c", title: "C's row")
        _ = try await b.sync(via: LTFaultyRemote(b.remote, .failBefore(.upload, nth: 1)), retry: ltNoRetry)
        _ = try await c.sync(via: LTFaultyRemote(c.remote, .failBefore(.upload, nth: 1)), retry: ltNoRetry)
        let (bName, cName) = (try #require(b.outbox().first), try #require(c.outbox().first))
        // B's diff lands in the bucket under the name of C's.
        let user = try SyncDatabase(path: c.db.path).userID()
        try await b.remote.upload(file: b.home.outbox.appendingPathComponent(bName), key: "\(user)/inbound/\(cName)", ifAbsent: true)

        let report = try await c.sync()

        let upload = try #require(report.phases.first { $0.name == "upload" })
        #expect(!upload.ok)
        #expect(upload.error?.contains("\(user)/inbound/\(cName)") == true, "\(upload)")
        #expect(upload.error?.contains("different diff") == true, "\(upload)")
        #expect(c.outbox() == [cName], "C's diff is kept, not dropped as uploaded")

    }
}
