import Foundation

/// What media sync last saw of each synced file, so an unchanged tree costs one listing and no hashing.
///
/// Stored as JSON at a path the caller chooses (for example beside the primary database).
public struct MediaManifest: Codable, Sendable, Equatable {
    /// One synced file.
    public struct Entry: Codable, Sendable, Equatable {
        /// Local size in bytes.
        public var size: Int64
        /// Local modification time, nanoseconds since 1970.
        public var mtimeNanoseconds: Int64
        /// SHA-256 of the contents, lowercase hex.
        public var sha256: String
        /// The remote object's ETag when last synced.
        public var etag: String

        /// Creates an entry.
        public init(size: Int64, mtimeNanoseconds: Int64, sha256: String, etag: String) {
            self.size = size
            self.mtimeNanoseconds = mtimeNanoseconds
            self.sha256 = sha256
            self.etag = etag
        }
    }

    /// Format version.
    public var version: Int = 1
    /// Entries by path relative to the documents folder (`recordings/2024/a.m4a`).
    public var files: [String: Entry] = [:]

    /// An empty manifest.
    public init() {}

    /// Loads a manifest; a missing file gives an empty one.
    /// - Throws: ``BucketError/localIO(path:description:)`` when the file exists but cannot be read or parsed.
    public static func load(from url: URL) throws -> MediaManifest {
        guard FileManager.default.fileExists(atPath: url.path) else { return MediaManifest() }
        do {
            return try JSONDecoder().decode(MediaManifest.self, from: Data(contentsOf: url))
        } catch {
            throw BucketError.localIO(path: url.path, description: "unreadable media manifest: \(error.localizedDescription)")
        }
    }

    /// Writes the manifest atomically (temporary file + rename).
    public func save(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data: Data
        do { data = try encoder.encode(self) } catch {
            throw BucketError.localIO(path: url.path, description: error.localizedDescription)
        }
        let tmp = try LocalFiles.writeTemporary(data, beside: url)
        try LocalFiles.moveAtomically(tmp, to: url)
    }
}
