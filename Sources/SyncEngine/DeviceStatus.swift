import DiffFormat
import Foundation
import RTSQLite

/// Everything `rtsync status` reports (JSON keys are documented in the README).
public struct DeviceStatus: Sendable, Codable {
    /// Primary database path.
    public var database: String
    /// Whether the database exists.
    public var exists: Bool
    /// Database size in bytes.
    public var bytes: Int64
    /// User id.
    public var userId: String
    /// Site id of the database.
    public var siteId: String?
    /// Tier.
    public var tier: Tier
    /// Demo mode flag.
    public var demo: Bool
    /// Configured bucket.
    public var bucket: String?
    /// Tracked tables.
    public var trackedTables: [String]
    /// Captured changes not yet exported.
    public var pendingChanges: Int
    /// Diffs waiting in the outbox for upload.
    public var outbox: Int
    /// Time of the last export.
    public var lastExport: String?
    /// Time of the newest backup.
    public var lastBackup: String?
    /// Id of the last-known-good backup.
    public var lastKnownGood: String?
    /// Rejected diffs in quarantine.
    public var quarantined: Int
    /// Conflict log entries not restored.
    public var unresolvedConflicts: Int
    /// Diffs known to be missing: site id -> missing sequence numbers.
    public var gaps: [String: [Int64]]
    /// Why the database cannot be read as a sound SQLite database (nil when it can): restore a backup.
    public var damaged: String?
    /// Restored from a backup and not yet caught up from the bucket (the next sync does it): it may be behind.
    public var catchUpPending: Bool = false
    /// Site ids this database used before a restore.
    public var retiredSites: [String] = []
    /// New rows from an older app version held back (they lack a NOT NULL column this schema has without a default
    /// or a declared value), as `table key: why`.
    public var heldRows: [String] = []
    /// Tracked tables whose key each device numbers itself (`SyncDatabase.tablesWithDeviceNumberedKeys()`): rows
    /// inserted on two devices between syncs can get the same key, and the later insert replaces the other row.
    public var deviceNumberedKeys: [String] = []
    /// Rows whose key holds a NULL, as `table: count` (`SyncDatabase.rowsWithNullKeys()`): never sent to other devices.
    public var nullKeyRows: [String] = []

    /// Gathers the status of a home folder.
    public static func gather(home: RTSyncHome) throws -> DeviceStatus {
        let settings = try home.loadSettings()
        let fm = FileManager.default
        let dbPath = home.database.path
        let exists = fm.fileExists(atPath: dbPath)
        let backups = BackupManager(database: home.database, folder: home.backups, keep: settings.keepBackups)
        func count(_ dir: URL) -> Int { ((try? fm.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.hasSuffix(".sqlite") }.count }
        var status = DeviceStatus(
            database: dbPath, exists: exists,
            bytes: ((try? fm.attributesOfItem(atPath: dbPath)[.size]) as? NSNumber)?.int64Value ?? 0,
            userId: settings.userID, siteId: nil, tier: settings.tier, demo: settings.demo, bucket: settings.bucket,
            trackedTables: [], pendingChanges: 0, outbox: count(home.outbox), lastExport: nil,
            lastBackup: backups.list().first?.createdAt, lastKnownGood: backups.lastKnownGood()?.id,
            quarantined: count(home.quarantine), unresolvedConflicts: 0, gaps: [:])
        if exists, let problem = damage(dbPath) {
            status.damaged = problem
            return status
        }
        if exists {
            let db = try SyncDatabase(path: dbPath)
            if db.isTracked {
                status.siteId = try db.siteID()
                status.trackedTables = try db.trackedTables().map(\.name)
                status.deviceNumberedKeys = try db.tablesWithDeviceNumberedKeys()
                status.nullKeyRows = try db.rowsWithNullKeys().sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
                status.pendingChanges = try db.pendingChangeCount()
                status.lastExport = try db.query("SELECT last_export FROM rtsync_site").first?.first?.string
                status.unresolvedConflicts = try db.conflicts(includeRestored: false).count
                status.gaps = try db.sequenceGaps()
                let retired = try db.retiredSites()
                status.retiredSites = retired.map(\.site)
                status.catchUpPending = retired.contains { $0.catchUp }
                status.heldRows = try db.heldRows().map { "\($0.table) \($0.key): \($0.reason)" }
            }
        }
        return status
    }

    /// What is wrong with the database file, or nil: its schema must read, and below 64 MB `quick_check` passes
    /// too (larger files get the schema check only, so `status` stays quick; `backup verify` checks fully).
    /// The text is one line: SQLite's multi-line report is cut to its first finding.
    public static func damage(_ path: String) -> String? {
        guard let text = rawDamage(path) else { return nil }
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("*** in database") }
        let more = lines.count > 1 ? " (and \(lines.count - 1) more problem(s))" : ""
        return (lines.first ?? text) + more
    }

    private static func rawDamage(_ path: String) -> String? {
        func check(_ mode: Connection.Mode) throws -> String? {
            let c = try Connection(path: path, mode: mode)
            _ = try c.rows("SELECT count(*) FROM sqlite_schema")
            let size = ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.int64Value ?? 0
            if size < 64 << 20 {
                let result = try c.rows("PRAGMA quick_check(1)").first?.first?.string ?? "ok"
                if result != "ok" { return result }
            }
            return nil
        }
        do {
            do {
                return try check(.readOnly)
            } catch let e as SQLiteError where e.code == 8 {
                // SQLITE_READONLY: a writer killed mid-transaction left a hot journal (or a WAL to recover), which only
                // a connection that may write can roll back (SQLite's own recovery, not damage): checked again through one.
                return try check(.readWrite)
            }
        } catch let e as SQLiteError {
            return e.message
        } catch {
            return "\(error)"
        }
    }
}

extension SyncDatabase {
    /// Most missing sequence numbers listed per site (a count beyond that is in the last entry's range).
    public static let maxListedGaps = 1_000

    /// Diffs known to be missing, per author site: sequence numbers below the highest applied one that were never
    /// applied (at most `maxListedGaps` per site, lowest first). Worked out from ranges, so a diff claiming a huge
    /// sequence number costs nothing; this device's own site is left out.
    public func sequenceGaps() throws -> [String: [Int64]] {
        let own = try siteID()
        var ranges: [String: [(Int64, Int64)]] = [:]
        for r in try query("SELECT author_site, seq_first, seq_last FROM rtsync_applied WHERE seq_first IS NOT NULL AND kind = 'changes'") {
            guard let site = r[0].string, site != own, let a = r[1].int64, let b = r[2].int64, a <= b else { continue }
            ranges[site, default: []].append((a, b))
        }
        var gaps: [String: [Int64]] = [:]
        for (site, list) in ranges {
            // Numbering starts at 1; a snapshot may have covered the early ones, so look only above the lowest seen.
            var missing: [Int64] = []
            var covered = Int64.min
            for (a, b) in list.sorted(by: { $0.0 < $1.0 }) {
                // (A forged range may end at Int64.max: nothing lies above it, and covered + 1 would overflow.)
                if covered == Int64.max { break }
                if covered != Int64.min, a > covered + 1 {
                    var n = covered + 1
                    while n < a, missing.count < Self.maxListedGaps { missing.append(n); n += 1 }
                }
                covered = max(covered, b)
                if missing.count >= Self.maxListedGaps { break }
            }
            if !missing.isEmpty { gaps[site] = missing }
        }
        return gaps
    }
}
