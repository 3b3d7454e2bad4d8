import Crypto
import Foundation
import Testing
@testable import BucketClient

/// The encrypted object format (``EncryptionFormat``), content keys, and ``EncryptingStore`` over the local folder and
/// the loopback S3 server.
@Suite struct EncryptionFormatTests {
    let keyring = ContentKeyring.generate()
    let chunk = EncryptionFormat.chunkSize

    func sealed(_ plain: Data) -> Data { EncryptionFormat.encrypt(plain, keyring: keyring) }

    func error(_ data: Data, keyring ring: ContentKeyring? = nil) -> EncryptionError? {
        do { _ = try EncryptionFormat.decrypt(data, keyring: ring ?? keyring, object: "u/inbound/x.sqlite"); return nil } catch {
            return error as? EncryptionError
        }
    }

    /// Chunk `i` of an encrypted object (header excluded).
    func chunkBytes(_ data: Data, _ i: Int) -> Data {
        let start = EncryptionFormat.headerSize + i * (chunk + 16)
        return data.subdata(in: start..<min(start + chunk + 16, data.count))
    }

    @Test func roundTrip_everySizeAroundChunkEdges_givesThePlaintextBack_andSizesMapBothWays() throws {
        for size in [0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 5] {
            let plain = randomBytes(size)
            let c = sealed(plain)
            #expect(Int64(c.count) == EncryptionFormat.ciphertextSize(plaintextSize: Int64(size)))
            #expect(EncryptionFormat.plaintextSize(ciphertextSize: Int64(c.count)) == Int64(size))
            #expect(try EncryptionFormat.decrypt(c, keyring: keyring, object: "o") == plain)
            if size >= 64 { #expect(c.range(of: plain.prefix(64)) == nil) }
        }
        // Sizes no encrypted object can have.
        #expect(EncryptionFormat.plaintextSize(ciphertextSize: 10) == nil)
        #expect(EncryptionFormat.plaintextSize(ciphertextSize: Int64(EncryptionFormat.headerSize + chunk + 16 + 3)) == nil)
    }

    @Test func sameInputTwice_encryptsDifferently() {
        let plain = randomBytes(1000)
        #expect(sealed(plain) != sealed(plain))
    }

    @Test func truncatedAtChunkBoundary_isReportedTruncated() {
        let c = sealed(randomBytes(3 * chunk))
        let cut = c.prefix(EncryptionFormat.headerSize + 2 * (chunk + 16))
        #expect(error(Data(cut)) == .truncated(object: "u/inbound/x.sqlite"))
        #expect(error(Data(c.prefix(EncryptionFormat.headerSize))) == .truncated(object: "u/inbound/x.sqlite"))
        #expect(error(Data(c.prefix(20))) == .truncated(object: "u/inbound/x.sqlite"))
    }

    @Test func truncatedInsideAChunk_failsAuthentication() {
        let c = sealed(randomBytes(2 * chunk))
        #expect(error(Data(c.prefix(c.count - 100))) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 1))
    }

    @Test func reorderedChunks_failAuthentication() {
        let c = sealed(randomBytes(3 * chunk))
        var swapped = c.prefix(EncryptionFormat.headerSize)
        swapped.append(chunkBytes(c, 1)); swapped.append(chunkBytes(c, 0)); swapped.append(chunkBytes(c, 2))
        #expect(error(Data(swapped)) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 0))
    }

    @Test func replayedChunk_failsAuthentication() {
        let c = sealed(randomBytes(3 * chunk))
        var replayed = c.prefix(EncryptionFormat.headerSize)
        replayed.append(chunkBytes(c, 0)); replayed.append(chunkBytes(c, 0)); replayed.append(chunkBytes(c, 2))
        #expect(error(Data(replayed)) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 1))
    }

    @Test func chunkSwappedInFromAnotherObjectWithTheSameKey_failsAuthentication() {
        let a = sealed(randomBytes(2 * chunk))
        let b = sealed(randomBytes(2 * chunk))
        var mixed = a.prefix(EncryptionFormat.headerSize)
        mixed.append(chunkBytes(a, 0)); mixed.append(chunkBytes(b, 1))
        #expect(error(Data(mixed)) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 1))
    }

    @Test func flippedByte_inHeaderOrBody_isRejected() {
        let c = sealed(randomBytes(5000))
        var body = c; body[body.count - 30] ^= 1
        #expect(error(body) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 0))
        var salt = c; salt[EncryptionFormat.headerSize - 1] ^= 1
        #expect(error(salt) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 0))
    }

    @Test func downgrade_plaintextOrOtherVersion_isRejected() {
        #expect(error(Data("SQLite format 3\0 plain diff".utf8)) == .notEncrypted(object: "u/inbound/x.sqlite"))
        #expect(error(Data()) == .notEncrypted(object: "u/inbound/x.sqlite"))
        var v0 = sealed(randomBytes(10)); v0[8] = 0
        #expect(error(v0) == .unsupportedFormat(object: "u/inbound/x.sqlite", reason: "version 0 (this build reads version 1)"))
        var v2 = sealed(randomBytes(10)); v2[8] = 2
        #expect(error(v2) == .unsupportedFormat(object: "u/inbound/x.sqlite", reason: "version 2 (this build reads version 1)"))
    }

    @Test func wrongKey_otherIdIsUnknown_sameIdOtherSecretFailsAuthentication() throws {
        let c = sealed(randomBytes(100))
        let other = ContentKeyring.generate()
        #expect(error(c, keyring: other) == .unknownKey(object: "u/inbound/x.sqlite", keyID: keyring.currentID))
        // A key file claiming our id with another secret.
        var json = try JSONSerialization.jsonObject(with: keyring.encoded()) as! [String: Any]
        var keys = json["keys"] as! [[String: Any]]
        keys[0]["key"] = Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }).base64EncodedString()
        json["keys"] = keys
        let forged = try ContentKeyring.decode(try JSONSerialization.data(withJSONObject: json), path: "forged")
        #expect(error(c, keyring: forged) == .authenticationFailed(object: "u/inbound/x.sqlite", chunk: 0))
    }

    @Test func files_encryptAndDecryptChunkByChunk_likeMemory() throws {
        let dir = try makeTemporaryFolder()
        let plain = randomBytes(2 * chunk + 77)
        let src = dir.appendingPathComponent("a.bin"), enc = dir.appendingPathComponent("a.enc"), out = dir.appendingPathComponent("a.out")
        try plain.write(to: src)
        let sha = try EncryptionFormat.encryptFile(src, to: enc, keyring: keyring)
        #expect(sha == Hashing.sha256Hex(plain))
        #expect(try EncryptionFormat.decrypt(Data(contentsOf: enc), keyring: keyring, object: "o") == plain)
        try EncryptionFormat.decryptFile(enc, to: out, keyring: keyring, object: "o")
        #expect(try Data(contentsOf: out) == plain)
        // Cut at a chunk boundary: the file path reports truncation as memory does.
        try Data(contentsOf: enc).prefix(EncryptionFormat.headerSize + 2 * (chunk + 16)).write(to: enc)
        #expect(throws: EncryptionError.truncated(object: "o")) { try EncryptionFormat.decryptFile(enc, to: out, keyring: keyring, object: "o") }
    }

    @Test func files_aroundTheOneMiBReadBatch_encryptLikeMemory() throws {
        let dir = try makeTemporaryFolder()
        for size in [0, 16 * chunk - 1, 16 * chunk, 16 * chunk + 1, 33 * chunk + 5] {
            let plain = randomBytes(size)
            let src = dir.appendingPathComponent("b.bin"), enc = dir.appendingPathComponent("b.enc")
            try plain.write(to: src)
            #expect(try EncryptionFormat.encryptFile(src, to: enc, keyring: keyring) == Hashing.sha256Hex(plain))
            let sealed = try Data(contentsOf: enc)
            #expect(Int64(sealed.count) == EncryptionFormat.ciphertextSize(plaintextSize: Int64(size)))
            #expect(try EncryptionFormat.decrypt(sealed, keyring: keyring, object: "o") == plain, "size \(size)")
        }
    }
}

@Suite struct ContentKeyringTests {
    @Test func plainKeyFile_roundTrips_andIsOwnerOnly() throws {
        let dir = try makeTemporaryFolder()
        let file = dir.appendingPathComponent("keys/content-keys.json")
        var ring = ContentKeyring.generate()
        ring.rotate()
        try ring.save(to: file)
        let perms = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
        #expect(perms == 0o600)
        let back = try #require(try ContentKeyring.load(file: file))
        #expect(back.currentID == ring.currentID)
        #expect(back.keys.map(\.id) == ring.keys.map(\.id))
        #expect(ContentKeyring.equal(back.current.key, ring.current.key))
    }

    @Test func passphraseWrappedFile_opensWithThePassphrase_only() throws {
        let ring = ContentKeyring.generate()
        let wrapped = try ring.wrapped(passphrase: "correct horse")
        #expect(ContentKeyring.isWrapped(wrapped))
        // No key bytes in the clear.
        let secret = ring.current.key.withUnsafeBytes { Data($0) }.base64EncodedString()
        #expect(String(decoding: wrapped, as: UTF8.self).contains(secret) == false)
        let back = try ContentKeyring.decode(wrapped, passphrase: "correct horse", path: "k.json")
        #expect(ContentKeyring.equal(back.current.key, ring.current.key))
        #expect(throws: EncryptionError.wrongPassphrase(path: "k.json")) { try ContentKeyring.decode(wrapped, passphrase: "wrong", path: "k.json") }
        #expect(throws: EncryptionError.keyFile(path: "k.json", reason: "the file is passphrase-protected; give the passphrase")) {
            try ContentKeyring.decode(wrapped, path: "k.json")
        }
    }

    @Test func rotate_newObjectsUseTheNewKey_oldOnesStayReadable() throws {
        var ring = ContentKeyring.generate()
        let old = EncryptionFormat.encrypt(Data("before".utf8), keyring: ring)
        let oldID = ring.currentID
        ring.rotate()
        let new = EncryptionFormat.encrypt(Data("after".utf8), keyring: ring)
        #expect(ring.currentID != oldID)
        #expect(try EncryptionFormat.Header(new, object: "n").keyID == ring.currentID)
        #expect(try EncryptionFormat.decrypt(old, keyring: ring, object: "o") == Data("before".utf8))
        #expect(try EncryptionFormat.decrypt(new, keyring: ring, object: "n") == Data("after".utf8))
    }

    @Test func merge_addsMissingKeys_refusesAConflictingId() throws {
        var a = ContentKeyring.generate()
        var b = a
        b.rotate()
        try a.merge(b, source: "b.json")
        #expect(a.keys.count == 2)
        #expect(a.currentID == b.currentID)
        var json = try JSONSerialization.jsonObject(with: b.encoded()) as! [String: Any]
        var keys = json["keys"] as! [[String: Any]]
        keys[0]["key"] = Data(repeating: 7, count: 32).base64EncodedString()
        json["keys"] = keys
        let forged = try ContentKeyring.decode(try JSONSerialization.data(withJSONObject: json), path: "f")
        #expect(throws: EncryptionError.conflictingKey(keyID: b.keys[0].id, path: "f.json")) { try a.merge(forged, source: "f.json") }
    }

    @Test func wrappedFileAskingForHugeScryptCost_isRefusedBeforeDeriving() throws {
        let wrapped = try ContentKeyring.generate().wrapped(passphrase: "p")
        var json = try JSONSerialization.jsonObject(with: wrapped) as! [String: Any]
        json["n"] = 1 << 20
        json["r"] = 32
        #expect(throws: EncryptionError.keyFile(path: "k", reason: "unsupported or damaged passphrase-protected key file")) {
            try ContentKeyring.decode(try JSONSerialization.data(withJSONObject: json), passphrase: "p", path: "k")
        }
    }

    @Test func damagedKeyFile_isRefusedClearly() {
        #expect(throws: EncryptionError.keyFile(path: "x", reason: "not an rtsync content key file")) {
            try ContentKeyring.decode(Data("{}".utf8), path: "x")
        }
    }
}

@Suite struct EncryptingStoreTests {
    let keyring = ContentKeyring.generate()

    func wrap(_ inner: any ObjectStore) throws -> (EncryptingStore, URL) {
        let dir = try makeTemporaryFolder()
        return (EncryptingStore(inner: inner, keyring: keyring, prefixes: ["u/inbound/", "u/recordings/"],
                                staging: dir.appendingPathComponent("staging"), rejected: dir.appendingPathComponent("quarantine")), dir)
    }

    /// Puts, lists, reads whole and ranged, downloads and uploads files; the inner store never holds plaintext.
    func exercise(_ inner: any ObjectStore) async throws {
        let (store, dir) = try wrap(inner)
        let chunk = EncryptionFormat.chunkSize
        let diff = randomBytes(3 * chunk + 1234)
        let media = randomBytes(2 * chunk + 99)
        let plainObject = Data("devices cursor stays plain".utf8)
        try await store.put(key: "u/inbound/a.sqlite", data: diff)
        let mediaFile = dir.appendingPathComponent("rec.m4a")
        try media.write(to: mediaFile)
        let (_, sha) = try await store.putReturningSHA256(key: "u/recordings/rec.m4a", fileURL: mediaFile)
        #expect(sha == Hashing.sha256Hex(media))
        try await store.put(key: "u/devices/d.json", data: plainObject)

        // Nothing readable in the bucket; the unencrypted prefix is as written.
        for (key, plain) in [("u/inbound/a.sqlite", diff), ("u/recordings/rec.m4a", media)] {
            let raw = try await inner.get(key: key)
            #expect(raw.prefix(8) == Data(EncryptionFormat.magic))
            #expect(raw.range(of: plain.subdata(in: 100..<164)) == nil)
        }
        #expect(try await inner.get(key: "u/devices/d.json") == plainObject)

        // Listings and HEAD give plaintext sizes; reads give plaintext.
        let listed = try await store.listAll(prefix: "u")
        #expect(Dictionary(uniqueKeysWithValues: listed.map { ($0.key, $0.size) })
                == ["u/inbound/a.sqlite": Int64(diff.count), "u/recordings/rec.m4a": Int64(media.count), "u/devices/d.json": Int64(plainObject.count)])
        #expect(try await store.head(key: "u/inbound/a.sqlite").size == Int64(diff.count))
        #expect(try await store.get(key: "u/inbound/a.sqlite") == diff)
        #expect(try await store.get(key: "u/inbound/a.sqlite", expecting: listed.first { $0.key == "u/inbound/a.sqlite" }!) == diff)

        // Ranged reads across chunk edges.
        let n = Int64(diff.count)
        let c = Int64(chunk)
        for (s, e) in [(0, 9), (5, c - 1), (c - 3, c + 3), (c, 2 * c - 1), (10, n - 1), (n - 5, n - 1), (2 * c + 7, n + 500)] as [(Int64, Int64)] {
            let got = try await store.get(key: "u/inbound/a.sqlite", range: ByteRange(start: s, end: e), ifMatch: nil)
            #expect(got == diff.subdata(in: Int(s)..<Int(min(e, n - 1)) + 1), "range \(s)-\(e)")
        }
        #expect(try await store.get(key: "u/inbound/a.sqlite", range: ByteRange(start: c + 1), ifMatch: nil) == diff.subdata(in: chunk + 1..<diff.count))

        // Downloads against the listing install plaintext.
        let out = dir.appendingPathComponent("out/rec.m4a")
        let info = try await store.download(key: "u/recordings/rec.m4a", to: out, expecting: listed.first { $0.key == "u/recordings/rec.m4a" })
        #expect(info.size == Int64(media.count))
        #expect(try Data(contentsOf: out) == media)
        // Staging is empty after the transfers.
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: store.staging.path)) ?? []).isEmpty)

        // A tampered object installs nothing and its ciphertext is kept as evidence.
        var raw = try await inner.get(key: "u/recordings/rec.m4a")
        raw[raw.count - 40] ^= 0xff
        try await inner.put(key: "u/recordings/rec.m4a", data: raw)
        let target = dir.appendingPathComponent("out/tampered.m4a")
        await #expect(throws: EncryptionError.authenticationFailed(object: "u/recordings/rec.m4a", chunk: 2)) {
            try await store.download(key: "u/recordings/rec.m4a", to: target)
        }
        #expect(!FileManager.default.fileExists(atPath: target.path))
        #expect(FileManager.default.fileExists(atPath: store.rejected!.appendingPathComponent("rec.m4a.encrypted-rejected").path))
        // A plaintext object put under an encrypted prefix behind the wrapper's back is a downgrade.
        try await inner.put(key: "u/inbound/b.sqlite", data: Data(repeating: 65, count: 5000))
        await #expect(throws: EncryptionError.notEncrypted(object: "u/inbound/b.sqlite")) {
            try await store.download(key: "u/inbound/b.sqlite", to: dir.appendingPathComponent("out/b.sqlite"))
        }
        await #expect(throws: EncryptionError.notEncrypted(object: "u/inbound/b.sqlite")) { try await store.get(key: "u/inbound/b.sqlite") }
    }

    @Test func localFolder_roundTripsRangesAndRejects_withoutPlaintextInTheFolder() async throws {
        let root = try makeTemporaryFolder()
        try await exercise(LocalFolderStore(root: root))
    }

    @Test func s3_roundTripsRangesAndRejects_withoutPlaintextInTheBucket() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        try await exercise(moto.store())
    }
}

extension EncryptingStoreTests {
    /// Into a local folder a large file is encrypted straight into the folder's temporary file: no staging file, the
    /// object decrypts to the file; a put that cannot land leaves no temporary file behind.
    @Test func localFolder_largeFile_isEncryptedStraightIntoTheFolder_withoutAStagingFile() async throws {
        let root = try makeTemporaryFolder()
        let inner = try LocalFolderStore(root: root)
        var (store, dir) = try wrap(inner)
        store.inMemoryLimit = 0
        let media = randomBytes(40 * EncryptionFormat.chunkSize + 3)
        let file = dir.appendingPathComponent("big.mov")
        try media.write(to: file)
        let (info, sha) = try await store.putReturningSHA256(key: "u/recordings/big.mov", fileURL: file)
        #expect(info.size == Int64(media.count) && sha == Hashing.sha256Hex(media))
        #expect(!FileManager.default.fileExists(atPath: store.staging.path))
        let raw = try await inner.get(key: "u/recordings/big.mov")
        #expect(raw.prefix(8) == Data(EncryptionFormat.magic) && raw.range(of: media.subdata(in: 1000..<1064)) == nil)
        #expect(try await store.get(key: "u/recordings/big.mov") == media)
        // A folder where the object would go: refused, and nothing is left in the bucket's folder.
        try FileManager.default.createDirectory(at: root.appendingPathComponent("u/recordings/dir.mov"), withIntermediateDirectories: true)
        await #expect(throws: BucketError.self) { try await store.put(key: "u/recordings/dir.mov", fileURL: file) }
        // The source gone mid-way is a local I/O error, and no temporary file stays.
        await #expect(throws: BucketError.self) { try await store.put(key: "u/recordings/gone.mov", fileURL: dir.appendingPathComponent("missing.mov")) }
        let left = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("u/recordings").path).sorted()
        #expect(left == ["big.mov", "dir.mov"])
    }
}

@Suite struct ShareEncryptionTests {
    @Test func encryptedToAShareKey_opensOnlyAsAFileWithThatKey_andOnlyWhenAccepted() async throws {
        let recipient = ContentKeyring.generate()
        let plain = randomBytes(70_000)
        let sealed = EncryptionFormat.encrypt(plain, to: try #require(recipient.shareKey).publicKey)
        #expect(EncryptionFormat.isSharedObject(sealed))
        #expect(sealed.range(of: plain.subdata(in: 100..<164)) == nil)
        let dir = try makeTemporaryFolder()
        let src = dir.appendingPathComponent("in"), out = dir.appendingPathComponent("out")
        try sealed.write(to: src)
        #expect(try EncryptionFormat.decryptFile(src, to: out, keyring: recipient, object: "o") == true)
        #expect(try Data(contentsOf: out) == plain)
        // Read into memory it is refused: only a checked file may come in this way.
        #expect(throws: EncryptionError.notAShare(object: "o")) { try EncryptionFormat.decrypt(sealed, keyring: recipient, object: "o") }
        // Another user's devices cannot open it.
        let other = ContentKeyring.generate()
        #expect(throws: EncryptionError.unknownKey(object: "o", keyID: ContentKeyring.shareKeyID(recipient.shareKey!.publicKey))) {
            try EncryptionFormat.decryptFile(src, to: out, keyring: other, object: "o")
        }

        // Through a store: refused unless the acceptance check says yes; a sender's put to the inbound is encrypted.
        let root = try makeTemporaryFolder()
        let inner = try LocalFolderStore(root: root)
        var sender = EncryptingStore(inner: inner, keyring: ContentKeyring.generate(), prefixes: ["s/inbound/"], staging: dir.appendingPathComponent("s"))
        sender.recipients = ["r": recipient.shareKey!.publicKey]
        try await sender.put(key: "r/inbound/x.sqlite", data: plain)
        try await sender.put(key: "q/inbound/y.sqlite", data: plain)
        #expect(try await inner.get(key: "r/inbound/x.sqlite").prefix(8) == Data(EncryptionFormat.magic))
        #expect(try await inner.get(key: "q/inbound/y.sqlite") == plain)
        var receiver = EncryptingStore(inner: inner, keyring: recipient, prefixes: ["r/inbound/"], staging: dir.appendingPathComponent("r"),
                                       rejected: dir.appendingPathComponent("quarantine"))
        let target = dir.appendingPathComponent("got.sqlite")
        await #expect(throws: EncryptionError.notAShare(object: "r/inbound/x.sqlite")) { try await receiver.download(key: "r/inbound/x.sqlite", to: target) }
        #expect(!FileManager.default.fileExists(atPath: target.path))
        receiver.acceptShared = { _, file in (try? Data(contentsOf: file)) == plain }
        try await receiver.download(key: "r/inbound/x.sqlite", to: target)
        #expect(try Data(contentsOf: target) == plain)
    }

    @Test func shareKey_travelsWithTheExportedKeyFile() throws {
        let ring = ContentKeyring.generate()
        let back = try ContentKeyring.decode(ring.encoded(), path: "k")
        #expect(back.shareKey?.rawRepresentation == ring.shareKey?.rawRepresentation)
    }
}

/// Media shared to another user (`share --with-media`) is encrypted to the recipient's share key: only the
/// recipient's devices read it, whether or not they encrypt that kind themselves.
@Suite struct SharedMediaEncryptionTests {
    let sender = ContentKeyring.generate()
    let recipient = ContentKeyring.generate()

    func store(_ inner: any ObjectStore, ring: ContentKeyring, prefixes: [String], accept: Bool) throws -> EncryptingStore {
        let dir = try makeTemporaryFolder()
        var s = EncryptingStore(inner: inner, keyring: ring, prefixes: prefixes, staging: dir.appendingPathComponent("staging"),
                                rejected: dir.appendingPathComponent("quarantine"))
        if accept { s.acceptShared = { key, _ in key.hasPrefix("b/recordings/") || key.hasPrefix("b/images/") } }
        return s
    }

    func exercise(_ inner: any ObjectStore) async throws {
        var a = try store(inner, ring: sender, prefixes: ["a/inbound/", "a/recordings/", "a/images/"], accept: false)
        a.recipients = ["b": try #require(recipient.shareKey).publicKey]
        a.inMemoryLimit = 100_000  // the large file goes through the chunked file path
        let dir = try makeTemporaryFolder()
        let small = randomBytes(5000), large = randomBytes(3 * EncryptionFormat.chunkSize + 17)
        try small.write(to: dir.appendingPathComponent("s.jpg"))
        try large.write(to: dir.appendingPathComponent("l.m4a"))
        let (_, sha) = try await a.putReturningSHA256(key: "b/images/s.jpg", fileURL: dir.appendingPathComponent("s.jpg"))
        #expect(sha == Hashing.sha256Hex(small))
        let (_, shaLarge) = try await a.putReturningSHA256(key: "b/recordings/l.m4a", fileURL: dir.appendingPathComponent("l.m4a"))
        #expect(shaLarge == Hashing.sha256Hex(large))
        // The bucket holds ciphertext to the recipient's share key; listings give plaintext sizes.
        for (key, plain) in [("b/images/s.jpg", small), ("b/recordings/l.m4a", large)] {
            let raw = try await inner.get(key: key)
            #expect(EncryptionFormat.isSharedObject(raw))
            #expect(raw.range(of: plain.subdata(in: 100..<164)) == nil)
        }

        // The recipient reads both, whether its store encrypts media or only diffs.
        for prefixes in [["b/inbound/", "b/recordings/", "b/images/"], ["b/inbound/"]] {
            let b = try store(inner, ring: recipient, prefixes: prefixes, accept: true)
            for (key, plain) in [("b/images/s.jpg", small), ("b/recordings/l.m4a", large)] {
                let out = dir.appendingPathComponent("out-\(prefixes.count)-" + (key as NSString).lastPathComponent)
                try await b.download(key: key, to: out)
                #expect(try Data(contentsOf: out) == plain, "\(key) with \(prefixes)")
            }
        }
        // A recipient store that does not accept shared media installs nothing; another user cannot read it.
        let refusing = try store(inner, ring: recipient, prefixes: ["b/recordings/"], accept: false)
        let target = dir.appendingPathComponent("refused.m4a")
        await #expect(throws: EncryptionError.notAShare(object: "b/recordings/l.m4a")) { try await refusing.download(key: "b/recordings/l.m4a", to: target) }
        #expect(!FileManager.default.fileExists(atPath: target.path))
        let stranger = try store(inner, ring: ContentKeyring.generate(), prefixes: ["b/images/"], accept: true)
        await #expect(throws: EncryptionError.self) { try await stranger.download(key: "b/images/s.jpg", to: dir.appendingPathComponent("x.jpg")) }
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("x.jpg").path))
        // The sender's own media stays under its own content key.
        try await a.put(key: "a/images/own.jpg", data: small)
        #expect(!EncryptionFormat.isSharedObject(try await inner.get(key: "a/images/own.jpg")))
    }

    @Test func localFolder_sharedMedia_isReadableByTheRecipientOnly() async throws {
        try await exercise(try LocalFolderStore(root: try makeTemporaryFolder()))
    }

    @Test func s3_sharedMedia_isReadableByTheRecipientOnly() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        try await exercise(moto.store())
    }
}
