import Foundation
import SyncEngine

/// export-apply: rtsync diff create and apply for N changed (inserted) rows, against a plain prepared-statement
/// bulk insert of the same rows in one transaction, and against SQLite's session extension capturing the
/// same inserts (sqlite3session) and applying the changeset (sqlite3changeset_apply).
func runExportApplySuite(_ ctx: BenchContext) throws -> [Row] {
    let sizes = ctx.quick ? [1, 100, 10_000] : [1, 100, 10_000, 100_000]
    var out: [Row] = []
    for n in sizes {
        let rows = Items.rows(n, seed: 0xD1FF + UInt64(n))
        let dir = try ctx.freshDir("export-apply-\(n)")
        let src = dir.appendingPathComponent("src.sqlite").path
        let dst = dir.appendingPathComponent("dst.sqlite").path
        let outbox = dir.appendingPathComponent("outbox", isDirectory: true)
        let keptDiff = dir.appendingPathComponent("kept-diff")
        var trackedInsert: [Double] = [], export: [Double] = [], bulk: [Double] = [], session: [Double] = []
        var rtApply: [Double] = [], csApply: [Double] = []
        var diffBytes: Int64 = 0, changeset: [UInt8] = []
        var diffURL: URL?
        var lastInsertDiff: URL?

        for run in 0..<ctx.runs {
            // rtsync: capture (tracked insert) then export.
            try Items.createDatabase(src, tracked: true)
            do {
                let db = try Items.open(src)
                trackedInsert.append(try timeOnce { try Items.bulkInsert(db, rows) })
            }
            let sdb = try SyncDatabase(path: src)
            try? FileManager.default.removeItem(at: outbox)
            var result: ExportResult?
            export.append(try timeOnce { result = try sdb.exportChanges(to: outbox) })
            guard let result, result.rows == n else { throw BenchSQLiteError(code: 0, message: "export carried \(result?.rows ?? 0) rows, expected \(n)") }
            diffBytes = fileSize(result.file)
            lastInsertDiff = URL(fileURLWithPath: result.file)
            if diffURL == nil {
                let kept = keptDiff.appendingPathComponent(URL(fileURLWithPath: result.file).lastPathComponent)
                try FileManager.default.createDirectory(at: keptDiff, withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: result.file, toPath: kept.path)
                diffURL = kept
            }

            // Baseline: plain bulk insert into an untracked table.
            try Items.createDatabase(dst, tracked: false)
            do {
                let db = try Items.open(dst)
                bulk.append(try timeOnce { try Items.bulkInsert(db, rows) })
            }

            // Baseline: session extension capturing the same inserts, then producing the changeset.
            try Items.createDatabase(dst, tracked: false)
            do {
                let db = try Items.open(dst)
                let s = try PlainSession(db: db, table: "items")
                session.append(try timeOnce {
                    try Items.bulkInsert(db, rows)
                    changeset = try s.changeset()
                })
            }

            // rtsync apply into a fresh tracked database (another device).
            try Items.createDatabase(dst, tracked: true)
            do {
                let ddb = try SyncDatabase(path: dst)
                var reports: [ApplyReport] = []
                rtApply.append(timeOnce { reports = ddb.apply(diffs: [diffURL!]) })
                guard reports.count == 1, reports[0].status == .applied, reports[0].inserted + reports[0].updated == n else {
                    throw BenchSQLiteError(code: 0, message: "apply: \(reports.map { "\($0.status) \($0.reason ?? "")" })")
                }
                guard try Items.open(dst).scalarInt("SELECT count(*) FROM items") == Int64(n) else { throw BenchSQLiteError(code: 0, message: "apply row count") }
            }

            // Baseline: sqlite3changeset_apply of the session changeset into a fresh plain database.
            try Items.createDatabase(dst, tracked: false)
            do {
                let db = try Items.open(dst)
                csApply.append(try timeOnce { try db.applyChangeset(changeset) })
                guard try db.scalarInt("SELECT count(*) FROM items") == Int64(n) else { throw BenchSQLiteError(code: 0, message: "changeset apply row count") }
            }
            ctx.log("export-apply \(n) rows: run \(run + 1)/\(ctx.runs)")
        }
        let label = n == 1 ? "1 row" : "\(n.formatted()) rows"
        let perRow = "diff \(formatBytes(Double(diffBytes))) = \(Int((Double(diffBytes) / Double(n)).rounded())) B/row"
        let csPerRow = "changeset \(formatBytes(Double(changeset.count))) = \(Int((Double(changeset.count) / Double(n)).rounded())) B/row"
        let captureExport = zip(trackedInsert, export).map { $0 + $1 }
        out.append(Row(suite: "export-apply", name: "create \(label) (export only)", rtsync: Stat(samples: export),
                       baselineName: "bulk insert", baseline: Stat(samples: bulk), extra: perRow))
        out.append(Row(suite: "export-apply", name: "create \(label) (tracked insert + export)", rtsync: Stat(samples: captureExport),
                       baselineName: "session: insert + changeset", baseline: Stat(samples: session), extra: "\(perRow) vs \(csPerRow)"))
        var applyRow = Row(suite: "export-apply", name: "apply \(label)", rtsync: Stat(samples: rtApply),
                           baselineName: "bulk insert", baseline: Stat(samples: bulk), extra: perRow, aim: "apply ≤ 2x bulk insert")
        applyRow.aimMet = applyRow.ratio.map { $0 <= 2 }
        out.append(applyRow)
        out.append(Row(suite: "export-apply", name: "apply \(label)", rtsync: Stat(samples: rtApply),
                       baselineName: "sqlite3changeset_apply", baseline: Stat(samples: csApply), extra: csPerRow))
        if n >= 10_000, let lastInsertDiff {
            out.append(try updateDiffRow(ctx, n: n, label: label, rows: rows, dir: dir, src: src, outbox: outbox, insertDiff: lastInsertDiff))
        }
        try? FileManager.default.removeItem(at: dir)
    }
    return out
}

/// Informational (no aim): applying a diff that updates N rows the device already has, which the per-row merge
/// does (each row's clocks and local state decide), against plain UPDATEs of the same rows in one transaction.
/// `src` holds the last run's rows, exported as `insertDiff`; it updates every row and exports that.
private func updateDiffRow(_ ctx: BenchContext, n: Int, label: String, rows: [[BenchValue]], dir: URL, src: String, outbox: URL,
                           insertDiff: URL) throws -> Row {
    let updates = Items.updates(keys: Items.keys(of: rows), seed: 0xBEEF + UInt64(n))
    try Items.bulkUpdate(try Items.open(src), updates)
    guard let result = try SyncDatabase(path: src).exportChanges(to: outbox), result.rows == n else {
        throw BenchSQLiteError(code: 0, message: "update export did not carry \(n) rows")
    }
    let updateDiff = URL(fileURLWithPath: result.file)
    // The device before the update: the rows applied from the insert diff (its WAL checkpointed on close).
    let base = dir.appendingPathComponent("base.sqlite").path
    let dst = dir.appendingPathComponent("dst-update.sqlite").path
    try Items.createDatabase(base, tracked: true)
    guard try SyncDatabase(path: base).apply(diffs: [insertDiff]).first?.status == .applied else {
        throw BenchSQLiteError(code: 0, message: "insert diff did not apply")
    }
    var rtsync: [Double] = [], plain: [Double] = []
    for run in 0..<ctx.runs {
        removeDatabase(dst)
        try FileManager.default.copyItem(atPath: base, toPath: dst)
        do {
            let db = try SyncDatabase(path: dst)
            var reports: [ApplyReport] = []
            rtsync.append(timeOnce { reports = db.apply(diffs: [updateDiff]) })
            guard reports.count == 1, reports[0].status == .applied, reports[0].updated == n else {
                throw BenchSQLiteError(code: 0, message: "update apply: \(reports.map { "\($0.status) \($0.updated) \($0.reason ?? "")" })")
            }
        }
        try Items.createDatabase(dst, tracked: false)
        let db = try Items.open(dst)
        try Items.bulkInsert(db, rows)
        plain.append(try timeOnce { try Items.bulkUpdate(db, updates) })
        ctx.log("export-apply \(n) updated rows: run \(run + 1)/\(ctx.runs)")
    }
    return Row(suite: "export-apply", name: "apply \(label) updated (keys known here; per-row merge)", rtsync: Stat(samples: rtsync),
               baselineName: "bulk update", baseline: Stat(samples: plain), extra: "diff \(formatBytes(Double(fileSize(result.file))))")
}
