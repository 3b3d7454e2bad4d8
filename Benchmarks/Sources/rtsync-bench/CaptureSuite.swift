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
    var pending = 0
    for run in 0..<ctx.runs {
        // Alternate the order so drift on a shared machine does not favour one side.
        for tracked in run % 2 == 0 ? [false, true] : [true, false] {
            let path = dir.appendingPathComponent(tracked ? "tracked.sqlite" : "plain.sqlite").path
            try Items.createDatabase(path, tracked: tracked)
            let db = try Items.open(path)
            ins[tracked]!.append(try timeOnce { try Items.bulkInsert(db, rows) })
            upd[tracked]!.append(try timeOnce { try Items.bulkUpdate(db, updates) })
            if tracked { pending = Int(try db.scalarInt("SELECT count(*) FROM rtsync_changes") ?? 0) }
            guard try db.scalarInt("SELECT count(*) FROM items") == Int64(n) else { throw BenchSQLiteError(code: 0, message: "row count mismatch") }
        }
        ctx.log("capture run \(run + 1)/\(ctx.runs)")
    }
    func row(_ name: String, _ m: [Bool: [Double]]) -> Row {
        var r = Row(suite: "capture", name: name, rtsync: Stat(samples: m[true]!), baselineName: "untracked table",
                    baseline: Stat(samples: m[false]!), extra: "\(pending) change-log rows after both", aim: "tracked ≤ 1.5x untracked")
        r.aimMet = r.ratio.map { $0 <= 1.5 }
        return r
    }
    return [row("100k inserts, 1 txn", ins), row("100k updates, 1 txn", upd)]
}
