import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import BucketClient

/// Large encrypted files to S3: encrypted part by part as a resumable multipart upload reads them (``EncryptedParts``),
/// with no staging copy, against the loopback moto server.
@Suite struct EncryptedMultipartTests {
    let keyring = ContentKeyring.generate()
    let chunk = EncryptionFormat.chunkSize
    static let key = "u/recordings/long.mov"

    /// Multipart above 6 MiB, 5 MiB parts (80 chunks of plaintext each).
    static func multipart(_ c: inout S3Configuration) { c.multipartThreshold = 6 << 20; c.partSize = 5 << 20 }

    /// An encrypting store over `inner` whose staging folder cannot exist (its parent is a regular file), so that a
    /// transfer that would write a staging file fails.
    func unstaged(_ inner: any ObjectStore, dir: URL) throws -> EncryptingStore {
        let blocker = dir.appendingPathComponent("not-a-folder")
        try Data("x".utf8).write(to: blocker)
        var store = EncryptingStore(inner: inner, keyring: keyring, prefixes: ["u/recordings/"], staging: blocker.appendingPathComponent("staging"))
        store.inMemoryLimit = 5 << 20
        return store
    }

    /// Another device with the same key: a fresh store on the same prefix, downloading through its own staging.
    func secondReader(_ moto: MotoServer, prefix: String) throws -> EncryptingStore {
        EncryptingStore(inner: moto.store(prefix: prefix), keyring: keyring, prefixes: ["u/recordings/"],
                        staging: try makeTemporaryFolder().appendingPathComponent("staging"))
    }

    func download(_ reader: EncryptingStore, _ key: String = key) async throws -> Data {
        let out = try makeTemporaryFolder().appendingPathComponent("out.mov")
        try await reader.download(key: key, to: out, expecting: try await reader.head(key: key))
        return try Data(contentsOf: out)
    }

    /// The ciphertext of an object in parts of `media`'s size: part 1 carries the header, every part 80 sealed chunks.
    func cipherPartLengths(plaintextSize: Int) -> [Int] {
        var lengths: [Int] = []
        var left = plaintextSize
        while left > 0 {
            let plainPart = min(left, 80 * chunk)
            let chunks = (plainPart + chunk - 1) / chunk
            lengths.append(plainPart + chunks * EncryptionFormat.tagSize + (lengths.isEmpty ? EncryptionFormat.headerSize : 0))
            left -= plainPart
        }
        return lengths
    }

    /// The object is ciphertext with no 64-byte run of the plaintext in it (sampled every MiB), and carries the
    /// composite CRC-32 of its ciphertext parts.
    func expectCiphertextWithPartChecksums(_ inner: S3Store, key: String = key, plain: Data) async throws {
        let raw = try await inner.get(key: key)
        #expect(raw.prefix(8) == Data(EncryptionFormat.magic))
        #expect(Int64(raw.count) == EncryptionFormat.ciphertextSize(plaintextSize: Int64(plain.count)))
        for offset in stride(from: 0, to: plain.count - 64, by: 1 << 20) {
            #expect(raw.range(of: plain.subdata(in: offset..<offset + 64)) == nil, "plaintext at \(offset)")
        }
        var joined = Data()
        var start = 0
        for length in cipherPartLengths(plaintextSize: plain.count) {
            let crc = Hashing.crc32(raw.subdata(in: start..<start + length))
            joined.append(contentsOf: [UInt8(crc >> 24), UInt8((crc >> 16) & 0xff), UInt8((crc >> 8) & 0xff), UInt8(crc & 0xff)])
            start += length
        }
        let expected = Hashing.crc32Base64(joined)
        let stored = try await PartChecksumTests.checksumHeaders(inner, key: key)
        #expect(stored.algorithm == "CRC32")
        #expect(stored.crc32 == expected || stored.crc32?.hasPrefix(expected + "-") == true)
    }

    @Test func largeFile_goesUpEncryptedPartByPart_withoutAStagingFile_andASecondReaderGetsItBack() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let inner = moto.store(prefix: prefix, tweak: Self.multipart)
        let dir = try makeTemporaryFolder()
        let store = try unstaged(inner, dir: dir)
        let media = randomBytes(13 << 20)
        let file = dir.appendingPathComponent("long.mov")
        try media.write(to: file)
        let (info, sha) = try await store.putReturningSHA256(key: Self.key, fileURL: file)
        #expect(info.size == Int64(media.count) && sha == Hashing.sha256Hex(media))
        #expect(try await inner.head(key: Self.key).etag.hasSuffix("-3"))  // 3 parts of 80 chunks (the last 48)
        #expect(inner.requestCounter.count("UploadPart") == 3)
        // Nothing but the file and the blocker: no staging folder, no ciphertext copy, no resume file left.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["long.mov", "not-a-folder"])
        try await expectCiphertextWithPartChecksums(inner, plain: media)
        #expect(try await download(try secondReader(moto, prefix: prefix)) == media)
    }

    @Test func interruptedUpload_resumesWithOnlyTheMissingParts_andTheResultDecrypts() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let crashing = moto.store(prefix: prefix) { Self.multipart(&$0); $0.maxConcurrency = 1; $0.stopAfterPartsForTesting = 2 }
        let dir = try makeTemporaryFolder()
        let file = dir.appendingPathComponent("long.mov")
        let media = randomBytes(16 << 20)
        try media.write(to: file)
        await #expect(throws: BucketError.self) { try await unstaged(crashing, dir: dir).put(key: Self.key, fileURL: file) }
        let resumeFile = crashing.multipartStateURL(fileURL: file, key: Self.key)
        let saved = try JSONDecoder().decode(MultipartState.self, from: Data(contentsOf: resumeFile))
        #expect(saved.parts.count == 2 && saved.contentID != nil)

        let resumedInner = moto.store(prefix: prefix, tweak: Self.multipart)
        try await unstaged(resumedInner, dir: dir).put(key: Self.key, fileURL: file)
        #expect(resumedInner.requestCounter.count("CreateMultipartUpload") == 0)
        #expect(resumedInner.requestCounter.count("UploadPart") == 2)  // 4 parts, 2 already there
        #expect(!FileManager.default.fileExists(atPath: resumeFile.path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["long.mov", "not-a-folder"])
        // Parts 1-2 from the first process and 3-4 from the second open as one object: the same header and salt.
        #expect(try await download(try secondReader(moto, prefix: prefix)) == media)
        try await expectCiphertextWithPartChecksums(resumedInner, plain: media)
    }

    /// The file rewritten between the attempts with the same size and modification time: the resume notices (the
    /// content gives another salt), aborts the saved upload and starts over, rather than mixing parts.
    @Test func plaintextChangedBetweenAttempts_evenWithTheSameSizeAndMtime_startsOver_andDecryptsToTheNewContent() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let crashing = moto.store(prefix: prefix) { Self.multipart(&$0); $0.maxConcurrency = 1; $0.stopAfterPartsForTesting = 2 }
        let dir = try makeTemporaryFolder()
        let file = dir.appendingPathComponent("long.mov")
        try randomBytes(16 << 20).write(to: file)
        await #expect(throws: BucketError.self) { try await unstaged(crashing, dir: dir).put(key: Self.key, fileURL: file) }
        let before = try #require(FileStat.of(file.path))
        let edited = randomBytes(16 << 20)
        try edited.write(to: file)
        let mtime = timespec(tv_sec: Int(before.mtimeNanoseconds / 1_000_000_000), tv_nsec: Int(before.mtimeNanoseconds % 1_000_000_000))
        var times = [mtime, mtime]
        #expect(utimensat(AT_FDCWD, file.path, &times, 0) == 0)
        #expect(FileStat.of(file.path)?.mtimeNanoseconds == before.mtimeNanoseconds)

        let resumedInner = moto.store(prefix: prefix, tweak: Self.multipart)
        try await unstaged(resumedInner, dir: dir).put(key: Self.key, fileURL: file)
        #expect(resumedInner.requestCounter.count("AbortMultipartUpload") == 1)
        #expect(resumedInner.requestCounter.count("CreateMultipartUpload") == 1)
        #expect(resumedInner.requestCounter.count("UploadPart") == 4)
        // (Listed without a "/" in the query: the authenticated moto rejects one there.)
        #expect(try await resumedInner.unfinishedUploads(prefix: "").filter { $0.key == Self.key }.isEmpty)
        #expect(try await download(try secondReader(moto, prefix: prefix)) == edited)
    }

    /// An upload whose Complete went through before the process stopped, its resume file left behind: recognised from
    /// the plaintext (which encrypts to the same parts), without uploading again; a changed file is not.
    @Test func completedUploadWithItsResumeFileLeft_isRecognisedFromThePlaintext_butNotForAChangedFile() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let crashing = moto.store(prefix: prefix) { Self.multipart(&$0); $0.maxConcurrency = 1; $0.stopAfterPartsForTesting = 2 }
        let dir = try makeTemporaryFolder()
        let file = dir.appendingPathComponent("long.mov")
        let media = randomBytes(11 << 20)
        try media.write(to: file)
        await #expect(throws: BucketError.self) { try await unstaged(crashing, dir: dir).put(key: Self.key, fileURL: file) }
        let resumeFile = crashing.multipartStateURL(fileURL: file, key: Self.key)
        let leftBehind = try Data(contentsOf: resumeFile)
        try await unstaged(moto.store(prefix: prefix, tweak: Self.multipart), dir: dir).put(key: Self.key, fileURL: file)

        try leftBehind.write(to: resumeFile)
        let asked = moto.store(prefix: prefix, tweak: Self.multipart)
        let finished = try await unstaged(asked, dir: dir).finishedUpload(key: Self.key, fileURL: file)
        #expect(finished?.size == Int64(media.count))
        #expect(asked.requestCounter.total == 2)  // ListParts (NoSuchUpload), HEAD
        #expect(!FileManager.default.fileExists(atPath: resumeFile.path))

        try leftBehind.write(to: resumeFile)
        try randomBytes(11 << 20).write(to: file)
        let other = moto.store(prefix: prefix, tweak: Self.multipart)
        #expect(try await unstaged(other, dir: dir).finishedUpload(key: Self.key, fileURL: file) == nil)
        #expect(other.requestCounter.total == 0)
    }

    /// Large media shared to another user (`share --with-media`) goes up encrypted to the recipient's share key the
    /// same way: part by part, no staging file; the recipient's device opens it.
    @Test func sharedLargeMedia_goesUpToTheShareKeyPartByPart_withoutAStagingFile_andOpensForTheRecipient() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let inner = moto.store(prefix: prefix, tweak: Self.multipart)
        let dir = try makeTemporaryFolder()
        let recipient = ContentKeyring.generate()
        var sender = try unstaged(inner, dir: dir)
        sender.recipients = ["b": try #require(recipient.shareKey).publicKey]
        let media = randomBytes(7 << 20)
        let file = dir.appendingPathComponent("long.mov")
        try media.write(to: file)
        let (_, sha) = try await sender.putReturningSHA256(key: "b/recordings/long.mov", fileURL: file)
        #expect(sha == Hashing.sha256Hex(media))
        #expect(inner.requestCounter.count("UploadPart") == 2)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["long.mov", "not-a-folder"])
        let raw = try await inner.get(key: "b/recordings/long.mov")
        #expect(EncryptionFormat.isSharedObject(raw) && raw.range(of: media.subdata(in: 4096..<4160)) == nil)

        var receiver = EncryptingStore(inner: moto.store(prefix: prefix), keyring: recipient, prefixes: [],
                                       staging: try makeTemporaryFolder().appendingPathComponent("staging"))
        receiver.acceptShared = { key, _ in key.hasPrefix("b/recordings/") }
        #expect(try await download(receiver, "b/recordings/long.mov") == media)
    }

    @Test func encryptedParts_repeatForTheSameFileAndKey_differOtherwise_andRefuseAFileChangedMidway() throws {
        let dir = try makeTemporaryFolder()
        let file = dir.appendingPathComponent("x.m4a")
        let plain = randomBytes(10 * chunk + 5)
        try plain.write(to: file)
        func parts(_ object: String = "u/recordings/x.m4a", ring: ContentKeyring? = nil, name: String? = nil,
                   recipient: Curve25519.KeyAgreement.PublicKey? = nil) throws -> EncryptedParts {
            try EncryptedParts(fileURL: file, object: object, partSize: 4 * chunk, keyring: ring ?? keyring, name: name, recipient: recipient)
        }
        func whole(_ p: EncryptedParts) throws -> Data { try (1...p.partCount).reduce(into: Data()) { $0.append(try p.read(part: $1)) } }

        let a = try parts()
        #expect(a.partCount == 3 && a.sha256 == Hashing.sha256Hex(plain))
        #expect((1...3).map { a.length(ofPart: $0) }.reduce(0, +) == a.size)
        let sealed = try whole(a)
        #expect(Int64(sealed.count) == a.size)
        #expect((1...3).map { Int64(try! a.read(part: $0).count) } == (1...3).map { a.length(ofPart: $0) })
        #expect(try EncryptionFormat.decrypt(sealed, keyring: keyring, object: "o") == plain)
        #expect(sealed.range(of: plain.subdata(in: 1000..<1064)) == nil)
        // The same file under the same key gives the same bytes (what a resume relies on); another key, another
        // content key or another plaintext gives another header.
        #expect(try whole(try parts()) == sealed && (try parts()).contentID == a.contentID)
        #expect(try parts("u/recordings/y.m4a").contentID != a.contentID)
        #expect(try parts(ring: ContentKeyring.generate()).contentID != a.contentID)
        // Bound to a media name, and to a share key: both open as such.
        #expect(try EncryptionFormat.decrypt(try whole(try parts(name: "recordings/x.m4a")), keyring: keyring, object: "o", name: "recordings/x.m4a") == plain)
        let recipient = ContentKeyring.generate()
        let shared = try whole(try parts(recipient: recipient.shareKey!.publicKey))
        #expect(shared == (try whole(try parts(recipient: recipient.shareKey!.publicKey))))
        try shared.write(to: dir.appendingPathComponent("shared"))
        #expect(try EncryptionFormat.decryptFile(dir.appendingPathComponent("shared"), to: dir.appendingPathComponent("out"), keyring: recipient, object: "o"))
        #expect(try Data(contentsOf: dir.appendingPathComponent("out")) == plain)

        // A byte of part 2 changed after the file was hashed: part 2 is refused before anything of it is sealed.
        var changed = plain
        changed[5 * chunk] ^= 1
        try changed.write(to: file)
        #expect(throws: BucketError.self) { try a.read(part: 2) }
        #expect(try a.read(part: 1) == sealed.prefix(Int(a.length(ofPart: 1))))
        #expect(try parts().contentID != a.contentID)
    }
}
