/// What a device in selective media mode (`"mediaMode": "selective"`) syncs, as kept in settings.json:
///
/// ```json
/// "mediaSelection": {"kinds": ["images"], "paths": ["images/2025"], "include": ["*.jpg"], "exclude": ["**/tmp/**"]}
/// ```
/// `kinds` limits the folders (`recordings`, `images`; default both); `paths` are documents-relative files or
/// folders (default: the whole of each kind); `include` and `exclude` are globs on the documents-relative path
/// (`images/2025/*`; a glob without `/` matches the file name at any depth). A file syncs when it is in one of the
/// kinds and paths, matches an include glob (when there are any) and no exclude glob. An empty selection syncs
/// nothing. Files outside the selection are never uploaded, downloaded, deleted or conflict-copied.
public struct MediaSelection: Sendable, Codable, Equatable {
    /// Media folders: `recordings`, `images` (default both).
    public var kinds: [String]?
    /// Documents-relative files or folders, such as `images/2025` (default: all of each kind).
    public var paths: [String]?
    /// Globs a path must match one of (none: every path).
    public var include: [String]?
    /// Globs no path may match.
    public var exclude: [String]?

    /// A selection of the given kinds, paths and globs.
    public init(kinds: [String]? = nil, paths: [String]? = nil, include: [String]? = nil, exclude: [String]? = nil) {
        self.kinds = kinds
        self.paths = paths
        self.include = include
        self.exclude = exclude
    }

    /// Whether the selection names nothing (so a selective device syncs nothing).
    public var isEmpty: Bool {
        (kinds ?? []).isEmpty && (paths ?? []).isEmpty && (include ?? []).isEmpty
    }
}
