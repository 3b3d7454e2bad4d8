import DiffFormat
import Foundation
import RTSQLite

/// How remote changes to one table are merged with local ones.
public enum MergePolicy: String, Sendable, Codable, CaseIterable {
    /// Last writer wins per column, by hybrid logical clock then site id (the default).
    case lwwColumn = "lww-column"
    /// Last writer wins per row: the row version with the latest change wins whole.
    case lwwRow = "lww-row"
    /// Remote changes never overwrite columns this device has changed.
    case localWins = "local-wins"
    /// Remote changes always overwrite local values.
    case remoteWins = "remote-wins"
    /// Remote inserts of new rows are accepted; remote updates and deletes are refused.
    case appendOnly = "append-only"
    /// Changes to a row are accepted only from the user named in its owner column.
    case ownerOnly = "owner-only"
}

/// What wins when one device updates a row another device deleted.
public enum DeleteConflictPolicy: String, Sendable, Codable {
    /// The delete wins; the row comes back only through a later insert (the default).
    case deleteWins = "delete-wins"
    /// The later of the two by clock wins.
    case lastWriterWins = "last-writer-wins"
}

/// The merge settings of one table.
public struct TablePolicy: Sendable, Hashable, Codable {
    /// The merge policy.
    public var policy: MergePolicy
    /// Owner column for `owner-only` (default `owner_id`).
    public var ownerColumn: String?
    /// Update-versus-delete rule.
    public var onDeleteConflict: DeleteConflictPolicy
    /// Values for `NOT NULL` columns without a default that a diff from an older app version does not carry
    /// (by column name; SQLite converts the text to the column's type as it stores it).
    public var syncDefaults: [String: String]
    /// Whether columns a diff from a newer app version carries are added to this table. Off by default: the
    /// table stays as this app version made it (its own `INSERT … VALUES` keep working) and their values are kept
    /// aside, then moved into the columns when this app's own migration adds them.
    public var addColumns: Bool
    /// Columns renamed between app versions, old name -> new name: a value a diff carries under either name lands
    /// in whichever of the two this table has (renames this database ran itself after `track` are known without it).
    public var renamed: [String: String]

    /// Makes a table policy.
    public init(_ policy: MergePolicy = .lwwColumn, ownerColumn: String? = nil, onDeleteConflict: DeleteConflictPolicy = .deleteWins,
                syncDefaults: [String: String] = [:], addColumns: Bool = false, renamed: [String: String] = [:]) {
        self.policy = policy
        self.ownerColumn = ownerColumn
        self.onDeleteConflict = onDeleteConflict
        self.syncDefaults = syncDefaults
        self.addColumns = addColumns
        self.renamed = renamed
    }

    /// The default: column-level last writer wins, delete wins over concurrent updates.
    public static let `default` = TablePolicy()
}

/// Per-table policies read from a JSON config file:
/// `{"tables": {"logs": {"policy": "append-only"}, "routines": {"policy": "owner-only", "ownerColumn": "owner_id"}, "records": {"renamed": {"weight": "load_kg"}}}}`.
public struct PolicyConfig: Sendable, Codable {
    /// One table's entry.
    public struct Entry: Sendable, Codable {
        /// Policy name.
        public var policy: String?
        /// Owner column for owner-only.
        public var ownerColumn: String?
        /// `delete-wins` or `last-writer-wins`.
        public var onDeleteConflict: String?
        /// Values for NOT NULL columns that diffs from older app versions lack (see `TablePolicy.syncDefaults`).
        public var defaults: [String: String]?
        /// Add columns that diffs from newer app versions carry (see `TablePolicy.addColumns`).
        public var addColumns: Bool?
        /// Columns renamed between app versions, old name -> new name (see `TablePolicy.renamed`).
        public var renamed: [String: String]?
    }

    /// Entries by table name.
    public var tables: [String: Entry]

    /// Reads and checks a config file.
    /// - Throws: `SyncEngineError.invalidConfig` naming the file and the problem.
    public static func load(from url: URL) throws -> [String: TablePolicy] {
        let data: Data
        do { data = try Data(contentsOf: url) } catch { throw SyncEngineError.invalidConfig(file: url.path, reason: "cannot read file") }
        let config: PolicyConfig
        do { config = try JSONDecoder().decode(PolicyConfig.self, from: data) } catch {
            throw SyncEngineError.invalidConfig(file: url.path, reason: "not valid JSON of the form {\"tables\": {NAME: {\"policy\": ..., \"defaults\": {COLUMN: \"text\"}}}}")
        }
        var out: [String: TablePolicy] = [:]
        for (table, entry) in config.tables {
            guard let policy = MergePolicy(rawValue: entry.policy ?? MergePolicy.lwwColumn.rawValue) else {
                throw SyncEngineError.invalidConfig(file: url.path, reason: "table \(table): unknown policy '\(entry.policy ?? "")'")
            }
            guard let onDelete = DeleteConflictPolicy(rawValue: entry.onDeleteConflict ?? DeleteConflictPolicy.deleteWins.rawValue) else {
                throw SyncEngineError.invalidConfig(file: url.path, reason: "table \(table): onDeleteConflict must be delete-wins or last-writer-wins")
            }
            for (old, new) in entry.renamed ?? [:] where old.isEmpty || new.isEmpty || old.lowercased() == new.lowercased() {
                throw SyncEngineError.invalidConfig(file: url.path, reason: "table \(table): renamed maps '\(old)' to '\(new)'; give two different non-empty column names, old name first")
            }
            out[table] = TablePolicy(policy, ownerColumn: entry.ownerColumn, onDeleteConflict: onDelete, syncDefaults: entry.defaults ?? [:],
                                     addColumns: entry.addColumns ?? false, renamed: entry.renamed ?? [:])
        }
        return out
    }
}

/// A conflict handed to a custom resolver: both values of one column and their clocks.
public struct ConflictContext: Sendable {
    /// Table name.
    public var table: String
    /// Row key as SQL literals, e.g. `'abc',3`.
    public var key: String
    /// Column name.
    public var column: String
    /// The local value.
    public var localValue: SQLValue
    /// The incoming value.
    public var remoteValue: SQLValue
    /// Local clock (nil for a change not yet exported).
    public var localClock: Clock?
    /// Remote clock.
    public var remoteClock: Clock
}

/// A custom resolver's decision.
///
/// When the decision keeps the value with the older clock, the device records it as a new local edit of that
/// column, so every other device takes the same value at its next sync.
public enum ConflictResolution: Sendable, Equatable {
    /// Keep the local value; the remote one goes to the conflict log.
    case keepLocal
    /// Take the remote value; the local one goes to the conflict log.
    case acceptRemote
    /// Decide as without a resolver: the later clock wins (for columns the resolver has no rule for).
    case byClock
}

/// A Swift hook deciding concurrent edits of one column, for every column of one table: return
/// ``ConflictResolution/byClock`` for columns it has no rule for. It is asked only when neither device had seen the
/// other's edit. It must decide from the two values alone, the same way whichever is local (a rule on the values,
/// like "the longer title"), or two devices could each keep their own. It runs while the diff is applied, before
/// the diff's content digest has been checked (apply checks it after the last row and then rolls everything back if
/// it fails): it should only decide, with no side effects of its own.
public typealias ConflictResolver = @Sendable (ConflictContext) -> ConflictResolution
