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
    /// a row inserted then deleted leaves nothing. Every carried change gets one new hybrid logical
    /// clock stamp. The export watermark advances only after the file is synced and renamed into place.
    /// - Returns: nil when there was nothing to export (no file is written).
    public func exportChanges(to directory: URL, signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> ExportResult? {
        try locked {
            try requireTracked()
            return try db.transaction { try exportLocked(to: directory, signingKey: signingKey) }
        }
    }

    /// Number of changed rows waiting to be exported (before coalescing).
    public func pendingChangeCount() throws -> Int {
        try locked { try requireTracked(); return Int(try db.scalar("SELECT count(*) FROM rtsync_changes")?.int64 ?? 0) }
    }

    private struct Pending {
        var tid: Int64
        var pk: String
        var firstOp: Int64
        var lastOp: Int64
        var sawInsert = false
        var mask = Set<Int>()
    }

    private func exportLocked(to directory: URL, signingKey: Curve25519.Signing.PrivateKey?) throws -> ExportResult? {
        guard let maxSeq = try db.scalar("SELECT max(seq) FROM rtsync_changes")?.int64 else { return nil }
        let tracked = try Self.loadTracked(db)
        let byID = Dictionary(uniqueKeysWithValues: tracked.values.map { ($0.table.id, $0) })

        // 1. Coalesce the change log per row, keeping first-change order.
        var order: [RowKey] = []
        var pending: [RowKey: Pending] = [:]
        let scan = try db.prepare("SELECT tid, pk, op, cols FROM rtsync_changes WHERE seq <= ? ORDER BY seq")
        try scan.bind([.integer(maxSeq)])
        while try scan.step() {
            guard let tid = scan.column(0).int64, let pk = scan.column(1).string, let op = scan.column(2).int64 else { continue }
            let key = RowKey(tid, pk)
            if pending[key] == nil {
                order.append(key)
                pending[key] = Pending(tid: tid, pk: pk, firstOp: op, lastOp: op)
            }
            pending[key]!.lastOp = op
            if op == 1 { pending[key]!.sawInsert = true; pending[key]!.mask.removeAll() }
            if op == 2 { pending[key]!.mask.formUnion(Self.changedPositions(scan.column(3))) }
        }

        let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
        let user = try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
        let sequence = (try db.scalar("SELECT diff_seq FROM rtsync_site")?.int64 ?? 0) + 1
        let stamp = Clock(hlc: try currentHLC().tick(), site: site)
        let bornLookup = try db.prepare("SELECT born_hlc, born_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
        func born(_ tid: Int64, _ pk: String) throws -> Clock? {
            try bornLookup.bind([.integer(tid), .text(pk)])
            defer { bornLookup.reset() }
            guard try bornLookup.step() else { return nil }
            return Clock(hlc: HLC(rawValue: bornLookup.column(0).int64 ?? 0), site: bornLookup.column(1).string ?? "")
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
        var metaUpdates: [(tid: Int64, pk: String, op: RowOperation, isNew: Bool, changed: [String]?, born: Clock)] = []
        func writerFor() throws -> DiffWriter {
            if let writer { return writer }
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            var seen: [String: Int64] = [:]
            for r in try db.rows("SELECT site, hlc FROM rtsync_seen") { if let s = r[0].string, let h = r[1].int64 { seen[s] = h } }
            let w = try DiffWriter(directory: directory, kind: .changes, authorUser: user, authorSite: site,
                                   sequence: sequence...sequence, seen: seen, expectedRows: order.count)
            writer = w
            return w
        }
        do {
            for key in order {
                let p = pending[key]!
                guard let info = byID[p.tid], let keyValues = KeyCodec.decode(p.pk), keyValues.count == info.definition.primaryKeyColumns.count else { continue }
                let def = info.definition
                let existingBorn = try born(p.tid, p.pk)
                if p.lastOp == 3 {
                    // Inserted and deleted since the last export, and never seen elsewhere: nothing to send.
                    if p.firstOp == 1 && existingBorn == nil { continue }
                    var values = [SQLValue](repeating: .null, count: def.columns.count)
                    for (i, idx) in def.primaryKeyIndexes.enumerated() { values[idx] = keyValues[i] }
                    let b = existingBorn ?? .zero
                    let w = try writerFor()
                    try w.addTable(def)
                    try w.append(RowChange(table: def.name, operation: .delete, values: values, clock: stamp, born: b))
                    counts[def.name, default: .init()].deletes += 1
                    metaUpdates.append((p.tid, p.pk, .delete, false, nil, b))
                } else {
                    guard let values = try currentRow(info, keyValues) else { continue }
                    let isNew = p.sawInsert
                    var changed: [String]? = nil
                    if !isNew {
                        // Mask positions follow the column list the triggers were made with.
                        let names = p.mask.sorted().compactMap { $0 < info.table.columns.count ? info.table.columns[$0] : nil }
                            .filter { def.columnIndex($0) != nil }
                        if names.isEmpty { continue }
                        changed = names
                    }
                    let b = isNew ? stamp : (existingBorn ?? .zero)
                    let w = try writerFor()
                    try w.addTable(def)
                    try w.append(RowChange(table: def.name, operation: .upsert, values: values, changedColumns: changed, clock: stamp, born: b))
                    counts[def.name, default: .init()].upserts += 1
                    metaUpdates.append((p.tid, p.pk, .upsert, isNew, changed, b))
                }
            }
        } catch {
            writer?.cancel()
            throw error
        }

        guard let writer else {
            try db.execute("DELETE FROM rtsync_changes WHERE seq <= ?", [.integer(maxSeq)])
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
                    try setDeleted.run([.integer(m.tid), .text(m.pk), .integer(m.born.hlc.rawValue), .text(m.born.site), .integer(stamp.hlc.rawValue), .text(stamp.site)])
                case (.upsert, true):
                    // A column without its own clock takes the row's born clock.
                    try clearClocks.run([.integer(m.tid), .text(m.pk)])
                    try setBorn.run([.integer(m.tid), .text(m.pk), .integer(stamp.hlc.rawValue), .text(stamp.site)])
                case (.upsert, false):
                    // A key with column clocks always has an rtsync_rows entry (born 0 when unknown).
                    try ensureRow.run([.integer(m.tid), .text(m.pk)])
                    for c in m.changed ?? [] {
                        try setClock.run([.integer(m.tid), .text(m.pk), .text(c), .integer(stamp.hlc.rawValue), .text(stamp.site)])
                    }
                }
            }
            try db.execute("DELETE FROM rtsync_changes WHERE seq <= ?", [.integer(maxSeq)])
            // The diff is this device's own: recorded with the watermark, so a file whose id is not recorded
            // is an orphan of an export that crashed before committing (its changes are still pending).
            try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?, 'changes', ?, ?, ?, ?, ?)",
                           [.text(writer.metadata.id.string), .text(user), .text(site), .integer(sequence), .integer(sequence),
                            .text(ISO8601.format(Date(), fractional: true))])
            try db.execute("UPDATE rtsync_site SET hlc = ?, diff_seq = ?, last_export = ?",
                           [.integer(stamp.hlc.rawValue), .integer(sequence), .text(ISO8601.format(Date(), fractional: true))])
        } catch {
            // The transaction rolls back; the file must not outlive the bookkeeping that describes it.
            try? FileManager.default.removeItem(at: url)
            throw error
        }
        return ExportResult(file: url.path, diffID: writer.metadata.id.string, sequence: sequence, tables: counts, rows: metaUpdates.count)
    }
}
