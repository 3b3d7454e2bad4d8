import DiffFormat
import Foundation
import RTSQLite

// MARK: - Rows this device already has, merged table by table in SQL

extension Merger {
    /// The temporary table that holds, for one carried table at a time, what the merge decided for each row.
    static let knownRowsTable = "temp.rtsync_known"

    /// Whether the rows of a carried table may be merged as a set (`mergeKnownRowsInBulk`), judged by the table
    /// alone: the default policy (column-level last writer wins; deletes only with `delete-wins` and when no
    /// table's foreign key refers to this one), no custom resolver, foreign keys of its own only without deletes
    /// (and then no row may change a column of one: see `mergeKnownRowsInBulk`), UNIQUE constraints only on
    /// plain columns (and then no row may change one of them: see `mergeKnownRowsInBulk`), no renamed, missing or kept-aside columns, ASCII column names (which
    /// SQLite's NOCASE and Swift's `lowercased()` fold alike) and at most 62 columns (a change mask is an integer);
    /// the author's, this device's and the seen sites' ids ASCII.
    mutating func knownRowsMayBeMergedInBulk(_ plan: TablePlan, deletes: Int) throws -> Bool {
        let info = plan.info, def = info.definition, policy = info.table.policy
        func ascii(_ t: String) -> Bool { t.utf8.allSatisfy { $0 > 0 && $0 < 0x80 } }
        // Sites are compared by bytes in SQL and as Swift strings by the per-row merge: alike for ASCII.
        guard ascii(meta.authorSite), ascii(ownSite), meta.seen.keys.allSatisfy(ascii) else { return false }
        guard policy.policy == .lwwColumn, resolvers[info.table.name] == nil, plan.fastInsert, plan.fastKeyPositions != nil,
              !plan.hasDeleteActions || deletes == 0, plan.renamedFrom.isEmpty, def.columns.count <= 62,
              def.columnNames.allSatisfy({ $0.utf8.allSatisfy { $0 < 0x80 } }),
              plan.allColumns.count == Set(plan.allColumns.map { $0.lowercased() }).count else { return false }
        if deletes > 0 {
            guard policy.onDeleteConflict == .deleteWins, try !isReferencedByForeignKeys(info.table.name) else { return false }
        }
        return try uniqueColumns(of: def.name) != nil
    }

    /// The columns (lower-cased) of the table's UNIQUE constraints and unique indexes other than its primary key, or
    /// nil when one of them is partial or indexes an expression or a generated column (which columns decide a
    /// collision is then not known here). A set of rows that writes none of these columns cannot make or settle a collision.
    func uniqueColumns(of table: String) throws -> Set<String>? {
        var columns = Set<String>()
        for index in try db.rows("SELECT name, partial FROM pragma_index_list(?, 'main') WHERE \"unique\" = 1 AND origin <> 'pk'", [.text(table)]) {
            guard let name = index[0].string, index[1].int64 == 0 else { return nil }
            // cid -2 is an expression. A generated column (hidden: not among the columns the merge reads) changes with
            // the columns it is made of, which are not known here.
            for term in try db.rows("""
                SELECT x.name, t.hidden FROM pragma_index_xinfo(?1, 'main') AS x LEFT JOIN pragma_table_xinfo(?2, 'main') AS t ON t.cid = x.cid
                WHERE x.key = 1
                """, [.text(name), .text(table)]) {
                guard let column = term[0].string, term[1].int64 == 0 else { return nil }
                columns.insert(column.lowercased())
            }
        }
        return columns
    }

    /// The tables `def` references through its foreign keys, and the tables those reference in turn (names
    /// lower-cased).
    func ancestors(of def: TableDefinition) throws -> Set<String> {
        var found = Set<String>(), queue = [def]
        while let d = queue.popLast() {
            for fk in d.foreignKeys where found.insert(fk.table.lowercased()).inserted {
                if let parent = try TableDefinition.read(table: fk.table, from: db) { queue.append(parent) }
            }
        }
        return found
    }

    /// Whether a key column of `def` compares other than by bytes under its own collation (NOCASE, RTRIM, one this
    /// connection does not know: `SyncDatabase.collation(of:in:_:)`), which may differ from the one its PRIMARY KEY
    /// declares (`k TEXT COLLATE NOCASE`, `PRIMARY KEY (k COLLATE BINARY)`): the per-row merge's `k = ?` then finds a
    /// row of another key, such as one the set path wrote first.
    func keyColumnsCompareOtherThanByBytes(_ def: TableDefinition) -> Bool {
        def.primaryKeyColumns.contains { SyncDatabase.collation(of: $0, in: def.name, db) != "BINARY" }
    }

    /// Whether any table's foreign key names `table` (as the per-row merge's ON DELETE handling finds them).
    mutating func isReferencedByForeignKeys(_ table: String) throws -> Bool {
        for child in try SyncDatabase.userTableNames(db) {
            guard let def = try TableDefinition.read(table: child, from: db) else { continue }
            if def.foreignKeys.contains(where: { $0.table.lowercased() == table.lowercased() && !$0.columns.isEmpty }) { return true }
        }
        return false
    }

    /// Whether, of the first 64 rows of a carried table (in file order), every key is in the local column's storage
    /// class and at least half have a local row with their key or are upserts new by their own content (see
    /// `BulkTable.isNew`): cheap, and false at once for a table the set path would mostly leave to the per-row merge.
    func firstRowsMayBeKnown(_ plan: TablePlan, diffTable did: Int64) throws -> Bool {
        guard let keyPositions = plan.fastKeyPositions else { return false }
        let table = BulkTable(self, plan: plan, diffTable: did)
        let d = Merger.attachedDiff
        func carried(_ position: Int) -> String { BulkTable.carried(plan, position) }
        let alias = DiffFile.rowidAlias(for: plan.remoteDef.columnNames) ?? "rowid"
        let def = plan.info.definition
        let keyMatch = zip(def.primaryKeyColumns, keyPositions).map { "l.\(quoteIdentifier($0)) = +\(carried($1))" }.joined(separator: " AND ")
        // A REAL key is not taken: -0.0 and 0.0 are one key to SQLite (and to quote()), and the per-row merge writes
        // the incoming sign over the local one.
        var keyOK = "1"
        for (i, position) in keyPositions.enumerated() {
            if let natural = plan.keyAffinities[i].naturalTypeof { keyOK += " AND typeof(\(carried(position))) = '\(natural)'" }
            keyOK += " AND typeof(\(carried(position))) <> 'real'"
        }
        let s = try table.statement(self, """
            SELECT count(*), sum(NOT key_ok), sum(here OR (op = 'upsert' COLLATE BINARY AND coalesce(is_new, 0)))
            FROM (SELECT r.op AS op, (\(table.isNew)) AS is_new, (\(keyOK)) AS key_ok,
                         EXISTS (SELECT 1 FROM main.\(quoteIdentifier(def.name)) AS l WHERE \(keyMatch)) AS here
                  FROM \(d).rtsync_rows AS r NOT INDEXED JOIN \(d).\(quoteIdentifier(plan.remoteDef.name)) AS c NOT INDEXED ON c.\(alias) = r.rid
                  WHERE r.tid = \(did) ORDER BY r.rowid LIMIT 64)
            """)
        guard try s.step(), let rows = s.column(0).int64, rows > 0 else { return false }
        return s.column(1).int64 == 0 && (s.column(2).int64 ?? 0) * 2 >= rows
    }

    /// Merges the rows of one carried table that are new here (written as `bulkInsert` writes them) or updates or
    /// deletes of rows this device has that the per-row merge would settle without a conflict entry or any other
    /// decision of its own, and returns the rows (by `DiffRow.ordinal`) it leaves to the per-row merge; nil, having
    /// written nothing, when the per-row merge must take the whole table.
    ///
    /// What the per-row merge does for such a row, done here for all of them at once:
    /// - an update (same incarnation: the born clocks are equal) takes each changed column whose incoming
    ///   clock (its cell clock, else the row's) is later than the local one (the column's recorded clock, else the
    ///   row's born clock), compared by clock then site bytes, as `Clock` does; it records the incoming clock of
    ///   each column taken, and counts the row as updated when a value it takes differs (by storage class and
    ///   bytes) from the local one;
    /// - a delete (of this incarnation or a later one) deletes the row, keeps a tombstone with the later born
    ///   clock and the delete's clock, and drops the row's column clocks.
    ///
    /// A row is left to the per-row merge when it would log a conflict (a local value the author had not seen is
    /// overwritten or deleted, or an older incoming value differs from the local one), when two texts differ in
    /// bytes but not as Swift compares them (non-ASCII or invalid UTF-8), when a clock tie is told apart by a local
    /// site with non-ASCII text, when the key has an unexported local change or a read-only share, when a delete
    /// carries cell clocks, and for every other case (a missing row, a tombstone, another incarnation, a new row or
    /// a written reference in a table with foreign keys). Keys are independent in the tables taken here (no write of a
    /// UNIQUE column, no trigger, foreign keys only to tables the diff does not carry), so the other rows may be
    /// merged first. The whole table goes to the per-row merge when the local key is stored in other bytes than
    /// the incoming one (a NOCASE key, another storage class), when a key is in the diff twice, when the diff's
    /// sites are not ASCII, when rows are left and the key does not compare by bytes, and, in a table with UNIQUE
    /// constraints, when a row writes one of their columns or an upsert would be left to the per-row merge.
    mutating func mergeKnownRowsInBulk(_ plan: TablePlan, diffTable did: Int64, upserts: Int, deletes: Int) throws -> Set<Int64>? {
        let info = plan.info, def = info.definition, tid = info.table.id
        guard let keyPositions = plan.fastKeyPositions else { return nil }
        let table = BulkTable(self, plan: plan, diffTable: did)
        let d = Merger.attachedDiff
        let remoteNames = plan.remoteDef.columnNames
        func carried(_ position: Int) -> String { BulkTable.carried(plan, position) }
        let localTable = "main." + quoteIdentifier(def.name)
        let alias = DiffFile.rowidAlias(for: remoteNames) ?? "rowid"
        let keyColumns = def.primaryKeyColumns
        // The local row with the incoming key, found as the per-row merge finds it (the local columns' affinity
        // and collation; `+` leaves the diff's column without an affinity of its own, as a bound value is).
        let keyMatch = zip(keyColumns, keyPositions).map { "l.\(quoteIdentifier($0)) = +\(carried($1))" }.joined(separator: " AND ")

        // A key with an unexported local change or a read-only share: that row goes to the per-row merge.
        var held: [String] = []
        if pending.keys.contains(where: { $0.tid == tid }) { held.append("\(table.keyText) IN (SELECT pk FROM main.rtsync_changes WHERE tid = \(tid))") }
        if readOnlyShares.contains(where: { $0.tid == tid }) {
            held.append("\(table.keyText) IN (SELECT pk FROM main.rtsync_shares WHERE tid = \(tid) AND to_user = ?2 AND permission = 'read-only')")
        }

        // The carried columns by local position, and each distinct `changed` list as a mask of them.
        let localColumns = def.columnNames
        var positionOfLocal: [Int: Int] = [:]
        for (i, c) in localColumns.enumerated() {
            if let p = plan.allPositions.first(where: { plan.localName[plan.remoteLower[$0]] == c }) { positionOfLocal[i] = p }
        }
        var masks: [(text: String, mask: Int64)] = []
        let carriedMask = positionOfLocal.keys.reduce(Int64(0)) { $0 | (1 << Int64($1)) }
        let distinct = try db.prepare("SELECT DISTINCT changed COLLATE BINARY FROM \(d).rtsync_rows NOT INDEXED WHERE tid = ? AND op = 'upsert' COLLATE BINARY AND changed IS NOT NULL LIMIT 65")
        try distinct.bind([.integer(did)])
        while try distinct.step() {
            guard case .text(let text) = distinct.column(0), let names = try? JSONDecoder().decode([String].self, from: Data(text.utf8)) else { return nil }
            var mask: Int64 = 0
            for name in names {
                guard let local = plan.localName[name.lowercased()], let i = localColumns.firstIndex(of: local) else { continue }
                mask |= 1 << Int64(i)
            }
            masks.append((text, mask))
        }
        guard masks.count <= 64 else { return nil }
        // Text with a character of more than one byte, or a NUL: two such texts may differ in bytes and yet be equal
        // as Swift compares them (canonical equivalence), and one may equal an ASCII text that way (K and the Kelvin
        // sign), or sort elsewhere. Invalid UTF-8 (lone bytes, counted as characters) decodes to U+FFFD, which no ASCII
        // text equals; incoming text is valid UTF-8 (the reader checks it), and the sites it is compared with are ASCII.
        func nonASCII(_ x: String) -> String { "(length(\(x)) <> length(CAST(\(x) AS BLOB)))" }
        // One scan of the table's rows: whether some upsert carries the whole row, and whether a row's clocks name a
        // site that is not ASCII (ordered by bytes in SQL, as Swift strings by the per-row merge: the table goes to it).
        let scan = try db.rows("""
            SELECT max(op = 'upsert' COLLATE BINARY AND changed IS NULL), max(\(nonASCII("site")) OR \(nonASCII("born_site")))
            FROM \(d).rtsync_rows NOT INDEXED WHERE tid = ?
            """, [.integer(did)])
        guard scan.first?[1].int64 != 1 else { return nil }
        let wholeRows = upserts > 0 && scan.first?[0].int64 == 1
        // A table with UNIQUE constraints (on plain columns: `knownRowsMayBeMergedInBulk`): a write of one of their
        // columns may make a collision, which the per-row merge settles in file order (the row born later loses and is
        // deleted). So no update may write one (a diff where some row does leaves the table to the per-row merge, and so
        // does a whole row, `changed` NULL, of a row here: class 0 below), and an upsert the per-row merge would have to decide (another incarnation, a tombstone,
        // a local change: it may insert or write the whole row) sends the whole table to it (class 0 below). Known
        // updates with a conflict to log and deletes may still be left to it one by one: they write no such column.
        // New rows are inserted as a set before any other write, against every row here (none moved, none deleted
        // yet): when they collide with nothing then, they collide with nothing in file order either; when they do,
        // the insert fails and the per-row merge takes the table.
        guard let unique = try uniqueColumns(of: def.name) else { return nil }
        let uniqueMask = localColumns.indices.filter { unique.contains(localColumns[$0].lowercased()) }.reduce(Int64(0)) { $0 | (1 << Int64($1)) }
        if uniqueMask != 0, masks.contains(where: { $0.mask & uniqueMask != 0 }) { return nil }
        let leftUpsert = uniqueMask != 0 ? 0 : 4
        let newRowClass = plan.hasDeleteActions ? leftUpsert : 1
        let wholeKnownRow = uniqueMask != 0 ? "WHEN op = 'upsert' COLLATE BINARY AND here AND whole THEN 0" : ""
        // A table with foreign keys of its own: an update that writes none of their columns cannot break or settle a
        // reference (the per-row merge acts on a reference to a parent deleted here only when it writes the
        // reference). New rows, whole rows (`changed` NULL) and updates of a referencing column can: each such row
        // goes to the per-row merge (`fkRow` below), and those columns are no candidates.
        let referencing = Set(def.foreignKeys.flatMap { $0.columns.map { $0.lowercased() } })
        let referencingMask = localColumns.indices.filter { referencing.contains(localColumns[$0].lowercased()) }.reduce(Int64(0)) { $0 | (1 << Int64($1)) }
        let anyChanged = masks.reduce(Int64(0)) { $0 | $1.mask } | (wholeRows && !plan.hasDeleteActions ? carriedMask : 0)
        // Columns some row may take (changed, or every carried column for a row with `changed` NULL).
        let candidates = localColumns.indices.filter { anyChanged & ~referencingMask & ~uniqueMask & (1 << Int64($0)) != 0 && positionOfLocal[$0] != nil }
        let fkRow = plan.hasDeleteActions ? "WHEN op = 'upsert' COLLATE BINARY AND (whole OR chm & \(referencingMask) <> 0) THEN \(leftUpsert)" : ""

        // Parameters: ?1 author site, ?2 author user, ?3 own site, ?4 published clock, ?5 `seen` as JSON, then
        // the `changed` texts.
        let seen = Dictionary(uniqueKeysWithValues: meta.seen.map { ($0.key, $0.value) })
        let seenJSON = String(decoding: (try? JSONEncoder().encode(seen)) ?? Data("{}".utf8), as: UTF8.self)
        var arguments: [SQLValue] = [.text(meta.authorSite), .text(meta.authorUser), .text(ownSite), .integer(publishedHLC), .text(seenJSON)]
        // `isConcurrent` of a local clock: the author had not seen it (a site that is not ASCII: undecided, 1).
        // Each test inside a CASE, so that SQLite evaluates the costly ones (a lookup in `seen`) only when needed.
        func concurrent(_ h: String, _ s: String) -> String {
            "(CASE WHEN \(s) = ?1 THEN 0 WHEN \(nonASCII(s)) THEN 1 WHEN \(h) = 0 AND \(s) = '' THEN 0 WHEN \(s) = ?3 AND \(h) > ?4 THEN 1 "
                + "ELSE coalesce((SELECT value FROM json_each(?5) WHERE key = \(s)), 0) < \(h) END)"
        }
        var maskCases = "CASE WHEN r.changed IS NULL THEN \(carriedMask)"
        for (i, m) in masks.enumerated() {
            arguments.append(.text(m.text))
            maskCases += " WHEN r.changed = ?\(6 + i) COLLATE BINARY THEN \(m.mask)"
        }
        // Every upsert's list is one of these texts: they were read from the same rows by bytes (`DISTINCT … COLLATE
        // BINARY`; a declared collation once folded two spellings into one, and the rows of the other matched none),
        // all TEXT, at most 64, and each is compared by bytes here.
        maskCases += " ELSE 0 END"

        // Level 1: each row of the table with its local row, bookkeeping and the recorded clocks of candidates.
        // The local key must be stored as the incoming one is (same storage class and bytes, so the same key text).
        let keySame = zip(keyColumns, keyPositions).map { "(typeof(l.\(quoteIdentifier($0))) = typeof(+\(carried($1))) AND l.\(quoteIdentifier($0)) IS +\(carried($1)) COLLATE BINARY)" }.joined(separator: " AND ")
        // A rowid table's rows are updated by rowid (one lookup instead of the key's index and then the rowid).
        let localRowid = def.withoutRowID ? nil : DiffFile.rowidAlias(for: localColumns)
        var level1 = ["r.rowid AS ord", "r.rid AS rid", "r.op AS op", "\(table.keyText) AS pk", "r.hlc AS rh", "coalesce(r.site, ?1) AS rs",
                      "r.born AS bh", "coalesce(r.born_site, ?1) AS bs", "\(maskCases) AS chm", "(r.changed IS NULL) AS whole",
                      "(l.\(quoteIdentifier(keyColumns[0])) IS NOT NULL) AS here", "(\(keySame)) AS keysame",
                      "(m.tid IS NOT NULL) AS hasmeta", "m.born_hlc AS mbh", "m.born_site AS mbs",
                      localRowid.map { "l.\($0) AS lr" } ?? "NULL AS lr"]
        // A REAL key is not taken: -0.0 and 0.0 are one key to SQLite (and to quote()), and the per-row merge writes
        // the incoming sign over the local one.
        var keyOK = "1"
        for (i, position) in keyPositions.enumerated() {
            if let natural = plan.keyAffinities[i].naturalTypeof { keyOK += " AND typeof(\(carried(position))) = '\(natural)'" }
            keyOK += " AND typeof(\(carried(position))) <> 'real'"
        }
        level1.append("(\(keyOK)) AS keyok")
        level1.append("(\(table.isNew)) AS isnew")
        let names = localColumns.map { SQLValue.text($0).sqlLiteral }.joined(separator: ", ")
        // A clock recorded under a name that is not exactly a column's (another spelling, a dropped column).
        level1.append("EXISTS (SELECT 1 FROM main.rtsync_clocks x WHERE x.tid = \(tid) AND x.pk = \(table.keyText) AND x.col NOT IN (\(names))) AS stray")
        // Cell clocks: a changed column's own clock, where it differs from the row's. The per-row merge finds a
        // column's by comparing names lower-cased as Swift does; each spelling in the file is matched to the column
        // here the same way. A delete's cells are not expected (exports write none): such a row goes to the per-row merge.
        let cells = Merger.diffCellsTable
        var cellNames: [Int: [String]] = [:]
        if reader.hasCellClocks {
            if try db.scalar("SELECT 1 FROM \(cells) WHERE tid = ? AND \(nonASCII("site")) LIMIT 1", [.integer(did)]) != nil { return nil }
            for r in try db.rows("SELECT DISTINCT col FROM \(cells) WHERE tid = ?", [.integer(did)]) {
                guard let name = r[0].string, let i = candidates.first(where: { localColumns[$0].lowercased() == name.lowercased() }) else { continue }
                cellNames[i, default: []].append(name)
            }
        }
        func cellMatch(_ i: Int, _ alias: String) -> String { "\(alias).col IN (" + cellNames[i, default: []].map { SQLValue.text($0).sqlLiteral }.joined(separator: ", ") + ")" }
        level1.append(held.isEmpty ? "0 AS held" : "(" + held.joined(separator: " OR ") + ") AS held")
        level1.append(reader.hasCellClocks ? "(r.op <> 'upsert' COLLATE BINARY AND EXISTS (SELECT 1 FROM \(cells) AS x WHERE x.tid = r.tid AND x.rid = r.rid)) AS cells" : "0 AS cells")
        var joins = ""
        for i in candidates {
            let p = positionOfLocal[i]!
            level1 += ["l.\(quoteIdentifier(localColumns[i])) AS lv\(i)", "\(carried(p)) AS rv\(i)", "k\(i).hlc AS kh\(i)", "k\(i).site AS ks\(i)"]
            joins += " LEFT JOIN main.rtsync_clocks AS k\(i) ON k\(i).tid = \(tid) AND k\(i).pk = \(table.keyText) AND k\(i).col = \(SQLValue.text(localColumns[i]).sqlLiteral)"
            if cellNames[i] != nil {
                level1 += ["e\(i).hlc AS eh\(i)", "e\(i).site AS es\(i)"]
                joins += " LEFT JOIN \(cells) AS e\(i) ON e\(i).tid = r.tid AND e\(i).rid = r.rid AND \(cellMatch(i, "e\(i)"))"
            }
        }
        let from1 = "FROM \(d).rtsync_rows AS r NOT INDEXED JOIN \(d).\(quoteIdentifier(plan.remoteDef.name)) AS c NOT INDEXED ON c.\(alias) = r.rid "
            + "LEFT JOIN \(localTable) AS l ON \(keyMatch) "
            + "LEFT JOIN main.rtsync_rows AS m ON m.tid = \(tid) AND m.pk = \(table.keyText)" + joins
            + " WHERE r.tid = \(did)"

        // Level 2: per candidate column, what the per-row merge decides for an update, as two bits of a word
        // (31 candidates to a word), each column's tests evaluated once: T, the column is taken (the incoming clock
        // is later); D, the values differ. T and D: taken, the row counts as updated; T alone: taken, same value;
        // D alone: the per-row merge would log a conflict (a value the author had not seen overwritten, ambiguous
        // text, or an older incoming value that differs), so that row goes to the per-row merge.
        let perWord = 31
        let wordCount = (candidates.count + perWord - 1) / perWord
        /// Where candidate `j`'s two bits are: its word, and the shift of its T bit in it.
        func slot(_ j: Int) -> (word: Int, shift: Int) { (j / perWord, 2 * (j % perWord)) }
        var words = Array(repeating: [String](), count: wordCount)
        for (j, i) in candidates.enumerated() {
            let lh = "coalesce(kh\(i), mbh)", ls = "(CASE WHEN kh\(i) IS NULL THEN mbs ELSE ks\(i) END)"
            // The incoming clock of this column: its cell clock (a NULL site is the author's), else the row's.
            let rh = cellNames[i] == nil ? "rh" : "coalesce(eh\(i), rh)"
            let rs = cellNames[i] == nil ? "rs" : "(CASE WHEN eh\(i) IS NULL THEN rs ELSE coalesce(es\(i), ?1) END)"
            let later = "(\(rh) > \(lh) OR (\(rh) = \(lh) AND \(rs) > \(ls)))"
            let earlier = "(\(rh) < \(lh) OR (\(rh) = \(lh) AND \(rs) < \(ls)))"
            let same = "(typeof(lv\(i)) = typeof(rv\(i)) AND lv\(i) IS rv\(i) COLLATE BINARY)"
            let ambiguous = "(typeof(lv\(i)) = 'text' AND typeof(rv\(i)) = 'text' AND (\(nonASCII("lv\(i)")) OR \(nonASCII("rv\(i)"))))"
            // The same value: taken (its clock recorded) when the incoming clock is later; a tie of clocks told apart
            // by a local site that is not ASCII is left to the per-row merge.
            let code = "(CASE WHEN NOT (chm >> \(i) & 1) THEN 0 WHEN \(same) THEN (CASE WHEN \(rh) = \(lh) AND \(nonASCII(ls)) THEN 2 WHEN \(later) THEN 1 ELSE 0 END) "
                + "WHEN \(later) THEN (CASE WHEN \(ambiguous) THEN 2 WHEN \(concurrent(lh, ls)) THEN 2 ELSE 3 END) WHEN \(earlier) THEN 2 ELSE 0 END)"
            let (word, shift) = slot(j)
            words[word].append(shift == 0 ? code : "(\(code) << \(shift))")
        }
        let wordColumns = (0..<wordCount).map { "w\($0)" }
        // The T bits and the D bits of a word, each moved to the even positions.
        let evenBits = Int64(0x1555_5555_5555_5555)
        func taken(_ w: String) -> String { "(\(w) & \(evenBits))" }
        func differs(_ w: String) -> String { "(\(w) >> 1 & \(evenBits))" }
        func updatedRow(_ s: String) -> String {
            wordColumns.isEmpty ? "0" : "(" + wordColumns.map { "\(taken(s + $0)) & \(differs(s + $0)) <> 0" }.joined(separator: " OR ") + ")"
        }
        let conflicted = wordColumns.isEmpty ? "0" : "(" + wordColumns.map { "\(differs($0)) & ~\(taken($0)) <> 0" }.joined(separator: " OR ") + ")"
        let nonKey = localColumns.filter { c in !keyColumns.contains(c) }.map { SQLValue.text($0).sqlLiteral }.joined(separator: ", ")
        let localBornH = "coalesce(mbh, 0)", localBornS = "coalesce(mbs, '')"
        // A delete logs every non-key column whose local clock the author had not seen.
        let deleteLogs = nonKey.isEmpty ? "0" : """
            (CASE WHEN EXISTS (SELECT 1 FROM main.rtsync_clocks y WHERE y.tid = \(tid) AND y.pk = q.pk AND y.col IN (\(nonKey)) AND \(concurrent("y.hlc", "y.site"))) THEN 1
                  WHEN \(concurrent(localBornH, localBornS)) THEN (SELECT count(*) FROM main.rtsync_clocks y WHERE y.tid = \(tid) AND y.pk = q.pk AND y.col IN (\(nonKey))) < \(localColumns.count - keyColumns.count)
                  ELSE 0 END)
            """
        let knownUpdate = "here AND hasmeta AND mbh = bh AND mbs = bs COLLATE BINARY"
        let knownDelete = "CASE WHEN NOT here THEN 0 WHEN bh < \(localBornH) OR (bh = \(localBornH) AND (bs < \(localBornS) OR \(nonASCII(localBornS)))) THEN 0 "
            + "ELSE NOT \(deleteLogs) END"
        // 1 new row, 2 known update, 3 known delete; 4 a row for the per-row merge (a tombstone, another incarnation,
        // a local change, a conflict to log, …): keys are independent here (no write of a UNIQUE or referencing column
        // in a set, no trigger, each key once), so the other rows may be merged as a set. 0 sends the whole table to the per-row merge: a key
        // that the per-row merge would convert, or that names a local row stored in other bytes (a NOCASE key), might
        // name the same row as another key of the diff.
        let cls = """
            CASE WHEN NOT keyok THEN 0 WHEN here AND NOT keysame THEN 0
                 WHEN cells OR stray OR held THEN \(leftUpsert == 4 ? "4" : "(CASE WHEN op = 'upsert' COLLATE BINARY THEN \(leftUpsert) ELSE 4 END)") \(fkRow) \(wholeKnownRow)
                 WHEN op = 'upsert' COLLATE BINARY THEN CASE WHEN NOT here THEN (CASE WHEN NOT hasmeta AND coalesce(isnew, 0) THEN \(newRowClass) ELSE \(leftUpsert) END)
                                                             WHEN (\(knownUpdate)) THEN 2 ELSE \(leftUpsert) END
                 WHEN op = 'delete' COLLATE BINARY AND \(deletes > 0 ? "1" : "0") THEN CASE WHEN (\(knownDelete)) THEN 3 ELSE 4 END
                 ELSE 0 END
            """
        // The words only matter for rows classified 2 (a known update); other upserts of a local row get them too.
        let wordValues = words.map { "(CASE WHEN op = 'upsert' COLLATE BINARY AND here THEN " + $0.joined(separator: " | ") + " ELSE 0 END)" }

        let known = Merger.knownRowsTable
        try db.execute("DROP TABLE IF EXISTS \(known)")
        try db.execute("CREATE TABLE \(known)(ord INTEGER PRIMARY KEY, rid INTEGER, pk TEXT, cls INTEGER, lr INTEGER, rh INTEGER, rs TEXT, bh INTEGER, bs TEXT"
                       + wordColumns.map { ", \($0) INTEGER" }.joined() + ")")
        defer { try? db.execute("DROP TABLE IF EXISTS \(known)") }
        func run(_ sql: String) throws -> Int {
            let s = try db.prepare(sql)
            try s.bind(Array(arguments.prefix(s.parameterCount)))
            try s.runBound()
            return db.changes
        }
        _ = try run("""
            INSERT INTO \(known)(ord, rid, pk, cls, lr, rh, rs, bh, bs\(wordColumns.map { ", " + $0 }.joined()))
            SELECT ord, rid, pk, \(cls), lr, rh, rs, bh, bs\(wordValues.map { ", " + $0 }.joined())
            FROM (SELECT \(level1.joined(separator: ", ")) \(from1)) AS q
            """)
        // Every row classified, each key once: otherwise the per-row merge takes the table. A known update that
        // would log a conflict is left to the per-row merge, as rows classified 4 are.
        let summary = try db.rows("""
            SELECT count(*), count(DISTINCT pk), sum(cls = 0), sum(cls = 1), sum(cls = 2 AND NOT \(conflicted) AND \(updatedRow(""))),
                   sum(cls = 2 AND NOT \(conflicted)), sum(cls = 3), sum(cls = 2 AND \(conflicted)), sum(cls = 4) FROM \(known)
            """)[0]
        guard summary[0].int64 == Int64(upserts + deletes), summary[1] == summary[0], summary[2].int64 == 0 else { return nil }
        let newRows = Int(summary[3].int64 ?? 0), changedRows = Int(summary[4].int64 ?? 0)
        let knownUpserts = Int(summary[5].int64 ?? 0), deletedRows = Int(summary[6].int64 ?? 0)
        let conflictedRows = Int(summary[7].int64 ?? 0), leftRows = conflictedRows + Int(summary[8].int64 ?? 0)
        // Nothing for the set path: the per-row merge takes the table. Rows are left to it one by one only when the
        // key compares by bytes (no NOCASE or RTRIM key column): two keys of the diff equal only under the key's
        // collation name one row, and must meet it in file order.
        guard leftRows < upserts + deletes else { return nil }
        if leftRows > 0, try db.scalar("""
            SELECT 1 FROM pragma_index_list(?, 'main') AS il, pragma_index_xinfo(il.name, 'main') AS x
            WHERE il.origin = 'pk' AND x.key = 1 AND x.coll <> 'BINARY' COLLATE NOCASE LIMIT 1
            """, [.text(def.name)]) != nil || keyColumnsCompareOtherThanByBytes(def) { return nil }
        if conflictedRows > 0 { _ = try run("UPDATE \(known) SET cls = 4 WHERE cls = 2 AND \(conflicted)") }
        var left = Set<Int64>()
        if leftRows > 0 {
            for r in try db.rows("SELECT ord FROM \(known) WHERE cls = 4") { if let ord = r[0].int64 { left.insert(ord) } }
        }

        let before = (report, bulkRows)
        try db.execute("SAVEPOINT rtsync_bulk_known")
        var failure: Error?
        do {
            var written = true
            if newRows > 0 {
                let fresh = BulkTable(self, plan: plan, diffTable: did, only: "r.rowid IN (SELECT ord FROM \(known) WHERE cls = 1)")
                written = try bulkInsert(fresh, upserts: newRows)
                // Counted with the known rows: `bulkRows` counts tables written as wholly new.
                if written { bulkRows -= newRows }
            }
            if written, changedRows > 0 {
                let sets = candidates.enumerated().filter { !keyColumns.contains(localColumns[$0.element]) }.map { j, i -> String in
                    let column = quoteIdentifier(localColumns[i])
                    return "\(column) = CASE WHEN s.w\(slot(j).word) >> \(slot(j).shift) & 1 THEN \(carried(positionOfLocal[i]!)) ELSE l.\(column) END"
                }
                if !sets.isEmpty {
                    let local = localRowid.map { "l.\($0) = s.lr" } ?? keyMatch
                    let n = try run("UPDATE OR ABORT \(localTable) AS l SET \(sets.joined(separator: ", ")) FROM \(known) AS s JOIN \(d).\(quoteIdentifier(plan.remoteDef.name)) AS c NOT INDEXED ON c.\(alias) = s.rid WHERE s.cls = 2 AND \(updatedRow("s.")) AND \(local)")
                    written = n == changedRows
                } else {
                    written = false
                }
            }
            if written, knownUpserts > 0, !candidates.isEmpty {
                // One statement for every column, in the b-tree's key order (each key and column once: the summary
                // above showed each key once): about half the time of one statement per column in file order.
                let columns = candidates.enumerated().map { j, i in
                    "SELECT \(i) AS i, \(slot(j).word) AS w, \(slot(j).shift) AS b, \(SQLValue.text(localColumns[i]).sqlLiteral) AS col"
                }.joined(separator: " UNION ALL ")
                let word = wordCount == 1 ? "s.w0" : "(CASE x.w " + wordColumns.indices.map { "WHEN \($0) THEN s.w\($0) " }.joined() + "END)"
                // Each taken column gets its incoming clock: its cell clock, else the row's.
                var clock = "s.rh, s.rs", cellJoin = ""
                if !cellNames.isEmpty {
                    let which = "CASE x.i " + cellNames.keys.sorted().map { "WHEN \($0) THEN \(cellMatch($0, "e")) " }.joined() + "ELSE 0 END"
                    cellJoin = " LEFT JOIN \(cells) AS e ON e.tid = \(did) AND e.rid = s.rid AND (\(which))"
                    clock = "coalesce(e.hlc, s.rh), CASE WHEN e.hlc IS NULL THEN s.rs ELSE coalesce(e.site, ?1) END"
                }
                _ = try run("""
                    INSERT INTO main.rtsync_clocks(tid, pk, col, hlc, site) SELECT \(tid), s.pk, x.col, \(clock) FROM \(known) AS s JOIN (\(columns)) AS x\(cellJoin)
                    WHERE s.cls = 2 AND \(word) >> x.b & 1 ORDER BY s.pk, x.col
                    ON CONFLICT(tid, pk, col) DO UPDATE SET hlc = excluded.hlc, site = excluded.site
                    """)
            }
            if written, deletedRows > 0 {
                let n: Int
                if let localRowid {
                    n = try run("DELETE FROM \(localTable) WHERE \(localRowid) IN (SELECT lr FROM \(known) WHERE cls = 3)")
                } else {
                    let keys = keyColumns.map { "l.\(quoteIdentifier($0))" }.joined(separator: ", ")
                    let incoming = keyPositions.map { "+" + carried($0) }.joined(separator: ", ")
                    n = try run("DELETE FROM \(localTable) AS l WHERE (\(keys)) IN (SELECT \(incoming) FROM \(known) AS s JOIN \(d).\(quoteIdentifier(plan.remoteDef.name)) AS c NOT INDEXED ON c.\(alias) = s.rid WHERE s.cls = 3)")
                }
                written = n == deletedRows
                if written {
                    // The tombstone keeps the later of the local and the incoming born clocks.
                    let laterBorn = "born_hlc > excluded.born_hlc OR (born_hlc = excluded.born_hlc AND born_site > excluded.born_site)"
                    _ = try run("""
                        INSERT INTO main.rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) SELECT \(tid), pk, bh, bs, rh, rs FROM \(known) WHERE cls = 3 ORDER BY pk
                        ON CONFLICT(tid, pk) DO UPDATE SET del_hlc = excluded.del_hlc, del_site = excluded.del_site,
                            born_hlc = CASE WHEN \(laterBorn) THEN born_hlc ELSE excluded.born_hlc END,
                            born_site = CASE WHEN \(laterBorn) THEN born_site ELSE excluded.born_site END
                        """)
                    _ = try run("DELETE FROM main.rtsync_clocks WHERE tid = \(tid) AND pk IN (SELECT pk FROM \(known) WHERE cls = 3)")
                }
            }
            if written {
                try db.execute("RELEASE rtsync_bulk_known")
                report.updated += changedRows
                report.deleted += deletedRows
                bulkKnownRows += newRows + knownUpserts + deletedRows
                return left
            }
        } catch let error as SQLiteError {
            // A NOT NULL or CHECK constraint, a value of the wrong type: the per-row merge meets the same row and decides.
            failure = error
        }
        do { try db.execute("ROLLBACK TO rtsync_bulk_known; RELEASE rtsync_bulk_known") } catch { throw failure ?? error }
        (report, bulkRows) = before
        return nil
    }
}
