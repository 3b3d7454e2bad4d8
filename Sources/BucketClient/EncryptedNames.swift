import _CryptoExtras
import Crypto
import Foundation

/// Deterministic, authenticated encryption of the media names under `<user>/recordings/` and `<user>/images/` (and
/// their copies in `<user>/trash/<date>/`), one path segment at a time, so a listing shows no plaintext name while
/// the same name always maps to the same key (a re-sync finds what it uploaded, folders stay folders).
///
/// A segment is sealed with AES-256-GCM-SIV (RFC 8452; deterministic and nonce-misuse resistant, so the fixed nonce
/// is sound) under `HKDF-SHA256(name key, "rtsync names v1")`, and written as the ciphertext and its 16-byte tag in
/// lower-case base32 without padding (safe on case-insensitive file systems). The name key is the user's oldest
/// content key (earliest creation, then id), so a key rotation does not rename anything. A changed name fails its
/// tag; a whole object moved to another name is caught by the content, which is bound to its plaintext path
/// (``EncryptionFormat`` algorithm 3).
public struct EncryptedNames: Sendable {
    /// The user whose media names are encrypted.
    public let user: String
    /// The media folders whose names are encrypted (`recordings`, `images`).
    public let kinds: [String]
    /// The longest segment (UTF-8 bytes) that fits 255 bytes once encrypted and encoded.
    public static let maxSegmentBytes = 143
    private let sealKey: SymmetricKey
    private let openKeys: [SymmetricKey]

    /// Names of `user`'s `kinds` folders, encrypted with the oldest key of `keyring`.
    public init(user: String, kinds: [String], keyring: ContentKeyring) {
        self.user = user
        self.kinds = kinds
        let ordered = keyring.chronological
        let derived = ordered.map { Self.derive($0.key) }
        sealKey = derived[0]
        openKeys = derived
    }

    private static func derive(_ key: SymmetricKey) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: key, salt: Data("rtsync names".utf8), info: Data("rtsync names v1".utf8), outputByteCount: 32)
    }

    private static let nonce = try! AES.GCM._SIV.Nonce(data: [UInt8](repeating: 0, count: 12))
    private static let aad = Data("rtsync name v1".utf8)

    /// The encrypted form of one segment; `path` names it in errors.
    /// - Throws: ``EncryptionError/nameTooLong(path:limit:)``.
    public func encrypt(segment: Substring, path: String) throws -> String {
        let bytes = Data(segment.utf8)
        guard bytes.count <= Self.maxSegmentBytes else { throw EncryptionError.nameTooLong(path: path, limit: Self.maxSegmentBytes) }
        let box = try! AES.GCM._SIV.seal(bytes, using: sealKey, nonce: Self.nonce, authenticating: Self.aad)
        return Base32.encode(box.ciphertext + box.tag)
    }

    /// The plaintext of an encrypted segment, or nil when it does not open with any key.
    public func decrypt(segment: Substring) -> String? {
        guard let raw = Base32.decode(segment), raw.count >= 16 else { return nil }
        let tagStart = raw.endIndex - 16
        guard let box = try? AES.GCM._SIV.SealedBox(nonce: Self.nonce, ciphertext: raw[..<tagStart], tag: raw[tagStart...]) else { return nil }
        for key in openKeys {
            if let plain = try? AES.GCM._SIV.open(box, using: key, authenticating: Self.aad) {
                return String(data: plain, encoding: .utf8)
            }
        }
        return nil
    }

    /// Where a key's encrypted part starts: the plaintext folder (`<user>/images/`,
    /// `<user>/trash/<date>/images/`) and the media path's first segment (`images`), or nil for keys outside them.
    func area(of key: String) -> (root: String, kind: String)? {
        let userPrefix = user + "/"
        guard key.hasPrefix(userPrefix) else { return nil }
        let rest = key.dropFirst(userPrefix.count)
        for kind in kinds where rest.hasPrefix(kind + "/") { return (userPrefix + kind + "/", kind) }
        guard rest.hasPrefix("trash/") else { return nil }
        let afterTrash = rest.dropFirst("trash/".count)
        guard let slash = afterTrash.firstIndex(of: "/") else { return nil }
        let inner = afterTrash[afterTrash.index(after: slash)...]
        for kind in kinds where inner.hasPrefix(kind + "/") {
            return (userPrefix + "trash/" + String(afterTrash[..<slash]) + "/" + kind + "/", kind)
        }
        return nil
    }

    /// Whether `key` lies under a folder whose names are encrypted.
    public func covers(_ key: String) -> Bool { area(of: key) != nil }

    /// The media path an object of plaintext `key` is bound to (`images/a/b.jpg`), or nil outside the folders.
    public func boundPath(of key: String) -> String? {
        guard let (root, kind) = area(of: key) else { return nil }
        return kind + "/" + key.dropFirst(root.count)
    }

    /// The bucket key of plaintext `key`: every segment after its folder encrypted (others unchanged).
    /// - Throws: ``EncryptionError/nameTooLong(path:limit:)``.
    public func bucketKey(_ key: String) throws -> String {
        guard let (root, _) = area(of: key) else { return key }
        let parts = try key.dropFirst(root.count).split(separator: "/", omittingEmptySubsequences: false).map { try encrypt(segment: $0, path: key) }
        return root + parts.joined(separator: "/")
    }

    /// The plaintext key of bucket key `raw`.
    /// - Throws: ``EncryptionError/nameNotDecryptable(object:)`` when a segment does not open (a wrong key, a
    ///   plaintext or changed name).
    public func plainKey(_ raw: String) throws -> String {
        guard let (root, _) = area(of: raw) else { return raw }
        let parts = try raw.dropFirst(root.count).split(separator: "/", omittingEmptySubsequences: false).map { segment in
            guard let plain = decrypt(segment: segment) else { throw EncryptionError.nameNotDecryptable(object: raw) }
            return plain
        }
        return root + parts.joined(separator: "/")
    }
}

/// RFC 4648 base32, lower case, without padding.
enum Base32 {
    private static let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)

    static func encode(_ data: Data) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((data.count * 8 + 4) / 5)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in data {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int(buffer >> UInt32(bits - 5) & 31)])
                bits -= 5
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of a canonical encoding (no padding, unused trailing bits zero), else nil.
    static func decode(_ text: Substring) -> Data? {
        var out = Data()
        var buffer: UInt32 = 0
        var bits = 0
        for c in text.utf8 {
            let v: UInt32
            switch c {
            case 97...122: v = UInt32(c - 97)
            case 50...55: v = UInt32(c - 50 + 26)
            default: return nil
            }
            buffer = buffer << 5 | v
            bits += 5
            if bits >= 8 {
                out.append(UInt8(buffer >> UInt32(bits - 8) & 0xff))
                bits -= 8
            }
            buffer &= (1 << UInt32(bits)) - 1
        }
        // Leftover bits must be fewer than a byte's worth and zero, so every byte string has one encoding.
        guard bits < 5, buffer == 0 else { return nil }
        return out
    }
}
