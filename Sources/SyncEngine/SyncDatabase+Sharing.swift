import Crypto
import DiffFormat
import Foundation
import RTSQLite

/// What a share grants the recipient.
public enum SharePermission: String, Sendable, Codable, CaseIterable {
    /// The recipient may read; changes it sends back to the sharer for these rows are refused.
    case readOnly = "read-only"
    /// The recipient may change the rows and send the changes back.
    case readWrite = "read-write"
}

/// A share or request received from another user.
public struct InboundItem: Sendable, Codable, Equatable {
    /// Diff id.
    public var diffID: String
    /// "share" or "request".
    public var kind: String
    /// The sending user.
    public var fromUser: String
    /// Tables and row counts, or the request's text.
    public var summary: String
    /// When it arrived (UTC, ISO-8601).
    public var receivedAt: String
}

/// The rows of a share diff that was written.
public struct ShareResult: Sendable, Codable {
    /// The diff file.
    public var file: String
    /// The diff id.
    public var diffID: String
    /// Rows carried.
    public var rows: Int
    /// Media paths referenced by the rows (relative to the documents folder).
    public var media: [String]
}

extension SyncDatabase {
    static let sharingDDL = """
    CREATE TABLE IF NOT EXISTS rtsync_shares(
      tid INTEGER NOT NULL, pk TEXT NOT NULL, to_user TEXT NOT NULL, permission TEXT NOT NULL,
      diff_id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (tid, pk, to_user)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rtsync_inbound(
      diff_id TEXT PRIMARY KEY, kind TEXT NOT NULL, from_user TEXT NOT NULL, summary TEXT NOT NULL,
      received_at TEXT NOT NULL) WITHOUT ROWID;
    """

    /// Writes a `share` diff with the rows of `table` matching `filter` (an SQL expression over the table's
    /// columns, written by the local user) and records what was shared with whom and how.
    /// - Returns: nil when no row matched.
    public func writeShare(table: String, filter: String?, arguments: [SQLValue] = [], to recipient: String,
                           permission: SharePermission, directory: URL, signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> ShareResult? {
        try locked {
            try requireTracked()
            try upgradeBookkeeping()
            try db.execute(Self.sharingDDL)
            let tracked = try Self.loadTracked(db)
            guard let info = tracked[table] else { throw SyncEngineError.noSuchTable(table: table) }
            let def = info.definition
            var sql = "SELECT " + def.columnNames.map(quoteIdentifier).joined(separator: ", ") + ", "
                + (try Self.keyExpression(def, row: "t", in: db)) + " FROM " + quoteIdentifier(table) + " AS t"
            if let filter, !filter.isEmpty { sql += " WHERE " + filter }
            let rows: [[SQLValue]]
            do { rows = try db.rows(sql, arguments) } catch let e as SQLiteError {
                throw SyncEngineError.invalidConfig(file: "--where", reason: e.message)
            }
            if rows.isEmpty { return nil }
            let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
            let user = try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
            let stamp = Clock(hlc: try currentHLC().tick(), site: site)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let writer = try DiffWriter(directory: directory, id: try nextDiffID(), kind: .share, authorUser: user, authorSite: site, expectedRows: rows.count)
            try writer.addTable(def)
            var media: [String] = []
            let bornStmt = try db.prepare("SELECT born_hlc, born_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
            let record = try db.prepare("INSERT OR REPLACE INTO rtsync_shares(tid, pk, to_user, permission, diff_id, at) VALUES (?,?,?,?,?,?)")
            let now = ISO8601.format(Date(), fractional: true)
            for r in rows {
                let values = Array(r.dropLast())
                let key = r.last?.string ?? ""
                try bornStmt.bind([.integer(info.table.id), .text(key)])
                let born = try bornStmt.step() ? Clock(hlc: HLC(rawValue: bornStmt.column(0).int64 ?? 0), site: bornStmt.column(1).string ?? "") : .zero
                bornStmt.reset()
                try writer.append(RowChange(table: table, operation: .upsert, values: values, clock: stamp, born: born))
                try record.run([.integer(info.table.id), .text(key), .text(recipient), .text(permission.rawValue), .text(writer.metadata.id.string), .text(now)])
                for v in values {
                    if case .text(let s) = v {
                        let path = s.hasPrefix("/") ? String(s.dropFirst()) : s
                        if (path.hasPrefix("images/") || path.hasPrefix("recordings/")) && !path.contains("..") { media.append(path) }
                    }
                }
            }
            let url = try writer.finish(signingKey: signingKey)
            try db.execute("UPDATE rtsync_site SET hlc = max(hlc, ?1), published_hlc = max(published_hlc, ?1)", [.integer(stamp.hlc.rawValue)])
            return ShareResult(file: url.path, diffID: writer.metadata.id.string, rows: rows.count, media: Array(Set(media)).sorted())
        }
    }

    /// Records a share or request that arrived from another user, for `inbound list`.
    public func recordInbound(_ item: InboundItem) throws {
        try locked {
            try db.execute(Self.sharingDDL)
            try db.execute("INSERT OR IGNORE INTO rtsync_inbound(diff_id, kind, from_user, summary, received_at) VALUES (?,?,?,?,?)",
                           [.text(item.diffID), .text(item.kind), .text(item.fromUser), .text(item.summary), .text(item.receivedAt)])
        }
    }

    /// Shares and requests received from other users, newest first.
    public func inbound() throws -> [InboundItem] {
        try locked {
            try db.execute(Self.sharingDDL)
            return try db.rows("SELECT diff_id, kind, from_user, summary, received_at FROM rtsync_inbound ORDER BY diff_id DESC").map {
                InboundItem(diffID: $0[0].string ?? "", kind: $0[1].string ?? "", fromUser: $0[2].string ?? "", summary: $0[3].string ?? "", receivedAt: $0[4].string ?? "")
            }
        }
    }
}

/// Builds the single-row `request` diff one user sends another: which rows it asks for, and why.
public enum ShareRequest {
    /// The table a request diff carries (not an app table: request diffs are never merged).
    public static let table = TableDefinition(name: "share_request", columns: [
        ColumnDefinition(name: "id", type: "TEXT", primaryKey: 1),
        ColumnDefinition(name: "table_name", type: "TEXT"),
        ColumnDefinition(name: "filter", type: "TEXT"),
        ColumnDefinition(name: "message", type: "TEXT"),
    ])

    /// Writes a request diff into `directory`.
    public static func write(from user: String, site: String, table: String, filter: String?, message: String?, directory: URL,
                             signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> URL {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let writer = try DiffWriter(directory: directory, kind: .request, authorUser: user, authorSite: site, expectedRows: 1)
        try writer.addTable(Self.table)
        let clock = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: site)
        try writer.append(RowChange(table: Self.table.name, operation: .upsert,
                                    values: [.text(writer.metadata.id.string), .text(table), filter.map { .text($0) } ?? .null, message.map { .text($0) } ?? .null],
                                    clock: clock, born: clock))
        return try writer.finish(signingKey: signingKey)
    }

    /// A one-line summary of a request diff.
    public static func summary(_ reader: DiffReader) -> String {
        guard let row = try? reader.changes().first, row.values.count == 4 else { return "request" }
        var text = "asks for rows of \(row.values[1].description)"
        if case .text(let f) = row.values[2] { text += " where \(f)" }
        if case .text(let m) = row.values[3] { text += ": \(m)" }
        return text
    }
}
