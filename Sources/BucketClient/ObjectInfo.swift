import Foundation

/// Metadata of one stored object.
public struct ObjectInfo: Sendable, Hashable, Codable {
    /// The key, relative to the store's root.
    public var key: String
    /// Size in bytes.
    public var size: Int64
    /// The entity tag without quotes (S3: MD5 or multipart tag; local folder: size and mtime based).
    public var etag: String
    /// Last modification time, when known.
    public var lastModified: Date?

    /// Creates object metadata.
    public init(key: String, size: Int64, etag: String, lastModified: Date?) {
        self.key = key
        self.size = size
        self.etag = etag
        self.lastModified = lastModified
    }
}
