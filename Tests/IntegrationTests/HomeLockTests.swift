import BucketSync
import Foundation
import SyncEngine
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One run at a time per home: a second sync waits for the first, then gives up with a clear error.
@Suite("home lock")
struct HomeLockTests {
    @Test func secondRunOnABusyHome_failsWithTheOtherRunsPid_andSyncsOnceItIsFree() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let a = devices[0]
        try a.insertThing("lock-1", title: "written while another run holds the home")
        var held: HomeLock? = try HomeLock.acquire(a.home, wait: 0)
        var syncer = Syncer(home: a.home, remote: a.remote, retry: ltShortRetry)
        syncer.lockWait = 0.2
        let error = await #expect(throws: LifecycleError.self) { _ = try await syncer.sync() }
        #expect(error == .homeBusy(path: held!.path, pid: getpid()))
        #expect(a.outbox().isEmpty, "nothing was exported by the refused run")
        held = nil
        let report = try await syncer.sync()
        #expect(report.exported != nil)
        #expect(report.phases.allSatisfy { $0.ok }, "\(report.phases)")
        _ = held
    }

    /// A sync and a compaction told to stop while another run holds the home stop waiting at once (the lock is
    /// still held when they return), start nothing, and say so in their reports; the next run does the work.
    @Test func syncAndCompaction_toldToStopWhileWaitingForTheHome_returnAtOnce_havingDoneNothing() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let a = devices[0]
        try a.insertThing("lock-stop", title: "written while another run holds the home")
        var held: HomeLock? = try HomeLock.acquire(a.home, wait: 0)
        let stop = LockStopFlag()
        var syncer = Syncer(home: a.home, remote: a.remote, retry: ltShortRetry)
        syncer.lockWait = 3_600
        syncer.shouldStop = { stop.isSet }
        var compactor = Compactor(home: a.home, remote: a.remote, retry: ltShortRetry)
        compactor.lockWait = 3_600
        compactor.shouldStop = { stop.isSet }
        Task { try await Task.sleep(nanoseconds: 200_000_000); stop.set() }
        let report = try await syncer.sync()
        #expect(report.interrupted)
        #expect(report.phases.map(\.name) == ["stopped"], "\(report.phases)")
        #expect(report.exported == nil && a.outbox().isEmpty, "nothing was exported by the stopped run")
        let compaction = try await compactor.run()
        #expect(compaction.stoppedBefore?.contains("waiting for another run") == true, "\(compaction)")
        #expect(compaction.snapshotKey.isEmpty && compaction.pruned.isEmpty)
        #expect(held != nil, "the other run held the home all along")
        held = nil
        syncer.shouldStop = nil
        let next = try await syncer.sync()
        #expect(next.exported != nil && next.ok, "\(next.phases)")
    }
}

/// A flag another task sets.
private final class LockStopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
