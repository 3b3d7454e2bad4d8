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
}

extension SyncDatabase {
    /// Starts tracking `tables` (nil: every user table). Re-running is harmless: triggers are
    /// re-created for the current columns. Returns the tracked tables.
    /// - Throws: `SyncEngineError.untrackableTable` saying why a table cannot be tracked and what to change.
    @discardableResult
    public func track(tables: [String]? = nil, policy: TablePolicy? = nil) throws -> [TrackedTable] {
        try locked {
            try db.transaction {
                try installBookkeeping()
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
            try db.execute("UPDATE rtsync_tracked SET policy = ?, owner_column = ?, on_delete_conflict = ? WHERE name = ?",
                           [.text(policy.policy.rawValue), policy.ownerColumn.map { .text($0) } ?? .null, .text(policy.onDeleteConflict.rawValue), .text(table)])
            if db.changes == 0 { throw SyncEngineError.noSuchTable(table: table) }
        }
    }

    /// Applies every entry of a policy config file.
    public func applyPolicies(_ policies: [String: TablePolicy]) throws {
        for (table, p) in policies.sorted(by: { $0.key < $1.key }) { try setPolicy(p, for: table) }
    }

    // MARK: - Internals

    func userTableNames() throws -> [String] {
        try db.rows("""
            SELECT name FROM sqlite_schema WHERE type = 'table'
              AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'rtsync\\_%' ESCAPE '\\'
              AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name
            """).compactMap { $0[0].string }
    }

    /// Tracks one table inside the caller's transaction.
    func trackTable(_ name: String, policy: TablePolicy?) throws -> TrackedTable { try Self.trackTable(db, name, policy: policy) }

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
        if def.primaryKeyColumns.isEmpty {
            throw SyncEngineError.untrackableTable(
                table: name, reason: "it has no PRIMARY KEY, and rowids differ from device to device, so its rows cannot be matched",
                hint: "add a PRIMARY KEY (for example a TEXT column holding a KSUID) and run track again")
        }
        if DiffFile.rowidAlias(for: def.columnNames) == nil {
            throw SyncEngineError.untrackableTable(table: name, reason: "columns named rowid, _rowid_ and oid leave no way to address rows", hint: "rename one of those columns")
        }
        let keyNull = def.primaryKeyColumns.map { quoteIdentifier($0) + " IS NULL" }.joined(separator: " OR ")
        let nulls = try db.scalar("SELECT count(*) FROM " + quoteIdentifier(name) + " WHERE " + keyNull)?.int64 ?? 0
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
            try db.execute("UPDATE rtsync_tracked SET policy = ?, owner_column = ?, on_delete_conflict = ? WHERE tid = ?",
                           [.text(policy.policy.rawValue), policy.ownerColumn.map { .text($0) } ?? .null, .text(policy.onDeleteConflict.rawValue), .integer(tid)])
        }
        try installTriggers(db, tid: tid, definition: def)
        let stored = try loadTracked(db)[name]!
        return stored.table
    }

    /// Loads tracked tables with their live definitions, keyed by name.

    static func loadTracked(_ db: Connection) throws -> [String: TrackedInfo] {
        var out: [String: TrackedInfo] = [:]
        for r in try db.rows("SELECT tid, name, columns, policy, owner_column, on_delete_conflict FROM rtsync_tracked") {
            guard let tid = r[0].int64, let name = r[1].string else { continue }
            let columns = (try? JSONDecoder().decode([String].self, from: Data((r[2].string ?? "[]").utf8))) ?? []
            let policy = TablePolicy(MergePolicy(rawValue: r[3].string ?? "") ?? .lwwColumn, ownerColumn: r[4].string,
                                     onDeleteConflict: DeleteConflictPolicy(rawValue: r[5].string ?? "") ?? .deleteWins)
            guard let def = try TableDefinition.read(table: name, from: db) else { continue }
            out[name] = TrackedInfo(table: TrackedTable(id: tid, name: name, columns: columns, policy: policy), definition: def)
        }
        return out
    }

    /// SQL text that encodes a row's key like `quote(k1) || ',' || quote(k2)`, from `NEW` or `OLD`.
    static func keyExpression(_ keys: [String], row: String) -> String {
        keys.map { "quote(\(row).\(quoteIdentifier($0)))" }.joined(separator: " || ',' || ")
    }

    /// (Re)creates the plain-SQL capture triggers of one table. They only append to `rtsync_changes`,
    /// need no custom function, and so capture writes from any connection, including the sqlite3 shell.
    static func installTriggers(_ db: Connection, tid: Int64, definition def: TableDefinition) throws {
        try dropTriggers(db, tid: tid)
        let t = quoteIdentifier(def.name)
        let keys = def.primaryKeyColumns
        let newKey = Self.keyExpression(keys, row: "NEW"), oldKey = Self.keyExpression(keys, row: "OLD")
        let sameKey = keys.map { "OLD.\(quoteIdentifier($0)) IS NEW.\(quoteIdentifier($0))" }.joined(separator: " AND ")
        // Which columns changed: an integer bitmask (cheap arithmetic on 0/1 comparisons) for up to 62
        // columns, else a text of '0'/'1' characters. Decoded by `changedPositions`.
        let comparisons = def.columnNames.map { "(OLD.\(quoteIdentifier($0)) IS NOT NEW.\(quoteIdentifier($0)))" }
        let mask = comparisons.count <= 62
            ? comparisons.enumerated().map { $0.offset == 0 ? $0.element : "(\($0.element) << \($0.offset))" }.joined(separator: " | ")
            : comparisons.map { "(CASE WHEN \($0) THEN '1' ELSE '0' END)" }.joined(separator: " || ")
        try db.execute("""
            CREATE TRIGGER rtsync_ins_\(tid) AFTER INSERT ON \(t) BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), \(newKey), 1, NULL); END;
            CREATE TRIGGER rtsync_upd_\(tid) AFTER UPDATE ON \(t) WHEN \(sameKey) BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), \(newKey), 2, \(mask)); END;
            CREATE TRIGGER rtsync_key_\(tid) AFTER UPDATE ON \(t) WHEN NOT (\(sameKey)) BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), \(oldKey), 3, NULL);
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), \(newKey), 1, NULL); END;
            CREATE TRIGGER rtsync_del_\(tid) AFTER DELETE ON \(t) BEGIN
              INSERT INTO rtsync_changes(tid, pk, op, cols) VALUES (\(tid), \(oldKey), 3, NULL); END;
            """)
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

    static func dropTriggers(_ db: Connection, tid: Int64) throws {
        for kind in ["ins", "upd", "key", "del"] { try db.execute("DROP TRIGGER IF EXISTS rtsync_\(kind)_\(tid)") }
    }
}
