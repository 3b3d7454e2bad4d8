import BucketClient
import Crypto
import DiffFormat
import Foundation
import SyncEngine

/// What client-side encryption can cover, as named in `settings.json` (`"encryption": ["inbound", ...]`).
public enum EncryptedKind: String, CaseIterable, Sendable {
    /// Diffs in `<user>/inbound/`.
    case inbound
    /// Backups and compaction snapshots in `<user>/backups/`.
    case backups
    /// Recordings in `<user>/recordings/` (and their deleted copies in `<user>/trash/`).
    case recordings
    /// Images in `<user>/images/` (and their deleted copies in `<user>/trash/`).
    case images
    /// Not a folder: the file names of the encrypted media kinds are encrypted too (`EncryptedNames`). Not part of
    /// "all"; name it with at least one of recordings and images.
    case names

    /// The kinds of a comma-separated list ("all": inbound, backups, recordings and images; add "names" for
    /// encrypted media names).
    /// - Throws: `EncryptionError.keyFile` naming an unknown kind, or names without a media kind.
    public static func parse(_ text: String) throws -> [EncryptedKind] {
        var out: [EncryptedKind] = []
        for part in text.split(separator: ",") {
            let name = part.trimmingCharacters(in: .whitespaces)
            let kinds: [EncryptedKind]
            if name == "all" { kinds = [.inbound, .backups, .recordings, .images] } else {
                guard let kind = EncryptedKind(rawValue: name) else {
                    throw EncryptionError.keyFile(path: name, reason: "unknown kind; use inbound, backups, recordings, images, names or all")
                }
                kinds = [kind]
            }
            for k in kinds where !out.contains(k) { out.append(k) }
        }
        if out.contains(.names) && !out.contains(.recordings) && !out.contains(.images) {
            throw EncryptionError.keyFile(path: text, reason: "names encrypts the names of encrypted media: add recordings or images")
        }
        return out
    }
}

extension RTSyncHome {
    /// The user's content keys, or nil when this home has none.
    public func contentKeyring(passphrase: String? = nil) throws -> ContentKeyring? {
        try ContentKeyring.load(file: contentKeysFile, passphrase: passphrase)
    }

    /// Where downloads' ciphertext lands before it is decrypted (large uploads are encrypted as they go, with no copy here).
    public var encryptionStaging: URL { support.appendingPathComponent("encryption-staging") }

    /// The key prefixes `settings.encryption` covers for `user` (trash too when media is encrypted, since deleted
    /// media moves there as it is).
    public static func encryptedPrefixes(user: String, kinds: [String]) -> [String] {
        var out = kinds.compactMap { EncryptedKind(rawValue: $0) }.filter { $0 != .names }.map { "\(user)/\($0.rawValue)/" }
        if kinds.contains("recordings") || kinds.contains("images") { out.append("\(user)/trash/") }
        return out
    }

    /// `store`, wrapped in an `EncryptingStore` when the settings turn encryption on. With `initializing`, a home
    /// without a user yet gets `store` itself (init only reads `demo/`); otherwise that is refused, since the
    /// prefixes to encrypt are not known.
    /// - Throws: `EncryptionError.premiumRequired` on the free tier, `EncryptionError.noContentKey` when
    ///   this home has no key, `EncryptionError.noUserYet`; never returns an unencrypted store when
    ///   encryption is on and the user is known.
    public func encrypting(_ store: any ObjectStore, settings: RTSyncSettings, initializing: Bool = false) throws -> any ObjectStore {
        guard !settings.encryption.isEmpty, !(store is EncryptingStore) else { return store }
        guard settings.tier == .premium else { throw EncryptionError.premiumRequired }
        // The user Syncer syncs as (the database is opened only when the settings name none).
        var user = settings.userID
        if user.isEmpty, FileManager.default.fileExists(atPath: database.path), let db = try? SyncDatabase(path: database.path) {
            user = (try? db.syncUserID(settings: settings)) ?? ""
        }
        if user.isEmpty {
            if initializing { return store }
            throw EncryptionError.noUserYet(settings: settingsFile.path)
        }
        guard let keyring = try contentKeyring() else { throw EncryptionError.noContentKey(file: contentKeysFile.path) }
        var wrapped = EncryptingStore(inner: store, keyring: keyring, prefixes: Self.encryptedPrefixes(user: user, kinds: settings.encryption),
                                      staging: encryptionStaging, rejected: quarantine)
        wrapped.recipients = shareRecipients()
        let namedKinds = [EncryptedKind.recordings, .images].map(\.rawValue).filter(settings.encryption.contains)
        let encryptsNames = settings.encryption.contains(EncryptedKind.names.rawValue) && !namedKinds.isEmpty
        if encryptsNames {
            wrapped.names = EncryptedNames(user: user, kinds: namedKinds, keyring: keyring)
        }
        // Rotated keys and the share key travel through <user>/keys/ (sealed, signed by this device).
        wrapped.keyDirectory = BucketKeyDirectory(user: user, keyring: keyring, keyringFile: contentKeysFile, publishedFile: publishedKeysFile,
                                                  signingKey: try? DeviceKeys(home: self).signingKey(), encryptsNames: encryptsNames)
        let owner = user
        // Anyone may encrypt to the share key: only a share or request diff by another user in our inbound is taken,
        // and media in our media folders (what `share --with-media` sends; their names are never encrypted).
        wrapped.acceptShared = { key, file in
            if key.hasPrefix("\(owner)/recordings/") || key.hasPrefix("\(owner)/images/") { return true }
            return key.hasPrefix(Syncer.inboundPrefix(user: owner)) && ObjectStoreRemote.isShareFromAnotherUser(file, user: owner)
        }
        return wrapped
    }

    /// What this home has published to (or learned from) `<user>/keys/` in the bucket, so nothing is put twice.
    public var publishedKeysFile: URL { keys.appendingPathComponent("published-keys") }

    /// Where other users' share keys are kept (`<user>.pub`, 64 hex characters).
    public var shareKeysFolder: URL { keys.appendingPathComponent("share-keys") }

    /// Other users' share keys this home encrypts shares to, by user id.
    public func shareRecipients() -> [String: Curve25519.KeyAgreement.PublicKey] {
        var out: [String: Curve25519.KeyAgreement.PublicKey] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: shareKeysFolder.path)) ?? [] where name.hasSuffix(".pub") {
            let text = (try? String(contentsOf: shareKeysFolder.appendingPathComponent(name), encoding: .utf8)) ?? ""
            if let raw = Self.hexBytes(text.trimmingCharacters(in: .whitespacesAndNewlines)), raw.count == 32,
               let key = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw) {
                out[String(name.dropLast(4))] = key
            }
        }
        return out
    }

    /// This user's share key (public half, 64 hex characters) for other users to encrypt shares to; made and saved
    /// with the content keys when they have none.
    /// - Throws: `EncryptionError.noContentKey` when the home has no content keys.
    public func shareKeyHex() throws -> String {
        guard var ring = try contentKeyring() else { throw EncryptionError.noContentKey(file: contentKeysFile.path) }
        if ring.shareKey == nil {
            ring.shareKey = Curve25519.KeyAgreement.PrivateKey()
            try ring.save(to: contentKeysFile)
        }
        return ring.shareKey!.publicKey.rawRepresentation.map { String(format: "%02x", $0) }.joined()
    }

    /// Records another user's share key (64 hex characters): shares sent to that user are encrypted to it.
    /// - Throws: `EncryptionError.keyFile` when it is not an X25519 public key.
    public func addShareRecipient(user: String, publicKeyHex hex: String) throws {
        let text = hex.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let raw = Self.hexBytes(text), raw.count == 32, (try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw)) != nil else {
            throw EncryptionError.keyFile(path: hex, reason: "a share key is 64 hex characters (32 bytes), as `rtsync keys share-key` prints it")
        }
        guard !user.isEmpty, user.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw EncryptionError.keyFile(path: user, reason: "not a user id")
        }
        try FileManager.default.createDirectory(at: shareKeysFolder, withIntermediateDirectories: true)
        try Data((text.lowercased() + "\n").utf8).write(to: shareKeysFolder.appendingPathComponent(user + ".pub"), options: .atomic)
    }

    /// Bytes of a hex string, or nil.
    static func hexBytes(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        for i in stride(from: 0, to: chars.count, by: 2) {
            guard let b = UInt8(String(decoding: chars[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
            out.append(b)
        }
        return out
    }
}

extension ObjectStoreRemote {
    /// The prefixes the wrapped store encrypts (an `EncryptingStore`'s), else none.
    public var encryptedPrefixes: [String] { (store as? EncryptingStore)?.prefixes ?? [] }

    /// Puts the rotated keys (sealed) and the share key this home has not published yet into `<user>/keys/`; returns
    /// the keys written (none without encryption). Uploads of encrypted objects do it first by themselves.
    /// - Throws: the bucket's errors.
    @discardableResult
    public func publishKeys() async throws -> [String] {
        guard let encrypting = store as? EncryptingStore, let directory = encrypting.keyDirectory else { return [] }
        return try await directory.publishPending(to: encrypting.inner)
    }

    /// Opens the store a bucket URL names for `home`, encrypting what `settings.encryption` covers.
    /// - Throws: `BucketError.unsupportedURL`, or an `EncryptionError` when encryption is on but cannot be used.
    public static func open(_ url: String, home: RTSyncHome, settings: RTSyncSettings, initializing: Bool = false) throws -> ObjectStoreRemote {
        let raw = try makeObjectStore(urlString: url)
        return ObjectStoreRemote(store: try home.encrypting(raw, settings: settings, initializing: initializing), isLocal: raw is LocalFolderStore)
    }
}

extension ObjectStoreRemote {
    /// After a download failed with `error`: when that says a plaintext object sits in an encrypted `<user>/inbound/`,
    /// fetches it as it is and installs it at `file` only if it is a share or request diff another user wrote (other
    /// users cannot encrypt to this user's key, so their shares arrive as plaintext, as before encryption; the diff
    /// is then checked like any other, signatures included). Anything else stays refused: false.
    func acceptPlainShare(key: String, to file: URL, after error: Error) async throws -> Bool {
        guard case EncryptionError.notEncrypted = error, let encrypting = store as? EncryptingStore else { return false }
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1] == "inbound", !parts[0].isEmpty else { return false }
        let temp = file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).plain-share")
        defer { try? FileManager.default.removeItem(at: temp) }
        _ = try await encrypting.inner.download(key: key, to: temp)
        guard Self.isShareFromAnotherUser(temp, user: String(parts[0])) else { return false }
        try FileManager.default.moveItem(at: temp, to: file)
        // Not evidence of anything: the copy EncryptingStore kept when it refused the object goes.
        if let rejected = encrypting.rejected {
            try? FileManager.default.removeItem(at: rejected.appendingPathComponent((key as NSString).lastPathComponent + ".encrypted-rejected"))
        }
        return true
    }

    /// Whether `url` opens as a valid share or request diff whose author is not `user`.
    static func isShareFromAnotherUser(_ url: URL, user: String) -> Bool {
        // A diff travels compressed (DiffTransport): its metadata is read from an expanded copy.
        var expanded: URL?
        defer { if let expanded { try? FileManager.default.removeItem(at: expanded) } }
        if DiffTransport.isCompressed(file: url) {
            let copy = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).share-check")
            guard let data = try? Data(contentsOf: url),
                  (try? DiffTransport.expand(data, name: url.path, limit: DiffLimits.default.maxFileBytes, to: copy)) != nil else { return false }
            expanded = copy
        }
        guard let reader = try? DiffReader(url: url, contentsAt: expanded ?? url) else { return false }
        let m = reader.metadata
        return (m.kind == .share || m.kind == .request) && m.authorUser != user
    }
}

extension ObjectStoreRemote {
    /// On a device that does not encrypt `key`'s kind: removes a downloaded `file` that is an encrypted object and
    /// throws, so an encrypted diff or backup is never taken for a damaged one (and quarantined for good).
    /// - Throws: `EncryptionError.encryptionOff`.
    func refuseUnexpectedCiphertext(key: String, at file: URL) throws {
        if let encrypting = store as? EncryptingStore, encrypting.encrypts(key) { return }
        guard let handle = FileHandle(forReadingAtPath: file.path) else { return }
        let head = (try? handle.read(upToCount: EncryptionFormat.magic.count)) ?? Data()
        try? handle.close()
        guard head == Data(EncryptionFormat.magic) else { return }
        try? FileManager.default.removeItem(at: file)
        throw EncryptionError.encryptionOff(object: key)
    }
}

extension EncryptingStore {
    /// Checks that this store's keys open what the user's devices encrypted: the newest few objects under `prefixes`
    /// that carry a content-key header have their first chunk decrypted. Nothing is written.
    /// - Throws: `EncryptionError.unknownKey` or `EncryptionError.authenticationFailed`
    ///   naming the first object the keys do not open.
    public func checkKeysOpen(prefixes: [String], objectsPerPrefix: Int = 2) async throws {
        for prefix in prefixes {
            let newest = try await inner.listAll(prefix: prefix).filter { $0.size >= Int64(EncryptionFormat.headerSize) }
                .sorted { $0.key > $1.key }
            var checked = 0
            for object in newest where checked < objectsPerPrefix {
                // A name that does not open with these keys is as telling as content that does not.
                let plainKey = try names?.plainKey(object.key) ?? object.key
                let head = try await inner.get(key: object.key, range: ByteRange(start: 0, end: Int64(EncryptionFormat.headerSize) - 1), ifMatch: nil)
                // Plaintext shares and objects encrypted to the share key say nothing about the content keys.
                guard head.prefix(8) == Data(EncryptionFormat.magic), !EncryptionFormat.isSharedObject(head) else { continue }
                _ = try await get(key: plainKey, range: ByteRange(start: 0, end: 0), ifMatch: nil)
                checked += 1
            }
        }
    }
}
