import BucketClient
import Crypto
import Foundation
import SyncEngine

/// Another user's share key, as a sender found it before sharing: recorded earlier, or taken from the user's
/// published `<user>/keys/share-key.json` on first use (as ssh takes a host key), checked against the device key
/// trusted for that user when there is one.
public struct ShareRecipient: Sendable {
    /// How the key was found.
    public enum Source: String, Sendable {
        /// Recorded before (`rtsync keys add-recipient`, or an earlier share); the published key, if any, is the same.
        case recorded
        /// Taken from the bucket now and recorded: trust on first use.
        case firstUse
        /// Taken from the bucket now, signed by the device key trusted for the user (`rtsync keys trust`), and recorded.
        case verified
    }

    /// The recipient's user id.
    public let user: String
    /// The key shares to the user are encrypted to.
    public let publicKey: Curve25519.KeyAgreement.PublicKey
    /// The key's fingerprint (`SHA256:...`), to compare out of band.
    public let fingerprint: String
    /// Whether the recipient publishes that it encrypts media names (false when it publishes nothing).
    public let encryptsNames: Bool
    /// How the key was found.
    public let source: Source
}

extension RTSyncHome {
    /// The share key to encrypt what goes to `user` with, before a share: the published `<user>/keys/share-key.json`
    /// (one GET) compared with the one recorded here. A published key is recorded on first use; a published key
    /// that differs from the recorded one is refused, as is one not signed by the device key `trusted` (public key hex
    /// to user id, as `DeviceKeys.trustedIdentities`) names for `user` when there is such a key. Nil when no key is
    /// recorded or published, and when `remote` does not encrypt unless `withMedia` (shares then travel as they always
    /// did): a sender that does not encrypt still looks the key up before sending media, since a recipient that
    /// encrypts media names can only take shared media as a parcel encrypted to that key.
    /// - Throws: `EncryptionError.shareKeyChanged`, `EncryptionError.shareKeyRejected`, or the bucket's errors;
    ///   nothing is recorded then.
    public func shareRecipient(_ user: String, through remote: ObjectStoreRemote, trusted: [String: String],
                               withMedia: Bool = false) async throws -> ShareRecipient? {
        guard remote.store is EncryptingStore || withMedia else { return nil }
        let object = PublishedShareKey.objectKey(user: user)
        let recorded = shareRecipients()[user]
        let data: Data?
        do { data = try await remote.rawStore.get(key: object) } catch BucketError.notFound { data = nil }
        guard let data else {
            return recorded.map { ShareRecipient(user: user, publicKey: $0, fingerprint: PublishedShareKey.fingerprint($0), encryptsNames: false, source: .recorded) }
        }
        let doc = try PublishedShareKey.decode(data, user: user, object: object)
        let published = doc.publicKey!
        if doc.signature != nil && !doc.signatureIsValid {
            throw EncryptionError.shareKeyRejected(user: user, object: object, reason: "its signature does not verify")
        }
        let trustedForUser = Set(trusted.filter { $0.value == user }.map { $0.key.lowercased() })
        let signedByTrusted = doc.signatureIsValid && doc.signer.map { trustedForUser.contains($0.lowercased()) } == true
        if !trustedForUser.isEmpty && !signedByTrusted {
            throw EncryptionError.shareKeyRejected(user: user, object: object, reason: "it is not signed by the device key trusted for \(user)")
        }
        let fingerprint = PublishedShareKey.fingerprint(published)
        if let recorded {
            guard recorded.rawRepresentation == published.rawRepresentation else {
                throw EncryptionError.shareKeyChanged(user: user, recorded: PublishedShareKey.fingerprint(recorded), published: fingerprint, object: object)
            }
            return ShareRecipient(user: user, publicKey: published, fingerprint: fingerprint, encryptsNames: doc.encryptsNames, source: .recorded)
        }
        try addShareRecipient(user: user, publicKeyHex: doc.shareKey)
        return ShareRecipient(user: user, publicKey: published, fingerprint: fingerprint, encryptsNames: doc.encryptsNames,
                              source: signedByTrusted ? .verified : .firstUse)
    }
}
