import Foundation

/// One page of a listing.
public struct ObjectPage: Sendable, Hashable {
    /// Objects of this page, in key order.
    public var objects: [ObjectInfo]
    /// Token to pass to the next `list` call, or nil when this is the last page.
    public var nextContinuationToken: String?

    /// Creates a page.
    public init(objects: [ObjectInfo], nextContinuationToken: String?) {
        self.objects = objects
        self.nextContinuationToken = nextContinuationToken
    }
}
