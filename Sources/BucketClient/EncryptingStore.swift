import Crypto
import Foundation

/// Wraps any store and encrypts the objects under chosen prefixes (``EncryptionFormat``) on their way in, and
/// decrypts them on their way out; keys, layout and every other object stay as they are.
///
/// Listings and HEADs report plaintext sizes (computed from the ciphertext size, nothing is decrypted), so size
/// checks, progress and media sync compare plaintext with plaintext; the wrapped store's own download checks (size,
/// server checksum) run on the ciphertext. Large files are encrypted as they are uploaded, chunk by chunk: into a
/// local folder's temporary file, or part by part into an S3 multipart upload whose salt follows from the content, so
/// an upload interrupted midway resumes on the next run with the same bytes (`EncryptedParts`).
public struct EncryptingStore: ObjectStore {
    /// The store holding the ciphertext.
    public let inner: any ObjectStore
    /// The user's content keys (with those ``keyDirectory`` learned from the bucket).
    public var keyring: ContentKeyring { keyDirectory?.keyring ?? initialKeyring }
    private let initialKeyring: ContentKeyring
    /// Hands rotated keys between the user's devices through `<user>/keys/` and publishes the share key (nil: keys
    /// only from this home's file). With it, keys not yet published go up before the first object encrypted with
    /// them, and an object encrypted with a key this device lacks fetches that key's sealed copy first.
    public var keyDirectory: BucketKeyDirectory?
    /// Key prefixes whose objects are encrypted (e.g. `user/inbound/`).
    public let prefixes: [String]
    /// Folder for the ciphertext of downloads (and of large uploads to a store that is neither a local folder nor S3).
    public let staging: URL
    /// Where the ciphertext of an object that fails to decrypt is kept as evidence (nil: deleted).
    public let rejected: URL?
    /// Files up to this size are encrypted in memory and stored in one put, as S3 stores files up to its default
    /// multipart threshold; larger ones are encrypted as they are stored (on S3: multipart, resumable).
    public var inMemoryLimit: Int = 16 << 20
    /// Other users' share keys by user id: what is put into `<user>/inbound/` for one of them is encrypted to it.
    public var recipients: [String: Curve25519.KeyAgreement.PublicKey] = [:]
    /// Decides whether a downloaded object another user encrypted to this user's share key may be installed (given
    /// its key and decrypted file); nil: never.
    public var acceptShared: (@Sendable (_ key: String, _ file: URL) -> Bool)?
    /// Encrypted media names (nil: names as they are). Callers use plaintext keys; this store maps them to the
    /// bucket's encrypted keys and back, and binds each such object's content to its plaintext media path.
    public var names: EncryptedNames?

    /// Wraps `inner`, encrypting objects whose keys start with one of `prefixes`.
    public init(inner: any ObjectStore, keyring: ContentKeyring, prefixes: [String], staging: URL, rejected: URL? = nil) {
        self.inner = inner
        initialKeyring = keyring
        self.prefixes = prefixes
        self.staging = staging
        self.rejected = rejected
    }

    /// Whether the object under `key` is encrypted.
    public func encrypts(_ key: String) -> Bool { prefixes.contains { key.hasPrefix($0) } }

    /// The share key of the user whose inbound folder (a shared diff) or media folder (shared media: `share
    /// --with-media` puts the rows' files into the recipient's `recordings/` and `images/`) `key` is in, when known.
    func recipient(of key: String) -> Curve25519.KeyAgreement.PublicKey? {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 3, (parts.count == 3 && parts[1] == "inbound") || parts[1] == "recordings" || parts[1] == "images" else { return nil }
        return recipients[String(parts[0])]
    }

    /// The wrapped store's name, marked as encrypted.
    public var displayName: String { inner.displayName + " (encrypted)" }
    /// The wrapped store's request counter.
    public var requestCounter: RequestCounter { inner.requestCounter }

    /// `info` with the plaintext size of an encrypted object, under plaintext key `key` (default: its own key).
    private func plain(_ info: ObjectInfo, key: String? = nil) -> ObjectInfo {
        var out = info
        if let key { out.key = key }
        guard encrypts(out.key), let size = EncryptionFormat.plaintextSize(ciphertextSize: info.size) else { return out }
        out.size = size
        return out
    }

    /// A listed object of the wrapped store as callers see it: plaintext key and size.
    private func listed(_ info: ObjectInfo) throws -> ObjectInfo {
        guard let names else { return plain(info) }
        return plain(info, key: try names.plainKey(info.key))
    }

    /// The wrapped store's key for plaintext `key` (encrypted media names when ``names`` is set).
    public func bucketKey(_ key: String) throws -> String { try names?.bucketKey(key) ?? key }

    /// The media path an object under `key` is bound to, when its name is encrypted.
    private func bound(_ key: String) -> String? { names?.boundPath(of: key) }

    /// Lists like the wrapped store, with plaintext sizes for encrypted objects (nothing is read or decrypted). With
    /// encrypted names, keys are decrypted; a listing whose prefix (or start) lies inside a folder with encrypted names
    /// lists that folder whole and returns one page in plaintext key order (encrypted names sort differently), and
    /// pages of a wider listing hold decrypted keys in the bucket's order.
    /// - Throws: ``EncryptionError/nameNotDecryptable(object:)`` for a name this device's keys do not open.
    public func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        if let names, continuationToken == nil, names.covers(prefix) || startAfter.map(names.covers) == true {
            var rawPrefix = prefix
            if let (root, _) = names.area(of: prefix) {
                // Whole segments of the prefix are encrypted; a partial last one is matched after decryption.
                let rest = prefix.dropFirst(root.count)
                let folder = rest.lastIndex(of: "/").map { String(rest[...$0]) } ?? ""
                rawPrefix = folder.isEmpty ? root : try names.bucketKey(root + folder)
            }
            let objects = try await inner.listAll(prefix: rawPrefix).map(listed)
                .filter { object in object.key.hasPrefix(prefix) && (startAfter.map { s in s.utf8.lexicographicallyPrecedes(object.key.utf8) } ?? true) }
                .sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            return ObjectPage(objects: objects, nextContinuationToken: nil)
        }
        var page = try await inner.list(prefix: prefix, startAfter: startAfter, maxKeys: maxKeys, continuationToken: continuationToken)
        page.objects = try page.objects.map(listed)
        return page
    }

    /// Lists the folders in the wrapped store (in bucket order, as few pages as it takes), then decrypts the names;
    /// returned in plaintext key order.
    public func listFolders(_ folders: [String]) async throws -> [ObjectInfo] {
        guard let names else { return try await inner.listFolders(folders).map { plain($0) } }
        let raw = try folders.map { folder in
            // A folder's whole segments are encrypted like a key's (its trailing "/" leaves an empty last part).
            let f = folder.hasSuffix("/") || folder.isEmpty ? folder : folder + "/"
            guard names.covers(f) else { return f }
            return try names.bucketKey(String(f.dropLast())) + "/"
        }
        return try await inner.listFolders(raw).map(listed).sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
    }

    /// HEAD of the wrapped store, with the plaintext size for an encrypted object.
    public func head(key: String) async throws -> ObjectInfo { plain(try await inner.head(key: try bucketKey(key)), key: key) }

    /// Deletes from the wrapped store.
    public func delete(key: String) async throws { try await inner.delete(key: try bucketKey(key)) }

    // MARK: - Reading

    /// The plaintext of an object, or of `range` of it (fetching the header and only the chunks the range needs).
    /// - Throws: ``EncryptionError`` naming the object when it is not sound ciphertext for a key of ``keyring``.
    public func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data {
        let raw = try bucketKey(key)
        guard encrypts(key) else { return try await inner.get(key: raw, range: range, ifMatch: ifMatch) }
        guard let range, range.start > 0 || range.end != nil else {
            let data = try await inner.get(key: raw, range: nil, ifMatch: ifMatch)
            try await ensureKey(header: data, object: key)
            return try EncryptionFormat.decrypt(data, keyring: keyring, object: key, name: bound(key))
        }
        // A ranged read fetches the header and only the chunks holding the range.
        let headerBytes = try await inner.get(key: raw, range: ByteRange(start: 0, end: Int64(EncryptionFormat.headerSize) - 1), ifMatch: ifMatch)
        try await ensureKey(header: headerBytes, object: key)
        let header = try EncryptionFormat.Header(headerBytes, object: key)
        let cipher = try EncryptionFormat.ChunkCipher(header: header, keyring: keyring, object: key, name: bound(key))
        let span = EncryptionFormat.chunkSpan(plainStart: range.start, plainEnd: range.end)
        let body = try await inner.get(key: raw, range: span.range, ifMatch: ifMatch)
        return try EncryptionFormat.openSpan(body, span: span, range: range, cipher: cipher)
    }

    /// When `header` (an object's first bytes) names a content key this device does not hold, learns it from the
    /// bucket through ``keyDirectory``; anything else is left to decryption to judge.
    /// - Throws: ``EncryptionError/unknownKey(object:keyID:)`` or ``EncryptionError/sealedKeyRejected(object:keyID:reason:)``.
    private func ensureKey(header: Data, object: String) async throws {
        guard let keyDirectory, let parsed = try? EncryptionFormat.Header(header, object: object),
              parsed.algorithm != EncryptionFormat.algorithmShareX25519, keyring.key(id: parsed.keyID) == nil else { return }
        try await keyDirectory.learn(keyID: parsed.keyID, object: object, from: inner)
    }

    /// ``ensureKey(header:object:)`` for a downloaded encrypted file.
    private func ensureKey(file: URL, object: String) async throws {
        guard keyDirectory != nil, let handle = FileHandle(forReadingAtPath: file.path) else { return }
        let head = (try? handle.read(upToCount: EncryptionFormat.headerSize)) ?? Data()
        try? handle.close()
        try await ensureKey(header: head, object: object)
    }

    /// Publishes what ``keyDirectory`` has not yet (a rotated key, the share key) before an object encrypted with the
    /// current key goes up.
    private func publishKeys() async throws {
        try await keyDirectory?.publishPending(to: inner)
    }

    private func stagingURL(for key: String, suffix: String) -> URL {
        staging.appendingPathComponent(Hashing.sha256Hex(Data(key.utf8)).prefix(32) + suffix)
    }

    /// Decrypts `cipherFile` into `fileURL` through a temporary file; a failure keeps the ciphertext in ``rejected``.
    private func install(_ cipherFile: URL, key: String, to fileURL: URL) throws {
        try LocalFiles.createParent(of: fileURL)
        let temp = LocalFiles.temporaryURL(beside: fileURL)
        do {
            if try EncryptionFormat.decryptFile(cipherFile, to: temp, keyring: keyring, object: key, name: bound(key)), acceptShared?(key, temp) != true {
                throw EncryptionError.notAShare(object: key)
            }
        } catch {
            try? FileManager.default.removeItem(at: temp)
            if let rejected, error is EncryptionError {
                try? FileManager.default.createDirectory(at: rejected, withIntermediateDirectories: true)
                let name = (key as NSString).lastPathComponent + ".encrypted-rejected"
                let target = rejected.appendingPathComponent(name)
                try? FileManager.default.removeItem(at: target)
                try? FileManager.default.moveItem(at: cipherFile, to: target)
            }
            throw error
        }
        try LocalFiles.moveAtomically(temp, to: fileURL)
    }

    /// On a kind this store does not encrypt: a downloaded media file that another user encrypted to this user's share
    /// key (shared media) is decrypted in place when ``acceptShared`` takes it; any other object encrypted to the share
    /// key is removed and refused. Everything else is left as it is.
    /// - Throws: ``EncryptionError`` naming the object.
    private func openSharedMedia(key: String, at fileURL: URL) throws {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 3, parts[1] == "recordings" || parts[1] == "images",
              let handle = FileHandle(forReadingAtPath: fileURL.path) else { return }
        let head = (try? handle.read(upToCount: EncryptionFormat.headerSize)) ?? Data()
        try? handle.close()
        guard EncryptionFormat.isSharedObject(head) else { return }
        let cipherFile = stagingURL(for: key, suffix: ".shared")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(at: cipherFile)
        do { try FileManager.default.moveItem(at: fileURL, to: cipherFile) } catch {
            throw BucketError.localIO(path: fileURL.path, description: error.localizedDescription)
        }
        defer { try? FileManager.default.removeItem(at: cipherFile) }
        try install(cipherFile, key: key, to: fileURL)
    }

    /// Downloads and decrypts an object into `fileURL` (see ``download(key:to:expecting:)``).
    @discardableResult
    public func download(key: String, to fileURL: URL) async throws -> ObjectInfo {
        try await download(key: key, to: fileURL, expecting: nil)
    }

    /// Downloads the ciphertext into staging (checked against the listed size as ciphertext, resumable), decrypts it
    /// into `fileURL`; when decryption fails nothing is installed and the ciphertext goes to ``rejected``.
    @discardableResult
    public func download(key: String, to fileURL: URL, expecting listed: ObjectInfo?) async throws -> ObjectInfo {
        let raw = try bucketKey(key)
        var rawListed = listed
        rawListed?.key = raw
        guard encrypts(key) else {
            let info = try await inner.download(key: raw, to: fileURL, expecting: rawListed)
            try openSharedMedia(key: key, at: fileURL)
            return plain(info, key: key)
        }
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        // The ciphertext lands in staging (resumable there), checked against the listed size as ciphertext.
        let cipherFile = stagingURL(for: key, suffix: ".download")
        defer { try? FileManager.default.removeItem(at: cipherFile) }
        var expected = rawListed
        expected?.size = EncryptionFormat.ciphertextSize(plaintextSize: listed?.size ?? 0)
        let info = try await inner.download(key: raw, to: cipherFile, expecting: expected)
        try await ensureKey(file: cipherFile, object: key)
        try install(cipherFile, key: key, to: fileURL)
        return plain(info, key: key)
    }

    // MARK: - Writing

    /// Encrypts `data` with the current key and stores it.
    @discardableResult
    public func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo {
        if !encrypts(key), let recipient = recipient(of: key) {
            return plain(try await inner.put(key: key, data: EncryptionFormat.encrypt(data, to: recipient), ifNoneMatch: ifNoneMatch))
        }
        let raw = try bucketKey(key)
        guard encrypts(key) else { return plain(try await inner.put(key: raw, data: data, ifNoneMatch: ifNoneMatch), key: key) }
        try await publishKeys()
        return plain(try await inner.put(key: raw, data: EncryptionFormat.encrypt(data, keyring: keyring, name: bound(key)), ifNoneMatch: ifNoneMatch), key: key)
    }

    /// Files a build before this one left in staging (an encrypted copy per large upload, `<id>.upload`, with its
    /// resume file), and temporary files of uploads through staging, untouched for a week: removed.
    private func removeAbandonedStaging() {
        let fm = FileManager.default
        let cutoff = Date().addingTimeInterval(-7 * 24 * 3600)
        for name in (try? fm.contentsOfDirectory(atPath: staging.path)) ?? [] {
            let url = staging.appendingPathComponent(name)
            guard let st = FileStat.of(url.path), st.modificationDate < cutoff else { continue }
            try? fm.removeItem(at: url)
        }
    }

    /// Encrypts and stores a file (see ``putReturningSHA256(key:fileURL:)``).
    @discardableResult
    public func put(key: String, fileURL: URL) async throws -> ObjectInfo {
        try await putReturningSHA256(key: key, fileURL: fileURL).info
    }

    /// Encrypts and stores a file and returns the SHA-256 of its plaintext: in memory up to ``inMemoryLimit``; a
    /// larger one straight into a local folder's temporary file, or to S3 part by part as a resumable multipart
    /// upload (`EncryptedParts`), with no staging copy of the ciphertext.
    public func putReturningSHA256(key: String, fileURL: URL) async throws -> (info: ObjectInfo, sha256: String) {
        let recipient = encrypts(key) ? nil : recipient(of: key)
        let raw = try bucketKey(key)
        guard encrypts(key) || recipient != nil else {
            let (info, sha) = try await inner.putReturningSHA256(key: raw, fileURL: fileURL)
            return (plain(info, key: key), sha)
        }
        guard let st = FileStat.of(fileURL.path) else { throw BucketError.localIO(path: fileURL.path, description: "no such file") }
        try await publishKeys()
        let name = recipient == nil ? bound(key) : nil
        if st.size <= Int64(inMemoryLimit) { return try await putInMemory(key: key, raw: raw, fileURL: fileURL, name: name, recipient: recipient) }
        removeAbandonedStaging()
        // A local folder takes the ciphertext straight into its temporary file (one write of every byte, as a plain
        // put's copy); there is no multipart upload to resume.
        if let local = inner as? LocalFolderStore {
            var sha = ""
            let info = try local.put(key: raw) { tmp in sha = try encryptFile(fileURL, to: tmp, name: name, recipient: recipient) }
            return (plain(info, key: key), sha)
        }
        if let s3 = inner as? S3Store {
            guard EncryptionFormat.ciphertextSize(plaintextSize: st.size) > Int64(s3.configuration.multipartThreshold) else {
                // One PutObject, which holds the whole body in memory anyway.
                return try await putInMemory(key: key, raw: raw, fileURL: fileURL, name: name, recipient: recipient)
            }
            let parts = try await encryptedParts(key: key, fileURL: fileURL, partSize: s3.multipartPartSize, recipient: recipient)
            let (info, _) = try await s3.multipartUpload(key: raw, source: parts, hashFile: false)
            return (plain(info, key: key), parts.sha256)
        }
        // Any other store: through a temporary file in staging, removed after the put.
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        let temp = LocalFiles.temporaryURL(beside: staging.appendingPathComponent("upload"))
        defer { try? FileManager.default.removeItem(at: temp) }
        // Off the cooperative pool: a large file takes a while, and other files' transfers go on meanwhile.
        let sha = try await LocalFiles.offPool { try encryptFile(fileURL, to: temp, name: name, recipient: recipient) }
        return (plain(try await inner.put(key: raw, fileURL: temp), key: key), sha)
    }

    /// Reads the file, encrypts it in memory (random salt) and stores it with one put.
    private func putInMemory(key: String, raw: String, fileURL: URL, name: String?,
                             recipient: Curve25519.KeyAgreement.PublicKey?) async throws -> (info: ObjectInfo, sha256: String) {
        let bytes: Data
        do { bytes = try Data(contentsOf: fileURL) } catch {
            throw BucketError.localIO(path: fileURL.path, description: error.localizedDescription)
        }
        let sealed = recipient.map { EncryptionFormat.encrypt(bytes, to: $0) } ?? EncryptionFormat.encrypt(bytes, keyring: keyring, name: name)
        return (plain(try await inner.put(key: raw, data: sealed, ifNoneMatch: false), key: key), Hashing.sha256Hex(bytes))
    }

    /// Encrypts the file at `source` into `target` chunk by chunk (not flushed), to `recipient`'s share key or with
    /// the current content key bound to `name`; returns the plaintext's SHA-256.
    private func encryptFile(_ source: URL, to target: URL, name: String?, recipient: Curve25519.KeyAgreement.PublicKey?) throws -> String {
        if let recipient { return try EncryptionFormat.encryptFile(source, to: target, recipient: recipient, flush: false) }
        return try EncryptionFormat.encryptFile(source, to: target, keyring: keyring, flush: false, name: name)
    }

    /// The parts of an encrypted multipart upload of `fileURL` to `key` (hashing the file first, off the cooperative
    /// pool).
    private func encryptedParts(key: String, fileURL: URL, partSize: Int, recipient: Curve25519.KeyAgreement.PublicKey?) async throws -> EncryptedParts {
        let (ring, name) = (keyring, recipient == nil ? bound(key) : nil)
        return try await LocalFiles.offPool {
            try EncryptedParts(fileURL: fileURL, object: key, partSize: partSize, keyring: ring, name: name, recipient: recipient)
        }
    }

    /// The object an interrupted upload of `fileURL` completed: for an encrypted key, judged on the ciphertext the
    /// file encrypts to (which its content-derived salt makes the same as the upload's), read only when the upload
    /// left a resume file.
    public func finishedUpload(key: String, fileURL: URL) async throws -> ObjectInfo? {
        let raw = try bucketKey(key)
        guard encrypts(key) else { return try await inner.finishedUpload(key: raw, fileURL: fileURL).map { plain($0, key: key) } }
        guard let s3 = inner as? S3Store, s3.hasResumeFile(key: raw, fileURL: fileURL), let st = FileStat.of(fileURL.path),
              st.size > Int64(inMemoryLimit) else { return nil }
        let parts = try await encryptedParts(key: key, fileURL: fileURL, partSize: s3.multipartPartSize, recipient: nil)
        return try await s3.finishedUpload(key: raw, source: parts).map { plain($0, key: key) }
    }

    /// Copies inside the bucket when both keys are encrypted or both are not; nil across the boundary.
    public func serverSideCopy(from source: String, to target: String) async throws -> ObjectInfo? {
        // Ciphertext copies as it is between encrypted prefixes (the name is not part of what is authenticated);
        // across the boundary the caller downloads and puts, which decrypts or encrypts.
        // With encrypted names the content is bound to its media path: copied only where that stays the same (into
        // and out of the trash).
        guard encrypts(source) == encrypts(target), bound(source) == bound(target) else { return nil }
        return try await inner.serverSideCopy(from: try bucketKey(source), to: try bucketKey(target)).map { plain($0, key: target) }
    }
}
