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
}
