import DiffFormat
import Foundation
import RTSQLite

// MARK: - ON DELETE actions of rows the merge deletes

// When apply deletes a row (a remote delete, a UNIQUE collision's loser), SQLite carries out the schema's
// ON DELETE SET NULL / CASCADE on the children that exist on this device, while the capture triggers are off
// (no echo). The author's diff already carries what those actions did to the children it knew of; a child it
// did not know of (its reference made concurrently, here or on a third device) is changed only here. Such
// changes are merge decisions like any other: logged in the conflict log and captured as local changes, so
// every replica ends the same after the next exchange, and a cascaded child leaves a tombstone.

extension Merger {
    /// A child row an ON DELETE action is about to change.
    struct DeleteAction {
        var info: TrackedInfo
        var keyValues: [SQLValue]
        var key: String
        var values: [SQLValue]
        /// `SET NULL` or `CASCADE`.
        var action: String
        var columns: [String]
        var parentTable: String
        /// The key's own ON DELETE when the merge carries out `action` in its place (RESTRICT, NO ACTION).
        var declared: String? = nil
    }

    /// The children (and, through CASCADE, grandchildren) that deleting the row `values` of `parent` will change.
    mutating func pendingDeleteActions(parent: TrackedInfo, values: [SQLValue], depth: Int = 0, seen: inout Set<RowKey>) throws -> [DeleteAction] {
        guard depth < 16 else { return [] }
        var out: [DeleteAction] = []
        let parentDef = parent.definition
        for child in tracked.values.sorted(by: { $0.table.id < $1.table.id }) {
            let def = child.definition
            for fk in def.foreignKeys where fk.table.lowercased() == parent.table.name.lowercased() && !fk.columns.isEmpty {
                let action = fk.onDelete.uppercased()
                guard action == "SET NULL" || action == "CASCADE" else { continue }
                let referenced = fk.referencedColumns.isEmpty ? parentDef.primaryKeyColumns : fk.referencedColumns
                guard referenced.count == fk.columns.count else { continue }
                let parentValues = referenced.map { name in parentDef.columnIndex(name).map { values[$0] } ?? .null }
                if parentValues.contains(.null) { continue }
                let select = try cached("SELECT " + def.columnNames.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(def.name)
                                        + " WHERE " + fk.columns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND "))
                try select.bind(parentValues)
                var rows: [[SQLValue]] = []
                while try select.step() { rows.append(select.row()) }
                select.reset()
                for row in rows {
                    let keyValues = def.primaryKeyIndexes.map { row[$0] }
                    let key = try keyText(keyValues, of: def)
                    guard seen.insert(RowKey(child.table.id, key)).inserted else { continue }
                    out.append(DeleteAction(info: child, keyValues: keyValues, key: key, values: row, action: action, columns: fk.columns, parentTable: parent.table.name))
                    if action == "CASCADE" { out += try pendingDeleteActions(parent: child, values: row, depth: depth + 1, seen: &seen) }
                }
            }
        }
        return out
    }

    /// The clock of a local column of another table's row: an unexported edit's, else the recorded one, else the row's birth.
    mutating func columnClock(_ info: TrackedInfo, key: String, column: String) throws -> Clock {
        if let p = pending[RowKey(info.table.id, key)] {
            if let i = info.table.columns.firstIndex(where: { $0.lowercased() == column.lowercased() }), let hlc = p.columnHLC[i] {
                return Clock(hlc: HLC(rawValue: hlc), site: ownSite)
            }
            if p.sawInsert { return Clock(hlc: HLC(rawValue: p.insertHLC), site: ownSite) }
        }
        let clock = try cached("SELECT hlc, site FROM rtsync_clocks WHERE tid = ? AND pk = ? AND col = ? COLLATE NOCASE")
        try clock.bind([.integer(info.table.id), .text(key), .text(column)])
        defer { clock.reset() }
        if try clock.step() { return Clock(hlc: HLC(rawValue: clock.column(0).int64 ?? 0), site: clock.column(1).string ?? "") }
        return try bornClock(info, key: key) ?? .zero
    }

    mutating func bornClock(_ info: TrackedInfo, key: String) throws -> Clock? {
        let born = try cached("SELECT born_hlc, born_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
        try born.bind([.integer(info.table.id), .text(key)])
        defer { born.reset() }
        return try born.step() ? Clock(hlc: HLC(rawValue: born.column(0).int64 ?? 0), site: born.column(1).string ?? "") : nil
    }

    /// Logs, records and (for children the author did not know of) captures what the ON DELETE actions did,
    /// once the parent row is deleted. `deleted` is the delete's clock; `decidedHere` when the merge decided the
    /// delete itself (then no author carries out the actions elsewhere, and all of them are captured).
    mutating func recordDeleteActions(_ actions: [DeleteAction], deleted: Clock, decidedHere: Bool) throws {
        for a in actions {
            let tid = a.info.table.id
            let def = a.info.definition
            let reason = a.declared.map { "ON DELETE \($0): the referenced row of '\(a.parentTable)' was deleted on another device while this row referenced it here; the delete wins and the reference goes (\(a.action == "SET NULL" ? "set to NULL" : "row deleted, as its reference cannot be NULL"))" }
                ?? "ON DELETE \(a.action): the referenced row of '\(a.parentTable)' was deleted on another device"
            if a.action == "SET NULL" {
                let clocks = try a.columns.map { try columnClock(a.info, key: a.key, column: $0) }
                let concurrent = decidedHere || clocks.contains { isConcurrent($0) }
                if concurrent {
                    for (c, clock) in zip(a.columns, clocks) {
                        let old = def.columnIndex(c).map { a.values[$0] } ?? .null
                        try logAction(table: a.info.table.name, key: a.key, column: c, localValue: old, localClock: clock, deleted: deleted, reason: reason)
                    }
                    try captureDecision(tid: tid, key: a.key, op: 2, mask: Self.changeMask(a.info, columns: a.columns), after: deleted)
                }
                // Otherwise the author knew the reference: its own diffs bring what became of the child there (nulled
                // by the same action, or moved to another parent first), with later clocks than the child's here.
            } else {
                let born = try bornClock(a.info, key: a.key) ?? .zero
                let p = pending[RowKey(tid, a.key)]
                let concurrent = decidedHere || p != nil || isConcurrent(born) || def.columnNames.contains { (try? isConcurrent(columnClock(a.info, key: a.key, column: $0))) == true }
                // A child the author knew is removed here as there; the author's own diffs bring its delete (with the
                // tombstone) or, if the child had moved to another parent there first, the child itself again.
                guard concurrent else { continue }
                try logAction(table: a.info.table.name, key: a.key, column: "", localValue: .null, localClock: born, deleted: deleted, reason: reason)
                // A tombstone, so an older version of the child arriving later does not bring it back.
                try cached("INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) VALUES (?,?,?,?,?,?) ON CONFLICT(tid, pk) DO UPDATE SET del_hlc = excluded.del_hlc, del_site = excluded.del_site")
                    .run([.integer(tid), .text(a.key), .integer(born.hlc.rawValue), .text(born.site), .integer(deleted.hlc.rawValue), .text(deleted.site)])
                try cached("DELETE FROM rtsync_clocks WHERE tid = ? AND pk = ?").run([.integer(tid), .text(a.key)])
                try captureDecision(tid: tid, key: a.key, op: 3, mask: .null, after: deleted)
            }
        }
    }

    /// The change-log mask (as the capture triggers write it) of `columns` of a tracked table.
    static func changeMask(_ info: TrackedInfo, columns: [String]) -> SQLValue {
        let positions = columns.compactMap { c in info.table.columns.firstIndex { $0.lowercased() == c.lowercased() } }
        if info.table.columns.count <= 62 { return .integer(positions.reduce(Int64(0)) { $0 | (Int64(1) << $1) }) }
        return .text(String(info.table.columns.indices.map { positions.contains($0) ? "1" : "0" }))
    }

    /// Records a change the merge made to a row as a local change (clock taken now, later than `decider`), so it
    /// is exported like an edit.
    mutating func captureDecision(tid: Int64, key: String, op: Int64, mask: SQLValue, after decider: Clock) throws {
        let select = try cached("SELECT max(\(SyncDatabase.captureClockSQL), ?)")
        try select.bind([.integer(max(decider.hlc.rawValue, maxRemoteHLC) + 1)])
        _ = try select.step()
        let clock = select.column(0).int64 ?? 0
        select.reset()
        try cached("INSERT INTO rtsync_changes(tid, pk, op, cols, hlc) VALUES (?, ?, ?, ?, ?)").run([.integer(tid), .text(key), .integer(op), mask, .integer(clock)])
        pending[RowKey(tid, key), default: PendingLocal()].record(op: op, mask: mask, hlc: clock)
    }

    mutating func logAction(table: String, key: String, column: String, localValue: SQLValue, localClock: Clock, deleted: Clock, reason: String) throws {
        try cached("""
            INSERT INTO rtsync_conflicts(at, diff_id, tbl, pk, col, local_value, remote_value, local_hlc, local_site, remote_hlc, remote_site, winner, reason)
            VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
            """).run([.text(now), .text(meta.id.string), .text(table), .text(key), .text(column), localValue, .null,
                      .integer(localClock.hlc.rawValue), .text(localClock.site), .integer(deleted.hlc.rawValue), .text(deleted.site),
                      .text("remote"), .text(reason)])
        report.conflicts += 1
    }
}
