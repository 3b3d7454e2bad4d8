import Foundation

/// An inclusive byte range of an object, as in HTTP `Range: bytes=start-end`.
public struct ByteRange: Sendable, Hashable {
    /// First byte offset.
    public var start: Int64
    /// Last byte offset (inclusive), or nil for "to the end".
    public var end: Int64?

    /// Creates a range from `start` to `end` inclusive (nil: to the end).
    public init(start: Int64, end: Int64? = nil) {
        precondition(start >= 0 && (end ?? start) >= start, "invalid byte range")
        self.start = start
        self.end = end
    }

    /// The HTTP `Range` header value.
    public var headerValue: String {
        "bytes=\(start)-\(end.map(String.init) ?? "")"
    }
}
