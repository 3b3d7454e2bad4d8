import DiffFormat
import Foundation
import RTSQLite

// MARK: - Columns renamed between app versions

// A column renamed by a later app version is, by name, two columns: an older device's diffs carry the old name, a
// newer device's the new one. Renames link the two names of a table's column: declared ones (`TablePolicy.renamed`,
// `"renamed": {"old": "new"}` in the policy config) and the ones this database ran itself after `track` (learned
// when tracking is brought up to date: see `learnRenames`). A column a diff carries under a name this table lacks is
// merged into the column the renames link it to (following chains, in either direction), when this table has that
// column and the diff does not carry it under its own name; otherwise it stays a column of its own (kept aside).
// Clocks decide between the names as between any two edits of one column. Learned renames are kept in
// `rtsync_renames` with `learned = 1`, declared ones with `learned = 0`.

extension SyncDatabase {
    static let renamesTableSQL = """
        CREATE TABLE IF NOT EXISTS rtsync_renames(tid INTEGER NOT NULL, old TEXT NOT NULL COLLATE NOCASE, new TEXT NOT NULL COLLATE NOCASE,
          learned INTEGER NOT NULL, PRIMARY KEY (tid, old, learned)) WITHOUT ROWID
        """

    /// The renames of every tracked table (declared and learned), old name -> new name, by table id.
    static func loadRenames(_ db: Connection) throws -> [Int64: (declared: [String: String], all: [(old: String, new: String)])] {
        guard try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_renames'") != nil else { return [:] }
        var out: [Int64: (declared: [String: String], all: [(old: String, new: String)])] = [:]
        for r in try db.rows("SELECT tid, old, new, learned FROM rtsync_renames ORDER BY tid, learned, old") {
            guard let tid = r[0].int64, let old = r[1].string, let new = r[2].string else { continue }
            if r[3].int64 == 0 { out[tid, default: ([:], [])].declared[old] = new }
            out[tid, default: ([:], [])].all.append((old, new))
        }
        return out
    }

    /// Stores a table's declared renames (replacing the ones declared before; learned ones stay).
    static func storeDeclaredRenames(_ db: Connection, tid: Int64, _ renamed: [String: String]) throws {
        if renamed.isEmpty, try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_renames'") == nil { return }
        try db.execute(renamesTableSQL)
        try db.execute("DELETE FROM rtsync_renames WHERE tid = ? AND learned = 0", [.integer(tid)])
        for (old, new) in renamed.sorted(by: { $0.key < $1.key }) where old.lowercased() != new.lowercased() {
            try db.execute("INSERT OR REPLACE INTO rtsync_renames(tid, old, new, learned) VALUES (?, ?, ?, 0)", [.integer(tid), .text(old), .text(new)])
        }
    }

    /// Records that this database renamed `old` to `new` in table `tid` (its own `ALTER TABLE … RENAME COLUMN`),
    /// and moves the column's clocks to the new name, so its values keep their clocks.
    static func learnRename(_ db: Connection, tid: Int64, old: String, new: String) throws {
        try db.execute(renamesTableSQL)
        try db.execute("INSERT OR REPLACE INTO rtsync_renames(tid, old, new, learned) VALUES (?, ?, ?, 1)", [.integer(tid), .text(old), .text(new)])
        try db.execute("UPDATE OR REPLACE rtsync_clocks SET col = ? WHERE tid = ? AND col = ? COLLATE NOCASE", [.text(new), .integer(tid), .text(old)])
    }

    /// For each column name a diff carries (`remote`), the local column it is merged into when it is not found under
    /// its own name: the column `renames` link it to (either direction, following chains) that the table has and the
    /// diff does not carry itself (each local column taken once). nil where the name stays as it is.
    static func translatedColumns(remote: [String], local: [String], renames: [(old: String, new: String)]) -> [String?] {
        guard !renames.isEmpty else { return remote.map { _ in nil } }
        var localName: [String: String] = [:]
        for c in local where localName[c.lowercased()] == nil { localName[c.lowercased()] = c }
        let carried = Set(remote.map { $0.lowercased() })
        var links: [String: [String]] = [:]
        for r in renames {
            let o = r.old.lowercased(), n = r.new.lowercased()
            links[o, default: []].append(n)
            links[n, default: []].append(o)
        }
        var taken = Set<String>()
        return remote.map { name in
            let start = name.lowercased()
            guard localName[start] == nil, links[start] != nil else { return nil }
            var seen: Set<String> = [start], queue = [start], i = 0
            while i < queue.count {
                for next in links[queue[i], default: []] where seen.insert(next).inserted {
                    if let here = localName[next], !carried.contains(next), !taken.contains(next) {
                        taken.insert(next)
                        return here
                    }
                    queue.append(next)
                }
                i += 1
            }
            return nil
        }
    }

    /// The witness trigger `migrate` puts on each tracked table while the app's migration runs: it never fires, names
    /// every column (so SQLite rewrites it on RENAME COLUMN and refuses DROP COLUMN while it exists), and its presence
    /// afterwards shows the table's first columns are the ones it had before, renamed in place.
    static func installWitness(_ db: Connection, tid: Int64, definition def: TableDefinition) throws {
        try db.execute("CREATE TRIGGER rtsync_cols_\(tid) AFTER UPDATE ON \(quoteIdentifier(def.name)) WHEN 0 BEGIN SELECT "
                       + def.columnNames.map { "NEW." + quoteIdentifier($0) }.joined(separator: ", ") + "; END")
    }

    /// Learns the renames of a tracked table whose columns changed since tracking: when a trigger naming every
    /// non-key column survived the change (the capture trigger `rtsync_upd_<tid>`, or `migrate`'s witness), no column
    /// was dropped and the table was not rebuilt, so its first columns are the tracked ones in order (ADD COLUMN
    /// appends) and a different name at one of those positions is a RENAME COLUMN. The trigger must still be on this
    /// table: one renamed away with its table (`ALTER TABLE t RENAME TO t_old`, then a new `t`) shows nothing.
    static func learnRenames(_ db: Connection, tid: Int64, table: String, old: [String], new: [String]) throws {
        guard new.count >= old.count, zip(old, new).contains(where: { $0.lowercased() != $1.lowercased() }),
              try db.scalar("SELECT 1 FROM sqlite_schema WHERE type = 'trigger' AND name IN (?, ?) AND tbl_name = ? COLLATE NOCASE",
                            [.text("rtsync_upd_\(tid)"), .text("rtsync_cols_\(tid)"), .text(table)]) != nil else { return }
        for (o, n) in zip(old, new) where o.lowercased() != n.lowercased() {
            try learnRename(db, tid: tid, old: o, new: n)
        }
    }
}

extension Merger.TablePlan {
    /// A change with the diff's names of renamed columns replaced by this table's (changed columns, column clocks).
    func localized(_ change: RowChange) -> RowChange {
        guard !renamedFrom.isEmpty else { return change }
        var c = change
        c.changedColumns = change.changedColumns?.map { renamedFrom[$0.lowercased()] ?? $0 }
        var clocks: [String: Clock] = [:]
        for (name, clock) in change.columnClocks {
            let local = renamedFrom[name.lowercased()] ?? name
            clocks[local] = max(clocks[local] ?? clock, clock)
        }
        c.columnClocks = clocks
        return c
    }
}
