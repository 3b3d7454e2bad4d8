import Foundation

/// Why an encrypted object or a content key could not be used. Every case names the object or file.
public enum EncryptionError: Error, Sendable, Equatable {
    /// The object does not start with the encryption header although its prefix is encrypted: a plaintext object
    /// where ciphertext is expected (written without encryption, or a downgrade).
    case notEncrypted(object: String)
    /// The header names a format version (or algorithm, or chunk size) this build does not read.
    case unsupportedFormat(object: String, reason: String)
    /// The object was encrypted with a content key this device does not hold.
    case unknownKey(object: String, keyID: String)
    /// A chunk failed authentication: the object was changed, chunks were reordered, replayed or taken from another
    /// object, or it was encrypted with another key of the same id.
    case authenticationFailed(object: String, chunk: Int64)
    /// The object ends before its final chunk: it was cut short.
    case truncated(object: String)
    /// Bytes follow the final chunk, or the object's size cannot be an encrypted object's.
    case malformed(object: String, reason: String)
    /// This home has no content key (`<home>/keys/content-keys.json`).
    case noContentKey(file: String)
    /// A key file could not be read, written or parsed.
    case keyFile(path: String, reason: String)
    /// A passphrase-wrapped key file did not open with the passphrase given.
    case wrongPassphrase(path: String)
    /// An imported key has an id this home already holds for another key.
    case conflictingKey(keyID: String, path: String)
    /// Encryption is a premium feature and this home is on the free tier.
    case premiumRequired
    /// The object is encrypted but this device does not encrypt its kind (it has no key, or other settings).
    case encryptionOff(object: String)
    /// Encryption is on but the home has no user id yet, so the prefixes to encrypt are unknown.
    case noUserYet(settings: String)
    /// The object was encrypted to the user's share key (anyone may do that) but is not a share or request diff
    /// from another user, the only thing accepted that way.
    case notAShare(object: String)
    /// An object under an encrypted media name is not bound to a name, or one bound to its name is read without it.
    case nameBinding(object: String, reason: String)
    /// An object's name under a folder with encrypted names does not open with this device's keys: a wrong key, a
    /// name written without name encryption, or a changed name.
    case nameNotDecryptable(object: String)
    /// A media file name (one path segment) is too long to encrypt within the 255 bytes a name may have.
    case nameTooLong(path: String, limit: Int)
    /// The object needs a content key this device does not hold, and the sealed copy of it in the bucket
    /// (`<user>/keys/<id>.sealed`) cannot be used: it fails authentication, names another user or key, or its chain
    /// of older keys does not reach one this device holds.
    case sealedKeyRejected(object: String, keyID: String, reason: String)
    /// The share key another user publishes in the bucket is not the one recorded for them (trust on first use, as
    /// ssh's known hosts): `recorded` and `published` are fingerprints.
    case shareKeyChanged(user: String, recorded: String, published: String, object: String)
    /// Another user's published share key cannot be used: damaged, naming another user, or not signed by the device
    /// key trusted for that user.
    case shareKeyRejected(user: String, object: String, reason: String)
}

extension EncryptionError: LocalizedError, CustomStringConvertible {
    /// One line saying what failed and on which object or file, in the CLI's `what (key)` form.
    public var description: String {
        switch self {
        case .notEncrypted(let o): return "object is not encrypted where encryption is on (a plaintext or downgraded object) (\(o))"
        case .unsupportedFormat(let o, let r): return "object's encryption format is not supported: \(r) (\(o))"
        case .unknownKey(let o, let id): return "object is encrypted with content key \(id), which this device does not hold (\(o))"
        case .authenticationFailed(let o, let c): return "encrypted object failed authentication at chunk \(c): tampered, reordered, replayed or swapped chunks, or a wrong key (\(o))"
        case .truncated(let o): return "encrypted object is truncated: its final chunk is missing (\(o))"
        case .malformed(let o, let r): return "encrypted object is malformed: \(r) (\(o))"
        case .noContentKey(let f): return "this home has no content key for encryption (\(f))"
        case .keyFile(let p, let r): return "cannot use key file: \(r) (\(p))"
        case .wrongPassphrase(let p): return "the passphrase does not open this key file (\(p))"
        case .conflictingKey(let id, let p): return "key id \(id) is already held for a different key (\(p))"
        case .premiumRequired: return "client-side encryption is not available on the free tier"
        case .encryptionOff(let o): return "object is encrypted but this device does not decrypt its kind (\(o))"
        case .noUserYet(let f): return "encryption is on but this home has no user yet (\(f))"
        case .notAShare(let o): return "object is encrypted to this user's share key but is not a share or request from another user (\(o))"
        case .nameBinding(let o, let r): return "encrypted object cannot be opened under this name: \(r) (\(o))"
        case .nameNotDecryptable(let o): return "object name does not decrypt with this device's keys: a wrong key, a name written without name encryption, or a changed name (\(o))"
        case .nameTooLong(let p, let l): return "a file or folder name longer than \(l) bytes cannot be stored under an encrypted name (\(p))"
        case .sealedKeyRejected(let o, let id, let r):
            return "object is encrypted with content key \(id), which this device does not hold, and its sealed copy in the bucket cannot be used: \(r) (\(o))"
        case .shareKeyChanged(let u, let rec, let pub, let o):
            return "the share key user \(u) publishes (\(pub)) is not the one recorded for them (\(rec)): it changed, or someone replaced it (\(o))"
        case .shareKeyRejected(let u, let o, let r): return "cannot use the share key published for user \(u): \(r) (\(o))"
        }
    }

    /// What the user can do about it.
    public var hint: String? {
        switch self {
        case .notEncrypted, .authenticationFailed, .truncated, .malformed, .notAShare, .nameBinding:
            return "nothing was installed; restore the object from a trusted copy, or delete it if it was not written by your devices"
        case .unsupportedFormat: return "update rtsync on this device"
        case .unknownKey: return "the device that made the key publishes it sealed with its next upload (`rtsync keys rotate` does at once), after which a sync here takes it; or import it from a device that has it: `rtsync keys export F` there, `rtsync keys import F` here"
        case .noContentKey: return "create one with `rtsync keys create`, or import your other device's with `rtsync keys import F`"
        case .keyFile: return "give the file `rtsync keys export` wrote"
        case .wrongPassphrase: return "give the passphrase used with `rtsync keys export --passphrase-file`"
        case .conflictingKey: return "this file's keys belong to another user's home; check the file"
        case .premiumRequired: return "switch this home to premium with `rtsync init --tier premium`"
        case .encryptionOff: return "import the user's key file from one of their devices: `rtsync keys import F` (it also turns on the kinds they encrypt)"
        case .nameNotDecryptable: return "import the user's key file (`rtsync keys import F`); an object uploaded before names were encrypted must be uploaded again (or removed) with the setting on"
        case .nameTooLong: return "rename it shorter, or turn encrypted names off (`rtsync keys encrypt` without `names`)"
        case .noUserYet: return "run `rtsync init` first (`rtsync init --user U --key-file F` to join an existing user)"
        case .sealedKeyRejected:
            return "nothing was applied; import the key from a device that has it (`rtsync keys export F` there, `rtsync keys import F` here) and check who can write to <user>/keys/ in the bucket"
        case .shareKeyChanged(let u, _, _, _):
            return "nothing was sent; ask \(u) for their key out of band (`rtsync keys share-key` on their device) and, if it is the published one, accept it with `rtsync keys add-recipient \(u) HEX`"
        case .shareKeyRejected(let u, _, _):
            return "nothing was sent; get \(u)'s share key out of band (`rtsync keys share-key` there) and record it with `rtsync keys add-recipient \(u) HEX`"
        }
    }

    /// Same as ``description``.
    public var errorDescription: String? { description }
}
