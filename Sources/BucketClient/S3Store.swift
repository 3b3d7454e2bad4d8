import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An ``ObjectStore`` over an S3-compatible HTTP API, signed with ``SigV4Signer``.
///
/// Uses ListObjectsV2, GetObject (whole, or ranged to resume), HeadObject, PutObject (with `x-amz-content-sha256`,
/// `Content-MD5` and optional `If-None-Match: *`), multipart uploads with resume, and DeleteObject. On Linux the
/// requests go through libcurl directly (``S3Configuration/directTransportMinimumBody``), else URLSession.
/// Transient failures are retried with ``RetryPolicy``; 4xx answers never are.
public struct S3Store: ObjectStore {
    /// The configuration in use.
    public let configuration: S3Configuration
    /// Counts HTTP requests (including retries) by S3 operation name.
    public let requestCounter = RequestCounter()
    /// Counts downloads whose bytes were checked against the object's checksum, by algorithm (`CRC32`, `SHA256`,
    /// ...), and composite multipart checksums that could not be checked (`COMPOSITE`).
    public let checksumCounter = RequestCounter()
    let session: URLSession
    /// Bounds part uploads in flight across every multipart upload of this store.
    let partLimiter: AsyncLimiter

    /// Creates a store; no request is made until the first operation.
    public init(configuration: S3Configuration) {
        self.configuration = configuration
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.timeoutIntervalForRequest = configuration.timeout
        sessionConfiguration.httpMaximumConnectionsPerHost = max(8, configuration.maxConcurrency * 2)
        sessionConfiguration.requestCachePolicy = .reloadIgnoringLocalCacheData
        sessionConfiguration.urlCache = nil
        self.session = URLSession(configuration: sessionConfiguration)
        self.partLimiter = AsyncLimiter(limit: max(1, configuration.maxConcurrency) * 2)
    }

    /// `s3://bucket/prefix`.
    public var displayName: String { "s3://\(configuration.bucket)/\(configuration.prefix)" }

    // MARK: - Requests

    struct Request {
        var method: String
        /// Key relative to the store's prefix; nil for bucket-level requests.
        var key: String?
        var query: [String: String] = [:]
        var headers: [String: String] = [:]
        var body: Data? = nil
        var operation: String
        /// Hex SHA-256 of `body` when the caller already has it (computed here otherwise).
        var payloadHash: String? = nil
        /// Send through ``CurlTransport`` when it is available and enabled, whatever the body size.
        var preferDirect = false
        /// Where the body of a 2xx answer goes instead of ``Response/body`` (a download to a file): written there as
        /// it arrives through ``CurlTransport``, else after it arrived; its length is ``Response/streamed``.
        var into: CurlTransport.FileTarget? = nil
        /// Asked before a retry: the answer to use instead of sending again when the request turns out to have
        /// taken effect already (an upload the server stored before its answer was lost).
        var alreadyDone: (@Sendable () async -> Response?)? = nil
    }

    struct Response {
        var status: Int
        var headers: HTTPURLResponse
        var body: Data
        /// Bytes of the body written to the request's file target (then not in `body`); nil when not written there.
        var streamed: Int64? = nil
        func header(_ name: String) -> String? { headers.value(forHTTPHeaderField: name) }
        /// Bytes of the body received, wherever they went.
        var received: Int64 { streamed ?? Int64(body.count) }
    }

    func fullKey(_ key: String) -> String { configuration.prefix + key }

    /// Whether a request goes through ``CurlTransport`` rather than URLSession.
    func useDirectTransport(method: String, bodySize: Int, preferred: Bool) -> Bool {
        guard let minimum = configuration.directTransportMinimumBody else { return false }
        guard method != "PUT" && method != "POST" || preferred || bodySize >= minimum else { return false }
        return CurlTransport.isAvailable
    }

    /// Where a request goes: host header, encoded path and base URL text.
    func location(key: String?) -> (scheme: String, host: String, path: String) {
        let endpoint = configuration.endpoint
        let scheme = endpoint.scheme ?? "https"
        var host = endpoint.host ?? ""
        if let port = endpoint.port, !((scheme == "https" && port == 443) || (scheme == "http" && port == 80)) {
            host += ":\(port)"
        }
        var basePath = endpoint.path
        while basePath.hasSuffix("/") { basePath.removeLast() }
        let encodedKey = key.map { SigV4Signer.encodePath(fullKey($0)) }
        switch configuration.addressingStyle {
        case .path:
            let bucketPath = basePath + "/" + SigV4Signer.encode(configuration.bucket)
            return (scheme, host, encodedKey.map { bucketPath + "/" + $0 } ?? bucketPath)
        case .virtualHosted:
            return (scheme, configuration.bucket + "." + host, basePath + "/" + (encodedKey ?? ""))
        }
    }

    /// A short name of a request for messages: `GET s3://bucket/key`, never with credentials.
    func describe(_ request: Request) -> String {
        "\(request.operation) s3://\(configuration.bucket)/\(request.key.map(fullKey) ?? configuration.prefix)"
    }

    /// Sends a request with signing and retries; returns 2xx/3xx/404/412/416 answers, throws others mapped to ``BucketError``.
    func send(_ request: Request, acceptStatuses: Set<Int> = []) async throws -> Response {
        if let key = request.key, key.split(separator: "/", omittingEmptySubsequences: false).contains(where: { $0 == "." || $0 == ".." }) {
            // HTTP clients (libcurl, URLSession) collapse dot segments, so such a key would address another object.
            throw BucketError.unsafeKey(key: key, reason: "'.' or '..' path segment")
        }
        if configuration.credentials == nil && !configuration.allowsAnonymous {
            // An unsigned request would fail later with a confusing 403 or 500: say what is missing instead.
            throw BucketError.missingCredentials(variable: "AWS_ACCESS_KEY_ID")
        }
        let (scheme, host, path) = location(key: request.key)
        let query = SigV4Signer.canonicalQuery(request.query)
        let urlText = "\(scheme)://\(host)\(path)\(query.isEmpty ? "" : "?" + query)"
        guard let url = URL(string: urlText) else {
            throw BucketError.unsafeKey(key: request.key ?? "", reason: "cannot form a request URL")
        }
        let body = request.body ?? Data()
        let payloadHash = request.payloadHash ?? Hashing.sha256Hex(body)
        var attempt = 0
        while true {
            var urlRequest = URLRequest(url: url)
            urlRequest.httpMethod = request.method
            urlRequest.timeoutInterval = configuration.timeout
            var headers = request.headers
            if let credentials = configuration.credentials {
                let signer = SigV4Signer(credentials: credentials, region: configuration.region)
                headers = signer.sign(method: request.method, host: host, encodedPath: path, query: request.query,
                                      headers: request.headers, payloadHash: payloadHash, date: Date()).headers
                headers["host"] = nil  // URLSession sets Host itself, from the same URL.
            }
            for (name, value) in headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
            let direct = useDirectTransport(method: request.method, bodySize: body.count, preferred: request.preferDirect)
            if (request.method == "PUT" || request.method == "POST") && !direct { urlRequest.httpBody = body }
            requestCounter.record(request.operation)
            do {
                var data: Data, streamed: Int64? = nil, reported: Int64 = 0
                let response: URLResponse
                if direct {
                    // A body written into a file as it arrives is counted as it grows, so a long download's progress
                    // moves (the rest is counted with the answer below).
                    let poller = request.into.flatMap { target in
                        TransferProgress.current.map { StreamedBytesPoller(target: target, progress: $0) }
                    }
                    let answer: (Data, URLResponse, Int64)
                    do {
                        answer = try await CurlTransport.send(urlRequest, body: body, timeout: configuration.timeout, into: request.into)
                    } catch {
                        await poller?.stop()
                        throw error
                    }
                    reported = await poller?.stop() ?? 0
                    (data, response) = (answer.0, answer.1)
                    if request.into != nil, let http = response as? HTTPURLResponse, (200..<300).contains(http.statusCode) { streamed = answer.2 }
                } else {
                    (data, response) = try await session.data(for: urlRequest)
                }
                guard let http = response as? HTTPURLResponse else {
                    throw BucketError.invalidResponse(request: describe(request), reason: "not an HTTP response")
                }
                if let target = request.into, streamed == nil, (200..<300).contains(http.statusCode) {
                    // URLSession gave the body in memory: put it where a direct transfer would have.
                    try Self.write(data, to: target)
                    streamed = Int64(data.count)
                    data = Data()
                }
                let received = streamed ?? Int64(data.count)
                if RetryPolicy.isRetryable(status: http.statusCode), attempt + 1 < configuration.retry.maxAttempts {
                    try await configuration.retry.wait(beforeRetry: attempt)
                    if let done = await request.alreadyDone?() { return done }
                    attempt += 1
                    continue
                }
                if request.method != "HEAD", (200..<300).contains(http.statusCode),
                   http.value(forHTTPHeaderField: "Content-Encoding") == nil,
                   let length = http.value(forHTTPHeaderField: "Content-Length").flatMap({ Int64($0) }), length != received {
                    // A body cut short must never pass for a complete one.
                    if attempt + 1 < configuration.retry.maxAttempts {
                        try await configuration.retry.wait(beforeRetry: attempt)
                        attempt += 1
                        continue
                    }
                    throw BucketError.truncated(key: request.key ?? describe(request), expected: length, received: received)
                }
                if let wanted = request.headers["if-match"], (200..<300).contains(http.statusCode),
                   let got = http.value(forHTTPHeaderField: "ETag"), !got.isEmpty, Self.unquote(got) != Self.unquote(wanted) {
                    // Some servers ignore If-Match (rclone serve s3): check it here, so bytes of a changed object
                    // are never mixed into a resumed or concurrent download (nor left in its file).
                    if let target = request.into {
                        _ = ftruncate(target.fd, off_t(target.offset))
                        target.written?.truncated(to: target.offset)
                    }
                    throw BucketError.preconditionFailed(key: request.key ?? describe(request))
                }
                let result = Response(status: http.statusCode, headers: http, body: data, streamed: streamed)
                if (200..<300).contains(http.statusCode) {
                    TransferProgress.current?.noteResponse(method: request.method, operation: request.operation, key: request.key, sent: body.count,
                                                           received: Int(received), alreadyCounted: reported,
                                                           contentRange: http.value(forHTTPHeaderField: "Content-Range"))
                }
                if (200..<300).contains(http.statusCode) || acceptStatuses.contains(http.statusCode) { return result }
                throw mapError(result, request: request)
            } catch let error as BucketError {
                throw error
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                if RetryPolicy.isRetryable(error), attempt + 1 < configuration.retry.maxAttempts {
                    try await configuration.retry.wait(beforeRetry: attempt)
                    if let done = await request.alreadyDone?() { return done }
                    attempt += 1
                    continue
                }
                throw BucketError.transport(request: describe(request), description: error.localizedDescription)
            }
        }
    }

    /// Writes `data` at the target's offset (pwrite, retried on EINTR).
    static func write(_ data: Data, to target: CurlTransport.FileTarget) throws {
        try data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            var done = 0
            while done < bytes.count {
                let n = pwrite(target.fd, bytes.baseAddress! + done, bytes.count - done, off_t(target.offset) + off_t(done))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw BucketError.localIO(path: "file descriptor \(target.fd)", description: LocalFiles.errnoText()) }
                done += n
            }
            target.written?.wrote(bytes, at: target.offset)
        }
    }

    func mapError(_ response: Response, request: Request) -> BucketError {
        let xml = XMLElementNode.parse(response.body)
        let code = xml?.string("Code")
        let message = xml?.string("Message")
        let key = request.key.map(fullKey) ?? configuration.prefix
        switch response.status {
        case 404:
            if code == "NoSuchBucket" { return .bucketNotFound(bucket: configuration.bucket) }
            return .notFound(key: request.key ?? key)
        case 412:
            return .preconditionFailed(key: request.key ?? key)
        case 403:
            let hint: String
            if configuration.credentials == nil {
                hint = "the request was sent unsigned (RTSYNC_S3_ANONYMOUS): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"
            } else if code == "SignatureDoesNotMatch" {
                hint = "the secret access key does not match the access key id \(configuration.credentials!.accessKeyId), or the clock or region (\(configuration.region)) is wrong"
            } else if code == "InvalidAccessKeyId" {
                hint = "the access key id \(configuration.credentials!.accessKeyId) is unknown to this server (check AWS_ENDPOINT_URL)"
            } else if code == "ExpiredToken" || code == "InvalidToken" {
                hint = "the session token expired; refresh AWS_SESSION_TOKEN"
            } else {
                hint = "the credentials lack permission for this request\(code.map { " (\($0))" } ?? "")"
            }
            return .accessDenied(request: describe(request), hint: hint)
        default:
            if response.status == 409, code == "ConditionalRequestConflict" { return .preconditionFailed(key: request.key ?? key) }
            return .httpError(request: describe(request), status: response.status, code: code, message: message)
        }
    }

    /// Parses an XML answer and returns the element holding its fields, whatever the root is named.
    ///
    /// `result` names the element AWS documents (for messages only); `fields` are the children of which at least
    /// one must be present. An `<Error>` body (S3 may send one with 200) is thrown as ``BucketError/httpError``.
    func parseXML(_ response: Response, result: String, fields: [String], request: Request) throws -> XMLElementNode {
        guard let xml = XMLElementNode.parse(response.body) else {
            throw BucketError.invalidResponse(request: describe(request), reason: "body is not well-formed XML")
        }
        if xml.name == "Error" {
            throw BucketError.httpError(request: describe(request), status: response.status,
                                        code: xml.string("Code"), message: xml.string("Message"))
        }
        guard let holder = xml.holder(ofAny: fields) else {
            throw BucketError.invalidResponse(request: describe(request),
                                              reason: "expected <\(result)> with \(fields.joined(separator: " or ")), got <\(xml.name)> without them")
        }
        return holder
    }

    static func unquote(_ etag: String?) -> String {
        guard var e = etag else { return "" }
        if e.hasPrefix("W/") { e.removeFirst(2) }
        return e.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
    }

    // MARK: - ObjectStore

    /// ListObjectsV2, one page (at most 1000 keys), with `encoding-type=url` so that keys XML cannot carry
    /// (U+0001, a carriage return, which XML turns into a line feed) come back intact, as the AWS SDKs list.
    ///
    /// A key that still cannot be used (its escapes are not UTF-8, or a server that ignores `encoding-type` sent a
    /// control character raw) is left out of the page and reported through ``S3Configuration/warningHandler``,
    /// naming it; the rest of the listing goes on.
    public func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        var request = Request(method: "GET", key: nil, operation: "ListObjectsV2")
        request.query = ["list-type": "2", "prefix": fullKey(prefix), "encoding-type": "url"]
        if let maxKeys { request.query["max-keys"] = String(maxKeys) }
        if let startAfter { request.query["start-after"] = fullKey(startAfter) }
        if let continuationToken { request.query["continuation-token"] = continuationToken }
        var response = try await send(request)
        // XML 1.0 cannot hold most C0 control characters even escaped: a server that ignores encoding-type (or
        // echoes StartAfter raw, as moto does) sends a body no XML parser takes. Replace those bytes and skip the
        // keys that held one, so one odd key does not stop the whole listing.
        let sanitized = Self.replacingXMLForbiddenBytes(response.body)
        if let sanitized { response.body = sanitized }
        let xml = try parseXML(response, result: "ListBucketResult", fields: ["IsTruncated", "Contents", "KeyCount"], request: request)
        let urlEncoded = xml.string("EncodingType")?.lowercased() == "url"
        var objects: [ObjectInfo] = []
        for item in xml.all("Contents") {
            guard let rawKey = item.string("Key"), let sizeText = item.string("Size"), let size = Int64(sizeText) else {
                throw BucketError.invalidResponse(request: describe(request), reason: "a <Contents> entry lacks Key or Size")
            }
            if sanitized != nil, rawKey.unicodeScalars.contains(Self.forbiddenByteStandIn) {
                warn("skipped object \(rawKey.debugDescription) in \(displayName): the server sent a control character in its key without URL encoding; rename or delete it with a tool that lists with encoding-type=url")
                continue
            }
            guard let key = urlEncoded ? Self.urlDecoded(rawKey) : rawKey else {
                warn("skipped object \(rawKey.debugDescription) in \(displayName): its URL-encoded key is not valid UTF-8 once decoded; rename or delete it with another S3 tool")
                continue
            }
            guard key.hasPrefix(configuration.prefix) else { continue }
            objects.append(ObjectInfo(key: String(key.dropFirst(configuration.prefix.count)), size: size,
                                      etag: Self.unquote(item.string("ETag")),
                                      lastModified: item.string("LastModified").flatMap(HTTPDates.parseISO)))
        }
        let truncated = xml.string("IsTruncated") == "true"
        let token = xml.string("NextContinuationToken")
        if truncated && (token ?? "").isEmpty {
            throw BucketError.invalidResponse(request: describe(request), reason: "truncated listing without NextContinuationToken")
        }
        return ObjectPage(objects: objects, nextContinuationToken: truncated ? token : nil)
    }

    /// Reports something the user should know that did not stop the operation.
    func warn(_ message: String) {
        if let handler = configuration.warningHandler {
            handler(message)
        } else {
            FileHandle.standardError.write(Data("warning: \(message)\n".utf8))
        }
    }

    /// What stands in for a byte XML 1.0 forbids (U+FFFD), in a listing body that had one.
    static let forbiddenByteStandIn: Unicode.Scalar = "\u{FFFD}"

    /// `body` with each C0 control byte XML 1.0 forbids (all but tab, LF and CR) replaced by U+FFFD; nil when it has none.
    static func replacingXMLForbiddenBytes(_ body: Data) -> Data? {
        func forbidden(_ b: UInt8) -> Bool { b < 0x20 && b != 0x09 && b != 0x0A && b != 0x0D }
        guard body.contains(where: forbidden) else { return nil }
        var out = Data()
        out.reserveCapacity(body.count + 16)
        for b in body {
            if forbidden(b) { out.append(contentsOf: [0xEF, 0xBF, 0xBD]) } else { out.append(b) }
        }
        return out
    }

    /// Decodes a value of an `encoding-type=url` listing (`%XX` escapes, `+` for a space, as botocore's
    /// `unquote_plus`); nil when an escape is malformed or the bytes are not UTF-8.
    static func urlDecoded(_ text: String) -> String? {
        func hex(_ b: UInt8) -> UInt8? {
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        let input = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(input.count)
        var i = 0
        while i < input.count {
            switch input[i] {
            case UInt8(ascii: "%"):
                guard i + 2 < input.count, let high = hex(input[i + 1]), let low = hex(input[i + 2]) else { return nil }
                bytes.append(high << 4 | low)
                i += 3
            case UInt8(ascii: "+"):
                bytes.append(UInt8(ascii: " "))
                i += 1
            case let b:
                bytes.append(b)
                i += 1
            }
        }
        // Not String(validating:as:): it needs macOS 15 / iOS 18. Invalid UTF-8 does not survive the round trip.
        let text = String(decoding: bytes, as: UTF8.self)
        return text.utf8.elementsEqual(bytes) ? text : nil
    }

    /// GetObject, optionally ranged and conditional on the ETag.
    ///
    /// A whole object is checked against its full-object checksum when the server gives one
    /// (`x-amz-checksum-mode: ENABLED`); a mismatch is retried like a body cut short, then fails with
    /// ``BucketError/checksumMismatch(key:algorithm:)``.
    public func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data {
        var request = Request(method: "GET", key: key, operation: "GetObject")
        if let range { request.headers["range"] = range.headerValue }
        if let ifMatch { request.headers["if-match"] = "\"\(ifMatch)\"" }
        if range == nil { request.headers["x-amz-checksum-mode"] = "ENABLED" }
        var attempt = 0
        var response = try await send(request, acceptStatuses: [416])
        while range == nil, response.status == 200 {
            let found = ObjectChecksum.fromHeaders { response.header($0) }
            if found.compositeSkipped { checksumCounter.record("COMPOSITE") }
            guard let checksum = found.checksum else { break }
            if checksum.matches(checksum.digest(of: response.body)) {
                checksumCounter.record(checksum.algorithm.rawValue)
                break
            }
            attempt += 1
            if attempt >= configuration.retry.maxAttempts {
                throw BucketError.checksumMismatch(key: key, algorithm: checksum.algorithm.rawValue)
            }
            try await configuration.retry.wait(beforeRetry: attempt - 1)
            response = try await send(request, acceptStatuses: [416])
        }
        if response.status == 416 { return Data() }
        if let range, response.status == 200, let part = Self.contentRange(response.header("Content-Range")) {
            // A 200 that says which part it carries (rclone serve s3): it must be the part asked for, and may be less.
            guard part.start == range.start, Int64(response.body.count) == part.end - part.start + 1 else {
                throw BucketError.invalidResponse(request: describe(request), reason: "asked for \(range.headerValue), got \(response.body.count) byte(s) said to be bytes \(part.start)-\(part.end)")
            }
            let wanted = range.end.map { Int($0 - range.start + 1) } ?? response.body.count
            guard response.body.count >= wanted || part.end == part.total - 1 else {
                throw BucketError.truncated(key: key, expected: Int64(wanted), received: Int64(response.body.count))
            }
            return response.body.prefix(wanted)
        }
        if let range, response.status == 200 {
            // The server ignored the range: cut it here.
            let start = Int(min(range.start, Int64(response.body.count)))
            let end = range.end.map { Int(min($0 + 1, Int64(response.body.count))) } ?? response.body.count
            return response.body.subdata(in: start..<max(start, end))
        }
        return response.body
    }

    /// HeadObject.
    public func head(key: String) async throws -> ObjectInfo {
        let request = Request(method: "HEAD", key: key, operation: "HeadObject")
        let response = try await send(request)
        guard let length = response.header("Content-Length").flatMap({ Int64($0) }) else {
            throw BucketError.invalidResponse(request: describe(request), reason: "no Content-Length")
        }
        return ObjectInfo(key: key, size: length, etag: Self.unquote(response.header("ETag")),
                          lastModified: response.header("Last-Modified").flatMap(HTTPDates.parseHTTP))
    }

    /// PutObject with SHA-256, MD5 and (unless ``S3Configuration/partChecksum`` is `.off`) CRC-32 integrity headers.
    @discardableResult
    public func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo {
        try await put(key: key, data: data, ifNoneMatch: ifNoneMatch, sha256: Hashing.sha256Hex(data))
    }

    /// PutObject of `data` whose hex SHA-256 the caller has computed.
    func put(key: String, data: Data, ifNoneMatch: Bool, sha256: String) async throws -> ObjectInfo {
        var request = Request(method: "PUT", key: key, operation: "PutObject")
        request.body = data
        request.payloadHash = sha256
        request.headers["content-md5"] = Hashing.md5Base64(data)
        request.headers["content-type"] = "application/octet-stream"
        if configuration.partChecksum == .crc32 {
            // S3 verifies it and stores it, so later downloads can check their bytes against it. moto stores it only
            // with the algorithm named too, as the AWS SDKs send it.
            request.headers["x-amz-checksum-crc32"] = Hashing.crc32Base64(data)
            request.headers["x-amz-sdk-checksum-algorithm"] = "CRC32"
        }
        if ifNoneMatch { request.headers["if-none-match"] = "*" }
        if !ifNoneMatch {
            // A 5xx or a dropped connection may come after the server stored the object: before sending the body
            // again, HEAD the key, and take an object of this size whose ETag is this body's MD5 (a plain PutObject's
            // ETag on S3, MinIO, moto) as this upload. Other ETag schemes (SSE-KMS) never match and are sent again.
            // (A conditional put needs no check: its retry answers 412, which the caller takes as already there.)
            let md5 = Hashing.md5Hex(data), size = data.count
            request.alreadyDone = { [self] in
                guard let head = try? await send(Request(method: "HEAD", key: key, operation: "HeadObject")),
                      Self.unquote(head.header("ETag")) == md5, head.header("Content-Length").flatMap({ Int($0) }) == size else { return nil }
                return head
            }
        }
        let response = try await send(request)
        return ObjectInfo(key: key, size: Int64(data.count), etag: Self.unquote(response.header("ETag")),
                          lastModified: response.header("Last-Modified").flatMap(HTTPDates.parseHTTP) ?? Date())
    }

    /// CopyObject (objects up to 5 GiB): the server copies `source` to `target`; nil for a larger object or a
    /// server that does not implement it (501), so the caller downloads and puts instead.
    /// See https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html
    public func serverSideCopy(from source: String, to target: String) async throws -> ObjectInfo? {
        let info = try await head(key: source)
        guard info.size <= 5 << 30 else { return nil }
        var request = Request(method: "PUT", key: target, operation: "CopyObject")
        request.headers["x-amz-copy-source"] = SigV4Signer.encode(configuration.bucket) + "/" + SigV4Signer.encodePath(fullKey(source))
        // Copy only the version just looked at: a source replaced meanwhile fails instead of copying other bytes.
        if !info.etag.isEmpty { request.headers["x-amz-copy-source-if-match"] = "\"\(info.etag)\"" }
        let response: Response
        do { response = try await send(request) } catch BucketError.httpError(_, 501, _, _) { return nil }
        // S3 may answer 200 and put an <Error> in the body; parseXML throws it.
        let result = try parseXML(response, result: "CopyObjectResult", fields: ["ETag", "LastModified"], request: request)
        return ObjectInfo(key: target, size: info.size, etag: Self.unquote(result.string("ETag")),
                          lastModified: result.string("LastModified").flatMap(HTTPDates.parseISO) ?? Date())
    }

    /// DeleteObject; a missing key is not an error.
    public func delete(key: String) async throws {
        let request = Request(method: "DELETE", key: key, operation: "DeleteObject")
        _ = try await send(request, acceptStatuses: [404])
    }

    // MARK: - Presigning

    /// A presigned URL for `method` on `key`, valid for `expires` seconds (1 s to 7 days).
    /// - Throws: ``BucketError/missingCredentials(variable:)`` when no credentials are configured.
    public func presignedURL(key: String, method: String = "GET", expires: Int = 3600, date: Date = Date()) throws -> URL {
        guard let credentials = configuration.credentials else {
            throw BucketError.missingCredentials(variable: "AWS_ACCESS_KEY_ID")
        }
        let (scheme, host, path) = location(key: key)
        return SigV4Signer(credentials: credentials, region: configuration.region)
            .presignedURL(method: method, scheme: scheme, host: host, encodedPath: path, expires: expires, date: date)
    }
}
