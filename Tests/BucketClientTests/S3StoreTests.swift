import Foundation
import RTSyncTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import BucketClient

/// S3-only behaviour against the loopback moto server: multipart, resume, auth errors, interop with awscli.
@Suite struct S3StoreTests {

    @Test func largeFile_isUploadedInConcurrentParts_andDownloadsInRanges() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.downloadChunkSize = 4 << 20 }
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("big.bin")
        let data = randomBytes(12 << 20)
        try data.write(to: source)
        let info = try await store.put(key: "big.bin", fileURL: source)
        #expect(store.requestCounter.count("UploadPart") == 3)
        #expect(info.etag.hasSuffix("-3"))
        let target = folder.appendingPathComponent("big.out")
        try await store.download(key: "big.bin", to: target)
        #expect(store.requestCounter.count("GetObject") == 3)
        #expect(try Data(contentsOf: target) == data)
        #expect(!FileManager.default.fileExists(atPath: store.multipartStateURL(fileURL: source, key: "big.bin").path))
    }

    @Test func interruptedMultipartUpload_resumesAfterRestart_withoutReuploadingParts() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let folder = try makeTemporaryFolder()
        let stateFolder = folder.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: stateFolder, withIntermediateDirectories: true)
        let source = folder.appendingPathComponent("rec.bin")
        let data = randomBytes(16 << 20)
        try data.write(to: source)
        let crashing = moto.store(prefix: prefix) {
            $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.maxConcurrency = 1
            $0.stateDirectory = stateFolder; $0.stopAfterPartsForTesting = 2
        }
        await #expect(throws: BucketError.self) { try await crashing.put(key: "rec.bin", fileURL: source) }
        let stateFiles = try FileManager.default.contentsOfDirectory(atPath: stateFolder.path)
        #expect(stateFiles.count == 1)
        // A new store, as after a process restart.
        let resumed = moto.store(prefix: prefix) {
            $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.stateDirectory = stateFolder
        }
        try await resumed.put(key: "rec.bin", fileURL: source)
        #expect(resumed.requestCounter.count("ListParts") == 1)
        #expect(resumed.requestCounter.count("CreateMultipartUpload") == 0)
        #expect(resumed.requestCounter.count("UploadPart") == 2)  // 4 parts, 2 already there
        #expect(try await resumed.get(key: "rec.bin") == data)
        #expect(try FileManager.default.contentsOfDirectory(atPath: stateFolder.path).isEmpty)
    }

    @Test func interruptedUpload_ofAFileThatChanged_abortsOldUploadAndStartsOver() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("changing.bin")
        try randomBytes(11 << 20).write(to: source)
        let crashing = moto.store(prefix: prefix) {
            $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.maxConcurrency = 1; $0.stopAfterPartsForTesting = 1
        }
        await #expect(throws: BucketError.self) { try await crashing.put(key: "changing.bin", fileURL: source) }
        let changed = randomBytes(11 << 20)
        try changed.write(to: source)
        let resumed = moto.store(prefix: prefix) { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20 }
        try await resumed.put(key: "changing.bin", fileURL: source)
        #expect(resumed.requestCounter.count("AbortMultipartUpload") == 1)
        #expect(resumed.requestCounter.count("CreateMultipartUpload") == 1)
        #expect(resumed.requestCounter.count("UploadPart") == 3)
        #expect(try await resumed.get(key: "changing.bin") == changed)
    }

    @Test func manyChunkDownload_fetchesConcurrently_andWritesBytesInOrder() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.downloadChunkSize = 64 << 10; $0.maxConcurrency = 4 }
        let data = randomBytes((1 << 20) + 12_345)
        try await store.put(key: "chunks.bin", data: data)
        let target = try makeTemporaryFolder().appendingPathComponent("chunks.bin")
        store.requestCounter.reset()
        let info = try await store.download(key: "chunks.bin", to: target)
        #expect(info.size == Int64(data.count))
        #expect(store.requestCounter.count("GetObject") == 17)
        #expect(try Data(contentsOf: target) == data)
    }

    /// A server answering CreateMultipartUpload and CompleteMultipartUpload as the S3 API reference documents (moto)
    /// lists the object with Complete's ETag: the upload records it without a HEAD, as `aws`, `rclone` and `s5cmd`.
    @Test func multipartUpload_toAConformingServer_returnsTheListedETag_withoutAHEAD() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20 }
        let source = try makeTemporaryFolder().appendingPathComponent("rec.bin")
        try randomBytes(11 << 20).write(to: source)
        let info = try await store.put(key: "rec.bin", fileURL: source)
        #expect(store.requestCounter.count("HeadObject") == 0)
        #expect(store.requestCounter.total == 5)  // Create, 3 parts, Complete
        let listed = try #require(try await store.listAll(prefix: "rec.bin").first)
        #expect(info.etag == listed.etag && info.etag.hasSuffix("-3"))
    }

    /// With its size known from a listing and nothing of it here yet, an object of many chunks is one GET (as
    /// `rclone` fetches it), not a GET per chunk and a HEAD for its checksum.
    @Test func listedObjectOfManyChunks_isFetchedWithOneGET_andNoHEAD() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped(), CurlTransport.isAvailable else { return }
        let store = moto.store { $0.downloadChunkSize = 64 << 10; $0.maxConcurrency = 4 }
        let data = randomBytes((1 << 20) + 12_345)
        try await store.put(key: "listed.bin", data: data)
        let listed = try #require(try await store.listAll(prefix: "listed.bin").first)
        let target = try makeTemporaryFolder().appendingPathComponent("listed.bin")
        store.requestCounter.reset()
        let info = try await store.download(key: "listed.bin", to: target, expecting: listed)
        #expect(info.size == Int64(data.count) && info.etag == listed.etag)
        #expect(store.requestCounter.count("GetObject") == 1)
        #expect(store.requestCounter.count("HeadObject") == 0)
        #expect(store.checksumCounter.count("CRC32") == 1)  // the whole object's checksum came with it
        #expect(try Data(contentsOf: target) == data)
        #expect(try FileManager.default.contentsOfDirectory(atPath: target.deletingLastPathComponent().path) == ["listed.bin"])
    }

    @Test func interruptedDownload_resumesFromPartialFile() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.downloadChunkSize = 64 << 10 }
        let data = randomBytes(200_000)
        let info = try await store.put(key: "resume.bin", data: data)
        let target = try makeTemporaryFolder().appendingPathComponent("resume.bin")
        try data.prefix(100_000).write(to: URL(fileURLWithPath: target.path + ".partial"))
        try Data(info.etag.utf8).write(to: URL(fileURLWithPath: target.path + ".partial.etag"))
        store.requestCounter.reset()
        try await store.download(key: "resume.bin", to: target)
        #expect(store.requestCounter.count("GetObject") == 2)  // 100 000 bytes left in 64 KiB chunks
        #expect(try Data(contentsOf: target) == data)
    }

    @Test func staleSecret_throwsAccessDenied_namingRequestNotSecret() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.credentials?.secretAccessKey = "not-the-secret-XYZ" }
        do {
            _ = try await store.list(prefix: "", startAfter: nil, maxKeys: nil, continuationToken: nil)
            Issue.record("a wrong secret was accepted: signature checking is off")
        } catch let error as BucketError {
            guard case .accessDenied(let request, let hint) = error else { Issue.record("got \(error)"); return }
            #expect(request.contains("ListObjectsV2 s3://rtsync-test/"))
            #expect(hint.contains("secret access key does not match"))
            #expect(!"\(error) \(hint)".contains("not-the-secret-XYZ"))
        }
    }

    /// On the server without auth: moto answers 500 to any presigned URL once auth checking is on
    /// (botocore's URLs too); the signature itself is checked against the AWS example in SigV4SignerTests.
    @Test func presignedURL_downloadsObjectWithoutCredentials() async throws {
        guard !MotoServer.skipRequested else { return }
        let store = try await MotoServer.anonymous.value.store()
        try await store.put(key: "pre signed.txt", data: Data("hello".utf8))
        let url = try store.presignedURL(key: "pre signed.txt", expires: 600)
        #expect(url.absoluteString.contains("X-Amz-Signature="))
        let (data, response) = try await URLSession.shared.data(from: url)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        #expect(data == Data("hello".utf8))
    }

    @Test func missingBucket_throwsBucketNotFound() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.bucket = "no-such-bucket-rtsync" }
        await #expect(throws: BucketError.bucketNotFound(bucket: "no-such-bucket-rtsync")) {
            _ = try await store.listAll(prefix: "")
        }
    }

    // MARK: - Interop with awscli

    func awsEnvironment(_ moto: MotoServer) -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["AWS_ACCESS_KEY_ID"] = moto.credentials?.accessKeyId
        env["AWS_SECRET_ACCESS_KEY"] = moto.credentials?.secretAccessKey
        env["AWS_DEFAULT_REGION"] = "us-east-1"
        env["AWS_REGION"] = "us-east-1"
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        return env
    }

    @Test(arguments: [1 << 20, 12 << 20])
    func uploadedByRTSync_readsBackIdenticalWithAwsCli_andViceVersa(size: Int) async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        guard let aws = findExecutable("aws") else { return }  // interop only when awscli is installed
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let store = moto.store(prefix: prefix) { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20 }
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("ours.bin")
        let data = randomBytes(size)
        try data.write(to: source)
        try await store.put(key: "ours.bin", fileURL: source)
        let env = awsEnvironment(moto)
        let theirsCopy = folder.appendingPathComponent("via-aws.bin")
        try runProcess(aws, ["s3", "cp", "--only-show-errors", "--endpoint-url", moto.endpoint.absoluteString,
                             "s3://\(moto.bucket)/\(prefix)ours.bin", theirsCopy.path], environment: env)
        #expect(try Data(contentsOf: theirsCopy) == data)
        // And the other way: awscli uploads (multipart above its 8 MB threshold), rtsync reads.
        let other = randomBytes(size)
        let otherFile = folder.appendingPathComponent("theirs.bin")
        try other.write(to: otherFile)
        try runProcess(aws, ["s3", "cp", "--only-show-errors", "--endpoint-url", moto.endpoint.absoluteString,
                             otherFile.path, "s3://\(moto.bucket)/\(prefix)theirs.bin"], environment: env)
        let downloaded = folder.appendingPathComponent("theirs.out")
        try await store.download(key: "theirs.bin", to: downloaded)
        #expect(try Data(contentsOf: downloaded) == other)
    }
}
