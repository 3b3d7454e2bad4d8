import Crypto
import DiffFormat
import Foundation
import RTSQLite

/// What one export wrote.
public struct ExportResult: Sendable, Codable {
    /// The diff file written.
    public var file: String
    /// The diff id.
    public var diffID: String
    /// This site's sequence number of the diff.
    public var sequence: Int64
    /// Rows carried, by table.
    public var tables: [String: OperationCounts]
    /// Rows carried in all.
    public var rows: Int
}

extension SyncDatabase {
    /// Writes one `changes` diff with every change not yet exported into `directory`.
    ///
    /// Several changes to one row coalesce to its final state with the union of changed columns;
    /// a row inserted then deleted leaves nothing. Every change keeps the clock it got when it was made
    /// (the newest one per column), never one from the time of export. The export watermark advances
    /// only after the file is synced and renamed into place.
    /// - Returns: nil when there was nothing to export (no file is written).
    public func exportChanges(to directory: URL, signingKey: Curve25519.Signing.PrivateKey? = nil,
                              shouldStop: (@Sendable () -> Bool)? = nil) throws -> ExportResult? {
        try locked {
            try requireTracked()
            droppedNullKeys = []
            switch try exportBySets(to: directory, signingKey: signingKey, shouldStop: shouldStop) {
            case .exported(let result): return result
            case .nothing: return nil
            case .rowByRow: return try db.transaction { try exportLocked(to: directory, signingKey: signingKey, shouldStop: shouldStop) }
            }
        }
    }

    /// The tables where the last `exportChanges` dropped an insert or update of a row whose key holds a NULL: no
    /// device can find such a row by its key, so it is never sent (`rowsWithNullKeys()` counts every such row there is).
    public var lastExportDroppedNullKeys: [String] { locked { droppedNullKeys.sorted() } }

    /// Number of changed rows waiting to be exported (before coalescing).
    public func pendingChangeCount() throws -> Int {
        try locked { try requireTracked(); return Int(try db.scalar("SELECT count(*) FROM rtsync_changes")?.int64 ?? 0) }
    }

    /// One row's changes since the last export, coalesced (clocks are raw HLCs of this site).
    private struct Pending {
        var tid: Int64
        var pk: String
        var firstOp: Int64
        var lastOp: Int64
        var sawInsert = false
        /// Clock of the last insert (the row's birth when it was inserted here).
        var insertHLC: Int64 = 0
        /// Clock of the last change of any kind (the deletion's, when the row is gone).
        var lastHLC: Int64 = 0
        /// Clock of the last change of each column an update changed, by position in the trigger's column list.
        var columnHLC: [Int: Int64] = [:]
    }

    private func exportLocked(to directory: URL, signingKey: Curve25519.Signing.PrivateKey?, shouldStop: (@Sendable () -> Bool)?) throws -> ExportResult? {
        try upgradeBookkeeping()
        let tracked = try Self.refreshedTracked(db)
        guard let maxSeq = try db.scalar("SELECT max(seq) FROM rtsync_changes")?.int64 else { return nil }
        let byID = Dictionary(uniqueKeysWithValues: tracked.values.map { ($0.table.id, $0) })

        // 1. Coalesce the change log per row, keeping first-change order and the newest clock of each column.
        var order: [RowKey] = []
        var pending: [RowKey: Pending] = [:]
        var newestCaptured: Int64 = 0
        let scan = try db.prepare("SELECT tid, pk, op, cols, hlc FROM rtsync_changes WHERE seq <= ? ORDER BY seq")
        try scan.bind([.integer(maxSeq)])
        while try scan.step() {
            guard let tid = scan.column(0).int64, let pk = scan.column(1).string, let op = scan.column(2).int64 else { continue }
            let hlc = scan.column(4).int64 ?? 0
            newestCaptured = max(newestCaptured, hlc)
            let key = RowKey(tid, pk)
            if pending[key] == nil {
                order.append(key)
                pending[key] = Pending(tid: tid, pk: pk, firstOp: op, lastOp: op)
            }
            pending[key]!.lastOp = op
            pending[key]!.lastHLC = hlc
            if op == 1 { pending[key]!.sawInsert = true; pending[key]!.insertHLC = hlc; pending[key]!.columnHLC.removeAll() }
            if op == 2 { for position in Self.changedPositions(scan.column(3)) { pending[key]!.columnHLC[position] = hlc } }
        }

        let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
        let user = try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
        let sequence = (try db.scalar("SELECT diff_seq FROM rtsync_site")?.int64 ?? 0) + 1
        var latest: Int64 = 0
        func ownClock(_ hlc: Int64) -> Clock {
            latest = max(latest, hlc)
            return Clock(hlc: HLC(rawValue: hlc), site: site)
        }
        let bornLookup = try db.prepare("SELECT born_hlc, born_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
        func born(_ tid: Int64, _ pk: String) throws -> Clock? {
            try bornLookup.bind([.integer(tid), .text(pk)])
            defer { bornLookup.reset() }
            guard try bornLookup.step() else { return nil }
            return Clock(hlc: HLC(rawValue: bornLookup.column(0).int64 ?? 0), site: bornLookup.column(1).string ?? "")
        }
        // Column clocks recorded here: a column a remote change won after the local edit was made holds the
        // remote value now, and the local edit is not sent (it lost, and is in the conflict log).
        let clockLookup = try db.prepare("SELECT col, hlc, site FROM rtsync_clocks WHERE tid = ? AND pk = ?")
        func recordedClocks(_ tid: Int64, _ pk: String) throws -> [String: Clock] {
            try clockLookup.bind([.integer(tid), .text(pk)])
            defer { clockLookup.reset() }
            var out: [String: Clock] = [:]
            while try clockLookup.step() {
                out[(clockLookup.column(0).string ?? "").lowercased()] = Clock(hlc: HLC(rawValue: clockLookup.column(1).int64 ?? 0), site: clockLookup.column(2).string ?? "")
            }
            return out
        }
        var rowLookups: [Int64: Statement] = [:]
        func currentRow(_ info: TrackedInfo, _ keyValues: [SQLValue]) throws -> [SQLValue]? {
            let def = info.definition
            if rowLookups[info.table.id] == nil {
                rowLookups[info.table.id] = try db.prepare("SELECT " + def.columnNames.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(def.name)
                                                           + " WHERE " + def.primaryKeyColumns.map { quoteIdentifier($0) + " = ?" }.joined(separator: " AND "))
            }
            let s = rowLookups[info.table.id]!
            try s.bind(keyValues)
            defer { s.reset() }
            return try s.step() ? s.row() : nil
        }

        // 2. Write the diff (created lazily: changes may coalesce to nothing).
        var writer: DiffWriter?
        var counts: [String: OperationCounts] = [:]
        var metaUpdates: [(tid: Int64, pk: String, op: RowOperation, isNew: Bool, changed: [String: Clock], clock: Clock, born: Clock)] = []
        func writerFor() throws -> DiffWriter {
            if let writer { return writer }
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            var seen: [String: Int64] = [:]
            for r in try db.rows("SELECT site, hlc FROM rtsync_seen") { if let s = r[0].string, let h = r[1].int64 { seen[s] = h } }
            let w = try DiffWriter(directory: directory, id: try nextDiffID(), kind: .changes, authorUser: user, authorSite: site,
                                   sequence: sequence...sequence, seen: seen, expectedRows: order.count)
            writer = w
            return w
        }
        do {
            for (n, key) in order.enumerated() {
                // Stopping here rolls the transaction back and removes the temp file: the changes stay pending.
                if n % 256 == 0, let shouldStop, shouldStop() { throw SyncEngineError.interrupted(operation: "export", path: directory.path) }
                let p = pending[key]!
                guard let info = byID[p.tid], let keyValues = KeyCodec.decode(p.pk), keyValues.count == info.definition.primaryKeyColumns.count else { continue }
                // A key holding a NULL (allowed in a rowid table's key without NOT NULL) names no row anywhere: no
                // `key = ?` finds it, and a diff carrying it is rejected. Its change is dropped, as the row's own is
                // (`SyncDatabase.rowsWithNullKeys` and `status` name such rows).
                if keyValues.contains(.null) {
                    // A delete under such a key (the row given a key, or deleted) loses nothing.
                    if p.lastOp != 3 { droppedNullKeys.insert(info.table.name) }
                    continue
                }
                let def = info.definition
                let existingBorn = try born(p.tid, p.pk)
                // What is sent follows the row as it is now: a delete the log holds for a row that still exists
                // (a REPLACE or UPSERT that ended as an update or was ignored) is no delete.
                let values = try currentRow(info, keyValues)
                if values == nil {
                    guard p.lastOp == 3 || p.firstOp == 3 || existingBorn != nil else { continue }
                    // Inserted and deleted since the last export, and never seen elsewhere: nothing to send.
                    if p.firstOp == 1 && existingBorn == nil { continue }
                    var deleted = [SQLValue](repeating: .null, count: def.columns.count)
                    for (i, idx) in def.primaryKeyIndexes.enumerated() { deleted[idx] = keyValues[i] }
                    let b = existingBorn ?? .zero
                    let clock = ownClock(p.lastHLC)
                    let w = try writerFor()
                    try w.addTable(def)
                    try w.append(RowChange(table: def.name, operation: .delete, values: deleted, clock: clock, born: b))
                    counts[def.name, default: .init()].deletes += 1
                    metaUpdates.append((p.tid, p.pk, .delete, false, [:], clock, b))
                } else if let values {
                    let isNew = p.sawInsert
                    // Mask positions follow the column list the triggers were made with.
                    var changed: [String: Clock] = [:]
                    for (position, hlc) in p.columnHLC where position < info.table.columns.count {
                        let name = info.table.columns[position]
                        if def.columnIndex(name) != nil { changed[name] = Clock(hlc: HLC(rawValue: hlc), site: site) }
                    }
                    if !isNew {
                        let recorded = try recordedClocks(p.tid, p.pk)
                        changed = changed.filter { name, clock in (recorded[name.lowercased()].map { $0 < clock }) ?? true }
                        if changed.isEmpty { continue }
                    }
                    let w = try writerFor()
                    try w.addTable(def)
                    let born: Clock, clock: Clock
                    if isNew {
                        // The row's clock is its birth; columns updated after the insert carry their own clocks.
                        born = ownClock(p.insertHLC)
                        clock = born
                        for c in changed.values { latest = max(latest, c.hlc.rawValue) }
                        try w.append(RowChange(table: def.name, operation: .upsert, values: values, changedColumns: nil,
                                               clock: clock, born: born, columnClocks: changed))
                    } else {
                        // The row's clock is its newest change; older changed columns carry their own clocks.
                        born = existingBorn ?? .zero
                        clock = ownClock(changed.values.max()!.hlc.rawValue)
                        let names = def.columnNames.filter { changed[$0] != nil }
                        try w.append(RowChange(table: def.name, operation: .upsert, values: values, changedColumns: names,
                                               clock: clock, born: born, columnClocks: changed.filter { $0.value != clock }))
                    }
                    counts[def.name, default: .init()].upserts += 1
                    metaUpdates.append((p.tid, p.pk, .upsert, isNew, changed, clock, born))
                }
            }
        } catch {
            writer?.cancel()
            throw error
        }

        guard let writer else {
            try db.execute("DELETE FROM rtsync_changes WHERE seq <= ?", [.integer(maxSeq)])
            // Clocks stay unique per site even for changes that coalesced to nothing.
            try db.execute("UPDATE rtsync_site SET hlc = max(hlc, ?)", [.integer(newestCaptured)])
            return nil
        }
        let url = try writer.finish(signingKey: signingKey)

        // 3. Only now, with the file durable, record clocks and advance the watermark (same transaction).
        do {
            let setBorn = try db.prepare("INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) VALUES (?,?,?,?,NULL,NULL) ON CONFLICT(tid, pk) DO UPDATE SET born_hlc = excluded.born_hlc, born_site = excluded.born_site, del_hlc = NULL, del_site = NULL")
            let setDeleted = try db.prepare("INSERT INTO rtsync_rows(tid, pk, born_hlc, born_site, del_hlc, del_site) VALUES (?,?,?,?,?,?) ON CONFLICT(tid, pk) DO UPDATE SET del_hlc = excluded.del_hlc, del_site = excluded.del_site")
            let clearClocks = try db.prepare("DELETE FROM rtsync_clocks WHERE tid = ? AND pk = ?")
            let setClock = try db.prepare("INSERT OR REPLACE INTO rtsync_clocks(tid, pk, col, hlc, site) VALUES (?,?,?,?,?)")
            let ensureRow = try db.prepare(SyncDatabase.ensureRowMetaSQL)
            for m in metaUpdates {
                switch (m.op, m.isNew) {
                case (.delete, _):
                    try clearClocks.run([.integer(m.tid), .text(m.pk)])
                    try setDeleted.run([.integer(m.tid), .text(m.pk), .integer(m.born.hlc.rawValue), .text(m.born.site), .integer(m.clock.hlc.rawValue), .text(m.clock.site)])
                case (.upsert, true):
                    // A column without its own clock takes the row's born clock.
                    try clearClocks.run([.integer(m.tid), .text(m.pk)])
                    try setBorn.run([.integer(m.tid), .text(m.pk), .integer(m.born.hlc.rawValue), .text(m.born.site)])
                    for (c, clock) in m.changed {
                        try setClock.run([.integer(m.tid), .text(m.pk), .text(c), .integer(clock.hlc.rawValue), .text(clock.site)])
                    }
                case (.upsert, false):
                    // A key with column clocks always has an rtsync_rows entry (born 0 when unknown).
                    try ensureRow.run([.integer(m.tid), .text(m.pk)])
                    for (c, clock) in m.changed {
                        try setClock.run([.integer(m.tid), .text(m.pk), .text(c), .integer(clock.hlc.rawValue), .text(clock.site)])
                    }
                }
            }
            try recordSentKeys(diffID: writer.metadata.id.string, throughSeq: maxSeq)
            try db.execute("DELETE FROM rtsync_changes WHERE seq <= ?", [.integer(maxSeq)])
            // The diff is this device's own: recorded with the watermark, so a file whose id is not recorded
            // is an orphan of an export that crashed before committing (its changes are still pending).
            try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?, 'changes', ?, ?, ?, ?, ?)",
                           [.text(writer.metadata.id.string), .text(user), .text(site), .integer(sequence), .integer(sequence),
                            .text(ISO8601.format(Date(), fractional: true))])
            try db.execute("UPDATE rtsync_site SET hlc = max(hlc, ?1, ?2), published_hlc = max(published_hlc, ?2), diff_seq = ?3, last_export = ?4",
                           [.integer(newestCaptured), .integer(latest), .integer(sequence), .text(ISO8601.format(Date(), fractional: true))])
        } catch {
            // The transaction rolls back; the file must not outlive the bookkeeping that describes it.
            try? FileManager.default.removeItem(at: url)
            throw error
        }
        return ExportResult(file: url.path, diffID: writer.metadata.id.string, sequence: sequence, tables: counts, rows: metaUpdates.count)
    }
}
