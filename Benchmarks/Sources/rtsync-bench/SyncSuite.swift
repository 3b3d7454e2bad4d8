import BucketClient
import BucketSync
import Foundation
import SyncEngine

/// sync: two homes (devices A and B) of one user sharing a bucket. Edit rows on A, `Syncer.sync` on A then on B,
/// and time until B has the values; bytes uploaded per changed row; requests per idle sync.
func runSyncSuite(_ ctx: BenchContext, moto: MotoServer?, motoNote: String) async throws -> [Row] {
    var rows: [Row] = []
    let dir = try ctx.freshDir("sync-local")
    let local = try LocalFolderStore(root: dir.appendingPathComponent("bucket", isDirectory: true))
    rows += try await syncCases(ctx, bucketLabel: "local folder", dir: dir, remote: ObjectStoreRemote(store: local, isLocal: true), moto: nil)
    try? FileManager.default.removeItem(at: dir)
    if let moto {
        let dir = try ctx.freshDir("sync-s3")
        rows += try await syncCases(ctx, bucketLabel: "moto S3", dir: dir, remote: ObjectStoreRemote(store: moto.store(prefix: "sync/"), isLocal: false), moto: moto)
        try? FileManager.default.removeItem(at: dir)
    } else {
        rows.append(Row(suite: "sync", name: "S3 bucket cases", rtsyncNote: "skipped: \(motoNote)"))
    }
    return rows
}

/// A home of `user` at `root` holding `seedRows`, backing up at its first sync only (and, with `compactThreshold`,
/// compacting only past it), for the suites that sync two devices.
func makeBenchHome(_ root: URL, seedRows: [[BenchValue]], user: String = "bench-user", compactThreshold: Int? = nil) throws -> RTSyncHome {
    let home = RTSyncHome(root: root)
    try home.createFolders()
    var settings = RTSyncSettings()
    settings.userID = user
    settings.tier = .premium              // cloud sync is a premium feature; a local folder is allowed on every tier
    settings.keepBackups = 1
    settings.backupIntervalMinutes = 1_000_000  // the first sync makes one backup; timed syncs then find none due
    if let compactThreshold { settings.compactThreshold = compactThreshold }
    try home.saveSettings(settings)
    try Items.createDatabase(home.database.path, tracked: true)
    if !seedRows.isEmpty { try Items.bulkInsert(try Items.open(home.database.path), seedRows) }
    try SyncDatabase(path: home.database.path).setUserID(user)
    return home
}

/// Throws, naming the phases that failed, unless `report` (of device `who`) completed every phase.
func requireCompleted(_ report: SyncReport, _ who: String) throws {
    if !report.ok { throw BenchSQLiteError(code: 0, message: "sync \(who) failed: \(report.phases.filter { !$0.ok }.map { "\($0.name): \($0.error ?? $0.summary)" })") }
}

private func syncCases(_ ctx: BenchContext, bucketLabel: String, dir: URL, remote: ObjectStoreRemote, moto: MotoServer?) async throws -> [Row] {
    let base = 10_000
    let seed = Items.rows(base, seed: 0x5EED)
    let keys = Items.keys(of: seed)
    let a = try makeBenchHome(dir.appendingPathComponent("A"), seedRows: seed)
    let b = try makeBenchHome(dir.appendingPathComponent("B"), seedRows: [])
    let syncA = Syncer(home: a, remote: remote), syncB = Syncer(home: b, remote: remote)
    let check = requireCompleted
    // Warm-up: A publishes its 10k rows, B applies them; each makes its first backup.
    ctx.log("sync (\(bucketLabel)): warm-up, \(base) rows A→B")
    try check(try await syncA.sync(), "A"); try check(try await syncB.sync(), "B")
    let dbA = try Items.open(a.database.path), dbB = try Items.open(b.database.path)
    guard try dbB.scalarInt("SELECT count(*) FROM items") == Int64(base) else { throw BenchSQLiteError(code: 0, message: "warm-up did not reach B") }

    var rows: [Row] = []
    var offset = 0
    var editSeed: UInt64 = 1
    for n in [1, 100, 10_000] {
        var total: [Double] = [], partA: [Double] = [], partB: [Double] = [], uploaded: Int64 = 0, requests = 0, serverRequests = 0, changesetBytes = 0
        let runs = n >= 10_000 ? min(ctx.runs, 3) : ctx.runs
        for _ in 0..<runs {
            let edited = (0..<n).map { keys[(offset + $0) % keys.count] }
            offset += n
            editSeed += 1
            let args = Items.updates(keys: edited, seed: editSeed)
            // The edit on A (untimed), recorded also by a session so the bytes compare with SQLite's changeset.
            let session = try PlainSession(db: dbA, table: "items")
            try Items.bulkUpdate(dbA, args)
            changesetBytes = try session.changeset().count
            let before = moto?.totalRequests() ?? 0
            var ra: SyncReport?, rb: SyncReport?
            let tA = try await timeOnceAsync { ra = try await syncA.sync() }
            let tB = try await timeOnceAsync { rb = try await syncB.sync() }
            try check(ra!, "A"); try check(rb!, "B")
            serverRequests = (moto?.totalRequests() ?? 0) - before
            requests = ra!.requests + rb!.requests
            uploaded = 0
            let listed = try await remote.list(prefix: Syncer.inboundPrefix(user: "bench-user"))
            for key in ra!.uploaded { uploaded += listed.first { $0.key == key }?.size ?? 0 }
            // B must now hold every edited value.
            let q = try dbB.prepare("SELECT note FROM items WHERE id = ?")
            for arg in args {
                try q.bind([arg[3]])
                guard try q.step(), let c = sqlite3ColumnText(q, 0), case .text(let want) = arg[1], c == want else {
                    throw BenchSQLiteError(code: 0, message: "B does not have the edited value")
                }
                sqlite3Reset(q)
            }
            total.append(tA + tB); partA.append(tA); partB.append(tB)
        }
        let label = n == 1 ? "1 row" : "\(n.formatted()) rows"
        var extra = "A \(formatTime(Stat(samples: partA).median)) + B \(formatTime(Stat(samples: partB).median)); "
        extra += "uploaded \(formatBytes(Double(uploaded))) = \(Int((Double(uploaded) / Double(n)).rounded())) B/row (changeset of the same edit: \(Int((Double(changesetBytes) / Double(n)).rounded())) B/row); \(requests) requests"
        if moto != nil { extra += " (server saw \(serverRequests))" }
        var r = Row(suite: "sync", name: "[\(bucketLabel)] edit \(label) on A → visible on B", rtsync: Stat(samples: total),
                    baselineName: "-", baselineNote: "n/a", extra: extra)
        if n == 100 { r.aim = "< 1 s for 100 rows"; r.aimMet = r.rtsync!.median < 1 }
        rows.append(r)
        ctx.log("sync (\(bucketLabel)): \(label) done")
    }

    // Idle sync: nothing changed anywhere.
    var idle: [Double] = [], idleRequests = 0, idleServer = 0, ops = ""
    for _ in 0..<ctx.runs {
        let before = moto?.totalRequests() ?? 0
        let counterBefore = remote.store.requestCounter.snapshot
        var r: SyncReport?
        idle.append(try await timeOnceAsync { r = try await syncA.sync() })
        try check(r!, "A")
        idleRequests = r!.requests
        idleServer = (moto?.totalRequests() ?? 0) - before
        let after = remote.store.requestCounter.snapshot
        ops = after.keys.sorted().compactMap { k in let d = after[k]! - (counterBefore[k] ?? 0); return d > 0 ? "\(d) \(k)" : nil }.joined(separator: ", ")
    }
    var idleRow = Row(suite: "sync", name: "[\(bucketLabel)] idle sync", rtsync: Stat(samples: idle), baselineName: "-", baselineNote: "n/a",
                      extra: "\(idleRequests) requests (\(ops.isEmpty ? "none" : ops))" + (moto != nil ? "; server saw \(idleServer)" : ""),
                      aim: "1 request (one LIST)")
    idleRow.aimMet = idleRequests == 1
    rows.append(idleRow)
    return rows
}
