import DemoAsset
import DiffFormat
import Foundation
import RTSQLite

/// Where a primary database came from.
public enum InitSource: String, Sendable, Codable {
    /// The database already on the device.
    case existing
    /// The newest verified backup in the documents folder.
    case documentsBackup = "documents-backup"
    /// The user's newest database in the bucket (`<user>/backups/`).
    case bucket
    /// The demo database downloaded from the bucket's `demo/` prefix.
    case demo
    /// The demo database bundled with the package.
    case bundled
}

/// What the init chain did with one candidate.
public struct InitAttempt: Sendable, Codable, Equatable {
    /// The candidate.
    public var source: InitSource
    /// "used", "skipped" (damaged or failed verification), "failed" (could not be fetched) or "unavailable".
    public var outcome: String
    /// Details: the file or key, and the reason.
    public var detail: String
}

/// The result of `InitChain.run`.
public struct InitResult: Sendable, Codable {
    /// The source that won.
    public var source: InitSource
    /// The primary database path.
    public var database: String
    /// The user id now in settings.
    public var userId: String
    /// The database's site id.
    public var siteId: String
    /// Whether a new user id was made (database from demo or the bundled asset).
    public var newUser: Bool
    /// Every candidate tried, in order.
    public var attempts: [InitAttempt]
}

/// Finds or builds the primary database at launch: the existing file if it passes `quick_check`, else the
/// documents-folder backup, the user's database in the bucket, the bucket's demo database, and the
/// bundled asset, stopping at the first candidate that passes verification.
public struct InitChain: Sendable {
    /// The folders.
    public var home: RTSyncHome
    /// The bucket, if one is configured.
    public var remote: (any RemoteStore)?
    /// A user id to join (a new device of an existing user); else the one in settings.
    public var joinUser: String?
    /// The starting database shipped with the app, the chain's last step (defaults to rtsync's demo database,
    /// `DemoAsset.url`; an app names its own bundled file, or nil for none).
    public var bundledAsset: URL?
    /// The bucket prefix of the demo database downloaded before the bundled one (default `demo/`; nil skips it).
    public var demoPrefix: String? = "demo/"
    /// Retries of network steps.
    public var retry: RemoteRetryPolicy
    /// Tables a candidate must have (default: none beyond having tables).
    public var expectedTables: [String]

    /// How long init waits for another run on the same home to finish.
    public var lockWait: TimeInterval = 30

    /// Makes an init chain.
    public init(home: RTSyncHome, remote: (any RemoteStore)? = nil, joinUser: String? = nil, bundledAsset: URL? = DemoAsset.url,
                demoPrefix: String? = "demo/", retry: RemoteRetryPolicy = RemoteRetryPolicy(), expectedTables: [String] = []) {
        self.home = home
        self.demoPrefix = demoPrefix
        self.remote = remote
        self.joinUser = joinUser
        self.bundledAsset = bundledAsset
        self.retry = retry
        self.expectedTables = expectedTables
    }

    /// Runs the chain; `progress` receives one line per step.
    /// - Throws: `LifecycleError.noSourceAvailable` listing every attempt when nothing worked.
    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> InitResult {
        try home.createFolders()
        // Installing a database must not race a sync, restore or another init of this home.
        return try await HomeLock.withLock(home, wait: lockWait) { try await runLocked(progress: progress) }
    }

    private func runLocked(progress: @Sendable (String) -> Void) async throws -> InitResult {
        var settings = try home.loadSettings()
        if let joinUser, !joinUser.isEmpty { settings.userID = joinUser }
        let db = home.database
        let fm = FileManager.default
        var attempts: [InitAttempt] = []

        if fm.fileExists(atPath: db.path) {
            progress("checking existing database \(db.path)")
            if let problem = BackupManager.verificationProblem(db, expectedTables: expectedTables) {
                let aside = db.deletingLastPathComponent().appendingPathComponent(db.lastPathComponent + ".corrupt-" + KSUID.generate().string)
                try fm.moveItem(at: db, to: aside)
                for s in ["-wal", "-shm", "-journal"] where fm.fileExists(atPath: db.path + s) { try? fm.moveItem(atPath: db.path + s, toPath: aside.path + s) }
                attempts.append(InitAttempt(source: .existing, outcome: "skipped", detail: "\(problem); moved aside to \(aside.path)"))
                progress("existing database is damaged (\(problem)); moved aside")
            } else {
                attempts.append(InitAttempt(source: .existing, outcome: "used", detail: db.path))
                return try finish(.existing, settings: &settings, attempts: attempts)
            }
        }

        // 1. The newest good backup in the documents folder.
        let backups = BackupManager(database: db, folder: home.backups)
        let local = backups.list()
        if local.isEmpty { attempts.append(InitAttempt(source: .documentsBackup, outcome: "unavailable", detail: "no backups in \(home.backups.path)")) }
        for b in local {
            let file = home.backups.appendingPathComponent(b.file)
            progress("trying documents backup \(b.id)")
            if let problem = BackupManager.verificationProblem(file, expectedTables: expectedTables, immutable: true) {
                attempts.append(InitAttempt(source: .documentsBackup, outcome: "skipped", detail: "\(file.path): \(problem)"))
                continue
            }
            _ = try BackupManager.install(file, as: db)
            attempts.append(InitAttempt(source: .documentsBackup, outcome: "used", detail: file.path))
            return try finish(.documentsBackup, settings: &settings, attempts: attempts)
        }

        // 2. The user's newest database in the bucket; 3. the bucket's demo database.
        for (source, prefix) in [(InitSource.bucket, settings.userID.isEmpty ? nil : settings.userID + "/backups/"), (.demo, demoPrefix)] {
            // Demo data and the bundled asset make a new user: a device asked to join a user whose database could not
            // be read (the bucket failed, not: holds none) would go on syncing as someone else. It fails instead.
            if source == .demo, let joinUser, !joinUser.isEmpty, attempts.last?.source == .bucket, attempts.last?.outcome == "failed" {
                attempts.append(InitAttempt(source: .demo, outcome: "skipped", detail: "joining user \(joinUser) needs its database from the bucket; demo data would make a new user"))
                throw LifecycleError.noSourceAvailable(attempts: attempts.map { "\($0.source.rawValue): \($0.outcome) (\($0.detail))" })
            }
            guard let remote else { attempts.append(InitAttempt(source: source, outcome: "unavailable", detail: "no bucket configured")); continue }
            guard let prefix else {
                attempts.append(InitAttempt(source: source, outcome: "unavailable", detail: source == .demo ? "no demo source named" : "no user id set"))
                continue
            }
            do {
                progress("looking for the newest database under \(prefix) in the bucket")
                let temp = home.support.appendingPathComponent(".download-\(KSUID.generate().string).sqlite")
                defer { try? fm.removeItem(at: temp) }
                guard let newest = try await remote.downloadNewestDatabase(prefix: prefix, to: temp, retry: retry) else {
                    attempts.append(InitAttempt(source: source, outcome: "unavailable", detail: "nothing under \(prefix)"))
                    continue
                }
                progress("downloaded \(newest.key) (\(newest.size) bytes)")
                if let problem = BackupManager.verificationProblem(temp, expectedTables: expectedTables, immutable: true) {
                    attempts.append(InitAttempt(source: source, outcome: "skipped", detail: "\(newest.key): \(problem)"))
                    continue
                }
                _ = try BackupManager.install(temp, as: db)
                attempts.append(InitAttempt(source: source, outcome: "used", detail: newest.key))
                let result = try finish(source, settings: &settings, attempts: attempts)
                if source == .bucket {
                    // The new device's cursor goes to the bucket now, so that no compaction from here on prunes a diff
                    // it has not applied (when this fails, its first sync publishes it, and then catches up).
                    let sync = try SyncDatabase(path: db.path)
                    let inbound = Syncer.inboundPrefix(user: settings.userID)
                    if let listed = try? await retry.run({ try await remote.list(prefix: inbound) }) {
                        if (try? await Compactor.publishCursor(db: sync, user: settings.userID, listed: Syncer.diffIDs(in: listed, under: inbound),
                                                               remote: remote, home: home)) != nil {
                            try? fm.removeItem(at: Syncer.pendingCursorMarker(home))
                        }
                    }
                    // A database other than the last compaction's snapshot may lack diffs compaction pruned: the first
                    // sync merges the snapshot too (see SyncDatabase+Restore). Read after the cursor is published, so a
                    // compaction that did not see the cursor has recorded its snapshot by then.
                    // When the pointer cannot be read, the first sync looks for itself.
                    var behind = true
                    do { behind = try await remote.latestSnapshotKey(user: settings.userID, retry: retry).map { $0 != newest.key } ?? false } catch {}
                    if behind { try sync.markCatchUpPending() }
                }
                return result
            } catch {
                attempts.append(InitAttempt(source: source, outcome: "failed", detail: "\(prefix): \(error)"))
                progress("\(source.rawValue) failed: \(error)")
            }
        }

        // 4. The bundled asset.
        if let asset = bundledAsset, fm.fileExists(atPath: asset.path) {
            progress("using the bundled demo database")
            if let problem = BackupManager.verificationProblem(asset, expectedTables: expectedTables, immutable: true) {
                attempts.append(InitAttempt(source: .bundled, outcome: "skipped", detail: "\(asset.path): \(problem)"))
            } else {
                _ = try BackupManager.install(asset, as: db)
                attempts.append(InitAttempt(source: .bundled, outcome: "used", detail: asset.path))
                return try finish(.bundled, settings: &settings, attempts: attempts)
            }
        } else {
            attempts.append(InitAttempt(source: .bundled, outcome: "unavailable", detail: "the bundled demo database is not installed with this binary"))
        }
        throw LifecycleError.noSourceAvailable(attempts: attempts.map { "\($0.source.rawValue): \($0.outcome) (\($0.detail))" })
    }

    /// Tracks the installed database, gives a copied database a new site id, and for demo data makes a new user.
    private func finish(_ source: InitSource, settings: inout RTSyncSettings, attempts: [InitAttempt]) throws -> InitResult {
        let sync = try SyncDatabase(path: home.database.path)
        var newUser = false
        if source == .demo || source == .bundled {
            let user = KSUID.generate().string
            // Before tracking: the rewrite is this device's starting point, not a change to send.
            try sync.adoptDemoData(newOwner: user)
            settings.userID = user
            newUser = true
        } else if settings.userID.isEmpty, sync.isTracked, let recorded = try? sync.userID(), !recorded.isEmpty {
            settings.userID = recorded
        }
        try sync.trackAllTrackable()
        if source != .existing { try sync.regenerateSiteID() }
        // Changes still pending in another device's copy are that device's to export, not ours.
        if source == .bucket { try sync.execute("DELETE FROM rtsync_changes") }
        if settings.userID.isEmpty { settings.userID = KSUID.generate().string; newUser = true }
        try sync.setUserID(settings.userID)
        try home.saveSettings(settings)
        // A new device publishes its cursor on its first sync, even one that changes nothing: until then no other
        // device's compaction waits for it, and diffs pruned meanwhile would never reach it.
        let site = try sync.siteID()
        if source != .existing {
            try Data("cursor of the new site \(site) to publish\n".utf8).write(to: Syncer.pendingCursorMarker(home))
        }
        return InitResult(source: source, database: home.database.path, userId: settings.userID, siteId: site,
                          newUser: newUser, attempts: attempts)
    }
}

extension SyncDatabase {
    /// Tables of a database layer's own bookkeeping, never tracked by ``trackAllTrackable()`` (each device runs its
    /// own migrations): GRDB's `grdb_migrations`.
    static let notAppData: Set<String> = ["grdb_migrations"]

    /// Tracks every user table that can be tracked; tables without a usable key are left out, and so is GRDB's
    /// `grdb_migrations` (not with a reason: it is not app data).
    /// - Returns: the names left out, with the reason.
    @discardableResult
    public func trackAllTrackable() throws -> [String: String] {
        var skipped: [String: String] = [:]
        let names = try locked { try userTableNames() }.filter { !Self.notAppData.contains($0.lowercased()) }
        for name in names {
            do { try track(tables: [name]) } catch let e as SyncEngineError { skipped[name] = e.description }
        }
        if names.isEmpty { try locked { try db.transaction { try installBookkeeping() } } }
        return skipped
    }

    /// Makes demo data this user's own: creates an account record for `newOwner` and moves every row owned
    /// by the demo account (the first row of `owners`, else of `accounts`) to it.
    public func adoptDemoData(newOwner: String) throws {
        try locked {
            try db.transaction {
                func hasTable(_ t: String) throws -> Bool { try db.scalar("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", [.text(t)]) != nil }
                var old: String?
                if try hasTable("owners") { old = try db.scalar("SELECT account_id FROM owners LIMIT 1")?.string }
                if old == nil, try hasTable("accounts") { old = try db.scalar("SELECT account_id FROM accounts LIMIT 1")?.string }
                if try hasTable("accounts"), try TableDefinition.read(table: "accounts", from: db)?.columnIndex("account_id") != nil {
                    try db.execute("INSERT OR IGNORE INTO accounts(account_id) VALUES (?)", [.text(newOwner)])
                }
                guard let old else { return }
                for table in try userTableNames() where table != "accounts" {
                    guard let def = try TableDefinition.read(table: table, from: db) else { continue }
                    for c in def.columnNames where c.lowercased() == "owner_id" || c.lowercased().hasSuffix("account_id") {
                        try db.execute("UPDATE " + quoteIdentifier(table) + " SET " + quoteIdentifier(c) + " = ? WHERE " + quoteIdentifier(c) + " = ?",
                                       [.text(newOwner), .text(old)])
                    }
                }
            }
        }
    }

    // MARK: - Demo protection

    /// Turns demo protection on or off: while on, `BEFORE` triggers make every app table read-only except
    /// `scratchTables`, for writes from any connection.
    public func setDemoProtection(_ enabled: Bool, scratchTables: [String] = []) throws {
        try locked {
            try db.transaction {
                for r in try db.rows("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'rtsync\\_demo\\_%' ESCAPE '\\'") {
                    try db.execute("DROP TRIGGER IF EXISTS " + quoteIdentifier(r[0].string ?? ""))
                }
                guard enabled else { return }
                let scratch = Set(scratchTables.map { $0.lowercased() })
                for (i, table) in try userTableNames().enumerated() where !scratch.contains(table.lowercased()) {
                    let message = quoteLiteral("rtsync demo mode: table \(table) is read-only")
                    for (kind, op) in [("i", "INSERT"), ("u", "UPDATE"), ("d", "DELETE")] {
                        try db.execute("CREATE TRIGGER rtsync_demo_\(kind)_\(i) BEFORE \(op) ON \(quoteIdentifier(table)) BEGIN SELECT RAISE(ABORT, \(message)); END")
                    }
                }
            }
        }
    }

    /// Whether demo protection triggers are installed.
    public var isDemoProtected: Bool {
        (try? locked { try db.scalar("SELECT 1 FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'rtsync\\_demo\\_%' ESCAPE '\\' LIMIT 1") }) != nil
    }
}
