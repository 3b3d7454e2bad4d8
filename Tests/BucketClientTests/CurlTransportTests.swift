import Foundation
#if canImport(Glibc)
import Glibc
#endif
import RTSyncTestSupport
import Testing
@testable import BucketClient

/// Requests go through libcurl directly on Linux (large bodies, upload parts, and GET, HEAD and DELETE of objects);
/// everything about them must behave as through URLSession: SigV4 checked by moto, error mapping, retries, and the
/// file hash returned by uploads.
///
/// `CurlTransport.sent` is process-wide and other suites run in parallel, so tests only check that it grew.
@Suite struct CurlTransportTests {

    @Test func directTransport_isAvailableOnLinux() {
        #if os(Linux)
        #expect(CurlTransport.isAvailable)
        #endif
    }

    @Test func largePut_isSentDirectly_andPassesSignatureChecks() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped(), CurlTransport.isAvailable else { return }
        let store = moto.store { $0.directTransportMinimumBody = 1 << 20 }
        let data = randomBytes(3 << 20)
        let before = CurlTransport.sent.count("PUT")
        let info = try await store.put(key: "direct.bin", data: data)
        #expect(CurlTransport.sent.count("PUT") > before)
        #expect(info.etag == Hashing.md5Hex(data))
        #expect(try await store.get(key: "direct.bin") == data)
        let small = try await store.put(key: "small.bin", data: Data("tiny".utf8))  // below the minimum: URLSession
        #expect(!small.etag.isEmpty)
    }

    /// A catch-up downloads hundreds of small diffs: GET, HEAD and DELETE go through libcurl too, signed, with the
    /// same checks (size, checksum, not found).
    @Test func smallGetHeadAndDelete_areSentDirectly_andPassSignatureChecks() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped(), CurlTransport.isAvailable else { return }
        let store = moto.store()
        let data = randomBytes(5_000)
        _ = try await store.put(key: "get/small.bin", data: data)
        let (gets, heads, deletes) = (CurlTransport.sent.count("GET"), CurlTransport.sent.count("HEAD"), CurlTransport.sent.count("DELETE"))
        #expect(try await store.get(key: "get/small.bin") == data)
        let info = try await store.head(key: "get/small.bin")
        #expect(info.size == Int64(data.count))
        let file = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("rtsync-curl-get-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        // As a sync downloads a listed diff: one whole GET, its checksum checked.
        _ = try await store.download(key: "get/small.bin", to: file, expecting: info)
        #expect(try Data(contentsOf: file) == data)
        try await store.delete(key: "get/small.bin")
        #expect(CurlTransport.sent.count("GET") >= gets + 2)
        #expect(CurlTransport.sent.count("HEAD") > heads)
        #expect(CurlTransport.sent.count("DELETE") > deletes)
        do {
            _ = try await store.get(key: "get/small.bin")
            Issue.record("a deleted object was found")
        } catch BucketError.notFound {}
    }

    @Test func largePut_withAWrongSecret_isAccessDenied_likeURLSession() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped(), CurlTransport.isAvailable else { return }
        for minimum in [1 << 20, nil] as [Int?] {
            let store = moto.store { $0.credentials?.secretAccessKey = "wrong-secret"; $0.directTransportMinimumBody = minimum }
            do {
                try await store.put(key: "denied.bin", data: randomBytes(2 << 20))
                Issue.record("a wrong secret was accepted")
            } catch let error as BucketError {
                guard case .accessDenied(let request, let hint) = error else { Issue.record("got \(error)"); continue }
                #expect(request.hasPrefix("PutObject s3://rtsync-test/"))
                #expect(hint.contains("secret access key does not match"))
            }
        }
    }

    @Test func connectionRefused_onALargePut_isRetried_thenReportedAsTransport() async throws {
        guard CurlTransport.isAvailable else { return }
        var configuration = S3Configuration(bucket: "b", endpoint: URL(string: "http://127.0.0.1:\(try freeLoopbackPort())")!,
                                            credentials: AWSCredentials(accessKeyId: "AKID", secretAccessKey: "secret"))
        configuration.retry = RetryPolicy(maxAttempts: 3, baseDelay: 0.01, maxDelay: 0.02)
        let store = S3Store(configuration: configuration)
        do {
            try await store.put(key: "k", data: randomBytes(2 << 20))
            Issue.record("no error from a closed port")
        } catch let error as BucketError {
            guard case .transport(let request, let description) = error else { Issue.record("got \(error)"); return }
            #expect(request == "PutObject s3://b/k")
            #expect(!description.isEmpty)
        }
        #expect(store.requestCounter.count("PutObject") == 3)
    }

    /// A server that takes the connection but never reads or answers: the transfer stalls and fails after the idle
    /// timeout (as URLSession's timeoutIntervalForRequest), is retried, then reported.
    @Test func stalledServer_failsAfterTheIdleTimeout_andIsRetried() async throws {
        #if os(Linux)
        guard CurlTransport.isAvailable else { return }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        #expect(listen(fd, 8) == 0)  // never accepted: the kernel completes the handshake, nobody reads
        let port = Int(UInt16(bigEndian: addr.sin_port))
        var configuration = S3Configuration(bucket: "b", endpoint: URL(string: "http://127.0.0.1:\(port)")!,
                                            credentials: AWSCredentials(accessKeyId: "AKID", secretAccessKey: "secret"))
        configuration.retry = RetryPolicy(maxAttempts: 2, baseDelay: 0.01, maxDelay: 0.02)
        configuration.timeout = 1
        let store = S3Store(configuration: configuration)
        do {
            try await store.put(key: "k", data: randomBytes(16 << 20))
            Issue.record("a server that never answers did not fail the request")
        } catch let error as BucketError {
            guard case .transport(let request, _) = error else { Issue.record("got \(error)"); return }
            #expect(request == "PutObject s3://b/k")
        }
        #expect(store.requestCounter.count("PutObject") == 2)
        #endif
    }

    /// Both transports, multipart: the returned SHA-256 is the file's (computed from the bytes read for the parts).
    @Test(arguments: [true, false])
    func multipartUpload_returnsTheFileSHA256_overEitherTransport(direct: Bool) async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store {
            $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20
            $0.directTransportMinimumBody = direct ? 1 << 20 : nil
        }
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("rec.bin")
        let data = randomBytes(11 << 20)
        try data.write(to: source)
        let (info, sha256) = try await store.putReturningSHA256(key: "rec.bin", fileURL: source)
        #expect(sha256 == Hashing.sha256Hex(data))
        #expect(info.etag.hasSuffix("-3"))
        #expect(store.requestCounter.count("UploadPart") == 3)
        #expect(try await store.get(key: "rec.bin") == data)
        // Small files: PutObject, and the hash is the signed payload hash.
        let tiny = folder.appendingPathComponent("tiny.bin")
        try Data("abc".utf8).write(to: tiny)
        let (_, tinySHA) = try await store.putReturningSHA256(key: "tiny.bin", fileURL: tiny)
        #expect(tinySHA == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func resumedMultipartUpload_stillReturnsTheWholeFileSHA256() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("rec.bin")
        let data = randomBytes(16 << 20)
        try data.write(to: source)
        let crashing = moto.store(prefix: prefix) {
            $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.maxConcurrency = 1; $0.stopAfterPartsForTesting = 2
        }
        await #expect(throws: BucketError.self) { try await crashing.putReturningSHA256(key: "rec.bin", fileURL: source) }
        let resumed = moto.store(prefix: prefix) { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20 }
        let (_, sha256) = try await resumed.putReturningSHA256(key: "rec.bin", fileURL: source)
        #expect(resumed.requestCounter.count("UploadPart") == 2)  // 4 parts, 2 already there
        #expect(sha256 == Hashing.sha256Hex(data))
        #expect(try await resumed.get(key: "rec.bin") == data)
    }

    @Test func localFolderStore_putReturningSHA256_matchesTheFile() async throws {
        let store = try LocalFolderStore(root: makeTemporaryFolder().appendingPathComponent("bucket"))
        let source = try makeTemporaryFolder().appendingPathComponent("a.bin")
        try Data("abc".utf8).write(to: source)
        let (info, sha256) = try await store.putReturningSHA256(key: "a/b.bin", fileURL: source)
        #expect(sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(info.size == 3)
    }
}
