import DiffFormat
import Foundation
import RTSQLite

// MARK: - Columns of a newer app version, kept aside

// A diff from a newer app version can carry columns this database's tables do not have. Adding them would change
// the table under the app (its `INSERT INTO t VALUES (…)` would then fail, and its own migration adding the same
// column later would fail as a duplicate). Unless the table's policy adds them (`TablePolicy.addColumns`), their
// values are kept aside in `rtsync_aside`, per row and column with the clock they came with (the later one wins,
// as for any column). When this app's own migration adds a column of that name (or one a rename links it to), the
// next export or apply moves the values into it with their clocks, captured as nothing new: the row then holds what
// the newer devices have.
// Values kept aside are not sent on in this device's diffs (the devices that made them have them).

extension SyncDatabase {
    static let asideTablesSQL = """
        CREATE TABLE IF NOT EXISTS rtsync_aside_cols(tid INTEGER NOT NULL, col TEXT NOT NULL COLLATE NOCASE, type TEXT NOT NULL, PRIMARY KEY (tid, col)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS rtsync_aside(tid INTEGER NOT NULL, pk TEXT NOT NULL, col TEXT NOT NULL COLLATE NOCASE, value, hlc INTEGER NOT NULL, site TEXT NOT NULL,
          born_hlc INTEGER, born_site TEXT, PRIMARY KEY (tid, pk, col)) WITHOUT ROWID;
        """

    /// The condition (on `rtsync_aside a` and `rtsync_rows m`) that a value kept aside belongs to the row's incarnation
    /// here: the one it was kept for, and no insert of this device's not exported yet (a new incarnation, no remote
    /// value is part of). A value kept before incarnations were recorded with it (`born_hlc` NULL) is taken as the row's.
    static func asideOfRowIncarnationSQL(tid: Int64) -> String {
        "(a.born_hlc IS NULL OR (a.born_hlc = coalesce(m.born_hlc, 0) AND a.born_site = coalesce(m.born_site, ''))) "
            + "AND a.pk NOT IN (SELECT pk FROM rtsync_changes WHERE tid = \(tid) AND op = 1)"
    }

    /// Moves values kept aside into columns the table has now (the app's migration added them), with their clocks,
    /// without capturing that as a local change. Inside the caller's transaction. Returns whether any was moved.
    @discardableResult
    static func adoptAsideColumns(_ db: Connection) throws -> Bool {
        guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_aside_cols'") != nil else { return false }
        let pending = try db.rows("SELECT c.tid, c.col, t.name FROM rtsync_aside_cols c JOIN rtsync_tracked t ON t.tid = c.tid")
        guard !pending.isEmpty else { return false }
        var adopted = false
        let renames = try loadRenames(db)
        for p in pending {
            // A column kept aside under a name a rename links to a column of this table (declared since) goes there.
            guard let tid = p[0].int64, let col = p[1].string, let table = p[2].string,
                  let def = try TableDefinition.read(table: table, from: db),
                  let local = def.columnNames.first(where: { $0.lowercased() == col.lowercased() })
                    ?? translatedColumns(remote: [col], local: def.columnNames, renames: renames[tid]?.all ?? [])[0] else { continue }
            let keyExpr = try keyExpression(def, row: "o", rowidAlias: try hasRowidAliasKey(db, def), in: db)
            let before = try db.scalar("SELECT max(seq) FROM rtsync_changes")?.int64 ?? 0
            // Only values of the row's incarnation here (an update of a row another device has since replaced, kept
            // aside before the replacement arrived or while it was not exported yet, is not this row's) at least as
            // late as the column's value here (or the row's birth: a key re-used since keeps its own row).
            // A UNIQUE constraint's own conflict clause (REPLACE would delete another row, its captured delete dropped
            // below) must not act here: the move fails instead, as it does on a plain UNIQUE collision.
            let orAbort = try UniqueIndex.hasUniqueConflictClause(table: def.name, in: db) ? " OR ABORT" : ""
            // A NULL kept aside (by an older version, from a delete) never breaks a NOT NULL column the app adds.
            let notNull = def.columns.first { $0.name == local }?.notNull == true ? " AND a.value IS NOT NULL" : ""
            try db.execute("""
                UPDATE\(orAbort) \(quoteIdentifier(table)) AS o SET \(quoteIdentifier(local)) = a.value
                FROM rtsync_aside a LEFT JOIN rtsync_rows m ON m.tid = a.tid AND m.pk = a.pk
                  LEFT JOIN rtsync_clocks k ON k.tid = a.tid AND k.pk = a.pk AND k.col = ? COLLATE NOCASE
                WHERE a.tid = ? AND a.col = ? AND a.pk = \(keyExpr) AND a.hlc >= coalesce(k.hlc, m.born_hlc, 0) AND \(asideOfRowIncarnationSQL(tid: tid))\(notNull)
                """, [.text(local), .integer(tid), .text(col)])
            try db.execute("""
                INSERT OR REPLACE INTO rtsync_clocks(tid, pk, col, hlc, site)
                SELECT a.tid, a.pk, ?, a.hlc, a.site FROM rtsync_aside a LEFT JOIN rtsync_rows m ON m.tid = a.tid AND m.pk = a.pk
                  LEFT JOIN rtsync_clocks k ON k.tid = a.tid AND k.pk = a.pk AND k.col = ? COLLATE NOCASE
                WHERE a.tid = ? AND a.col = ? AND a.hlc >= coalesce(k.hlc, m.born_hlc, 0) AND \(asideOfRowIncarnationSQL(tid: tid))\(notNull)
                  AND EXISTS (SELECT 1 FROM \(quoteIdentifier(table)) AS o WHERE \(keyExpr) = a.pk)
                """, [.text(local), .text(local), .integer(tid), .text(col)])
            try db.execute("INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site) SELECT DISTINCT tid, pk, 0, '' FROM rtsync_clocks WHERE tid = ? ON CONFLICT(tid, pk) DO NOTHING", [.integer(tid)])
            // What the triggers captured of this move is no edit of this device's.
            try db.execute("DELETE FROM rtsync_changes WHERE seq > ?", [.integer(before)])
            try db.execute("DELETE FROM rtsync_aside WHERE tid = ? AND col = ?", [.integer(tid), .text(col)])
            try db.execute("DELETE FROM rtsync_aside_cols WHERE tid = ? AND col = ?", [.integer(tid), .text(col)])
            adopted = true
        }
        return adopted
    }

    /// Values kept aside for a row (column name -> value), for tests and `status`.
    public func asideValues(table: String) throws -> [String: [String: SQLValue]] {
        try locked {
            guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_aside'") != nil else { return [:] }
            var out: [String: [String: SQLValue]] = [:]
            for r in try db.rows("SELECT a.pk, a.col, a.value FROM rtsync_aside a JOIN rtsync_tracked t ON t.tid = a.tid WHERE t.name = ? COLLATE NOCASE", [.text(table)]) {
                out[r[0].string ?? "", default: [:]][r[1].string ?? ""] = r[2]
            }
            return out
        }
    }
}

extension Merger {
    /// Keeps the incoming values of columns this table does not have, for a row that exists here after the merge;
    /// drops them for a row that does not. Per column, the later clock wins. A row this merge `created` (an update
    /// that arrived before its insert makes the whole row, or one of a later incarnation replaces it) keeps every such
    /// column, the unchanged ones with the row's birth clock, as its columns here have.
    mutating func keepAside(_ r: RowContext, key: String, created: Bool) throws {
        let tid = r.info.table.id
        let exists = try cached(r.plan.selectSQL)
        try exists.bind(r.keyValues)
        let present = try exists.step()
        exists.reset()
        guard present else {
            try cached("DELETE FROM rtsync_aside WHERE tid = ? AND pk = ?").run([.integer(tid), .text(key)])
            return
        }
        // A delete carries no values (NULL in every other column): a delete refused here keeps none aside.
        if r.change.operation == .delete { return }
        // Values are kept for the row's incarnation here. Those kept for one the row no longer is (it was replaced
        // since) go; under last writer wins, an older incarnation's (an update of a row replaced here or elsewhere
        // since, or an insert that lost to the row here) are not this row's and are not kept.
        let bornStmt = try cached("SELECT born_hlc, born_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
        try bornStmt.bind([.integer(tid), .text(key)])
        let born = try bornStmt.step() ? Clock(hlc: HLC(rawValue: bornStmt.column(0).int64 ?? 0), site: bornStmt.column(1).string ?? "") : Clock.zero
        bornStmt.reset()
        // Nor is anything kept for an earlier incarnation (or, by an earlier version, without one) the row's, once a
        // change made or replaced it here.
        if created && r.change.born == born {
            try cached("DELETE FROM rtsync_aside WHERE tid = ? AND pk = ?").run([.integer(tid), .text(key)])
        } else {
            try cached("DELETE FROM rtsync_aside WHERE tid = ? AND pk = ? AND born_hlc IS NOT NULL AND (born_hlc <> ? OR born_site <> ?)")
                .run([.integer(tid), .text(key), .integer(born.hlc.rawValue), .text(born.site)])
        }
        if r.change.born < born, [.lwwColumn, .lwwRow, .ownerOnly].contains(r.info.table.policy.policy) { return }
        let changed = r.change.changedColumns.map { Set($0.map { $0.lowercased() }) }
        for (position, name) in r.plan.aside where position < r.change.values.count {
            let listed = changed?.contains(name.lowercased()) ?? true
            // A state diff lists every column its row has a value of: the others hold a placeholder (`remoteValues`).
            if !listed && (!created || meta.kind.carriesState) { continue }
            let clock = listed ? r.clock(name) : r.change.born
            try cached("""
                INSERT INTO rtsync_aside(tid, pk, col, value, hlc, site, born_hlc, born_site) VALUES (?,?,?,?,?,?,?,?)
                ON CONFLICT(tid, pk, col) DO UPDATE SET value = excluded.value, hlc = excluded.hlc, site = excluded.site,
                  born_hlc = excluded.born_hlc, born_site = excluded.born_site
                WHERE excluded.hlc > rtsync_aside.hlc OR (excluded.hlc = rtsync_aside.hlc AND excluded.site > rtsync_aside.site)
                """).run([.integer(tid), .text(key), .text(name), r.change.values[position], .integer(clock.hlc.rawValue), .text(clock.site),
                          .integer(born.hlc.rawValue), .text(born.site)])
        }
    }
}
