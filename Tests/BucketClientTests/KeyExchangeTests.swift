import Crypto
import Foundation
import Testing
@testable import BucketClient

/// Sealed rotated keys (``SealedContentKey``), the key directory that publishes and learns them
/// (``BucketKeyDirectory``), and published share keys (``PublishedShareKey``), over a local folder.
@Suite struct KeyExchangeTests {
    @Test func sealedKey_opensWithItsWrappingKey_andAnyChangedFieldFailsAuthentication() throws {
        var ring = ContentKeyring.generate()
        let older = ring.current
        let newer = ring.rotate()
        let sealed = SealedContentKey.seal(newer, under: older, user: "u")
        let opened = try sealed.open(with: older, object: "o", source: "s")
        #expect(ContentKeyring.equal(opened.key, newer.key) && opened.id == newer.id)
        #expect(!String(decoding: sealed.encoded(), as: UTF8.self).contains(newer.key.withUnsafeBytes { Data($0) }.base64EncodedString()))
        var changes: [(inout SealedContentKey) -> Void] = [
            { $0.user = "v" }, { $0.keyID = "00112233445566ff" }, { $0.created = "1600000000" },
        ]
        changes.append { doc in
            var bytes = Data(base64Encoded: doc.sealed)!
            bytes[20] ^= 1
            doc.sealed = bytes.base64EncodedString()
        }
        for change in changes {
            var doc = sealed
            change(&doc)
            #expect(throws: EncryptionError.self) { try doc.open(with: older, object: "o", source: "s") }
        }
        // Another key of the user does not open it.
        #expect(throws: EncryptionError.self) { try sealed.open(with: ContentKey.generate(), object: "o", source: "s") }
    }

    func directory(_ ring: ContentKeyring, _ folder: URL, user: String = "u") -> BucketKeyDirectory {
        BucketKeyDirectory(user: user, keyring: ring, keyringFile: folder.appendingPathComponent("keys.json"),
                           publishedFile: folder.appendingPathComponent("published"))
    }

    @Test func rotatedKeys_publishedOnce_areLearnedAlongTheChain_andSavedAsCurrent() async throws {
        let root = try makeTemporaryFolder()
        let store = try LocalFolderStore(root: root.appendingPathComponent("bucket"))
        var ring = ContentKeyring.generate()
        let first = ring
        ring.rotate()
        let k3 = ring.rotate()
        let a = directory(ring, root.appendingPathComponent("A"))
        let written = try await a.publishPending(to: store)
        #expect(written.count == 3, "two sealed keys and the share key: \(written)")
        #expect(try await a.publishPending(to: store).isEmpty, "nothing twice")
        // A second directory of the same home (the next run) remembers it too.
        #expect(try await directory(ring, root.appendingPathComponent("A")).publishPending(to: store).isEmpty)

        let b = directory(first, root.appendingPathComponent("B"))
        try await b.learn(keyID: k3.id, object: "u/inbound/x.sqlite", from: store)
        #expect(b.keyring.key(id: k3.id) != nil && b.keyring.currentID == k3.id && b.keyring.keys.count == 3)
        let saved = try #require(try ContentKeyring.load(file: b.keyringFile))
        #expect(saved.currentID == k3.id && saved.keys.count == 3)
    }

    @Test func learn_missingOrLoopingOrForeignSealedKey_failsNamingTheObject_andKeepsNothing() async throws {
        let root = try makeTemporaryFolder()
        let store = try LocalFolderStore(root: root.appendingPathComponent("bucket"))
        let b = directory(ContentKeyring.generate(), root.appendingPathComponent("B"))
        await #expect(throws: EncryptionError.unknownKey(object: "u/inbound/x.sqlite", keyID: "0011223344556677")) {
            try await b.learn(keyID: "0011223344556677", object: "u/inbound/x.sqlite", from: store)
        }
        // Two sealed keys each naming the other as their wrapping key: the loop ends.
        let x = ContentKey.generate(), y = ContentKey.generate()
        try await store.put(key: SealedContentKey.objectKey(user: "u", keyID: x.id), data: SealedContentKey.seal(x, under: y, user: "u").encoded())
        try await store.put(key: SealedContentKey.objectKey(user: "u", keyID: y.id), data: SealedContentKey.seal(y, under: x, user: "u").encoded())
        await #expect(throws: EncryptionError.self) { try await b.learn(keyID: x.id, object: "u/inbound/x.sqlite", from: store) }
        // Another user's sealed key under this user's name.
        let ring = ContentKeyring.generate()
        let z = ContentKey.generate()
        try await store.put(key: SealedContentKey.objectKey(user: "u", keyID: z.id), data: SealedContentKey.seal(z, under: ring.keys[0], user: "v").encoded())
        let c = directory(ring, root.appendingPathComponent("C"))
        do {
            try await c.learn(keyID: z.id, object: "u/inbound/x.sqlite", from: store)
            Issue.record("a key of another user was learned")
        } catch let e as EncryptionError {
            guard case .sealedKeyRejected(let object, let id, _) = e else { Issue.record("\(e)"); return }
            #expect(object == "u/inbound/x.sqlite" && id == z.id)
        }
        #expect(!FileManager.default.fileExists(atPath: b.keyringFile.path) && b.keyring.keys.count == 1)
    }

    @Test func publishedShareKey_signedByTheDevice_verifies_andAChangedFieldDoesNot() throws {
        let share = Curve25519.KeyAgreement.PrivateKey().publicKey
        let device = Curve25519.Signing.PrivateKey()
        let doc = PublishedShareKey.make(user: "u", shareKey: share, encryptsNames: true, signingKey: device)
        #expect(doc.signatureIsValid && doc.publicKey?.rawRepresentation == share.rawRepresentation)
        let parsed = try PublishedShareKey.decode(doc.encoded(), user: "u", object: "u/keys/share-key.json")
        #expect(parsed == doc)
        var flipped = doc
        flipped.encryptsNames = false
        #expect(!flipped.signatureIsValid)
        var replaced = doc
        replaced.shareKey = Hashing.hex(Curve25519.KeyAgreement.PrivateKey().publicKey.rawRepresentation)
        #expect(!replaced.signatureIsValid)
        #expect(throws: EncryptionError.self) { try PublishedShareKey.decode(doc.encoded(), user: "v", object: "v/keys/share-key.json") }
        #expect(!PublishedShareKey.make(user: "u", shareKey: share, encryptsNames: true, signingKey: nil).signatureIsValid)
    }
}

/// Shared-media parcels (``SharedMediaParcel``) over a local folder: what is taken, what is kept, what is refused.
@Suite struct SharedMediaParcelTests {
    @Test func parcel_takenIntoDocuments_keepsADifferentLocalFileAndAddsAConflictCopy_thenIsDeleted() async throws {
        let root = try makeTemporaryFolder()
        let store = try LocalFolderStore(root: root.appendingPathComponent("bucket"))
        let recipient = ContentKeyring.generate()
        let source = root.appendingPathComponent("sender")
        let a = randomBytes(70_000), b = randomBytes(3_000)
        for (path, bytes) in [("images/a.png", a), ("recordings/b.m4a", b)] {
            let url = source.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try bytes.write(to: url)
        }
        let written = try await SharedMediaParcel.send(
            [("images/a.png", source.appendingPathComponent("images/a.png")), ("recordings/b.m4a", source.appendingPathComponent("recordings/b.m4a")),
             ("../escape", source.appendingPathComponent("images/a.png"))],
            from: "sender", to: "u", key: recipient.shareKey!.publicKey, share: "S1", store: store, staging: root.appendingPathComponent("staging"))
        #expect(written == ["u/shared-media/S1/0", "u/shared-media/S1/1", "u/shared-media/S1/manifest"], "a path outside the media folders is not sent")
        for key in written { #expect(try await store.get(key: key).range(of: Data("a.png".utf8)) == nil) }

        let documents = root.appendingPathComponent("documents")
        let mine = randomBytes(100)
        try FileManager.default.createDirectory(at: documents.appendingPathComponent("images"), withIntermediateDirectories: true)
        try mine.write(to: documents.appendingPathComponent("images/a.png"))
        let taken = try #require(try await SharedMediaParcel.take(share: "S1", user: "u", keyring: recipient, store: store, documents: documents,
                                                                  staging: root.appendingPathComponent("staging2")))
        #expect(taken.count == 2 && taken.contains("recordings/b.m4a"))
        let copy = try #require(taken.first { $0.hasPrefix("images/a (conflict sender ") })
        #expect(try Data(contentsOf: documents.appendingPathComponent(copy)) == a)
        #expect(try Data(contentsOf: documents.appendingPathComponent("images/a.png")) == mine)
        #expect(try Data(contentsOf: documents.appendingPathComponent("recordings/b.m4a")) == b)
        #expect(try await store.listAll(prefix: "u/shared-media/").isEmpty)
        #expect(try await SharedMediaParcel.take(share: "S1", user: "u", keyring: recipient, store: store, documents: documents,
                                                 staging: root.appendingPathComponent("staging2")) == nil)
    }

    @Test func parcel_withAHostilePathOrForAnotherKey_isRefused_andNothingIsInstalled() async throws {
        let root = try makeTemporaryFolder()
        let store = try LocalFolderStore(root: root.appendingPathComponent("bucket"))
        let recipient = ContentKeyring.generate()
        let documents = root.appendingPathComponent("documents")
        // A manifest naming a path outside the media folders.
        let manifest = SharedMediaParcel(from: "x", share: "S2", files: [.init(path: "images/../../etc/passwd", size: 1, sha256: "")])
        try await store.put(key: "u/shared-media/S2/manifest", data: EncryptionFormat.encrypt(try JSONEncoder().encode(manifest), to: recipient.shareKey!.publicKey))
        try await store.put(key: "u/shared-media/S2/0", data: EncryptionFormat.encrypt(Data("x".utf8), to: recipient.shareKey!.publicKey))
        await #expect(throws: EncryptionError.malformed(object: "u/shared-media/S2/manifest", reason: "not a shared-media manifest for this share")) {
            _ = try await SharedMediaParcel.take(share: "S2", user: "u", keyring: recipient, store: store, documents: documents, staging: root.appendingPathComponent("s"))
        }
        // A parcel encrypted to someone else's share key.
        let other = ContentKeyring.generate()
        let good = SharedMediaParcel(from: "x", share: "S3", files: [])
        try await store.put(key: "u/shared-media/S3/manifest", data: EncryptionFormat.encrypt(try JSONEncoder().encode(good), to: other.shareKey!.publicKey))
        await #expect(throws: EncryptionError.self) {
            _ = try await SharedMediaParcel.take(share: "S3", user: "u", keyring: recipient, store: store, documents: documents, staging: root.appendingPathComponent("s"))
        }
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: documents.path)) ?? []).isEmpty)
        #expect(try await store.listAll(prefix: "u/shared-media/").count == 3, "refused parcels stay")
    }
}
