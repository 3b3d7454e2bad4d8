import Foundation

/// Every failure of a bucket operation, shared by all backends.
///
/// Backends map their own "missing" answers (HTTP 404 `NoSuchKey`, `ENOENT`) to ``notFound(key:)``,
/// so callers never test backend-specific codes. No case ever carries a secret.
public enum BucketError: Error, Sendable, Equatable {
    /// The object does not exist.
    case notFound(key: String)
    /// The bucket (or local root folder) does not exist.
    case bucketNotFound(bucket: String)
    /// A condition (`If-Match`, `If-None-Match: *`) failed: the object changed or already exists.
    case preconditionFailed(key: String)
    /// The server refused the credentials or the signature (HTTP 403).
    case accessDenied(request: String, hint: String)
    /// The server answered with something that is not the expected XML or headers.
    case invalidResponse(request: String, reason: String)
    /// A key that could escape the local folder or is otherwise unusable (`..`, absolute, empty segment, NUL).
    case unsafeKey(key: String, reason: String)
    /// The store URL is not understood.
    case unsupportedURL(url: String, reason: String)
    /// No credentials were found for a backend that needs them (none in the environment, the shared files or a
    /// `credential_process`); thrown before any request is sent, never an unsigned request instead.
    case missingCredentials(variable: String)
    /// A credential source was named but gave nothing usable (`AWS_PROFILE` names a missing profile, or the
    /// profile's `credential_process` failed).
    case credentialsUnavailable(source: String, reason: String)
    /// The server answered with an HTTP error that has no dedicated case.
    case httpError(request: String, status: Int, code: String?, message: String?)
    /// The connection failed (after retries).
    case transport(request: String, description: String)
    /// A local file could not be read or written.
    case localIO(path: String, description: String)
    /// A downloaded object's size did not match what the server announced.
    case truncated(key: String, expected: Int64, received: Int64)
    /// A download's size differs from the size the bucket's listing or HEAD gave for the same version of the object
    /// (after retries); nothing was installed.
    case sizeMismatch(key: String, expected: Int64, received: Int64)
    /// A download's bytes do not match the checksum the server stores for the object (`x-amz-checksum-*`), after
    /// retries; nothing was installed.
    case checksumMismatch(key: String, algorithm: String)
}

extension BucketError {
    /// Whether the error says a download's bytes were damaged (cut short, wrong size, wrong checksum): worth
    /// fetching again, unlike a definite answer such as not found.
    var isDamagedDownload: Bool {
        switch self {
        case .truncated, .sizeMismatch, .checksumMismatch: return true
        default: return false
        }
    }
}

extension BucketError: LocalizedError, CustomStringConvertible {
    /// One line saying what failed and on which key or file, in the CLI's `what (key)` form.
    public var description: String {
        switch self {
        case .notFound(let key): return "object not found (\(key))"
        case .bucketNotFound(let bucket): return "bucket not found (\(bucket))"
        case .preconditionFailed(let key): return "object changed or already exists (\(key))"
        case .accessDenied(let request, _): return "access denied (\(request))"
        case .invalidResponse(let request, let reason): return "invalid response from server: \(reason) (\(request))"
        case .unsafeKey(let key, let reason): return "unsafe object key: \(reason) (\(key.debugDescription))"
        case .unsupportedURL(let url, let reason): return "unsupported bucket URL: \(reason) (\(url))"
        case .missingCredentials:
            return "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"
        case .credentialsUnavailable(let source, let reason): return "cannot get AWS credentials: \(reason) (\(source))"
        case .httpError(let request, let status, let code, let message):
            let detail = [code, message].compactMap { $0 }.joined(separator: ": ")
            return "HTTP \(status)\(detail.isEmpty ? "" : " " + detail) (\(request))"
        case .transport(let request, let description): return "connection failed: \(description) (\(request))"
        case .localIO(let path, let description): return "local file error: \(description) (\(path))"
        case .truncated(let key, let expected, let received):
            return "download truncated: got \(received) of \(expected) bytes (\(key))"
        case .sizeMismatch(let key, let expected, let received):
            return "download has the wrong size: got \(received) bytes, the bucket lists \(expected); nothing was installed (\(key))"
        case .checksumMismatch(let key, let algorithm):
            return "download does not match the object's \(algorithm) checksum; nothing was installed (\(key))"
        }
    }

    /// What the user can do about it, when there is something.
    public var hint: String? {
        switch self {
        case .notFound: return "check the key with `rtsync bucket ls`"
        case .bucketNotFound: return "check the bucket name in --bucket / RTSYNC_BUCKET, or create the bucket"
        case .preconditionFailed: return "the object exists or changed since it was read; list it again before retrying"
        case .accessDenied(_, let hint): return hint
        case .invalidResponse: return "check that the endpoint (AWS_ENDPOINT_URL) is an S3-compatible server"
        case .unsafeKey: return "rename the object in the bucket; rtsync never writes outside the target folder"
        case .unsupportedURL: return "use s3://bucket/prefix or file:///absolute/path"
        case .missingCredentials: return nil
        case .credentialsUnavailable: return "fix the profile in ~/.aws/config or ~/.aws/credentials (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        case .httpError(_, let status, let code, _):
            if code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || code == "IllegalLocationConstraintException" {
                return "the bucket is in another region: set AWS_REGION to the bucket's region"
            }
            return status >= 500 ? "the server failed; retry later" : "check the request arguments"
        case .transport: return "check the network and AWS_ENDPOINT_URL; the request was retried with backoff"
        case .localIO: return "check that the path exists and is writable"
        case .truncated: return "run the command again; the download resumes and the old file was kept"
        case .sizeMismatch, .checksumMismatch:
            return "the server sent damaged data (it was retried); run again later, and check the server or proxy if it persists"
        }
    }

    /// Same as ``description``.
    public var errorDescription: String? { description }
    /// ``hint`` worded for an app: without the command-line tool's commands and flags.
    public var recoverySuggestion: String? { appHint }
}
