import DiffFormat
import Foundation
import RTSQLite

/// A device's primary SQLite database with rtsync's change tracking, export, apply and conflict log.
///
/// All work goes through one connection guarded by a lock, so an instance can be shared between tasks. The
/// connection opens with the instance and closes when the last reference to it goes; a ``Syncer`` opens its own for
/// each run. Your app's own connections (a GRDB pool, say) work beside it in WAL mode.
public final class SyncDatabase: @unchecked Sendable {
    /// Path of the database file.
    public let path: String
    let db: Connection
    private let lock = NSLock()
    var resolvers: [String: ConflictResolver] = [:]
    /// Whether apply may write rows new to this device in bulk (tests turn it off to compare with the per-row merge).
    package var bulkApply = true
    /// Whether export may coalesce and write the change log as sets in SQL (tests turn it off to compare with the
    /// row-by-row export).
    /// `RTSYNC_SET_EXPORT=0` in the environment turns it off (for A/B runs of the benchmarks).
    package var setExport = ProcessInfo.processInfo.environment["RTSYNC_SET_EXPORT"] != "0"
    /// Exports of fewer changed rows than this go row by row (below it, attaching the file costs more than it saves).
    /// `RTSYNC_SET_EXPORT_MIN_ROWS=1` sends every export through the set-based path (to run the suites over it).
    package var setExportMinimumRows = ProcessInfo.processInfo.environment["RTSYNC_SET_EXPORT_MIN_ROWS"].flatMap { Int($0) } ?? 64
    /// Exports written by the set-based path since this value was opened (for tests).
    package internal(set) var setExportsWritten = 0
    /// Tables where the last export dropped an insert or update of a row whose key holds a NULL (under the lock).
    var droppedNullKeys: Set<String> = []
    /// Diff files smaller than this are merged row by row: below it, attaching the file and starting a thread
    /// cost more than the bulk writes save (about 0.5 ms, against a few µs a row).
    package var bulkApplyMinimumBytes: Int64 = 64 * 1024
    /// Rows apply wrote in bulk since this value was opened (for tests).
    package internal(set) var bulkRowsWritten = 0
    /// Most small diffs `apply(diffs:)` applies in one transaction (each in a savepoint); 1 applies every diff in a
    /// transaction of its own.
    public var applyGroupLimit = 256
    /// Whether apply may merge rows this device already has as sets in SQL (tests turn it off to compare).
    package var bulkApplyKnownRows = true
    /// Rows of tables apply merged as sets of known rows since this value was opened (for tests).
    package internal(set) var bulkKnownRowsMerged = 0

    /// Opens an existing database (never creates one: a typo must not make an empty database).
    /// - Throws: `SyncEngineError.databaseNotFound`, or `SQLiteError` when it cannot be opened.
    public init(path: String) throws {
        guard FileManager.default.fileExists(atPath: path) else { throw SyncEngineError.databaseNotFound(path: path) }
        self.path = path
        // URIs let apply attach a diff read-only (`ATTACH 'file:…?mode=ro'`); a path that itself starts with
        // `file:` is opened as a plain name, and apply then does without attaching.
        db = try Connection(path: path, mode: .readWrite, uri: !path.hasPrefix("file:"))
        db.setBusyTimeout(milliseconds: 5_000)
        // For the set-based export (`rtsync_key_value`, SyncDatabase+ExportSets).
        try db.installKeyValueFunction()
        // Foreign keys: local ON DELETE SET NULL / CASCADE must behave as the schema says while diffs are applied.
        // Recursive triggers: INSERT OR REPLACE then fires the delete trigger, so a replaced row is captured.
        // A page cache of up to 32 MiB (SQLite's default is 2 MiB), filled only as pages are read: applying or
        // exporting 10k rows touches the table, its key index and the bookkeeping, and a smaller cache writes
        // pages to the WAL before the commit and reads them back.
        try db.execute("PRAGMA foreign_keys = ON; PRAGMA recursive_triggers = ON; PRAGMA cache_size = -32768; PRAGMA temp.cache_size = -32768")
    }

    /// Runs `body` with exclusive use of the connection.
    func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock(); defer { lock.unlock() }
        return try body()
    }

    /// Runs arbitrary SQL on the connection (for tools and tests; app code uses its own connection).
    public func execute(_ sql: String, _ arguments: [SQLValue] = []) throws {
        try locked { arguments.isEmpty ? try db.execute(sql) : try db.execute(sql, arguments) }
    }

    /// Runs a query and returns all rows (for tools and tests).
    public func query(_ sql: String, _ arguments: [SQLValue] = []) throws -> [[SQLValue]] {
        try locked { try db.rows(sql, arguments) }
    }

    /// Test hook: how long this connection waits for another one's lock before giving up (5 s by default).
    package func setBusyTimeoutForTesting(milliseconds: Int32) {
        locked { db.setBusyTimeout(milliseconds: milliseconds) }
    }

    /// Test hook: changes written through this connection are timed by a wall clock shifted by `milliseconds`.
    package func shiftWallClockForTesting(milliseconds: Int64) throws {
        try locked { try db.shiftWallClockForTesting(offsetMilliseconds: milliseconds) }
    }

    /// Installs a custom resolver for column conflicts of `table` (used with the default policy).
    public func setResolver(for table: String, _ resolver: ConflictResolver?) {
        locked { resolvers[table] = resolver }
    }

    // MARK: - Bookkeeping

    /// Gives a key an `rtsync_rows` entry (born 0: unknown) unless it has one.
    static let ensureRowMetaSQL = "INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site) VALUES (?, ?, 0, '') ON CONFLICT(tid, pk) DO NOTHING"

    /// Rows made here from a change other than their creator's insert, with the incarnation (`Merger.markUncarriedColumns`).
    static let partialTableSQL = """
        CREATE TABLE IF NOT EXISTS rtsync_partial(tid INTEGER NOT NULL, pk TEXT NOT NULL, born_hlc INTEGER NOT NULL, born_site TEXT NOT NULL,
          PRIMARY KEY (tid, pk)) WITHOUT ROWID
        """

    static let bookkeepingDDL = """
    CREATE TABLE IF NOT EXISTS rtsync_site(
      id INTEGER PRIMARY KEY CHECK (id = 1),
      site_id TEXT NOT NULL,
      user_id TEXT NOT NULL DEFAULT '',
      hlc INTEGER NOT NULL DEFAULT 0,
      diff_seq INTEGER NOT NULL DEFAULT 0,
      last_export TEXT,
      published_hlc INTEGER NOT NULL DEFAULT 0,
      last_diff_id TEXT,
      track_all INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE IF NOT EXISTS rtsync_tracked(
      tid INTEGER PRIMARY KEY,
      name TEXT NOT NULL UNIQUE,
      columns TEXT NOT NULL,
      policy TEXT NOT NULL DEFAULT 'lww-column',
      owner_column TEXT,
      on_delete_conflict TEXT NOT NULL DEFAULT 'delete-wins',
      sync_defaults TEXT);
    -- cols has no declared type: the update mask is an INTEGER bitmask (or '0'/'1' TEXT past 62 columns)
    -- and must keep its storage class.
    -- hlc: the change's clock, taken when it was made (see captureClockSQL).
    CREATE TABLE IF NOT EXISTS rtsync_changes(
      seq INTEGER PRIMARY KEY,
      tid INTEGER NOT NULL,
      pk TEXT NOT NULL,
      op INTEGER NOT NULL,
      cols,
      hlc INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE IF NOT EXISTS rtsync_clocks(
      tid INTEGER NOT NULL, pk TEXT NOT NULL, col TEXT NOT NULL,
      hlc INTEGER NOT NULL, site TEXT NOT NULL,
      PRIMARY KEY (tid, pk, col)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rtsync_rows(
      tid INTEGER NOT NULL, pk TEXT NOT NULL,
      born_hlc INTEGER NOT NULL, born_site TEXT NOT NULL,
      del_hlc INTEGER, del_site TEXT,
      PRIMARY KEY (tid, pk)) WITHOUT ROWID;
    \(partialTableSQL);
    CREATE TABLE IF NOT EXISTS rtsync_applied(
      diff_id TEXT PRIMARY KEY, kind TEXT NOT NULL, author_user TEXT NOT NULL, author_site TEXT NOT NULL,
      seq_first INTEGER, seq_last INTEGER, applied_at TEXT NOT NULL,
      inserted INTEGER NOT NULL DEFAULT 0, updated INTEGER NOT NULL DEFAULT 0,
      deleted INTEGER NOT NULL DEFAULT 0, conflicts INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rtsync_seen(
      site TEXT PRIMARY KEY, hlc INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rtsync_conflicts(
      id INTEGER PRIMARY KEY,
      at TEXT NOT NULL, diff_id TEXT, tbl TEXT NOT NULL, pk TEXT NOT NULL, col TEXT NOT NULL,
      local_value, remote_value,
      local_hlc INTEGER, local_site TEXT, remote_hlc INTEGER, remote_site TEXT,
      winner TEXT NOT NULL, reason TEXT NOT NULL, restored INTEGER NOT NULL DEFAULT 0);
    """

    /// Whether rtsync's bookkeeping tables exist in this database.
    public var isTracked: Bool {
        (try? locked { try db.scalar("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'rtsync_site'") }) != nil
    }

    /// Creates the bookkeeping tables and the site identity if missing (inside the caller's transaction).
    func installBookkeeping() throws {
        try db.execute(Self.bookkeepingDDL)
        if try db.scalar("SELECT 1 FROM rtsync_site") == nil {
            try db.execute("INSERT INTO rtsync_site(id, site_id) VALUES (1, ?)", [.text(KSUID.generate().string)])
        }
        try upgradeBookkeeping()
    }

    /// One-time repairs of bookkeeping written by earlier versions, each recorded in `rtsync_upgrades` once done
    /// (one indexed lookup when there is nothing to do). Runs from `track`, before every export and every apply.
    func upgradeBookkeeping() throws {
        // Nothing to do once the latest are recorded (an earlier version recorded the ones before them first).
        if (try? db.scalar("SELECT count(*) FROM rtsync_upgrades WHERE name IN ('nul-key-text', 'aside-born', 'rollups')"))??.int64 == 3 { return }
        // All or nothing, also where the caller has no transaction open (another connection's writes between dropping
        // and re-making a table's triggers would go unrecorded).
        try db.execute("SAVEPOINT rtsync_upgrade")
        do {
            try runUpgrades()
            try db.execute("RELEASE rtsync_upgrade")
        } catch {
            try? db.execute("ROLLBACK TO rtsync_upgrade; RELEASE rtsync_upgrade")
            throw error
        }
    }

    private func runUpgrades() throws {
        try db.execute("CREATE TABLE IF NOT EXISTS rtsync_upgrades(name TEXT PRIMARY KEY) WITHOUT ROWID")
        if try db.scalar("SELECT 1 FROM rtsync_upgrades WHERE name = 'clock-rows'") == nil {
            // Every key with column clocks has an rtsync_rows entry (born 0 when its birth is unknown): apply's short
            // path for rows new to this device relies on it. Earlier versions wrote clocks without one on export of
            // edits to rows that predate tracking.
            try db.execute("INSERT OR IGNORE INTO rtsync_rows(tid, pk, born_hlc, born_site) SELECT DISTINCT tid, pk, 0, '' FROM rtsync_clocks")
            try db.execute("INSERT OR IGNORE INTO rtsync_upgrades(name) VALUES ('clock-rows')")
        }
        if try db.scalar("SELECT 1 FROM rtsync_upgrades WHERE name = 'edit-clocks'") == nil {
            // Changes carry the clock of when they were made. Earlier versions stamped them at export: their
            // triggers are re-made (below), and changes they captured get clocks from now on, in capture order (their
            // edit times are unknown, and export time was what they would have had).
            // Columns later versions added to the bookkeeping tables, with what an existing row takes.
            let added: [(table: String, column: String, definition: String, fill: String?)] = [
                ("rtsync_changes", "hlc", "INTEGER NOT NULL DEFAULT 0", nil),
                ("rtsync_site", "published_hlc", "INTEGER NOT NULL DEFAULT 0", "hlc"),
                ("rtsync_site", "last_diff_id", "TEXT", nil),
                ("rtsync_site", "track_all", "INTEGER NOT NULL DEFAULT 0", nil),
                ("rtsync_tracked", "sync_defaults", "TEXT", nil),
            ]
            for c in added where try db.scalar("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", [.text(c.table), .text(c.column)]) == nil {
                try db.execute("ALTER TABLE \(c.table) ADD COLUMN \(c.column) \(c.definition)")
                if let fill = c.fill { try db.execute("UPDATE \(c.table) SET \(c.column) = \(fill)") }
            }
            try db.execute("UPDATE rtsync_changes SET hlc = (SELECT max(hlc + 1, \(Self.wallClockSQL)) FROM rtsync_site) + (seq - (SELECT min(seq) FROM rtsync_changes)) WHERE hlc = 0")
            try db.execute("INSERT OR IGNORE INTO rtsync_upgrades(name) VALUES ('edit-clocks')")
        }
        // A TEXT key holding a NUL byte has a key text of its own since (`keyValueText`); earlier triggers logged
        // such a row under the key text of its prefix, so it was never sent as itself. Triggers re-made; each such row
        // gets the bookkeeping of a row that predates tracking (born unknown) and is logged once as an update of all
        // its columns with the least clock, so that it reaches devices that lack it while any real edit, here or
        // elsewhere, wins over it (every device that has it does the same). An insert an earlier trigger logged under
        // the prefix's key text is dropped where it can only be such a row's: the prefix's row is known here and no
        // delete of it is logged (inserting the prefix itself again needs one).
        if try db.scalar("SELECT 1 FROM rtsync_upgrades WHERE name = 'nul-key-text'") == nil {
            try upgradeNULKeyText()
            try db.execute("INSERT OR IGNORE INTO rtsync_upgrades(name) VALUES ('nul-key-text')")
        }
        // Values kept aside record the row incarnation they were kept for since; those kept before hold NULL there
        // and are taken as the row's (as they were).
        if try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_aside'") != nil,
           try db.scalar("SELECT 1 FROM pragma_table_info('rtsync_aside') WHERE name = 'born_hlc'") == nil {
            try db.execute("ALTER TABLE rtsync_aside ADD COLUMN born_hlc INTEGER; ALTER TABLE rtsync_aside ADD COLUMN born_site TEXT")
        }
        try db.execute(Self.partialTableSQL)
        try db.execute("INSERT OR IGNORE INTO rtsync_upgrades(name) VALUES ('aside-born')")
        // The keys of small diffs, for roll-ups (SyncDatabase+Rollup): made here, so no export changes the schema.
        try db.execute(Self.rollupTablesSQL)
        try db.execute("INSERT OR IGNORE INTO rtsync_upgrades(name) VALUES ('rollups')")
    }

    private func upgradeNULKeyText() throws {
        for info in try Self.loadTracked(db).values {
            try Self.installTriggers(db, tid: info.table.id, definition: info.definition)
            let def = info.definition, tid = info.table.id, keys = def.primaryKeyColumns
            guard try !Self.hasRowidAliasKey(db, def) else { continue }
            let table = "main." + quoteIdentifier(def.name)
            let utf8 = try Self.storesUTF8(db)
            let hasNUL = keys.map { "(" + Self.holdsNUL("o." + quoteIdentifier($0), utf8: utf8) + ")" }.joined(separator: " OR ")
            guard try db.scalar("SELECT 1 FROM \(table) AS o WHERE \(hasNUL) LIMIT 1") != nil else { continue }
            let oldKey = keys.map { "quote(o.\(quoteIdentifier($0)))" }.joined(separator: " || ',' || ")
            try db.execute("""
                DELETE FROM rtsync_changes WHERE tid = \(tid) AND op = 1 AND pk IN (SELECT \(oldKey) FROM \(table) AS o WHERE \(hasNUL))
                  AND pk IN (SELECT pk FROM rtsync_rows WHERE tid = \(tid) AND del_hlc IS NULL)
                  AND NOT EXISTS (SELECT 1 FROM rtsync_changes AS x WHERE x.tid = \(tid) AND x.pk = rtsync_changes.pk AND x.op = 3)
                """)
            let key = try Self.keyExpression(def, row: "o", in: db)
            try db.execute("INSERT OR IGNORE INTO rtsync_rows(tid, pk, born_hlc, born_site) SELECT \(tid), \(key), 0, '' FROM \(table) AS o WHERE \(hasNUL)")
            let keyNames = Set(keys.map { $0.lowercased() })
            let others = def.columnNames.filter { !keyNames.contains($0.lowercased()) }
            // An update of every non-key column (a table of key columns only: an insert).
            try db.execute("INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) SELECT \(tid), \(key), ?, ?, 1 FROM \(table) AS o WHERE \(hasNUL)",
                           [.integer(others.isEmpty ? 1 : 2), others.isEmpty ? .null : Merger.changeMask(info, columns: others)])
        }
    }

    /// A new diff id for a file this site writes, later than every id it wrote before, also across processes
    /// and when the wall clock went back (receivers apply a batch of diffs in id order); past the last id by a
    /// random step, not by one, since copies of this database (devices that joined from one backup) continue from
    /// the same last id. Inside the caller's transaction.
    func nextDiffID() throws -> KSUID {
        let id = try proposedDiffID()
        try db.execute("UPDATE rtsync_site SET last_diff_id = ?", [.text(id.string)])
        return id
    }

    /// The id `nextDiffID` would return, without recording it (the caller records it in `rtsync_site.last_diff_id`
    /// in the same transaction, or in a later one when nothing was written in between).
    func proposedDiffID() throws -> KSUID {
        var id = KSUID.generate()
        if let text = try db.scalar("SELECT last_diff_id FROM rtsync_site")?.string, let last = try? KSUID(string: text),
           id <= last, let next = last.randomSuccessor() {
            id = next
        }
        return id
    }

    /// SQL for the wall time as a hybrid logical clock value (milliseconds << 16), from SQLite's own clock,
    /// which stays the same for every row one statement writes.
    static let wallClockSQL = "(CAST((julianday('now') - 2440587.5) * 86400000.0 + 0.5 AS INTEGER) << 16)"

    /// SQL for the clock of a change made now: wall time, but after every clock this database has issued or
    /// applied (`rtsync_site.hlc`) and after the change captured before it, so an edit made after applying a
    /// remote change wins over it even when this device's wall clock is behind, and a site's clocks are unique
    /// and increase in capture order.
    static let captureClockSQL = """
        max(\(wallClockSQL), (SELECT hlc FROM rtsync_site) + 1, coalesce((SELECT hlc FROM rtsync_changes ORDER BY seq DESC LIMIT 1), 0) + 1)
        """

    /// This database's site id (stable from the first `track`).
    public func siteID() throws -> String {
        try locked { try requireTracked(); return try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? "" }
    }

    /// The user id recorded for this database ("" until set).
    public func userID() throws -> String {
        try locked { try requireTracked(); return try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? "" }
    }

    /// The user a sync of this database runs as: the one `settings` name, else the one the database was initialized
    /// for ("" when neither is known).
    public func syncUserID(settings: RTSyncSettings) throws -> String {
        if !settings.userID.isEmpty { return settings.userID }
        return isTracked ? try userID() : ""
    }

    /// Records the user this database belongs to (stamped into exported diffs).
    public func setUserID(_ user: String) throws {
        try locked { try requireTracked(); try db.execute("UPDATE rtsync_site SET user_id = ?", [.text(user)]) }
    }

    func requireTracked() throws {
        if try db.scalar("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'rtsync_site'") == nil {
            throw SyncEngineError.notTracked(path: path)
        }
    }

    /// The local hybrid logical clock: the largest clock issued or seen.
    func currentHLC() throws -> HLC { HLC(rawValue: try db.scalar("SELECT hlc FROM rtsync_site")?.int64 ?? 0) }
}
