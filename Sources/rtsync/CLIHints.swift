import SyncEngine

// The library's hints speak to an app; the command-line tool names its own commands and flags instead.

extension SyncEngineError {
    /// The hint the CLI prints: its own command or flag where there is one, else the library's.
    var cliHint: String? {
        switch self {
        case .databaseNotFound: return "check the --db path"
        case .notTracked: return "run `rtsync track --db PATH --all` first"
        case .conflictNotFound: return "list conflicts with `rtsync conflicts list`"
        case .interrupted: return "nothing was lost: run the command again to finish"
        case .noUserID: return "run `rtsync init` for this home first (it records the user id)"
        case .databaseCopied: return "give this copy its own identity with `rtsync init --new-site`"
        default: return hint
        }
    }
}

extension LifecycleError {
    /// The hint the CLI prints: its own command where there is one, else the library's.
    var cliHint: String? {
        switch self {
        case .backupCorrupt(_, _, let next?): return "restore the next good backup instead: rtsync backup restore \(next)"
        case .demoMode: return "turn demo mode off with `rtsync demo off`"
        default: return hint
        }
    }
}
