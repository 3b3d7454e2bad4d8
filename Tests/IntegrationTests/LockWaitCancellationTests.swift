import BucketSync
import Foundation
import RTSyncTestSupport
import SyncEngine
import Testing

/// A sync waiting for another run's lock is cancellable: `Task.cancel()` ends the wait at once, nothing started.
@Suite struct LockWaitCancellationTests {
    @Test func cancellingASyncWaitingForTheLock_endsTheWait_withoutWaitingItOut() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir)
        try a.insertThing("lock-wait-1", title: "not exported while cancelled")
        var syncer = Syncer(home: a.home, remote: a.remote, retry: ltShortRetry)
        // An hour: a full parallel run can starve this task for minutes; a wait that ran out would throw homeBusy.
        syncer.lockWait = 3_600
        var held: HomeLock? = try HomeLock.acquire(a.home, wait: 0)
        let started = Date()
        let waiting = syncer
        let task = Task { try await waiting.sync() }
        try await Task.sleep(nanoseconds: 300_000_000)
        task.cancel()
        let outcome = await task.result
        let waited = Date().timeIntervalSince(started)
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(waited < 3_000, "the cancelled sync waited \(waited) s for the lock")
        #expect(try SyncDatabase(path: a.home.database.path).pendingChangeCount() > 0, "nothing was exported")
        withExtendedLifetime(held) {}
        held = nil
        let report = try await syncer.sync()
        #expect(report.ok && report.exported != nil, "\(report.phases)")
    }
}
