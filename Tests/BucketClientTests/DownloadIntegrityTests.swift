import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import BucketClient

/// Every download is checked against the size the listing or HEAD gave and against the server's checksum before
/// anything is installed or recorded: against a loopback server that lies on purpose, and against moto and rclone.
@Suite struct DownloadIntegrityTests {
    /// A store on a fresh fault bucket of the hostile server (a working bucket until told to misbehave).
    func faultStore(tweak: (inout S3Configuration) -> Void = { _ in }) async throws -> (S3Store, String) {
        let server = try await HostileServer.shared.value
        let bucket = "fault-\(UUID().uuidString.prefix(8).lowercased())"
        var configuration = S3Configuration(bucket: bucket, endpoint: server.endpoint, addressingStyle: .path,
                                            credentials: AWSCredentials(accessKeyId: "AKID", secretAccessKey: "secret"))
        configuration.retry = RetryPolicy(maxAttempts: 3, baseDelay: 0.01, maxDelay: 0.02)
        tweak(&configuration)
        return (S3Store(configuration: configuration), bucket)
    }

    /// Tells the fault bucket how to misbehave from now on (`short`, `good-<alg>`, `bad-<alg>`, `composite`, `none`).
    func setMode(_ bucket: String, _ mode: String) async throws {
        let server = try await HostileServer.shared.value
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)/\(bucket)?mode=\(mode)")!)
        request.httpMethod = "POST"
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
    }

    /// Every regular file under `folder`, relative paths, sorted.
    func files(in folder: URL) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: folder.path) else { return [] }
        return walker.compactMap { $0 as? String }.filter { path in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: folder.appendingPathComponent(path).path, isDirectory: &isDirectory) && !isDirectory.boolValue
        }.sorted()
    }

    // MARK: - Size known from the listing

    /// A server that sends half of each object with a consistent Content-Length and Content-Range: only the size
    /// the listing gave can catch it. Nothing is installed or recorded, and the next run, the server fixed, pulls
    /// both files whole.
    @Test func mediaSyncPull_objectsServedShorterThanListed_failNamingThem_installAndRecordNothing_thenPullWholeOnceFixed() async throws {
        let (store, bucket) = try await faultStore()
        let image = randomBytes(10_000)
        let recording = randomBytes(3_001)
        try await store.put(key: "alice/images/photo.jpg", data: image)
        try await store.put(key: "alice/recordings/a.m4a", data: recording)
        try await setMode(bucket, "short")
        let root = try makeTemporaryFolder()
        let documents = root.appendingPathComponent("Documents")
        let manifest = root.appendingPathComponent("media-manifest.json")
        let sync = try MediaSync(store: store, documents: documents, user: "alice", manifestURL: manifest)
        var options = MediaSyncOptions()
        options.direction = .pull

        let first = try await sync.run(options)
        #expect(first.downloaded.isEmpty)
        #expect(first.errors.map(\.path).sorted() == ["images/photo.jpg", "recordings/a.m4a"])
        for issue in first.errors {
            #expect(issue.reason.contains("wrong size"), "\(issue.reason)")
        }
        #expect(files(in: documents).isEmpty)  // no file, no .partial left behind
        #expect(try MediaManifest.load(from: manifest).files.isEmpty)

        try await setMode(bucket, "none")
        let second = try await sync.run(options)
        #expect(second.errors.isEmpty)
        #expect(second.downloaded == ["images/photo.jpg", "recordings/a.m4a"])
        #expect(try Data(contentsOf: documents.appendingPathComponent("images/photo.jpg")) == image)
        #expect(try Data(contentsOf: documents.appendingPathComponent("recordings/a.m4a")) == recording)
    }

    /// The same lie caught by the size HEAD gives, for a large object fetched in ranges and for a small one fetched
    /// whole, and for a plain GET of the object's bytes: retried, then `sizeMismatch` naming the key.
    @Test(arguments: [10_000, 200_000])
    func download_shorterThanHEADSays_isRetriedThenFailsWithSizeMismatch_andKeepsTheOldFile(size: Int) async throws {
        let (store, bucket) = try await faultStore { $0.downloadChunkSize = 1 << 16 }
        try await store.put(key: "big.bin", data: randomBytes(size))
        try await setMode(bucket, "short")
        let target = try makeTemporaryFolder().appendingPathComponent("big.bin")
        try Data("old".utf8).write(to: target)
        let listed = try await store.head(key: "big.bin")
        store.requestCounter.reset()
        await #expect(throws: BucketError.sizeMismatch(key: "big.bin", expected: Int64(size), received: Int64(size / 2))) {
            try await store.download(key: "big.bin", to: target, expecting: listed)
        }
        #expect(store.requestCounter.count("GetObject") == 3)  // every attempt of the policy, each from scratch
        #expect(try Data(contentsOf: target) == Data("old".utf8))
        #expect(files(in: target.deletingLastPathComponent()) == ["big.bin"])
        await #expect(throws: BucketError.sizeMismatch(key: "big.bin", expected: Int64(size), received: Int64(size / 2))) {
            _ = try await store.get(key: "big.bin", expecting: listed)
        }
    }

    /// An object larger than one chunk, of known size, is fetched with one plain GET written into the partial file as
    /// it arrives, after its listed ETag is recorded: a GET cut off midway leaves a prefix of the object and its
    /// version, which the next call resumes with one ranged GET (not from scratch), and nothing is installed before.
    @Test func streamedDownloadCutOff_keepsAPrefixAndItsVersion_thenResumesWithARange() async throws {
        guard CurlTransport.isAvailable else { return }
        let (store, bucket) = try await faultStore { $0.downloadChunkSize = 1 << 16; $0.retry = RetryPolicy(maxAttempts: 1) }
        let data = randomBytes(400_000)
        try await store.put(key: "long.bin", data: data)
        let listed = try await store.head(key: "long.bin")
        try await setMode(bucket, "cut")
        let target = try makeTemporaryFolder().appendingPathComponent("long.bin")
        let partial = URL(fileURLWithPath: target.path + ".partial")
        store.requestCounter.reset()
        await #expect(throws: BucketError.self) { try await store.download(key: "long.bin", to: target, expecting: listed) }
        #expect(store.requestCounter.count("GetObject") == 1)
        #expect(!FileManager.default.fileExists(atPath: target.path))
        let kept = try Data(contentsOf: partial)
        #expect(kept.count > 0 && kept.count < data.count)
        #expect(kept == data.prefix(kept.count))
        #expect(try String(contentsOf: URL(fileURLWithPath: partial.path + ".etag"), encoding: .utf8) == listed.etag)

        // Still cutting plain GETs off: only a ranged GET of the rest can finish it.
        store.requestCounter.reset()
        let info = try await store.download(key: "long.bin", to: target, expecting: listed)
        #expect(info.size == Int64(data.count))
        #expect(store.requestCounter.count("GetObject") == (data.count - kept.count + (1 << 16) - 1) / (1 << 16))
        #expect(try Data(contentsOf: target) == data)
        #expect(files(in: target.deletingLastPathComponent()) == ["long.bin"])
    }

    /// A download's SHA-256 (what the media manifest records) is computed from the bytes as they reach the partial
    /// file, for an object within one chunk and for one larger than a chunk, so the file is not read back; a
    /// download resumed from what an earlier call left cannot be hashed that way and is read back instead. Either
    /// way the digest is the object's.
    @Test func downloadReturningSHA256_hashesTheBytesAsTheyArrive_andReadsBackOnlyAResumedDownload() async throws {
        guard CurlTransport.isAvailable else { return }
        let (store, bucket) = try await faultStore { $0.downloadChunkSize = 1 << 16; $0.retry = RetryPolicy(maxAttempts: 1) }
        let small = randomBytes(10_000)
        let large = randomBytes(400_000)
        try await store.put(key: "small.bin", data: small)
        try await store.put(key: "long.bin", data: large)
        let folder = try makeTemporaryFolder()
        for (key, data) in [("small.bin", small), ("long.bin", large)] {
            let listed = try await store.head(key: key)
            let target = folder.appendingPathComponent(key)
            let (info, sha256) = try await store.download(key: key, to: target, expecting: listed, hashing: true, flushing: false)
            #expect(info.size == Int64(data.count))
            #expect(sha256 == Hashing.sha256Hex(data), "\(key): not hashed as it arrived")
            #expect(try Data(contentsOf: target) == data)
        }

        // Cut off midway (plain GETs only), then resumed with ranged GETs: the first bytes came in an earlier call.
        let listed = try await store.head(key: "long.bin")
        try await setMode(bucket, "cut")
        let resumed = folder.appendingPathComponent("resumed.bin")
        await #expect(throws: BucketError.self) { try await store.download(key: "long.bin", to: resumed, expecting: listed) }
        let (_, streamed) = try await store.download(key: "long.bin", to: resumed, expecting: listed, hashing: true, flushing: false)
        #expect(streamed == nil)
        #expect(try Data(contentsOf: resumed) == large)
        let again = folder.appendingPathComponent("again.bin")
        await #expect(throws: BucketError.self) { try await store.download(key: "long.bin", to: again, expecting: listed) }
        let (_, readBack) = try await store.downloadReturningSHA256(key: "long.bin", to: again, expecting: listed, flushing: false)
        #expect(readBack == Hashing.sha256Hex(large))
    }

    /// `rtsync bucket get` checks the download against the size HEAD gives: one error line naming the key, a
    /// hint, exit 1, no file; once the server is fixed the same command writes the whole object.
    @Test func bucketGetCLI_objectServedShorterThanHEADSays_exitsOneNamingTheKey_writesNothing_thenGetsItWhole() async throws {
        let (store, bucket) = try await faultStore()
        let payload = randomBytes(10_000)
        try await store.put(key: "dir/big.bin", data: payload)
        try await setMode(bucket, "short")
        let server = try await HostileServer.shared.value
        let folder = try makeTemporaryFolder()
        let target = folder.appendingPathComponent("out.bin")
        let environment = ["HOME": folder.path, "AWS_ENDPOINT_URL": server.endpoint.absoluteString, "AWS_ACCESS_KEY_ID": "AKID",
                           "AWS_SECRET_ACCESS_KEY": "secret", "AWS_PROFILE": "", "AWS_REGION": "us-east-1"]
        let cli = CLITests()
        let failed = try cli.rtsync(["bucket", "get", "dir/big.bin", target.path, "--bucket", "s3://\(bucket)"], environment: environment)
        #expect(failed.status == 1)
        #expect(failed.err.hasPrefix("error: download has the wrong size: got 5000 bytes, the bucket lists 10000; nothing was installed (dir/big.bin)\nhint: "), "\(failed.err)")
        #expect(files(in: folder).isEmpty)
        let piped = try cli.rtsync(["bucket", "get", "dir/big.bin", "-", "--bucket", "s3://\(bucket)"], environment: environment)
        #expect(piped.status == 1)
        #expect(piped.out.isEmpty)

        try await setMode(bucket, "none")
        let fixed = try cli.rtsync(["bucket", "get", "dir/big.bin", target.path, "--bucket", "s3://\(bucket)"], environment: environment)
        #expect(fixed.status == 0, "\(fixed.err)")
        #expect(try Data(contentsOf: target) == payload)
    }

    // MARK: - Checksums

    /// A wrong full-object checksum is treated like a body cut short: retried, then `checksumMismatch` naming the
    /// key, and the file already there is kept; for a small object fetched whole, a large one assembled from
    /// ranges (checked against HEAD's checksum), and a plain GET.
    @Test(arguments: ["sha256", "crc32"], [10_000, 200_000])
    func download_wrongChecksum_isRetriedThenFailsNamingTheKey_andKeepsTheOldFile(algorithm: String, size: Int) async throws {
        let (store, bucket) = try await faultStore { $0.downloadChunkSize = 1 << 16 }
        try await store.put(key: "photo.jpg", data: randomBytes(size))
        try await setMode(bucket, "bad-\(algorithm)")
        let target = try makeTemporaryFolder().appendingPathComponent("photo.jpg")
        try Data("old".utf8).write(to: target)
        let listed = try await store.head(key: "photo.jpg")
        let mismatch = BucketError.checksumMismatch(key: "photo.jpg", algorithm: algorithm.uppercased())
        await #expect(throws: mismatch) { try await store.download(key: "photo.jpg", to: target, expecting: listed) }
        await #expect(throws: mismatch) { try await store.download(key: "photo.jpg", to: target) }
        #expect(try Data(contentsOf: target) == Data("old".utf8))
        #expect(files(in: target.deletingLastPathComponent()) == ["photo.jpg"])
        store.requestCounter.reset()
        await #expect(throws: mismatch) { _ = try await store.get(key: "photo.jpg") }
        #expect(store.requestCounter.count("GetObject") == 3)
        #expect(store.checksumCounter.total == 0)
        #expect(mismatch.description.contains("photo.jpg") && mismatch.hint != nil)
    }

    /// A media sync pull whose object fails its checksum reports the file, installs and records nothing.
    @Test func mediaSyncPull_wrongChecksum_reportsTheFile_installsAndRecordsNothing() async throws {
        let (store, bucket) = try await faultStore()
        try await store.put(key: "alice/images/photo.jpg", data: randomBytes(5_000))
        try await setMode(bucket, "bad-sha256")
        let root = try makeTemporaryFolder()
        let documents = root.appendingPathComponent("Documents")
        let manifest = root.appendingPathComponent("media-manifest.json")
        var options = MediaSyncOptions()
        options.direction = .pull
        let report = try await MediaSync(store: store, documents: documents, user: "alice", manifestURL: manifest).run(options)
        #expect(report.downloaded.isEmpty)
        #expect(report.errors.map(\.path) == ["images/photo.jpg"])
        #expect(report.errors.first?.reason.contains("SHA256 checksum") == true)
        #expect(files(in: documents).isEmpty)
        #expect(try MediaManifest.load(from: manifest).files.isEmpty)
    }

    /// A right checksum of every algorithm S3 offers is computed and checked (the counter proves it ran), on a
    /// small object fetched whole, a large one assembled from ranges, and a plain GET; the values come from a
    /// bit-by-bit implementation in the server, independent of rtsync's tables.
    @Test(arguments: ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"])
    func download_rightChecksumOfEachAlgorithm_isVerified(algorithm: String) async throws {
        let (store, bucket) = try await faultStore { $0.downloadChunkSize = 1 << 16 }
        let small = randomBytes(3_000)
        let large = randomBytes(150_000)
        try await store.put(key: "small.bin", data: small)
        try await store.put(key: "large.bin", data: large)
        try await setMode(bucket, "good-\(algorithm)")
        let folder = try makeTemporaryFolder()
        let smallListed = try await store.head(key: "small.bin")
        try await store.download(key: "small.bin", to: folder.appendingPathComponent("small.bin"), expecting: smallListed)
        try await store.download(key: "large.bin", to: folder.appendingPathComponent("large.bin"))
        #expect(try await store.get(key: "small.bin") == small)
        #expect(try Data(contentsOf: folder.appendingPathComponent("small.bin")) == small)
        #expect(try Data(contentsOf: folder.appendingPathComponent("large.bin")) == large)
        #expect(store.checksumCounter.count(algorithm.uppercased()) == 3)
    }

    /// A composite (multipart) checksum cannot be checked against the whole body: skipped and counted, not failed.
    @Test func download_compositeChecksum_isSkippedAndCounted() async throws {
        let (store, bucket) = try await faultStore()
        let payload = randomBytes(4_000)
        try await store.put(key: "k.bin", data: payload)
        try await setMode(bucket, "composite")
        let target = try makeTemporaryFolder().appendingPathComponent("k.bin")
        try await store.download(key: "k.bin", to: target, expecting: try await store.head(key: "k.bin"))
        #expect(try Data(contentsOf: target) == payload)
        #expect(store.checksumCounter.count("COMPOSITE") == 1)
        #expect(store.checksumCounter.total == 1)
    }

    /// Known check values ("123456789") of the CRCs S3 uses.
    @Test func checksumAlgorithms_matchTheirPublishedCheckValues() {
        let input = Data("123456789".utf8)
        func hex(_ algorithm: ObjectChecksum.Algorithm) -> String {
            Hashing.hex(Data(base64Encoded: ObjectChecksum(algorithm: algorithm, base64: "").digest(of: input))!)
        }
        #expect(hex(.crc32) == "cbf43926")
        #expect(hex(.crc32c) == "e3069283")
        #expect(hex(.crc64nvme) == "ae8b14860a799888")
        #expect(hex(.sha1) == "f7c3bc1d808e04732adf679965ccc34ca7ae3441")
    }

    @Test func checksumHeaders_compositeOrTypelessHEADValues_areNotTakenForFullObjectOnes() {
        let crc = "AAAAAA=="
        func parse(_ headers: [String: String], head: Bool = false) -> (ObjectChecksum?, Bool) {
            let r = ObjectChecksum.fromHeaders({ headers[$0] }, requireFullObjectType: head)
            return (r.checksum, r.compositeSkipped)
        }
        #expect(parse(["x-amz-checksum-crc32": crc]).0 == ObjectChecksum(algorithm: .crc32, base64: crc))
        #expect(parse(["x-amz-checksum-crc32": crc + "-3"]) == (nil, true))
        #expect(parse(["x-amz-checksum-crc32": crc, "x-amz-checksum-type": "COMPOSITE"]) == (nil, true))
        #expect(parse(["x-amz-checksum-crc32": crc], head: true) == (nil, false))
        #expect(parse(["x-amz-checksum-crc32": crc, "x-amz-checksum-type": "FULL_OBJECT"], head: true).0 != nil)
        #expect(parse(["x-amz-checksum-sha256": crc]) == (nil, false))  // not a SHA-256 digest: nothing to check
    }

    // MARK: - media fetch (the download cache)

    /// `media fetch` checks a full-object checksum a server sends with a URL's body: a wrong one is fetched again,
    /// then reported naming the URL, and the copy cached before is kept; a right one is checked (counted).
    @Test func mediaFetch_wrongChecksumFromServer_isRetriedThenFails_keepingTheCachedCopy_andARightOneIsChecked() async throws {
        let (store, bucket) = try await faultStore()
        let payload = randomBytes(6_000)
        try await store.put(key: "cdn/image.jpg", data: payload)
        let server = try await HostileServer.shared.value
        let url = URL(string: "http://127.0.0.1:\(server.port)/\(bucket)/cdn/image.jpg")!
        let cache = try DownloadCache(folder: try makeTemporaryFolder(), maxBytes: 1 << 20,
                                      retry: RetryPolicy(maxAttempts: 3, baseDelay: 0.01, maxDelay: 0.02))
        try await setMode(bucket, "sendgood-sha256")
        let first = try await cache.fetch(url)
        #expect(try Data(contentsOf: first.fileURL) == payload)
        #expect(cache.checksumCounter.count("SHA256") == 1)

        try await store.put(key: "cdn/image.jpg", data: randomBytes(6_000))  // changed: the cache must fetch it
        try await setMode(bucket, "sendbad-crc32")
        cache.requestCounter.reset()
        await #expect(throws: BucketError.checksumMismatch(key: url.absoluteString, algorithm: "CRC32")) { _ = try await cache.fetch(url) }
        #expect(cache.requestCounter.count("GET") == 3)
        #expect(try Data(contentsOf: first.fileURL) == payload)
    }

    // MARK: - Real servers

    /// moto stores the CRC-32 rtsync sends with PutObject and returns it to a GET with checksum mode enabled: the
    /// download checks it (counted); a wrong checksum stored by another client fails the download, nothing installed.
    @Test func moto_putSendsCRC32_downloadVerifiesIt_andAWrongStoredChecksumFailsTheDownload() async throws {
        guard let server = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = server.store()
        let payload = randomBytes(20_000)
        try await store.put(key: "a.bin", data: payload)
        let folder = try makeTemporaryFolder()
        let listed = try #require(try await store.listAll(prefix: "a.bin").first)
        try await store.download(key: "a.bin", to: folder.appendingPathComponent("a.bin"), expecting: listed)
        #expect(try Data(contentsOf: folder.appendingPathComponent("a.bin")) == payload)
        #expect(try await store.get(key: "a.bin") == payload)
        #expect(store.checksumCounter.count("CRC32") == 2)

        // Another client stored a checksum that is not the body's (moto keeps what it is given).
        var request = S3Store.Request(method: "PUT", key: "b.bin", operation: "PutObject")
        request.body = payload
        request.headers["x-amz-checksum-crc32"] = Hashing.crc32Base64(payload + Data([1]))
        request.headers["x-amz-sdk-checksum-algorithm"] = "CRC32"
        _ = try await store.send(request)
        let target = folder.appendingPathComponent("b.bin")
        await #expect(throws: BucketError.checksumMismatch(key: "b.bin", algorithm: "CRC32")) {
            try await store.download(key: "b.bin", to: target, expecting: try await store.head(key: "b.bin"))
        }
        #expect(!FileManager.default.fileExists(atPath: target.path))
        #expect(files(in: folder) == ["a.bin"])
    }

    /// An object replaced between the listing and the download (another size, another ETag) is downloaded as it is
    /// now, whole, rather than failing forever on the listing's size: on a local folder, moto and rclone serve s3.
    @Test(arguments: Backend.allCases)
    func objectReplacedAfterListing_isDownloadedWholeInItsNewVersion(_ backend: Backend) async throws {
        guard let store = try await backend.makeStore() else { return }
        try await store.put(key: "r.bin", data: randomBytes(1_000))
        let listed = try #require(try await store.listAll(prefix: "r.bin").first)
        let replacement = randomBytes(3_000)
        try await store.put(key: "r.bin", data: replacement)
        let target = try makeTemporaryFolder().appendingPathComponent("r.bin")
        let info = try await store.download(key: "r.bin", to: target, expecting: listed)
        #expect(info.size == 3_000)
        #expect(try Data(contentsOf: target) == replacement)
    }
}
