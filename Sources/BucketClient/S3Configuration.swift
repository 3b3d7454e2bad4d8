import Foundation

/// Where and how an ``S3Store`` talks to an S3-compatible server (AWS, MinIO, R2, Ceph, moto).
public struct S3Configuration: Sendable {
    /// How the bucket appears in request URLs.
    public enum AddressingStyle: String, Sendable, Hashable {
        /// `https://endpoint/bucket/key` (MinIO, moto, Ceph; buckets with dots).
        case path
        /// `https://bucket.endpoint/key` (AWS default).
        case virtualHosted
    }

    /// The additional checksum a multipart upload declares when it is created and sends with every part, and a
    /// single PutObject sends for its body.
    public enum PartChecksum: Sendable, Hashable {
        /// `x-amz-checksum-algorithm: CRC32` on CreateMultipartUpload, `x-amz-checksum-crc32` on each part and
        /// `ChecksumCRC32` for each part in CompleteMultipartUpload (what the AWS SDKs and CLI send by default);
        /// `x-amz-checksum-crc32` on PutObject, which the server stores and later GETs return for verification.
        case crc32
        /// No additional checksum: parts are protected by their signed SHA-256 only.
        case off
    }

    /// The bucket name.
    public var bucket: String
    /// Key prefix under which this store lives: empty or ending with `/`.
    public var prefix: String
    /// Region for signing (`AWS_REGION`, default `us-east-1`).
    public var region: String
    /// Server base URL (`AWS_ENDPOINT_URL`; default `https://s3.<region>.amazonaws.com`).
    public var endpoint: URL
    /// Path-style or virtual-hosted requests.
    public var addressingStyle: AddressingStyle
    /// Credentials; with nil, requests fail with ``BucketError/missingCredentials(variable:)`` before anything is
    /// sent, unless ``allowsAnonymous`` is set.
    public var credentials: AWSCredentials?
    /// Sends unsigned (anonymous) requests when ``credentials`` is nil, for public buckets
    /// (`RTSYNC_S3_ANONYMOUS=1`); off by default so missing credentials are never silently ignored.
    public var allowsAnonymous = false
    /// Files larger than this are uploaded in parts.
    public var multipartThreshold: Int = 16 << 20
    /// Size of one upload part (S3's minimum is 5 MiB, except the last part).
    public var partSize: Int = 8 << 20
    /// The checksum declared for multipart uploads (parts always carry their signed SHA-256 as well).
    ///
    /// `.crc32` by default: S3 then verifies each part's CRC-32 as well and stores a composite checksum of the
    /// object, combined from the parts' checksums. Without an algorithm S3 gives the object a full-object
    /// CRC-64/NVME, which moto computes at CompleteMultipartUpload by assembling a second copy of the whole object
    /// (about 10% more server CPU for a push of large files than the AWS CLI, which sends CRC-32 like this).
    /// See <https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html>.
    public var partChecksum: PartChecksum = .crc32
    /// Size of one ranged GET when downloading to a file.
    public var downloadChunkSize: Int = 16 << 20
    /// Parts of one file uploaded at the same time; twice as many are in flight across all the files of a store.
    ///
    /// Each part in flight holds its bytes in memory, so the store's part uploads hold at most
    /// `2 × maxConcurrency × partSize`: 128 MiB with the defaults (8 and 8 MiB; the AWS CLI's 16 requests of 8 MiB
    /// parts hold as much). 8, not 4 (before 2026-11-27): pushing 4 × 64 MB to moto, 16 parts in flight beat
    /// rclone, s5cmd and the AWS CLI in 16 of 18 rounds (Benchmarks/README.md, "Issue 19, aims 4–6", compares
    /// with 8). A download resumed with ranges holds at most `min(maxConcurrency, 4)` chunks of
    /// ``downloadChunkSize`` per file.
    public var maxConcurrency: Int = 8
    /// Fetch an object larger than one chunk whose size and ETag a listing gave in ranged GETs of
    /// ``downloadChunkSize`` (up to `min(maxConcurrency, 4)` at once, plus a HEAD for its checksum) instead of
    /// one GET written into the file as it arrives (the default, which needs libcurl; see
    /// ``directTransportMinimumBody``). Off by default: against moto one GET per object was faster and makes
    /// fewer requests (Benchmarks/README.md).
    public var rangedDownloads = false
    /// PUT and POST requests whose body has at least this many bytes (by default all of them), always a
    /// multipart upload's parts and completion, and every GET, HEAD and DELETE are sent with libcurl directly where
    /// it can be loaded (Linux), not through URLSession: on Linux its dispatch-driven event loop keeps a core busy
    /// while a request is in flight (sending a body, or waiting for a slow answer such as CompleteMultipartUpload),
    /// and costs a pull of many small objects more CPU than the server spends serving them. Downloads to a file are
    /// then written into it as they arrive. nil always uses URLSession (bodies in memory). Signing, retries and
    /// error handling are the same either way.
    public var directTransportMinimumBody: Int? = 0
    /// Retry policy for transient failures.
    public var retry = RetryPolicy()
    /// Per-request timeout in seconds.
    public var timeout: TimeInterval = 60
    /// Folder for multipart resume state files; nil puts them beside the uploaded file.
    public var stateDirectory: URL?
    /// Receives warnings that do not stop an operation (a listed key that cannot be used, skipped); nil writes
    /// them to standard error as `warning: ...` lines.
    public var warningHandler: (@Sendable (String) -> Void)?
    /// Test hook: stop a multipart upload with an error after this many parts (simulates a crash).
    var stopAfterPartsForTesting: Int?

    /// Creates a configuration; `prefix` is normalized to end with `/` unless empty.
    public init(bucket: String, prefix: String = "", region: String = "us-east-1", endpoint: URL? = nil,
                addressingStyle: AddressingStyle? = nil, credentials: AWSCredentials? = nil) {
        self.bucket = bucket
        var p = prefix
        while p.hasPrefix("/") { p.removeFirst() }
        if !p.isEmpty && !p.hasSuffix("/") { p += "/" }
        self.prefix = p
        self.region = region
        self.endpoint = endpoint ?? URL(string: "https://s3.\(region).amazonaws.com")!
        // Custom endpoints (MinIO, moto, Ceph) mostly want path style; dotted names break TLS with virtual hosts.
        self.addressingStyle = addressingStyle ?? ((endpoint != nil || bucket.contains(".")) ? .path : .virtualHosted)
        self.credentials = credentials
    }

    /// Builds a configuration from AWS environment variables and shared files: `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`, else the profile's `region`), `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (else the
    /// profile's `endpoint_url`), credentials from ``AWSCredentialChain`` (environment, `~/.aws/credentials` and
    /// `~/.aws/config` with `AWS_PROFILE`, `credential_process`), `RTSYNC_S3_ANONYMOUS=1` (unsigned requests
    /// when there are no credentials), and
    /// `RTSYNC_S3_ADDRESSING_STYLE` (`path` or `virtual`), `RTSYNC_S3_TRANSPORT` (`urlsession` sends every
    /// request through URLSession, turning off the direct libcurl path for uploads on Linux) and
    /// `RTSYNC_S3_PART_CHECKSUM` (`crc32`, the default, or `none` for servers that reject S3's additional checksums) and
    /// `RTSYNC_S3_MULTIPART_THRESHOLD` (bytes above which a file is uploaded in parts; default 16 MiB).
    public static func fromEnvironment(bucket: String, prefix: String = "",
                                       environment: [String: String] = ProcessInfo.processInfo.environment) throws -> S3Configuration {
        let chain = try AWSCredentialChain(environment: environment).resolve()
        let region = environment["AWS_REGION"].flatMap { $0.isEmpty ? nil : $0 }
            ?? environment["AWS_DEFAULT_REGION"].flatMap { $0.isEmpty ? nil : $0 } ?? chain.region ?? "us-east-1"
        var endpoint: URL? = nil
        let endpointText = [environment["AWS_ENDPOINT_URL_S3"], environment["AWS_ENDPOINT_URL"], chain.endpointURL]
            .compactMap { $0 }.first { !$0.isEmpty }
        if let text = endpointText {
            guard let url = URL(string: text), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
                throw BucketError.unsupportedURL(url: text, reason: "AWS_ENDPOINT_URL must be an http(s) URL")
            }
            endpoint = url
        }
        var style: AddressingStyle? = nil
        switch environment["RTSYNC_S3_ADDRESSING_STYLE"]?.lowercased() {
        case "path": style = .path
        case "virtual", "virtual-hosted", "virtualhosted": style = .virtualHosted
        default: break
        }
        var configuration = S3Configuration(bucket: bucket, prefix: prefix, region: region, endpoint: endpoint,
                                            addressingStyle: style, credentials: chain.credentials)
        configuration.allowsAnonymous = ["1", "true", "yes"].contains(environment["RTSYNC_S3_ANONYMOUS"]?.lowercased() ?? "")
        switch environment["RTSYNC_S3_TRANSPORT"]?.lowercased() {
        case nil, "", "auto", "curl": break
        case "urlsession": configuration.directTransportMinimumBody = nil
        case let other?:
            throw BucketError.unsupportedURL(url: "RTSYNC_S3_TRANSPORT=\(other)", reason: "RTSYNC_S3_TRANSPORT must be auto or urlsession")
        }
        switch environment["RTSYNC_S3_PART_CHECKSUM"]?.lowercased() {
        case nil, "", "crc32": break
        case "none", "off": configuration.partChecksum = .off
        case let other?:
            throw BucketError.unsupportedURL(url: "RTSYNC_S3_PART_CHECKSUM=\(other)", reason: "RTSYNC_S3_PART_CHECKSUM must be crc32 or none")
        }
        if let text = environment["RTSYNC_S3_MULTIPART_THRESHOLD"], !text.isEmpty {
            guard let bytes = Int(text), bytes >= 0 else {
                throw BucketError.unsupportedURL(url: "RTSYNC_S3_MULTIPART_THRESHOLD=\(text)", reason: "RTSYNC_S3_MULTIPART_THRESHOLD must be a number of bytes")
            }
            configuration.multipartThreshold = bytes
        }
        return configuration
    }
}
