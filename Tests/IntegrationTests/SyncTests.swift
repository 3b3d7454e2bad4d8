import BucketClient
import BucketSync
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Issue 6: three devices of one user syncing through a real bucket — a local folder and moto S3 run the
// same scenarios.

/// Opens a bucket for one device; every device gets its own client (and request counter) on the same bucket.
struct LTBucket: Sendable {
    let name: String
    let url: String
    let cloud: Bool
    let open: @Sendable () throws -> ObjectStoreRemote

    static func local(_ dir: TemporaryDirectory) -> LTBucket {
        let path = dir.url.appendingPathComponent("bucket").path
        return LTBucket(name: "local", url: "file://" + path, cloud: false) { try ObjectStoreRemote.open("file://" + path) }
    }

    static func s3() async throws -> LTBucket {
        let moto = try await LTMoto.shared.value
        let url = moto.freshBucketURL()
        return LTBucket(name: "s3", url: url, cloud: true) { try moto.remote(url) }
    }
}

/// One device: a home folder and its own client of the bucket.
struct LTDevice {
    let name: String
    let home: RTSyncHome
    let remote: ObjectStoreRemote
    var db: URL { home.database }

    func sync(via remote: (any RemoteStore)? = nil, retry: RemoteRetryPolicy = ltShortRetry) async throws -> SyncReport {
        try await Syncer(home: home, remote: remote ?? self.remote, retry: retry).sync()
    }

    func execute(_ sql: String, _ arguments: [SQLValue] = []) throws {
        try SyncDatabase(path: db.path).execute(sql, arguments)
    }

    func insertThing(_ id: String, title: String) throws {
        try execute("INSERT INTO things(id, account_id, title) VALUES (?, (SELECT account_id FROM owners LIMIT 1), ?)", [.text(id), .text(title)])
    }

    func thingTitle(_ id: String) throws -> String? {
        try ltScalar(db, "SELECT title FROM things WHERE id = ?", [.text(id)])?.string
    }

    func outbox() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: home.outbox.path)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    func siteID() throws -> String { try SyncDatabase(path: db.path).siteID() }
}

enum LTSyncScenarios {
    /// Device A starts from the bundled demo database (a new user) and syncs, which uploads its backup to
    /// `<user>/backups/`; B and C join that user through the bucket and sync once.
    static func makeDevices(_ dir: TemporaryDirectory, _ bucket: LTBucket) async throws -> [LTDevice] {
        let asset = try LTFixture.demoCopy(in: dir)
        var devices: [LTDevice] = []
        var user: String?
        for name in ["A", "B", "C"] {
            let home = ltHome(dir, name)
            // A cloud bucket needs the premium tier; a local folder works on free.
            try ltEditSettings(home) { $0.tier = bucket.cloud ? .premium : .free; $0.bucket = bucket.url }
            let device = LTDevice(name: name, home: home, remote: try bucket.open())
            let result = try await InitChain(home: home, remote: device.remote, joinUser: user, bundledAsset: asset, retry: ltShortRetry).run()
            try #require(result.source == (user == nil ? .bundled : .bucket), "\(name) initialized from \(result.source): \(result.attempts)")
            user = result.userId
            let first = try await device.sync()
            try #require(first.ok, "\(name)'s first sync: \(first.phases)")
            devices.append(device)
        }
        try #require(Set(try devices.map { try $0.siteID() }).count == 3, "three devices, three site ids")
        return devices
    }

    /// Syncs every device in turn, `rounds` times; every sync must complete.
    static func rounds(_ devices: [LTDevice], _ rounds: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [SyncReport] {
        var reports: [SyncReport] = []
        for _ in 0..<rounds {
            for d in devices {
                let r = try await d.sync()
                #expect(r.ok, "\(d.name): \(r.phases)", sourceLocation: sourceLocation)
                reports.append(r)
            }
        }
        return reports
    }

    static func expectIdentical(_ devices: [LTDevice], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let first = try ltAppTables(devices[0].db)
        for d in devices.dropFirst() {
            let other = try ltAppTables(d.db)
            for table in Set(first.keys).union(other.keys).sorted() where first[table] != other[table] {
                Issue.record("table \(table) differs between \(devices[0].name) and \(d.name):\n\(first[table] ?? [])\nvs\n\(other[table] ?? [])",
                             sourceLocation: sourceLocation)
            }
        }
    }

    /// Removes everything the scenario put in the bucket.
    static func cleanUp(_ bucket: LTBucket) async {
        guard let remote = try? bucket.open(), let all = try? await remote.list(prefix: "") else { return }
        for o in all { try? await remote.delete(key: o.key) }
    }

    // MARK: - Scenarios

    static func threeDevicesConverge(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        let headphones = "2siF0MQxlcAmWuBgrPsNUQrOdcv", laptop = "2siF0NDzx8GWL1tBd6vx9shlVBj"

        try a.insertThing("thing-from-A", title: "A's thing")
        try b.insertThing("thing-from-B", title: "B's thing")
        try c.insertThing("thing-from-C", title: "C's thing")
        try a.execute("UPDATE things SET title = 'Headphones (A)' WHERE id = ?", [.text(headphones)])
        try b.execute("UPDATE things SET title = 'Headphones (B)' WHERE id = ?", [.text(headphones)])  // concurrent edit
        try c.execute("UPDATE things SET color = 'space grey' WHERE id = ?", [.text(laptop)])
        try b.execute("DELETE FROM translations WHERE lang = 'de' AND key = 'ui.evidence'")
        _ = try await rounds(devices, 1)
        // Edits between rounds too: B got A's thing in round 1 (A synced first).
        #expect(try b.thingTitle("thing-from-A") == "A's thing")
        try b.execute("UPDATE things SET description = 'edited after round 1' WHERE id = 'thing-from-A'")
        // Three rounds: B's edit reaches A only in the second, and the third must then be idle everywhere.
        let reports = try await rounds(devices, 3)

        try expectIdentical(devices)
        for d in devices {
            #expect(try d.thingTitle("thing-from-A") == "A's thing", "\(d.name)")
            #expect(try d.thingTitle("thing-from-B") == "B's thing", "\(d.name)")
            #expect(try d.thingTitle("thing-from-C") == "C's thing", "\(d.name)")
            #expect(try ltScalar(d.db, "SELECT color FROM things WHERE id = ?", [.text(laptop)])?.string == "space grey", "\(d.name)")
            #expect(try ltScalar(d.db, "SELECT description FROM things WHERE id = 'thing-from-A'")?.string == "edited after round 1", "\(d.name)")
            #expect(try ltScalar(d.db, "SELECT count(*) FROM translations WHERE lang = 'de' AND key = 'ui.evidence'")?.int64 == 0, "\(d.name)")
            #expect(["Headphones (A)", "Headphones (B)"].contains(try d.thingTitle(headphones) ?? ""), "\(d.name)")
            #expect(try SyncDatabase(path: d.db.path).pendingChangeCount() == 0, "\(d.name): applying diffs must not create changes to send back")
        }
        // The last round had nothing left to do anywhere.
        #expect(reports.suffix(3).allSatisfy { $0.uploaded.isEmpty && $0.downloaded.isEmpty }, "last round: \(reports.suffix(3).map(\.phases))")
        await cleanUp(bucket)
    }

    static func offlineDeviceOutboxDeliveredNextTime(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        let offline = LTFaultyRemote(c.remote, .offline)

        try c.insertThing("offline-1", title: "made offline")
        let r1 = try await c.sync(via: offline)
        try c.insertThing("offline-2", title: "also made offline")
        let r2 = try await c.sync(via: offline)
        try a.insertThing("online-A", title: "made while C was offline")
        _ = try await rounds([a, b], 1)

        #expect(!r1.ok && !r2.ok)
        #expect(r2.phases.first { $0.name == "upload" }?.ok == false)
        #expect(c.outbox().count == 2, "both offline exports wait in the outbox: \(c.outbox())")
        #expect(try a.thingTitle("offline-1") == nil)
        #expect(try c.thingTitle("online-A") == nil)

        let back = try await c.sync()
        #expect(back.ok, "\(back.phases)")
        #expect(back.uploaded.count == 2)
        #expect(c.outbox().isEmpty)
        _ = try await rounds([a, b], 1)
        try expectIdentical(devices)
        #expect(try b.thingTitle("offline-2") == "also made offline")
        #expect(try c.thingTitle("online-A") == "made while C was offline")
        await cleanUp(bucket)
    }

    static func lateUploadedDiffAppliedEverywhere(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        let headphones = "2siF0MQxlcAmWuBgrPsNUQrOdcv"

        try c.insertThing("late-0", title: "before")
        _ = try await c.sync()
        // Exported while offline, then held back (a phone that stayed offline for hours).
        try c.insertThing("late-1", title: "held back")
        try c.execute("UPDATE things SET color = 'older value' WHERE id = ?", [.text(headphones)])
        _ = try await c.sync(via: LTFaultyRemote(c.remote, .offline))
        let held = try #require(c.outbox().first)
        try FileManager.default.createDirectory(at: dir.file("held"), withIntermediateDirectories: true)
        try FileManager.default.moveItem(at: c.home.outbox.appendingPathComponent(held), to: dir.file("held/" + held))
        try c.insertThing("late-2", title: "after")
        try c.execute("UPDATE things SET color = 'newer value' WHERE id = ?", [.text(headphones)])
        _ = try await rounds(devices, 2)
        #expect(try a.thingTitle("late-2") == "after")
        #expect(try a.thingTitle("late-1") == nil)
        let siteC = try c.siteID()
        #expect(try DeviceStatus.gather(home: a.home).gaps[siteC]?.isEmpty == false, "status reports C's missing diff")

        // The held diff finally goes up; its KSUID sorts before diffs everyone already applied.
        try FileManager.default.moveItem(at: dir.file("held/" + held), to: c.home.outbox.appendingPathComponent(held))
        let late = try await c.sync()
        #expect(late.uploaded.count == 1)
        _ = try await rounds(devices, 1)

        try expectIdentical(devices)
        for d in devices {
            #expect(try d.thingTitle("late-1") == "held back", "\(d.name)")
            #expect(try ltScalar(d.db, "SELECT color FROM things WHERE id = ?", [.text(headphones)])?.string == "newer value",
                    "\(d.name): the late diff must not overwrite the newer value")
            #expect(try DeviceStatus.gather(home: d.home).gaps.isEmpty, "\(d.name): no gap left")
        }
        await cleanUp(bucket)
    }

    static func failureMidUploadNoLossNoDuplicate(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        let (a, c) = (devices[0], devices[2])
        // Two diffs queued in C's outbox.
        try c.insertThing("up-1", title: "first queued")
        _ = try await c.sync(via: LTFaultyRemote(c.remote, .offline))
        try c.insertThing("up-2", title: "second queued")
        _ = try await c.sync(via: LTFaultyRemote(c.remote, .offline))
        #expect(c.outbox().count == 2)

        // The 2nd upload fails before reaching the bucket.
        let r1 = try await c.sync(via: LTFaultyRemote(c.remote, .failBefore(.upload, nth: 2)), retry: ltNoRetry)
        #expect(r1.phases.first { $0.name == "upload" }?.ok == false)
        #expect(r1.uploaded.count == 1)
        #expect(c.outbox().count == 1, "the failed diff stays queued")
        // Next sync: the upload lands, but the answer is lost; the diff stays queued.
        let r2 = try await c.sync(via: LTFaultyRemote(c.remote, .failAfter(.upload, nth: 1)), retry: ltNoRetry)
        #expect(r2.phases.first { $0.name == "upload" }?.ok == false)
        #expect(c.outbox().count == 1)
        // Next sync completes: the conditional put finds it already there.
        let r3 = try await c.sync()
        #expect(r3.ok, "\(r3.phases)")
        #expect(c.outbox().isEmpty)

        let user = try c.home.loadSettings().userID
        let inbound = try await c.remote.list(prefix: Syncer.inboundPrefix(user: user)).map(\.key)
        #expect(Set(inbound).count == inbound.count)
        let reports = try await rounds(devices, 1)
        let inserted = reports.prefix(1).flatMap(\.applied).filter { $0.status == .applied }.reduce(0) { $0 + $1.inserted }
        #expect(inserted == 2, "A inserts each queued row exactly once: \(reports.prefix(1).flatMap(\.applied))")
        try expectIdentical(devices)
        #expect(try a.thingTitle("up-1") == "first queued")
        #expect(try a.thingTitle("up-2") == "second queued")
        await cleanUp(bucket)
    }

    static func failureMidDownloadNoLossNoDuplicate(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        try b.insertThing("down-B", title: "from B")
        _ = try await b.sync()
        try c.insertThing("down-C", title: "from C")
        _ = try await c.sync()

        // The 1st download fails before reaching the bucket, the 2nd completes but its answer is lost.
        let r1 = try await a.sync(via: LTFaultyRemote(a.remote, .failBefore(.download, nth: 1)), retry: ltNoRetry)
        #expect(r1.phases.first { $0.name == "download" }?.ok == false)
        #expect(r1.applied.filter { $0.status == .applied }.count == 1, "the diff that did arrive is applied: \(r1.applied)")
        try b.insertThing("down-B2", title: "from B again")
        _ = try await b.sync()
        let r2 = try await a.sync(via: LTFaultyRemote(a.remote, .failAfter(.download, nth: 1)), retry: ltNoRetry)
        #expect(r2.phases.first { $0.name == "download" }?.ok == false)
        let r3 = try await a.sync()
        #expect(r3.ok, "\(r3.phases)")

        let inserted = [r1, r2, r3].flatMap(\.applied).filter { $0.status == .applied }.reduce(0) { $0 + $1.inserted }
        #expect(inserted == 3, "each of the three rows inserted exactly once: \([r1, r2, r3].map(\.applied))")
        #expect(try a.thingTitle("down-B") == "from B")
        #expect(try a.thingTitle("down-C") == "from C")
        #expect(try a.thingTitle("down-B2") == "from B again")
        let inbox = (try? FileManager.default.contentsOfDirectory(atPath: a.home.inbox.path)) ?? []
        #expect(inbox.filter { !$0.hasPrefix(".") }.isEmpty, "nothing left in A's inbox: \(inbox)")
        _ = try await rounds(devices, 1)
        try expectIdentical(devices)
        await cleanUp(bucket)
    }

    static func idleSyncCostsOneList(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        try devices[1].insertThing("idle-test", title: "one change")
        _ = try await rounds(devices, 2)
        let a = devices[0]
        a.remote.store.requestCounter.reset()

        let report = try await a.sync()

        #expect(report.ok)
        #expect(a.remote.store.requestCounter.snapshot == ["ListObjectsV2": 1])
        #expect(report.requests == 1)
        await cleanUp(bucket)
    }

    /// A diff already in the bucket (its upload's answer was lost) costs one PUT to confirm, not retries.
    static func reuploadAfterLostAnswerCostsOnePut(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await makeDevices(dir, bucket)
        let c = devices[2]
        try c.insertThing("lost-answer", title: "uploaded once")
        _ = try await c.sync(via: LTFaultyRemote(c.remote, .failAfter(.upload, nth: 1)), retry: ltNoRetry)
        #expect(c.outbox().count == 1)
        c.remote.store.requestCounter.reset()

        let report = try await c.sync(retry: RemoteRetryPolicy())  // the default policy, as the CLI uses

        #expect(report.ok, "\(report.phases)")
        #expect(c.outbox().isEmpty)
        #expect(c.remote.store.requestCounter.count("PutObject") == 1,
                "an 'already exists' answer is final and must not be retried: \(c.remote.store.requestCounter.snapshot)")
        await cleanUp(bucket)
    }
}

// MARK: - Suites

@Suite("sync: three devices through a local-folder bucket")
struct SyncLocalTests {
    @Test func threeDevices_editsOnAllAndSeveralRounds_convergeToIdenticalTables() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.threeDevicesConverge(.local(dir))
    }

    @Test func offlineDevice_outboxKeptThenDeliveredNextSync() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.offlineDeviceOutboxDeliveredNextTime(.local(dir))
    }

    @Test func lateUploadedDiff_sortsBeforeAppliedOnes_isAppliedEverywhere() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.lateUploadedDiffAppliedEverywhere(.local(dir))
    }

    @Test func networkFailureMidUpload_nextSyncCompletes_noLossNoDuplicate() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.failureMidUploadNoLossNoDuplicate(.local(dir))
    }

    @Test func networkFailureMidDownload_nextSyncCompletes_noLossNoDuplicate() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.failureMidDownloadNoLossNoDuplicate(.local(dir))
    }

    @Test func idleSync_afterConvergence_costsOneList() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.idleSyncCostsOneList(.local(dir))
    }

    @Test func reupload_afterLostUploadAnswer_costsOnePutWithoutRetries() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTSyncScenarios.reuploadAfterLostAnswerCostsOnePut(.local(dir))
    }
}

@Suite("sync: three devices through loopback S3 (moto_server)", .enabled(if: !LTMoto.skipRequested, "RTSYNC_SKIP_S3=1"))
struct SyncS3Tests {
    @Test func threeDevices_editsOnAllAndSeveralRounds_convergeToIdenticalTables() async throws {
        try await LTSyncScenarios.threeDevicesConverge(try await .s3())
    }

    @Test func offlineDevice_outboxKeptThenDeliveredNextSync() async throws {
        try await LTSyncScenarios.offlineDeviceOutboxDeliveredNextTime(try await .s3())
    }

    @Test func lateUploadedDiff_sortsBeforeAppliedOnes_isAppliedEverywhere() async throws {
        try await LTSyncScenarios.lateUploadedDiffAppliedEverywhere(try await .s3())
    }

    @Test func networkFailureMidUpload_nextSyncCompletes_noLossNoDuplicate() async throws {
        try await LTSyncScenarios.failureMidUploadNoLossNoDuplicate(try await .s3())
    }

    @Test func networkFailureMidDownload_nextSyncCompletes_noLossNoDuplicate() async throws {
        try await LTSyncScenarios.failureMidDownloadNoLossNoDuplicate(try await .s3())
    }

    @Test func idleSync_afterConvergence_costsExactlyOneListRequest() async throws {
        try await LTSyncScenarios.idleSyncCostsOneList(try await .s3())
    }

    @Test func reupload_afterLostUploadAnswer_costsOnePutWithoutRetries() async throws {
        try await LTSyncScenarios.reuploadAfterLostAnswerCostsOnePut(try await .s3())
    }
}
