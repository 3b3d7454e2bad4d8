import DiffFormat
import Foundation
import RTSQLite

// MARK: - Rows held back until the app says how to place them

// A diff from an older app version can bring a new row that lacks a NOT NULL column this schema added without a
// default, and no value for it was declared (`TablePolicy.syncDefaults`). Refusing the diff would hold back every
// other change in it, on every retry. Instead the row is held back: kept in `rtsync_held` with everything the merge
// needs (values as SQLite stored them in the diff, clocks, the author), listed in `status`, and merged again by
// `applyHeldRows()` (sync calls it) once a value is declared. The rest of the diff applies as usual.

extension SyncDatabase {
    static let heldTablesSQL = """
        CREATE TABLE IF NOT EXISTS rtsync_held(
          id INTEGER PRIMARY KEY, diff_id TEXT NOT NULL, author_user TEXT NOT NULL, author_site TEXT NOT NULL, seen TEXT NOT NULL,
          tbl TEXT NOT NULL, pk TEXT NOT NULL, changed TEXT, born_hlc INTEGER NOT NULL, born_site TEXT NOT NULL,
          hlc INTEGER NOT NULL, site TEXT NOT NULL, reason TEXT NOT NULL, held_at TEXT NOT NULL);
        -- value has no declared type: it keeps the storage class the diff gave it.
        CREATE TABLE IF NOT EXISTS rtsync_held_cells(
          held_id INTEGER NOT NULL, position INTEGER NOT NULL, col TEXT NOT NULL, type TEXT NOT NULL, value,
          hlc INTEGER, site TEXT, PRIMARY KEY(held_id, position));
        """

    /// Rows held back (table, key, why), oldest first.
    public func heldRows() throws -> [(table: String, key: String, reason: String)] {
        try locked {
            guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_held'") != nil else { return [] }
            return try db.rows("SELECT tbl, pk, reason FROM rtsync_held ORDER BY id").map { ($0[0].string ?? "", $0[1].string ?? "", $0[2].string ?? "") }
        }
    }

    /// Merges the rows held back again (after a value was declared for the column they lack); rows that still
    /// cannot be placed stay held. `scratch` is a new folder it works in and removes (default: one in the
    /// temporary folder). Returns the report of the merge, or nil when nothing was held.
    @discardableResult
    public func applyHeldRows(scratch: URL? = nil) throws -> ApplyReport? {
        let groups: [(diff: String, user: String, site: String, seen: String, ids: [Int64])] = try locked {
            guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_held'") != nil else { return [] }
            var out: [(String, String, String, String, [Int64])] = []
            for r in try db.rows("SELECT diff_id, author_user, author_site, seen, group_concat(id) FROM rtsync_held GROUP BY diff_id, author_user, author_site, seen ORDER BY min(id)") {
                out.append((r[0].string ?? "", r[1].string ?? "", r[2].string ?? "", r[3].string ?? "{}", (r[4].string ?? "").split(separator: ",").compactMap { Int64($0) }))
            }
            return out
        }
        guard !groups.isEmpty else { return nil }
        let dir = scratch ?? FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-held-\(KSUID.generate().string)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var total = ApplyReport(file: "held rows", diffID: nil, status: .applied)
        for g in groups {
            let seen = (try? JSONDecoder().decode([String: Int64].self, from: Data(g.seen.utf8))) ?? [:]
            let writer = try DiffWriter(directory: dir, kind: .changes, authorUser: g.user, authorSite: g.site, seen: seen)
            var defs: [String: TableDefinition] = [:]
            let url: URL
            do {
                try locked {
                    for id in g.ids {
                        guard let h = try db.rows("SELECT tbl, changed, born_hlc, born_site, hlc, site FROM rtsync_held WHERE id = ?", [.integer(id)]).first,
                              let table = h[0].string else { continue }
                        let cells = try db.rows("SELECT col, type, value, hlc, site FROM rtsync_held_cells WHERE held_id = ? ORDER BY position", [.integer(id)])
                        let local = try TableDefinition.read(table: table, from: db)
                        var def = TableDefinition(name: table, columns: cells.map { c in
                            let name = c[0].string ?? ""
                            return ColumnDefinition(name: name, type: c[1].string ?? "", primaryKey: local?.columns.first { $0.name.lowercased() == name.lowercased() }?.primaryKey ?? 0)
                        })
                        def.foreignKeys = []
                        if defs[table] == nil { defs[table] = def; try writer.addTable(def) }
                        let changed = h[1].string.flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) }
                        var clocks: [String: Clock] = [:]
                        for c in cells { if let hlc = c[3].int64 { clocks[c[0].string ?? ""] = Clock(hlc: HLC(rawValue: hlc), site: c[4].string ?? "") } }
                        try writer.append(RowChange(table: table, operation: .upsert, values: cells.map { $0[2] }, changedColumns: changed,
                                                    clock: Clock(hlc: HLC(rawValue: h[4].int64 ?? 0), site: h[5].string ?? ""),
                                                    born: Clock(hlc: HLC(rawValue: h[2].int64 ?? 0), site: h[3].string ?? ""), columnClocks: clocks))
                    }
                }
                url = try writer.finish()
            } catch {
                writer.cancel()
                throw error
            }
            defer { try? FileManager.default.removeItem(at: url) }
            // The held entries go in the same transaction as the merge that places them (or holds them again).
            let r = apply(diff: url, quarantine: nil, limits: .default, replacingHeld: g.ids)
            total.inserted += r.inserted; total.updated += r.updated; total.conflicts += r.conflicts; total.held += r.held
            if r.status != .applied { total.status = r.status; total.reason = r.reason }
        }
        return total
    }
}

extension Merger {
    /// Whether the row can be written here; when it lacks a NOT NULL column without a default or declared value,
    /// it is held back (see above) and false is returned.
    mutating func placeOrHold(_ r: RowContext, _ local: LocalRow) throws -> Bool {
        guard let column = r.plan.unplaceable.first else { return true }
        let reason = "'\(r.table)'.'\(column)' is NOT NULL without a default here and the diff (from an older app version) does not carry it: the row is held back until a value is declared ({\"tables\": {\"\(r.table)\": {\"defaults\": {\"\(column)\": \"...\"}}}} with rtsync track --config FILE, or TablePolicy.syncDefaults); sync then places it"
        try db.execute(SyncDatabase.heldTablesSQL)
        let seen = String(decoding: try JSONEncoder().encode(meta.seen), as: UTF8.self)
        let changed = try r.change.changedColumns.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        try db.execute("DELETE FROM rtsync_held_cells WHERE held_id IN (SELECT id FROM rtsync_held WHERE tbl = ? AND pk = ? AND diff_id = ?)", [.text(r.table), .text(local.key), .text(meta.id.string)])
        try db.execute("DELETE FROM rtsync_held WHERE tbl = ? AND pk = ? AND diff_id = ?", [.text(r.table), .text(local.key), .text(meta.id.string)])
        try db.execute("INSERT INTO rtsync_held(diff_id, author_user, author_site, seen, tbl, pk, changed, born_hlc, born_site, hlc, site, reason, held_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       [.text(meta.id.string), .text(meta.authorUser), .text(meta.authorSite), .text(seen), .text(r.table), .text(local.key),
                        changed.map { .text($0) } ?? .null, .integer(r.change.born.hlc.rawValue), .text(r.change.born.site),
                        .integer(r.change.clock.hlc.rawValue), .text(r.change.clock.site), .text(reason), .text(now)])
        let id = db.lastInsertRowID
        for (i, column) in r.plan.remoteDef.columns.enumerated() where i < r.change.values.count {
            // A renamed column is held under its name here (the change's clocks are named so already).
            let name = r.plan.renamedFrom[column.name.lowercased()] ?? column.name
            let clock = r.change.columnClocks.first { $0.key.lowercased() == name.lowercased() }?.value
            try db.execute("INSERT INTO rtsync_held_cells(held_id, position, col, type, value, hlc, site) VALUES (?,?,?,?,?,?,?)",
                           [.integer(id), .integer(Int64(i)), .text(name), .text(column.type), r.change.values[i],
                            clock.map { .integer($0.hlc.rawValue) } ?? .null, clock.map { .text($0.site) } ?? .null])
        }
        report.held += 1
        return false
    }
}
