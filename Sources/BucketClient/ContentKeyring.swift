import _CryptoExtras
import Crypto
import Foundation

/// One 256-bit content key of a user, named by a random 8-byte id (16 hex characters) that encrypted objects carry.
public struct ContentKey: Sendable {
    /// The key's id as 16 lower-case hex characters.
    public let id: String
    /// The secret key.
    public let key: SymmetricKey
    /// When the key was made.
    public let created: Date
    /// Whether the key may go into the bucket sealed under the key before it (``SealedContentKey``). False for a key
    /// made by `rtsync keys rotate --no-publish`, after the older key may have leaked: whoever holds that key could
    /// open the sealed copy, so such a key reaches other devices only by export and import.
    public var publishable: Bool = true

    /// A fresh random key.
    public static func generate() -> ContentKey {
        let id = (0..<8).map { _ in UInt8.random(in: 0...255) }
        return ContentKey(id: Hashing.hex(id), key: SymmetricKey(size: .bits256), created: Date())
    }
}

/// A user's content keys: every key ever used (so old objects stay readable) and the current one, used for new
/// objects. Shared by all of the user's devices through `rtsync keys export`/`import`, and a rotated key also through
/// the bucket sealed under an older one (``SealedContentKey``), never in the clear.
public struct ContentKeyring: Sendable {
    /// Every key, oldest first.
    public private(set) var keys: [ContentKey]
    /// The id of the key new objects are encrypted with.
    public private(set) var currentID: String
    /// What the user's devices encrypt ("inbound", "backups", "recordings", "images"), carried in exported key
    /// files so a device that imports the key encrypts the same things.
    public var kinds: [String] = []
    /// The user's X25519 key for shares: other users encrypt what they share to its public half
    /// (``EncryptionFormat/encrypt(_:to:)``); the user's devices hold the private half with the content keys.
    public var shareKey: Curve25519.KeyAgreement.PrivateKey?

    /// The id an object encrypted to `publicKey` carries: the first 8 bytes of its SHA-256, as hex.
    public static func shareKeyID(_ publicKey: Curve25519.KeyAgreement.PublicKey) -> String {
        Hashing.hex(SHA256.hash(data: publicKey.rawRepresentation).prefix(8))
    }

    /// A keyring holding one new random key.
    public static func generate() -> ContentKeyring {
        let k = ContentKey.generate()
        return ContentKeyring(keys: [k], currentID: k.id, shareKey: Curve25519.KeyAgreement.PrivateKey())
    }

    /// The key new objects are encrypted with.
    public var current: ContentKey { keys.first { $0.id == currentID }! }

    /// The key with `id`, or nil.
    public func key(id: String) -> ContentKey? { keys.first { $0.id == id } }

    /// Adds a new random key and makes it current; older keys stay for reading. With `publishable` false the key is
    /// never published sealed under an older one (see ``ContentKey/publishable``).
    @discardableResult
    public mutating func rotate(publishable: Bool = true) -> ContentKey {
        var k = ContentKey.generate()
        // Key files keep creation times to the second, and keys are ordered by creation (then id): a key made within
        // a second of the newest would not always sort after it, so the oldest key, which encrypts media names,
        // could change. The new key is dated at least a second after every other.
        if let newest = keys.map(\.created).max(), k.created < newest.addingTimeInterval(1) {
            k = ContentKey(id: k.id, key: k.key, created: newest.addingTimeInterval(1))
        }
        k.publishable = publishable
        keys.append(k)
        currentID = k.id
        return k
    }

    /// Adds `key` (one learned from the bucket) unless held, and makes it current when it is newer than the current one.
    public mutating func adopt(_ key: ContentKey) {
        if self.key(id: key.id) == nil { keys.append(key) }
        if key.created > current.created { currentID = key.id }
    }

    /// Keys oldest first (by creation, then id): the order in which each is sealed under the one before it.
    public var chronological: [ContentKey] {
        keys.sorted { $0.created != $1.created ? $0.created < $1.created : $0.id < $1.id }
    }

    /// Adds the keys of `other` this keyring lacks and takes its current key when it is newer than ours.
    /// - Throws: ``EncryptionError/conflictingKey(keyID:path:)`` when both hold one id for different keys.
    public mutating func merge(_ other: ContentKeyring, source: String) throws {
        for k in other.keys {
            if let mine = key(id: k.id) {
                if !Self.equal(mine.key, k.key) { throw EncryptionError.conflictingKey(keyID: k.id, path: source) }
            } else {
                keys.append(k)
            }
        }
        if other.current.created > current.created { currentID = other.currentID }
        if kinds.isEmpty { kinds = other.kinds }
        if shareKey == nil { shareKey = other.shareKey }
    }

    static func equal(_ a: SymmetricKey, _ b: SymmetricKey) -> Bool {
        a.withUnsafeBytes { x in b.withUnsafeBytes { y in x.elementsEqual(y) } }
    }

    // MARK: - Files

    private struct Stored: Codable {
        struct Key: Codable { var id: String; var key: String; var created: Date; var publish: Bool? }
        var format = "rtsync-content-keys"
        var version = 1
        var current: String
        var keys: [Key]
        var encrypts: [String]?
        var shareKey: String?
    }

    private struct Wrapped: Codable {
        var format = "rtsync-content-keys-wrapped"
        var version = 1
        var kdf = "scrypt"
        var n: Int
        var r: Int
        var p: Int
        var salt: String
        /// AES-256-GCM (nonce, ciphertext, tag) of the plain key file.
        var sealed: String
    }

    /// The keyring as the plain JSON key file (secret: keep it like a password).
    public func encoded() -> Data {
        let stored = Stored(current: currentID, keys: keys.map {
            Stored.Key(id: $0.id, key: $0.key.withUnsafeBytes { Data($0) }.base64EncodedString(), created: $0.created,
                       publish: $0.publishable ? nil : false)
        }, encrypts: kinds, shareKey: shareKey?.rawRepresentation.base64EncodedString())
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        e.dateEncodingStrategy = .iso8601
        return try! e.encode(stored)
    }

    /// The keyring sealed under a passphrase: scrypt (N=2^`logN`, r=8, p=1, 16-byte random salt; N=2^15 by default,
    /// 32 MiB) derives a 256-bit key that seals the plain key file with AES-256-GCM. A copy kept where others can read
    /// it (the bucket) takes a higher `logN`, so each guess at the passphrase costs more.
    public func wrapped(passphrase: String, logN: Int = 15) throws -> Data {
        precondition((10...20).contains(logN), "scrypt cost out of range")
        let salt = Data((0..<16).map { _ in UInt8.random(in: 0...255) })
        let (n, r, p) = (1 << logN, 8, 1)
        let kek = try KDF.Scrypt.deriveKey(from: Data(passphrase.utf8), salt: salt, outputByteCount: 32, rounds: n, blockSize: r, parallelism: p)
        let box = try AES.GCM.seal(encoded(), using: kek)
        let w = Wrapped(n: n, r: r, p: p, salt: salt.base64EncodedString(), sealed: box.combined!.base64EncodedString())
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try e.encode(w)
    }

    /// Whether `data` is a passphrase-wrapped key file.
    public static func isWrapped(_ data: Data) -> Bool {
        (try? JSONDecoder().decode(Wrapped.self, from: data)) != nil
    }

    /// Parses a key file (plain or, with `passphrase`, wrapped); `path` names it in errors.
    /// - Throws: ``EncryptionError/keyFile(path:reason:)`` or ``EncryptionError/wrongPassphrase(path:)``.
    public static func decode(_ data: Data, passphrase: String? = nil, path: String) throws -> ContentKeyring {
        if let w = try? JSONDecoder().decode(Wrapped.self, from: data) {
            guard let passphrase else { throw EncryptionError.keyFile(path: path, reason: "the file is passphrase-protected; give the passphrase") }
            guard w.version == 1, w.kdf == "scrypt", let salt = Data(base64Encoded: w.salt), let sealed = Data(base64Encoded: w.sealed),
                  // Bounded so a hostile file cannot ask for more than 256 MiB of scrypt memory or minutes of work.
                  w.n > 1, w.n <= 1 << 20, w.n & (w.n - 1) == 0, (1...32).contains(w.r), (1...4).contains(w.p), 128 * w.r * w.n <= 256 << 20 else {
                throw EncryptionError.keyFile(path: path, reason: "unsupported or damaged passphrase-protected key file")
            }
            let kek = try KDF.Scrypt.deriveKey(from: Data(passphrase.utf8), salt: salt, outputByteCount: 32, rounds: w.n, blockSize: w.r, parallelism: w.p)
            guard let box = try? AES.GCM.SealedBox(combined: sealed), let plain = try? AES.GCM.open(box, using: kek) else {
                throw EncryptionError.wrongPassphrase(path: path)
            }
            return try decode(plain, path: path)
        }
        let d = JSONDecoder()
        d.dateDecodingStrategy = .iso8601
        guard let s = try? d.decode(Stored.self, from: data), s.format == "rtsync-content-keys" else {
            throw EncryptionError.keyFile(path: path, reason: "not an rtsync content key file")
        }
        guard s.version == 1 else { throw EncryptionError.keyFile(path: path, reason: "key file version \(s.version) is not supported") }
        var keys: [ContentKey] = []
        for k in s.keys {
            guard k.id.count == 16, k.id.allSatisfy(\.isHexDigit), let raw = Data(base64Encoded: k.key), raw.count == 32 else {
                throw EncryptionError.keyFile(path: path, reason: "key \(k.id) is not a 16-hex-character id with a 32-byte key")
            }
            keys.append(ContentKey(id: k.id.lowercased(), key: SymmetricKey(data: raw), created: k.created, publishable: k.publish ?? true))
        }
        guard keys.contains(where: { $0.id == s.current.lowercased() }) else {
            throw EncryptionError.keyFile(path: path, reason: "the current key \(s.current) is not in the file")
        }
        var share: Curve25519.KeyAgreement.PrivateKey?
        if let text = s.shareKey {
            guard let raw = Data(base64Encoded: text), let key = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: raw) else {
                throw EncryptionError.keyFile(path: path, reason: "the share key is not a 32-byte X25519 key")
            }
            share = key
        }
        return ContentKeyring(keys: keys, currentID: s.current.lowercased(), kinds: s.encrypts ?? [], shareKey: share)
    }

    /// Reads a key file; nil when it does not exist.
    public static func load(file: URL, passphrase: String? = nil) throws -> ContentKeyring? {
        guard FileManager.default.fileExists(atPath: file.path) else { return nil }
        let data: Data
        do { data = try Data(contentsOf: file) } catch { throw EncryptionError.keyFile(path: file.path, reason: "\(error.localizedDescription)") }
        return try decode(data, passphrase: passphrase, path: file.path)
    }

    /// Writes `data` to `file` readable only by the user (0600; its folder 0700 when created here), atomically.
    public static func writeSecret(_ data: Data, to file: URL) throws {
        let fm = FileManager.default
        let folder = file.deletingLastPathComponent()
        do {
            if !fm.fileExists(atPath: folder.path) {
                try fm.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            }
            let temp = folder.appendingPathComponent("." + file.lastPathComponent + ".\(UUID().uuidString).tmp")
            // Created with owner-only permissions before the secret goes in.
            guard fm.createFile(atPath: temp.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
                throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: temp.path])
            }
            let h = try FileHandle(forWritingTo: temp)
            try h.write(contentsOf: data)
            try h.synchronize()
            try h.close()
            if rename(temp.path, file.path) != 0 {
                unlink(temp.path)
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: file.path])
            }
        } catch let e as EncryptionError { throw e } catch {
            throw EncryptionError.keyFile(path: file.path, reason: error.localizedDescription)
        }
    }

    /// Writes the plain key file to `file` (mode 0600).
    public func save(to file: URL) throws { try Self.writeSecret(encoded(), to: file) }
}
