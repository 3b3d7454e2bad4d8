import Foundation

/// Why a SyncEngine operation failed; each case names the database, table, file or row involved.
///
/// `description` is one line naming what failed and where; ``hint`` (also `recoverySuggestion`) says what the app
/// or its user can do. Neither mentions command-line flags: the `rtsync` tool adds its own hints.
public enum SyncEngineError: Error, Sendable, Equatable, CustomStringConvertible, LocalizedError {
    /// There is no database file at the path (sync never creates one).
    case databaseNotFound(path: String)
    /// The database has no sync bookkeeping yet: track it (or initialize it for sync) first.
    case notTracked(path: String)
    /// A table named in a call does not exist.
    case noSuchTable(table: String)
    /// A table cannot be tracked safely (no usable key, …); `hint` says what to change.
    case untrackableTable(table: String, reason: String, hint: String)
    /// A diff was refused and moved to quarantine; the database is unchanged.
    case diffRejected(file: String, reason: String)
    /// A merge policy name is not one of the known ones.
    case unknownPolicy(String)
    /// A configuration file is not valid.
    case invalidConfig(file: String, reason: String)
    /// No conflict-log entry has this id.
    case conflictNotFound(id: Int64)
    /// A conflict-log entry cannot be restored.
    case cannotRestore(id: Int64, reason: String)
    /// A long operation stopped at a safe point because it was asked to (rolled back, nothing lost).
    case interrupted(operation: String, path: String)
    /// The database has no user id: it was never initialized for sync, and syncing it would write under no user.
    case noUserID(path: String)
    /// A user or site id given to initialize a database for sync is unusable or conflicts with the recorded one.
    case invalidIdentity(path: String, reason: String)
    /// The database file is not the one its site id was recorded for: it looks like a copy (`cp`) of another
    /// device's database, and syncing it would make two devices share one site id.
    case databaseCopied(path: String, recordedPath: String)
    /// The home's settings turn client-side encryption on for these kinds, but the bucket given to sync does not
    /// encrypt them (opened without the home's settings): nothing is uploaded as plaintext.
    case remoteNotEncrypting(kinds: [String], settings: String)
    /// The database was restored from a backup and has not caught up from the bucket yet: a compaction now would
    /// publish a snapshot without what compaction pruned since the backup was made.
    case catchUpPending(path: String)

    public var description: String {
        switch self {
        case .databaseNotFound(let p): return "database not found (\(p))"
        case .notTracked(let p): return "database is not tracked yet (\(p))"
        case .noSuchTable(let t): return "no such table (\(t))"
        case .untrackableTable(let t, let r, _): return "cannot track table: \(r) (\(t))"
        case .diffRejected(let f, let r): return "diff rejected: \(r) (\(f))"
        case .unknownPolicy(let p): return "unknown merge policy '\(p)' (expected lww-column, lww-row, local-wins, remote-wins, append-only, owner-only)"
        case .invalidConfig(let f, let r): return "invalid config: \(r) (\(f))"
        case .conflictNotFound(let id): return "no conflict with id \(id)"
        case .cannotRestore(let id, let r): return "cannot restore conflict \(id): \(r)"
        case .interrupted(let o, let p): return "\(o) was interrupted and rolled back (\(p))"
        case .noUserID(let p): return "database has no user id: it was never initialized for sync (\(p))"
        case .invalidIdentity(let p, let r): return "cannot initialize the database for sync: \(r) (\(p))"
        case .databaseCopied(let p, let r): return "database is a copy of the one its site id belongs to, at \(r) (\(p))"
        case .remoteNotEncrypting(let k, let p): return "the settings encrypt \(k.joined(separator: ", ")) but the bucket was opened without encryption (\(p))"
        case .catchUpPending(let p): return "the database was restored from a backup and has not caught up from the bucket yet (\(p))"
        }
    }

    /// What the app or its user can do about it (no command-line flags; the CLI prints its own).
    public var hint: String? {
        switch self {
        case .databaseNotFound: return "check the database path; sync never creates a database"
        case .notTracked: return "track the database first (SyncDatabase.initializeForSync or track)"
        case .untrackableTable(_, _, let h): return h
        case .diffRejected: return "the diff was moved to quarantine; nothing in the database changed"
        case .unknownPolicy: return "use one of the listed policies"
        case .conflictNotFound: return "list the conflict log for valid ids"
        case .interrupted: return "nothing was lost: run the operation again to finish"
        case .noUserID: return "initialize it for sync with the user's id (SyncDatabase.initializeForSync(userID:)) before syncing"
        case .invalidIdentity: return "use a user id of letters, digits, '-', '_' or '.', and keep the site id the database already has"
        case .remoteNotEncrypting: return "open the bucket with the home's settings: ObjectStoreRemote.open(url, home: home, settings: home.loadSettings())"
        case .catchUpPending: return "sync first (its catch-up merges the last compaction's snapshot), then compact"
        case .databaseCopied: return "give this copy its own identity (SyncDatabase.becomeNewSite()), or, if the file was only moved, record its new place (SyncDatabase.confirmLocation())"
        default: return nil
        }
    }

    /// `LocalizedError`: the one-line description.
    public var errorDescription: String? { description }
    /// `LocalizedError`: the hint.
    public var recoverySuggestion: String? { hint }
}
