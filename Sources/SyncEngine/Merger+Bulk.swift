import DiffFormat
import Foundation
import RTSQLite

// MARK: - Rows new to this device, written table by table

extension Merger {
    /// The schema name a diff is attached under while its new rows are copied (detached after the transaction).
    static let attachedDiff = "rtsync_diff"

    /// The attached diff's cell clocks, copied for the bulk paths while they run (see `insertNewRowsInBulk`).
    static let diffCellsTable = "temp.rtsync_diff_cells"

    /// The diff tables `insertNewRowsInBulk` wrote, and the rows of them it left to the per-row merge.
    struct BulkResult {
        /// Diff tables written in bulk: every row, or every row but `rowsLeft`.
        var tables = Set<Int64>()
        /// Of those tables, the rows (by `DiffRow.ordinal`) left to the per-row merge.
        var rowsLeft: [Int64: Set<Int64>] = [:]
        /// The newest of the author's clocks in the whole diff (the row check's), for after the per-row merge: while
        /// it runs, the rows written in bulk are noted in file order (`noteClocks`), as the per-row merge notes each
        /// row, so that a decision it captures is timed as when every row is merged one by one.
        var maxAuthorHLC: Int64 = 0
        /// The latest clock of any site among the rows (see `Merger.maxAnyHLC`).
        var maxAnyHLC: Int64 = 0

        /// Whether `row` was written in bulk.
        func wrote(_ row: DiffRow) -> Bool {
            tables.contains(row.tableID) && rowsLeft[row.tableID]?.contains(row.ordinal) != true
        }

        /// Whether every row of the diff was written in bulk.
        func wroteEverything(of reader: DiffReader) -> Bool {
            rowsLeft.isEmpty && reader.tableIDs.allSatisfy { did, def in
                let counts = reader.counts[def.name] ?? OperationCounts()
                return tables.contains(did) || counts.upserts + counts.deletes == 0
            }
        }
    }

    /// Writes carried tables whose rows are all new to this device with two `INSERT … SELECT` each from the
    /// attached diff: the claims in `rtsync_rows` and the rows, the same writes `insertNew` makes one row at
    /// a time. A table qualifies when it has no deletes in the diff and every upsert is new: one clock for the
    /// whole row (no column clocks to keep), owned by the author (owner-only tables), no unexported local
    /// change to its key, no read-only share, and, shown by the two statements' counts, no bookkeeping and no
    /// row for its key here and no key twice. Tables with ON DELETE actions, and every table when the database
    /// has triggers of its own (which could see rows in another order than the diff's), go to the per-row
    /// merge; so does a table whose writes fail (a UNIQUE value held by another key, a constraint), after its
    /// savepoint is rolled back. New rows are written whole table by whole table: the per-row merge of the other
    /// tables then cannot see their rows in another order than the file's, because nothing it merges shares a
    /// table with them. Tables of rows this device has (`mergeKnownRowsInBulk`) may leave rows of their own to the
    /// per-row merge, where keys are independent of each other and of the rows it merges in other tables.
    /// Tried only when the tables that may be written so (judged by their first 64 rows) hold at least half the
    /// diff's rows. Meanwhile another thread checks every row, the clocks and the digest through the reader's
    /// connection; rows left to the per-row merge are then read again without hashing.
    /// If that check (or anything here) fails, the bulk writes are rolled back and nil returned, so that the
    /// per-row merge reads the file from the start and rejects it for the first problem in file order.
    /// - Returns: nil, having changed nothing, when no table was written in bulk this way; the caller then
    ///   merges and checks every row itself.
    mutating func insertNewRowsInBulk() throws -> BulkResult? {
        guard bulkAllowed else { return nil }
        var candidates: [(did: Int64, plan: TablePlan, upserts: Int)] = []
        // Tables whose rows this device may already have (Merger+BulkKnown), tried when they are not all new.
        var knownCandidates: [(did: Int64, plan: TablePlan, upserts: Int, deletes: Int)] = []
        var rowsInDiff = 0
        var carriedTables = Set<String>()
        for (did, remoteDef) in reader.tableIDs.sorted(by: { $0.key < $1.key }) {
            let counts = reader.counts[remoteDef.name] ?? OperationCounts()
            rowsInDiff += counts.upserts + counts.deletes
            guard counts.upserts + counts.deletes > 0 else { continue }
            carriedTables.insert(remoteDef.name.lowercased())
            if counts.deletes == 0 {
                let plan = try plan(for: remoteDef.name)
                if plan.fastInsert, plan.fastKeyPositions != nil, !plan.hasDeleteActions {
                    candidates.append((did, plan, counts.upserts))
                    continue
                }
            }
            // A table this database lacks is the per-row merge's to reject, for the first problem in file order.
            if knownRowsAllowed, let plan = try? plan(for: remoteDef.name), try knownRowsMayBeMergedInBulk(plan, deletes: counts.deletes) {
                knownCandidates.append((did, plan, counts.upserts, counts.deletes))
            }
        }
        // A table with foreign keys is merged as a set only when the diff carries no row of a table it references,
        // directly or through their references: a parent's delete, or a collision's loser deleted, acts on its
        // rows (ON DELETE actions), and must meet them in file order.
        if knownCandidates.contains(where: { $0.plan.hasDeleteActions }) {
            knownCandidates = try knownCandidates.filter { k in
                try !k.plan.hasDeleteActions || ancestors(of: k.plan.info.definition).isDisjoint(with: carriedTables)
            }
        }
        guard !candidates.isEmpty || !knownCandidates.isEmpty,
              // rtsync's capture triggers are off (then no other trigger exists) or dropped by now: any trigger left
              // is the app's (or demo protection).
              try captureSuspension == .turnedOff || db.scalar("SELECT 1 FROM main.sqlite_schema WHERE type = 'trigger' LIMIT 1") == nil,
              try attachDiff() else { return nil }
        // The diff's cell clocks, keyed by row: read by key instead of by a scan of the diff's table for every row.
        // If they cannot be copied, the per-row merge does all the work.
        defer { if reader.hasCellClocks { try? db.execute("DROP TABLE IF EXISTS \(Merger.diffCellsTable)") } }
        if reader.hasCellClocks {
            do {
                try db.execute("DROP TABLE IF EXISTS \(Merger.diffCellsTable)")
                try db.execute("CREATE TEMP TABLE \(Merger.diffCellsTable)(tid INTEGER NOT NULL, rid INTEGER NOT NULL, col TEXT NOT NULL, hlc INTEGER NOT NULL, site TEXT, PRIMARY KEY (tid, rid, col)) WITHOUT ROWID")
                try db.execute("INSERT INTO \(Merger.diffCellsTable)(tid, rid, col, hlc, site) SELECT tid, rid, col, hlc, site FROM \(Merger.attachedDiff).rtsync_cells NOT INDEXED ORDER BY tid, rid, col")
            } catch { return nil }
        }
        // A table whose first rows are not new (a diff of updates) is not new as a whole. When the tables left
        // hold under half the diff's rows, checking every row on another thread first costs more than it saves.
        var tables: [(table: BulkTable, upserts: Int)] = []
        for c in candidates {
            let table = BulkTable(self, plan: c.plan, diffTable: c.did)
            // An error reading the file (a column missing, say) leaves the table to the per-row merge, which
            // reads the file its own way and rejects it for what it finds.
            if (try? table.firstRowsAreNew(self)) == true {
                tables.append((table, c.upserts))
            } else if knownRowsAllowed, try knownRowsMayBeMergedInBulk(c.plan, deletes: 0) {
                knownCandidates.append((c.did, c.plan, c.upserts, 0))
            }
        }
        // Likewise a table whose first rows are neither known here nor new is left to the per-row merge.
        knownCandidates = knownCandidates.filter { k in (try? firstRowsMayBeKnown(k.plan, diffTable: k.did)) == true }
        let bulkShare = tables.reduce(0, { $0 + $1.upserts }) + knownCandidates.reduce(0, { $0 + $1.upserts + $1.deletes })
        guard bulkShare * 2 >= rowsInDiff else { return nil }
        let check = BackgroundRowCheck(reader: reader, clockLimit: clockLimit)
        defer { check.finish() }
        var result = BulkResult()
        let before = (report, bulkRows, bulkKnownRows)
        try db.execute("SAVEPOINT rtsync_bulk_all")
        do {
            for t in tables where try bulkInsert(t.table, upserts: t.upserts) { result.tables.insert(t.table.diffTable) }
            for k in knownCandidates {
                guard let left = try mergeKnownRowsInBulk(k.plan, diffTable: k.did, upserts: k.upserts, deletes: k.deletes) else { continue }
                result.tables.insert(k.did)
                if !left.isEmpty { result.rowsLeft[k.did] = left }
            }
            try check.wait()
        } catch {
            check.finish()
            // When the error ended the transaction itself (disk full, I/O), there is nothing to roll back to.
            guard (try? db.execute("ROLLBACK TO rtsync_bulk_all; RELEASE rtsync_bulk_all")) != nil else { throw error }
            (report, bulkRows, bulkKnownRows) = before
            return nil
        }
        try db.execute("RELEASE rtsync_bulk_all")
        result.maxAuthorHLC = check.maxAuthorHLC
        result.maxAnyHLC = check.maxAnyHLC
        return result
    }

    /// Attaches the diff read-only and immutable (the private copy the reader opened) and checks what this connection
    /// sees there: ordinary tables with no hidden or generated columns, no other objects (not even automatic
    /// indexes, which rtsync's diffs never have: `quick_check` does not compare an index with its table). False, with
    /// nothing attached, when that cannot be done or shown; the per-row merge then does all the work.
    mutating func attachDiff() throws -> Bool {
        // The set paths' SQL reads text as UTF-8 bytes (key texts' NUL test, sites' ASCII test): a UTF-16 database
        // (which attaches only UTF-16 diffs, its own set export's) is merged row by row.
        guard db.interpretsURIs, try SyncDatabase.storesUTF8(db) else { return false }
        let d = Merger.attachedDiff
        do {
            try db.execute("ATTACH DATABASE ? AS " + d, [.text(DiffReader.immutableURI(for: reader.contentURL.path))])
        } catch { return false }
        do {
            let odd = try db.scalar("""
                SELECT count(*) FROM \(d).sqlite_schema WHERE NOT (type = 'table' AND sql LIKE 'CREATE TABLE %')
                """)?.int64
            var plain = odd == 0
            // A declared collation (which no writer of diffs declares) would change what the SQL over the file
            // compares equal: a forged `changed COLLATE NOCASE` merged two spellings of a list as one.
            if plain {
                plain = try !db.rows("SELECT sql FROM \(d).sqlite_schema").contains { Self.declaresCollation($0[0].string ?? "") }
            }
            for table in reader.tables.map(\.name) + ["rtsync_rows", "rtsync_cells"] where plain {
                plain = try db.scalar("SELECT count(*) FROM pragma_table_xinfo(?, '\(d)') WHERE hidden != 0", [.text(table)])?.int64 == 0
            }
            // The bulk paths name a row of `rtsync_rows` by its rowid: no column of that table may take the name.
            if plain {
                plain = try db.scalar("SELECT count(*) FROM pragma_table_xinfo('rtsync_rows', '\(d)') WHERE lower(name) IN ('rowid', '_rowid_', 'oid')")?.int64 == 0
            }
            if plain { return true }
        } catch {}
        // Detaching inside the transaction fails once the file was read; the caller detaches after it ends.
        try? db.execute("DETACH DATABASE " + d)
        return false
    }

    /// Whether `sql` has the word COLLATE outside quoted names, strings and comments (a name such as
    /// "collated_at" does not count). A backstop: every comparison over the attached diff names its collation or
    /// compares values that carry none.
    static func declaresCollation(_ sql: String) -> Bool {
        UniqueIndex.sqlTokens(sql).contains("collate")
    }

    /// The SQL that reads one carried table of the attached diff for the bulk writes.
    struct BulkTable {
        let plan: TablePlan
        let diffTable: Int64
        /// `FROM` the diff's rows of the table joined with their carried values (`r`, `c`): its upserts.
        let from: String
        /// Whether a row is new by its own content: one clock for the whole row (born == clock, no cell
        /// clocks), and for owner-only tables owned by the author.
        let isNew: String
        /// Its key text, as the capture triggers make it (`SyncDatabase.keyValueText`): quote() of each key column,
        /// joined by commas, an integral REAL as its INTEGER in a column that keeps them apart. (A key holding a NUL
        /// byte has another form: the row check sends such a diff to the per-row merge, `BackgroundRowCheck.KeyHoldsNUL`.)
        let keyText: String
        /// ?1 is the author's site, ?2 the author's user.
        let arguments: [SQLValue]

        /// `only`, when given, is a further condition on the upserts read (`r` is the diff's `rtsync_rows`).
        init(_ merger: Merger, plan: TablePlan, diffTable did: Int64, only: String? = nil) {
            self.plan = plan
            diffTable = did
            let d = Merger.attachedDiff
            let remoteNames = plan.remoteDef.columnNames
            func carried(_ position: Int) -> String { BulkTable.carried(plan, position) }
            let numbers = SyncDatabase.numberKeys(plan.info.definition)
            keyText = (plan.fastKeyPositions ?? []).enumerated().map { i, position in
                // A column that keeps INTEGER and REAL apart: an integral REAL has the equal INTEGER's text (an attached
                // diff means a UTF-8 database).
                i < numbers.count && numbers[i] ? SyncDatabase.keyValueText(carried(position), utf8: true, numbers: true) : "quote(\(carried(position)))"
            }.joined(separator: " || ',' || ")
            let alias = DiffFile.rowidAlias(for: remoteNames) ?? "rowid"
            // NOT INDEXED: only the tables' own b-trees are read (an index in the file could hold other values).
            from = "FROM \(d).rtsync_rows AS r NOT INDEXED JOIN \(d).\(quoteIdentifier(plan.remoteDef.name)) AS c NOT INDEXED ON c.\(alias) = r.rid "
                + "WHERE r.tid = \(did) AND r.op = 'upsert' COLLATE BINARY" + (only.map { " AND " + $0 } ?? "")
            var isNew = "r.hlc = r.born AND coalesce(r.site, ?1) = coalesce(r.born_site, ?1) COLLATE BINARY"
            // A state diff's row with a `changed` list has placeholders for the columns outside it (`remoteValues`).
            if merger.meta.kind.carriesState { isNew += " AND r.changed IS NULL" }
            if merger.reader.hasCellClocks { isNew += " AND NOT EXISTS (SELECT 1 FROM \(Merger.diffCellsTable) AS x WHERE x.tid = r.tid AND x.rid = r.rid)" }
            if let owner = plan.ownerPosition { isNew += " AND typeof(\(carried(owner))) = 'text' AND \(carried(owner)) = ?2 COLLATE BINARY" }
            // A key in another storage class than the local column's is converted by the per-row merge.
            for (i, position) in (plan.fastKeyPositions ?? []).enumerated() {
                if let natural = plan.keyAffinities[i].naturalTypeof { isNew += " AND typeof(\(carried(position))) = '\(natural)'" }
            }
            self.isNew = isNew
            arguments = [.text(merger.meta.authorSite), .text(merger.meta.authorUser)]
        }

        /// Carried column `position` of the diff's table, as the bulk SQL names it.
        static func carried(_ plan: TablePlan, _ position: Int) -> String { "c." + quoteIdentifier(plan.remoteDef.columnNames[position]) }

        /// `sql` prepared, with the arguments it uses (?1 and ?2 are numbered, so those are the first ones).
        func statement(_ merger: Merger, _ sql: String) throws -> Statement {
            let s = try merger.db.prepare(sql)
            try s.bind(Array(arguments.prefix(s.parameterCount)))
            return s
        }

        /// Whether any upsert meets `condition`.
        func any(_ merger: Merger, _ condition: String) throws -> Bool {
            try statement(merger, "SELECT 1 " + from + " AND " + condition + " LIMIT 1").step()
        }

        /// Whether the first 64 upserts are new by content and have no bookkeeping here (cheap, and false at
        /// once for a diff of updates).
        func firstRowsAreNew(_ merger: Merger) throws -> Bool {
            let tid = plan.info.table.id
            let first = try statement(merger, """
                SELECT 1 FROM (SELECT (\(isNew)) AS is_new, \(keyText) AS key_text \(from) ORDER BY r.rowid LIMIT 64) f
                WHERE NOT coalesce(f.is_new, 0) OR EXISTS (SELECT 1 FROM main.rtsync_rows m WHERE m.tid = \(tid) AND m.pk = f.key_text) LIMIT 1
                """)
            return try !first.step()
        }
    }

    /// Writes every row of one carried table when all are new here (see `insertNewRowsInBulk`); false, having
    /// written nothing, when they are not.
    mutating func bulkInsert(_ table: BulkTable, upserts: Int) throws -> Bool {
        let plan = table.plan, tid = plan.info.table.id, def = plan.info.definition
        func carried(_ position: Int) -> String { BulkTable.carried(plan, position) }
        if pending.keys.contains(where: { $0.tid == tid }),
           try table.any(self, "\(table.keyText) IN (SELECT pk FROM main.rtsync_changes WHERE tid = \(tid))") { return false }
        if readOnlyShares.contains(where: { $0.tid == tid }),
           try table.any(self, "\(table.keyText) IN (SELECT pk FROM main.rtsync_shares WHERE tid = \(tid) AND to_user = ?2 AND permission = 'read-only')") { return false }

        // A row that is not new by its own content is not claimed, nor a key with bookkeeping here; a key with
        // a row here is not inserted, and a key twice in the diff is claimed once: each shows as a count short
        // of `upserts`.
        let claim = "INSERT INTO main.rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) SELECT \(tid), \(table.keyText), r.born, coalesce(r.born_site, ?1), NULL, NULL "
            + table.from + " AND (\(table.isNew)) ORDER BY r.rowid ON CONFLICT(tid, pk) DO NOTHING"
        // OR ABORT: a UNIQUE constraint's own conflict clause (REPLACE, IGNORE, ROLLBACK) must not settle a collision
        // here; it fails the insert, and the per-row merge takes the table.
        let insert = "INSERT OR ABORT INTO main.\(quoteIdentifier(def.name)) (" + plan.allColumns.map(quoteIdentifier).joined(separator: ", ") + ") SELECT "
            + plan.allPositions.map(carried).joined(separator: ", ") + " " + table.from
            + " ORDER BY r.rowid ON CONFLICT(" + def.primaryKeyColumns.map(quoteIdentifier).joined(separator: ", ") + ") DO NOTHING"
        func run(_ sql: String) throws -> Int {
            try table.statement(self, sql).runBound()
            return db.changes
        }
        try db.execute("SAVEPOINT rtsync_bulk")
        var failure: Error?
        do {
            if try run(claim) == upserts, try run(insert) == upserts {
                try db.execute("RELEASE rtsync_bulk")
                report.inserted += upserts
                bulkRows += upserts
                return true
            }
        } catch let error as SQLiteError {
            // A UNIQUE value held by another key, a NOT NULL or CHECK constraint, a value of the wrong type:
            // the per-row merge meets the same row and decides (resolve the collision, or reject the diff).
            failure = error
        }
        do { try db.execute("ROLLBACK TO rtsync_bulk; RELEASE rtsync_bulk") } catch { throw failure ?? error }
        return false
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
    /// The latest clock of any site in the rows, once `wait()` returned.
    private(set) var maxAnyHLC: Int64 = 0

    /// Starts the check.
    init(reader: DiffReader, clockLimit: Int64) {
        self.reader = reader
        // A thread of its own, not a Dispatch or Swift concurrency worker: the caller blocks until it is done.
        let thread = Thread { self.run(clockLimit: clockLimit) }
        thread.qualityOfService = .userInitiated
        thread.start()
    }

    /// A key of the diff is TEXT holding a NUL byte: its key text is not `quote()`'s, which the set paths use; the
    /// per-row merge takes the diff (not a fault of the file).
    struct KeyHoldsNUL: Error {}

    private func run(clockLimit: Int64) {
        let author = reader.metadata.authorSite, file = reader.url.path
        var latest: Int64 = 0, latestAny: Int64 = 0
        var keyPositions: [Int64: [Int]] = [:]
        do {
            try reader.forEachRow { row in
                let keys = keyPositions[row.tableID] ?? {
                    let names = row.table.columnNames
                    let positions = row.table.primaryKeyColumns.compactMap { names.firstIndex(of: $0) }
                    keyPositions[row.tableID] = positions
                    return positions
                }()
                if keys.contains(where: row.isTextWithNUL) { throw KeyHoldsNUL() }
                // The clocks the per-row merge checks, in its order.
                func note(_ clock: Clock) throws {
                    if let e = Merger.clockError(clock, table: row.table.name, limit: clockLimit, file: file) { throw e }
                    if clock.site == author { latest = max(latest, clock.hlc.rawValue) }
                    latestAny = max(latestAny, clock.hlc.rawValue)
                }
                try note(row.clock)
                try note(row.born)
                for clock in row.columnClocks.values { try note(clock) }
            }
        } catch { self.error = error }
        maxAuthorHLC = latest
        maxAnyHLC = latestAny
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
