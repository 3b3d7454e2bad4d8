import Foundation
import RTSyncTestSupport
import Testing
@testable import BucketClient

@Suite struct BadInputTests {
    @Test(arguments: ["../x", "a/../../x", "/etc/passwd", "a//b", "a/", "", "a\u{0}b", "./a", "a\\b"])
    func safeKey_refusesKeysThatCouldEscape(_ key: String) {
        #expect(throws: BucketError.self) { try SafeKey.segments(of: key) }
    }

    @Test func safeKey_acceptsOrdinaryNestedKeys() throws {
        #expect(try SafeKey.segments(of: "alice/recordings/2024/é a@b+c%d.m4a").count == 4)
    }

    @Test func localFolderStore_refusesHostileKeys_andWritesNothingOutside() async throws {
        let root = try makeTemporaryFolder()
        let store = try LocalFolderStore(root: root.appendingPathComponent("bucket"))
        for key in ["../escaped", "/tmp/abs-\(UUID().uuidString)", "a//b"] {
            await #expect(throws: BucketError.self) { try await store.put(key: key, data: Data("x".utf8)) }
            await #expect(throws: BucketError.self) { try await store.get(key: key) }
            await #expect(throws: BucketError.self) { try await store.download(key: key, to: root.appendingPathComponent("out")) }
        }
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent("escaped").path))
    }

    @Test func localFolderListing_skipsSymlinksLeadingOutside() async throws {
        let root = try makeTemporaryFolder()
        let outside = root.appendingPathComponent("outside")
        try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
        try Data("secret".utf8).write(to: outside.appendingPathComponent("secret.txt"))
        let store = try LocalFolderStore(root: root.appendingPathComponent("bucket"))
        try await store.put(key: "real.txt", data: Data("r".utf8))
        try FileManager.default.createSymbolicLink(at: store.root.appendingPathComponent("link"), withDestinationURL: outside)
        #expect(try await store.listAll(prefix: "").map(\.key) == ["real.txt"])
    }

    func junkStore(bucket: String, tweak: (inout S3Configuration) -> Void = { _ in }) async throws -> S3Store {
        let server = try await HostileServer.shared.value
        var configuration = S3Configuration(bucket: bucket, endpoint: server.endpoint, addressingStyle: .path,
                                            credentials: AWSCredentials(accessKeyId: "AKID", secretAccessKey: "secret"))
        configuration.retry = RetryPolicy(maxAttempts: 2, baseDelay: 0.01, maxDelay: 0.05)
        tweak(&configuration)
        return S3Store(configuration: configuration)
    }

    @Test(arguments: ["junk", "notxml", "wrongroot"])
    func garbageListingXML_throwsInvalidResponse(bucket: String) async throws {
        let store = try await junkStore(bucket: bucket)
        do {
            _ = try await store.list(prefix: "", startAfter: nil, maxKeys: nil, continuationToken: nil)
            Issue.record("garbage was accepted")
        } catch let error as BucketError {
            guard case .invalidResponse(let request, let reason) = error else { Issue.record("got \(error)"); return }
            #expect(request.contains("ListObjectsV2 s3://\(bucket)/"))
            #expect(reason.contains("XML") || reason.contains("expected <ListBucketResult>"))
            #expect(error.hint?.contains("AWS_ENDPOINT_URL") == true)
        }
    }

    /// rclone serve s3 roots CreateMultipartUpload's answer at <InitiateMultipartUpload>, and its Complete ETag
    /// ("<md5 of part md5s>-2") is not the one HEAD and listings show (the MD5): the upload must succeed and return
    /// the ETag a listing will show, so the next sync does not take the object for changed.
    @Test func multipartUpload_toServerWithOtherRootNamesAndETags_succeeds_andReturnsTheListedETag() async throws {
        let server = try await HostileServer.shared.value
        var configuration = S3Configuration(bucket: "altroot", endpoint: server.endpoint, addressingStyle: .path,
                                            credentials: AWSCredentials(accessKeyId: "AKID", secretAccessKey: "secret"))
        configuration.retry = RetryPolicy(maxAttempts: 2, baseDelay: 0.01, maxDelay: 0.05)
        configuration.multipartThreshold = 1 << 20
        configuration.partSize = 5 << 20
        let store = S3Store(configuration: configuration)
        let source = try makeTemporaryFolder().appendingPathComponent("big.bin")
        let data = randomBytes((5 << 20) + 1_000)
        try data.write(to: source)
        let info = try await store.put(key: "mp/\(UUID().uuidString)", fileURL: source)
        #expect(store.requestCounter.count("UploadPart") == 2)
        let head = try await store.head(key: info.key)
        #expect(info.etag == head.etag)
        #expect(!info.etag.contains("-"))
        #expect(try await store.get(key: info.key) == data)
    }

    /// CompleteMultipartUpload assembled the object but its answer was lost; the retry finds the upload gone. The
    /// object is this upload's even though rclone-style servers give it a plain MD5 ETag, not "<...>-2".
    @Test func completeAnswerLost_retryFindsUploadGone_acceptsTheObjectWithAPlainETag() async throws {
        let store = try await junkStore(bucket: "altroot") {
            $0.multipartThreshold = 1 << 20
            $0.partSize = 5 << 20
            $0.retry = RetryPolicy(maxAttempts: 3, baseDelay: 0.01, maxDelay: 0.02)
        }
        let source = try makeTemporaryFolder().appendingPathComponent("big.bin")
        let data = randomBytes((5 << 20) + 10)
        try data.write(to: source)
        let info = try await store.put(key: "lost/\(UUID().uuidString)", fileURL: source)
        #expect(store.requestCounter.count("CompleteMultipartUpload") == 2)
        #expect(info.etag == (try await store.head(key: info.key)).etag)
        #expect(try await store.get(key: info.key) == data)
    }

    @Test func xmlFields_areFoundUnderAnyRootName_orInsideAWrapper() throws {
        let wrapped = Data("<CompleteMultipartUploadResponse><CompleteMultipartUploadResult><ETag>\"e-2\"</ETag></CompleteMultipartUploadResult></CompleteMultipartUploadResponse>".utf8)
        #expect(XMLElementNode.parse(wrapped)?.holder(ofAny: ["ETag"])?.string("ETag") == "\"e-2\"")
        let renamed = Data("<InitiateMultipartUpload><UploadId>u1</UploadId></InitiateMultipartUpload>".utf8)
        #expect(XMLElementNode.parse(renamed)?.holder(ofAny: ["UploadId"])?.string("UploadId") == "u1")
        #expect(XMLElementNode.parse(Data("<Something><Else/></Something>".utf8))?.holder(ofAny: ["UploadId"]) == nil)
    }

    /// Keys with U+0001 or a carriage return cannot travel in XML: the listing asks for URL encoding and decodes it;
    /// a key that is not UTF-8 once decoded is skipped with a warning naming it, and the rest is listed.
    @Test func listing_keysWithControlCharacters_areURLDecoded_andAnUnusableKeyIsSkippedWithAWarning() async throws {
        let warnings = WarningLog()
        let store = try await junkStore(bucket: "ctlkeys") { $0.warningHandler = { warnings.append($0) } }
        let keys = try await store.listAll(prefix: "").map(\.key)
        #expect(keys == ["a\u{01}b", "c\rd", "e f+g", "ok.txt"])
        #expect(warnings.lines.count == 1)
        #expect(warnings.lines.first?.contains("bad%FFkey") == true)
    }

    /// A server that ignores encoding-type sends U+0001 raw, which no XML parser accepts: the other keys are still
    /// listed and the odd one is skipped with a warning.
    @Test func listing_rawControlCharacterFromServerIgnoringEncoding_skipsThatKeyOnly() async throws {
        let warnings = WarningLog()
        let store = try await junkStore(bucket: "rawctl") { $0.warningHandler = { warnings.append($0) } }
        #expect(try await store.listAll(prefix: "").map(\.key) == ["ok.txt"])
        #expect(warnings.lines.count == 1)
        #expect(warnings.lines.first?.contains("control character") == true)
    }

    @Test(arguments: [("a%01b", "a\u{01}b"), ("e+f%2Bg%25h", "e f+g%h"), ("%C3%A9t%C3%A9", "été"), ("x%FF", nil), ("x%4", nil), ("%zz", nil)])
    func urlDecoding_ofListingValues(_ encoded: String, _ decoded: String?) {
        #expect(S3Store.urlDecoded(encoded).map { Array($0.utf8) } == decoded.map { Array($0.utf8) })
    }

    /// A server that ignores If-Match (rclone serve s3 does) must not hand back another version of the object.
    @Test func getIfMatch_onServerIgnoringIfMatch_throwsPreconditionFailed() async throws {
        let store = try await junkStore(bucket: "files")
        #expect(try await store.get(key: "x", range: nil, ifMatch: "x-v1").count == 1000)
        await #expect(throws: BucketError.preconditionFailed(key: "x")) { try await store.get(key: "x", range: nil, ifMatch: "x-v0") }
    }

    /// rclone serve s3 answers a ranged GET with 200, a Content-Range and only part of the object: the download
    /// must go on from there, never take the part for the whole object.
    @Test func rangedGetAnsweredWith200AndAPart_downloadsTheWholeObject() async throws {
        let store = try await junkStore(bucket: "rangeas200")
        let folder = try makeTemporaryFolder()
        let file = folder.appendingPathComponent("object.bin")
        let info = try await store.download(key: "object.bin", to: file)
        let expected = Data((0..<100_000).map { UInt8(($0 * 7) % 251) })
        #expect(info.size == 100_000)
        #expect(try Data(contentsOf: file) == expected)
        let middle = try await store.get(key: "object.bin", range: ByteRange(start: 1_000, end: 1_999), ifMatch: nil)
        #expect(middle == expected.subdata(in: 1_000..<2_000))
        await #expect(throws: BucketError.self) { _ = try await store.get(key: "object.bin", range: ByteRange(start: 0, end: 49_999), ifMatch: nil) }
    }

    @Test func truncatedDownload_neverReplacesAGoodFile() async throws {
        let store = try await junkStore(bucket: "trunc")
        let target = try makeTemporaryFolder().appendingPathComponent("good.bin")
        try Data("good contents".utf8).write(to: target)
        await #expect(throws: BucketError.self) { try await store.download(key: "x.bin", to: target) }
        #expect(try Data(contentsOf: target) == Data("good contents".utf8))
        let truncatedGet = await #expect(throws: BucketError.self) { try await store.get(key: "x.bin") }
        #expect(truncatedGet != nil)
    }

    /// A body cut short (fewer bytes than Content-Length, then the connection closed) is retried like a reset, on
    /// the URLSession path that GETs take, then reported as what it is.
    @Test func bodyCutShort_isRetriedLikeAReset_thenReported() async throws {
        let store = try await junkStore(bucket: "trunc") { $0.retry = RetryPolicy(maxAttempts: 4, baseDelay: 0.01, maxDelay: 0.02) }
        await #expect(throws: BucketError.self) { try await store.get(key: "cut.bin") }
        #expect(store.requestCounter.count("GetObject") == 4)
        let target = try makeTemporaryFolder().appendingPathComponent("cut.bin")
        store.requestCounter.reset()
        await #expect(throws: BucketError.self) { try await store.download(key: "cut.bin", to: target) }
        #expect(store.requestCounter.count("GetObject") == 4)
        #expect(!FileManager.default.fileExists(atPath: target.path))
    }

    @Test(arguments: [("always500", 500), ("always429", 429)])
    func serverErrorsAndThrottling_areRetriedWithBackoff_thenReported(bucket: String, status: Int) async throws {
        let store = try await junkStore(bucket: bucket)
        await #expect(throws: BucketError.httpError(request: "GetObject s3://\(bucket)/k", status: status,
                                                    code: status == 500 ? "InternalError" : "SlowDown",
                                                    message: status == 500 ? "boom" : "slow down")) {
            try await store.get(key: "k")
        }
        #expect(store.requestCounter.count("GetObject") == 2)  // maxAttempts of junkStore
    }

    @Test func clientErrors_areNeverRetried() async throws {
        let store = try await junkStore(bucket: "always400")
        await #expect(throws: BucketError.self) { try await store.get(key: "k") }
        #expect(store.requestCounter.count("GetObject") == 1)
    }

    @Test func connectionRefused_isRetried_thenReportedAsTransport() async throws {
        var configuration = S3Configuration(bucket: "b", endpoint: URL(string: "http://127.0.0.1:\(try freeLoopbackPort())")!,
                                            credentials: AWSCredentials(accessKeyId: "AKID", secretAccessKey: "secret"))
        configuration.retry = RetryPolicy(maxAttempts: 3, baseDelay: 0.01, maxDelay: 0.02)
        let store = S3Store(configuration: configuration)
        do {
            _ = try await store.head(key: "k")
            Issue.record("no error from a closed port")
        } catch let error as BucketError {
            guard case .transport(let request, _) = error else { Issue.record("got \(error)"); return }
            #expect(request == "HeadObject s3://b/k")
        }
        #expect(store.requestCounter.count("HeadObject") == 3)
    }

    @Test(arguments: ["a/../b", "./x", "a/."])
    func s3KeyWithDotSegment_isRefusedBeforeAnyRequest(_ key: String) async throws {
        let store = S3Store(configuration: S3Configuration(bucket: "b", endpoint: URL(string: "http://127.0.0.1:9")!,
                                                           credentials: AWSCredentials(accessKeyId: "A", secretAccessKey: "S")))
        await #expect(throws: BucketError.unsafeKey(key: key, reason: "'.' or '..' path segment")) {
            try await store.put(key: key, data: Data())
        }
        #expect(store.requestCounter.total == 0)
    }

    @Test func unknownURLScheme_isRefusedWithHint() {
        #expect(throws: BucketError.self) { try makeObjectStore(urlString: "ftp://host/x") }
        let error = BucketError.unsupportedURL(url: "ftp://host/x", reason: "unknown scheme ftp")
        #expect(error.hint?.contains("s3://") == true)
    }

    @Test func factory_choosesBackendByScheme() throws {
        let folder = try makeTemporaryFolder()
        #expect(try makeObjectStore(urlString: folder.absoluteString) is LocalFolderStore)
        let s3 = try makeObjectStore(urlString: "s3://my-bucket/some/prefix", environment: [
            "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"])
        let store = try #require(s3 as? S3Store)
        #expect(store.configuration.prefix == "some/prefix/")
        #expect(store.configuration.region == "eu-west-1")
        #expect(store.configuration.addressingStyle == .path)
        #expect(store.displayName == "s3://my-bucket/some/prefix/")
        let aws = try #require(try makeObjectStore(urlString: "s3://plain", environment: [:]) as? S3Store)
        #expect(aws.configuration.addressingStyle == .virtualHosted)
        #expect(aws.location(key: "a b").host == "plain.s3.us-east-1.amazonaws.com")
        #expect(aws.location(key: "a b").path == "/a%20b")
    }
}

@Suite struct GlobTests {
    @Test func glob_matchesSegmentsAndNames() {
        #expect(Glob("*.m4a").matches("recordings/2024/a.m4a"))
        #expect(!Glob("*.m4a").matches("recordings/a.wav"))
        #expect(Glob("recordings/*.m4a").matches("recordings/a.m4a"))
        #expect(!Glob("recordings/*.m4a").matches("recordings/x/a.m4a"))
        #expect(Glob("recordings/**/*.m4a").matches("recordings/a.m4a"))
        #expect(Glob("recordings/**").matches("recordings/x/y/z"))
        #expect(Glob("images/?.jpg").matches("images/a.jpg"))
        #expect(!Glob("images/?.jpg").matches("images/ab.jpg"))
    }
}

/// Collects warnings from a store's ``S3Configuration/warningHandler``.
final class WarningLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    func append(_ line: String) { lock.lock(); stored.append(line); lock.unlock() }
    var lines: [String] { lock.lock(); defer { lock.unlock() }; return stored }
}
