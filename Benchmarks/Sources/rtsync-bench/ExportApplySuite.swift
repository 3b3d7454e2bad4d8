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
            // RTSYNC_BENCH_EXPORT_LOOP=N (profiling only): N more exports of this size, each of rows inserted anew.
            if run == 0, let loops = ProcessInfo.processInfo.environment["RTSYNC_BENCH_EXPORT_LOOP"].flatMap({ Int($0) }), n <= 100 {
                var times: [Double] = []
                for _ in 0..<loops {
                    try Items.createDatabase(src, tracked: true)
                    try Items.bulkInsert(try Items.open(src), rows)
                    let again = try SyncDatabase(path: src)
                    try? FileManager.default.removeItem(at: outbox)
                    times.append(try timeOnce { _ = try again.exportChanges(to: outbox) })
                }
                ctx.log("export loop of \(loops) (\(n) rows): median \(formatTime(Stat(samples: times).median))")
            }
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
            out += try knownRowRows(ctx, n: n, label: label, rows: rows, dir: dir, src: src, outbox: outbox, insertDiff: lastInsertDiff)
        }
        try? FileManager.default.removeItem(at: dir)
    }
    return out
}

/// Applying a diff that updates (1, 2 or 3 columns of) or deletes N rows the device already has (aim 1 of issue
/// #19), against plain prepared-statement `UPDATE`s / `DELETE`s of the same rows in one transaction, and against
/// `sqlite3changeset_apply` of the session changeset of the same edit into a plain database holding the rows.
/// `src` holds the last run's rows, exported as `insertDiff`: each edit is made on a copy of it and exported.
private func knownRowRows(_ ctx: BenchContext, n: Int, label: String, rows: [[BenchValue]], dir: URL, src: String, outbox: URL,
                          insertDiff: URL) throws -> [Row] {
    let keys = Items.keys(of: rows)
    let updates = Items.updates(keys: keys, seed: 0xBEEF + UInt64(n))
    // The device before the edit: the rows applied from the insert diff (its WAL checkpointed on close).
    let base = dir.appendingPathComponent("base.sqlite").path
    try Items.createDatabase(base, tracked: true)
    guard try SyncDatabase(path: base).apply(diffs: [insertDiff]).first?.status == .applied else {
        throw BenchSQLiteError(code: 0, message: "insert diff did not apply")
    }
    // The plain database the baselines start from: the same rows, untracked.
    let plainBase = dir.appendingPathComponent("plain-base.sqlite").path
    try Items.createDatabase(plainBase, tracked: false)
    try Items.bulkInsert(try Items.open(plainBase), rows)
    try checkpoint(plainBase)

    var out: [Row] = []
    // "twice": `note` of every row in one transaction, then `qty` in another, so each row's columns carry clocks of
    // two edits (the diff's cell clocks), as when an app edits a row again before the next sync.
    let edits: [(name: String, columns: Int?)] = [("updated, 1 column", 1), ("updated, 2 columns", 2), ("updated, 3 columns", 3),
                                                  ("updated twice, 2 columns", 0), ("deleted", nil)]
    for edit in edits {
        // The edit on a copy of the source device, exported.
        let editSrc = dir.appendingPathComponent("src-edit.sqlite").path
        try copyDatabase(src, to: editSrc)
        let editOutbox = dir.appendingPathComponent("outbox-edit", isDirectory: true)
        try? FileManager.default.removeItem(at: editOutbox)
        func apply(_ db: PlainDB) throws {
            switch edit.columns {
            case nil: try Items.bulkDelete(db, keys)
            case 0?:
                try Items.bulkUpdate(db, updates, columns: 1)
                try Items.bulkUpdate(db, updates, columns: 1, names: ["qty"], positions: [0])
            case let columns?: try Items.bulkUpdate(db, updates, columns: columns)
            }
        }
        try apply(try Items.open(editSrc))
        guard let result = try SyncDatabase(path: editSrc).exportChanges(to: editOutbox), result.rows == n else {
            throw BenchSQLiteError(code: 0, message: "\(edit.name) export did not carry \(n) rows")
        }
        let diff = URL(fileURLWithPath: result.file)
        // The session changeset of the same edit, captured on the plain database.
        var changeset: [UInt8] = []
        do {
            let capture = dir.appendingPathComponent("capture.sqlite").path
            try copyDatabase(plainBase, to: capture)
            let db = try Items.open(capture)
            let s = try PlainSession(db: db, table: "items")
            try apply(db)
            changeset = try s.changeset()
        }
        let dst = dir.appendingPathComponent("dst-edit.sqlite").path
        var rtsync: [Double] = [], plain: [Double] = [], csApply: [Double] = []
        for run in 0..<ctx.runs {
            try copyDatabase(base, to: dst)
            do {
                let db = try SyncDatabase(path: dst)
                var reports: [ApplyReport] = []
                rtsync.append(timeOnce { reports = db.apply(diffs: [diff]) })
                let done = edit.columns == nil ? reports.first?.deleted : reports.first?.updated
                guard reports.count == 1, reports[0].status == .applied, done == n else {
                    throw BenchSQLiteError(code: 0, message: "\(edit.name) apply: \(reports.map { "\($0.status) \($0.updated) \($0.deleted) \($0.reason ?? "")" })")
                }
            }
            try copyDatabase(plainBase, to: dst)
            do {
                let db = try Items.open(dst)
                plain.append(try timeOnce { try apply(db) })
            }
            try copyDatabase(plainBase, to: dst)
            do {
                let db = try Items.open(dst)
                csApply.append(try timeOnce { try db.applyChangeset(changeset) })
                let left = try db.scalarInt("SELECT count(*) FROM items")
                guard left == (edit.columns == nil ? 0 : Int64(n)) else { throw BenchSQLiteError(code: 0, message: "changeset apply left \(left) rows") }
            }
            ctx.log("export-apply \(n) rows \(edit.name): run \(run + 1)/\(ctx.runs)")
        }
        // RTSYNC_BENCH_KNOWN_LOOP=N with RTSYNC_BENCH_KNOWN_CASE=<edit, e.g. deleted> (profiling only): N more applies of that diff.
        let env = ProcessInfo.processInfo.environment
        if let loops = env["RTSYNC_BENCH_KNOWN_LOOP"].flatMap({ Int($0) }), env["RTSYNC_BENCH_KNOWN_CASE"] == edit.name {
            var times: [Double] = []
            for _ in 0..<loops {
                try copyDatabase(base, to: dst)
                let db = try SyncDatabase(path: dst)
                times.append(timeOnce { _ = db.apply(diffs: [diff]) })
            }
            ctx.log("known rows \(edit.name): apply loop of \(loops): median \(formatTime(Stat(samples: times).median))")
        }
        let size = "diff \(formatBytes(Double(fileSize(result.file)))), changeset \(formatBytes(Double(changeset.count)))"
        let plainName = edit.columns == nil ? "bulk delete" : "bulk update"
        var row = Row(suite: "export-apply", name: "apply \(label) \(edit.name) (keys known here)", rtsync: Stat(samples: rtsync),
                      baselineName: plainName, baseline: Stat(samples: plain), extra: size, aim: "≤ 3x \(plainName)")
        row.aimMet = row.ratio.map { $0 <= 3 }
        out.append(row)
        var cs = Row(suite: "export-apply", name: "apply \(label) \(edit.name) (keys known here)", rtsync: Stat(samples: rtsync),
                     baselineName: "sqlite3changeset_apply", baseline: Stat(samples: csApply), extra: size, aim: "≤ 1x sqlite3changeset_apply")
        cs.aimMet = cs.ratio.map { $0 <= 1 }
        out.append(cs)
    }
    return out
}

/// Copies a database closed by every connection (with its WAL, if one is left) to `target`, replacing it.
private func copyDatabase(_ source: String, to target: String) throws {
    removeDatabase(target)
    try FileManager.default.copyItem(atPath: source, toPath: target)
    if FileManager.default.fileExists(atPath: source + "-wal") { try FileManager.default.copyItem(atPath: source + "-wal", toPath: target + "-wal") }
}

/// Moves everything in a database's WAL into the main file.
private func checkpoint(_ path: String) throws {
    try Items.open(path).exec("PRAGMA wal_checkpoint(TRUNCATE)")
}
