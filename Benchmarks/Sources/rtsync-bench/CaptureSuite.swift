import Foundation
import SyncEngine

/// capture: write overhead of rtsync's capture triggers. 100k inserts, then 100k updates, each in one
/// transaction on an app connection, into a tracked table vs an identical untracked one.
func runCaptureSuite(_ ctx: BenchContext) throws -> [Row] {
    let n = 100_000
    let rows = Items.rows(n, seed: 0xC0FFEE)
    let updates = Items.updates(keys: Items.keys(of: rows), seed: 0xBEEF)
    let dir = try ctx.freshDir("capture")
    var ins: [Bool: [Double]] = [true: [], false: []]
    var upd: [Bool: [Double]] = [true: [], false: []]
    var loggedInserts: Int64 = 0, loggedUpdates: Int64 = 0
    for run in 0..<ctx.runs {
        // Alternate the order so drift on a shared machine does not favour one side.
        for tracked in run % 2 == 0 ? [false, true] : [true, false] {
            let path = dir.appendingPathComponent(tracked ? "tracked.sqlite" : "plain.sqlite").path
            try Items.createDatabase(path, tracked: tracked)
            let db = try Items.open(path)
            ins[tracked]!.append(try timeOnce { try Items.bulkInsert(db, rows) })
            if tracked { loggedInserts = try db.scalarInt("SELECT count(*) FROM rtsync_changes") ?? 0 }
            upd[tracked]!.append(try timeOnce { try Items.bulkUpdate(db, updates) })
            if tracked { loggedUpdates = (try db.scalarInt("SELECT count(*) FROM rtsync_changes") ?? 0) - loggedInserts }
            guard try db.scalarInt("SELECT count(*) FROM items") == Int64(n) else { throw BenchSQLiteError(code: 0, message: "row count mismatch") }
        }
        ctx.log("capture run \(run + 1)/\(ctx.runs)")
    }
    func row(_ name: String, _ m: [Bool: [Double]], _ logged: Int64) -> Row {
        var r = Row(suite: "capture", name: name, rtsync: Stat(samples: m[true]!), baselineName: "untracked table",
                    baseline: Stat(samples: m[false]!), extra: "+\(logged) change-log rows", aim: "tracked ≤ 1.5x untracked")
        r.aimMet = r.ratio.map { $0 <= 1.5 }
        return r
    }
    return [row("100k inserts, 1 txn", ins, loggedInserts), row("100k updates, 1 txn", upd, loggedUpdates)]
}
