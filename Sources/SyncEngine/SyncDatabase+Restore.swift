import Crypto
import DiffFormat
import Foundation
import RTSQLite

// MARK: - What a restore means for the other devices

// A restored database is an older copy of this device. It rejoins as a new site (a copy must not reuse the site id
// and sequence numbers the device went on using after the backup) and remembers the old site in `rtsync_retired`:
// - its changes not exported when the backup was made keep the clocks of when they were made, so later edits made
//   elsewhere win over them as they would have;
// - diffs it had applied after the backup are applied again from the bucket; those compaction has pruned since are
//   caught up from the user's newest database in the bucket (`<user>/backups/`), merged as a state diff (each row
//   with its birth and column clocks, each deleted row as a delete), so a row in a pruned diff comes back and a row
//   deleted in one is deleted;
// - the old site's cursor is removed from `<user>/devices/` once the new one is published, so it no longer holds
//   back compaction.

/// A site this database used before it was restored from a backup.
public struct RetiredSite: Sendable, Codable, Equatable {
    /// The old site id.
    public var site: String
    /// When it was retired.
    public var retiredAt: String
    /// Whether the next sync must catch up from the bucket's newest database (diffs may have been pruned).
    public var catchUp: Bool
    /// Whether the old site's cursor has been removed from the bucket.
    public var cursorRemoved: Bool
}

extension SyncDatabase {
    static let retiredTableSQL = "CREATE TABLE IF NOT EXISTS rtsync_retired(site TEXT PRIMARY KEY, retired_at TEXT NOT NULL, catch_up INTEGER NOT NULL DEFAULT 0, cursor_removed INTEGER NOT NULL DEFAULT 0)"

    /// Gives the database a new site id (and sequence numbers from 1). After a restore (`afterRestore`) the old
    /// id is remembered as retired (its cursor is removed once the new one is published) and the next sync catches
    /// up from the bucket. Returns the new id.
    @discardableResult
    public func regenerateSiteID(afterRestore: Bool = false) throws -> String {
        try locked {
            try requireTracked()
            return try db.transaction { try Self.retireSite(db, afterRestore: afterRestore) }
        }
    }

    /// Inside the caller's transaction: a new site id for the database on `db`, the old one recorded as retired.
    static func retireSite(_ db: Connection, afterRestore: Bool) throws -> String {
        try db.execute(retiredTableSQL)
        let old = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
        let id = KSUID.generate().string
        // Only a restore retires the old site: it was this device's. A copy made for a new device (init from the
        // bucket) or a demo reset leaves it alone: there it is another live device's, whose cursor must stay.
        if afterRestore, !old.isEmpty {
            try db.execute("INSERT OR REPLACE INTO rtsync_retired(site, retired_at, catch_up) VALUES (?, ?, 1)",
                           [.text(old), .text(ISO8601.format(Date(), fractional: true))])
        }
        // What the old site published (its changes not yet exported were exported as its own just before) is what
        // the new site has seen of it: the new site's edits of those values are made knowing them, not concurrently.
        // A claim no larger than the old site's published clock is honest even where the old site lives on (a copy).
        if !old.isEmpty {
            try db.execute("""
                INSERT INTO rtsync_seen(site, hlc) SELECT site_id, published_hlc FROM rtsync_site WHERE published_hlc > 0
                ON CONFLICT(site) DO UPDATE SET hlc = max(hlc, excluded.hlc)
                """)
        }
        try db.execute("UPDATE rtsync_site SET site_id = ?, diff_seq = 0", [.text(id)])
        return id
    }

    /// The sites this database used before it was restored, oldest first.
    public func retiredSites() throws -> [RetiredSite] {
        try locked {
            guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_retired'") != nil else { return [] }
            return try db.rows("SELECT site, retired_at, catch_up, cursor_removed FROM rtsync_retired ORDER BY retired_at").map {
                RetiredSite(site: $0[0].string ?? "", retiredAt: $0[1].string ?? "", catchUp: $0[2].int64 == 1, cursorRemoved: $0[3].int64 == 1)
            }
        }
    }

    /// Whether a restore, or a start from a database in the bucket other than the last compaction's snapshot,
    /// left this database to catch up from the bucket at the next sync.
    public func needsCatchUp() throws -> Bool {
        if try retiredSites().contains(where: { $0.catchUp }) { return true }
        return try locked { try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_catch_up'") != nil && db.scalar("SELECT 1 FROM rtsync_catch_up") != nil }
    }

    /// Marks the database to catch up from the last compaction's snapshot at the next sync (it started from
    /// another database of the user's in the bucket, which may lack diffs compaction pruned).
    public func markCatchUpPending() throws {
        try locked {
            try db.execute("CREATE TABLE IF NOT EXISTS rtsync_catch_up(id INTEGER PRIMARY KEY CHECK (id = 1))")
            try db.execute("INSERT OR IGNORE INTO rtsync_catch_up(id) VALUES (1)")
        }
    }

    /// Whether this site's cursor has reached the bucket (`recordCursorPublished()`): until it has, no compaction
    /// waits for this device, so one may have pruned diffs it never applied.
    public func cursorPublished() throws -> Bool {
        try locked {
            try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_cursor_published'") != nil
                && db.scalar("SELECT 1 FROM rtsync_cursor_published WHERE site = (SELECT site_id FROM rtsync_site)") != nil
        }
    }

    /// Records that this site's cursor is in the bucket (a copy of this database has another site id, so it does not
    /// inherit the record).
    public func recordCursorPublished() throws {
        try locked {
            try db.execute("CREATE TABLE IF NOT EXISTS rtsync_cursor_published(site TEXT PRIMARY KEY) WITHOUT ROWID")
            try db.execute("INSERT OR IGNORE INTO rtsync_cursor_published(site) SELECT site_id FROM rtsync_site")
        }
    }

    /// Clears the catch-up mark (nothing in the bucket to catch up from).
    func clearCatchUp() throws {
        try locked {
            if try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_retired'") != nil { try db.execute("UPDATE rtsync_retired SET catch_up = 0") }
            try db.execute("DROP TABLE IF EXISTS rtsync_catch_up")
        }
    }

    /// Records that the old site's cursor is gone from the bucket.
    func markCursorRemoved(site: String) throws {
        try locked { try db.execute("UPDATE rtsync_retired SET cursor_removed = 1 WHERE site = ?", [.text(site)]) }
    }

    /// Merges the user's database `snapshot` (a backup from any of the user's devices) as a state diff, records
    /// the diffs it had applied as applied here, and clears the catch-up mark. Returns the merge's report.
    func catchUp(from snapshot: URL, scratch: URL) throws -> ApplyReport {
        let (diff, applied) = try Self.writeStateDiff(of: snapshot, to: scratch)
        defer { try? FileManager.default.removeItem(at: diff) }
        let report = apply(diff: diff)
        guard report.status == .applied || report.status == .skipped else { return report }
        try locked {
            try db.transaction {
                for a in applied {
                    try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?,?,?,?,?,?,?)",
                                   a + [.text(ISO8601.format(Date(), fractional: true))])
                }
                try Self.copyHeldRows(from: snapshot, into: db)
                if try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_retired'") != nil { try db.execute("UPDATE rtsync_retired SET catch_up = 0") }
                try db.execute("DROP TABLE IF EXISTS rtsync_catch_up")
            }
        }
        return report
    }

    /// Copies the rows `snapshot` holds back (`rtsync_held`, Merger+Hold) that this database does not hold from the
    /// same diff: the diff may be pruned, and the next `applyHeldRows` (every sync) merges them here by their clocks.
    /// Inside the caller's transaction.
    static func copyHeldRows(from snapshot: URL, into db: Connection) throws {
        let s = try Connection(path: DiffReader.immutableURI(for: snapshot.path), mode: .readOnly, uri: true)
        guard try s.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_held'") != nil else { return }
        let held = try s.rows("SELECT id, diff_id, author_user, author_site, seen, tbl, pk, changed, born_hlc, born_site, hlc, site, reason, held_at FROM rtsync_held ORDER BY id")
        guard !held.isEmpty else { return }
        try db.execute(heldTablesSQL)
        for h in held {
            guard try db.scalar("SELECT 1 FROM rtsync_held WHERE diff_id = ? AND tbl = ? COLLATE NOCASE AND pk = ?", [h[1], h[5], h[6]]) == nil else { continue }
            try db.execute("INSERT INTO rtsync_held(diff_id, author_user, author_site, seen, tbl, pk, changed, born_hlc, born_site, hlc, site, reason, held_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           Array(h.dropFirst()))
            let id = db.lastInsertRowID
            for c in try s.rows("SELECT position, col, type, value, hlc, site FROM rtsync_held_cells WHERE held_id = ?", [h[0]]) {
                try db.execute("INSERT INTO rtsync_held_cells(held_id, position, col, type, value, hlc, site) VALUES (?,?,?,?,?,?,?)", [.integer(id)] + c)
            }
        }
    }

    /// Writes the state of a tracked database as one diff: every row of its tracked tables with its birth and
    /// column clocks (unexported changes with the clocks they were made with) and the values it keeps aside for
    /// them, and every deleted row it keeps a tombstone for. Also returns the `rtsync_applied` entries of the diffs it had applied (id, kind, user, site,
    /// first and last sequence number).
    static func writeStateDiff(of snapshot: URL, to directory: URL) throws -> (URL, [[SQLValue]]) {
        let s = try Connection(path: DiffReader.immutableURI(for: snapshot.path), mode: .readOnly, uri: true)
        guard try s.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_site'") != nil else {
            throw SyncEngineError.notTracked(path: snapshot.path)
        }
        let url = try writeState(of: s, to: directory).file
        let applied = try s.rows("SELECT diff_id, kind, author_user, author_site, seq_first, seq_last FROM rtsync_applied")
        return (url, applied)
    }

    /// Writes the state of the tracked database open on `s` as one diff (see `writeStateDiff`): a `snapshot` of every
    /// row, or with `keys` (tracked table id to key texts) a `rollup` of only those rows that names the diffs it
    /// `covers`. The caller keeps `s` in one read transaction. Returns the file and the rows it carries.
    static func writeState(of s: Connection, to directory: URL, keys: [Int64: Set<String>]? = nil, covers: [CoveredDiff]? = nil,
                           signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> (file: URL, rows: Int) {
        let site = try s.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
        let user = try s.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
        var seen: [String: Int64] = [:]
        for r in try s.rows("SELECT site, hlc FROM rtsync_seen") { if let k = r[0].string, let h = r[1].int64 { seen[k] = h } }
        let tracked = try loadTracked(s)
        // Unexported changes, coalesced per row as an export would.
        var pending: [Int64: [String: Merger.PendingLocal]] = [:]
        for r in try s.rows("SELECT tid, pk, op, cols, hlc FROM rtsync_changes ORDER BY seq") {
            guard let tid = r[0].int64, let pk = r[1].string, let op = r[2].int64 else { continue }
            pending[tid, default: [:]][pk, default: Merger.PendingLocal()].record(op: op, mask: r[3], hlc: r[4].int64 ?? 0)
        }
        let writer = try DiffWriter(directory: directory, kind: keys == nil ? .snapshot : .rollup, authorUser: user, authorSite: site, seen: seen,
                                    expectedRows: keys?.values.reduce(0) { $0 + $1.count } ?? 100_000, covers: keys == nil ? nil : covers ?? [])
        do {
            let born = try s.prepare("SELECT born_hlc, born_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
            let clocks = try s.prepare("SELECT col, hlc, site FROM rtsync_clocks WHERE tid = ? AND pk = ?")
            // Values of a newer app version's columns kept aside there go as columns of their own, each row carrying
            // only the ones it has (`changedColumns`), so the receiver keeps them aside (or has the columns).
            let hasAside = try s.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_aside_cols'") != nil
            // Only those of the row's incarnation (`asideOfRowIncarnationSQL`); a snapshot of an earlier version has no
            // incarnation recorded with them.
            let asideBorn = try hasAside && (s.scalar("SELECT 1 FROM pragma_table_info('rtsync_aside') WHERE name = 'born_hlc'")) != nil
            let asideValues = hasAside
                ? try s.prepare("SELECT col, value, hlc, site, \(asideBorn ? "born_hlc, born_site" : "NULL, NULL") FROM rtsync_aside WHERE tid = ? AND pk = ?") : nil
            func own(_ hlc: Int64) -> Clock { Clock(hlc: HLC(rawValue: hlc), site: site) }
            for info in tracked.values.sorted(by: { $0.table.id < $1.table.id }) {
                let tid = info.table.id
                let only = keys.map { $0[tid] ?? [] }
                if let only, only.isEmpty { continue }
                let local = info.definition
                var def = local
                if hasAside {
                    for r in try s.rows("SELECT col, type FROM rtsync_aside_cols WHERE tid = ? ORDER BY col", [.integer(tid)]) {
                        guard let name = r[0].string, def.columnIndex(name) == nil else { continue }
                        def.columns.append(ColumnDefinition(name: name, type: r[1].string ?? ""))
                    }
                }
                let asideNames = def.columnNames.dropFirst(local.columns.count)
                try writer.addTable(def)
                let keyExpr = try keyExpression(def, row: "o", rowidAlias: try hasRowidAliasKey(s, def), in: s)
                let select = "SELECT \(keyExpr), " + local.columnNames.map { "o." + quoteIdentifier($0) }.joined(separator: ", ") + " FROM " + quoteIdentifier(def.name) + " AS o"
                // A roll-up looks each key up by its columns (and checks the key text, as the values compare by affinity).
                let keyColumns = def.primaryKeyColumns
                let rows = try s.prepare(only == nil ? select
                    : select + " WHERE " + keyColumns.map { "o." + quoteIdentifier($0) + " = ?" }.joined(separator: " AND ") + " AND \(keyExpr) = ?")
                var wanted = only.map { $0.sorted().makeIterator() }
                func nextRow() throws -> Bool {
                    guard wanted != nil else { return try rows.step() }
                    while let pk = wanted!.next() {
                        guard let keyValues = KeyCodec.decode(pk), keyValues.count == keyColumns.count else { continue }
                        rows.reset()
                        try rows.bind(keyValues + [.text(pk)])
                        if try rows.step() { return true }
                    }
                    return false
                }
                while try nextRow() {
                    let all = rows.row()
                    guard let pk = all[0].string else { continue }
                    var values = Array(all.dropFirst())
                    try born.bind([.integer(tid), .text(pk)])
                    var b = try born.step() ? Clock(hlc: HLC(rawValue: born.column(0).int64 ?? 0), site: born.column(1).string ?? "") : Clock.zero
                    born.reset()
                    var perColumn: [String: Clock] = [:]
                    try clocks.bind([.integer(tid), .text(pk)])
                    while try clocks.step() {
                        if let c = clocks.column(0).string, let name = def.columnNames.first(where: { $0.lowercased() == c.lowercased() }) {
                            perColumn[name] = Clock(hlc: HLC(rawValue: clocks.column(1).int64 ?? 0), site: clocks.column(2).string ?? "")
                        }
                    }
                    clocks.reset()
                    if let p = pending[tid]?[pk] {
                        if p.sawInsert { b = own(p.insertHLC); perColumn = [:] }
                        for (position, hlc) in p.columnHLC where position < info.table.columns.count {
                            if let name = def.columnNames.first(where: { $0.lowercased() == info.table.columns[position].lowercased() }) { perColumn[name] = own(hlc) }
                        }
                    }
                    var full: [String: Clock] = [:]
                    for name in local.columnNames { full[name] = perColumn[name] ?? b }
                    var changed: [String]?
                    if let asideValues, !asideNames.isEmpty {
                        var kept: [String: (SQLValue, Clock)] = [:]
                        try asideValues.bind([.integer(tid), .text(pk)])
                        while try asideValues.step() {
                            if let bornHLC = asideValues.column(4).int64,
                               Clock(hlc: HLC(rawValue: bornHLC), site: asideValues.column(5).string ?? "") != b { continue }
                            if let c = asideValues.column(0).string, let name = asideNames.first(where: { $0.lowercased() == c.lowercased() }) {
                                kept[name] = (asideValues.column(1), Clock(hlc: HLC(rawValue: asideValues.column(2).int64 ?? 0), site: asideValues.column(3).string ?? ""))
                            }
                        }
                        asideValues.reset()
                        for name in asideNames {
                            values.append(kept[name]?.0 ?? .null)
                            if let c = kept[name]?.1 { full[name] = c }
                        }
                        if kept.count < asideNames.count { changed = local.columnNames + asideNames.filter { kept[$0] != nil } }
                    }
                    let clock = full.values.max() ?? b
                    try writer.append(RowChange(table: def.name, operation: .upsert, values: values, changedColumns: changed, clock: clock, born: b,
                                                columnClocks: full.filter { $0.value != clock }))
                }
                // Deleted rows: tombstones, and deletes not exported yet.
                var deleted: [String: (born: Clock, clock: Clock)] = [:]
                let tombstoneSQL = "SELECT pk, born_hlc, born_site, del_hlc, del_site FROM rtsync_rows WHERE tid = ? AND del_hlc IS NOT NULL"
                let tombstones: [[SQLValue]]
                if let only {
                    let one = try s.prepare(tombstoneSQL + " AND pk = ?")
                    tombstones = try only.sorted().flatMap { pk -> [[SQLValue]] in
                        try one.bind([.integer(tid), .text(pk)])
                        defer { one.reset() }
                        return try one.step() ? [one.row()] : []
                    }
                } else {
                    tombstones = try s.rows(tombstoneSQL, [.integer(tid)])
                }
                for r in tombstones {
                    guard let pk = r[0].string else { continue }
                    deleted[pk] = (Clock(hlc: HLC(rawValue: r[1].int64 ?? 0), site: r[2].string ?? ""), Clock(hlc: HLC(rawValue: r[3].int64 ?? 0), site: r[4].string ?? ""))
                }
                for (pk, p) in pending[tid] ?? [:] where p.lastOp == 3 && only?.contains(pk) ?? true {
                    let exists = try s.scalar("SELECT 1 FROM " + quoteIdentifier(def.name) + " AS o WHERE \(keyExpr) = ?", [.text(pk)]) != nil
                    if exists { continue }
                    try born.bind([.integer(tid), .text(pk)])
                    let b = try born.step() ? Clock(hlc: HLC(rawValue: born.column(0).int64 ?? 0), site: born.column(1).string ?? "") : Clock.zero
                    born.reset()
                    if p.sawInsert && b == .zero { continue }  // made and removed there, never sent
                    deleted[pk] = (b, own(p.lastHLC))
                }
                for (pk, d) in deleted.sorted(by: { $0.key < $1.key }) {
                    guard let keyValues = KeyCodec.decode(pk), keyValues.count == def.primaryKeyColumns.count else { continue }
                    var values = [SQLValue](repeating: .null, count: def.columns.count)
                    for (i, idx) in def.primaryKeyIndexes.enumerated() { values[idx] = keyValues[i] }
                    try writer.append(RowChange(table: def.name, operation: .delete, values: values, clock: d.clock, born: d.born))
                }
            }
        } catch {
            writer.cancel()
            throw error
        }
        return (try writer.finish(signingKey: signingKey), writer.rowCount)
    }
}
