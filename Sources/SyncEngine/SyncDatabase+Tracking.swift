import DiffFormat
import Foundation
import RTSQLite

/// A table whose changes rtsync records.
public struct TrackedTable: Sendable, Hashable, Codable {
    /// Internal table id used by the bookkeeping tables.
    public var id: Int64
    /// Table name.
    public var name: String
    /// Column names in the order the triggers record them.
    public var columns: [String]
    /// Merge settings.
    public var policy: TablePolicy
}

/// Internal: a tracked table with its live definition.
struct TrackedInfo {
    var table: TrackedTable
    var definition: TableDefinition
    /// Declared and learned column renames (old name -> new name), see Merger+Renames.
    var renames: [(old: String, new: String)] = []
}

extension SyncDatabase {
    /// Starts tracking `tables` (nil: every user table). Re-running is harmless: triggers are
    /// re-created for the current columns. Returns the tracked tables. See `tablesWithDeviceNumberedKeys()` for keys
    /// that two devices may both give to different rows.
    /// - Throws: `SyncEngineError.untrackableTable` saying why a table cannot be tracked and what to change.
    @discardableResult
    public func track(tables: [String]? = nil, policy: TablePolicy? = nil) throws -> [TrackedTable] {
        try locked {
            try db.transaction {
                try installBookkeeping()
                // Tables tracked before whose columns changed are brought up to date first (captured changes
                // re-keyed, renames learned), as export and apply would.
                try Self.refreshTracking(db)
                // `--all` means every table, now and later: tables created afterwards are tracked at the next export.
                if tables == nil { try db.execute("UPDATE rtsync_site SET track_all = 1") }
                let names = try tables ?? userTableNames()
                var out: [TrackedTable] = []
                for name in names { out.append(try trackTable(name, policy: policy)) }
                return out
            }
        }
    }

    /// Stops tracking: removes rtsync's triggers and every `rtsync_*` table. App tables and rows are untouched.
    public func untrack() throws {
        try locked {
            try db.transaction {
                for r in try db.rows("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'rtsync\\_%' ESCAPE '\\'") {
                    try db.execute("DROP TRIGGER IF EXISTS " + quoteIdentifier(r[0].string ?? ""))
                }
                for r in try db.rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'rtsync\\_%' ESCAPE '\\'") {
                    try db.execute("DROP TABLE IF EXISTS " + quoteIdentifier(r[0].string ?? ""))
                }
            }
        }
    }

    /// The tracked tables.
    public func trackedTables() throws -> [TrackedTable] {
        try locked { try requireTracked(); return try Self.loadTracked(db).values.map(\.table).sorted { $0.name < $1.name } }
    }

    /// Rows of tracked tables whose key holds a NULL, by table: SQLite allows one in a key of a rowid table whose key
    /// columns are not declared NOT NULL, but no `key = ?` finds such a row, so it is never sent (`track` refuses a
    /// table that holds one; this finds those inserted later). Tables whose key cannot hold NULL are not read.
    public func rowsWithNullKeys() throws -> [String: Int] {
        try locked {
            try requireTracked()
            var out: [String: Int] = [:]
            for info in try Self.loadTracked(db).values.sorted(by: { $0.table.name < $1.table.name }) {
                let def = info.definition
                guard !def.withoutRowID, try !Self.hasRowidAliasKey(db, def) else { continue }
                let n = Int(try db.scalar("SELECT count(*) FROM main." + quoteIdentifier(def.name) + " WHERE " + Self.keyHoldsNullSQL(def))?.int64 ?? 0)
                if n > 0 { out[def.name] = n }
            }
            return out
        }
    }

    /// The tracked tables whose key SQLite numbers on each device: an `INTEGER PRIMARY KEY` (with or without
    /// `AUTOINCREMENT`) that an insert leaves out gets the largest key here plus one, so two devices inserting
    /// between syncs give different rows the same key, and the later insert replaces the other row everywhere
    /// (its values kept only in the conflict log). Safe when the app gives new rows keys unique across devices.
    public func tablesWithDeviceNumberedKeys() throws -> [String] {
        try locked {
            try requireTracked()
            return try Self.loadTracked(db).values.filter { try Self.hasRowidAliasKey(db, $0.definition) }.map(\.table.name).sorted()
        }
    }

    /// Runs the app's schema migration (`ALTER TABLE … DROP COLUMN`, `RENAME COLUMN`, `ADD COLUMN`, new tables) with
    /// rtsync's capture triggers out of the way, in one transaction, then tracks the tables as they are now; changes
    /// captured before are kept under their columns' new positions, and the columns it renamed are remembered, so
    /// diffs from devices still on the old schema land in them (not when the same migration also drops a column of
    /// the table: declare the rename in the policy config then). SQLite refuses to drop a column that a trigger
    /// names, so dropping a column of a tracked table goes through here. Rows the migration itself writes are not
    /// captured (every device runs the same migration).
    /// - Throws: the migration's own SQLite error; nothing is changed then.
    public func migrate(sql: String) throws {
        try locked {
            try requireTracked()
            try db.transaction {
                try upgradeBookkeeping()
                try Self.refreshTracking(db)
                let before = try Self.loadTracked(db).values
                for info in before { try Self.dropTriggers(db, tid: info.table.id) }
                // First with a witness on each table, which shows the renames the migration made (Merger+Renames);
                // a migration that drops a column cannot run beside it, and runs again without.
                try db.execute("SAVEPOINT rtsync_migrate")
                do {
                    for info in before { try Self.installWitness(db, tid: info.table.id, definition: info.definition) }
                    try db.execute(sql)
                    try db.execute("RELEASE rtsync_migrate")
                } catch {
                    try db.execute("ROLLBACK TO rtsync_migrate; RELEASE rtsync_migrate")
                    try db.execute(sql)
                }
                try Self.refreshTracking(db)
                try Self.installAllTriggers(db)
            }
        }
    }

    /// Sets the merge policy of a tracked table (also settable from a config file, see `PolicyConfig`).
    public func setPolicy(_ policy: TablePolicy, for table: String) throws {
        try locked {
            try requireTracked()
            if policy.policy == .ownerOnly {
                let owner = policy.ownerColumn ?? "owner_id"
                guard let def = try TableDefinition.read(table: table, from: db), def.columnIndex(owner) != nil else {
                    throw SyncEngineError.untrackableTable(table: table, reason: "owner-only needs an owner column '\(owner)'", hint: "name the owner column (ownerColumn in the config file, --owner-column on the command line)")
                }
            }
            try db.execute("UPDATE rtsync_tracked SET policy = ?, owner_column = ?, on_delete_conflict = ?, sync_defaults = ? WHERE name = ?",
                           [.text(policy.policy.rawValue), policy.ownerColumn.map { .text($0) } ?? .null, .text(policy.onDeleteConflict.rawValue),
                            Self.encodeDefaults(policy.syncDefaults), .text(table)])
            if db.changes == 0 { throw SyncEngineError.noSuchTable(table: table) }
            try Self.storeOptions(db, table: table, policy)
        }
    }

    /// Applies every entry of a policy config file.
    public func applyPolicies(_ policies: [String: TablePolicy]) throws {
        for (table, p) in policies.sorted(by: { $0.key < $1.key }) { try setPolicy(p, for: table) }
    }

    // MARK: - Internals

    func userTableNames() throws -> [String] { try Self.userTableNames(db) }

    static func userTableNames(_ db: Connection) throws -> [String] {
        try db.rows("""
            SELECT name FROM sqlite_schema WHERE type = 'table'
              AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'rtsync\\_%' ESCAPE '\\'
              AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name
            """).compactMap { $0[0].string }
    }

    /// Tracks one table inside the caller's transaction.
    func trackTable(_ name: String, policy: TablePolicy?) throws -> TrackedTable {
        // Checked when a table starts being tracked: running track again over one tracked before stays harmless.
        if try db.scalar("SELECT 1 FROM rtsync_tracked WHERE name = ? COLLATE NOCASE", [.text(name)]) == nil {
            try Self.refuseKeyCollationMismatch(db, name)
        }
        return try Self.trackTable(db, name, policy: policy)
    }

    /// Refuses a table whose key column compares under a collation (NOCASE, RTRIM) other than the one its PRIMARY KEY
    /// declares (`k TEXT COLLATE NOCASE, …, PRIMARY KEY (k COLLATE BINARY)`): rtsync finds a row with `k = ?`, under
    /// the column's collation, so two keys of the table (`'abc'`, `'ABC'`) would be taken for one (`collation(of:in:_:)`;
    /// a collation this connection does not know is not judged). Only when the app asks to track a table not tracked yet (a table
    /// `--all` tracks later is not refused in the middle of an export; such a table tracked before stays tracked).
    static func refuseKeyCollationMismatch(_ db: Connection, _ table: String) throws {
        let declared = try db.rows("""
            SELECT x.name, x.coll FROM pragma_index_list(?1, 'main') AS il, pragma_index_xinfo(il.name, 'main') AS x
            WHERE il.origin = 'pk' AND x.key = 1 AND x.cid >= 0
            """, [.text(table)])
        for row in declared {
            guard let column = row[0].string, let keyCollation = row[1].string?.uppercased(),
                  let own = collation(of: column, in: table, db) else { continue }
            // A column comparing by bytes under a looser key (BINARY under NOCASE) takes no two keys for one.
            guard ["BINARY", "NOCASE", "RTRIM"].contains(keyCollation), own != keyCollation, own != "BINARY" else { continue }
            throw SyncEngineError.untrackableTable(
                table: table, reason: "key column '\(column)' compares with COLLATE \(own) but its PRIMARY KEY declares COLLATE \(keyCollation), so rows whose keys differ only under \(own) would be taken for one",
                hint: "declare the collation on the column itself (\(column) … COLLATE \(keyCollation)) and not in PRIMARY KEY (…), then run track again")
        }
    }

    /// The collation `column` of `table` compares under, as `column = ?` does: BINARY, NOCASE or RTRIM, told by how it
    /// compares `'a'` with `'A'` and with `'a '` (a compound SELECT's column takes the collation of its first SELECT's);
    /// nil for another one (an app's own, which this connection may not know).
    static func collation(of column: String, in table: String, _ db: Connection) -> String? {
        let probe = "SELECT x = 'A', x = 'a ' FROM (SELECT \(quoteIdentifier(column)) AS x FROM main.\(quoteIdentifier(table)) WHERE 0 UNION ALL SELECT 'a')"
        guard let r = try? db.rows(probe).first else { return nil }
        switch (r[0].int64, r[1].int64) {
        case (0, 0): return "BINARY"
        case (1, 0): return "NOCASE"
        case (0, 1): return "RTRIM"
        default: return nil
        }
    }

    /// SQL true for a row of `def` whose key holds a NULL (which no `key = ?` finds).
    static func keyHoldsNullSQL(_ def: TableDefinition) -> String {
        def.primaryKeyColumns.map { quoteIdentifier($0) + " IS NULL" }.joined(separator: " OR ")
    }

    static func trackTable(_ db: Connection, _ name: String, policy: TablePolicy?) throws -> TrackedTable {
        guard let sql = try db.scalar("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", [.text(name)])?.string else {
            throw SyncEngineError.noSuchTable(table: name)
        }
        if TableDefinition.isReservedName(name) {
            throw SyncEngineError.untrackableTable(table: name, reason: "names starting with sqlite_ or rtsync_ are reserved", hint: "rename the table")
        }
        if sql.uppercased().hasPrefix("CREATE VIRTUAL") {
            throw SyncEngineError.untrackableTable(table: name, reason: "virtual tables cannot carry triggers", hint: "track the table that holds the data instead")
        }
        guard let def = try TableDefinition.read(table: name, from: db) else { throw SyncEngineError.noSuchTable(table: name) }
        if let policy, policy.policy == .ownerOnly, def.columnIndex(policy.ownerColumn ?? "owner_id") == nil {
            throw SyncEngineError.untrackableTable(table: name, reason: "owner-only needs an owner column '\(policy.ownerColumn ?? "owner_id")', which the table does not have",
                                                   hint: "name an existing column (--owner-column, ownerColumn in the config file)")
        }
        if def.primaryKeyColumns.isEmpty {
            throw SyncEngineError.untrackableTable(
                table: name, reason: "it has no PRIMARY KEY, and rowids differ from device to device, so its rows cannot be matched",
                hint: "add a PRIMARY KEY (for example a TEXT column holding a KSUID) and run track again")
        }
        // SQLite folds only ASCII letters in names, diffs fold every letter: `é` and `É` are two names to SQLite, one
        // to a reader, which would reject every diff holding both.
        let lowered = def.columnNames.map { $0.lowercased() }
        if let twin = lowered.enumerated().first(where: { lowered.firstIndex(of: $0.element) != $0.offset }) {
            throw SyncEngineError.untrackableTable(table: name, reason: "column '\(def.columnNames[twin.offset])' differs from another column only in the case of non-ASCII letters, which diffs do not tell apart",
                                                   hint: "rename one of the two columns")
        }
        for r in try db.rows("SELECT name FROM rtsync_tracked") {
            guard let other = r[0].string, other != name, other.lowercased() == name.lowercased() else { continue }
            throw SyncEngineError.untrackableTable(table: name, reason: "it differs from the tracked table '\(other)' only in the case of non-ASCII letters, which diffs do not tell apart",
                                                   hint: "rename one of the two tables")
        }
        if DiffFile.rowidAlias(for: def.columnNames) == nil {
            throw SyncEngineError.untrackableTable(table: name, reason: "columns named rowid, _rowid_ and oid leave no way to address rows", hint: "rename one of those columns")
        }
        let nulls = try db.scalar("SELECT count(*) FROM " + quoteIdentifier(name) + " WHERE " + keyHoldsNullSQL(def))?.int64 ?? 0
        if nulls > 0 {
            throw SyncEngineError.untrackableTable(table: name, reason: "\(nulls) row(s) have a NULL primary key, which cannot identify a row",
                                                   hint: "give those rows a key (or delete them) and declare the key columns NOT NULL")
        }
        let columnsJSON = String(decoding: try JSONEncoder().encode(def.columnNames), as: UTF8.self)
        let tid: Int64
        if let existing = try db.scalar("SELECT tid FROM rtsync_tracked WHERE name = ?", [.text(name)])?.int64 {
            tid = existing
            try db.execute("UPDATE rtsync_tracked SET columns = ? WHERE tid = ?", [.text(columnsJSON), .integer(tid)])
        } else {
            try db.execute("INSERT INTO rtsync_tracked(name, columns) VALUES (?, ?)", [.text(name), .text(columnsJSON)])
            tid = db.lastInsertRowID
        }
        if let policy {
            try db.execute("UPDATE rtsync_tracked SET policy = ?, owner_column = ?, on_delete_conflict = ?, sync_defaults = ? WHERE tid = ?",
                           [.text(policy.policy.rawValue), policy.ownerColumn.map { .text($0) } ?? .null, .text(policy.onDeleteConflict.rawValue),
                            Self.encodeDefaults(policy.syncDefaults), .integer(tid)])
            try storeOptions(db, table: name, policy)
        }
        try installTriggers(db, tid: tid, definition: def)
        // Only this table's entry is read back: reading every tracked table here made tracking n tables O(n²).
        let r = try db.rows("SELECT policy, owner_column, on_delete_conflict, sync_defaults FROM rtsync_tracked WHERE tid = ?", [.integer(tid)])
        let row = r.first ?? []
        func text(_ i: Int) -> String? { i < row.count ? row[i].string : nil }
        let defaults = (try? JSONDecoder().decode([String: String].self, from: Data((text(3) ?? "{}").utf8))) ?? [:]
        let stored = TablePolicy(MergePolicy(rawValue: text(0) ?? "") ?? .lwwColumn, ownerColumn: text(1),
                                 onDeleteConflict: DeleteConflictPolicy(rawValue: text(2) ?? "") ?? .deleteWins, syncDefaults: defaults,
                                 addColumns: try addColumnsTables(db).contains(name.lowercased()), renamed: try loadRenames(db)[tid]?.declared ?? [:])
        return TrackedTable(id: tid, name: name, columns: def.columnNames, policy: stored)
    }

    /// Loads tracked tables with their live definitions, keyed by name.

    static func loadTracked(_ db: Connection) throws -> [String: TrackedInfo] {
        var out: [String: TrackedInfo] = [:]
        let hasDefaults = try db.memoizedBySchema("rtsync_tracked.sync_defaults") {
            try db.scalar("SELECT 1 FROM pragma_table_info('rtsync_tracked', 'main') WHERE name = 'sync_defaults'") != nil
        }
        let adding = try addColumnsTables(db)
        let renames = try loadRenames(db)
        for r in try db.rows("SELECT tid, name, columns, policy, owner_column, on_delete_conflict, \(hasDefaults ? "sync_defaults" : "NULL") FROM rtsync_tracked") {
            guard let tid = r[0].int64, let name = r[1].string else { continue }
            // Read before every export and apply: the column list is decoded once per text, and absent defaults
            // (NULL or `{}`, the usual case) skip the decoder.
            let columns = JSON.names(r[2].string ?? "[]") ?? []
            let defaultsText = r[6].string ?? "{}"
            let defaults = defaultsText == "{}" ? [:] : (try? JSONDecoder().decode([String: String].self, from: Data(defaultsText.utf8))) ?? [:]
            let policy = TablePolicy(MergePolicy(rawValue: r[3].string ?? "") ?? .lwwColumn, ownerColumn: r[4].string,
                                     onDeleteConflict: DeleteConflictPolicy(rawValue: r[5].string ?? "") ?? .deleteWins, syncDefaults: defaults,
                                     addColumns: adding.contains(name.lowercased()), renamed: renames[tid]?.declared ?? [:])
            guard let def = try TableDefinition.read(table: name, from: db) else { continue }
            out[name] = TrackedInfo(table: TrackedTable(id: tid, name: name, columns: columns, policy: policy), definition: def,
                                    renames: renames[tid]?.all ?? [])
        }
        return out
    }

    /// Tables whose policy adds columns from newer app versions (lower-cased names).
    static func addColumnsTables(_ db: Connection) throws -> Set<String> {
        guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_add_columns'") != nil else { return [] }
        return Set(try db.rows("SELECT tbl FROM rtsync_add_columns").compactMap { $0[0].string?.lowercased() })
    }

    /// Records the table options rtsync_tracked has no column for.
    static func storeOptions(_ db: Connection, table: String, _ policy: TablePolicy) throws {
        if let tid = try db.scalar("SELECT tid FROM rtsync_tracked WHERE name = ? COLLATE NOCASE", [.text(table)])?.int64 {
            try storeDeclaredRenames(db, tid: tid, policy.renamed)
        }
        if policy.addColumns {
            try db.execute("CREATE TABLE IF NOT EXISTS rtsync_add_columns(tbl TEXT PRIMARY KEY COLLATE NOCASE)")
            try db.execute("INSERT OR IGNORE INTO rtsync_add_columns(tbl) VALUES (?)", [.text(table)])
        } else if try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_add_columns'") != nil {
            try db.execute("DELETE FROM rtsync_add_columns WHERE tbl = ?", [.text(table)])
        }
    }

    static func encodeDefaults(_ defaults: [String: String]) -> SQLValue {
        guard !defaults.isEmpty, let data = try? JSONEncoder().encode(defaults) else { return .null }
        return .text(String(decoding: data, as: UTF8.self))
    }

    /// SQL text that encodes a row's key like `quote(k1) || ',' || quote(k2)`, from `NEW` or `OLD`.
    /// A rowid-alias key (`INTEGER PRIMARY KEY`) always holds an integer, whose `quote()` text is its
    /// decimal digits: there `CAST(k AS TEXT)` gives the same text without the cost of `quote()`.
    static func keyExpression(_ def: TableDefinition, row: String, rowidAlias: Bool = false, in db: Connection) throws -> String {
        let keys = def.primaryKeyColumns
        if rowidAlias, keys.count == 1 { return "CAST(\(row).\(quoteIdentifier(keys[0])) AS TEXT)" }
        let utf8 = try storesUTF8(db)
        return zip(keys, numberKeys(def)).map { keyValueText("\(row).\(quoteIdentifier($0))", utf8: utf8, numbers: $1) }.joined(separator: " || ',' || ")
    }

    /// For each primary key column of `def`, whether it may hold both an INTEGER and a REAL that SQLite takes for one
    /// key (`1` and `1.0`, `0` and `-0.0`): a column without a type or with BLOB affinity converts neither, nor does
    /// `ANY` in a STRICT table. (Other affinities store an integral REAL as an INTEGER, or every number as a REAL.)
    static func numberKeys(_ def: TableDefinition) -> [Bool] {
        def.primaryKeyColumns.map { name in keepsNumbersApart(def.columns.first { $0.name == name }?.type ?? "") }
    }

    /// Whether a column declared `type` stores an INTEGER and an equal REAL as they are (`numberKeys`).
    static func keepsNumbersApart(_ type: String) -> Bool {
        KeyAffinity(declaredType: type) == .blob || KeyAffinity.isAny(type)
    }

    /// SQL text of one key value in a key text: `quote(x)`, except for TEXT holding a NUL byte, which `quote()`
    /// ends at (`'k'` for both `k` and `k` NUL `x`: two rows, one key text): `J` and its `json_quote()` there
    /// (`J"k\u0000x"`), a form `quote()` never makes, the same in every text encoding (`KeyCodec` decodes both).
    /// In a UTF-8 database the NUL is looked for in the stored bytes (a third of the cost of searching the text;
    /// in UTF-16 every ASCII character has a zero byte).
    /// With `numbers` (a column that keeps INTEGER and REAL apart, `numberKeys`), an integral REAL has the text of
    /// the equal INTEGER, as SQLite finds one row for both (`KeyCodec.exactText` likewise).
    static func keyValueText(_ x: String, utf8: Bool, numbers: Bool = false) -> String {
        let nul = holdsNUL(x, utf8: utf8)
        let number = numbers ? "WHEN typeof(\(x)) = 'real' AND \(x) = CAST(\(x) AS INTEGER) THEN CAST(CAST(\(x) AS INTEGER) AS TEXT) " : ""
        return "CASE \(number)WHEN \(nul) THEN 'J' || json_quote(\(x)) ELSE quote(\(x)) END"
    }

    /// SQL testing whether `x` is TEXT holding a NUL byte (`keyValueText`).
    static func holdsNUL(_ x: String, utf8: Bool) -> String {
        utf8 ? "instr(CAST(\(x) AS BLOB), x'00') AND typeof(\(x)) = 'text'" : "typeof(\(x)) = 'text' AND instr(\(x), char(0))"
    }

    /// Whether the main database stores text as UTF-8 (`keyValueText`).
    static func storesUTF8(_ db: Connection) throws -> Bool {
        try db.scalar("PRAGMA main.encoding")?.string == "UTF-8"
    }

    /// Whether the single-column primary key of `def` is the table's rowid (an `INTEGER PRIMARY KEY`):
    /// every other primary key, and any key of a WITHOUT ROWID table, has an automatic index of origin 'pk'.
    static func hasRowidAliasKey(_ db: Connection, _ def: TableDefinition) throws -> Bool {
        guard def.primaryKeyColumns.count == 1, !def.withoutRowID else { return false }
        return try db.scalar("SELECT count(*) FROM pragma_index_list(?) WHERE origin = 'pk'", [.text(def.name)])?.int64 == 0
    }

    /// (Re)creates the plain-SQL capture triggers of one table. They only append to `rtsync_changes`, with the
    /// clock of when the change was made (`captureClockSQL`), need no custom function, and so capture writes
    /// from any connection, including the sqlite3 shell.
    ///
    /// Every trigger that fires is a sub-program call per row, so an UPDATE should fire as few as possible:
    /// `rtsync_key_` fires only for UPDATEs that set a key column (or the rowid); `rtsync_upd_` fires for every
    /// UPDATE that keeps the key. It names no columns, so an UPDATE of a column added after tracking is still
    /// captured (with no known column in its mask, which `refreshTracking` reads as "the added columns").
    static func installTriggers(_ db: Connection, tid: Int64, definition def: TableDefinition) throws {
        try dropTriggers(db, tid: tid)
        try db.execute(captureTriggers(db, tid: tid, definition: def).map(\.sql).joined(separator: ";\n"))
    }

    /// (Re)creates the capture triggers of every tracked table.
    static func installAllTriggers(_ db: Connection) throws {
        for info in try loadTracked(db).values { try installTriggers(db, tid: info.table.id, definition: info.definition) }
    }

    /// The capture triggers `installTriggers` creates for one table now: each one's name and its `CREATE TRIGGER`
    /// statement, written as SQLite keeps it in `sqlite_schema` (no trailing semicolon).
    static func captureTriggers(_ db: Connection, tid: Int64, definition def: TableDefinition) throws -> [(name: String, sql: String)] {
        let t = quoteIdentifier(def.name)
        let keys = def.primaryKeyColumns
        let rowidAlias = try hasRowidAliasKey(db, def)
        let newKey = try Self.keyExpression(def, row: "NEW", rowidAlias: rowidAlias, in: db)
        let oldKey = try Self.keyExpression(def, row: "OLD", rowidAlias: rowidAlias, in: db)
        let sameKey = keys.map { "OLD.\(quoteIdentifier($0)) IS NEW.\(quoteIdentifier($0))" }.joined(separator: " AND ")
        let keyNames = Set(keys.map { $0.lowercased() })
        let nonKeyColumns = def.columnNames.filter { !keyNames.contains($0.lowercased()) }
        // `UPDATE t SET rowid = ...` changes a rowid-alias key without naming it, so the key trigger also
        // lists the rowid's names (names that are no column are allowed in UPDATE OF, and never match).
        var keyOf = keys
        for name in ["rowid", "oid", "_rowid_"] where !keyOf.contains(where: { $0.lowercased() == name }) { keyOf.append(name) }
        let clock = Self.captureClockSQL
        var triggers: [(name: String, sql: String)] = [
            ("rtsync_ins_\(tid)", """
                CREATE TRIGGER rtsync_ins_\(tid) AFTER INSERT ON \(t) BEGIN
                  INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (\(tid), \(newKey), 1, NULL, \(clock)); END
                """),
            ("rtsync_key_\(tid)", """
                CREATE TRIGGER rtsync_key_\(tid) AFTER UPDATE OF \(keyOf.map(quoteIdentifier).joined(separator: ", ")) ON \(t) WHEN NOT (\(sameKey)) BEGIN
                  INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (\(tid), \(oldKey), 3, NULL, \(clock));
                  INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (\(tid), \(newKey), 1, NULL, \(clock)); END
                """),
            ("rtsync_del_\(tid)", """
                CREATE TRIGGER rtsync_del_\(tid) AFTER DELETE ON \(t) BEGIN
                  INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (\(tid), \(oldKey), 3, NULL, \(clock)); END
                """),
        ]
        // INSERT OR REPLACE (and REPLACE INTO) deletes the rows whose key or UNIQUE value the new row takes, and
        // fires no delete trigger for them on a connection without recursive_triggers (the sqlite3 shell, most
        // apps): record those deletes before the insert. When the insert then fails, ignores the row or turns into
        // an UPSERT's update, the row is still there, and export sends no delete for a row that exists.
        let indexes = try UniqueIndex.read(db, table: def.name)
        let uniques = [keys] + indexes.filter(\.isPlain).map(\.label)
        var probes = uniques.map { cols in
            "(" + cols.map { "o.\(quoteIdentifier($0)) = NEW.\(quoteIdentifier($0))" }.joined(separator: " AND ") + ")"
        }
        // The WHEN clause (one index lookup per key or unique index) keeps the common insert of a new row cheap.
        var taken = uniques.map { cols in
            "EXISTS (SELECT 1 FROM \(t) WHERE " + cols.map { "\(quoteIdentifier($0)) = NEW.\(quoteIdentifier($0))" }.joined(separator: " AND ") + ")"
        }
        // Partial, expression and collated indexes: the new row's entry is worked out from NEW's values.
        let newRow = "(SELECT " + def.columnNames.map { "NEW.\(quoteIdentifier($0)) AS \(quoteIdentifier($0))" }.joined(separator: ", ") + ")"
        for index in indexes where !index.isPlain {
            probes.append(index.sameEntry(as: newRow))
            taken.append("EXISTS (SELECT 1 FROM \(t) WHERE \(index.sameEntry(as: newRow)))")
        }
        triggers.append(("rtsync_rep_\(tid)", """
            CREATE TRIGGER rtsync_rep_\(tid) BEFORE INSERT ON \(t) WHEN \(taken.joined(separator: " OR ")) BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) SELECT \(tid), \(try Self.keyExpression(def, row: "o", rowidAlias: rowidAlias, in: db)), 3, NULL, \(clock)
                FROM \(t) AS o WHERE \(probes.joined(separator: " OR ")); END
            """))
        // A table of key columns only has nothing an update could change but its key.
        if !nonKeyColumns.isEmpty {
            triggers.append(("rtsync_upd_\(tid)", """
                CREATE TRIGGER rtsync_upd_\(tid) AFTER UPDATE ON \(t) WHEN \(sameKey) BEGIN
                  INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (\(tid), \(newKey), 2, \(Self.changeMask(def, keys: keyNames)), \(clock)); END
                """))
        }
        return triggers
    }

    /// Whether the main schema's triggers are exactly the capture triggers of `tracked` as `installTriggers` would
    /// create them now: none missing or out of date, and no other (the app's, demo protection). Then turning the
    /// triggers off on the applying connection does what dropping and re-creating them does, without changing the
    /// schema (which would make every connection of the app compile its statements again).
    static func holdsOnlyCurrentCaptureTriggers(_ db: Connection, tracked: [String: TrackedInfo]) throws -> Bool {
        var present: [String: String] = [:]
        for r in try db.rows("SELECT name, sql FROM main.sqlite_schema WHERE type = 'trigger'") {
            guard let name = r[0].string, let sql = r[1].string else { return false }
            present[name] = sql
        }
        var expected = 0
        for info in tracked.values {
            for trigger in try captureTriggers(db, tid: info.table.id, definition: info.definition) {
                guard present[trigger.name] == trigger.sql else { return false }
                expected += 1
            }
        }
        return present.count == expected
    }

    /// SQL for the mask of columns an UPDATE changed, in `columns` order: an integer bitmask (bit i for
    /// column i) for up to 62 columns, else a text of '0'/'1' characters. Decoded by `changedPositions`.
    /// Key columns are always '0' there (an update that changes the key is recorded as delete + insert),
    /// so they are not compared.
    /// A value counts as changed when its bytes change, whatever the column's collation (`'abc'` to `'ABC'` in a
    /// NOCASE column is an edit to send), and, in a column that keeps INTEGER and REAL apart, its storage class
    /// (`1` to `1.0`).
    static func changeMask(_ def: TableDefinition, keys: Set<String>) -> String {
        let columns = def.columnNames
        let apart = Set(def.columns.filter { keepsNumbersApart($0.type) }.map(\.name))
        func same(_ c: String) -> String {
            let q = quoteIdentifier(c)
            return apart.contains(c) ? "(OLD.\(q) IS NEW.\(q) COLLATE BINARY AND typeof(OLD.\(q)) = typeof(NEW.\(q)))" : "OLD.\(q) IS NEW.\(q) COLLATE BINARY"
        }
        if columns.count <= 62 {
            let bits = columns.enumerated().filter { !keys.contains($0.element.lowercased()) }
                .map { "CASE WHEN \(same($0.element)) THEN 0 ELSE \(Int64(1) << $0.offset) END" }
            return bits.isEmpty ? "0" : bits.joined(separator: " | ")
        }
        var parts: [String] = []
        var zeros = 0
        for c in columns {
            if keys.contains(c.lowercased()) { zeros += 1; continue }
            if zeros > 0 { parts.append("'" + String(repeating: "0", count: zeros) + "'"); zeros = 0 }
            parts.append("CASE WHEN \(same(c)) THEN '0' ELSE '1' END")
        }
        if zeros > 0 { parts.append("'" + String(repeating: "0", count: zeros) + "'") }
        // Joined as a balanced tree: a flat `a || b || …` nests one level per column, and SQLite refuses an
        // expression deeper than 1,000 (wide tables: exported spreadsheets, sensor logs).
        func balanced(_ p: ArraySlice<String>) -> String {
            if p.count == 1 { return p.first! }
            let mid = p.startIndex + p.count / 2
            return "(" + balanced(p[p.startIndex..<mid]) + " || " + balanced(p[mid...]) + ")"
        }
        return parts.isEmpty ? "''" : balanced(parts[...])
    }

    /// Column positions marked in a change's mask (integer bitmask or '0'/'1' text); an update that
    /// changed nothing has none, and export skips it.
    static func changedPositions(_ mask: SQLValue) -> [Int] {
        switch mask {
        case .integer(let bits): return (0..<63).filter { bits & (1 << $0) != 0 }
        case .text(let m): return m.utf8.enumerated().compactMap { $0.element == UInt8(ascii: "1") ? $0.offset : nil }
        default: return []
        }
    }

    /// Brings tracking up to date with the schema, before anything is exported or applied: a tracked table whose
    /// columns changed (added, renamed or dropped since `track`) gets triggers for its columns now, and its
    /// captured changes are re-keyed to the new column list, so no change is dropped or sent under the wrong
    /// column; with `track --all`, tables created since are tracked, and the rows they already hold are captured.
    ///
    /// `tracked`: the tracked tables as `loadTracked` reads them now, when the caller has them (a group of diffs
    /// applied in one transaction reads them once). Returns whether anything was (re)tracked or adopted.
    @discardableResult
    static func refreshTracking(_ db: Connection, tracked: [String: TrackedInfo]? = nil) throws -> Bool {
        let retracked = try refreshTrackedTables(db, tracked: tracked)
        let adopted = try adoptAsideColumns(db)
        return retracked || adopted
    }

    /// `refreshTracking`, then the tracked tables as they are after it: read once, and again only when the refresh
    /// changed them (what an export starts from).
    static func refreshedTracked(_ db: Connection) throws -> [String: TrackedInfo] {
        let tracked = try loadTracked(db)
        return try refreshTracking(db, tracked: tracked) ? loadTracked(db) : tracked
    }

    @discardableResult
    static func refreshTrackedTables(_ db: Connection, tracked: [String: TrackedInfo]? = nil) throws -> Bool {
        var changed = false
        for info in try (tracked ?? loadTracked(db)).values where info.table.columns != info.definition.columnNames {
            changed = true
            let old = info.table.columns, new = info.definition.columnNames
            let newIndex = Dictionary(new.enumerated().map { ($0.element.lowercased(), $0.offset) }, uniquingKeysWith: { a, _ in a })
            let oldNames = Set(old.map { $0.lowercased() }), newNames = Set(new.map { $0.lowercased() })
            // Where a name changed in place and neither name is found elsewhere: RENAME COLUMN, which keeps positions.
            let renamed = old.count == new.count && zip(old, new).allSatisfy { o, n in
                o.lowercased() == n.lowercased() || (!newNames.contains(o.lowercased()) && !oldNames.contains(n.lowercased()))
            }
            let added = new.indices.filter { !oldNames.contains(new[$0].lowercased()) }
            try learnRenames(db, tid: info.table.id, table: info.table.name, old: old, new: new)
            func remap(_ positions: [Int]) -> [Int] {
                if positions.isEmpty { return added }
                if renamed { return positions }
                return positions.compactMap { $0 < old.count ? newIndex[old[$0].lowercased()] : nil }
            }
            let keys = Set(info.definition.primaryKeyColumns.map { $0.lowercased() })
            let rows = try db.rows("SELECT seq, cols FROM rtsync_changes WHERE tid = ? AND op = 2", [.integer(info.table.id)])
            let update = try db.prepare("UPDATE rtsync_changes SET cols = ? WHERE seq = ?")
            for r in rows {
                let positions = remap(changedPositions(r[1])).filter { !keys.contains(new[$0].lowercased()) }
                let mask: SQLValue = new.count <= 62 ? .integer(positions.reduce(Int64(0)) { $0 | (Int64(1) << $1) })
                    : .text(String(new.indices.map { positions.contains($0) ? "1" : "0" }))
                try update.run([mask, r[0]])
            }
            _ = try trackTable(db, info.table.name, policy: nil)
            // A row made here from a change other than its creator's insert holds the default of a column added now,
            // not the value it was born with: a zero clock, so that value wins when it arrives (as a column the
            // change did not carry has, `Merger.markUncarriedColumns`). Values kept aside for it move in after this.
            let setZero = try db.prepare("""
                INSERT OR IGNORE INTO rtsync_clocks(tid, pk, col, hlc, site)
                SELECT p.tid, p.pk, ?, 0, '' FROM rtsync_partial p JOIN rtsync_rows m ON m.tid = p.tid AND m.pk = p.pk
                WHERE p.tid = ? AND m.born_hlc = p.born_hlc AND m.born_site = p.born_site AND m.del_hlc IS NULL
                """)
            // Not a column renamed to (its values and clocks are the old column's).
            let renameTargets = Set((try loadRenames(db)[info.table.id]?.all ?? []).map { $0.new.lowercased() })
            for position in added where !renamed && !keys.contains(new[position].lowercased()) && !renameTargets.contains(new[position].lowercased()) {
                try setZero.run([.text(new[position]), .integer(info.table.id)])
            }
        }
        if try db.scalar("SELECT track_all FROM rtsync_site")?.int64 == 1 {
            let tracked = Set(try db.rows("SELECT name FROM rtsync_tracked").compactMap { $0[0].string?.lowercased() })
            for name in try userTableNames(db) where !tracked.contains(name.lowercased()) {
                // A table that cannot be tracked (no primary key) stays local until it can; `track` says why.
                guard let table = try? trackTable(db, name, policy: nil), let def = try TableDefinition.read(table: name, from: db) else { continue }
                changed = true
                let rowidAlias = try hasRowidAliasKey(db, def)
                try db.execute("INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) SELECT \(table.id), \(try keyExpression(def, row: "o", rowidAlias: rowidAlias, in: db)), 1, NULL, \(captureClockSQL) FROM \(quoteIdentifier(name)) AS o")
            }
        }
        return changed
    }

    static func dropTriggers(_ db: Connection, tid: Int64) throws {
        for kind in ["ins", "upd", "key", "del", "rep", "cols"] { try db.execute("DROP TRIGGER IF EXISTS rtsync_\(kind)_\(tid)") }
    }
}
