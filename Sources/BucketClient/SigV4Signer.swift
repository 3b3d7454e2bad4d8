import Foundation

/// AWS Signature Version 4 for S3: `Authorization` headers and presigned URLs.
///
/// A pure value: no clock and no I/O, so it is tested against the published examples of
/// <https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html> and
/// <https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html>.
/// Paths are passed already encoded with ``encodePath(_:)``; S3 does not encode them twice.
public struct SigV4Signer: Sendable {
    /// The key pair used to sign.
    public var credentials: AWSCredentials
    /// The region in the credential scope (e.g. `us-east-1`).
    public var region: String
    /// The service in the credential scope (`s3`).
    public var service: String

    /// The SHA-256 of an empty payload.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    /// The payload hash placeholder for presigned URLs and streamed bodies.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    /// Creates a signer.
    public init(credentials: AWSCredentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    // MARK: - Encoding

    /// Percent-encodes every byte except `A-Za-z0-9-._~` (AWS `UriEncode` with `/` encoded too).
    public static func encode(_ string: String) -> String {
        encodeBytes(string, keepSlash: false)
    }

    /// Percent-encodes an object key byte by byte, keeping `/` (never via `URL.path`).
    public static func encodePath(_ key: String) -> String {
        encodeBytes(key, keepSlash: true)
    }

    private static func encodeBytes(_ string: String, keepSlash: Bool) -> String {
        let hexDigits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(string.utf8.count)
        for b in string.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            case UInt8(ascii: "/") where keepSlash:
                out.append(b)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 0x0f)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The canonical query string: names and values encoded, sorted by name then value.
    public static func canonicalQuery(_ query: [String: String]) -> String {
        var pairs: [(name: String, value: String)] = []
        for (name, value) in query { pairs.append((encode(name), encode(value))) }
        pairs.sort { a, b in a.name == b.name ? a.value < b.value : a.name < b.name }
        var parts: [String] = []
        for pair in pairs { parts.append(pair.name + "=" + pair.value) }
        return parts.joined(separator: "&")
    }

    // MARK: - Dates

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC.
    public static func amzDate(_ date: Date) -> String {
        // gmtime_r, not Calendar: every request is signed, and a Calendar's components cost more than the HMACs.
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var t = tm()
        guard gmtime_r(&seconds, &t) != nil else { return "19700101T000000Z" }
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(t.tm_year + 1900)\(two(t.tm_mon + 1))\(two(t.tm_mday))T\(two(t.tm_hour))\(two(t.tm_min))\(two(t.tm_sec))Z"
    }

    // MARK: - Signing

    /// The result of signing a request: headers to send and the parts of the signature (for tests and debugging).
    public struct Signed: Sendable {
        /// Every header to send: the caller's, plus `host`, `x-amz-date`, `x-amz-content-sha256`,
        /// `x-amz-security-token` (when set) and `authorization`. Names are lowercase.
        public var headers: [String: String]
        /// The canonical request that was signed.
        public var canonicalRequest: String
        /// The hex signature.
        public var signature: String
    }

    /// Signs a request in the `Authorization` header.
    ///
    /// - Parameters:
    ///   - method: the HTTP method (`GET`, `PUT`, ...).
    ///   - host: the `Host` header value (with `:port` when not the default).
    ///   - encodedPath: the path as sent, from ``encodePath(_:)`` (e.g. `/bucket/a%20b`).
    ///   - headers: extra headers to sign and send (`range`, `if-match`, `content-md5`, ...).
    ///   - query: the query parameters, not yet encoded.
    ///   - payloadHash: hex SHA-256 of the body, or ``unsignedPayload``.
    ///   - date: the signing time (`x-amz-date`).
    public func sign(method: String, host: String, encodedPath: String, query: [String: String] = [:],
                     headers: [String: String] = [:], payloadHash: String, date: Date) -> Signed {
        let amzDate = Self.amzDate(date)
        var all: [String: String] = [:]
        for (name, value) in headers { all[name.lowercased()] = value }
        all["host"] = host
        all["x-amz-date"] = amzDate
        all["x-amz-content-sha256"] = payloadHash
        if let token = credentials.sessionToken { all["x-amz-security-token"] = token }
        let names = all.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(Self.trimHeaderValue(all[$0]!))\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let canonical = [method, encodedPath.isEmpty ? "/" : encodedPath, Self.canonicalQuery(query),
                         canonicalHeaders, signedHeaders, payloadHash].joined(separator: "\n")
        let signature = signature(canonicalRequest: canonical, amzDate: amzDate)
        all["authorization"] = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyId)/\(scope(amzDate)),"
            + " SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signed(headers: all, canonicalRequest: canonical, signature: signature)
    }

    /// Returns a presigned URL (query-string authentication) valid for `expires` seconds (at most 7 days).
    public func presignedURL(method: String = "GET", scheme: String = "https", host: String, encodedPath: String,
                             query: [String: String] = [:], expires: Int, date: Date) -> URL {
        let amzDate = Self.amzDate(date)
        var q = query
        q["X-Amz-Algorithm"] = "AWS4-HMAC-SHA256"
        q["X-Amz-Credential"] = "\(credentials.accessKeyId)/\(scope(amzDate))"
        q["X-Amz-Date"] = amzDate
        q["X-Amz-Expires"] = String(max(1, min(expires, 604_800)))
        q["X-Amz-SignedHeaders"] = "host"
        if let token = credentials.sessionToken { q["X-Amz-Security-Token"] = token }
        let canonical = [method, encodedPath.isEmpty ? "/" : encodedPath, Self.canonicalQuery(q),
                         "host:\(host)\n", "host", Self.unsignedPayload].joined(separator: "\n")
        let signature = signature(canonicalRequest: canonical, amzDate: amzDate)
        let text = "\(scheme)://\(host)\(encodedPath)?\(Self.canonicalQuery(q))&X-Amz-Signature=\(signature)"
        return URL(string: text)!
    }

    // MARK: - Internals

    private func scope(_ amzDate: String) -> String {
        "\(amzDate.prefix(8))/\(region)/\(service)/aws4_request"
    }

    private func signature(canonicalRequest: String, amzDate: String) -> String {
        let stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope(amzDate),
                            Hashing.sha256Hex(Data(canonicalRequest.utf8))].joined(separator: "\n")
        return Hashing.hex(Hashing.hmac(key: signingKey(day: String(amzDate.prefix(8))), stringToSign))
    }

    /// The key of one day's scope (four HMACs), kept for the day: every request of the day signs with it.
    private func signingKey(day: String) -> [UInt8] {
        let id = SigningKeys.ID(secret: credentials.secretAccessKey, day: day, region: region, service: service)
        if let known = SigningKeys.shared.key(for: id) { return known }
        var key = Hashing.hmac(key: Array(("AWS4" + credentials.secretAccessKey).utf8), day)
        key = Hashing.hmac(key: key, region)
        key = Hashing.hmac(key: key, service)
        key = Hashing.hmac(key: key, "aws4_request")
        SigningKeys.shared.remember(key, for: id)
        return key
    }

    /// SigV4's `Trimall`: leading and trailing whitespace removed, each run of spaces, tabs or line breaks made one
    /// space, as the AWS SDKs do (botocore: `' '.join(value.split())`).
    static func trimHeaderValue(_ value: String) -> String {
        // Most values have nothing to trim: no whitespace but single spaces between words.
        var previous: UInt8 = 0x20
        var clean = true
        for byte in value.utf8 {
            if byte == 0x09 || byte == 0x0A || byte == 0x0B || byte == 0x0C || byte == 0x0D || (byte == 0x20 && previous == 0x20) { clean = false; break }
            previous = byte
        }
        if clean && previous != 0x20 || value.isEmpty { return value }
        return value.unicodeScalars.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" || $0 == "\u{0B}" || $0 == "\u{0C}" })
            .map { String(String.UnicodeScalarView($0)) }.joined(separator: " ")
    }
}

/// Signing keys by secret, day and scope (`SigV4Signer.signingKey(day:)`); dropped when `capacity` is reached.
private final class SigningKeys: @unchecked Sendable {
    struct ID: Hashable {
        var secret: String
        var day: String
        var region: String
        var service: String
    }

    static let shared = SigningKeys()
    private let lock = NSLock()
    private var keys: [ID: [UInt8]] = [:]
    private let capacity = 16

    func key(for id: ID) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        return keys[id]
    }

    func remember(_ key: [UInt8], for id: ID) {
        lock.lock(); defer { lock.unlock() }
        if keys.count >= capacity { keys.removeAll() }
        keys[id] = key
    }
}
