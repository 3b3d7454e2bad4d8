import DiffFormat
import Foundation
import RTSQLite

/// One entry of the conflict log: a value overwritten by merge or a change refused by policy.
public struct ConflictRecord: Sendable, Codable, Equatable {
    /// Log id.
    public var id: Int64
    /// When it was logged (UTC, ISO-8601).
    public var at: String
    /// The diff being applied.
    public var diffID: String?
    /// Table name.
    public var table: String
    /// Row key as SQL literals.
    public var key: String
    /// Column ("" for a refused delete).
    public var column: String
    /// The local value at merge time.
    public var localValue: SQLValue
    /// The incoming value.
    public var remoteValue: SQLValue
    /// Local clock (nil for a change not yet exported).
    public var localClock: Clock?
    /// Remote clock.
    public var remoteClock: Clock?
    /// "local" or "remote".
    public var winner: String
    /// Why.
    public var reason: String
    /// Whether the losing value was restored.
    public var restored: Bool

    /// The value that lost.
    public var losingValue: SQLValue { winner == "remote" ? localValue : remoteValue }
    /// The row key's values, in primary-key column order (nil when `key` is not a list of SQL literals).
    public var keyValues: [SQLValue]? { KeyCodec.decode(key) }
}

extension SyncDatabase {
    static let conflictColumns = "id, at, diff_id, tbl, pk, col, local_value, remote_value, local_hlc, local_site, remote_hlc, remote_site, winner, reason, restored"

    static func conflict(from r: [SQLValue]) -> ConflictRecord {
        ConflictRecord(id: r[0].int64 ?? 0, at: r[1].string ?? "", diffID: r[2].string, table: r[3].string ?? "", key: r[4].string ?? "",
                       column: r[5].string ?? "", localValue: r[6], remoteValue: r[7],
                       localClock: r[8].int64.map { Clock(hlc: HLC(rawValue: $0), site: r[9].string ?? "") },
                       remoteClock: r[10].int64.map { Clock(hlc: HLC(rawValue: $0), site: r[11].string ?? "") },
                       winner: r[12].string ?? "", reason: r[13].string ?? "", restored: r[14].int64 == 1)
    }

    /// Entries of the conflict log, oldest first.
    public func conflicts(includeRestored: Bool = true, table: String? = nil) throws -> [ConflictRecord] {
        try locked {
            try requireTracked()
            var sql = "SELECT \(Self.conflictColumns) FROM rtsync_conflicts WHERE 1"
            var args: [SQLValue] = []
            if !includeRestored { sql += " AND restored = 0" }
            if let table { sql += " AND tbl = ?"; args.append(.text(table)) }
            return try db.rows(sql + " ORDER BY id", args).map(Self.conflict(from:))
        }
    }

    /// One conflict log entry.
    /// - Throws: `SyncEngineError.conflictNotFound`.
    public func conflict(id: Int64) throws -> ConflictRecord {
        try locked {
            try requireTracked()
            guard let r = try db.rows("SELECT \(Self.conflictColumns) FROM rtsync_conflicts WHERE id = ?", [.integer(id)]).first else {
                throw SyncEngineError.conflictNotFound(id: id)
            }
            return Self.conflict(from: r)
        }
    }

    /// Re-applies the losing value of a conflict as a new local change (captured and exported like any edit,
    /// so it wins everywhere after the next sync). A refused delete is restored by deleting the row.
    ///
    /// The value is written as with `UPDATE OR ABORT`, whatever conflict clause the table declares: when another row
    /// now holds the value in a UNIQUE constraint (or the value breaks another constraint), the restore fails and
    /// changes nothing, rather than `ON CONFLICT REPLACE` deleting that other row or `IGNORE` dropping the write.
    /// Which row should give way is the user's call: the error names the row holding the value; change that row,
    /// then restore again.
    /// - Throws: `SyncEngineError.cannotRestore` when the row no longer exists or the value breaks a constraint.
    public func restoreConflict(id: Int64) throws {
        let record = try conflict(id: id)
        try locked {
            guard let def = try TableDefinition.read(table: record.table, from: db) else {
                throw SyncEngineError.cannotRestore(id: id, reason: "table '\(record.table)' no longer exists")
            }
            guard let keys = KeyCodec.decode(record.key), keys.count == def.primaryKeyColumns.count else {
                throw SyncEngineError.cannotRestore(id: id, reason: "malformed row key \(record.key)")
            }
            let whereKey = def.primaryKeyColumns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND ")
            try db.transaction {
                if record.column.isEmpty {
                    try db.execute("DELETE FROM " + quoteIdentifier(def.name) + " WHERE " + whereKey, keys)
                } else {
                    guard def.columnIndex(record.column) != nil else {
                        throw SyncEngineError.cannotRestore(id: id, reason: "column '\(record.column)' no longer exists")
                    }
                    // OR ABORT only where the table declares a clause of its own, as the merge does: the statement's OR
                    // clause also governs the app's triggers it fires (an audit trigger's `INSERT OR REPLACE` must keep
                    // working); without a clause SQLite's default is ABORT already.
                    let orAbort = try UniqueIndex.hasUniqueConflictClause(table: def.name, in: db) ? " OR ABORT" : ""
                    do {
                        try db.execute("UPDATE" + orAbort + " " + quoteIdentifier(def.name) + " SET " + quoteIdentifier(record.column) + " = ? WHERE " + whereKey,
                                       [record.losingValue] + keys)
                    } catch let e as SQLiteError where e.isConstraintViolation {
                        throw SyncEngineError.cannotRestore(id: id, reason: restoreRefusal(e, def: def, record: record, keys: keys, whereKey: whereKey))
                    }
                    if db.changes == 0 {
                        throw SyncEngineError.cannotRestore(id: id, reason: "row \(record.key) of '\(def.name)' no longer exists")
                    }
                }
                try db.execute("UPDATE rtsync_conflicts SET restored = 1 WHERE id = ?", [.integer(id)])
            }
        }
    }

    /// Why writing `record`'s losing value into its row (`keys`, matched by `whereKey`) failed with `error`, naming the
    /// row that holds the value when a unique index is the reason. Runs in the restore's transaction, after the
    /// aborted statement; a lookup that fails leaves the holder unnamed.
    func restoreRefusal(_ error: SQLiteError, def: TableDefinition, record: ConflictRecord, keys: [SQLValue], whereKey: String) -> String {
        var literal = record.losingValue.sqlLiteral
        if literal.count > 80 { literal = String(literal.prefix(77)) + "..." }
        let what = "writing \(literal) into column '\(record.column)' of '\(def.name)' row \(record.key) fails (\(error.message)); nothing was changed"
        guard error.isUniqueViolation else { return what + ": change the row so that the value fits, then restore again" }
        if let i = def.columnIndex(record.column),
           var row = try? db.rows("SELECT " + def.columnNames.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(def.name)
                                  + " WHERE " + whereKey, keys).first {
            row[i] = record.losingValue
            for index in (try? UniqueIndex.read(db, table: def.name)) ?? [] {
                let sql = index.collisionSQL(table: def.name, columns: def.columnNames, keys: def.primaryKeyColumns)
                if let holder = try? db.rows(sql, row + keys).first {
                    return what + ": row \(holder.map(\.sqlLiteral).joined(separator: ",")) holds it in UNIQUE (\(index.label.joined(separator: ", "))); "
                        + "change or delete that row's value first, then restore again"
                }
            }
        }
        return what + ": another row holds the value; change that row first, then restore again"
    }

    /// Marks open conflict entries resolved whose losing value is the row's value now: a restore made on another
    /// device (or the same value written again) reached this one, so the entry needs nothing more. Entries of row
    /// deletes are left open. Returns how many were marked.
    @discardableResult
    public func settleConflictsByCurrentValues() throws -> Int {
        guard isTracked else { return 0 }
        return try locked {
            let open = try db.rows("SELECT \(Self.conflictColumns) FROM rtsync_conflicts WHERE restored = 0 ORDER BY id").map(Self.conflict(from:))
            var settled: [Int64] = []
            var definitions: [String: TableDefinition?] = [:]
            for record in open {
                if definitions[record.table] == nil { definitions[record.table] = try TableDefinition.read(table: record.table, from: db) }
                guard let def = definitions[record.table] ?? nil, let keys = KeyCodec.decode(record.key),
                      keys.count == def.primaryKeyColumns.count, !keys.isEmpty else { continue }
                let whereKey = def.primaryKeyColumns.map { quoteIdentifier($0) + " IS ?" }.joined(separator: " AND ")
                // Row deletes are left to `restoreConflict`: whether the row's absence is the losing side depends on
                // which side deleted.
                if record.column.isEmpty { continue }
                guard def.columnIndex(record.column) != nil else { continue }
                let same = try db.scalar("SELECT count(*) FROM " + quoteIdentifier(def.name) + " WHERE " + whereKey
                                         + " AND " + quoteIdentifier(record.column) + " IS ?", keys + [record.losingValue])?.int64 ?? 0
                if same > 0 { settled.append(record.id) }
            }
            if !settled.isEmpty {
                try db.transaction {
                    for id in settled { try db.execute("UPDATE rtsync_conflicts SET restored = 1 WHERE id = ?", [.integer(id)]) }
                }
            }
            return settled.count
        }
    }
}
