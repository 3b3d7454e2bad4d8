import BucketClient
import BucketSync
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Issue #21 through the built binary: with encryption on, a full two-device sync (diffs, backups, a compaction
/// snapshot, media) leaves no plaintext in the bucket, the second device (key imported at init, passphrase-protected)
/// converges, and a device holding another key fails clearly and changes nothing.
@Suite("client-side encryption CLI", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct EncryptionCLITests {
    /// Every object's bytes in the bucket, by key.
    func objects(_ bucket: String, environment: [String: String]) async throws -> [String: Data] {
        let store = try makeObjectStore(urlString: bucket, environment: environment)
        var out: [String: Data] = [:]
        for info in try await store.listAll(prefix: "") { out[info.key] = try await store.get(key: info.key) }
        return out
    }

    func run(_ args: [String], _ env: [String: String]) async throws -> CommandResult {
        try await ltRTSync(args, environment: env)
    }

    func scenario(bucket: String, environment env: [String: String]) async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B"), c = dir.url.appendingPathComponent("C")

        // Device A: premium, encryption on for everything.
        let initA = try await run(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"], env)
        try #require(initA.status == 0, "\(initA.stderr)")
        let on = try await run(["keys", "encrypt", "all", "--home", a.path], env)
        try #require(on.status == 0, "\(on.stderr)")
        let user = try RTSyncHome(root: a).loadSettings().userID

        // The corpus: a row value and media bytes that must never appear in the bucket.
        let secret = "ENC-SECRET-\(UUID().uuidString)"
        let id = "2siEySuKO1wK4XiJHWQ0YxhLx\(Int.random(in: 10...99))"
        try SyncDatabase(path: RTSyncHome(root: a).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES (?, (SELECT account_id FROM owners LIMIT 1), ?)", [.text(id), .text(secret)])
        let recording = Data((0..<200_000).map { _ in UInt8.random(in: 0...255) })
        let image = Data((0..<5_000).map { _ in UInt8.random(in: 0...255) })
        for (path, bytes) in [("recordings/take.m4a", recording), ("images/photo.jpg", image)] {
            let url = a.appendingPathComponent("documents/" + path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try bytes.write(to: url)
        }
        let pushed = try await run(["sync", "--home", a.path, "--media"], env)
        try #require(pushed.status == 0, "\(pushed.stdout) \(pushed.stderr)")
        let backup = try await run(["backup", "create", "--upload", "--home", a.path], env)
        try #require(backup.status == 0, "\(backup.stdout) \(backup.stderr)")
        let compact = try await run(["compact", "--home", a.path], env)
        try #require(compact.status == 0, "\(compact.stdout) \(compact.stderr)")

        // Device B joins with the passphrase-protected key file.
        let passphrase = dir.url.appendingPathComponent("pass.txt")
        try Data("tr0ub4dor & 3\n".utf8).write(to: passphrase)
        let keyFile = dir.url.appendingPathComponent("user.key")
        let exported = try await run(["keys", "export", keyFile.path, "--passphrase-file", passphrase.path, "--home", a.path], env)
        try #require(exported.status == 0, "\(exported.stderr)")
        let joined = try await run(["init", "--home", b.path, "--bucket", bucket, "--tier", "premium", "--user", user,
                                    "--key-file", keyFile.path, "--passphrase-file", passphrase.path], env)
        try #require(joined.status == 0, "\(joined.stdout) \(joined.stderr)")
        #expect(try RTSyncHome(root: b).loadSettings().encryption == ["inbound", "backups", "recordings", "images"])
        let pulled = try await run(["sync", "--home", b.path, "--media"], env)
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try ltScalar(RTSyncHome(root: b).database, "SELECT title FROM things WHERE id = ?", [.text(id)])?.string == secret)
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/recordings/take.m4a")) == recording)
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/images/photo.jpg")) == image)

        // B edits, A pulls: both converge.
        try SyncDatabase(path: RTSyncHome(root: b).database.path).execute("UPDATE things SET title = ? WHERE id = ?", [.text(secret + "-B"), .text(id)])
        #expect(try await run(["sync", "--home", b.path], env).status == 0)
        let back = try await run(["sync", "--home", a.path], env)
        #expect(back.status == 0, "\(back.stdout) \(back.stderr)")
        #expect(try ltAppTables(RTSyncHome(root: a).database) == ltAppTables(RTSyncHome(root: b).database))

        // The bucket: every object of the encrypted kinds is ciphertext, and no object holds the corpus.
        let all = try await objects(bucket, environment: env)
        let encryptedKeys = all.keys.filter { k in ["inbound", "backups", "recordings", "images"].contains { k.hasPrefix("\(user)/\($0)/") } }
        #expect(encryptedKeys.contains { $0.hasPrefix("\(user)/inbound/") })
        #expect(encryptedKeys.contains { $0.hasPrefix("\(user)/backups/") })
        #expect(encryptedKeys.contains { $0.hasPrefix("\(user)/recordings/") })
        #expect(encryptedKeys.contains { $0.hasPrefix("\(user)/images/") })
        for key in encryptedKeys { #expect(all[key]!.prefix(8) == Data(EncryptionFormat.magic), "\(key) is not encrypted") }
        let needles = [Data(secret.utf8), recording.subdata(in: 1000..<1064), recording.subdata(in: 150_000..<150_064), image.subdata(in: 10..<74)]
        for (key, bytes) in all {
            for needle in needles { #expect(bytes.range(of: needle) == nil, "plaintext found in \(key)") }
        }

        // Device C: joined properly, then holds another key of its own. Its sync fails naming the key; nothing changes.
        let joinedC = try await run(["init", "--home", c.path, "--bucket", bucket, "--tier", "premium", "--user", user,
                                     "--key-file", keyFile.path, "--passphrase-file", passphrase.path], env)
        try #require(joinedC.status == 0, "\(joinedC.stderr)")
        try ContentKeyring.generate().save(to: RTSyncHome(root: c).contentKeysFile)
        try SyncDatabase(path: RTSyncHome(root: a).database.path).execute("UPDATE things SET title = ? WHERE id = ?", [.text(secret + "-A2"), .text(id)])
        #expect(try await run(["sync", "--home", a.path], env).status == 0)
        let beforeC = try ltAppTables(RTSyncHome(root: c).database)
        let wrong = try await run(["sync", "--home", c.path], env)
        #expect(wrong.status != 0)
        #expect((wrong.stdout + wrong.stderr).contains("which this device does not hold"), "\(wrong.stdout) \(wrong.stderr)")
        #expect(try ltAppTables(RTSyncHome(root: c).database) == beforeC)
    }

    @Test func twoDevices_localFolder_encryptedBucketHoldsNoPlaintext_devicesConverge_wrongKeyChangesNothing() async throws {
        let dir = try TemporaryDirectory()
        try await scenario(bucket: dir.url.appendingPathComponent("bucket").path, environment: [:])
    }

    @Test func twoDevices_loopbackS3_encryptedBucketHoldsNoPlaintext_devicesConverge_wrongKeyChangesNothing() async throws {
        if LTMoto.skipRequested { return }
        let moto = try await LTMoto.shared.value
        try await scenario(bucket: moto.freshBucketURL(), environment: moto.environment)
    }

    @Test func encryptOn_freeTier_isRefusedClearly() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.url.appendingPathComponent("H")
        #expect(try await ltRTSync(["init", "--home", home.path]).status == 0)
        let r = try await ltRTSync(["keys", "encrypt", "all", "--home", home.path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("error: client-side encryption is not available on the free tier"), "\(r.stderr)")
        #expect(r.stderr.contains("hint:"))
        #expect(try RTSyncHome(root: home).loadSettings().encryption.isEmpty)
    }

    @Test func keysDecrypt_rawEncryptedDiff_givesADiffThatInspects() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A")
        let bucket = dir.url.appendingPathComponent("bucket").path
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", a.path]).status == 0)
        try SyncDatabase(path: RTSyncHome(root: a).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES ('2siEySuKO1wK4XiJHWQ0YxhLx77', (SELECT account_id FROM owners LIMIT 1), 'inspect me')")
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        let store = try makeObjectStore(urlString: bucket)
        let diffKey = try #require(try await store.listAll(prefix: "\(user)/inbound/").first?.key)
        let raw = dir.url.appendingPathComponent("raw.sqlite")
        try await store.get(key: diffKey).write(to: raw)
        let refused = try await ltRTSync(["diff", "inspect", raw.path])
        #expect(refused.status != 0)
        let plain = dir.url.appendingPathComponent("plain.sqlite")
        let decrypted = try await ltRTSync(["keys", "decrypt", raw.path, plain.path, "--home", a.path])
        #expect(decrypted.status == 0, "\(decrypted.stderr)")
        let inspected = try await ltRTSync(["diff", "inspect", plain.path])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        #expect(inspected.stdout.contains("things"), "\(inspected.stdout)")
        // A tampered copy is refused naming the file, and nothing is written.
        var bytes = try Data(contentsOf: raw)
        bytes[bytes.count - 20] ^= 1
        try bytes.write(to: raw)
        let tampered = dir.url.appendingPathComponent("tampered.sqlite")
        let bad = try await ltRTSync(["keys", "decrypt", raw.path, tampered.path, "--home", a.path])
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("failed authentication") && bad.stderr.contains(raw.path), "\(bad.stderr)")
        #expect(!FileManager.default.fileExists(atPath: tampered.path))
    }

    /// Each attack on an encrypted diff in the bucket: the receiving device's sync fails naming the object and what is
    /// wrong, applies nothing, and keeps the ciphertext in quarantine; once the object is sound again it applies.
    @Test func tamperedTruncatedSwappedDowngradedDiff_isRejectedNamingIt_nothingApplied_evidenceQuarantined() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket")
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "inbound,backups", "--home", a.path]).status == 0)
        let keyFile = dir.url.appendingPathComponent("k.json")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        let joined = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--key-file", keyFile.path])
        try #require(joined.status == 0, "\(joined.stderr)")
        try #require(try await ltRTSync(["sync", "--home", b.path]).status == 0)

        // Two new diffs from A: X (attacked) and Y (a donor for swapped chunks).
        let inbound = bucket.appendingPathComponent("\(user)/inbound")
        let before = Set((try? FileManager.default.contentsOfDirectory(atPath: inbound.path)) ?? [])
        try SyncDatabase(path: RTSyncHome(root: a).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES ('2siEySuKO1wK4XiJHWQ0YxhLx55', (SELECT account_id FROM owners LIMIT 1), ?)",
            [.text(String((0..<240_000).map { _ in "0123456789abcdefghijklmnopqrstuvwxyz".randomElement()! }))])  // diffs travel compressed: text that does not compress
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        let xName = try #require(Set(try FileManager.default.contentsOfDirectory(atPath: inbound.path)).subtracting(before).sorted().last)
        let x = inbound.appendingPathComponent(xName)
        let original = try Data(contentsOf: x)
        let chunk = EncryptionFormat.chunkSize + 16, h = EncryptionFormat.headerSize
        try #require(original.count > h + 2 * chunk, "the diff must span several chunks")
        let plainDiff = dir.url.appendingPathComponent("plain.sqlite")
        try #require(try await ltRTSync(["keys", "decrypt", x.path, plainDiff.path, "--home", a.path]).status == 0)
        let other = EncryptionFormat.encrypt(try Data(contentsOf: plainDiff), keyring: try #require(try RTSyncHome(root: a).contentKeyring()))

        var flipped = original; flipped[h + 100] ^= 1
        var reordered = original.prefix(h); reordered.append(original.subdata(in: h + chunk..<h + 2 * chunk))
        reordered.append(original.subdata(in: h..<h + chunk)); reordered.append(original.subdata(in: h + 2 * chunk..<original.count))
        var swapped = original.prefix(h + chunk); swapped.append(other.subdata(in: h + chunk..<other.count))
        let cases: [(String, Data, String)] = [
            ("tampered", flipped, "failed authentication at chunk 0"),
            ("truncated", original.prefix(h + 2 * chunk), "truncated"),
            ("reordered", Data(reordered), "failed authentication at chunk 0"),
            ("swapped", Data(swapped), "failed authentication at chunk 1"),
            ("downgraded", try Data(contentsOf: plainDiff), "not encrypted"),
        ]
        let key = "\(user)/inbound/\(xName)"
        let evidence = RTSyncHome(root: b).quarantine.appendingPathComponent(xName + ".encrypted-rejected")
        for (name, bytes, message) in cases {
            try bytes.write(to: x)
            let tablesBefore = try ltAppTables(RTSyncHome(root: b).database)
            let r = try await ltRTSync(["sync", "--home", b.path])
            #expect(r.status == 1, "\(name): \(r.stdout)")
            #expect((r.stdout + r.stderr).contains(message) && (r.stdout + r.stderr).contains(key), "\(name): \(r.stdout) \(r.stderr)")
            #expect(try ltAppTables(RTSyncHome(root: b).database) == tablesBefore, "\(name) changed the database")
            #expect(!FileManager.default.fileExists(atPath: RTSyncHome(root: b).inbox.appendingPathComponent(xName).path), "\(name) reached the inbox")
            #expect(try Data(contentsOf: evidence) == bytes, "\(name): the quarantine keeps what was fetched")
        }
        try original.write(to: x)
        let healed = try await ltRTSync(["sync", "--home", b.path])
        #expect(healed.status == 0, "\(healed.stdout) \(healed.stderr)")
        #expect(try ltScalar(RTSyncHome(root: b).database, "SELECT count(*) FROM things WHERE id = '2siEySuKO1wK4XiJHWQ0YxhLx55'")?.int64 == 1)
    }

    /// Another user cannot encrypt to this user's key, so a share arrives as plaintext in an encrypted inbound: it is
    /// accepted as the share diff it is (author another user), while this user's own plaintext diffs stay refused.
    @Test func plaintextShareFromAnotherUser_intoEncryptedInbound_isReceived() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket").path
        for home in [h1, h2] { try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket, "--tier", "premium"]).status == 0) }
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", h2.path]).status == 0)
        let user1 = try RTSyncHome(root: h1).loadSettings().userID, user2 = try RTSyncHome(root: h2).loadSettings().userID
        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL"])
        try #require(shared.status == 0, "\(shared.stderr)")
        let synced = try await ltRTSync(["sync", "--home", h2.path])
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        let listed = try await ltRTSync(["inbound", "list", "--home", h2.path, "--json"])
        let items = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(items.count == 1 && items.first?["kind"] as? String == "share" && items.first?["fromUser"] as? String == user1)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: RTSyncHome(root: h2).quarantine.path)) ?? []).isEmpty)
    }

    /// A device of the user that has no key (encryption off there) meets encrypted diffs: its sync fails naming the
    /// object, applies and quarantines nothing; after importing the key file, the next sync applies them.
    @Test func deviceWithoutTheKey_refusesEncryptedDiffs_untilItImportsTheKey() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket").path
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        try #require(try await ltRTSync(["init", "--home", b.path, "--bucket", bucket, "--tier", "premium", "--user", user]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", a.path]).status == 0)
        try SyncDatabase(path: RTSyncHome(root: a).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES ('2siEySuKO1wK4XiJHWQ0YxhLx66', (SELECT account_id FROM owners LIMIT 1), 'after encryption')")
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)

        let before = try ltAppTables(RTSyncHome(root: b).database)
        let refused = try await ltRTSync(["sync", "--home", b.path])
        #expect(refused.status == 1)
        #expect((refused.stdout + refused.stderr).contains("is encrypted but this device does not decrypt its kind"), "\(refused.stdout) \(refused.stderr)")
        #expect(try ltAppTables(RTSyncHome(root: b).database) == before)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: RTSyncHome(root: b).quarantine.path)) ?? []).isEmpty)

        let keyFile = dir.url.appendingPathComponent("k.json")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", a.path]).status == 0)
        let imported = try await ltRTSync(["keys", "import", keyFile.path, "--home", b.path])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try RTSyncHome(root: b).loadSettings().encryption == ["inbound"])
        let synced = try await ltRTSync(["sync", "--home", b.path])
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        #expect(try ltScalar(RTSyncHome(root: b).database, "SELECT title FROM things WHERE id = '2siEySuKO1wK4XiJHWQ0YxhLx66'")?.string == "after encryption")
    }

    /// Encryption turned on before the home has a user: sync refuses (it would not know what to encrypt) instead of
    /// uploading plaintext; after `init` it syncs, encrypted.
    @Test func encryptionOnBeforeInit_syncRefusesUntilInit_thenEncrypts() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.url.appendingPathComponent("H")
        let bucket = dir.url.appendingPathComponent("bucket")
        var settings = RTSyncSettings()
        settings.tier = .premium
        settings.bucket = bucket.path
        try RTSyncHome(root: home).saveSettings(settings)
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", home.path]).status == 0)
        let refused = try await ltRTSync(["sync", "--home", home.path])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("encryption is on but this home has no user yet"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: bucket.path) || (FileManager.default.enumerator(atPath: bucket.path)?.allObjects.isEmpty ?? true))
        let initialized = try await ltRTSync(["init", "--home", home.path])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        try SyncDatabase(path: RTSyncHome(root: home).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES ('2siEySuKO1wK4XiJHWQ0YxhLx44', (SELECT account_id FROM owners LIMIT 1), 'x')")
        let synced = try await ltRTSync(["sync", "--home", home.path])
        #expect(synced.status == 0, "\(synced.stderr)")
        let user = try RTSyncHome(root: home).loadSettings().userID
        let inbound = bucket.appendingPathComponent("\(user)/inbound")
        let names = try FileManager.default.contentsOfDirectory(atPath: inbound.path).filter { $0.hasSuffix(".sqlite") }
        #expect(!names.isEmpty)
        for name in names { #expect(try Data(contentsOf: inbound.appendingPathComponent(name)).prefix(8) == Data(EncryptionFormat.magic)) }
    }

    /// Deleted encrypted media moves to the trash as ciphertext (copied inside the bucket) and `media restore` puts it
    /// back; another device then pulls the plaintext.
    @Test func encryptedMedia_deletedToTrashAndRestored_staysEncrypted_andPullsWhole() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket")
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "recordings", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        let file = a.appendingPathComponent("documents/recordings/memo.m4a")
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        let bytes = Data((0..<90_000).map { _ in UInt8.random(in: 0...255) })
        try bytes.write(to: file)
        try #require(try await ltRTSync(["sync", "--home", a.path, "--media"]).status == 0)
        try FileManager.default.removeItem(at: file)
        let deleted = try await ltRTSync(["sync", "--home", a.path, "--media", "--delete"])
        #expect(deleted.status == 0, "\(deleted.stdout) \(deleted.stderr)")
        #expect(!FileManager.default.fileExists(atPath: bucket.appendingPathComponent("\(user)/recordings/memo.m4a").path))
        let trashed = (FileManager.default.enumerator(atPath: bucket.appendingPathComponent("\(user)/trash").path)?.allObjects as? [String] ?? [])
            .filter { $0.hasSuffix("memo.m4a") }
        try #require(trashed.count == 1, "trash: \(trashed)")
        #expect(try Data(contentsOf: bucket.appendingPathComponent("\(user)/trash/\(trashed[0])")).prefix(8) == Data(EncryptionFormat.magic))

        let restored = try await ltRTSync(["media", "restore", "recordings/memo.m4a", "--home", a.path])
        #expect(restored.status == 0, "\(restored.stdout) \(restored.stderr)")
        #expect(try Data(contentsOf: bucket.appendingPathComponent("\(user)/recordings/memo.m4a")).prefix(8) == Data(EncryptionFormat.magic))
        let keyFile = dir.url.appendingPathComponent("k.json")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--key-file", keyFile.path]).status == 0)
        let pulled = try await ltRTSync(["sync", "--home", b.path, "--media"])
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/recordings/memo.m4a")) == bytes)
    }

    /// With the recipient's share key recorded, a share travels encrypted to it and the recipient receives it; the
    /// share key cannot be used to slip a diff of the recipient's own devices in.
    @Test func shareToARecipientsShareKey_isEncryptedAndReceived_butOwnDiffsCannotComeThatWay() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2"), h2b = dir.url.appendingPathComponent("u2b")
        let bucket = dir.url.appendingPathComponent("bucket")
        for home in [h1, h2] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
            try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", home.path]).status == 0)
        }
        let user1 = try RTSyncHome(root: h1).loadSettings().userID, user2 = try RTSyncHome(root: h2).loadSettings().userID
        let shareKey = try await ltRTSync(["keys", "share-key", "--home", h2.path])
        try #require(shareKey.status == 0, "\(shareKey.stderr)")
        let hex = shareKey.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let added = try await ltRTSync(["keys", "add-recipient", user2, hex, "--home", h1.path])
        try #require(added.status == 0, "\(added.stderr)")
        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL"])
        try #require(shared.status == 0, "\(shared.stderr)")
        let inbound2 = bucket.appendingPathComponent("\(user2)/inbound")
        let objects = try FileManager.default.contentsOfDirectory(atPath: inbound2.path).filter { $0.hasSuffix(".sqlite") }
        try #require(objects.count == 1)
        let sharedBytes = try Data(contentsOf: inbound2.appendingPathComponent(objects[0]))
        #expect(EncryptionFormat.isSharedObject(sharedBytes))
        #expect(sharedBytes.range(of: Data("laptop.png".utf8)) == nil)
        let synced = try await ltRTSync(["sync", "--home", h2.path])
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        let listed = try await ltRTSync(["inbound", "list", "--home", h2.path, "--json"])
        let items = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(items.count == 1 && items.first?["kind"] as? String == "share" && items.first?["fromUser"] as? String == user1)

        // u2's second device; u2 writes a diff, which the test re-encrypts to u2's share key.
        let keyFile = dir.url.appendingPathComponent("u2.key")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", h2.path]).status == 0)
        try #require(try await ltRTSync(["init", "--home", h2b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user2, "--key-file", keyFile.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", h2b.path]).status == 0)
        let before = Set(try FileManager.default.contentsOfDirectory(atPath: inbound2.path))
        try SyncDatabase(path: RTSyncHome(root: h2).database.path).execute(
            "INSERT INTO things(id, account_id, title) VALUES ('2siEySuKO1wK4XiJHWQ0YxhLx33', (SELECT account_id FROM owners LIMIT 1), 'own')")
        try #require(try await ltRTSync(["sync", "--home", h2.path]).status == 0)
        let own = try #require(Set(try FileManager.default.contentsOfDirectory(atPath: inbound2.path)).subtracting(before).first)
        let ownURL = inbound2.appendingPathComponent(own)
        let original = try Data(contentsOf: ownURL)
        let plain = dir.url.appendingPathComponent("own.sqlite")
        try #require(try await ltRTSync(["keys", "decrypt", ownURL.path, plain.path, "--home", h2.path]).status == 0)
        let ring = try #require(try RTSyncHome(root: h2).contentKeyring())
        try EncryptionFormat.encrypt(try Data(contentsOf: plain), to: try #require(ring.shareKey).publicKey).write(to: ownURL)
        let tables = try ltAppTables(RTSyncHome(root: h2b).database)
        let refused = try await ltRTSync(["sync", "--home", h2b.path])
        #expect(refused.status == 1)
        #expect((refused.stdout + refused.stderr).contains("is not a share or request from another user"), "\(refused.stdout) \(refused.stderr)")
        #expect(try ltAppTables(RTSyncHome(root: h2b).database) == tables)
        try original.write(to: ownURL)
        #expect(try await ltRTSync(["sync", "--home", h2b.path]).status == 0)
        #expect(try ltScalar(RTSyncHome(root: h2b).database, "SELECT title FROM things WHERE id = '2siEySuKO1wK4XiJHWQ0YxhLx33'")?.string == "own")
    }

    /// `share --with-media` to a recipient whose share key is recorded: the rows' image goes up encrypted to that key
    /// (no plaintext in the bucket), and the recipient's media sync installs the plaintext; a third user's media sync
    /// is not involved (it is in the recipient's folder), and the sender's own media stays under its content key.
    @Test func shareWithMedia_toARecipientsShareKey_encryptsTheMediaToIt_andTheRecipientReadsIt() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket")
        for home in [h1, h2] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        }
        try #require(try await ltRTSync(["keys", "encrypt", "all", "--home", h1.path]).status == 0)
        // The recipient encrypts diffs only: shared media still opens there.
        try #require(try await ltRTSync(["keys", "encrypt", "inbound", "--home", h2.path]).status == 0)
        let user2 = try RTSyncHome(root: h2).loadSettings().userID
        let shareKey = try await ltRTSync(["keys", "share-key", "--home", h2.path])
        try #require(shareKey.status == 0, "\(shareKey.stderr)")
        try #require(try await ltRTSync(["keys", "add-recipient", user2, shareKey.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "--home", h1.path]).status == 0)
        let image = h1.appendingPathComponent("documents/images/laptop.png")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        let bytes = Data("png bytes only user2 may read ".utf8) + Data((0..<70_000).map { _ in UInt8.random(in: 0...255) })
        try bytes.write(to: image)

        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL", "--with-media"])
        try #require(shared.status == 0, "\(shared.stderr)")
        let uploaded = try Data(contentsOf: bucket.appendingPathComponent("\(user2)/images/laptop.png"))
        #expect(EncryptionFormat.isSharedObject(uploaded))
        #expect(uploaded.range(of: Data("png bytes only".utf8)) == nil)

        let pulled = try await ltRTSync(["media", "sync", "--home", h2.path, "--pull"])
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try Data(contentsOf: h2.appendingPathComponent("documents/images/laptop.png")) == bytes)
        // The next two-way media sync is idle: the shared object is not taken for a changed file and sent back.
        let again = try await ltRTSync(["media", "sync", "--home", h2.path])
        #expect(again.status == 0, "\(again.stdout) \(again.stderr)")
        #expect(try Data(contentsOf: bucket.appendingPathComponent("\(user2)/images/laptop.png")) == uploaded)
    }

    /// `keys encrypt all,names`: media names in the bucket are encrypted (no plaintext folder or file name under
    /// recordings/), a second device that joins with the key file (which carries the kinds) pulls the files under
    /// their names, and `names` without a media kind is refused.
    @Test func encryptedNames_throughTheCLI_hideMediaNames_andASecondDevicePullsThem() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket")
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
        let refused = try await ltRTSync(["keys", "encrypt", "inbound,names", "--home", a.path])
        #expect(refused.status == 1 && refused.stderr.contains("add recordings or images"), "\(refused.stderr)")
        try #require(try await ltRTSync(["keys", "encrypt", "all,names", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        let file = a.appendingPathComponent("documents/recordings/2025/memo one.m4a")
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        let bytes = Data((0..<50_000).map { _ in UInt8.random(in: 0...255) })
        try bytes.write(to: file)
        let pushed = try await ltRTSync(["sync", "--home", a.path, "--media"])
        #expect(pushed.status == 0, "\(pushed.stdout) \(pushed.stderr)")
        let stored = (FileManager.default.enumerator(atPath: bucket.appendingPathComponent("\(user)/recordings").path)?.allObjects as? [String] ?? [])
        #expect(stored.count == 2, "\(stored)")  // one folder, one file
        #expect(stored.allSatisfy { !$0.contains("2025") && !$0.contains("memo") && !$0.contains(".m4a") }, "\(stored)")

        let keyFile = dir.url.appendingPathComponent("k.json")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["init", "--home", b.path, "--bucket", bucket.path, "--tier", "premium", "--user", user, "--key-file", keyFile.path]).status == 0)
        let pulled = try await ltRTSync(["sync", "--home", b.path, "--media"])
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/recordings/2025/memo one.m4a")) == bytes)
    }

    /// `media fetch --decrypt-to`: the cache keeps the ciphertext, the plaintext of the asked range goes to the file;
    /// another home's keys fail clearly and write nothing.
    @Test func mediaFetchDecryptTo_writesThePlaintextRange_andCachesOnlyCiphertext() async throws {
        let dir = try TemporaryDirectory()
        let h = dir.url.appendingPathComponent("H"), other = dir.url.appendingPathComponent("O")
        for home in [h, other] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--tier", "premium"]).status == 0)
            try #require(try await ltRTSync(["keys", "create", "--home", home.path]).status == 0)
        }
        let ring = try #require(try RTSyncHome(root: h).contentKeyring())
        let plain = Data("recording bytes ".utf8) + Data((0..<200_000).map { _ in UInt8.random(in: 0...255) })
        let source = dir.url.appendingPathComponent("served.m4a")
        try EncryptionFormat.encrypt(plain, keyring: ring).write(to: source)
        let cache = dir.url.appendingPathComponent("cache"), out = dir.url.appendingPathComponent("out.bin")
        let r = try await ltRTSync(["media", "fetch", source.absoluteString, "--cache", cache.path, "--decrypt-to", out.path,
                                    "--home", h.path, "--range", "70000-70009"])
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(try Data(contentsOf: out) == plain.subdata(in: 70000..<70010))
        let whole = try await ltRTSync(["media", "fetch", source.absoluteString, "--cache", cache.path, "--decrypt-to", out.path, "--home", h.path])
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(try Data(contentsOf: out) == plain)
        for name in try FileManager.default.contentsOfDirectory(atPath: cache.path) {
            #expect(try Data(contentsOf: cache.appendingPathComponent(name)).range(of: Data("recording bytes".utf8)) == nil, "\(name)")
        }
        let wrong = dir.url.appendingPathComponent("wrong.bin")
        let refused = try await ltRTSync(["media", "fetch", source.absoluteString, "--cache", cache.path, "--decrypt-to", wrong.path, "--home", other.path])
        #expect(refused.status == 1 && refused.stderr.hasPrefix("error: object is encrypted with content key"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: wrong.path))
    }

    /// Joining with a key file that is not the user's: init fails naming an object the key does not open, and leaves
    /// the new home as it was (no database, no key, no settings change) instead of falling back to demo data.
    @Test func joiningWithTheWrongKeyFile_failsClearly_andChangesNothing() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B"), other = dir.url.appendingPathComponent("O")
        let bucket = dir.url.appendingPathComponent("bucket").path
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "all", "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", a.path]).status == 0)
        try #require(try await ltRTSync(["backup", "create", "--upload", "--home", a.path]).status == 0)
        let user = try RTSyncHome(root: a).loadSettings().userID
        // Another user's key file.
        try #require(try await ltRTSync(["init", "--home", other.path, "--tier", "premium"]).status == 0)
        try #require(try await ltRTSync(["keys", "encrypt", "all", "--home", other.path]).status == 0)
        let wrongKey = dir.url.appendingPathComponent("wrong.key")
        try #require(try await ltRTSync(["keys", "export", wrongKey.path, "--home", other.path]).status == 0)

        let r = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket, "--tier", "premium", "--user", user, "--key-file", wrongKey.path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("error: object is encrypted with content key"), "\(r.stderr)")
        #expect(r.stderr.contains("\(user)/backups/"), "\(r.stderr)")
        #expect(r.stderr.contains("nothing was changed"), "\(r.stderr)")
        let home = RTSyncHome(root: b)
        #expect(!FileManager.default.fileExists(atPath: home.database.path))
        #expect(!FileManager.default.fileExists(atPath: home.contentKeysFile.path))
        #expect((try? home.loadSettings().userID) ?? "" == "")

        // The right key file then joins.
        let keyFile = dir.url.appendingPathComponent("right.key")
        try #require(try await ltRTSync(["keys", "export", keyFile.path, "--home", a.path]).status == 0)
        let ok = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket, "--tier", "premium", "--user", user, "--key-file", keyFile.path])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(ok.stdout.contains("database ready from bucket"), "\(ok.stdout)")
    }
}
