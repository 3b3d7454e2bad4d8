import Crypto
import Foundation

/// A user's share key as published at `<user>/keys/share-key.json`, so other users find it without a hand-over;
/// signed by the publishing device's Ed25519 key, which a sender that trusts that key (`rtsync keys trust`) checks.
public struct PublishedShareKey: Codable, Sendable, Equatable {
    /// Always "rtsync-share-key".
    public var format = "rtsync-share-key"
    /// Always 1.
    public var version = 1
    /// The user the key belongs to.
    public var user: String
    /// The X25519 public key, 64 hex characters.
    public var shareKey: String
    /// Whether the user encrypts media names, so shared media goes to it as a parcel (`<user>/shared-media/`).
    public var encryptsNames: Bool
    /// The signing device's Ed25519 public key, hex (nil: unsigned).
    public var signer: String?
    /// Ed25519 signature of format, version, user, share key and the names flag, hex.
    public var signature: String?

    /// Where `user`'s share key is published.
    public static func objectKey(user: String) -> String { "\(user)/keys/share-key.json" }

    private var signedBytes: Data {
        Data([format, String(version), user, shareKey, encryptsNames ? "names" : "plain-names"].joined(separator: "\u{0}").utf8)
    }

    /// The document for `user`'s share key, signed with `signingKey` when given.
    public static func make(user: String, shareKey: Curve25519.KeyAgreement.PublicKey, encryptsNames: Bool,
                            signingKey: Curve25519.Signing.PrivateKey?) -> PublishedShareKey {
        var doc = PublishedShareKey(user: user, shareKey: Hashing.hex(shareKey.rawRepresentation), encryptsNames: encryptsNames)
        if let signingKey {
            doc.signer = Hashing.hex(signingKey.publicKey.rawRepresentation)
            doc.signature = Hashing.hex(try! signingKey.signature(for: doc.signedBytes))
        }
        return doc
    }

    /// The share key.
    public var publicKey: Curve25519.KeyAgreement.PublicKey? {
        [UInt8](hexString: shareKey).flatMap { $0.count == 32 ? try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: $0) : nil }
    }

    /// Whether the signature is valid for ``signer`` (false when unsigned or malformed).
    public var signatureIsValid: Bool {
        guard let signer, let signature, let pub = [UInt8](hexString: signer), let sig = [UInt8](hexString: signature),
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: pub) else { return false }
        return key.isValidSignature(sig, for: signedBytes)
    }

    /// The document's bytes.
    public func encoded() -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try! e.encode(self)
    }

    /// Parses `user`'s published document (`object` names it in errors).
    /// - Throws: ``EncryptionError/shareKeyRejected(user:object:reason:)`` for anything else.
    public static func decode(_ data: Data, user: String, object: String) throws -> PublishedShareKey {
        guard data.count <= 64 << 10, let doc = try? JSONDecoder().decode(PublishedShareKey.self, from: data),
              doc.format == "rtsync-share-key", doc.version == 1, doc.publicKey != nil else {
            throw EncryptionError.shareKeyRejected(user: user, object: object, reason: "not a share key document this build reads")
        }
        guard doc.user == user else { throw EncryptionError.shareKeyRejected(user: user, object: object, reason: "it names user \(doc.user)") }
        return doc
    }

    /// A short form of a share key to compare out of band, as ssh prints host keys: `SHA256:` and the base64 of its
    /// SHA-256, without padding.
    public static func fingerprint(_ key: Curve25519.KeyAgreement.PublicKey) -> String {
        "SHA256:" + Data(SHA256.hash(data: key.rawRepresentation)).base64EncodedString().replacingOccurrences(of: "=", with: "")
    }

    /// ``fingerprint(_:)`` of a share key given as 64 hex characters, or nil when it is not one.
    public static func fingerprint(hex: String) -> String? {
        [UInt8](hexString: hex).flatMap { try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: $0) }.map(fingerprint)
    }
}
