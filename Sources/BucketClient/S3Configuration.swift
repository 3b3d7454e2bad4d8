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
    /// Credentials; nil sends unsigned (anonymous) requests.
    public var credentials: AWSCredentials?
    /// Files larger than this are uploaded in parts.
    public var multipartThreshold: Int = 16 << 20
    /// Size of one upload part (S3's minimum is 5 MiB, except the last part).
    public var partSize: Int = 8 << 20
    /// Size of one ranged GET when downloading to a file.
    public var downloadChunkSize: Int = 16 << 20
    /// Parts uploaded at the same time.
    public var maxConcurrency: Int = 4
    /// PUT and POST requests whose body has at least this many bytes (by default all of them), and always a
    /// multipart upload's parts and completion, are sent with libcurl directly where it can be loaded (Linux),
    /// not through URLSession: on Linux its dispatch-driven event loop keeps a core busy while a request is in
    /// flight (sending a body, or waiting for a slow answer such as CompleteMultipartUpload). nil always uses
    /// URLSession. GET, HEAD and DELETE use URLSession. Signing, retries and error handling are the same either way.
    public var directTransportMinimumBody: Int? = 0
    /// Retry policy for transient failures.
    public var retry = RetryPolicy()
    /// Per-request timeout in seconds.
    public var timeout: TimeInterval = 60
    /// Folder for multipart resume state files; nil puts them beside the uploaded file.
    public var stateDirectory: URL?
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

    /// Builds a configuration from AWS environment variables: `AWS_REGION` (or `AWS_DEFAULT_REGION`),
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, the `AWS_*` credentials, and
    /// `RTSYNC_S3_ADDRESSING_STYLE` (`path` or `virtual`) and `RTSYNC_S3_TRANSPORT` (`urlsession` sends every
    /// request through URLSession, turning off the direct libcurl path for uploads on Linux).
    public static func fromEnvironment(bucket: String, prefix: String = "",
                                       environment: [String: String] = ProcessInfo.processInfo.environment) throws -> S3Configuration {
        let region = environment["AWS_REGION"].flatMap { $0.isEmpty ? nil : $0 }
            ?? environment["AWS_DEFAULT_REGION"].flatMap { $0.isEmpty ? nil : $0 } ?? "us-east-1"
        var endpoint: URL? = nil
        if let text = environment["AWS_ENDPOINT_URL_S3"] ?? environment["AWS_ENDPOINT_URL"], !text.isEmpty {
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
                                            addressingStyle: style, credentials: AWSCredentials.fromEnvironment(environment))
        switch environment["RTSYNC_S3_TRANSPORT"]?.lowercased() {
        case nil, "", "auto", "curl": break
        case "urlsession": configuration.directTransportMinimumBody = nil
        case let other?:
            throw BucketError.unsupportedURL(url: "RTSYNC_S3_TRANSPORT=\(other)", reason: "RTSYNC_S3_TRANSPORT must be auto or urlsession")
        }
        return configuration
    }
}
