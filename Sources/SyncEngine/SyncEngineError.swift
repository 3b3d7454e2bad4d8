/// Why a SyncEngine operation failed; each case names the database, table, file or row involved.
public enum SyncEngineError: Error, Sendable, Equatable, CustomStringConvertible {
    case databaseNotFound(path: String)
    case notTracked(path: String)
    case noSuchTable(table: String)
    case untrackableTable(table: String, reason: String, hint: String)
    case diffRejected(file: String, reason: String)
    case unknownPolicy(String)
    case invalidConfig(file: String, reason: String)
    case conflictNotFound(id: Int64)
    case cannotRestore(id: Int64, reason: String)
    case interrupted(operation: String, path: String)

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
        }
    }

    /// What the user can do about it.
    public var hint: String? {
        switch self {
        case .databaseNotFound: return "check the --db path"
        case .notTracked: return "run `rtsync track --db PATH --all` first"
        case .untrackableTable(_, _, let h): return h
        case .diffRejected: return "the diff was moved to quarantine; nothing in the database changed"
        case .unknownPolicy: return "use one of the listed policies"
        case .conflictNotFound: return "list conflicts with `rtsync conflicts list`"
        case .interrupted: return "nothing was lost: run the command again to finish"
        default: return nil
        }
    }
}
