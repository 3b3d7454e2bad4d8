import Crypto
import Foundation

/// A content key sealed under an older content key of the same user: what a device that rotated publishes at
/// `<user>/keys/<keyID>.sealed`, so the user's other devices take the new key from the bucket (never in the clear).
///
/// A JSON document; `sealed` is AES-256-GCM (nonce | ciphertext | tag, base64) of the 32 key bytes under
/// HKDF-SHA256(wrapping key, info "rtsync sealed content key v1"), with the additional data binding the format,
/// version, user, key id, wrapping key id and creation time: a sealed key moved to another user or key id, or with
/// any field changed, fails to open.
public struct SealedContentKey: Codable, Sendable, Equatable {
    /// Always "rtsync-sealed-content-key".
    public var format = "rtsync-sealed-content-key"
    /// Always 1.
    public var version = 1
    /// The user whose key it is.
    public var user: String
    /// The id of the sealed key.
    public var keyID: String
    /// The id of the older key it is sealed under.
    public var wrappingKeyID: String
    /// When the sealed key was made, seconds since 1970 as a decimal number (exact, so a device taking it knows whether
    /// it is newer than its current key).
    public var created: String
    /// The sealed key bytes, base64.
    public var sealed: String

    /// Where the sealed copy of `keyID` of `user` is published.
    public static func objectKey(user: String, keyID: String) -> String { "\(user)/keys/\(keyID).sealed" }

    /// At most this many sealed keys are followed back to a key a device holds.
    public static let maxChain = 16

    private static func wrappingKey(_ key: ContentKey) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: key.key, info: Data("rtsync sealed content key v1".utf8), outputByteCount: 32)
    }

    private var additionalData: Data {
        Data([format, String(version), user, keyID, wrappingKeyID, created].joined(separator: "\u{0}").utf8)
    }

    /// `key` sealed under `wrapping` (an older key of `user` the other devices hold).
    public static func seal(_ key: ContentKey, under wrapping: ContentKey, user: String) -> SealedContentKey {
        var out = SealedContentKey(user: user, keyID: key.id, wrappingKeyID: wrapping.id, created: String(key.created.timeIntervalSince1970), sealed: "")
        let raw = key.key.withUnsafeBytes { Data($0) }
        out.sealed = try! AES.GCM.seal(raw, using: wrappingKey(wrapping), authenticating: out.additionalData).combined!.base64EncodedString()
        return out
    }

    /// The key, opened with `wrapping`; `object` (the encrypted object that needs it) and `source` (this document's
    /// object key) name them in errors.
    /// - Throws: ``EncryptionError/sealedKeyRejected(object:keyID:reason:)`` when it does not authenticate.
    public func open(with wrapping: ContentKey, object: String, source: String) throws -> ContentKey {
        guard wrapping.id == wrappingKeyID, let combined = Data(base64Encoded: sealed), let box = try? AES.GCM.SealedBox(combined: combined),
              let raw = try? AES.GCM.open(box, using: Self.wrappingKey(wrapping), authenticating: additionalData), raw.count == 32,
              let seconds = Double(created), seconds.isFinite else {
            throw EncryptionError.sealedKeyRejected(object: object, keyID: keyID, reason: "\(source) failed authentication")
        }
        return ContentKey(id: keyID, key: SymmetricKey(data: raw), created: Date(timeIntervalSince1970: seconds))
    }

    /// The document's bytes.
    public func encoded() -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return try! e.encode(self)
    }

    /// Parses a published sealed key that must be `user`'s key `keyID`; `object` and `source` as in ``open(with:object:source:)``.
    /// - Throws: ``EncryptionError/sealedKeyRejected(object:keyID:reason:)`` for anything else.
    public static func decode(_ data: Data, user: String, keyID: String, object: String, source: String) throws -> SealedContentKey {
        guard data.count <= 64 << 10, let doc = try? JSONDecoder().decode(SealedContentKey.self, from: data),
              doc.format == "rtsync-sealed-content-key", doc.version == 1 else {
            throw EncryptionError.sealedKeyRejected(object: object, keyID: keyID, reason: "\(source) is not a sealed content key this build reads")
        }
        guard doc.user == user, doc.keyID == keyID else {
            throw EncryptionError.sealedKeyRejected(object: object, keyID: keyID, reason: "\(source) holds key \(doc.keyID) of user \(doc.user)")
        }
        guard doc.wrappingKeyID.count == 16, doc.wrappingKeyID.allSatisfy(\.isHexDigit), doc.wrappingKeyID != keyID else {
            throw EncryptionError.sealedKeyRejected(object: object, keyID: keyID, reason: "\(source) names no usable wrapping key")
        }
        return doc
    }
}
