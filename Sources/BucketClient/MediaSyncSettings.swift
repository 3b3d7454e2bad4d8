import Foundation

/// Media sync settings as stored in a JSON config file: auto-sync everything, or selective paths.
///
/// ```json
/// {"mode": "selective", "select": ["recordings/2024"], "kinds": ["recordings"], "direction": "both",
///  "include": ["*.m4a"], "exclude": ["**/tmp/**"], "delete": false, "trashDays": 30, "includeLitter": false}
/// ```
/// Every field is optional; command-line flags override the file.
public struct MediaSyncSettings: Codable, Sendable, Equatable {
    /// Whether everything syncs or only the selected paths.
    public enum Mode: String, Codable, Sendable {
        /// Sync every file of the chosen folders.
        case all
        /// Sync only the paths in `select`.
        case selective
    }

    /// `all` (default) or `selective`.
    public var mode: Mode?
    /// Folders to sync (default: both).
    public var kinds: [MediaKind]?
    /// Direction (default: both).
    public var direction: SyncDirection?
    /// Include globs.
    public var include: [String]?
    /// Exclude globs.
    public var exclude: [String]?
    /// Selected documents-relative paths (used in `selective` mode).
    public var select: [String]?
    /// Propagate deletions (deleted objects are moved to `<user>/trash/`).
    public var delete: Bool?
    /// Days deleted objects stay in the trash (default 30; 0: never pruned).
    public var trashDays: Int?
    /// Also sync OS litter (`.DS_Store`, `._*`, `Thumbs.db`, `desktop.ini`, `.*.swp`), left out by default.
    public var includeLitter: Bool?

    /// Empty settings (auto-sync all, both ways).
    public init() {}

    /// Reads settings from a JSON file.
    /// - Throws: ``BucketError/localIO(path:description:)`` when the file cannot be read or parsed.
    public static func load(from url: URL) throws -> MediaSyncSettings {
        do {
            return try JSONDecoder().decode(MediaSyncSettings.self, from: Data(contentsOf: url))
        } catch {
            throw BucketError.localIO(path: url.path, description: "unreadable media sync settings: \(error.localizedDescription)")
        }
    }

    /// The options these settings describe. In `selective` mode with nothing selected, nothing syncs.
    public func options() -> MediaSyncOptions {
        var options = MediaSyncOptions()
        if let kinds, !kinds.isEmpty { options.kinds = Set(kinds) }
        if let direction { options.direction = direction }
        options.include = (include ?? []).map(Glob.init)
        options.exclude = (exclude ?? []).map(Glob.init)
        options.selective = mode == .selective
        options.select = options.selective ? (select ?? []) : []
        options.delete = delete ?? false
        if let trashDays { options.trashDays = trashDays }
        options.excludeLitter = !(includeLitter ?? false)
        return options
    }
}
