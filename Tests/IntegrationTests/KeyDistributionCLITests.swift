import BucketClient
import BucketSync
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Issue #21, key distribution through the bucket: a rotated content key reaches the user's other devices sealed
/// under an older key (`<user>/keys/<id>.sealed`), and share keys are published (`<user>/keys/share-key.json`) and
/// taken on first use by senders, a changed one refused.
@Suite("key distribution through the bucket", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct KeyDistributionCLITests {
    func run(_ args: [String], _ env: [String: String]) async throws -> CommandResult {
        try await ltRTSync(args, environment: env)
    }

    func insert(_ home: URL, _ id: String, _ title: String) throws {
        try SyncDatabase(path: RTSyncHome(root: home).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES (?, (SELECT account_id FROM owners LIMIT 1), ?)", [.text(id), .text(title)])
    }

    func title(_ home: URL, _ id: String) throws -> String? {
        try ltScalar(RTSyncHome(root: home).database, "SELECT title FROM things WHERE id = ?", [.text(id)])?.string
    }

    func writeMedia(_ home: URL, _ path: String, _ bytes: Data) throws {
        let url = home.appendingPathComponent("documents/" + path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: url)
    }

    func store(_ bucket: String, _ env: [String: String]) throws -> any ObjectStore { try makeObjectStore(urlString: bucket, environment: env) }

    /// The request count `sync --json` reports.
    func syncRequests(_ home: URL, _ env: [String: String]) async throws -> Int {
        let r = try await run(["sync", "--home", home.path, "--json"], env)
        try #require(r.status == 0, "\(r.stdout) \(r.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        return try #require((json["report"] as? [String: Any])?["requests"] as? Int)
    }

    func rotationScenario(bucket: String, environment env: [String: String]) async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B"), c = dir.url.appendingPathComponent("C")
        try #require(try await run(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"], env).status == 0)
        try #require(try await run(["keys", "encrypt", "all", "--home", a.path], env).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        // The key file B and C join with: the first key only. Nothing is handed over by hand after this.
        let keyFile = dir.url.appendingPathComponent("first.key")
        try #require(try await run(["keys", "export", keyFile.path, "--home", a.path], env).status == 0)
        try insert(a, "2siEySuKO1wK4XiJHWQ0YxhLx01", "before rotation")
        try #require(try await run(["sync", "--home", a.path], env).status == 0)
        let joined = try await run(["init", "--home", b.path, "--bucket", bucket, "--tier", "premium", "--user", user, "--key-file", keyFile.path], env)
        try #require(joined.status == 0, "\(joined.stdout) \(joined.stderr)")
        try #require(try await run(["sync", "--home", b.path], env).status == 0)
        #expect(try title(b, "2siEySuKO1wK4XiJHWQ0YxhLx01") == "before rotation")

        // A rotates: the new key goes up sealed, never in the clear.
        let rotated = try await run(["keys", "rotate", "--home", a.path], env)
        try #require(rotated.status == 0, "\(rotated.stderr)")
        #expect(rotated.stdout.contains("published sealed"), "\(rotated.stdout)")
        let ringA = try #require(try RTSyncHome(root: a).contentKeyring())
        let k2 = ringA.currentID
        let sealed = try await store(bucket, env).get(key: SealedContentKey.objectKey(user: user, keyID: k2))
        let rawK2 = try #require(ringA.key(id: k2)).key.withUnsafeBytes { Data($0) }
        #expect(sealed.range(of: rawK2) == nil && sealed.range(of: Data(rawK2.base64EncodedString().utf8)) == nil, "the key is in the clear")

        // A writes a diff and media with the new key; B, which never imported anything since, reads both.
        try insert(a, "2siEySuKO1wK4XiJHWQ0YxhLx02", "after rotation")
        let media = Data((0..<90_000).map { _ in UInt8.random(in: 0...255) })
        try writeMedia(a, "recordings/after.m4a", media)
        let pushed = try await run(["sync", "--home", a.path, "--media"], env)
        try #require(pushed.status == 0, "\(pushed.stdout) \(pushed.stderr)")
        // The key went up once: A's next sync is idle again, one LIST.
        #expect(try await syncRequests(a, env) == 1)
        let pulled = try await run(["sync", "--home", b.path, "--media"], env)
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try title(b, "2siEySuKO1wK4XiJHWQ0YxhLx02") == "after rotation")
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/recordings/after.m4a")) == media)
        let ringB = try #require(try RTSyncHome(root: b).contentKeyring())
        #expect(ringB.key(id: k2) != nil && ringB.currentID == k2)
        // Learning the key cost nothing afterwards: the idle sync is still one LIST.
        #expect(try await syncRequests(b, env) == 1)

        // A rotates again while it cannot publish (the key file changed by hand, as when the bucket was unreachable):
        // its next upload publishes the key first. C joins with the first key only and follows the chain k3 -> k2 -> k1.
        var ring = ringA
        let k3 = ring.rotate().id
        try ring.save(to: RTSyncHome(root: a).contentKeysFile)
        try insert(a, "2siEySuKO1wK4XiJHWQ0YxhLx03", "after second rotation")
        try #require(try await run(["sync", "--home", a.path], env).status == 0)
        _ = try await store(bucket, env).head(key: SealedContentKey.objectKey(user: user, keyID: k3))
        let joinedC = try await run(["init", "--home", c.path, "--bucket", bucket, "--tier", "premium", "--user", user, "--key-file", keyFile.path], env)
        try #require(joinedC.status == 0, "\(joinedC.stdout) \(joinedC.stderr)")
        let pulledC = try await run(["sync", "--home", c.path], env)
        #expect(pulledC.status == 0, "\(pulledC.stdout) \(pulledC.stderr)")
        #expect(try title(c, "2siEySuKO1wK4XiJHWQ0YxhLx03") == "after second rotation")
        #expect(try RTSyncHome(root: c).contentKeyring()?.key(id: k3) != nil)
    }

    @Test func rotatedKey_localFolder_reachesTheOtherDevicesThroughTheBucket_idleSyncStaysOneList() async throws {
        let dir = try TemporaryDirectory()
        try await rotationScenario(bucket: dir.url.appendingPathComponent("bucket").path, environment: [:])
    }

    @Test func rotatedKey_loopbackS3_reachesTheOtherDevicesThroughTheBucket_idleSyncStaysOneList() async throws {
        if LTMoto.skipRequested { return }
        let moto = try await LTMoto.shared.value
        try await rotationScenario(bucket: moto.freshBucketURL(), environment: moto.environment)
    }

    /// A sealed key that fails authentication, or names another key, is refused naming the object; nothing is applied
    /// and the key is not kept. A missing one gives the error of a key nobody published.
    @Test func tamperedOrMissingSealedKey_isRefusedNamingTheObject_nothingApplied() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket")
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        let keyFile = dir.url.appendingPathComponent("k.json")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--key-file", keyFile.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", b.path]).status == 0)
        try #require(try await ltRTSync(["keys", "rotate", "--home", a.path]).status == 0)
        let k2 = try #require(try RTSyncHome(root: a).contentKeyring()).currentID
        try insert(a, "2siEySuKO1wK4XiJHWQ0YxhLx04", "needs k2")
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        let sealedURL = bucket.appendingPathComponent(SealedContentKey.objectKey(user: user, keyID: k2))
        let original = try Data(contentsOf: sealedURL)
        var doc = try JSONDecoder().decode(SealedContentKey.self, from: original)

        let before = try ltAppTables(RTSyncHome(root: b).database)
        func expectRefused(_ text: String) async throws {
            let r = try await ltRTSync(["sync", "--home", b.path])
            #expect(r.status == 1)
            #expect((r.stdout + r.stderr).contains(text), "\(r.stdout) \(r.stderr)")
            #expect((r.stdout + r.stderr).contains("\(user)/inbound/"), "the error names the object: \(r.stdout) \(r.stderr)")
            #expect(try ltAppTables(RTSyncHome(root: b).database) == before)
            #expect(try RTSyncHome(root: b).contentKeyring()?.key(id: k2) == nil)
        }
        // A flipped byte of the sealed key.
        var bytes = Data(base64Encoded: doc.sealed)!
        bytes[bytes.count - 1] ^= 1
        doc.sealed = bytes.base64EncodedString()
        try doc.encoded().write(to: sealedURL)
        try await expectRefused("its sealed copy in the bucket cannot be used")
        // Another key's sealed copy put under this key's name.
        var other = try JSONDecoder().decode(SealedContentKey.self, from: original)
        other.keyID = "00112233445566ff"
        try other.encoded().write(to: sealedURL)
        try await expectRefused("its sealed copy in the bucket cannot be used")
        // None published.
        try FileManager.default.removeItem(at: sealedURL)
        try await expectRefused("which this device does not hold")
        // The genuine one: taken.
        try original.write(to: sealedURL)
        let synced = try await ltRTSync(["sync", "--home", b.path])
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        #expect(try title(b, "2siEySuKO1wK4XiJHWQ0YxhLx04") == "needs k2")
    }

    /// After a key may have leaked, `keys rotate --no-publish` keeps the new key out of the bucket (a copy sealed under
    /// the leaked key would open for whoever holds it): no sealed copy goes up, not at the rotation, not at the next
    /// upload, not from a device that imported it; the other devices read it once the key is imported by hand, and a
    /// later rotation is sealed under it as usual.
    @Test func rotateNoPublish_neverPutsTheKeyInTheBucket_otherDevicesReadAfterImport() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket")
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        let first = dir.url.appendingPathComponent("first.key")
        try #require(try await ltRTSync(["keys", "export", first.path, "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--key-file", first.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", b.path]).status == 0)

        let rotated = try await ltRTSync(["keys", "rotate", "--no-publish", "--home", a.path])
        try #require(rotated.status == 0, "\(rotated.stderr)")
        #expect(!rotated.stdout.contains("published sealed"), "\(rotated.stdout)")
        let k2 = try #require(try RTSyncHome(root: a).contentKeyring()).currentID
        let sealedK2 = bucket.appendingPathComponent(SealedContentKey.objectKey(user: user, keyID: k2))
        try insert(a, "2siEySuKO1wK4XiJHWQ0YxhLx05", "after a leak")
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: sealedK2.path), "the new key went into the bucket")
        // B cannot read the new diff until the key is handed over, and changes nothing meanwhile.
        let refused = try await ltRTSync(["sync", "--home", b.path])
        #expect(refused.status == 1)
        #expect((refused.stdout + refused.stderr).contains("which this device does not hold"), "\(refused.stdout) \(refused.stderr)")
        #expect(try title(b, "2siEySuKO1wK4XiJHWQ0YxhLx05") == nil)
        let second = dir.url.appendingPathComponent("second.key")
        try #require(try await ltRTSync(["keys", "export", second.path, "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["keys", "import", second.path, "--home", b.path]).status == 0)
        let synced = try await ltRTSync(["sync", "--home", b.path])
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        #expect(try title(b, "2siEySuKO1wK4XiJHWQ0YxhLx05") == "after a leak")
        // B, which imported the key, does not publish it either when it uploads.
        try insert(b, "2siEySuKO1wK4XiJHWQ0YxhLx06", "from B")
        try #require(try await ltRTSync(["sync", "--home", b.path]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: sealedK2.path), "a device that imported the key published it")
        // A later ordinary rotation is sealed under the unpublished key, which the devices hold.
        try #require(try await ltRTSync(["keys", "rotate", "--home", a.path]).status == 0)
        let k3 = try #require(try RTSyncHome(root: a).contentKeyring()).currentID
        let sealedK3 = try JSONDecoder().decode(SealedContentKey.self, from: Data(contentsOf: bucket.appendingPathComponent(SealedContentKey.objectKey(user: user, keyID: k3))))
        #expect(sealedK3.wrappingKeyID == k2)
    }

    /// `keys export --to-bucket` seals the keys with a passphrase (never in the clear) and a new device joins with the
    /// passphrase alone; a wrong passphrase, a short one and a user without a backup each fail clearly, changing nothing.
    @Test func keyBackupInTheBucket_newDeviceJoinsWithThePassphraseAlone_wrongOneChangesNothing() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket")
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "all", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        try insert(a, "2siEySuKO1wK4XiJHWQ0YxhLx07", "joined by passphrase")
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        let short = dir.url.appendingPathComponent("short.txt"), good = dir.url.appendingPathComponent("good.txt"), wrong = dir.url.appendingPathComponent("wrong.txt")
        try Data("too short\n".utf8).write(to: short)
        try Data("correct horse battery staple\n".utf8).write(to: good)
        try Data("incorrect horse battery staple\n".utf8).write(to: wrong)
        let refusedShort = try await ltRTSync(["keys", "export", "--to-bucket", "--passphrase-file", short.path, "--home", a.path])
        #expect(refusedShort.status == 1 && refusedShort.stderr.contains("at least 12 characters"), "\(refusedShort.stderr)")
        let backupURL = bucket.appendingPathComponent(ObjectStoreRemote.keyBackupKey(user: user))
        #expect(!FileManager.default.fileExists(atPath: backupURL.path))

        // A user with no backup yet: clear error, nothing saved.
        let none = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--passphrase-file", good.path])
        #expect(none.status == 1 && none.stderr.contains("has no key backup in the bucket"), "\(none.stderr)")
        let exported = try await ltRTSync(["keys", "export", "--to-bucket", "--passphrase-file", good.path, "--home", a.path])
        try #require(exported.status == 0, "\(exported.stderr)")
        let sealed = try Data(contentsOf: backupURL)
        let raw = try #require(try RTSyncHome(root: a).contentKeyring()).current.key.withUnsafeBytes { Data($0) }
        #expect(ContentKeyring.isWrapped(sealed) && sealed.range(of: raw) == nil && sealed.range(of: Data(raw.base64EncodedString().utf8)) == nil)

        let refused = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--passphrase-file", wrong.path])
        #expect(refused.status == 1 && refused.stderr.contains("passphrase does not open"), "\(refused.stderr)")
        #expect(refused.stderr.contains(ObjectStoreRemote.keyBackupKey(user: user)), "the error names the object: \(refused.stderr)")
        #expect(try RTSyncHome(root: b).contentKeyring() == nil)
        #expect(!FileManager.default.fileExists(atPath: RTSyncHome(root: b).database.path))

        let joined = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--passphrase-file", good.path])
        try #require(joined.status == 0, "\(joined.stdout) \(joined.stderr)")
        let synced = try await ltRTSync(["sync", "--home", b.path])
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        #expect(try title(b, "2siEySuKO1wK4XiJHWQ0YxhLx07") == "joined by passphrase")
        #expect(try RTSyncHome(root: b).loadSettings().encryption == RTSyncHome(root: a).loadSettings().encryption)
    }

    func shareScenario(bucket: String, environment env: [String: String]) async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        for home in [h1, h2] {
            try #require(try await run(["init", "--home", home.path, "--bucket", bucket, "--tier", "premium"], env).status == 0)
            try #require(try await run(["keys", "encrypt", "inbound", "--home", home.path], env).status == 0)
        }
        let user1 = try RTSyncHome(root: h1).loadSettings().userID, user2 = try RTSyncHome(root: h2).loadSettings().userID
        // u2 published its share key when it turned encryption on; u1 records nothing by hand.
        let published = try await store(bucket, env).get(key: PublishedShareKey.objectKey(user: user2))
        let doc = try PublishedShareKey.decode(published, user: user2, object: "share-key.json")
        let shown = try await run(["keys", "share-key", "--home", h2.path, "--json"], env)
        let shownJSON = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: String])
        #expect(doc.shareKey == shownJSON["shareKey"] && doc.signatureIsValid)

        let shared = try await run(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL"], env)
        try #require(shared.status == 0, "\(shared.stderr)")
        #expect(shared.stderr.contains("recorded \(user2)'s share key \(shownJSON["fingerprint"]!)"), "\(shared.stderr)")
        let inbound = try await store(bucket, env).listAll(prefix: "\(user2)/inbound/")
        try #require(inbound.count == 1)
        #expect(EncryptionFormat.isSharedObject(try await store(bucket, env).get(key: inbound[0].key)))
        let synced = try await run(["sync", "--home", h2.path], env)
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        let listed = try await run(["inbound", "list", "--home", h2.path, "--json"], env)
        let items = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(items.count == 1 && items.first?["kind"] as? String == "share" && items.first?["fromUser"] as? String == user1)

        // Someone replaces the published key (the operator, say): the next share is refused and nothing is sent.
        let intruder = ContentKeyring.generate()
        let forged = PublishedShareKey.make(user: user2, shareKey: intruder.shareKey!.publicKey, encryptsNames: false, signingKey: nil)
        _ = try await store(bucket, env).put(key: PublishedShareKey.objectKey(user: user2), data: forged.encoded(), ifNoneMatch: false)
        let refused = try await run(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL"], env)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("is not the one recorded for them"), "\(refused.stderr)")
        #expect(refused.stderr.contains("hint:") && refused.stderr.contains("keys add-recipient"), "\(refused.stderr)")
        #expect(try await store(bucket, env).listAll(prefix: "\(user2)/inbound/").count == 1)
    }

    @Test func shareWithoutHandRecordedKey_localFolder_takesThePublishedKey_aReplacedOneIsRefused() async throws {
        let dir = try TemporaryDirectory()
        try await shareScenario(bucket: dir.url.appendingPathComponent("bucket").path, environment: [:])
    }

    @Test func shareWithoutHandRecordedKey_loopbackS3_takesThePublishedKey_aReplacedOneIsRefused() async throws {
        if LTMoto.skipRequested { return }
        let moto = try await LTMoto.shared.value
        try await shareScenario(bucket: moto.freshBucketURL(), environment: moto.environment)
    }

    /// A sender that trusts a device key of the recipient (`keys trust --user`) takes only a published share key that
    /// key signed.
    @Test func publishedShareKey_notSignedByTheTrustedDeviceKey_isRefused() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket")
        for home in [h1, h2] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
            try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", home.path]).status == 0)
        }
        let user2 = try RTSyncHome(root: h2).loadSettings().userID
        // u1 trusts a key that is not u2's device key.
        let stranger = Curve25519Hex.random()
        try #require(try await ltRTSync(["keys", "trust", stranger, "--user", user2, "--home", h1.path]).status == 0)
        let refused = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("not signed by the device key trusted for \(user2)"), "\(refused.stderr)")
        #expect(RTSyncHome(root: h1).shareRecipients()[user2] == nil)
        // Trusting u2's real device key: taken, as verified.
        let real = try await ltRTSync(["keys", "show", "--home", h2.path])
        try #require(try await ltRTSync(["keys", "trust", real.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "--user", user2, "--home", h1.path]).status == 0)
        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL"])
        #expect(shared.status == 0, "\(shared.stderr)")
        #expect(shared.stderr.contains("signed by the device key you trust"), "\(shared.stderr)")
    }
}

/// A random 32-byte key as 64 hex characters.
enum Curve25519Hex {
    static func random() -> String { (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined() }
}
