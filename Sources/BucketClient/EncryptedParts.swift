import Crypto
import Foundation

/// A plaintext file as the parts of a multipart upload of its ciphertext (``EncryptionFormat``), each part
/// encrypted as it is read: no staging copy, and the upload overlaps the encryption.
///
/// A part holds whole 64 KiB chunks (the header goes before part 1's), so part N's ciphertext follows from the
/// plaintext alone. The salt (or the ephemeral key of an object encrypted to a share key) is derived from the
/// content key, the object's key and the plaintext's SHA-256, so a resumed upload of the same file produces the same
/// bytes for its remaining parts, and a changed file another header, which makes the saved upload start over
/// (``contentID``). Making the header costs one read of the file before the upload (its SHA-256, keeping the hash
/// state at each part boundary); every part is hashed again from the state before it and checked against the state
/// after it before it is sealed, so nothing but the hashed plaintext is ever encrypted under that salt (a changed
/// part would be a SHA-256 collision): a file changed in between fails the upload instead.
struct EncryptedParts: MultipartSource {
    /// The plaintext file in parts of whole chunks (part N of the plaintext becomes part N of the ciphertext).
    private let plain: FileParts
    private let header: EncryptionFormat.Header
    private let cipher: EncryptionFormat.ChunkCipher
    /// The plaintext's hash state before each part, and its digest up to the end of each part, from the read that
    /// made the header.
    private let partStarts: [SHA256]
    private let partEnds: [SHA256Digest]

    /// Hashes the file at `fileURL` (the whole, and each part of about `partSize` plaintext bytes), then sets up its
    /// encryption as `object` with the keyring's current key, bound to media path `name` when given, or to
    /// `recipient`'s share key when given.
    /// - Throws: ``BucketError/localIO(path:description:)`` when the file cannot be read or changes while it is read.
    init(fileURL: URL, object: String, partSize: Int, keyring: ContentKeyring, name: String? = nil,
         recipient: Curve25519.KeyAgreement.PublicKey? = nil) throws {
        guard let st = FileStat.of(fileURL.path), st.isRegularFile else {
            throw BucketError.localIO(path: fileURL.path, description: "not a readable file")
        }
        let chunk = EncryptionFormat.chunkSize
        let plain = try FileParts(fileURL: fileURL, stat: st, partSize: max(1, (partSize + chunk - 1) / chunk) * chunk)
        var whole = SHA256()
        var starts: [SHA256] = [], ends: [SHA256Digest] = []
        for number in 1...plain.partCount {
            let data = try plain.read(part: number)
            starts.append(whole)
            whole.update(data: data)
            ends.append(whole.finalize())
        }
        guard FileStat.of(fileURL.path)?.size == st.size else {
            throw BucketError.localIO(path: fileURL.path, description: "the file changed while it was being read")
        }
        let digest = Data(ends[ends.count - 1])
        if let recipient {
            (header, cipher) = try EncryptionFormat.contentDerived(object: object, digest: digest, keyring: keyring, recipient: recipient)
        } else {
            (header, cipher) = EncryptionFormat.contentDerived(object: object, digest: digest, keyring: keyring, name: name)
        }
        self.plain = plain
        partStarts = starts
        partEnds = ends
    }

    var fileURL: URL { plain.fileURL }
    var fileMtimeNanoseconds: Int64 { plain.fileMtimeNanoseconds }
    /// Plaintext bytes of the file.
    var plainSize: Int64 { plain.size }
    /// Chunks per part.
    var chunksPerPart: Int { plain.partSize / EncryptionFormat.chunkSize }
    /// The SHA-256 of the whole plaintext (lowercase hex).
    var sha256: String { Hashing.hex(Data(partEnds[partEnds.count - 1])) }

    /// All chunks of the object.
    private var chunkCount: Int64 { EncryptionFormat.chunkCount(plaintextSize: plainSize) }

    var size: Int64 { EncryptionFormat.ciphertextSize(plaintextSize: plainSize) }
    var partSize: Int { plain.partSize }
    var partCount: Int { partEnds.count }
    /// The header: key id, algorithm and the salt that follows from the plaintext.
    var contentID: String? { Hashing.hex(header.bytes) }

    /// The plaintext bytes and chunks of part `number`.
    private func plainSpan(ofPart number: Int) -> (start: Int64, end: Int64, firstChunk: Int64, chunks: Int64) {
        let firstChunk = Int64(number - 1) * Int64(chunksPerPart)
        let chunks = min(Int64(chunksPerPart), chunkCount - firstChunk)
        let start = firstChunk * Int64(EncryptionFormat.chunkSize)
        return (start, min(start + Int64(partSize), plainSize), firstChunk, chunks)
    }

    func length(ofPart number: Int) -> Int64 {
        let span = plainSpan(ofPart: number)
        return (number == 1 ? Int64(EncryptionFormat.headerSize) : 0) + span.end - span.start + span.chunks * Int64(EncryptionFormat.tagSize)
    }

    func read(part number: Int) throws -> Data {
        let bytes = try plain.read(part: number)
        var hash = partStarts[number - 1]
        hash.update(data: bytes)
        guard hash.finalize() == partEnds[number - 1] else {
            throw BucketError.localIO(path: fileURL.path, description: "the file changed while it was being uploaded (part \(number))")
        }
        let span = plainSpan(ofPart: number)
        var out = Data()
        out.reserveCapacity(Int(length(ofPart: number)))
        if number == 1 { out.append(header.bytes) }
        for k in 0..<span.chunks {
            let start = bytes.startIndex + Int(k) * EncryptionFormat.chunkSize
            let end = min(start + EncryptionFormat.chunkSize, bytes.endIndex)
            let index = span.firstChunk + k
            cipher.seal(bytes[start..<end], index: index, final: index == chunkCount - 1, into: &out)
        }
        return out
    }
}
