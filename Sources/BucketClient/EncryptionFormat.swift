import Crypto
import Foundation

/// The encrypted object format, version 1.
///
/// An object is a 54-byte header then the plaintext in 64 KiB chunks, each sealed with AES-256-GCM (16-byte tag):
///
/// ```
/// header: magic "RTSYNCE\0" (8) | version 1 (1) | algorithm 1 = AES-256-GCM (1) | key id (8) | chunk size, u32 BE (4) | salt (32)
/// chunk i: AES-GCM(key: HKDF-SHA256(content key, salt, "rtsync object v1") [0..<32],
///                  nonce: HKDF output [32..<44] XOR big-endian i in its last 8 bytes,
///                  aad: header | i as u64 BE | final flag (1 byte))
/// ```
///
/// The salt (random, or for a resumable multipart upload derived from the content key, the object's key and the
/// plaintext's SHA-256: `contentSalt(secret:label:object:plaintextSHA256:)`) makes each object's key and nonces its
/// own, so a chunk moved to another object fails; the index in nonce and AAD catches reordered and replayed chunks;
/// the final flag catches truncation at a chunk boundary; the header in the AAD binds version, key id and chunk size. An empty plaintext is one empty final chunk. Sizes map both
/// ways without reading the object (``plaintextSize(ciphertextSize:)``), so listings need no decryption.
public enum EncryptionFormat {
    /// The first 8 bytes of every encrypted object.
    public static let magic: [UInt8] = Array("RTSYNCE".utf8) + [0]
    /// The format version this build writes and reads.
    public static let version: UInt8 = 1
    /// AES-256-GCM under a content key of the user.
    static let algorithmAESGCM: UInt8 = 1
    /// AES-256-GCM under a key agreed (X25519) between a sender's ephemeral key, whose public half is the salt, and the
    /// recipient's share key, which the key id names: what another user shares.
    static let algorithmShareX25519: UInt8 = 2
    /// AES-256-GCM under a content key of the user, with the per-object key also derived from the object's
    /// plaintext media path (`images/a.jpg`): what media sync writes under encrypted names, so an object moved to
    /// another name fails to open.
    static let algorithmAESGCMNamed: UInt8 = 3
    /// Header bytes before the first chunk.
    public static let headerSize = 54
    /// Plaintext bytes per chunk (the last chunk may be shorter).
    public static let chunkSize = 65536
    /// Authentication tag bytes per chunk.
    public static let tagSize = 16
    static var sealedChunkSize: Int { chunkSize + tagSize }

    /// Chunks of a plaintext of `size` bytes (at least one).
    static func chunkCount(plaintextSize size: Int64) -> Int64 {
        size == 0 ? 1 : (size + Int64(chunkSize) - 1) / Int64(chunkSize)
    }

    /// The size of the object that encrypts `size` plaintext bytes.
    public static func ciphertextSize(plaintextSize size: Int64) -> Int64 {
        Int64(headerSize) + size + chunkCount(plaintextSize: size) * Int64(tagSize)
    }

    /// The plaintext size of an encrypted object of `size` bytes, or nil when no encrypted object has that size.
    public static func plaintextSize(ciphertextSize size: Int64) -> Int64? {
        let body = size - Int64(headerSize)
        guard body >= Int64(tagSize) else { return nil }
        let n = (body + Int64(sealedChunkSize) - 1) / Int64(sealedChunkSize)
        guard body - (n - 1) * Int64(sealedChunkSize) >= Int64(tagSize) else { return nil }
        return body - n * Int64(tagSize)
    }

    /// Offset of chunk `index` in the object.
    static func chunkOffset(_ index: Int64) -> Int64 { Int64(headerSize) + index * Int64(sealedChunkSize) }

    // MARK: - Header

    /// A parsed header.
    struct Header {
        let bytes: Data
        let keyID: String
        var algorithm: UInt8 { bytes[bytes.startIndex + 9] }

        /// A new header for `key` with `salt` (nil: a random one); `named`: bound to a media path (algorithm 3).
        init(key: ContentKey, named: Bool = false, salt: [UInt8]? = nil) {
            self.init(algorithm: named ? EncryptionFormat.algorithmAESGCMNamed : EncryptionFormat.algorithmAESGCM, keyID: key.id,
                      salt: salt ?? (0..<32).map { _ in UInt8.random(in: 0...255) })
        }

        init(algorithm: UInt8, keyID: String, salt: [UInt8]) {
            var b = Data(EncryptionFormat.magic)
            b.append(EncryptionFormat.version)
            b.append(algorithm)
            b.append(contentsOf: [UInt8](hexString: keyID)!)
            b.append(contentsOf: withUnsafeBytes(of: UInt32(EncryptionFormat.chunkSize).bigEndian, Array.init))
            b.append(contentsOf: salt)
            bytes = b
            self.keyID = keyID
        }

        /// Parses the first bytes of `object`.
        /// - Throws: ``EncryptionError`` naming `object` for plaintext, a short header or an unknown version.
        init(_ data: Data, object: String) throws {
            let d = Data(data.prefix(EncryptionFormat.headerSize))
            guard d.count >= 8, Array(d.prefix(8)) == EncryptionFormat.magic else {
                // A shorter object that matches the magic so far was cut short; anything else is plaintext.
                if !d.isEmpty, d.count < 8, Array(d) == Array(EncryptionFormat.magic.prefix(d.count)) { throw EncryptionError.truncated(object: object) }
                throw EncryptionError.notEncrypted(object: object)
            }
            guard d.count == EncryptionFormat.headerSize else { throw EncryptionError.truncated(object: object) }
            let b = [UInt8](d)
            guard b[8] == EncryptionFormat.version else {
                throw EncryptionError.unsupportedFormat(object: object, reason: "version \(b[8]) (this build reads version \(EncryptionFormat.version))")
            }
            guard [EncryptionFormat.algorithmAESGCM, EncryptionFormat.algorithmShareX25519, EncryptionFormat.algorithmAESGCMNamed].contains(b[9]) else {
                throw EncryptionError.unsupportedFormat(object: object, reason: "algorithm \(b[9])")
            }
            let chunk = b[18..<22].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard chunk == UInt32(EncryptionFormat.chunkSize) else {
                throw EncryptionError.unsupportedFormat(object: object, reason: "chunk size \(chunk)")
            }
            bytes = d
            keyID = Hashing.hex(b[10..<18])
        }

        var salt: Data { bytes.suffix(32) }
    }

    // MARK: - Chunk cipher

    /// Seals and opens the chunks of one object.
    struct ChunkCipher {
        let header: Header
        let object: String
        private let key: SymmetricKey
        private let nonceBase: [UInt8]

        /// The cipher for `header`, with the key it names from `keyring`; `name` is the media path an object under an
        /// encrypted name must be bound to (nil: the object must not be bound to a name).
        /// - Throws: ``EncryptionError/unknownKey(object:keyID:)``, ``EncryptionError/nameBinding(object:reason:)``.
        init(header: Header, keyring: ContentKeyring, object: String, name: String? = nil) throws {
            let named = header.algorithm == EncryptionFormat.algorithmAESGCMNamed
            if named && name == nil {
                throw EncryptionError.nameBinding(object: object, reason: "it is bound to its media name; read it through media sync, or give the name")
            }
            if !named && name != nil {
                throw EncryptionError.nameBinding(object: object, reason: "it is not bound to a name, where encrypted names require it (a downgrade)")
            }
            if header.algorithm == EncryptionFormat.algorithmShareX25519 {
                guard let share = keyring.shareKey, ContentKeyring.shareKeyID(share.publicKey) == header.keyID else {
                    throw EncryptionError.unknownKey(object: object, keyID: header.keyID)
                }
                guard let ephemeral = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: header.salt),
                      let secret = try? share.sharedSecretFromKeyAgreement(with: ephemeral) else {
                    throw EncryptionError.authenticationFailed(object: object, chunk: 0)
                }
                self.init(header: header, secret: secret.withUnsafeBytes { SymmetricKey(data: Data($0)) }, object: object)
                return
            }
            guard let content = keyring.key(id: header.keyID) else { throw EncryptionError.unknownKey(object: object, keyID: header.keyID) }
            self.init(header: header, secret: content.key, object: object, name: name)
        }

        /// The cipher of `header` whose key material is `secret` (a content key, or an agreed share secret); a
        /// `name` goes into the key derivation (algorithm 3).
        init(header: Header, secret: SymmetricKey, object: String, name: String? = nil) {
            var info = Data("rtsync object v1".utf8)
            if let name {
                info.append(0)
                info.append(contentsOf: Data(name.utf8))
            }
            let derived = HKDF<SHA256>.deriveKey(inputKeyMaterial: secret, salt: header.salt, info: info, outputByteCount: 44)
            let bytes = derived.withUnsafeBytes { [UInt8]($0) }
            self.header = header
            self.object = object
            key = SymmetricKey(data: bytes[0..<32])
            nonceBase = Array(bytes[32..<44])
        }

        private func nonce(_ index: Int64) -> AES.GCM.Nonce {
            var n = nonceBase
            let i = UInt64(index)
            for k in 0..<8 { n[4 + k] ^= UInt8(truncatingIfNeeded: i >> (8 * (7 - k))) }
            return try! AES.GCM.Nonce(data: n)
        }

        private func aad(_ index: Int64, final: Bool) -> Data {
            var a = header.bytes
            a.append(contentsOf: withUnsafeBytes(of: UInt64(index).bigEndian, Array.init))
            a.append(final ? 1 : 0)
            return a
        }

        /// Seals chunk `index` (`plain` at most one chunk long).
        func seal(_ plain: Data, index: Int64, final: Bool) -> Data {
            var out = Data()
            seal(plain, index: index, final: final, into: &out)
            return out
        }

        /// Seals chunk `index` and appends it (ciphertext, then tag) to `out`.
        func seal(_ plain: Data, index: Int64, final: Bool, into out: inout Data) {
            let box = try! AES.GCM.seal(plain, using: key, nonce: nonce(index), authenticating: aad(index, final: final))
            out.append(box.ciphertext)
            out.append(box.tag)
        }

        /// Opens sealed chunk `index`; for the last chunk, tells truncation (it was sealed as not final) from tampering.
        /// - Throws: ``EncryptionError/authenticationFailed(object:chunk:)`` or ``EncryptionError/truncated(object:)``.
        func open(_ sealed: Data, index: Int64, final: Bool) throws -> Data {
            guard sealed.count >= EncryptionFormat.tagSize else { throw EncryptionError.truncated(object: object) }
            if let plain = try? openAs(sealed, index: index, final: final) { return plain }
            if final, sealed.count == EncryptionFormat.sealedChunkSize, (try? openAs(sealed, index: index, final: false)) != nil {
                throw EncryptionError.truncated(object: object)
            }
            throw EncryptionError.authenticationFailed(object: object, chunk: index)
        }

        /// Opens chunk `index` whether or not it is the final one; returns the plaintext and whether it was final.
        func openEither(_ sealed: Data, index: Int64) throws -> (Data, Bool) {
            guard sealed.count >= EncryptionFormat.tagSize else { throw EncryptionError.truncated(object: object) }
            if let plain = try? openAs(sealed, index: index, final: false) { return (plain, false) }
            if let plain = try? openAs(sealed, index: index, final: true) { return (plain, true) }
            throw EncryptionError.authenticationFailed(object: object, chunk: index)
        }

        private func openAs(_ sealed: Data, index: Int64, final: Bool) throws -> Data {
            let tagStart = sealed.endIndex - EncryptionFormat.tagSize
            let box = try AES.GCM.SealedBox(nonce: nonce(index), ciphertext: sealed[sealed.startIndex..<tagStart], tag: sealed[tagStart...])
            return try AES.GCM.open(box, using: key, authenticating: aad(index, final: final))
        }
    }

    // MARK: - Salts derived from the content

    /// The salt of an object whose ciphertext must come out the same on every attempt (a resumed multipart upload
    /// sends only the missing parts): HMAC-SHA256 under `secret` (the content key) of a label, the object's key and
    /// the SHA-256 of its plaintext. Unlike a random salt it makes the same plaintext under the same key encrypt to
    /// the same bytes; any other plaintext gets another salt, so a per-object key and nonce never seal two
    /// plaintexts, as long as what is sealed is what was hashed (`EncryptedParts` checks that part by part).
    static func contentSalt(secret: SymmetricKey, label: String, object: String, plaintextSHA256: some DataProtocol) -> [UInt8] {
        var message = Data(label.utf8)
        message.append(0)
        message.append(contentsOf: Data(object.utf8))
        message.append(0)
        message.append(contentsOf: plaintextSHA256)
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: secret))
    }

    /// Header and chunk cipher of `object` (plaintext SHA-256 `digest`) for the keyring's current key with a salt
    /// derived from the content (`contentSalt(secret:label:object:plaintextSHA256:)`); with `name`, bound to that
    /// media path (algorithm 3).
    static func contentDerived(object: String, digest: some DataProtocol, keyring: ContentKeyring, name: String?) -> (Header, ChunkCipher) {
        let key = keyring.current
        let salt = contentSalt(secret: key.key, label: "rtsync object salt v1", object: object, plaintextSHA256: digest)
        let header = Header(key: key, named: name != nil, salt: salt)
        return (header, try! ChunkCipher(header: header, keyring: keyring, object: object, name: name))
    }

    /// Header and chunk cipher of `object` (plaintext SHA-256 `digest`) encrypted to another user's share key, with
    /// the ephemeral key derived from the sender's current content key and the content as a salt is
    /// (`contentSalt(secret:label:object:plaintextSHA256:)`), so that a resumed upload repeats the same bytes.
    static func contentDerived(object: String, digest: some DataProtocol, keyring: ContentKeyring,
                               recipient: Curve25519.KeyAgreement.PublicKey) throws -> (Header, ChunkCipher) {
        let seed = contentSalt(secret: keyring.current.key, label: "rtsync share ephemeral v1 " + ContentKeyring.shareKeyID(recipient),
                               object: object, plaintextSHA256: digest)
        return try shareCipher(ephemeral: try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: seed), recipient: recipient, object: object)
    }

    /// Header and chunk cipher of an object encrypted to `recipient` with the `ephemeral` key (its public half in
    /// the header's salt field).
    static func shareCipher(ephemeral: Curve25519.KeyAgreement.PrivateKey, recipient: Curve25519.KeyAgreement.PublicKey,
                            object: String) throws -> (Header, ChunkCipher) {
        let header = Header(algorithm: algorithmShareX25519, keyID: ContentKeyring.shareKeyID(recipient),
                            salt: Array(ephemeral.publicKey.rawRepresentation))
        let secret = try ephemeral.sharedSecretFromKeyAgreement(with: recipient)
        return (header, ChunkCipher(header: header, secret: secret.withUnsafeBytes { SymmetricKey(data: Data($0)) }, object: object))
    }

    // MARK: - Whole objects in memory

    /// Encrypts `plain` with the keyring's current key; with `name`, bound to that media path (algorithm 3).
    public static func encrypt(_ plain: Data, keyring: ContentKeyring, name: String? = nil) -> Data {
        let header = Header(key: keyring.current, named: name != nil)
        let cipher = try! ChunkCipher(header: header, keyring: keyring, object: "", name: name)
        return sealed(plain, header: header, cipher: cipher)
    }

    /// Encrypts `plain` to another user's share key (X25519 with a fresh ephemeral key): only that user's devices can
    /// read it, and nothing else of the sender's is exposed to them.
    public static func encrypt(_ plain: Data, to recipient: Curve25519.KeyAgreement.PublicKey) -> Data {
        let (header, cipher) = try! shareCipher(ephemeral: Curve25519.KeyAgreement.PrivateKey(), recipient: recipient, object: "")
        return sealed(plain, header: header, cipher: cipher)
    }

    /// The header, then `plain` sealed chunk by chunk (the last one marked final).
    static func sealed(_ plain: Data, header: Header, cipher: ChunkCipher) -> Data {
        var out = header.bytes
        out.reserveCapacity(Int(ciphertextSize(plaintextSize: Int64(plain.count))))
        let n = chunkCount(plaintextSize: Int64(plain.count))
        for i in 0..<n {
            let start = plain.startIndex + Int(i) * chunkSize
            let end = min(start + chunkSize, plain.endIndex)
            cipher.seal(plain[start..<end], index: i, final: i == n - 1, into: &out)
        }
        return out
    }

    /// Whether `data` (at least the header) is an object another user encrypted to a share key.
    public static func isSharedObject(_ data: Data) -> Bool {
        (try? Header(data, object: ""))?.algorithm == algorithmShareX25519
    }

    /// Decrypts a whole encrypted object; `object` names it in errors; `name`: the media path it must be bound to.
    /// - Throws: ``EncryptionError`` for plaintext, unknown versions or keys, tampering and truncation.
    public static func decrypt(_ data: Data, keyring: ContentKeyring, object: String, name: String? = nil) throws -> Data {
        let header = try Header(data, object: object)
        // What another user encrypted to the share key is only taken as a file whose content is checked.
        if header.algorithm == algorithmShareX25519 { throw EncryptionError.notAShare(object: object) }
        let cipher = try ChunkCipher(header: header, keyring: keyring, object: object, name: name)
        var out = Data()
        out.reserveCapacity(max(0, data.count - headerSize))
        var offset = data.startIndex + headerSize
        var index: Int64 = 0
        repeat {
            let end = min(offset + sealedChunkSize, data.endIndex)
            let final = end == data.endIndex
            out.append(try cipher.open(data[offset..<end], index: index, final: final))
            offset = end
            index += 1
        } while offset < data.endIndex
        return out
    }

    // MARK: - Files, chunk by chunk

    /// Encrypts the file at `source` into `target` one chunk at a time, returning the plaintext's SHA-256 (hex);
    /// with `flush` the target is synced to disk before returning; with `name`, bound to that media path.
    public static func encryptFile(_ source: URL, to target: URL, keyring: ContentKeyring, flush: Bool = true, name: String? = nil) throws -> String {
        let header = Header(key: keyring.current, named: name != nil)
        return try encryptFile(source, to: target, header: header, cipher: try ChunkCipher(header: header, keyring: keyring, object: source.path, name: name), flush: flush)
    }

    /// Encrypts the file at `source` into `target` to another user's share key (as ``encrypt(_:to:)``), one batch of
    /// chunks at a time, returning the plaintext's SHA-256 (hex).
    public static func encryptFile(_ source: URL, to target: URL, recipient: Curve25519.KeyAgreement.PublicKey, flush: Bool = true) throws -> String {
        let (header, cipher) = try shareCipher(ephemeral: Curve25519.KeyAgreement.PrivateKey(), recipient: recipient, object: source.path)
        return try encryptFile(source, to: target, header: header, cipher: cipher, flush: flush)
    }

    static func encryptFile(_ source: URL, to target: URL, header: Header, cipher: ChunkCipher, flush: Bool) throws -> String {
        guard let input = FileHandle(forReadingAtPath: source.path) else {
            throw BucketError.localIO(path: source.path, description: "cannot open for reading")
        }
        defer { try? input.close() }
        let size = Int64(FileStat.of(source.path)?.size ?? 0)
        guard FileManager.default.createFile(atPath: target.path, contents: nil), let output = FileHandle(forWritingAtPath: target.path) else {
            throw BucketError.localIO(path: target.path, description: "cannot create")
        }
        defer { try? output.close() }
        var hasher = SHA256()
        do {
            try output.write(contentsOf: header.bytes)
            let n = chunkCount(plaintextSize: size)
            // Read and written a batch of chunks (1 MiB) at a time: 16 times fewer system calls than chunk by chunk.
            let batch: Int64 = 16
            var out = Data()
            out.reserveCapacity(Int(batch) * sealedChunkSize)
            var first: Int64 = 0
            while first < n {
                let count = min(batch, n - first)
                let want = Int(min(count * Int64(chunkSize), size - first * Int64(chunkSize)))
                let plain = want > 0 ? (try input.read(upToCount: want) ?? Data()) : Data()
                guard plain.count == want else { throw BucketError.localIO(path: source.path, description: "the file changed while it was being encrypted") }
                hasher.update(data: plain)
                out.removeAll(keepingCapacity: true)
                for k in 0..<count {
                    let start = plain.startIndex + Int(k) * chunkSize
                    let i = first + k
                    cipher.seal(plain[start..<min(start + chunkSize, plain.endIndex)], index: i, final: i == n - 1, into: &out)
                }
                try output.write(contentsOf: out)
                first += count
            }
            if let more = try input.read(upToCount: 1), !more.isEmpty {
                throw BucketError.localIO(path: source.path, description: "the file changed while it was being encrypted")
            }
            if flush { try output.synchronize() }
        } catch let e as BucketError { throw e } catch {
            throw BucketError.localIO(path: target.path, description: error.localizedDescription)
        }
        return Hashing.hex(hasher.finalize())
    }

    /// Decrypts the encrypted file at `source` into `target` one chunk at a time; `object` names it in errors.
    /// - Throws: ``EncryptionError`` as ``decrypt(_:keyring:object:name:)``; `target` may then hold a partial plaintext,
    ///   which the caller removes.
    /// - Returns: whether the object was encrypted to the user's share key by another user (not with a content key).
    @discardableResult
    public static func decryptFile(_ source: URL, to target: URL, keyring: ContentKeyring, object: String, name: String? = nil) throws -> Bool {
        guard let input = FileHandle(forReadingAtPath: source.path) else {
            throw BucketError.localIO(path: source.path, description: "cannot open for reading")
        }
        defer { try? input.close() }
        let size = Int64(FileStat.of(source.path)?.size ?? 0)
        let header = try Header(try input.read(upToCount: headerSize) ?? Data(), object: object)
        let cipher = try ChunkCipher(header: header, keyring: keyring, object: object, name: name)
        guard FileManager.default.createFile(atPath: target.path, contents: nil), let output = FileHandle(forWritingAtPath: target.path) else {
            throw BucketError.localIO(path: target.path, description: "cannot create")
        }
        defer { try? output.close() }
        var offset = Int64(headerSize)
        var index: Int64 = 0
        repeat {
            let sealed = try input.read(upToCount: sealedChunkSize) ?? Data()
            offset += Int64(sealed.count)
            let plain = try cipher.open(sealed, index: index, final: offset >= size)
            try output.write(contentsOf: plain)
            index += 1
        } while offset < size
        try output.synchronize()
        return header.algorithm == algorithmShareX25519
    }

    // MARK: - Ranges

    /// The plaintext bytes `range` asks for out of `body`, the sealed chunks of `span` (as far as the object has them).
    /// - Throws: ``EncryptionError`` for a chunk that fails, bytes after the final chunk, or an object cut short.
    static func openSpan(_ body: Data, span: (first: Int64, last: Int64?, range: ByteRange), range: ByteRange, cipher: ChunkCipher) throws -> Data {
        var plain = Data()
        var offset = body.startIndex
        var index = span.first
        var sawFinal = false
        while offset < body.endIndex {
            if sawFinal { throw EncryptionError.malformed(object: cipher.object, reason: "bytes after the final chunk") }
            let end = min(offset + sealedChunkSize, body.endIndex)
            let (chunk, final) = try cipher.openEither(body[offset..<end], index: index)
            plain.append(chunk)
            sawFinal = final
            offset = end
            index += 1
        }
        // Read to the end (or past it) without meeting the final chunk: the object was cut short.
        let wantedPastEnd = span.last.map { index <= $0 } ?? true
        if wantedPastEnd && !sawFinal { throw EncryptionError.truncated(object: cipher.object) }
        let skip = Int(range.start - span.first * Int64(chunkSize))
        guard skip <= plain.count else { return Data() }
        let from = plain.startIndex + skip
        let to = range.end.map { min(plain.endIndex, from + Int($0 - range.start) + 1) } ?? plain.endIndex
        return Data(plain[from..<to])
    }

    /// The plaintext of `range` (nil: all) of the encrypted file at `file`, reading and opening only the header and
    /// the chunks that hold the range; `object` names it in errors, `name` is the media path it is bound to, if any.
    /// - Throws: ``EncryptionError`` as ``decrypt(_:keyring:object:name:)`` for the chunks read;
    ///   ``BucketError/localIO(path:description:)`` when the file cannot be read.
    public static func decrypt(file: URL, range: ByteRange?, keyring: ContentKeyring, object: String, name: String? = nil) throws -> Data {
        guard let input = FileHandle(forReadingAtPath: file.path) else {
            throw BucketError.localIO(path: file.path, description: "cannot open for reading")
        }
        defer { try? input.close() }
        do {
            let header = try Header(try input.read(upToCount: headerSize) ?? Data(), object: object)
            if header.algorithm == algorithmShareX25519 { throw EncryptionError.notAShare(object: object) }
            let cipher = try ChunkCipher(header: header, keyring: keyring, object: object, name: name)
            let wanted = range ?? ByteRange(start: 0)
            let span = chunkSpan(plainStart: wanted.start, plainEnd: wanted.end)
            try input.seek(toOffset: UInt64(span.range.start))
            let body: Data
            if let end = span.range.end {
                body = try input.read(upToCount: Int(end - span.range.start + 1)) ?? Data()
            } else {
                body = try input.readToEnd() ?? Data()
            }
            if body.isEmpty && span.first > 0 {
                // A range past the end: empty when the object's last chunk is its final one, else it was cut short.
                let size = try input.seekToEnd()
                guard let plainSize = plaintextSize(ciphertextSize: Int64(size)) else {
                    throw EncryptionError.malformed(object: object, reason: "no encrypted object has \(size) bytes")
                }
                let last = chunkCount(plaintextSize: plainSize) - 1
                try input.seek(toOffset: UInt64(chunkOffset(last)))
                guard try cipher.openEither(try input.readToEnd() ?? Data(), index: last).1 else { throw EncryptionError.truncated(object: object) }
                return Data()
            }
            return try openSpan(body, span: span, range: wanted, cipher: cipher)
        } catch let e as EncryptionError { throw e } catch {
            throw BucketError.localIO(path: file.path, description: error.localizedDescription)
        }
    }

    /// The chunks holding plaintext bytes `start...end` (end nil: to the end) and the object bytes they occupy.
    static func chunkSpan(plainStart start: Int64, plainEnd end: Int64?) -> (first: Int64, last: Int64?, range: ByteRange) {
        let first = start / Int64(chunkSize)
        let last = end.map { $0 / Int64(chunkSize) }
        let cipherEnd = last.map { chunkOffset($0 + 1) - 1 }
        return (first, last, ByteRange(start: chunkOffset(first), end: cipherEnd))
    }
}

extension Array where Element == UInt8 {
    /// Bytes from an even number of hex digits, or nil.
    init?(hexString: String) {
        let chars = Array(hexString.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = Self.nibble(chars[i]), let lo = Self.nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        self = out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}
