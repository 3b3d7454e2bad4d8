import Crypto
import DiffFormat
import Foundation
import RTSQLite

/// Export as set operations in SQL: the change log is coalesced per row by `GROUP BY`, the rows and their
/// bookkeeping are read and written with `INSERT … SELECT` into the diff file attached to the database's own
/// connection. It writes the same diff as the row-by-row export (`exportLocked`: same rows in the same order,
/// clocks, edit times, digest and signature) and the same bookkeeping; `ExportSetsTests` compare the two on
/// random change logs. Change logs it does not handle go row by row: a table with a key of more than four columns, more
/// than 62 columns or a column name that is not ASCII, columns changed since tracking, a key text that does not
/// decode to an integer or text, and TEXT that is not valid UTF-8.
///
/// SQLite attaches a file only outside a transaction and commits an attached file with the main database, while
/// the diff must be on disk before the bookkeeping says it was exported. So it runs in two transactions: the first
/// reads the log and writes the file, which is then synced; the second, which checks that no other connection
/// wrote meanwhile (`PRAGMA data_version`), publishes the file and records the export. When something was written
/// in between, the file is dropped and the export runs row by row.
extension SyncDatabase {
    /// How a set-based export ended.
    enum SetExportOutcome {
        case exported(ExportResult)
        /// The change log coalesced to nothing (it is cleared, as the row-by-row export does).
        case nothing
        /// This change log goes through the row-by-row export.
        case rowByRow
    }

    private struct RowByRow: Error {}

    /// What the first transaction wrote, for the second.
    private struct Written {
        var maxSeq: Int64
        var newestCaptured: Int64
        var latest: Int64
        var sequence: Int64
        var counts: [String: OperationCounts]
        var rows: Int
        var dataVersion: Int64
        var user: String
        var site: String
    }

    /// The most key columns a table exported as sets may have (the scratch tables hold a key's values in `kv`…`kv4`).
    static let setExportKeyColumns = 4

    /// Tables the set-based export can write: one to four key columns, at most 62 columns (integer masks), ASCII names,
    /// and triggers made for the current columns.
    private static func setExportable(_ info: TrackedInfo) -> Bool {
        let def = info.definition
        return (1...setExportKeyColumns).contains(def.primaryKeyColumns.count) && def.columnNames.count <= 62 && info.table.columns == def.columnNames
            && def.columnNames.allSatisfy { $0.utf8.allSatisfy { $0 < 0x80 } } && DiffFile.rowidAlias(for: def.columnNames) != nil
    }

    /// SQL matching the row `row` of `def`'s table with the key values of the scratch row `values` (`kv`, `kv2`, …),
    /// as the row-by-row export's `key = ?` does: `+` leaves the scratch column without an affinity, as a bound value is,
    /// so the key column's own applies (a TEXT key column finds '1' for the value 1 of a key text made before the
    /// column became TEXT; two columns compared directly would apply none).
    static func keyMatchSQL(_ def: TableDefinition, row: String, values: String) -> String {
        zip(def.primaryKeyColumns, keyValueColumns(def.primaryKeyColumns.count)).map { "\(row).\(quoteIdentifier($0)) = +\(values).\($1)" }
            .joined(separator: " AND ")
    }

    /// The key value columns of the scratch tables, for a key of `count` columns.
    static func keyValueColumns(_ count: Int) -> [String] { (0..<count).map { $0 == 0 ? "kv" : "kv\($0 + 1)" } }

    private static let setExportDDL = """
        CREATE TABLE rtsync_scratch.rtsync_xk(tid INTEGER NOT NULL, pk TEXT NOT NULL, fs INTEGER NOT NULL, ins INTEGER,
          first_op INTEGER, last_op INTEGER, last_hlc INTEGER, ins_hlc INTEGER, kv, kv2, kv3, kv4, PRIMARY KEY (tid, pk)) WITHOUT ROWID;
        CREATE TABLE rtsync_scratch.rtsync_xpos(tid INTEGER NOT NULL, pos INTEGER NOT NULL, name TEXT NOT NULL,
          PRIMARY KEY (tid, pos)) WITHOUT ROWID;
        CREATE TABLE rtsync_scratch.rtsync_xc(tid INTEGER NOT NULL, pk TEXT NOT NULL, pos INTEGER NOT NULL, hlc INTEGER NOT NULL,
          keep INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (tid, pk, pos)) WITHOUT ROWID;
        CREATE TABLE rtsync_scratch.rtsync_xo(fs INTEGER PRIMARY KEY, tid INTEGER NOT NULL, pk TEXT NOT NULL, op TEXT NOT NULL,
          isnew INTEGER NOT NULL, born_hlc INTEGER NOT NULL, born_site TEXT NOT NULL, hlc INTEGER NOT NULL, mask INTEGER, top INTEGER,
          rid INTEGER NOT NULL, kv, kv2, kv3, kv4);
        CREATE TABLE rtsync_scratch.rtsync_xt(tid INTEGER PRIMARY KEY, dtid INTEGER NOT NULL);
        CREATE TABLE rtsync_scratch.rtsync_xj(tid INTEGER NOT NULL, mask INTEGER NOT NULL, json TEXT NOT NULL, PRIMARY KEY (tid, mask)) WITHOUT ROWID;
        """

    /// Attaches a fresh private scratch database (SQLite's `''`: a temporary file made only if its cache overflows)
    /// for the working tables; false when that cannot be done. Detaching it at the end drops them all at once,
    /// where clearing tables kept in `temp` freed their pages one by one (9–10% of a 10k- or 100k-row export).
    private func attachScratch() -> Bool {
        if (try? db.scalar("SELECT 1 FROM pragma_database_list WHERE name = 'rtsync_scratch'")) != nil {
            // Left by an export whose detach failed: its tables would be in the way.
            guard (try? db.execute("DETACH DATABASE rtsync_scratch")) != nil else { return false }
        }
        guard (try? db.execute("ATTACH DATABASE '' AS rtsync_scratch")) != nil else { return false }
        _ = try? db.execute("PRAGMA rtsync_scratch.cache_size = -32768")
        return true
    }

    /// The set-based export; see the type's comment. Inside `locked`, outside a transaction.
    func exportBySets(to directory: URL, signingKey: Curve25519.Signing.PrivateKey?, shouldStop: (@Sendable () -> Bool)?) throws -> SetExportOutcome {
        // A path opened as a plain name (`file:…`) cannot attach by URI; nothing pending: nothing to gain.
        guard setExport, !path.hasPrefix("file:"), db.isAutocommit else { return .rowByRow }
        // Small exports cost less row by row (one transaction, no attach). The count also picks the page size, as
        // the row-by-row export does from the rows it coalesced (a write between here and the transaction can
        // only change the page size).
        let limit = Int64(max(setExportMinimumRows, 65))
        let keys = Int(try db.scalar("SELECT count(*) FROM (SELECT DISTINCT tid, pk FROM rtsync_changes LIMIT ?)", [.integer(limit)])?.int64 ?? 0)
        guard keys > 0, keys >= setExportMinimumRows else { return .rowByRow }
        guard attachScratch() else { return .rowByRow }
        defer { try? db.execute("DETACH DATABASE rtsync_scratch") }
        let writer = try AttachedDiffWriter(connection: db, directory: directory, kind: .changes, smallPages: keys <= 64)
        defer { writer.cancel() }
        let written: Written?
        do {
            written = try db.transaction { try writeSets(writer, signingKey: signingKey, shouldStop: shouldStop) }
        } catch is RowByRow {
            return .rowByRow
        }
        guard let written else { return .nothing }
        try writer.detachAndSync()
        let result = try db.transaction { () -> ExportResult? in
            // Another connection wrote since the file was made: what it holds may be stale.
            guard try db.scalar("PRAGMA main.data_version")?.int64 == written.dataVersion else { return nil }
            let url = try writer.publish()
            do {
                try recordSets(written, diffID: writer.metadata.id.string)
            } catch {
                try? FileManager.default.removeItem(at: url)
                throw error
            }
            return ExportResult(file: url.path, diffID: writer.metadata.id.string, sequence: written.sequence, tables: written.counts, rows: written.rows)
        }
        guard let result else { return .rowByRow }
        setExportsWritten += 1
        return .exported(result)
    }

    /// First transaction: coalesces the log into the scratch tables and writes the diff file. Returns nil when the log
    /// coalesced to nothing (then it is cleared here); throws `RowByRow` for a log the row-by-row export must take.
    private func writeSets(_ writer: AttachedDiffWriter, signingKey: Curve25519.Signing.PrivateKey?, shouldStop: (@Sendable () -> Bool)?) throws -> Written? {
        try upgradeBookkeeping()
        let tracked = try Self.refreshedTracked(db)
        guard let maxSeq = try db.scalar("SELECT max(seq) FROM rtsync_changes")?.int64 else { throw RowByRow() }
        // Masks past 62 columns are '0'/'1' text.
        if try db.scalar("SELECT 1 FROM rtsync_changes WHERE seq <= ? AND op = 2 AND typeof(cols) <> 'integer' LIMIT 1", [.integer(maxSeq)]) != nil { throw RowByRow() }
        let byID = Dictionary(uniqueKeysWithValues: tracked.values.map { ($0.table.id, $0) })
        let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
        let user = try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
        try db.execute(Self.setExportDDL)
        // The key values of each changed row, decoded from its key text (`Connection.installKeyValueFunction`): only
        // TEXT and INTEGER values; `quote()` of the values is compared with the key text before they are relied on.
        let severalColumns = tracked.values.filter { $0.definition.primaryKeyColumns.count > 1 }.map { String($0.table.id) }
        let keyValues = (0..<Self.setExportKeyColumns).map { i in
            i == 0 ? "rtsync_key_value(pk, 0)" : severalColumns.isEmpty ? "NULL"
                : "CASE WHEN tid IN (\(severalColumns.joined(separator: ", "))) THEN rtsync_key_value(pk, \(i)) END"
        }

        // 1. One entry per changed row: its first and last change, its last insert, their clocks (the log folded in
        //    seq order into a table keyed by row: cheaper than sorting it by key).
        try db.execute("""
            INSERT INTO rtsync_scratch.rtsync_xk(tid, pk, fs, ins, first_op, last_op, last_hlc, ins_hlc, kv, kv2, kv3, kv4)
            SELECT tid, pk, seq, CASE WHEN op = 1 THEN seq END, op, op, hlc, CASE WHEN op = 1 THEN hlc END, \(keyValues.joined(separator: ", "))
            FROM main.rtsync_changes WHERE seq <= ?1 ORDER BY seq
            ON CONFLICT(tid, pk) DO UPDATE SET last_op = excluded.last_op, last_hlc = excluded.last_hlc,
              ins = coalesce(excluded.ins, ins), ins_hlc = CASE WHEN excluded.ins IS NULL THEN ins_hlc ELSE excluded.ins_hlc END
            """, [.integer(maxSeq)])
        // Rows of tables no longer tracked are left out, as row by row.
        var infos: [TrackedInfo] = []
        // The distinct tables, each found by one search of the key (a skip scan) instead of reading every key.
        for r in try db.rows("""
            WITH RECURSIVE t(tid) AS (SELECT (SELECT min(tid) FROM rtsync_scratch.rtsync_xk)
              UNION ALL SELECT (SELECT min(tid) FROM rtsync_scratch.rtsync_xk WHERE tid > t.tid) FROM t WHERE t.tid IS NOT NULL)
            SELECT tid FROM t WHERE tid IS NOT NULL
            """) {
            guard let tid = r[0].int64, let info = byID[tid] else { continue }
            guard Self.setExportable(info) else { throw RowByRow() }
            infos.append(info)
        }
        // Every key must decode to the values whose `quote()` it is (so it names the same row as KeyCodec's values; a
        // value that is not TEXT or INTEGER decodes to 0, whose `quote()` is not that value's).
        var requoted = "quote(kv)"
        for n in Set(infos.map { $0.definition.primaryKeyColumns.count }) where n > 1 {
            let tids = infos.filter { $0.definition.primaryKeyColumns.count == n }.map { String($0.table.id) }.joined(separator: ", ")
            requoted = "CASE WHEN tid IN (\(tids)) THEN " + Self.keyValueColumns(n).map { "quote(\($0))" }.joined(separator: " || ',' || ") + " ELSE \(requoted) END"
        }
        if try db.scalar("SELECT 1 FROM rtsync_scratch.rtsync_xk WHERE \(requoted) IS NOT pk LIMIT 1") != nil { throw RowByRow() }
        let addPosition = try db.prepare("INSERT INTO rtsync_scratch.rtsync_xpos(tid, pos, name) VALUES (?, ?, ?)")
        for info in infos {
            for (pos, name) in info.definition.columnNames.enumerated() { try addPosition.run([.integer(info.table.id), .integer(Int64(pos)), .text(name)]) }
        }
        // 2. Per changed column: the clock of its last update after the row's last insert.
        try db.execute("""
            INSERT INTO rtsync_scratch.rtsync_xc(tid, pk, pos, hlc)
            SELECT tid, pk, pos, hlc FROM (
              SELECT c.tid AS tid, c.pk AS pk, p.pos AS pos, max(c.seq), c.hlc AS hlc
              FROM main.rtsync_changes AS c
              JOIN rtsync_scratch.rtsync_xk AS k ON k.tid = c.tid AND k.pk = c.pk
              JOIN rtsync_scratch.rtsync_xpos AS p ON p.tid = c.tid AND (c.cols & (1 << p.pos)) <> 0
              WHERE c.op = 2 AND c.seq <= ?1 AND c.seq > coalesce(k.ins, 0)
              GROUP BY c.tid, c.pk, p.pos)
            """, [.integer(maxSeq)])
        // A column a remote change won after the local edit holds the remote value now: the edit is not sent.
        try db.execute("""
            UPDATE rtsync_scratch.rtsync_xc SET keep = 0
            WHERE (SELECT k.ins IS NULL FROM rtsync_scratch.rtsync_xk AS k WHERE k.tid = rtsync_xc.tid AND k.pk = rtsync_xc.pk)
              AND NOT coalesce((SELECT r.hlc < rtsync_xc.hlc OR (r.hlc = rtsync_xc.hlc AND r.site < ?1)
                                FROM main.rtsync_clocks AS r JOIN rtsync_scratch.rtsync_xpos AS p ON p.tid = rtsync_xc.tid AND p.pos = rtsync_xc.pos
                                WHERE r.tid = rtsync_xc.tid AND r.pk = rtsync_xc.pk AND lower(r.col) = lower(p.name)
                                ORDER BY r.col DESC LIMIT 1), 1)
            """, [.text(site)])
        // 3. What each row sends, following the row as it is now (see exportLocked).
        for info in infos {
            let def = info.definition, tid = info.table.id
            let key = quoteIdentifier(def.primaryKeyColumns[0]), table = "main." + quoteIdentifier(def.name)
            let kvs = Self.keyValueColumns(Self.setExportKeyColumns).joined(separator: ", ")
            let kvsOfK = Self.keyValueColumns(Self.setExportKeyColumns).map { "k.\($0) AS \($0)" }.joined(separator: ", ")
            do {
                try db.execute("""
                    INSERT INTO rtsync_scratch.rtsync_xo(fs, tid, pk, op, isnew, born_hlc, born_site, hlc, mask, top, rid, \(kvs))
                    SELECT fs, tid, pk, op, isnew, born_hlc, born_site, coalesce(hlc, top), mask, top, row_number() OVER (ORDER BY fs), \(kvs) FROM (
                      SELECT k.fs AS fs, k.tid AS tid, k.pk AS pk, \(kvsOfK), k.first_op AS first_op, k.last_op AS last_op, b.tid IS NOT NULL AS has_meta,
                        CASE WHEN t.\(key) IS NULL THEN 'delete' ELSE 'upsert' END AS op,
                        (t.\(key) IS NOT NULL AND k.ins IS NOT NULL) AS isnew,
                        CASE WHEN t.\(key) IS NOT NULL AND k.ins IS NOT NULL THEN k.ins_hlc ELSE coalesce(b.born_hlc, 0) END AS born_hlc,
                        CASE WHEN t.\(key) IS NOT NULL AND k.ins IS NOT NULL THEN ?2 ELSE coalesce(b.born_site, '') END AS born_site,
                        CASE WHEN t.\(key) IS NULL THEN k.last_hlc WHEN k.ins IS NOT NULL THEN k.ins_hlc END AS hlc,
                        m.mask AS mask, m.top AS top
                      FROM rtsync_scratch.rtsync_xk AS k
                      LEFT JOIN \(table) AS t ON \(Self.keyMatchSQL(def, row: "t", values: "k"))
                      LEFT JOIN main.rtsync_rows AS b ON b.tid = k.tid AND b.pk = k.pk
                      LEFT JOIN (SELECT pk, sum(1 << pos) AS mask, max(hlc) AS top FROM rtsync_scratch.rtsync_xc WHERE tid = ?1 AND keep GROUP BY pk) AS m ON m.pk = k.pk
                      WHERE k.tid = ?1)
                    WHERE CASE WHEN op = 'delete' THEN (last_op = 3 OR first_op = 3 OR has_meta) AND NOT (first_op = 1 AND NOT has_meta)
                               ELSE isnew OR mask IS NOT NULL END
                    """, [.integer(tid), .text(site)])
            } catch let error as SQLiteError where error.extendedCode == 1555 {
                // SQLITE_CONSTRAINT_PRIMARYKEY on `fs`: a key found two rows, as when a key column's own collation
                // differs from the one its PRIMARY KEY declares (see the README's known limitations). Row by row.
                throw RowByRow()
            }
        }
        if let shouldStop, shouldStop() { throw SyncEngineError.interrupted(operation: "export", path: writer.destination.deletingLastPathComponent().path) }
        let newestCaptured = try db.scalar("SELECT max(hlc) FROM rtsync_changes WHERE seq <= ?", [.integer(maxSeq)])?.int64 ?? 0
        // Per table, in the order of its first row: its upserts and deletes, and the newest clock sent (a row's clock,
        // or a newer column clock of a row new here). One pass over the rows.
        let perTable = try db.rows("""
            SELECT tid, sum(op = 'upsert'), sum(op = 'delete'), max(CASE WHEN op = 'upsert' THEN max(hlc, coalesce(top, 0)) ELSE hlc END)
            FROM rtsync_scratch.rtsync_xo GROUP BY tid ORDER BY min(fs)
            """)
        let rows = perTable.reduce(0) { $0 + Int($1[1].int64 ?? 0) + Int($1[2].int64 ?? 0) }
        if rows == 0 {
            try db.execute("DELETE FROM rtsync_changes WHERE seq <= ?", [.integer(maxSeq)])
            // Clocks stay unique per site even for changes that coalesced to nothing.
            try db.execute("UPDATE rtsync_site SET hlc = max(hlc, ?)", [.integer(max(newestCaptured, 0))])
            return nil
        }

        // 4. The diff: tables in the order of their first row, then rows, then column clocks, in first-change order.
        let sequence = (try db.scalar("SELECT diff_seq FROM rtsync_site")?.int64 ?? 0) + 1
        var seen: [String: Int64] = [:]
        for r in try db.rows("SELECT site, hlc FROM rtsync_seen") { if let s = r[0].string, let h = r[1].int64 { seen[s] = h } }
        // The id is recorded with the export (second transaction), so this one writes nothing to the database
        // when the schema is up to date, and its commit needs no sync.
        try writer.begin(id: try proposedDiffID(), authorUser: user, authorSite: site, sequence: sequence...sequence, seen: seen)
        let out = writer.schema
        var counts: [String: OperationCounts] = [:]
        let infoByID = Dictionary(uniqueKeysWithValues: infos.map { ($0.table.id, $0) })
        for r in perTable {
            guard let tid = r[0].int64, let info = infoByID[tid] else { continue }
            let def = info.definition
            let dtid = try writer.addTable(def)
            try db.execute("INSERT INTO rtsync_scratch.rtsync_xt(tid, dtid) VALUES (?, ?)", [.integer(tid), .integer(dtid)])
            let keyNames = def.primaryKeyColumns.map { $0.lowercased() }, kvs = Self.keyValueColumns(keyNames.count)
            let values = def.columnNames.map { name in
                keyNames.firstIndex(of: name.lowercased()).map { "CASE WHEN o.op = 'delete' THEN o.\(kvs[$0]) ELSE t.\(quoteIdentifier(name)) END" }
                    ?? "t." + quoteIdentifier(name)
            }
            try db.execute("""
                INSERT INTO \(out).\(quoteIdentifier(def.name))(\(DiffFile.rowidAlias(for: def.columnNames)!), \(def.columnNames.map(quoteIdentifier).joined(separator: ", ")))
                SELECT o.rid, \(values.joined(separator: ", "))
                FROM rtsync_scratch.rtsync_xo AS o LEFT JOIN main.\(quoteIdentifier(def.name)) AS t
                  ON o.op = 'upsert' AND \(Self.keyMatchSQL(def, row: "t", values: "o"))
                WHERE o.tid = ?1 ORDER BY o.fs
                """, [.integer(tid)])
            counts[def.name, default: .init()].upserts += Int(r[1].int64 ?? 0)
            counts[def.name, default: .init()].deletes += Int(r[2].int64 ?? 0)
        }
        // The changed-column list of each distinct mask of updated rows, in column order.
        let addJSON = try db.prepare("INSERT INTO rtsync_scratch.rtsync_xj(tid, mask, json) VALUES (?, ?, ?)")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for r in try db.rows("SELECT DISTINCT tid, mask FROM rtsync_scratch.rtsync_xo WHERE op = 'upsert' AND NOT isnew") {
            guard let tid = r[0].int64, let mask = r[1].int64, let info = infoByID[tid] else { continue }
            let names = info.definition.columnNames.enumerated().filter { mask & (Int64(1) << $0.offset) != 0 }.map(\.element)
            try addJSON.run([.integer(tid), .integer(mask), .text(String(decoding: try encoder.encode(names), as: UTF8.self))])
        }
        // Clocks of this site are stored as NULL sites.
        try db.execute("""
            INSERT INTO \(out).rtsync_rows(tid, rid, op, born, born_site, hlc, site, changed)
            SELECT x.dtid, o.rid, o.op, o.born_hlc, CASE WHEN o.born_site = ?1 THEN NULL ELSE o.born_site END, o.hlc,
              NULL, CASE WHEN o.op = 'upsert' AND NOT o.isnew THEN j.json END
            FROM rtsync_scratch.rtsync_xo AS o JOIN rtsync_scratch.rtsync_xt AS x ON x.tid = o.tid
            LEFT JOIN rtsync_scratch.rtsync_xj AS j ON j.tid = o.tid AND j.mask = o.mask
            ORDER BY o.fs
            """, [.text(site)])
        try db.execute("""
            INSERT INTO \(out).rtsync_cells(tid, rid, col, hlc, site)
            SELECT x.dtid, o.rid, p.name, c.hlc, NULL
            FROM rtsync_scratch.rtsync_xo AS o JOIN rtsync_scratch.rtsync_xt AS x ON x.tid = o.tid
            JOIN rtsync_scratch.rtsync_xc AS c ON c.tid = o.tid AND c.pk = o.pk AND c.keep
            JOIN rtsync_scratch.rtsync_xpos AS p ON p.tid = c.tid AND p.pos = c.pos
            WHERE o.op = 'upsert' AND c.hlc <> o.hlc
            ORDER BY o.fs, p.name
            """)
        let latest = perTable.compactMap { $0[3].int64 }.max() ?? 0
        if let shouldStop, shouldStop() { throw SyncEngineError.interrupted(operation: "export", path: writer.destination.deletingLastPathComponent().path) }
        guard try writer.seal(signingKey: signingKey) else { throw RowByRow() }
        let version = try db.scalar("PRAGMA main.data_version")?.int64 ?? 0
        return Written(maxSeq: maxSeq, newestCaptured: newestCaptured, latest: latest, sequence: sequence, counts: counts, rows: rows,
                       dataVersion: version, user: user, site: site)
    }

    /// Second transaction: the bookkeeping of what the published diff carries (as `exportLocked` records it).
    private func recordSets(_ w: Written, diffID: String) throws {
        let site = SQLValue.text(w.site)
        // A deleted row and a row new here start over with no column clocks.
        try db.execute("DELETE FROM main.rtsync_clocks WHERE (tid, pk) IN (SELECT tid, pk FROM rtsync_scratch.rtsync_xo WHERE op = 'delete' OR isnew)")
        try db.execute("""
            INSERT INTO main.rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site)
            SELECT tid, pk, born_hlc, born_site, hlc, ?1 FROM rtsync_scratch.rtsync_xo WHERE op = 'delete'
            ON CONFLICT(tid, pk) DO UPDATE SET del_hlc = excluded.del_hlc, del_site = excluded.del_site
            """, [site])
        try db.execute("""
            INSERT INTO main.rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site)
            SELECT tid, pk, born_hlc, born_site, NULL, NULL FROM rtsync_scratch.rtsync_xo WHERE op = 'upsert' AND isnew
            ON CONFLICT(tid, pk) DO UPDATE SET born_hlc = excluded.born_hlc, born_site = excluded.born_site, del_hlc = NULL, del_site = NULL
            """)
        // A key with column clocks always has an rtsync_rows entry (born 0 when unknown).
        try db.execute("""
            INSERT INTO main.rtsync_rows(tid, pk, born_hlc, born_site)
            SELECT tid, pk, 0, '' FROM rtsync_scratch.rtsync_xo WHERE op = 'upsert' AND NOT isnew
            ON CONFLICT(tid, pk) DO NOTHING
            """)
        try db.execute("""
            INSERT OR REPLACE INTO main.rtsync_clocks(tid, pk, col, hlc, site)
            SELECT c.tid, c.pk, p.name, c.hlc, ?1
            FROM rtsync_scratch.rtsync_xo AS o JOIN rtsync_scratch.rtsync_xc AS c ON c.tid = o.tid AND c.pk = o.pk AND c.keep
            JOIN rtsync_scratch.rtsync_xpos AS p ON p.tid = c.tid AND p.pos = c.pos
            WHERE o.op = 'upsert'
            """, [site])
        try recordSentKeys(diffID: diffID, throughSeq: w.maxSeq)
        try db.execute("DELETE FROM rtsync_changes WHERE seq <= ?", [.integer(w.maxSeq)])
        try db.execute("UPDATE rtsync_site SET last_diff_id = ?", [.text(diffID)])
        try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?, 'changes', ?, ?, ?, ?, ?)",
                       [.text(diffID), .text(w.user), .text(w.site), .integer(w.sequence), .integer(w.sequence),
                        .text(ISO8601.format(Date(), fractional: true))])
        try db.execute("UPDATE rtsync_site SET hlc = max(hlc, ?1, ?2), published_hlc = max(published_hlc, ?2), diff_seq = ?3, last_export = ?4",
                       [.integer(w.newestCaptured), .integer(w.latest), .integer(w.sequence), .text(ISO8601.format(Date(), fractional: true))])
    }
}
