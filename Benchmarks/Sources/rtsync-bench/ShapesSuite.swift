import Foundation
import SyncEngine

/// shapes: the export-apply cases of 10,000 rows (`--quick`: 2,000) on tables shaped as apps make them, other than
/// the `items` table of the other suites: an `INTEGER PRIMARY KEY`, a key of two TEXT columns (the real app's
/// `things`), a `WITHOUT ROWID` table, a secondary index on the edited column, and a `UNIQUE` column the edit does
/// not write. Each against the plain statements of the same rows in one transaction, as in export-apply: export and
/// apply of new rows against a bulk insert, apply of a one-column update against a bulk `UPDATE`, apply of deletes
/// against a bulk `DELETE`. A shape that falls off the set paths shows here as a ratio far above the `items` one.
func runShapesSuite(_ ctx: BenchContext) throws -> [Row] {
    let n = ctx.quick ? 2_000 : 10_000
    var out: [Row] = []
    for shape in Shape.all {
        let dir = try ctx.freshDir("shapes-\(shape.label.filter { $0.isLetter })")
        let src = dir.appendingPathComponent("src.sqlite").path, dst = dir.appendingPathComponent("dst.sqlite").path
        let base = dir.appendingPathComponent("base.sqlite").path, plainBase = dir.appendingPathComponent("plain.sqlite").path
        let rows = shape.rows(n, seed: 0x5AFE)
        var rng = SplitMix64(seed: 0xED17)
        let edits = rows.map { [.text(rng.word(40))] + shape.key(of: $0) }

        // The source device: rows inserted, exported; the diff of the inserts is applied to `base`, the device the
        // known-row cases start from.
        try shape.create(src, tracked: true)
        try shape.insert(try Items.open(src), rows)
        let outbox = dir.appendingPathComponent("outbox", isDirectory: true)
        guard let inserted = try SyncDatabase(path: src).exportChanges(to: outbox), inserted.rows == n else {
            throw BenchSQLiteError(code: 0, message: "\(shape.label): insert export")
        }
        try shape.create(base, tracked: true)
        guard try SyncDatabase(path: base).apply(diffs: [URL(fileURLWithPath: inserted.file)]).first?.status == .applied else {
            throw BenchSQLiteError(code: 0, message: "\(shape.label): insert apply")
        }
        try shape.create(plainBase, tracked: false)
        try shape.insert(try Items.open(plainBase), rows)

        // The edits, each made on a copy of the source and exported once.
        func editDiff(_ name: String, _ edit: (PlainDB) throws -> Void) throws -> URL {
            let copy = dir.appendingPathComponent("src-\(name).sqlite").path
            try copyFile(src, copy)
            try edit(try Items.open(copy))
            let box = dir.appendingPathComponent("outbox-\(name)", isDirectory: true)
            guard let r = try SyncDatabase(path: copy).exportChanges(to: box), r.rows == n else {
                throw BenchSQLiteError(code: 0, message: "\(shape.label): \(name) export")
            }
            return URL(fileURLWithPath: r.file)
        }
        let updateDiff = try editDiff("update") { try shape.update($0, edits) }
        let deleteDiff = try editDiff("delete") { try shape.delete($0, rows) }

        var export: [Double] = [], insert: [Double] = [], applyNew: [Double] = []
        var applyUpdate: [Double] = [], update: [Double] = [], applyDelete: [Double] = [], delete: [Double] = []
        func apply(_ diff: URL, onto start: String?, expect: (ApplyReport) -> Int) throws -> Double {
            if let start { try copyFile(start, dst) } else { try shape.create(dst, tracked: true) }
            let db = try SyncDatabase(path: dst)
            var reports: [ApplyReport] = []
            let t = timeOnce { reports = db.apply(diffs: [diff]) }
            guard reports.count == 1, reports[0].status == .applied, expect(reports[0]) == n else {
                throw BenchSQLiteError(code: 0, message: "\(shape.label) apply: \(reports.map { "\($0.status) \($0.reason ?? "")" })")
            }
            return t
        }
        func plain(onto start: String?, _ body: (PlainDB) throws -> Void) throws -> Double {
            if let start { try copyFile(start, dst) } else { try shape.create(dst, tracked: false) }
            let db = try Items.open(dst)
            return try timeOnce { try body(db) }
        }
        for run in 0..<ctx.runs {
            try shape.create(dst, tracked: true)
            try shape.insert(try Items.open(dst), rows)
            let sdb = try SyncDatabase(path: dst)
            let box = dir.appendingPathComponent("outbox-run", isDirectory: true)
            try? FileManager.default.removeItem(at: box)
            export.append(try timeOnce { _ = try sdb.exportChanges(to: box) })
            insert.append(try plain(onto: nil) { try shape.insert($0, rows) })
            applyNew.append(try apply(URL(fileURLWithPath: inserted.file), onto: nil) { $0.inserted })
            applyUpdate.append(try apply(updateDiff, onto: base) { $0.updated })
            update.append(try plain(onto: plainBase) { try shape.update($0, edits) })
            applyDelete.append(try apply(deleteDiff, onto: base) { $0.deleted })
            delete.append(try plain(onto: plainBase) { try shape.delete($0, rows) })
            ctx.log("shapes \(shape.label): run \(run + 1)/\(ctx.runs)")
        }
        let label = "\(n.formatted()) rows, \(shape.label)"
        func row(_ name: String, _ rt: [Double], _ baseName: String, _ b: [Double], aim: Double) -> Row {
            var r = Row(suite: "shapes", name: "\(name) \(label)", rtsync: Stat(samples: rt), baselineName: baseName,
                        baseline: Stat(samples: b), extra: nil, aim: "≤ \(aim.formatted())x \(baseName)")
            r.aimMet = r.ratio.map { $0 <= aim }
            return r
        }
        out.append(row("export", export, "bulk insert", insert, aim: 2))
        out.append(row("apply new", applyNew, "bulk insert", insert, aim: 2))
        out.append(row("apply 1-column update", applyUpdate, "bulk update", update, aim: 3))
        out.append(row("apply delete", applyDelete, "bulk delete", delete, aim: 3))
        try? FileManager.default.removeItem(at: dir)
    }
    return out
}

/// A table shape of the shapes suite: its DDL and the plain statements that insert, update and delete its rows.
private struct Shape {
    let label: String
    let ddl: String
    /// Key columns, then the other columns, in insert order.
    let keyColumns: [String]
    let composite: Bool
    let integerKey: Bool

    static let others = ["name", "qty", "price", "note", "updated_at"]
    static let all: [Shape] = [
        Shape(label: "INTEGER PRIMARY KEY", ddl: "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL)",
              keyColumns: ["id"], composite: false, integerKey: true),
        Shape(label: "key of two TEXT columns", ddl: "CREATE TABLE t(account TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL, PRIMARY KEY (account, id))",
              keyColumns: ["account", "id"], composite: true, integerKey: false),
        Shape(label: "WITHOUT ROWID", ddl: "CREATE TABLE t(id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL) WITHOUT ROWID",
              keyColumns: ["id"], composite: false, integerKey: false),
        Shape(label: "index on the edited column", ddl: "CREATE TABLE t(id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL); CREATE INDEX t_note ON t(note)",
              keyColumns: ["id"], composite: false, integerKey: false),
        Shape(label: "full-text index kept by triggers", ddl: """
              CREATE TABLE t(id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL);
              CREATE VIRTUAL TABLE t_fts USING fts5(name, note, content='t', content_rowid='rowid');
              CREATE TRIGGER t_ai AFTER INSERT ON t BEGIN INSERT INTO t_fts(rowid, name, note) VALUES (new.rowid, new.name, new.note); END;
              CREATE TRIGGER t_ad AFTER DELETE ON t BEGIN INSERT INTO t_fts(t_fts, rowid, name, note) VALUES ('delete', old.rowid, old.name, old.note); END;
              CREATE TRIGGER t_au AFTER UPDATE ON t BEGIN
                INSERT INTO t_fts(t_fts, rowid, name, note) VALUES ('delete', old.rowid, old.name, old.note);
                INSERT INTO t_fts(rowid, name, note) VALUES (new.rowid, new.name, new.note);
              END
              """, keyColumns: ["id"], composite: false, integerKey: false),
        Shape(label: "UNIQUE column not edited", ddl: "CREATE TABLE t(id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL)",
              keyColumns: ["id"], composite: false, integerKey: false),
    ]

    func rows(_ count: Int, seed: UInt64) -> [[BenchValue]] {
        var rng = SplitMix64(seed: seed)
        return (0..<count).map { i in
            let key: [BenchValue] = integerKey ? [.int(Int64(i) * 7 + 1)]
                : composite ? [.text("acct" + String(i % 10)), .text(String(format: "%07d", i) + rng.word(20))]
                : [.text(String(format: "%07d", i) + rng.word(20))]
            return key + [.text(String(format: "%06d ", i) + rng.word(12)), .int(Int64(rng.next() % 1000)),
                          .real(Double(rng.next() % 100_000) / 100), .text(rng.word(40)), .int(1_700_000_000 + Int64(i))]
        }
    }

    func key(of row: [BenchValue]) -> [BenchValue] { Array(row.prefix(keyColumns.count)) }
    var keyMatch: String { keyColumns.map { "\($0) = ?" }.joined(separator: " AND ") }

    func create(_ path: String, tracked: Bool) throws {
        removeDatabase(path)
        try PlainDB(path: path).exec("PRAGMA journal_mode=WAL; " + ddl)
        if tracked { _ = try SyncDatabase(path: path).track(tables: ["t"]) }
    }

    func insert(_ db: PlainDB, _ rows: [[BenchValue]]) throws {
        let columns = keyColumns + Shape.others
        try run(db, "INSERT INTO t(\(columns.joined(separator: ", "))) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))", rows)
    }

    /// `edits`: the new `note`, then the key.
    func update(_ db: PlainDB, _ edits: [[BenchValue]]) throws { try run(db, "UPDATE t SET note = ? WHERE \(keyMatch)", edits) }

    func delete(_ db: PlainDB, _ rows: [[BenchValue]]) throws { try run(db, "DELETE FROM t WHERE \(keyMatch)", rows.map(key(of:))) }

    private func run(_ db: PlainDB, _ sql: String, _ arguments: [[BenchValue]]) throws {
        try db.exec("BEGIN")
        let s = try db.prepare(sql)
        for a in arguments { try s.run(a) }
        try db.exec("COMMIT")
    }
}

/// Copies a database file closed by every connection (and its WAL, if one is left), replacing `target`.
private func copyFile(_ source: String, _ target: String) throws {
    removeDatabase(target)
    try FileManager.default.copyItem(atPath: source, toPath: target)
    if FileManager.default.fileExists(atPath: source + "-wal") { try FileManager.default.copyItem(atPath: source + "-wal", toPath: target + "-wal") }
}
