import Foundation
import Testing
@testable import BucketClient

/// ``DownloadCache/decrypted(_:range:keyring:name:)``: encrypted media fetched by URL stays ciphertext in the cache,
/// and a ranged read opens only the chunks it needs.
@Suite struct EncryptedDownloadCacheTests {
    let keyring = ContentKeyring.generate()
    let chunk = EncryptionFormat.chunkSize

    /// `url` serves `plain` encrypted; `cacheFolder` is the cache's folder.
    func exercise(url: URL, plain: Data, cacheFolder: URL) async throws {
        let cache = try DownloadCache(folder: cacheFolder, maxBytes: 64 << 20)
        let whole = try await cache.decrypted(url, keyring: keyring)
        #expect(whole.plaintext == plain)
        // The cache holds the ciphertext as fetched, no plaintext anywhere in its folder.
        let fileURL = try #require(whole.result?.fileURL)
        let cached = try Data(contentsOf: fileURL)
        #expect(cached.prefix(8) == Data(EncryptionFormat.magic))
        for name in try FileManager.default.contentsOfDirectory(atPath: cacheFolder.path) {
            let bytes = try Data(contentsOf: cacheFolder.appendingPathComponent(name))
            #expect(bytes.range(of: plain.subdata(in: 5000..<5064)) == nil, "\(name)")
        }
        // Ranges across chunk edges and past the end.
        let n = Int64(plain.count), c = Int64(chunk)
        for (s, e) in [(0, 9), (c - 3, c + 3), (2 * c, 3 * c - 1), (n - 5, n + 100)] as [(Int64, Int64)] {
            let got = try await cache.decrypted(url, range: ByteRange(start: s, end: e), keyring: keyring).plaintext
            #expect(got == plain.subdata(in: Int(s)..<Int(min(e, n - 1)) + 1), "range \(s)-\(e)")
        }
        #expect(try await cache.decrypted(url, range: ByteRange(start: n + 10), keyring: keyring).plaintext.isEmpty)

        // Damage chunk 3 of the cached copy (the source is unchanged, so the cache keeps serving it): a range in
        // chunks 0-1 still opens, since only those are read; a range in chunk 3, or all of it, fails naming the URL.
        var damaged = cached
        damaged[EncryptionFormat.headerSize + 3 * (chunk + 16) + 10] ^= 0xff
        try damaged.write(to: fileURL)
        #expect(try await cache.decrypted(url, range: ByteRange(start: 10, end: c + 10), keyring: keyring).plaintext
                == plain.subdata(in: 10..<chunk + 11))
        await #expect(throws: EncryptionError.authenticationFailed(object: url.absoluteString, chunk: 3)) {
            try await cache.decrypted(url, range: ByteRange(start: 3 * c + 1, end: 3 * c + 2), keyring: keyring)
        }
        await #expect(throws: EncryptionError.authenticationFailed(object: url.absoluteString, chunk: 3)) {
            try await cache.decrypted(url, keyring: keyring)
        }
        // Another user's key opens nothing.
        await #expect(throws: EncryptionError.unknownKey(object: url.absoluteString, keyID: keyring.currentID)) {
            try await cache.decrypted(url, range: ByteRange(start: 0, end: 5), keyring: ContentKeyring.generate())
        }
    }

    @Test func fileURL_encryptedMedia_cachedAsCiphertext_rangesOpenOnlyTheirChunks() async throws {
        let dir = try makeTemporaryFolder()
        let plain = randomBytes(5 * chunk + 321)
        let file = dir.appendingPathComponent("rec.m4a")
        try EncryptionFormat.encrypt(plain, keyring: keyring).write(to: file)
        try await exercise(url: file, plain: plain, cacheFolder: dir.appendingPathComponent("cache"))
    }

    @Test func presignedS3URL_encryptedMedia_cachedAsCiphertext_rangesOpenOnlyTheirChunks() async throws {
        // The server without auth (moto answers 500 to presigned URLs when checking them), as S3StoreTests does.
        guard !MotoServer.skipRequested else { return }
        let s3 = try await MotoServer.anonymous.value.store()
        let plain = randomBytes(5 * chunk + 321)
        let encrypting = EncryptingStore(inner: s3, keyring: keyring, prefixes: ["u/recordings/"], staging: try makeTemporaryFolder())
        try await encrypting.put(key: "u/recordings/rec.m4a", data: plain)
        let url = try s3.presignedURL(key: "u/recordings/rec.m4a", expires: 600)
        try await exercise(url: url, plain: plain, cacheFolder: try makeTemporaryFolder())
    }

    @Test func rangedReadOfAnUncachedHTTPURL_fetchesOnlyTheHeaderAndItsChunks_andCachesNothing() async throws {
        guard !MotoServer.skipRequested else { return }
        let s3 = try await MotoServer.anonymous.value.store()
        let plain = randomBytes(6 * chunk + 99)
        let sealed = EncryptionFormat.encrypt(plain, keyring: keyring)
        // Chunk 4 damaged: reads that do not need it still open, so it is not fetched or opened.
        var damaged = sealed
        damaged[EncryptionFormat.headerSize + 4 * (chunk + 16) + 7] ^= 0xff
        try await s3.put(key: "u/recordings/r.m4a", data: damaged)
        let url = try s3.presignedURL(key: "u/recordings/r.m4a", expires: 600)
        let folder = try makeTemporaryFolder()
        let cache = try DownloadCache(folder: folder, maxBytes: 64 << 20)
        let c = Int64(chunk)
        let got = try await cache.decrypted(url, range: ByteRange(start: c - 5, end: c + 5), keyring: keyring)
        #expect(got.result == nil)
        #expect(got.plaintext == plain.subdata(in: chunk - 5..<chunk + 6))
        #expect(cache.requestCounter.count("GET") == 2)  // the header, then chunks 0 and 1
        #expect(await cache.cachedFile(for: url) == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty)
        // The last chunk (6, after the damaged one) opens; a range in chunk 4 fails naming the URL.
        #expect(try await cache.decrypted(url, range: ByteRange(start: 6 * c + 1), keyring: keyring).plaintext == plain.subdata(in: 6 * chunk + 1..<plain.count))
        await #expect(throws: EncryptionError.authenticationFailed(object: url.absoluteString, chunk: 4)) {
            try await cache.decrypted(url, range: ByteRange(start: 4 * c, end: 4 * c), keyring: keyring)
        }
        // Past the end: empty, since the object's last chunk is its final one.
        #expect(try await cache.decrypted(url, range: ByteRange(start: Int64(plain.count) + 100), keyring: keyring).plaintext.isEmpty)
        // An object cut at a chunk boundary is reported truncated, also for a range past its end.
        try await s3.put(key: "u/recordings/cut.m4a", data: Data(sealed.prefix(EncryptionFormat.headerSize + 3 * (chunk + 16))))
        let cut = try s3.presignedURL(key: "u/recordings/cut.m4a", expires: 600)
        await #expect(throws: EncryptionError.truncated(object: cut.absoluteString)) {
            try await cache.decrypted(cut, range: ByteRange(start: 2 * c), keyring: keyring)
        }
        await #expect(throws: EncryptionError.truncated(object: cut.absoluteString)) {
            try await cache.decrypted(cut, range: ByteRange(start: 5 * c), keyring: keyring)
        }
    }

    @Test func boundToAnEncryptedName_opensOnlyWithThatName() async throws {
        let dir = try makeTemporaryFolder()
        let file = dir.appendingPathComponent("x")
        try EncryptionFormat.encrypt(Data("bound".utf8), keyring: keyring, name: "images/a.jpg").write(to: file)
        let cache = try DownloadCache(folder: dir.appendingPathComponent("cache"), maxBytes: 1 << 20)
        #expect(try await cache.decrypted(file, keyring: keyring, name: "images/a.jpg").plaintext == Data("bound".utf8))
        await #expect(throws: EncryptionError.authenticationFailed(object: file.absoluteString, chunk: 0)) {
            try await cache.decrypted(file, keyring: keyring, name: "images/b.jpg")
        }
        await #expect(throws: EncryptionError.self) { try await cache.decrypted(file, keyring: keyring) }
    }
}
