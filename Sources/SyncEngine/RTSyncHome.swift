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
    /// The user this device belongs to (empty until init; else the user the database was initialized for is used).
    /// Letters, digits, `-`, `_` and `.`, at most 128 bytes: it is the first segment of every object key.
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
    /// Own diffs still listed in inbound from which sync uploads a roll-up beside them: one file with the present
    /// state of every row they touched, which a device that has them pending merges instead (0: never).
    public var rollupThreshold: Int = 16
    /// What client-side encryption covers: any of "inbound", "backups", "recordings", "images", and "names" for encrypted media names (empty: off; premium).
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
        rollupThreshold = try c.decodeIfPresent(Int.self, forKey: .rollupThreshold) ?? d.rollupThreshold
        encryption = try c.decodeIfPresent([String].self, forKey: .encryption) ?? d.encryption
    }
}

/// The command-line tool's name for a ``SyncLocation``: `RTSyncHome(root:)` is the home-folder preset.
public typealias RTSyncHome = SyncLocation

/// Where sync keeps everything for one database: the database file itself, the folders rtsync works in (outbox,
/// inbox, quarantine, backups, cache, a private work folder), the media folder and the settings.
///
/// An app names its own paths with ``init(database:folder:)`` or ``init(database:outbox:inbox:quarantine:backups:cache:work:media:settingsFile:keys:)``;
/// the command-line tool uses the home-folder preset ``init(root:)`` (`<root>/support/primary.sqlite`, …).
/// Nothing here is created until a sync, backup or init needs it (``createFolders()``).
public struct SyncLocation: Sendable, Equatable {
    /// The folder holding the settings file and keys (the home folder of the CLI preset).
    public let root: URL
    /// The private work folder: the lock file, markers and scratch files of interrupted runs (`support/` in a home).
    public let support: URL
    /// The media folder: recordings and images (`documents/` in a home).
    public let documents: URL
    /// The database that is synced.
    public let database: URL
    /// Diffs exported but not yet uploaded.
    public let outbox: URL
    /// Downloaded diffs waiting to be applied.
    public let inbox: URL
    /// Rejected diffs.
    public let quarantine: URL
    /// Download cache for media URLs.
    public let cache: URL
    /// Local database backups.
    public let backups: URL
    /// The settings file (read when ``settings`` is nil).
    public let settingsFile: URL
    /// Private keys (readable only by the user).
    public let keys: URL
    /// The user's content keys for client-side encryption (mode 0600), in the keys folder.
    public var contentKeysFile: URL { keys.appendingPathComponent("content-keys.json") }
    /// Settings given in code: when set, ``loadSettings()`` returns them and the settings file is not read.
    public var settings: RTSyncSettings?

    /// The command-line tool's home-folder layout under `root`: `support/primary.sqlite`, `support/outbox`, …,
    /// `documents/backups`, `settings.json`, `keys/`.
    public init(root: URL) {
        let support = root.appendingPathComponent("support")
        let documents = root.appendingPathComponent("documents")
        self.init(database: support.appendingPathComponent("primary.sqlite"), outbox: support.appendingPathComponent("outbox"),
                  inbox: support.appendingPathComponent("inbox"), quarantine: support.appendingPathComponent("quarantine"),
                  backups: documents.appendingPathComponent("backups"), cache: support.appendingPathComponent("cache"),
                  work: support, media: documents, settingsFile: root.appendingPathComponent("settings.json"),
                  keys: root.appendingPathComponent("keys"), root: root)
    }

    /// An app's layout: its database wherever it lives, and rtsync's folders under `folder` (`outbox`, `inbox`,
    /// `quarantine`, `backups`, `cache`, `work`, `media`, `keys`, and `settings.json`).
    public init(database: URL, folder: URL) {
        self.init(database: database, outbox: folder.appendingPathComponent("outbox"), inbox: folder.appendingPathComponent("inbox"),
                  quarantine: folder.appendingPathComponent("quarantine"), backups: folder.appendingPathComponent("backups"),
                  cache: folder.appendingPathComponent("cache"), work: folder.appendingPathComponent("work"),
                  media: folder.appendingPathComponent("media"), settingsFile: folder.appendingPathComponent("settings.json"),
                  keys: folder.appendingPathComponent("keys"), root: folder)
    }

    /// Every path named by the app. `work` is private to rtsync (lock, markers, scratch files) and should not be the
    /// database's own folder; it becomes ``support``. `media` holds `recordings/` and `images/` for media sync; it
    /// becomes ``documents``.
    public init(database: URL, outbox: URL, inbox: URL, quarantine: URL, backups: URL, cache: URL, work: URL, media: URL,
                settingsFile: URL, keys: URL) {
        self.init(database: database, outbox: outbox, inbox: inbox, quarantine: quarantine, backups: backups, cache: cache,
                  work: work, media: media, settingsFile: settingsFile, keys: keys, root: settingsFile.deletingLastPathComponent())
    }

    private init(database: URL, outbox: URL, inbox: URL, quarantine: URL, backups: URL, cache: URL, work: URL, media: URL,
                 settingsFile: URL, keys: URL, root: URL) {
        self.root = root
        self.support = work
        self.documents = media
        self.database = database
        self.outbox = outbox
        self.inbox = inbox
        self.quarantine = quarantine
        self.cache = cache
        self.backups = backups
        self.settingsFile = settingsFile
        self.keys = keys
    }

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

    /// Creates the folders that do not exist yet.
    public func createFolders() throws {
        for dir in [database.deletingLastPathComponent(), support, documents, outbox, inbox, quarantine, cache, backups] {
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        }
    }

    /// Reads the settings (defaults when the file does not exist).
    /// - Throws: `LifecycleError.invalidSettings` when the file is not valid JSON.
    public func loadSettings() throws -> RTSyncSettings {
        if let settings { return settings }
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
///
/// `description` names what failed and where; ``hint`` (also `recoverySuggestion`) says what the app or its user can
/// do, without command-line flags (the `rtsync` tool prints its own).
public enum LifecycleError: Error, Sendable, Equatable, CustomStringConvertible, LocalizedError {
    /// The settings file is not valid JSON for ``RTSyncSettings``.
    case invalidSettings(file: String, reason: String)
    /// No step of the init chain gave a database; each attempt is listed.
    case noSourceAvailable(attempts: [String])
    /// A backup could not be made; existing backups are untouched.
    case backupFailed(path: String, reason: String)
    /// No backup has this id.
    case backupNotFound(id: String)
    /// The chosen backup fails verification; `nextGood` is the newest verified one, if any.
    case backupCorrupt(id: String, reason: String, nextGood: String?)
    /// There is no verified backup to restore.
    case noGoodBackup
    /// The user's tier does not allow the action.
    case tierRefused(tier: Tier, action: String)
    /// Demo mode is on and the action would write or sync.
    case demoMode(action: String)
    /// Another run (this process or another) holds the location's lock.
    case homeBusy(path: String, pid: Int32?)
    /// The wait for another run's lock was ended by the caller's `shouldStop`; nothing was started.
    case lockWaitStopped(path: String)

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
        case .lockWaitStopped(let p): return "stopped while waiting for another run on this home; nothing was started (\(p))"
        }
    }

    /// What the app or its user can do about it.
    public var hint: String? {
        switch self {
        case .backupCorrupt(_, _, let next?): return "restore the next good backup instead (id \(next))"
        case .backupCorrupt: return "no other verified backup exists"
        case .backupFailed: return "check the backup folder exists, is writable and has free space; existing backups were not touched"
        case .tierRefused: return "upgrade to premium, or use a local-folder bucket (file:///...)"
        case .demoMode: return "turn demo mode off first"
        case .homeBusy: return "wait for it to finish and run the command again (the lock goes with the process that holds it, also when it is killed)"
        case .noSourceAvailable: return "check the bucket URL and network, or reinstall to restore the bundled demo database"
        case .invalidSettings: return "fix or delete the settings file"
        default: return nil
        }
    }

    /// `LocalizedError`: the one-line description.
    public var errorDescription: String? { description }
    /// `LocalizedError`: the hint.
    public var recoverySuggestion: String? { hint }
}
