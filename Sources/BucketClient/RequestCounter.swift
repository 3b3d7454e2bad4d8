import Foundation

/// A thread-safe tally of requests issued by a store, by operation name (`ListObjectsV2`, `PutObject`, ...).
///
/// Tests and benchmarks use it to check that an idle sync costs one listing.
public final class RequestCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [String: Int] = [:]

    /// Creates an empty counter.
    public init() {}

    /// Records one request of `operation`.
    public func record(_ operation: String) {
        lock.lock()
        counts[operation, default: 0] += 1
        lock.unlock()
    }

    /// Total number of requests recorded.
    public var total: Int {
        lock.lock()
        defer { lock.unlock() }
        return counts.values.reduce(0, +)
    }

    /// Number of requests recorded for `operation`.
    public func count(_ operation: String) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return counts[operation] ?? 0
    }

    /// A copy of all counts.
    public var snapshot: [String: Int] {
        lock.lock()
        defer { lock.unlock() }
        return counts
    }

    /// Forgets all counts.
    public func reset() {
        lock.lock()
        counts.removeAll()
        lock.unlock()
    }
}
