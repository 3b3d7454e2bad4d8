import Foundation

/// Paid tier of a user.
public enum Tier: String, Sendable, Codable, CaseIterable {
    /// Local backups only; no cloud sync of the database or backups.
    case free
    /// Everything.
    case premium
}

/// Settings that survive a reinstall: user id, tier, demo flag, bucket and backup rotation.
public struct RTSyncSettings: Sendable, Codable, Equatable {
    /// The user this device belongs to (a KSUID; empty until init).
    public var userID: String = ""
    /// The user's tier.
    public var tier: Tier = .free
    /// Whether demo mode is on.
    public var demo: Bool = false
    /// Bucket URL (`file:///…` or `s3://bucket/prefix`).
    public var bucket: String?
    /// Backups kept by rotation.
    public var keepBackups: Int = 5
    /// Tables that stay writable in demo mode.
    public var scratchTables: [String] = []
    /// Whether diffs must carry a valid signature from a trusted key.
    public var requireSignatures: Bool = false
    /// Media sync: "all" (automatic) or "selective" (only ``mediaSelection``).
    public var mediaMode: String = "all"
    /// What syncs in selective media mode (nil: nothing).
    public var mediaSelection: MediaSelection?
    /// Whether media sync propagates deletions both ways; deleted objects go to `<user>/trash/` first.
    public var mediaDeletes: Bool = false
    /// Days a deleted media object stays in `<user>/trash/` before sync prunes it (0: never pruned).
    public var mediaTrashDays: Int = 30
    /// Whether `rtsync sync` also syncs recordings/ and images/ (one more LIST per sync when nothing changed).
    public var syncMedia: Bool = false
    /// Whether media sync also syncs OS litter (`.DS_Store`, `._*`, `Thumbs.db`, `desktop.ini`, `.*.swp`).
    public var mediaIncludeLitter: Bool = false
    /// Minutes between automatic backups made by sync (0 = every sync).
    public var backupIntervalMinutes: Int = 60
    /// Inbound diffs past which sync compacts automatically.
    public var compactThreshold: Int = 1000
    /// What client-side encryption covers: any of "inbound", "backups", "recordings", "images" (empty: off; premium).
    public var encryption: [String] = []

    /// Default settings.
    public init() {}

    public init(from decoder: Decoder) throws {
        // Every field is optional in the file, so older settings files keep loading.
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = RTSyncSettings()
        userID = try c.decodeIfPresent(String.self, forKey: .userID) ?? d.userID
        tier = try c.decodeIfPresent(Tier.self, forKey: .tier) ?? d.tier
        demo = try c.decodeIfPresent(Bool.self, forKey: .demo) ?? d.demo
        bucket = try c.decodeIfPresent(String.self, forKey: .bucket)
        keepBackups = try c.decodeIfPresent(Int.self, forKey: .keepBackups) ?? d.keepBackups
        scratchTables = try c.decodeIfPresent([String].self, forKey: .scratchTables) ?? d.scratchTables
        requireSignatures = try c.decodeIfPresent(Bool.self, forKey: .requireSignatures) ?? d.requireSignatures
        mediaMode = try c.decodeIfPresent(String.self, forKey: .mediaMode) ?? d.mediaMode
        mediaSelection = try c.decodeIfPresent(MediaSelection.self, forKey: .mediaSelection)
        mediaDeletes = try c.decodeIfPresent(Bool.self, forKey: .mediaDeletes) ?? d.mediaDeletes
        mediaTrashDays = try c.decodeIfPresent(Int.self, forKey: .mediaTrashDays) ?? d.mediaTrashDays
        syncMedia = try c.decodeIfPresent(Bool.self, forKey: .syncMedia) ?? d.syncMedia
        mediaIncludeLitter = try c.decodeIfPresent(Bool.self, forKey: .mediaIncludeLitter) ?? d.mediaIncludeLitter
        backupIntervalMinutes = try c.decodeIfPresent(Int.self, forKey: .backupIntervalMinutes) ?? d.backupIntervalMinutes
        compactThreshold = try c.decodeIfPresent(Int.self, forKey: .compactThreshold) ?? d.compactThreshold
        encryption = try c.decodeIfPresent([String].self, forKey: .encryption) ?? d.encryption
    }
}

/// The folders rtsync uses, mirroring an app's: support (primary database, outbox, cache), documents
/// (recordings, images, backups) and a settings file that survives reinstall.
public struct RTSyncHome: Sendable {
    /// The root folder (`--home`, `RTSYNC_HOME`, or `~/.rtsync`).
    public let root: URL

    /// Uses `root` as the home folder.
    public init(root: URL) { self.root = root }

    /// The home from an explicit path, else `RTSYNC_HOME`, else `$HOME/.rtsync`.
    public static func resolve(_ explicit: String? = nil) -> RTSyncHome {
        if let explicit, !explicit.isEmpty { return RTSyncHome(root: URL(fileURLWithPath: explicit)) }
        if let env = ProcessInfo.processInfo.environment["RTSYNC_HOME"], !env.isEmpty { return RTSyncHome(root: URL(fileURLWithPath: env)) }
        // $HOME first, as every Unix tool does (Foundation's home directory on Linux reads the password file).
        let home = ProcessInfo.processInfo.environment["HOME"].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser
        return RTSyncHome(root: home.appendingPathComponent(".rtsync"))
    }

    /// The home whose primary database `database` is (`<root>/support/primary.sqlite`), or nil for any other file.
    public static func containing(database: URL) -> RTSyncHome? {
        let file = database.standardizedFileURL
        guard file.lastPathComponent == "primary.sqlite", file.deletingLastPathComponent().lastPathComponent == "support" else { return nil }
        return RTSyncHome(root: file.deletingLastPathComponent().deletingLastPathComponent())
    }

    /// Support folder: the primary database and working folders.
    public var support: URL { root.appendingPathComponent("support") }
    /// Documents folder: recordings, images, backups.
    public var documents: URL { root.appendingPathComponent("documents") }
    /// The primary database.
    public var database: URL { support.appendingPathComponent("primary.sqlite") }
    /// Diffs exported but not yet uploaded.
    public var outbox: URL { support.appendingPathComponent("outbox") }
    /// Downloaded diffs waiting to be applied.
    public var inbox: URL { support.appendingPathComponent("inbox") }
    /// Rejected diffs.
    public var quarantine: URL { support.appendingPathComponent("quarantine") }
    /// Download cache for media URLs.
    public var cache: URL { support.appendingPathComponent("cache") }
    /// Local database backups.
    public var backups: URL { documents.appendingPathComponent("backups") }
    /// The settings file.
    public var settingsFile: URL { root.appendingPathComponent("settings.json") }
    /// Private keys (readable only by the user).
    public var keys: URL { root.appendingPathComponent("keys") }
    /// The user's content keys for client-side encryption (mode 0600).
    public var contentKeysFile: URL { keys.appendingPathComponent("content-keys.json") }

    /// Creates the folders that do not exist yet.
    public func createFolders() throws {
        for dir in [support, documents, outbox, inbox, quarantine, cache, backups] {
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        }
    }

    /// Reads the settings (defaults when the file does not exist).
    /// - Throws: `LifecycleError.invalidSettings` when the file is not valid JSON.
    public func loadSettings() throws -> RTSyncSettings {
        guard let data = try? Data(contentsOf: settingsFile) else { return RTSyncSettings() }
        do { return try JSONDecoder().decode(RTSyncSettings.self, from: data) } catch {
            throw LifecycleError.invalidSettings(file: settingsFile.path, reason: "\(error)")
        }
    }

    /// Writes the settings atomically.
    public func saveSettings(_ settings: RTSyncSettings) throws {
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        try e.encode(settings).write(to: settingsFile, options: .atomic)
    }
}

/// Why a lifecycle operation (init, backup, restore, demo, tier) failed.
public enum LifecycleError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidSettings(file: String, reason: String)
    case noSourceAvailable(attempts: [String])
    case backupFailed(path: String, reason: String)
    case backupNotFound(id: String)
    case backupCorrupt(id: String, reason: String, nextGood: String?)
    case noGoodBackup
    case tierRefused(tier: Tier, action: String)
    case demoMode(action: String)
    case homeBusy(path: String, pid: Int32?)

    public var description: String {
        switch self {
        case .invalidSettings(let f, let r): return "invalid settings file: \(r) (\(f))"
        case .noSourceAvailable(let a): return "no database source worked: " + a.joined(separator: "; ")
        case .backupFailed(let p, let r): return "backup failed: \(r) (\(p))"
        case .backupNotFound(let id): return "no backup with id \(id)"
        case .backupCorrupt(let id, let r, _): return "backup \(id) is damaged: \(r)"
        case .noGoodBackup: return "there is no verified backup to restore"
        case .tierRefused(let t, let a): return "\(a) is not available on the \(t.rawValue) tier"
        case .demoMode(let a): return "\(a) is disabled in demo mode"
        case .homeBusy(let p, let pid): return "another rtsync is running on this home\(pid.map { " (pid \($0))" } ?? "") (\(p))"
        }
    }

    /// What the user can do about it.
    public var hint: String? {
        switch self {
        case .backupCorrupt(_, _, let next?): return "restore the next good backup instead: rtsync backup restore \(next)"
        case .backupCorrupt: return "no other verified backup exists"
        case .backupFailed: return "check the backup folder exists, is writable and has free space; existing backups were not touched"
        case .tierRefused: return "upgrade to premium, or use a local-folder bucket (file:///...)"
        case .demoMode: return "turn demo mode off with `rtsync demo off`"
        case .homeBusy: return "wait for it to finish and run the command again (the lock goes with the process that holds it, also when it is killed)"
        case .noSourceAvailable: return "check the bucket URL and network, or reinstall to restore the bundled demo database"
        case .invalidSettings: return "fix or delete the settings file"
        default: return nil
        }
    }
}
