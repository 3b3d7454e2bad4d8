import BucketClient
import Foundation

extension ObjectStoreRemote {
    /// Where `user`'s passphrase-sealed key backup lives in the bucket: what a new device of the user opens with the
    /// passphrase alone (`rtsync init --user U --passphrase-file P`).
    public static func keyBackupKey(user: String) -> String { "\(user)/keys/content-keys.passphrase" }

    /// Fewest characters a passphrase sealing a key backup in the bucket may have: whoever can read the bucket can
    /// try passphrases against it offline.
    public static let keyBackupMinimumPassphrase = 12

    /// The scrypt cost of a key backup in the bucket: N=2^17 (128 MiB, about half a second a guess here), four times
    /// the cost of an exported key file, since anyone who reads the bucket may try passphrases against it.
    public static let keyBackupScryptLogN = 17

    /// Puts `ring` sealed under `passphrase` (scrypt, ``keyBackupScryptLogN``; AES-256-GCM) at
    /// ``keyBackupKey(user:)``, replacing an earlier backup; returns the object key. The keys are never in the clear.
    /// - Throws: `EncryptionError.keyFile` when the passphrase is shorter than ``keyBackupMinimumPassphrase``, or the
    ///   bucket's errors.
    @discardableResult
    public func uploadKeyBackup(_ ring: ContentKeyring, user: String, passphrase: String) async throws -> String {
        let key = Self.keyBackupKey(user: user)
        guard passphrase.count >= Self.keyBackupMinimumPassphrase else {
            throw EncryptionError.keyFile(path: key, reason: "a passphrase for a key backup in the bucket needs at least \(Self.keyBackupMinimumPassphrase) characters: whoever reads the bucket can try passphrases against it")
        }
        let sealed = try ring.wrapped(passphrase: passphrase, logN: Self.keyBackupScryptLogN)
        _ = try await rawStore.put(key: key, data: sealed, ifNoneMatch: false)
        return key
    }

    /// Opens `user`'s key backup in the bucket with `passphrase`; nil when the user has none.
    /// - Throws: `EncryptionError.wrongPassphrase` or `EncryptionError.keyFile` naming the object, or the bucket's
    ///   errors.
    public func downloadKeyBackup(user: String, passphrase: String) async throws -> ContentKeyring? {
        let key = Self.keyBackupKey(user: user)
        let data: Data
        do { data = try await rawStore.get(key: key) } catch BucketError.notFound { return nil }
        guard data.count <= 1 << 20, ContentKeyring.isWrapped(data) else {
            throw EncryptionError.keyFile(path: key, reason: "not a passphrase-sealed key file: the bucket must never hold keys in the clear")
        }
        return try ContentKeyring.decode(data, passphrase: passphrase, path: key)
    }
}
