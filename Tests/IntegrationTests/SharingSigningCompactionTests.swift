import BucketSync
import Crypto
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Issue 6: signed diffs, shares and requests between users, and compaction, through a local-folder bucket.

@Suite("sync: signatures, shares, requests, compaction")
struct SharingSigningCompactionTests {
    /// A device whose syncs sign with its own key and trust the given keys.
    func signedSync(_ device: LTDevice, trusting others: [LTDevice] = []) async throws -> SyncReport {
        let keys = DeviceKeys(home: device.home)
        var trusted = try keys.trustedKeys()
        for o in others { trusted.append(Array(try DeviceKeys(home: o.home).signingKey().publicKey.rawRepresentation)) }
        return try await Syncer(home: device.home, remote: device.remote, retry: ltShortRetry,
                                signingKey: try keys.signingKey(), trustedKeys: trusted).sync()
    }

    /// A local-folder bucket, or a fresh prefix on the loopback S3 server.
    func bucket(_ kind: String, _ dir: TemporaryDirectory) async throws -> LTBucket {
        kind == "s3" ? try await LTBucket.s3() : LTBucket.local(dir)
    }

    /// Two users, each with one device, sharing one bucket.
    func twoUsers(_ dir: TemporaryDirectory, _ bucket: LTBucket) async throws -> (LTDevice, LTDevice) {
        var devices: [LTDevice] = []
        for name in ["user1", "user2"] {
            let home = ltHome(dir, name)
            // A cloud bucket needs the premium tier; a local folder works on free.
            try ltEditSettings(home) { $0.tier = bucket.cloud ? .premium : .free; $0.bucket = bucket.url }
            let device = LTDevice(name: name, home: home, remote: try bucket.open())
            _ = try await InitChain(home: home, remote: device.remote, bundledAsset: try LTFixture.demoCopy(in: dir, name: "\(name).sqlite"), retry: ltShortRetry).run()
            devices.append(device)
        }
        return (devices[0], devices[1])
    }

    func user(_ d: LTDevice) throws -> String { try d.home.loadSettings().userID }

    /// The bucket kinds every sharing and signing scenario runs against (S3 unless RTSYNC_SKIP_S3=1).
    static let bucketKinds = LTMoto.skipRequested ? ["local"] : ["local", "s3"]

    @Test(arguments: bucketKinds)
    func sync_signaturesRequired_forgedAndUnsignedDiffsRejected_trustedOneApplied(_ kind: String) async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, try await bucket(kind, dir))
        let (a, b) = (devices[0], devices[1])
        try ltEditSettings(b.home) { $0.requireSignatures = true }
        let userID = try user(a)
        let inbound = Syncer.inboundPrefix(user: userID)

        // A forged diff: well formed, signed, but by a key B does not trust.
        let forgedDir = dir.url.appendingPathComponent("forged")
        try FileManager.default.createDirectory(at: forgedDir, withIntermediateDirectories: true)
        let site = try a.siteID()
        let w = try DiffWriter(directory: forgedDir, kind: .changes, authorUser: userID, authorSite: site, expectedRows: 1)
        try w.addTable(TableDefinition(name: "translations", columns: [
            ColumnDefinition(name: "lang", type: "VARCHAR", notNull: true, primaryKey: 1),
            ColumnDefinition(name: "key", type: "VARCHAR", notNull: true, primaryKey: 2),
            ColumnDefinition(name: "value", type: "TEXT", notNull: true),
            ColumnDefinition(name: "context", type: "VARCHAR"),
        ]))
        let stamp = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds() + 1000, counter: 0), site: site)
        try w.append(RowChange(table: "translations", operation: .upsert, values: [.text("en"), .text("ui.things"), .text("FORGED"), .text("ui")],
                               changedColumns: ["value"], clock: stamp, born: .zero))
        let forged = try w.finish(signingKey: Curve25519.Signing.PrivateKey())
        try await a.remote.upload(file: forged, key: inbound + forged.lastPathComponent, ifAbsent: true)

        // An unsigned diff from A itself.
        try a.execute("UPDATE translations SET value = 'UNSIGNED' WHERE lang = 'de' AND key = 'ui.things'")
        let unsigned = try #require(try SyncDatabase(path: a.db.path).exportChanges(to: dir.url.appendingPathComponent("unsigned")))
        try await a.remote.upload(file: URL(fileURLWithPath: unsigned.file), key: inbound + URL(fileURLWithPath: unsigned.file).lastPathComponent, ifAbsent: true)

        // A properly signed diff from A, whose key B trusts.
        try a.execute("UPDATE translations SET value = 'Signed' WHERE lang = 'en' AND key = 'ui.evidence'")
        #expect(try await signedSync(a).ok)

        let report = try await signedSync(b, trusting: [a])
        let rejected = report.applied.filter { $0.status == .rejected }
        #expect(rejected.count == 2, "forged and unsigned diffs rejected: \(report.applied)")
        #expect(rejected.contains { $0.reason?.contains("unsigned") == true })
        #expect(rejected.contains { $0.reason?.contains("not valid or not from a trusted key") == true })
        #expect(try ltScalar(b.db, "SELECT value FROM translations WHERE lang = 'en' AND key = 'ui.things'")?.string != "FORGED")
        #expect(try ltScalar(b.db, "SELECT value FROM translations WHERE lang = 'de' AND key = 'ui.things'")?.string != "UNSIGNED")
        #expect(try ltScalar(b.db, "SELECT value FROM translations WHERE lang = 'en' AND key = 'ui.evidence'")?.string == "Signed")
        let quarantined = (try FileManager.default.contentsOfDirectory(atPath: b.home.quarantine.path)).filter { $0.hasSuffix(".sqlite") }
        #expect(quarantined.count == 2)
    }

    @Test func sync_signaturesRequired_diffClaimingAnotherUsersIdentity_isRejected_genuineOneApplied() async throws {
        let dir = try TemporaryDirectory()
        let (u1, u2) = try await twoUsers(dir, .local(dir))
        let (user1, user2) = (try user(u1), try user(u2))
        try ltEditSettings(u1.home) { $0.requireSignatures = true }
        let keys1 = DeviceKeys(home: u1.home), keys2 = DeviceKeys(home: u2.home)
        try keys1.trust(publicKeyHex: try keys2.publicKeyHex(), label: user2)
        let key2 = try keys2.signingKey()
        let inbound1 = Syncer.inboundPrefix(user: user1)
        let db2 = try SyncDatabase(path: u2.db.path)

        // user2 signs a diff that claims to come from user1 (to pass owner-only / read-only-share checks).
        try u2.execute("UPDATE translations SET value = 'spoofed' WHERE lang = 'en' AND key = 'ui.things'")
        let spoofDir = dir.url.appendingPathComponent("spoof")
        try FileManager.default.createDirectory(at: spoofDir, withIntermediateDirectories: true)
        let w = try DiffWriter(directory: spoofDir, kind: .share, authorUser: user1, authorSite: try db2.siteID(), expectedRows: 1)
        let def = try #require(try TableDefinition.read(table: "translations", from: Connection(path: u2.db.path, mode: .readOnly)))
        try w.appendRows(from: Connection(path: u2.db.path, mode: .readOnly), table: def, filter: "lang = 'en' AND key = 'ui.things'",
                         clock: Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: try db2.siteID()))
        let spoof = try w.finish(signingKey: key2)
        try await u2.remote.upload(file: spoof, key: inbound1 + spoof.lastPathComponent, ifAbsent: true)

        // And a genuine share from user2, signed by user2 (as `rtsync share` does).
        let genuine = try #require(try db2.writeShare(table: "translations", filter: "lang = 'de'", to: user1, permission: .readOnly,
                                                      directory: dir.url.appendingPathComponent("genuine"), signingKey: key2))
        let signed = URL(fileURLWithPath: genuine.file)
        try await u2.remote.upload(file: signed, key: inbound1 + signed.lastPathComponent, ifAbsent: true)

        var syncer = Syncer(home: u1.home, remote: u1.remote, retry: ltShortRetry, signingKey: try keys1.signingKey(), trustedKeys: try keys1.trustedKeys())
        syncer.keyUsers = try keys1.trustedIdentities(ownUser: user1)
        let report = try await syncer.sync()
        let rejected = report.applied.filter { $0.status == .rejected }
        #expect(rejected.count == 1)
        #expect(rejected.first?.reason?.contains("claims to be from user") == true, "\(report.applied)")
        #expect(report.applied.contains { $0.status == .applied && $0.diffID == DiffFile.diffID(fromFileName: signed.lastPathComponent)?.string })
        #expect(try ltScalar(u1.db, "SELECT value FROM translations WHERE lang = 'en' AND key = 'ui.things'")?.string != "spoofed")
    }

    @Test func deviceKey_isCreatedOwnerOnly_andStable() throws {
        let dir = try TemporaryDirectory()
        let keys = DeviceKeys(home: ltHome(dir, "k"))
        let first = try keys.publicKeyHex()
        #expect(try keys.publicKeyHex() == first)
        let attrs = try FileManager.default.attributesOfItem(atPath: ltHome(dir, "k").keys.appendingPathComponent("device.ed25519").path)
        #expect((attrs[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(throws: LifecycleError.self) { try keys.trust(publicKeyHex: "not-hex", label: "bad") }
    }

    @Test(arguments: bucketKinds)
    func share_readOnly_recipientGetsRows_andWriteBackIsRefusedAndLogged(_ kind: String) async throws {
        let dir = try TemporaryDirectory()
        let (u1, u2) = try await twoUsers(dir, try await bucket(kind, dir))
        try u1.execute("UPDATE translations SET value = 'Dinge (geteilt)' WHERE lang = 'de' AND key = 'ui.things'")
        let db1 = try SyncDatabase(path: u1.db.path)
        let share = try #require(try db1.writeShare(table: "translations", filter: "lang = 'de'", to: try user(u2), permission: .readOnly,
                                                    directory: dir.url.appendingPathComponent("out1")))
        #expect(share.rows == 2)
        try await u1.remote.upload(file: URL(fileURLWithPath: share.file), key: Syncer.inboundPrefix(user: try user(u2)) + URL(fileURLWithPath: share.file).lastPathComponent, ifAbsent: true)

        let r2 = try await u2.sync()
        #expect(r2.ok, "\(r2.phases)")
        #expect(try ltScalar(u2.db, "SELECT value FROM translations WHERE lang = 'de' AND key = 'ui.things'")?.string == "Dinge (geteilt)")
        let inbox = try SyncDatabase(path: u2.db.path).inbound()
        let user1 = try user(u1)
        #expect(inbox.count == 1 && inbox[0].kind == "share" && inbox[0].fromUser == user1)

        // The recipient changes a shared row and sends it back.
        try u2.execute("UPDATE translations SET value = 'überschrieben' WHERE lang = 'de' AND key = 'ui.things'")
        let back = try #require(try SyncDatabase(path: u2.db.path).writeShare(table: "translations", filter: "lang = 'de'", to: try user(u1),
                                                                            permission: .readWrite, directory: dir.url.appendingPathComponent("out2")))
        try await u2.remote.upload(file: URL(fileURLWithPath: back.file), key: Syncer.inboundPrefix(user: try user(u1)) + URL(fileURLWithPath: back.file).lastPathComponent, ifAbsent: true)
        let r1 = try await u1.sync()
        #expect(r1.ok, "\(r1.phases)")
        #expect(try ltScalar(u1.db, "SELECT value FROM translations WHERE lang = 'de' AND key = 'ui.things'")?.string == "Dinge (geteilt)")
        let conflicts = try db1.conflicts()
        #expect(conflicts.contains { $0.reason.contains("read-only share") && $0.remoteValue == .text("überschrieben") && $0.winner == "local" })
    }

    @Test(arguments: bucketKinds)
    func request_isListedWithSender_andNeverMerged(_ kind: String) async throws {
        let dir = try TemporaryDirectory()
        let (u1, u2) = try await twoUsers(dir, try await bucket(kind, dir))
        let before = try ltAppTables(u1.db)
        let db2 = try SyncDatabase(path: u2.db.path)
        let file = try ShareRequest.write(from: try user(u2), site: try db2.siteID(), table: "things", filter: "brand = 'IKEA'", message: "may I see it?",
                                          directory: dir.url.appendingPathComponent("req"))
        try await u2.remote.upload(file: file, key: Syncer.inboundPrefix(user: try user(u1)) + file.lastPathComponent, ifAbsent: true)
        let r = try await u1.sync()
        #expect(r.ok, "\(r.phases)")
        #expect(try ltAppTables(u1.db) == before)
        #expect(try ltScalar(u1.db, "SELECT count(*) FROM sqlite_schema WHERE name = 'share_request'")?.int64 == 0)
        let items = try SyncDatabase(path: u1.db.path).inbound()
        #expect(items.count == 1)
        let user2 = try user(u2)
        #expect(items.first?.kind == "request" && items.first?.fromUser == user2)
        #expect(items.first?.summary.contains("may I see it?") == true)
        // A second sync does not fetch it again.
        let again = try await u1.sync()
        #expect(again.downloaded.isEmpty)
    }

    @Test func compact_prunesDiffsAllDevicesApplied_keepsOthers_andNewDeviceStartsFromSnapshot() async throws {
        let dir = try TemporaryDirectory()
        let bucket = LTBucket.local(dir)
        let devices = try await LTSyncScenarios.makeDevices(dir, bucket)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        try a.insertThing("cmp-a", title: "from A")
        try b.insertThing("cmp-b", title: "from B")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let inbound = Syncer.inboundPrefix(user: try user(a))
        let beforeCount = try await a.remote.list(prefix: inbound).count
        #expect(beforeCount >= 2)

        // C is behind on one new diff from A: compaction must keep that one.
        try a.insertThing("cmp-late", title: "not yet on C")
        _ = try await a.sync()
        _ = try await b.sync()
        let report = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        #expect(report.devices.count == 3)
        #expect(report.pruned.count == beforeCount)
        #expect(report.kept == 1)
        let remaining = try await a.remote.list(prefix: inbound).map(\.key)
        #expect(remaining.count == 1)

        // A new device D starts from the snapshot plus what is left, and ends identical.
        let home = ltHome(dir, "D")
        let d = LTDevice(name: "D", home: home, remote: try bucket.open())
        let initResult = try await InitChain(home: home, remote: d.remote, joinUser: try user(a), retry: ltShortRetry).run()
        #expect(initResult.source == .bucket)
        #expect(try await d.sync().ok)
        #expect(try await c.sync().ok)
        try LTSyncScenarios.expectIdentical([a, b, c, d])
        #expect(try d.thingTitle("cmp-late") == "not yet on C")
    }
}

@Suite("sync: crash leftovers")
struct SyncCrashLeftoverTests {
    @Test func orphanDiffInOutbox_fromExportThatNeverCommitted_isDiscarded_andChangesSentOnce() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, .local(dir))
        let (a, b) = (devices[0], devices[1])
        try a.insertThing("crash-1", title: "made before the crash")
        // An export that wrote its file but crashed before committing: keep the file, roll the database back
        // to its state before the export (the change is pending again and the diff id is not recorded).
        let snapshot = dir.file("before-export.sqlite")
        do {
            let live = try Connection(path: a.db.path), copy = try Connection(path: snapshot.path)
            _ = try Backup(from: live, to: copy).step()
        }
        let orphan = try #require(try SyncDatabase(path: a.db.path).exportChanges(to: dir.url.appendingPathComponent("scratch")))
        do {
            let live = try Connection(path: a.db.path), copy = try Connection(path: snapshot.path, mode: .readOnly)
            _ = try Backup(from: copy, to: live).step()
        }
        #expect(try SyncDatabase(path: a.db.path).pendingChangeCount() > 0)
        try FileManager.default.moveItem(atPath: orphan.file, toPath: a.home.outbox.appendingPathComponent(URL(fileURLWithPath: orphan.file).lastPathComponent).path)

        let report = try await a.sync()
        #expect(report.ok, "\(report.phases)")
        let inbound = try await a.remote.list(prefix: Syncer.inboundPrefix(user: try a.home.loadSettings().userID)).map(\.key)
        #expect(!inbound.contains { $0.hasSuffix(orphan.diffID + ".sqlite") }, "the orphan was not uploaded")
        #expect(try await b.sync().ok)
        #expect(try b.thingTitle("crash-1") == "made before the crash")
    }
}

@Suite("sync: automatic compaction")
struct AutomaticCompactionTests {
    @Test func syncPastCompactThreshold_compactsByItself_andPrunesWhatEveryDeviceApplied() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, .local(dir))
        for d in devices { try ltEditSettings(d.home) { $0.compactThreshold = 3 } }
        for (n, d) in devices.enumerated() { try d.insertThing("auto-\(n)", title: "round one") }
        // Once a sync sees as many inbound diffs as the threshold it compacts by itself; a second round lets
        // every device publish a cursor covering everything, so what all have applied gets pruned.
        let reports = try await LTSyncScenarios.rounds(devices, 2)
        let compactions = reports.flatMap(\.phases).filter { $0.name == "compact" }
        #expect(!compactions.isEmpty, "some sync compacted: \(reports.map(\.phases))")
        let allOK = compactions.allSatisfy { $0.ok }
        #expect(allOK, "\(compactions)")
        let inbound = try await devices[0].remote.list(prefix: Syncer.inboundPrefix(user: try devices[0].home.loadSettings().userID))
        #expect(inbound.count < 3, "pruned: \(inbound.map(\.key))")
        try LTSyncScenarios.expectIdentical(devices)
    }
}
