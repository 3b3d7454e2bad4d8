import Foundation

/// Opens the store a bucket URL names: `s3://bucket/prefix` (settings from the AWS environment
/// variables) or `file:///absolute/path` (a local folder, created when missing).
/// - Throws: ``BucketError/unsupportedURL(url:reason:)`` for any other URL.
public func makeObjectStore(url: URL, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> any ObjectStore {
    switch url.scheme?.lowercased() {
    case "s3":
        guard let bucket = url.host, !bucket.isEmpty else {
            throw BucketError.unsupportedURL(url: url.absoluteString, reason: "no bucket name")
        }
        return S3Store(configuration: try S3Configuration.fromEnvironment(bucket: bucket, prefix: url.path, environment: environment))
    case "file":
        guard !url.path.isEmpty, url.path.hasPrefix("/") else {
            throw BucketError.unsupportedURL(url: url.absoluteString, reason: "a file URL needs an absolute path")
        }
        if let host = url.host, !host.isEmpty, host != "localhost" {
            // file://relative/path names the host "relative" and the folder /path: never what was meant.
            throw BucketError.unsupportedURL(url: url.absoluteString, reason: "a file URL has no host: file:///absolute/path (three slashes), or give a plain path")
        }
        return try LocalFolderStore(root: URL(fileURLWithPath: url.path, isDirectory: true))
    default:
        throw BucketError.unsupportedURL(url: url.absoluteString, reason: "unknown scheme \(url.scheme ?? "(none)")")
    }
}

/// Parses `text` as a bucket URL (a bare absolute path counts as `file://`) and opens its store.
public func makeObjectStore(urlString text: String,
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws -> any ObjectStore {
    if text.hasPrefix("/") { return try makeObjectStore(url: URL(fileURLWithPath: text, isDirectory: true), environment: environment) }
    guard let url = URL(string: text) else {
        throw BucketError.unsupportedURL(url: text, reason: "not a URL")
    }
    return try makeObjectStore(url: url, environment: environment)
}
