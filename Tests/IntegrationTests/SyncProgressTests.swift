import BucketClient
import BucketSync
import Foundation
import SyncEngine
import RTSyncTestSupport
import Testing

/// Syncer's structured progress: an app gets phase, items done and total, and the current diff as values, and
/// BucketClient's TransferProgress counts the bytes of the same run.
@Suite struct SyncProgressTests {
    final class Collected: @unchecked Sendable {
        let lock = NSLock()
        var values: [SyncProgress] = []
        func add(_ p: SyncProgress) { lock.withLock { values.append(p) } }
    }

    @Test func sync_reportsEachPhaseWithItemCounts_andTransfersCountBytes() async throws {
        let dir = try TemporaryDirectory()
        let other = try TemporaryDirectory()
        let a = try await hsDevice(dir, "A")
        try a.insertThing("p-1", title: "one")
        _ = try await Syncer(home: a.home, remote: a.remote, retry: ltShortRetry).sync()
        // B joins the same user from the bucket, then A makes two more diffs.
        let user = try SyncDatabase(path: a.home.database.path).userID()
        let b = try await hsDevice(other, "B", bucket: LTBucket.local(dir)) { $0.userID = user }
        for n in 2...3 {
            try a.insertThing("p-\(n)", title: "row \(n)")
            _ = try await Syncer(home: a.home, remote: a.remote, retry: ltShortRetry).sync()
        }

        var syncer = Syncer(home: b.home, remote: b.remote, retry: ltShortRetry)
        let seen = Collected()
        syncer.onProgress = { seen.add($0) }
        let transfers = TransferProgress()
        let report = try await TransferProgress.$current.withValue(transfers) { try await syncer.sync() }

        #expect(report.ok, "\(report.phases)")
        let downloads = seen.values.filter { $0.phase == .download }
        let applies = seen.values.filter { $0.phase == .apply }
        #expect(downloads.count == report.downloaded.count && downloads.count >= 2)
        #expect(downloads.map(\.itemsDone) == Array(0..<downloads.count))
        #expect(downloads.allSatisfy { $0.itemsTotal == downloads.count && $0.item?.hasSuffix(".sqlite") == true })
        #expect(applies.count >= 2 && applies.allSatisfy { $0.itemsTotal == applies.count })
        #expect(seen.values.contains { $0.phase == .export })
        let snapshot = transfers.snapshot
        #expect(snapshot.bytesDone > 0 && snapshot.bytesDone == snapshot.bytesTotal, "\(snapshot)")
        #expect(snapshot.objectsDone >= report.downloaded.count)
    }
}
