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

    /// Format version: 2 stores entries as a list (`entries`), 1 stored them as an object keyed by path (`files`).
    public var version: Int = 2
    /// Entries by path relative to the documents folder (`recordings/2024/a.m4a`), compared byte for byte, so
    /// names that differ only in Unicode normalization (NFC and NFD) are separate entries.
    public var files: [ExactPath: Entry] = [:]
    /// Files whose losing version was kept as a conflict copy, oldest first (listed by `rtsync conflicts media`).
    public var conflicts: [MediaConflict] = []

    /// When this device last pruned ``MediaTrash`` (it does so at most once a day).
    public var trashPrunedAt: Date?

    /// An empty manifest.
    public init() {}

    /// The entry of `path` (compared byte for byte).
    public subscript(path: String) -> Entry? {
        get { files[ExactPath(path)] }
        set { files[ExactPath(path)] = newValue }
    }

    private enum CodingKeys: String, CodingKey { case version, entries, files, conflicts, trashPrunedAt }

    /// One entry of the version 2 list.
    private struct ListedEntry: Codable {
        var path: String
        var size: Int64
        var mtimeNanoseconds: Int64
        var sha256: String
        var etag: String
    }

    /// Reads version 2 (`entries`, a list: JSON objects keyed by path would merge NFC and NFD names, as Foundation's
    /// JSON coders keep object keys in Swift dictionaries) and version 1 (`files`).
    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decodeIfPresent(Int.self, forKey: .version) ?? 1
        if let list = try container.decodeIfPresent([ListedEntry].self, forKey: .entries) {
            for item in list {
                files[ExactPath(item.path)] = Entry(size: item.size, mtimeNanoseconds: item.mtimeNanoseconds, sha256: item.sha256, etag: item.etag)
            }
        } else if let old = try container.decodeIfPresent([String: Entry].self, forKey: .files) {
            for (path, entry) in old { files[ExactPath(path)] = entry }
        }
        conflicts = try container.decodeIfPresent([MediaConflict].self, forKey: .conflicts) ?? []
        trashPrunedAt = try container.decodeIfPresent(Date.self, forKey: .trashPrunedAt)
        version = 2
    }

    /// Writes version 2, entries in UTF-8 byte order of their paths.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(2, forKey: .version)
        let list = files.sorted { $0.key < $1.key }.map {
            ListedEntry(path: $0.key.string, size: $0.value.size, mtimeNanoseconds: $0.value.mtimeNanoseconds,
                        sha256: $0.value.sha256, etag: $0.value.etag)
        }
        try container.encode(list, forKey: .entries)
        if !conflicts.isEmpty { try container.encode(conflicts, forKey: .conflicts) }
        try container.encodeIfPresent(trashPrunedAt, forKey: .trashPrunedAt)
    }

    /// The manifest of a documents folder, `<documents>/.rtsync-media-manifest.json`: one per folder (and so one
    /// per home), shared by `rtsync media sync` and `rtsync sync --media`.
    public static func defaultURL(documents: URL) -> URL {
        documents.appendingPathComponent(".rtsync-media-manifest.json")
    }

    /// Moves what an older manifest file at `legacy` knows into the manifest at `url`, then removes `legacy`
    /// (nothing happens when it does not exist). Entries already in `url` win; conflict records of both are kept.
    /// - Throws: ``BucketError/localIO(path:description:)`` when either cannot be read or `url` cannot be written.
    public static func absorb(_ legacy: URL, into url: URL) throws {
        guard FileManager.default.fileExists(atPath: legacy.path) else { return }
        let old = try load(from: legacy)
        var merged = try load(from: url)
        merged.files.merge(old.files) { current, _ in current }
        merged.conflicts = (old.conflicts + merged.conflicts.filter { !old.conflicts.contains($0) }).sorted { $0.at < $1.at }
        try merged.save(to: url)
        do { try FileManager.default.removeItem(at: legacy) } catch {
            throw BucketError.localIO(path: legacy.path, description: "merged into \(url.path) but cannot be removed: \(error.localizedDescription)")
        }
    }

    /// Loads a manifest; a missing file gives an empty one.
    /// - Throws: ``BucketError/localIO(path:description:)`` when the file exists but cannot be read or parsed.
    public static func load(from url: URL) throws -> MediaManifest {
        guard FileManager.default.fileExists(atPath: url.path) else { return MediaManifest() }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return try decoder.decode(MediaManifest.self, from: Data(contentsOf: url))
        } catch {
            throw BucketError.localIO(path: url.path, description: "unreadable media manifest: \(error.localizedDescription)")
        }
    }

    /// Writes the manifest atomically (temporary file + rename).
    public func save(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        let data: Data
        do { data = try encoder.encode(self) } catch {
            throw BucketError.localIO(path: url.path, description: error.localizedDescription)
        }
        let tmp = try LocalFiles.writeTemporary(data, beside: url)
        try LocalFiles.moveAtomically(tmp, to: url)
    }
}
