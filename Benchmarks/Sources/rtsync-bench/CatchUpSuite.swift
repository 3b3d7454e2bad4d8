import BucketClient
import BucketSync
import Foundation
import SyncEngine

/// catchup (issue 19, aim 4): device B was offline while device A made N one-row syncs. Measured: B's sync that
/// downloads and applies all N diffs, and `SyncDatabase.apply(diffs:)` of the N files alone, each against the
/// same for one diff holding N edited rows. Through a local folder and moto.
func runCatchUpSuite(_ ctx: BenchContext, moto: MotoServer?, motoNote: String) async throws -> [Row] {
    var rows: [Row] = []
    let diffs = ctx.quick ? 100 : 300
    let dir = try ctx.freshDir("catchup-local")
    let local = try LocalFolderStore(root: dir.appendingPathComponent("bucket", isDirectory: true))
    rows += try await catchUpCases(ctx, diffs: diffs, bucketLabel: "local folder", dir: dir, remote: ObjectStoreRemote(store: local, isLocal: true), moto: nil)
    try? FileManager.default.removeItem(at: dir)
    // RTSYNC_BENCH_CATCHUP_LOCAL_ONLY=1: the local-folder cases only (for profiling).
    if let moto, ProcessInfo.processInfo.environment["RTSYNC_BENCH_CATCHUP_LOCAL_ONLY"] != "1" {
        let dir = try ctx.freshDir("catchup-s3")
        rows += try await catchUpCases(ctx, diffs: diffs, bucketLabel: "moto S3", dir: dir, remote: ObjectStoreRemote(store: moto.store(prefix: "catchup/"), isLocal: false), moto: moto)
        try? FileManager.default.removeItem(at: dir)
    } else {
        rows.append(Row(suite: "catchup", name: "S3 bucket cases", rtsyncNote: "skipped: \(motoNote)"))
    }
    return rows
}

private func catchUpCases(_ ctx: BenchContext, diffs n: Int, bucketLabel: String, dir: URL, remote: ObjectStoreRemote, moto: MotoServer?) async throws -> [Row] {
    let fm = FileManager.default
    let base = 2_000
    let seed = Items.rows(base, seed: 0xCA7C)
    let keys = Items.keys(of: seed)
    // No compaction in the middle of the measurements.
    let a = try makeBenchHome(dir.appendingPathComponent("A"), seedRows: seed, user: "catchup-user", compactThreshold: 1_000_000)
    let b = try makeBenchHome(dir.appendingPathComponent("B"), seedRows: [], user: "catchup-user", compactThreshold: 1_000_000)
    let syncA = Syncer(home: a, remote: remote), syncB = Syncer(home: b, remote: remote)
    // B as it was before roll-ups (issue 19, aim 4): every diff downloaded and applied.
    var bWithout = b
    bWithout.settings = try b.loadSettings()
    bWithout.settings!.rollupThreshold = 0
    let syncBWithout = Syncer(home: bWithout, remote: remote)
    let check = requireCompleted
    ctx.log("catchup (\(bucketLabel)): warm-up, \(base) rows A→B")
    try check(try await syncA.sync(), "A"); try check(try await syncB.sync(), "B")
    let dbA = try Items.open(a.database.path), dbB = try Items.open(b.database.path)
    guard try dbB.scalarInt("SELECT count(*) FROM items") == Int64(base) else { throw BenchSQLiteError(code: 0, message: "warm-up did not reach B") }
    let exporter = try SyncDatabase(path: a.database.path)

    var manySync: [Double] = [], oneSync: [Double] = [], manyApply: [Double] = [], oneApply: [Double] = []
    var oldSync: [Double] = [], oldApply: [Double] = [], manyCPU: [Double] = [], oneCPU: [Double] = [], oldCPU: [Double] = []
    var rollupMerge: [Double] = [], noRollupSync: [Double] = [], noRollupRequests = 0, rollupRows = 0
    var manyRequests = 0, oneRequests = 0, manyServer = 0, oneServer = 0
    var offset = 0
    var editSeed: UInt64 = 100
    /// Edits `keys` on A and exports them, one diff per key (`oneEach`) or one diff for all; returns copies of the
    /// diff files (for the apply-only cases) and leaves the diffs in A's outbox for A's next sync to upload.
    var lastIDs: [String] = []
    func export(_ keys: [String], oneEach: Bool, into folder: URL) throws -> [URL] {
        try? fm.removeItem(at: folder)
        try fm.createDirectory(at: folder, withIntermediateDirectories: true)
        editSeed += 1
        let args = Items.updates(keys: keys, seed: editSeed)
        var files: [URL] = []
        lastIDs = []
        for batch in oneEach ? args.map({ [$0] }) : [args] {
            try Items.bulkUpdate(dbA, batch)
            guard let result = try exporter.exportChanges(to: a.outbox) else { throw BenchSQLiteError(code: 0, message: "nothing exported") }
            let copy = folder.appendingPathComponent(URL(fileURLWithPath: result.file).lastPathComponent)
            try fm.copyItem(at: URL(fileURLWithPath: result.file), to: copy)
            files.append(copy)
            lastIDs.append(result.diffID)
        }
        return files
    }
    /// Times `mergeRollup` of a roll-up of the diffs `ids` (written by A as its sync would) into a copy of B's database.
    func timeRollupMerge(_ ids: [String]) throws -> Double {
        let folder = dir.appendingPathComponent("rollup")
        try? fm.removeItem(at: folder)
        try fm.createDirectory(at: folder, withIntermediateDirectories: true)
        guard let made = try exporter.writeRollup(covering: ids, to: folder) else { throw BenchSQLiteError(code: 0, message: "no roll-up written") }
        rollupRows = made.rows
        let copy = dir.appendingPathComponent("apply-rollup.sqlite")
        removeDatabase(copy.path)
        try dbB.exec("VACUUM INTO '\(copy.path)'")
        try Items.open(copy.path).exec("PRAGMA journal_mode=WAL")
        let target = try SyncDatabase(path: copy.path)
        var result: (report: ApplyReport, covered: [String])?
        let t = try timeOnce { result = target.mergeRollup(URL(fileURLWithPath: made.file)) }
        guard result?.report.status == .applied, result?.covered.count == ids.count else {
            throw BenchSQLiteError(code: 0, message: "roll-up merge failed: \(String(describing: result?.report.reason))")
        }
        removeDatabase(copy.path)
        return t
    }
    /// Times `apply(diffs:)` of `files` into a copy of B's database as it is now.
    func timeApply(_ files: [URL], _ name: String, asBefore: Bool = false) throws -> Double {
        let copy = dir.appendingPathComponent("apply-\(name).sqlite")
        removeDatabase(copy.path)
        try dbB.exec("VACUUM INTO '\(copy.path)'")
        try Items.open(copy.path).exec("PRAGMA journal_mode=WAL")
        let target = try SyncDatabase(path: copy.path)
        if asBefore { target.applyGroupLimit = 1 }
        var reports: [ApplyReport] = []
        let t = try timeOnce { reports = target.apply(diffs: files) }
        guard reports.count == files.count, reports.allSatisfy({ $0.status == .applied }) else {
            throw BenchSQLiteError(code: 0, message: "apply of \(name) failed: \(reports.filter { $0.status != .applied }.map { $0.reason ?? "" })")
        }
        removeDatabase(copy.path)
        return t
    }
    /// Times B's sync and checks B then has every edited value.
    /// Client CPU (user + system) of the last `timeSyncB`.
    var lastCPU = 0.0
    func timeSyncB(_ edited: [String], asBefore: Bool = false, rollups: Bool = true) async throws -> (Double, SyncReport) {
        var r: SyncReport?
        var syncer = asBefore || !rollups ? syncBWithout : syncB
        if asBefore { syncer.downloadConcurrency = 1; syncer.applyGroupLimit = 1 }
        let cpu = cpuSeconds()
        let t = try await timeOnceAsync { r = try await syncer.sync() }
        lastCPU = cpuSeconds() - cpu
        try check(r!, "B")
        let q = try dbB.prepare("SELECT updated_at >= 1800000000 FROM items WHERE id = ?")
        for key in edited {
            try q.bind([.text(key)])
            guard try q.step(), sqlite3ColumnText(q, 0) == "1" else { throw BenchSQLiteError(code: 0, message: "B does not have the edited value") }
            sqlite3Reset(q)
        }
        return (t, r!)
    }

    let runs = ctx.runs
    for run in 0..<runs {
        // N one-row diffs (untimed: made and uploaded by A), then B catches up.
        let many = (0..<n).map { keys[(offset + $0) % keys.count] }
        offset += n
        let manyFiles = try export(many, oneEach: true, into: dir.appendingPathComponent("many"))
        try check(try await syncA.sync(), "A")
        manyApply.append(try timeApply(manyFiles, "many"))
        rollupMerge.append(try timeRollupMerge(lastIDs))
        // RTSYNC_BENCH_ROLLUP_LOOP=N (profiling only): the roll-up merge of the same diffs N more times.
        if let loops = ProcessInfo.processInfo.environment["RTSYNC_BENCH_ROLLUP_LOOP"].flatMap({ Int($0) }) {
            var times: [Double] = []
            for _ in 0..<loops { times.append(try timeRollupMerge(lastIDs)) }
            ctx.log("catchup: roll-up merge loop of \(loops): median \(formatTime(Stat(samples: times).median))")
        }
        // RTSYNC_BENCH_CATCHUP_APPLY_LOOP=N (profiling only): the grouped apply of the same files N more times.
        if let loops = ProcessInfo.processInfo.environment["RTSYNC_BENCH_CATCHUP_APPLY_LOOP"].flatMap({ Int($0) }) {
            var times: [Double] = []
            for _ in 0..<loops { times.append(try timeApply(manyFiles, "many")) }
            ctx.log("catchup: apply loop of \(loops): median \(formatTime(Stat(samples: times).median))")
        }
        var before = moto?.settledRequestCount() ?? 0
        let (tm, rm) = try await timeSyncB(many)
        manySync.append(tm)
        manyRequests = rm.requests
        if let moto { manyServer = moto.settledRequestCount() - before }
        manyCPU.append(lastCPU)
        // With roll-ups on, B merges A's roll-up and applies only the diffs it does not cover.
        guard rm.applied.contains(where: { $0.status == .applied }) else { throw BenchSQLiteError(code: 0, message: "B applied nothing: \(rm.phases)") }

        // The same with roll-ups off (every diff downloaded and applied, grouped).
        let plain = (0..<n).map { keys[(offset + $0) % keys.count] }
        offset += n
        _ = try export(plain, oneEach: true, into: dir.appendingPathComponent("plain"))
        try check(try await syncA.sync(), "A")
        let (tPlain, rPlain) = try await timeSyncB(plain, rollups: false)
        noRollupSync.append(tPlain)
        noRollupRequests = rPlain.requests
        guard rPlain.applied.filter({ $0.status == .applied }).count == n else { throw BenchSQLiteError(code: 0, message: "B applied \(rPlain.applied.count) of \(n) diffs (roll-ups off)") }

        // The same as before catch-up groups: one download at a time, each diff in a transaction of its own.
        let old = (0..<n).map { keys[(offset + $0) % keys.count] }
        offset += n
        let oldFiles = try export(old, oneEach: true, into: dir.appendingPathComponent("old"))
        try check(try await syncA.sync(), "A")
        oldApply.append(try timeApply(oldFiles, "old", asBefore: true))
        // RTSYNC_BENCH_CATCHUP_ALONE_LOOP=N (profiling only): the same files applied each in its own transaction, N more times.
        if let loops = ProcessInfo.processInfo.environment["RTSYNC_BENCH_CATCHUP_ALONE_LOOP"].flatMap({ Int($0) }) {
            var times: [Double] = []
            for _ in 0..<loops { times.append(try timeApply(oldFiles, "old", asBefore: true)) }
            ctx.log("catchup: apply loop of \(loops), each diff alone: median \(formatTime(Stat(samples: times).median))")
        }
        let (tOld, rOld) = try await timeSyncB(old, asBefore: true)
        oldSync.append(tOld); oldCPU.append(lastCPU)
        guard rOld.applied.filter({ $0.status == .applied }).count == n else { throw BenchSQLiteError(code: 0, message: "B applied \(rOld.applied.count) of \(n) diffs (as before)") }

        // One diff holding N edited rows (other keys), the same way.
        let one = (0..<n).map { keys[(offset + $0) % keys.count] }
        offset += n
        let oneFiles = try export(one, oneEach: false, into: dir.appendingPathComponent("one"))
        try check(try await syncA.sync(), "A")
        oneApply.append(try timeApply(oneFiles, "one"))
        before = moto?.settledRequestCount() ?? 0
        let (to, ro) = try await timeSyncB(one)
        oneSync.append(to); oneCPU.append(lastCPU)
        oneRequests = ro.requests
        if let moto { oneServer = moto.settledRequestCount() - before }
        ctx.log("catchup (\(bucketLabel)): run \(run + 1) of \(runs): sync \(formatTime(tm)) vs \(formatTime(to)), apply \(formatTime(manyApply.last!)) vs \(formatTime(oneApply.last!))")
    }
    let count = n.formatted()
    /// A row of `samples` against applying one diff of all the rows, with the aim's ratio.
    func againstOneDiff(_ name: String, _ samples: [Double], extra: String) -> Row {
        var row = Row(suite: "catchup", name: "[\(bucketLabel)] \(name)", rtsync: Stat(samples: samples),
                      baselineName: "apply of 1 diff of \(count) rows", baseline: Stat(samples: oneApply), extra: extra, aim: "≤ 1.5x one diff of all the rows")
        row.aimMet = row.ratio.map { $0 <= 1.5 }
        return row
    }
    let applyRow = againstOneDiff("apply(diffs:) of \(count) one-row diffs", manyApply, extra: "diffs already on disk; into a copy of B's database")
    var syncRow = Row(suite: "catchup", name: "[\(bucketLabel)] B's sync catching up on \(count) one-row diffs", rtsync: Stat(samples: manySync),
                      baselineName: "B's sync of 1 diff of \(count) rows", baseline: Stat(samples: oneSync),
                      extra: "\(manyRequests) requests vs \(oneRequests)" + (moto != nil ? " (server saw \(manyServer) vs \(oneServer))" : ""),
                      aim: moto != nil ? "≤ 1.5x one diff; < 2 s through moto" : "≤ 1.5x one diff")
    syncRow.aimMet = syncRow.ratio.map { $0 <= 1.5 && (moto == nil || syncRow.rtsync!.median < 2) }
    syncRow.extra! += "; B's CPU (median): \(formatTime(Stat(samples: manyCPU).median)) vs \(formatTime(Stat(samples: oneCPU).median)); B merges A's roll-up"
    let rollupRow = againstOneDiff("mergeRollup of the roll-up of \(count) one-row diffs", rollupMerge,
                                   extra: "roll-up of \(rollupRows) rows (the state of every row the diffs touched); into a copy of B's database")
    let withoutRow = Row(suite: "catchup", name: "[\(bucketLabel)] B's sync catching up on \(count) one-row diffs, roll-ups off", rtsync: Stat(samples: noRollupSync),
                         baselineName: "B's sync of 1 diff of \(count) rows", baseline: Stat(samples: oneSync),
                         extra: "\(noRollupRequests) requests vs \(oneRequests); every diff downloaded and applied (grouped), as before roll-ups")
    let beforeApply = Row(suite: "catchup", name: "[\(bucketLabel)] apply(diffs:) of \(count) one-row diffs", rtsync: Stat(samples: manyApply),
                          baselineName: "the same, each diff its own transaction (as before)", baseline: Stat(samples: oldApply))
    let beforeSync = Row(suite: "catchup", name: "[\(bucketLabel)] B's sync catching up on \(count) one-row diffs", rtsync: Stat(samples: manySync),
                         baselineName: "the same, 1 download at a time, each diff its own transaction (as before)", baseline: Stat(samples: oldSync),
                         extra: "B's CPU (median): \(formatTime(Stat(samples: manyCPU).median)) vs \(formatTime(Stat(samples: oldCPU).median))")
    return [applyRow, rollupRow, syncRow, withoutRow, beforeApply, beforeSync]
}
