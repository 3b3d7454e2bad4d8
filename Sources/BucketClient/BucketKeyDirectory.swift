import Crypto
import Foundation

/// A home's content keys as an ``EncryptingStore`` and its copies share them, and their exchange through the
/// bucket's `<user>/keys/`: a rotated key is published sealed under the key before it (``SealedContentKey``) before
/// the first object encrypted with it goes up, and a device that meets an object encrypted with a key it does not
/// hold fetches that one sealed key (following older ones back, at most ``SealedContentKey/maxChain``), opens it with
/// a key it holds and keeps it. The user's share key is published the same way (``PublishedShareKey``).
///
/// Nothing here costs a request while nothing is pending: what this home has published is remembered in a local file.
public final class BucketKeyDirectory: @unchecked Sendable {
    /// The user whose keys these are.
    public let user: String
    /// The home's key file, updated when a key is learned from the bucket.
    public let keyringFile: URL
    /// What this home has published (or learned from the bucket), one entry a line.
    public let publishedFile: URL
    /// The device key that signs the published share key (nil: unsigned).
    public let signingKey: Curve25519.Signing.PrivateKey?
    /// Whether this user encrypts media names (said in the published share key).
    public let encryptsNames: Bool
    private let lock = NSLock()
    private var ring: ContentKeyring
    private var published: Set<String>?

    /// The directory of `user` holding `keyring` (as saved in `keyringFile`).
    public init(user: String, keyring: ContentKeyring, keyringFile: URL, publishedFile: URL,
                signingKey: Curve25519.Signing.PrivateKey? = nil, encryptsNames: Bool = false) {
        self.user = user
        ring = keyring
        self.keyringFile = keyringFile
        self.publishedFile = publishedFile
        self.signingKey = signingKey
        self.encryptsNames = encryptsNames
    }

    /// The keys as they are now (with any learned from the bucket).
    public var keyring: ContentKeyring { lock.withLock { ring } }

    // MARK: - Publishing

    private func publishedEntries() -> Set<String> {
        lock.withLock {
            if let published { return published }
            let set = LineSetFile.load(publishedFile)
            published = set
            return set
        }
    }

    private func markPublished(_ entries: [String]) {
        lock.withLock {
            var set = published ?? []
            set.formUnion(entries)
            published = set
            try? LineSetFile.save(set, to: publishedFile)
        }
    }

    private static func sealedEntry(_ id: String) -> String { "sealed \(id)" }

    private func shareEntry(_ key: Curve25519.KeyAgreement.PublicKey) -> String {
        "share-key \(Hashing.hex(key.rawRepresentation)) \(encryptsNames ? "names" : "plain-names")"
    }

    /// What is not published yet: every key but the first, sealed under the one before it in the keyring (the order
    /// keys were added in, which the key file keeps: creation times of keys made within a second cannot tell it), and
    /// the share key. A key made with `keys rotate --no-publish` (``ContentKey/publishable`` false) is left out.
    private func pending() -> [(entry: String, key: String, data: Data)] {
        let done = publishedEntries()
        let ring = keyring
        var out: [(String, String, Data)] = []
        for (older, newer) in zip(ring.keys, ring.keys.dropFirst()) where newer.publishable && !done.contains(Self.sealedEntry(newer.id)) {
            out.append((Self.sealedEntry(newer.id), SealedContentKey.objectKey(user: user, keyID: newer.id),
                        SealedContentKey.seal(newer, under: older, user: user).encoded()))
        }
        if let share = ring.shareKey?.publicKey, !done.contains(shareEntry(share)) {
            let doc = PublishedShareKey.make(user: user, shareKey: share, encryptsNames: encryptsNames, signingKey: signingKey)
            out.append((shareEntry(share), PublishedShareKey.objectKey(user: user), doc.encoded()))
        }
        return out
    }

    /// Puts what is not published yet into `store` (the bucket as it is, not encrypting) and remembers it; returns
    /// the keys written. Called before the first object encrypted with a new key goes up, and by `rtsync keys rotate`.
    /// - Throws: the store's errors; what went up before stays remembered.
    @discardableResult
    public func publishPending(to store: any ObjectStore) async throws -> [String] {
        var written: [String] = []
        for item in pending() {
            // Another device of the user may have published the same share key (signed with its own device key, which
            // senders may trust): left as it is.
            if item.key == PublishedShareKey.objectKey(user: user), let bytes = try? await store.get(key: item.key),
               let there = try? PublishedShareKey.decode(bytes, user: user, object: item.key),
               let mine = try? PublishedShareKey.decode(item.data, user: user, object: item.key),
               there.shareKey == mine.shareKey, there.encryptsNames == mine.encryptsNames, there.signatureIsValid || there.signature == nil {
                markPublished([item.entry])
                continue
            }
            do {
                // A sealed key already there (another device published it first) stays: it opens for the same devices.
                try await store.put(key: item.key, data: item.data, ifNoneMatch: item.entry.hasPrefix("sealed "))
            } catch BucketError.preconditionFailed {}
            markPublished([item.entry])
            written.append(item.key)
        }
        return written
    }

    // MARK: - Learning

    /// Makes sure the keyring holds `keyID`, fetching its sealed copy from `store` (and older ones back to a key held)
    /// when it does not; a key learned is saved to ``keyringFile`` and becomes current when it is newer. `object` is
    /// the encrypted object that needs the key (named in errors).
    /// - Throws: ``EncryptionError/unknownKey(object:keyID:)`` when no sealed copy is published,
    ///   ``EncryptionError/sealedKeyRejected(object:keyID:reason:)`` when one cannot be used; nothing is kept then.
    public func learn(keyID: String, object: String, from store: any ObjectStore) async throws {
        let ring = keyring
        if ring.key(id: keyID) != nil { return }
        var chain: [(doc: SealedContentKey, source: String)] = []
        var id = keyID
        while chain.count < SealedContentKey.maxChain {
            let source = SealedContentKey.objectKey(user: user, keyID: id)
            let data: Data
            do { data = try await store.get(key: source) } catch BucketError.notFound {
                if chain.isEmpty { throw EncryptionError.unknownKey(object: object, keyID: keyID) }
                throw EncryptionError.sealedKeyRejected(object: object, keyID: keyID, reason: "the older key \(id) it is sealed under is neither held nor published")
            }
            let doc = try SealedContentKey.decode(data, user: user, keyID: id, object: object, source: source)
            chain.append((doc, source))
            if let wrapping = ring.key(id: doc.wrappingKeyID) {
                var opener = wrapping
                var learned: [ContentKey] = []
                for (sealed, source) in chain.reversed() {
                    opener = try sealed.open(with: opener, object: object, source: source)
                    learned.append(opener)
                }
                try save(learned)
                lock.withLock { for k in learned { self.ring.adopt(k) } }
                markPublished(learned.map { Self.sealedEntry($0.id) })
                return
            }
            id = doc.wrappingKeyID
            if chain.contains(where: { $0.doc.keyID == id }) { break }
        }
        throw EncryptionError.sealedKeyRejected(object: object, keyID: keyID,
                                                reason: "its chain of sealed keys does not reach a key this device holds within \(SealedContentKey.maxChain) steps")
    }

    /// Adds `learned` to the key file as it is on disk (another command may have changed it meanwhile).
    private func save(_ learned: [ContentKey]) throws {
        try lock.withLock {
            var onDisk = (try? ContentKeyring.load(file: keyringFile)) ?? ring
            for k in learned { onDisk.adopt(k) }
            try onDisk.save(to: keyringFile)
        }
    }
}
