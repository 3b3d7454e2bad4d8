import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Exponential backoff with full jitter for transient failures (timeouts, lost connections, 5xx, 429).
///
/// Client errors (4xx other than 429) are never retried.
public struct RetryPolicy: Sendable, Hashable {
    /// Total attempts, including the first.
    public var maxAttempts: Int
    /// Base delay in seconds; attempt `n` waits a random time in `0...min(maxDelay, baseDelay * 2^n)`.
    public var baseDelay: Double
    /// Upper bound of one wait, in seconds.
    public var maxDelay: Double

    /// Creates a policy.
    public init(maxAttempts: Int = 4, baseDelay: Double = 0.2, maxDelay: Double = 8) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// No retries at all.
    public static let none = RetryPolicy(maxAttempts: 1)

    /// The jittered delay before retry number `attempt` (0 for the first retry).
    public func delay(forRetry attempt: Int) -> Double {
        let cap = min(maxDelay, baseDelay * pow(2, Double(attempt)))
        return cap > 0 ? Double.random(in: 0...cap) : 0
    }

    /// Whether an HTTP status is worth retrying.
    public static func isRetryable(status: Int) -> Bool {
        status == 429 || (500...599).contains(status)
    }

    /// Whether a transport error is worth retrying.
    ///
    /// Includes `.unknown`: on Linux, URLSession reports libcurl's transfer failures that have no closer code
    /// that way, among them a body cut short ("transfer closed with N bytes remaining to read"), which must be
    /// retried like a reset.
    public static func isRetryable(_ error: Error) -> Bool {
        guard let urlError = error as? URLError else { return false }
        switch urlError.code {
        case .timedOut, .networkConnectionLost, .cannotConnectToHost, .notConnectedToInternet,
             .cannotFindHost, .dnsLookupFailed, .resourceUnavailable, .badServerResponse, .unknown:
            return true
        default:
            return false
        }
    }

    /// Whether attempt number `attempt` (0 for the first), which failed with `error`, is tried again: attempts remain,
    /// and the error is a damaged download (wrong size or checksum) or a transient transport failure.
    func allowsRetry(after error: Error, attempt: Int) -> Bool {
        guard attempt + 1 < maxAttempts else { return false }
        if let bucketError = error as? BucketError { return bucketError.isDamagedDownload }
        return Self.isRetryable(error)
    }

    /// Sleeps before retry number `attempt`.
    func wait(beforeRetry attempt: Int) async throws {
        let seconds = delay(forRetry: attempt)
        if seconds > 0 { try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000)) }
    }
}
