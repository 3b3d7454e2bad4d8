import DiffFormat
import Foundation
import RTSQLite

// MARK: - Rows new to this device, written table by table

extension Merger {
    /// The schema name a diff is attached under while its new rows are copied (detached after the transaction).
    static let attachedDiff = "rtsync_diff"

    /// Which upserts `insertNewRowsInBulk` wrote. For each diff table id it handled: the carried rowids it left
    /// to the per-row merge. Deletes, and every row of a table it did not handle, are left to the merge.
    struct BulkResult {
        var leftToMerge: [Int64: Set<Int64>] = [:]

        /// Whether `row` was written in bulk.
        func wrote(_ row: DiffRow) -> Bool {
            guard row.operation == .upsert, let left = leftToMerge[row.tableID] else { return false }
            return !left.contains(row.rid)
        }

        /// Whether every row of the diff was written in bulk (no delete, no upsert left to the merge).
        func wroteEverything(of reader: DiffReader) -> Bool {
            reader.tableIDs.allSatisfy { did, def in
                let counts = reader.counts[def.name] ?? OperationCounts()
                return counts.deletes == 0 && (counts.upserts == 0 || leftToMerge[did]?.isEmpty == true)
            }
        }
    }

    /// Writes the upserts of rows new to this device with two `INSERT … SELECT` per table from the attached
    /// diff: the claim in `rtsync_rows` and the row, the same writes `insertNew` makes one row at a time.
    /// A row is new when its key has no bookkeeping and no row here, no unexported local change, is not
    /// shared read-only with the author, carries one clock for all its columns, and (owner-only tables) is
    /// owned by the author. A table whose new rows cannot all be written so (a UNIQUE value held by another
    /// key, a constraint, an app trigger that skips rows) is rolled back to its savepoint and left whole to
    /// the per-row merge; so is a table with ON DELETE actions.
    /// Meanwhile another thread checks every row, the digest and the clocks through the reader's connection;
    /// its failure is thrown here, and the caller's transaction rolls these writes back.
    /// - Returns: nil, having done nothing, when no table can be written so (the caller then merges and
    ///   checks every row itself).
    mutating func insertNewRowsInBulk() throws -> BulkResult? {
        var candidates: [(did: Int64, plan: TablePlan, upserts: Int)] = []
        for (did, remoteDef) in reader.tableIDs.sorted(by: { $0.key < $1.key }) {
            guard let counts = reader.counts[remoteDef.name], counts.upserts > 0 else { continue }
            let plan = try plan(for: remoteDef.name)
            guard plan.fastInsert, plan.fastKeyPositions != nil, !plan.hasDeleteActions else { continue }
            candidates.append((did, plan, counts.upserts))
        }
        guard bulkAllowed, !candidates.isEmpty, try attachDiff() else { return nil }
        let check = BackgroundRowCheck(reader: reader, clockLimit: clockLimit)
        defer { check.finish() }
        var result = BulkResult()
        for c in candidates {
            if let left = try bulkInsert(c.plan, diffTable: c.did, upserts: c.upserts) { result.leftToMerge[c.did] = left }
        }
        try check.wait()
        maxRemoteHLC = max(maxRemoteHLC, check.maxAuthorHLC)
        return result
    }

    /// Attaches the diff read-only and immutable (as the reader opened it) and checks what this connection
    /// sees there: ordinary tables with no hidden or generated columns, no other objects. False, with
    /// nothing attached, when that cannot be done or shown; the per-row merge then does all the work.
    mutating func attachDiff() throws -> Bool {
        guard db.interpretsURIs else { return false }
        let d = Merger.attachedDiff
        do {
            try db.execute("ATTACH DATABASE ? AS " + d, [.text(DiffReader.immutableURI(for: reader.url.path))])
        } catch { return false }
        do {
            let odd = try db.scalar("""
                SELECT count(*) FROM \(d).sqlite_schema WHERE NOT (
                  (type = 'table' AND sql LIKE 'CREATE TABLE %') OR (type = 'index' AND name LIKE 'sqlite\\_autoindex\\_%' ESCAPE '\\'))
                """)?.int64
            var plain = odd == 0
            for table in reader.tables.map(\.name) + ["rtsync_rows", "rtsync_cells"] where plain {
                plain = try db.scalar("SELECT count(*) FROM pragma_table_xinfo(?, '\(d)') WHERE hidden != 0", [.text(table)])?.int64 == 0
            }
            if plain { return true }
        } catch {}
        // Detaching inside the transaction fails once the file was read; the caller detaches after it ends.
        try? db.execute("DETACH DATABASE " + d)
        return false
    }

    /// Writes the new rows of one carried table; returns the upserts left to the per-row merge, or nil when
    /// the table is left whole to it (nothing written).
    mutating func bulkInsert(_ plan: TablePlan, diffTable did: Int64, upserts: Int) throws -> Set<Int64>? {
        guard let keyPositions = plan.fastKeyPositions, let alias = DiffFile.rowidAlias(for: plan.remoteDef.columnNames) else { return nil }
        let d = Merger.attachedDiff
        let tid = plan.info.table.id
        let def = plan.info.definition
        let table = "main." + quoteIdentifier(def.name)
        let remoteNames = plan.remoteDef.columnNames
        func carried(_ position: Int) -> String { "c." + quoteIdentifier(remoteNames[position]) }
        // The key text the capture triggers make: quote() of each key column, joined by commas.
        let keyText = keyPositions.map { "quote(\(carried($0)))" }.joined(separator: " || ',' || ")
        let from = "FROM \(d).rtsync_rows r JOIN \(d).\(quoteIdentifier(plan.remoteDef.name)) c ON c.\(alias) = r.rid "
            + "WHERE r.tid = \(did) AND r.op = 'upsert' COLLATE BINARY"
        // ?1 is the author's site, ?2 the author's user.
        var arguments: [SQLValue] = [.text(meta.authorSite)]
        // One clock for the whole row: no column clocks to keep (born == clock, no cell clocks).
        var isNew = "r.hlc = r.born AND coalesce(r.site, ?1) = coalesce(r.born_site, ?1) COLLATE BINARY"
        if reader.hasCellClocks { isNew += " AND NOT EXISTS (SELECT 1 FROM \(d).rtsync_cells x WHERE x.tid = r.tid AND x.rid = r.rid)" }
        if let owner = plan.ownerPosition {
            isNew += " AND typeof(\(carried(owner))) = 'text' AND \(carried(owner)) = ?2 COLLATE BINARY"
            arguments.append(.text(meta.authorUser))
        }
        let hasPending = pending.keys.contains { $0.hasPrefix("\(tid)|") }
        let hasShares = readOnlyShares.contains { $0.hasPrefix("\(tid)|") }
        if hasShares && arguments.count == 1 { arguments.append(.text(meta.authorUser)) }

        let claimSQL = "INSERT INTO main.rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) SELECT \(tid), \(keyText), r.born, coalesce(r.born_site, ?1), NULL, NULL "
        let insertSQL = "INSERT INTO \(table) (" + plan.allColumns.map(quoteIdentifier).joined(separator: ", ") + ") SELECT "
            + plan.allPositions.map(carried).joined(separator: ", ") + " "
        let claimConflict = " ORDER BY r.rowid ON CONFLICT(tid, pk) DO NOTHING"
        let insertConflict = " ORDER BY r.rowid ON CONFLICT(" + def.primaryKeyColumns.map(quoteIdentifier).joined(separator: ", ") + ") DO NOTHING"

        /// Runs one statement with the arguments it uses (?1 and ?2 are numbered, so those are the first ones).
        func run(_ sql: String) throws -> Int {
            let statement = try db.prepare(sql)
            try statement.bind(Array(arguments.prefix(statement.parameterCount)))
            try statement.runBound()
            return db.changes
        }
        /// Keys the last claim took.
        var claimed = 0
        /// Runs the claim and the insert for the rows `filter` selects; true when both wrote `expected` rows.
        func write(_ filter: String, expected: Int) throws -> Bool {
            claimed = try run(claimSQL + from + " AND " + filter + claimConflict)
            guard claimed == expected, try run(insertSQL + from + " AND " + filter + insertConflict) == expected else { return false }
            report.inserted += expected
            bulkRows += expected
            return true
        }
        func rids(_ sql: String) throws -> Set<Int64> {
            let statement = try db.prepare(sql)
            try statement.bind(Array(arguments.prefix(statement.parameterCount)))
            var out = Set<Int64>()
            while try statement.step() { out.insert(statement.int64(0)) }
            return out
        }

        try db.execute("SAVEPOINT rtsync_bulk")
        do {
            // First try: every row that is new by its own content; nothing here has the key (checked by the
            // counts: a key with bookkeeping is not claimed, a key with a row is not inserted).
            if !hasPending && !hasShares {
                let left = try rids("SELECT r.rid " + from + " AND NOT coalesce((\(isNew)), 0)")
                if left.count == upserts { try db.execute("RELEASE rtsync_bulk"); return nil }
                if try write("(\(isNew))", expected: upserts - left.count) {
                    try db.execute("RELEASE rtsync_bulk")
                    return left
                }
                // Every key already has bookkeeping here (a diff of updates): no row is new.
                if claimed == 0 { try db.execute("ROLLBACK TO rtsync_bulk; RELEASE rtsync_bulk"); return nil }
                try db.execute("ROLLBACK TO rtsync_bulk")
            }
            // Second try: also leave out keys that have bookkeeping or a row here, unexported local changes,
            // or a read-only share. The claim changes what "has bookkeeping" means, so the rows left out are
            // listed first, in a temporary table both writes consult.
            var known = "NOT EXISTS (SELECT 1 FROM main.rtsync_rows m WHERE m.tid = \(tid) AND m.pk = \(keyText))"
                + " AND NOT EXISTS (SELECT 1 FROM \(table) l WHERE "
                + zip(def.primaryKeyColumns, keyPositions).map { "l.\(quoteIdentifier($0.0)) = \(carried($0.1))" }.joined(separator: " AND ") + ")"
            if hasPending { known += " AND \(keyText) NOT IN (SELECT pk FROM main.rtsync_changes WHERE tid = \(tid))" }
            if hasShares {
                known += " AND \(keyText) NOT IN (SELECT pk FROM main.rtsync_shares WHERE tid = \(tid) AND to_user = ?2 AND permission = 'read-only')"
            }
            try db.execute("CREATE TEMP TABLE IF NOT EXISTS rtsync_bulk_left(rid INTEGER PRIMARY KEY); DELETE FROM temp.rtsync_bulk_left")
            _ = try run("INSERT OR IGNORE INTO temp.rtsync_bulk_left(rid) SELECT r.rid " + from + " AND NOT coalesce((\(isNew) AND \(known)), 0)")
            let left = try rids("SELECT rid FROM temp.rtsync_bulk_left")
            if left.count < upserts, try write("r.rid NOT IN (SELECT rid FROM temp.rtsync_bulk_left)", expected: upserts - left.count) {
                try db.execute("DROP TABLE temp.rtsync_bulk_left; RELEASE rtsync_bulk")
                return left
            }
        } catch is SQLiteError {
            // A UNIQUE value held by another key, a NOT NULL or CHECK constraint, a value of the wrong type:
            // the per-row merge meets the same row and decides (resolve the collision, or reject the diff).
        }
        try db.execute("ROLLBACK TO rtsync_bulk; RELEASE rtsync_bulk")
        try? db.execute("DROP TABLE IF EXISTS temp.rtsync_bulk_left")
        return nil
    }
}

/// Checks every row of a diff (structure, references, UTF-8, the digest, no clock more than a day ahead) on
/// another thread through the reader's own connection, while the merger writes through the primary's.
/// `@unchecked Sendable`: the worker uses the reader until it signals; the caller uses it only after `wait()`
/// or `finish()`, which wait for that signal.
final class BackgroundRowCheck: @unchecked Sendable {
    private let reader: DiffReader
    private let done = DispatchSemaphore(value: 0)
    private var finished = false
    private var error: Error?
    /// The latest clock of the diff's author in any row (valid after `wait()`).
    private(set) var maxAuthorHLC: Int64 = 0

    /// Starts the check.
    init(reader: DiffReader, clockLimit: Int64) {
        self.reader = reader
        DispatchQueue.global(qos: .userInitiated).async { self.run(clockLimit: clockLimit) }
    }

    private func run(clockLimit: Int64) {
        let author = reader.metadata.authorSite, file = reader.url.path
        var latest: Int64 = 0
        do {
            try reader.forEachRow { row in
                // The clocks the per-row merge checks, in its order.
                func note(_ clock: Clock) throws {
                    if let e = Merger.clockError(clock, table: row.table.name, limit: clockLimit, file: file) { throw e }
                    if clock.site == author { latest = max(latest, clock.hlc.rawValue) }
                }
                try note(row.clock)
                try note(row.born)
                for clock in row.columnClocks.values { try note(clock) }
            }
        } catch { self.error = error }
        maxAuthorHLC = latest
        done.signal()
    }

    /// Waits for the check; throws what it found.
    func wait() throws {
        finish()
        if let error { throw error }
    }

    /// Waits for the check, ignoring its outcome.
    func finish() {
        if !finished { done.wait(); finished = true }
    }
}
