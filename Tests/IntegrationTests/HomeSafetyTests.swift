import BucketSync
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import RTSyncTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Issue 15, sections 3 and 4: one run at a time on every command that writes a home, leftovers of interrupted
// runs removed, SIGINT/SIGTERM handled, bucket backups rotated, failed cursor publishes redone.

/// One device of a new user on a local-folder bucket, initialized from the bundled demo copy (no sync yet).
func hsDevice(_ dir: TemporaryDirectory, _ name: String = "A", bucket: LTBucket? = nil, edit: (inout RTSyncSettings) -> Void = { _ in }) async throws -> LTDevice {
    let bucket = bucket ?? LTBucket.local(dir)
    let home = ltHome(dir, name)
    // A cloud bucket needs the premium tier; a local folder works on free.
    try ltEditSettings(home) { $0.bucket = bucket.url; $0.tier = bucket.cloud ? .premium : .free; edit(&$0) }
    let device = LTDevice(name: name, home: home, remote: try bucket.open())
    _ = try await InitChain(home: home, remote: device.remote, bundledAsset: try LTFixture.demoCopy(in: dir), retry: ltShortRetry).run()
    return device
}

/// Names in a folder (empty when it does not exist).
func hsNames(_ url: URL) -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []).sorted() }

@Suite("home lock around every command that writes a home")
struct HomeLockEveryCommandTests {
    @Test func syncThatCompactsAndBacksUp_reusesItsOwnLock_insteadOfWaitingForItself() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir) { $0.compactThreshold = 1; $0.backupIntervalMinutes = 0 }
        try a.insertThing("nested-1", title: "exported, then compacted and backed up in the same run")
        var syncer = Syncer(home: a.home, remote: a.remote, retry: ltShortRetry)
        syncer.lockWait = 0.3

        let report = try await syncer.sync()

        #expect(report.ok, "\(report.phases)")
        #expect(report.phases.contains { $0.name == "compact" && $0.ok }, "compaction ran inside the locked sync: \(report.phases)")
        #expect(report.backup != nil, "the backup ran inside the locked sync: \(report.phases)")
    }

    @Test func lockingOperationInsideAScope_reusesTheLock_whileAnotherTaskOfTheSameProcessWaitsAndGivesUp() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir)
        var manager = BackupManager(home: a.home)
        manager.lockWait = 0
        let probe = manager

        let made = try await HomeLock.withLock(a.home, wait: 0) {
            // Another task does not inherit the scope: flock is per open file description, so it is refused.
            let other = await Task.detached { () -> LifecycleError? in
                do { _ = try probe.create(); return nil } catch let e as LifecycleError { return e } catch { return nil }
            }.value
            #expect(other == .homeBusy(path: HomeLock.lockFile(a.home), pid: getpid()))
            return try manager.create()
        }

        #expect(made.verified)
        #expect(manager.list().map(\.id) == [made.id], "only the backup made inside the scope")
    }

    @Test func backupOfAHome_whileAnotherRunHoldsItsLock_isRefusedWithHomeBusy_andWritesNothing() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir)
        var held: HomeLock? = try HomeLock.acquire(a.home, wait: 0)
        var manager = BackupManager(home: a.home)
        manager.lockWait = 0.1

        #expect(throws: LifecycleError.homeBusy(path: HomeLock.lockFile(a.home), pid: getpid())) { try manager.create() }
        #expect(manager.list().isEmpty)
        held = nil
        #expect(try manager.create().verified, "the same backup works once the lock is free")
        _ = held
    }
}

@Suite("home lock: CLI commands", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct HomeLockCLITests {
    @Test func syncHelp_namesTheLockWaitVariable_andTheSignalExitStatuses() throws {
        let r = try RTSyncBinary.run(["sync", "--help"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("RTSYNC_LOCK_WAIT"), "\(r.stdout)")
        #expect(r.stdout.contains("130") && r.stdout.contains("143"), "\(r.stdout)")
    }

    @Test func everyHomeWritingCommand_onALockedHome_exitsOneNamingTheOtherPid_andChangesNothing() async throws {
        let dir = try TemporaryDirectory()
        let root = dir.file("home")
        let first = try await ltRTSync(["sync", "--home", root.path])
        try #require(first.status == 0, "first sync: \(first.stderr)")
        let made = try await ltRTSync(["backup", "create", "--home", root.path])
        try #require(made.status == 0, "backup create: \(made.stderr)")
        let home = RTSyncHome(root: root)
        let site = try SyncDatabase(path: home.database.path).siteID()
        let backups = BackupManager(home: home).list().count
        let db = home.database.path
        var held: HomeLock? = try HomeLock.acquire(home, wait: 0)

        let commands: [[String]] = [
            ["sync", "--home", root.path], ["init", "--home", root.path], ["compact", "--home", root.path],
            ["backup", "create", "--home", root.path], ["backup", "restore", "--home", root.path], ["demo", "reset", "--home", root.path],
            ["diff", "create", "--db", db, "--out", dir.file("out").path], ["diff", "apply", "--db", db, home.inbox.path],
            ["demo", "on", "--home", root.path], ["demo", "off", "--home", root.path], ["track", "--db", db, "--all"], ["untrack", "--db", db],
            ["migrate", "--db", db, "CREATE TABLE lock_probe(id INTEGER PRIMARY KEY)"], ["conflicts", "restore", "--db", db, "1"],
        ]
        for command in commands {
            let r = try await ltRTSync(command, environment: ["RTSYNC_LOCK_WAIT": "0.2"])
            #expect(r.status == 1, "\(command.prefix(2)): \(r.stdout) \(r.stderr)")
            #expect(r.stderr.contains("error: another rtsync is running on this home (pid \(getpid()))"), "\(command.prefix(2)): \(r.stderr)")
            #expect(r.stderr.contains("hint: wait for it to finish"), "\(command.prefix(2)): \(r.stderr)")
        }
        #expect(try SyncDatabase(path: db).siteID() == site, "neither restore, demo reset nor untrack ran")
        #expect(try ltScalar(home.database, "SELECT count(*) FROM sqlite_schema WHERE name = 'lock_probe'")?.int64 == 0, "migrate did not run")
        #expect(try home.loadSettings().demo == false, "demo on did not run")
        #expect(BackupManager(home: home).list().count == backups, "no backup was made")

        held = nil
        let after = try await ltRTSync(["backup", "create", "--home", root.path], environment: ["RTSYNC_LOCK_WAIT": "0.2"])
        #expect(after.status == 0, "once the lock is free the command runs: \(after.stderr)")
        _ = held
    }
}

@Suite("concurrent runs on one home", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct ConcurrentSyncCLITests {
    @Test func fourSyncsAtOnceOnOneHome_takeTurns_allExitZero_andEveryRowReachesTheBucketOnce() async throws {
        let dir = try TemporaryDirectory()
        let root = dir.file("home")
        let first = try await ltRTSync(["sync", "--home", root.path])
        try #require(first.status == 0, "first sync: \(first.stderr)")
        let home = RTSyncHome(root: root)
        let user = try home.loadSettings().userID
        let rounds = 3, runs = 4
        for round in 0..<rounds {
            try SyncDatabase(path: home.database.path).execute("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
                INSERT INTO things(id, account_id, title) SELECT 'c\(round)-' || i, (SELECT account_id FROM owners LIMIT 1), 'round \(round)' FROM n
                """)
            let results = try await withThrowingTaskGroup(of: CommandResult.self) { group in
                for _ in 0..<runs { group.addTask { try await ltRTSync(["sync", "--home", root.path]) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for r in results {
                #expect(r.status == 0, "round \(round): \(r.stdout)\n\(r.stderr)")
                #expect(!r.stderr.contains("NSCocoaErrorDomain"), "a raw Foundation error: \(r.stderr)")
            }
        }
        #expect(try SyncDatabase(path: home.database.path).pendingChangeCount() == 0)
        #expect(hsNames(home.outbox).isEmpty, "\(hsNames(home.outbox))")
        let inbound = root.appendingPathComponent("bucket").appendingPathComponent(user).appendingPathComponent("inbound")
        var sent = 0
        for name in hsNames(inbound) where DiffFile.diffID(fromFileName: name) != nil {
            let file = try ltDiffFile(inbound.appendingPathComponent(name), scratch: dir)
            if try ltScalar(file, "SELECT count(*) FROM sqlite_schema WHERE name = 'things'")?.int64 == 1 {
                sent += Int(try ltScalar(file, "SELECT count(*) FROM things WHERE id LIKE 'c%-%'")?.int64 ?? 0)
            }
        }
        #expect(sent == rounds * 500, "every row reached the bucket exactly once")
    }
}

@Suite("leftovers of interrupted runs")
struct InterruptedRunDebrisTests {
    @Test func syncStart_removesDebrisOfDeadRuns_adoptsAnUnlistedBackup_andKeepsLiveOrRecentFiles() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir) { $0.backupIntervalMinutes = 0 }
        try a.insertThing("debris-1", title: "so that the first sync exports a diff of its own")
        try #require(try await a.sync().ok)
        let fm = FileManager.default
        let user = try a.home.loadSettings().userID
        let old = Date().addingTimeInterval(-1200)
        func plant(_ url: URL, bytes: Int = 1024, modified: Date? = nil) throws {
            try fm.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(repeating: 7, count: bytes).write(to: url)
            if let modified { try fm.setAttributes([.modificationDate: modified], ofItemAtPath: url.path) }
        }
        // The home: a diff temp file, work files in support/, backup temp files, a complete unlisted backup, a damaged one.
        let diffTemp = a.home.outbox.appendingPathComponent("." + KSUID.generate().string + ".sqlite.tmp")
        let cursorTemp = a.home.support.appendingPathComponent(".cursor.json")
        let downloadTemp = a.home.support.appendingPathComponent(".download-\(KSUID.generate().string).sqlite.partial")
        let backupTemp = a.home.backups.appendingPathComponent("." + KSUID.generate().string + ".sqlite.tmp")
        // A partial download of a diff this device has applied since (its own export here): never needed again.
        let ownDiff = try #require(try SyncDatabase(path: a.db.path).query("SELECT diff_id FROM rtsync_applied LIMIT 1").first?[0].string)
        let appliedPartial = a.home.inbox.appendingPathComponent(ownDiff + ".sqlite.partial")
        let otherPartial = a.home.inbox.appendingPathComponent(KSUID.generate().string + ".sqlite.partial")
        for url in [diffTemp, cursorTemp, downloadTemp, backupTemp, appliedPartial, otherPartial] { try plant(url) }
        try plant(URL(fileURLWithPath: backupTemp.path + "-journal"))
        let listed = try #require(BackupManager(home: a.home).list().first)
        let unlistedID = KSUID.generate().string
        try fm.copyItem(at: a.home.backups.appendingPathComponent(listed.file), to: a.home.backups.appendingPathComponent(unlistedID + ".sqlite"))
        let damaged = a.home.backups.appendingPathComponent(KSUID.generate().string + ".sqlite")
        try plant(damaged)
        // The temp folder: apply folders of a dead process, of this (live) process, old and recent unnamed ones.
        let dead = Process()
        dead.executableURL = URL(fileURLWithPath: "/bin/true")
        try dead.run()
        dead.waitUntilExit()
        let temp = fm.temporaryDirectory
        let deadFolder = temp.appendingPathComponent("rtsync-apply-\(dead.processIdentifier)-\(UUID().uuidString)")
        let liveFolder = temp.appendingPathComponent("rtsync-apply-\(getpid())-\(UUID().uuidString)")
        let oldUnnamed = temp.appendingPathComponent("rtsync-apply-\(UUID().uuidString)")
        let recentUnnamed = temp.appendingPathComponent("rtsync-apply-\(UUID().uuidString)")
        defer { for f in [deadFolder, liveFolder, oldUnnamed, recentUnnamed] { try? fm.removeItem(at: f) } }
        for f in [deadFolder, liveFolder, oldUnnamed, recentUnnamed] { try plant(f.appendingPathComponent("x.sqlite")) }
        try fm.setAttributes([.modificationDate: old], ofItemAtPath: oldUnnamed.path)
        // The local-folder bucket: an old and a recent (maybe another device's, still writing) temp file.
        let inbound = dir.file("bucket").appendingPathComponent(user).appendingPathComponent("inbound")
        let oldBucketTemp = inbound.appendingPathComponent(".rtsync-tmp-\(UUID().uuidString)")
        let recentBucketTemp = inbound.appendingPathComponent(".rtsync-tmp-\(UUID().uuidString)")
        try plant(oldBucketTemp, modified: old)
        try plant(recentBucketTemp)

        let report = try await a.sync()

        #expect(report.ok, "\(report.phases)")
        for gone in [diffTemp, cursorTemp, downloadTemp, backupTemp, appliedPartial, URL(fileURLWithPath: backupTemp.path + "-journal"), damaged, deadFolder, oldUnnamed, oldBucketTemp] {
            #expect(!fm.fileExists(atPath: gone.path), "left behind: \(gone.path)")
        }
        for kept in [liveFolder, recentUnnamed, recentBucketTemp, otherPartial] {
            #expect(fm.fileExists(atPath: kept.path), "removed although it may be in use: \(kept.path)")
        }
        let adopted = BackupManager(home: a.home).list().first { $0.id == unlistedID }
        #expect(adopted?.method == "adopted" && adopted?.verified == true, "\(BackupManager(home: a.home).list())")
        #expect(report.phases.contains { $0.name == "cleanup" }, "\(report.phases)")
    }

    @Test func adoptedBackups_rotateLikeOthers() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir)
        var manager = BackupManager(home: a.home, keep: 2)
        manager.preferClone = false
        let made = try manager.create()
        // Three complete backups renamed into place by runs killed before they were listed.
        for _ in 0..<3 {
            try FileManager.default.copyItem(at: a.home.backups.appendingPathComponent(made.file),
                                             to: a.home.backups.appendingPathComponent(KSUID.generate().string + ".sqlite"))
        }

        let result = try manager.tidy()

        #expect(result.adopted.count == 3)
        #expect(manager.list().count == 2, "\(manager.list().map(\.id))")
        #expect(hsNames(a.home.backups).filter { $0.hasSuffix(".sqlite") }.count == 2, "\(hsNames(a.home.backups))")
    }
}

@Suite("bucket backups rotate")
struct BucketBackupRotationTests {
    @Test(arguments: LTMoto.skipRequested ? ["local"] : ["local", "s3"])
    func syncsThatCompactAndUploadBackups_keepKeepBackupsInTheBucket_andANewDeviceInitsFromTheNewestWithEveryRow(_ kind: String) async throws {
        let dir = try TemporaryDirectory()
        let bucket = kind == "s3" ? try await LTBucket.s3() : LTBucket.local(dir)
        defer { Task { await LTSyncScenarios.cleanUp(bucket) } }
        // Every sync compacts too (its snapshot is one more backup in the bucket, and it prunes the diffs).
        let a = try await hsDevice(dir, bucket: bucket) { $0.keepBackups = 2; $0.backupIntervalMinutes = 0; $0.compactThreshold = 1 }
        let user = try a.home.loadSettings().userID
        for i in 0..<4 {
            try a.insertThing("rotate-\(i)", title: "round \(i)")
            let r = try await a.sync()
            try #require(r.ok, "\(r.phases)")
        }

        let keys = try await a.remote.list(prefix: user + "/backups/").map(\.key).sorted()
        #expect(keys.count == 2, "\(keys)")
        let newestLocal = try #require(BackupManager(home: a.home).list().first)
        #expect(keys.last == user + "/backups/" + newestLocal.file)
        #expect(try await a.remote.list(prefix: Syncer.inboundPrefix(user: user)).isEmpty, "compaction pruned every diff")
        let b = ltHome(dir, "B")
        try ltEditSettings(b) { $0.bucket = bucket.url; $0.tier = bucket.cloud ? .premium : .free }
        let joined = try await InitChain(home: b, remote: a.remote, joinUser: user, bundledAsset: nil, retry: ltShortRetry).run()
        #expect(joined.source == .bucket)
        #expect(joined.attempts.last?.detail == keys.last)
        for i in 0..<4 {
            #expect(try ltScalar(b.database, "SELECT title FROM things WHERE id = 'rotate-\(i)'")?.string == "round \(i)")
        }
    }
}

@Suite("cursor publish")
struct PendingCursorTests {
    @Test func failedCursorPublish_isRedoneByTheNextIdleSync() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir)
        let user = try a.home.loadSettings().userID
        try a.insertThing("cursor-1", title: "its diff must be in the cursor")
        // The first upload is the diff, the second the cursor.
        let failing = LTFaultyRemote(a.remote, .failBefore(.upload, nth: 2))

        let first = try await a.sync(via: failing, retry: ltNoRetry)

        #expect(first.phases.contains { $0.name == "cursor" && !$0.ok }, "\(first.phases)")
        let exported = try #require(first.exported?.diffID)
        #expect(FileManager.default.fileExists(atPath: Syncer.pendingCursorMarker(a.home).path))

        let second = try await a.sync()

        #expect(second.ok, "\(second.phases)")
        #expect(second.exported == nil && second.applied.isEmpty, "an idle run")
        #expect(!FileManager.default.fileExists(atPath: Syncer.pendingCursorMarker(a.home).path))
        let file = dir.file("cursor.json")
        try await a.remote.download(key: Compactor.cursorKey(user: user, site: try a.siteID()), to: file)
        let cursor = try JSONDecoder().decode(DeviceCursor.self, from: Data(contentsOf: file))
        #expect(cursor.applied.contains(exported), "\(cursor.applied)")
    }
}

@Suite("sync stopped at a safe point (library)")
struct SyncStopTests {
    @Test func stopAskedAfterTheFirstOfThreeDiffs_appliesOnlyThatOne_keepsTheRestInTheInbox_andTheNextSyncAppliesThem() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir, "A")
        let user = try a.home.loadSettings().userID
        try #require(try await a.sync().ok, "uploads A's first backup, which B starts from")
        let b = ltHome(dir, "B")
        try ltEditSettings(b) { $0.bucket = LTBucket.local(dir).url }
        _ = try await InitChain(home: b, remote: a.remote, joinUser: user, bundledAsset: nil, retry: ltShortRetry).run()
        for i in 0..<3 {
            try a.insertThing("stop-\(i)", title: "diff \(i)")
            try #require(try await a.sync().ok)
        }
        let bDevice = LTDevice(name: "B", home: b, remote: a.remote)
        let aSite = try a.siteID()
        var syncer = Syncer(home: b, remote: a.remote, retry: ltShortRetry)
        // The stop is asked for once the first diff's apply has started; the run ends before the next one. (Small
        // diffs are applied several to a transaction, so another connection sees them only when the run commits
        // them at the stop.)
        let asked = HSFlag()
        syncer.onProgress = { p in if p.phase == .apply { asked.set() } }
        syncer.shouldStop = { asked.isSet }

        let stopped = try await syncer.sync()

        #expect(stopped.interrupted, "\(stopped.phases)")
        #expect(stopped.applied.filter { $0.status == .applied }.count == 1, "\(stopped.applied)")
        #expect(try ltScalar(b.database, "SELECT count(*) FROM rtsync_applied WHERE author_site = ?", [.text(aSite)])?.int64 == 1, "the one applied is committed")
        #expect(stopped.phases.last?.summary.contains("2 downloaded diff(s) to apply") == true, "\(stopped.phases)")
        #expect(hsNames(b.inbox).filter { DiffFile.diffID(fromFileName: $0) != nil }.count == 2)

        let rest = try await bDevice.sync()

        #expect(rest.ok && !rest.interrupted, "\(rest.phases)")
        for i in 0..<3 { #expect(try bDevice.thingTitle("stop-\(i)") == "diff \(i)") }
        #expect(hsNames(b.inbox).filter { DiffFile.diffID(fromFileName: $0) != nil }.isEmpty)
    }
}

@Suite("sync interrupted by a signal", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct SyncSignalTests {
    @Test(arguments: [SIGINT, SIGTERM])
    func signalDuringALargeExport_stopsAtASafePoint_exits130or143_leavesNoTempFile_andTheNextSyncSendsEveryRow(_ sig: Int32) async throws {
        let dir = try TemporaryDirectory()
        let root = dir.file("home")
        let first = try await ltRTSync(["sync", "--home", root.path])
        try #require(first.status == 0, "first sync: \(first.stderr)")
        let home = RTSyncHome(root: root)
        let user = try home.loadSettings().userID
        let rows = 2000
        // About 200 MB to export: long enough to be interrupted while the diff's temp file is being written.
        try SyncDatabase(path: home.database.path).execute("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows))
            INSERT INTO things(id, account_id, title) SELECT 'big-' || i, (SELECT account_id FROM owners LIMIT 1), hex(randomblob(50000)) FROM n
            """)
        let binary = try #require(RTSyncBinary.url)
        let out = dir.file("sync.out"), err = dir.file("sync.err")
        for f in [out, err] { _ = FileManager.default.createFile(atPath: f.path, contents: nil) }
        let process = Process()
        process.executableURL = binary
        process.arguments = ["sync", "--home", root.path]
        var environment = ProcessInfo.processInfo.environment
        environment["RTSYNC_HOME"] = nil
        process.environment = environment
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        process.standardInput = FileHandle.nullDevice
        try process.run()

        // Interrupt once the export is writing its temp file. Watched from a thread of its own: under a loaded test
        // run the cooperative pool can leave a polling task unscheduled for the whole export.
        let watch = HSWatch()
        let pid = process.processIdentifier, outbox = home.outbox
        let watcher = Thread {
            let deadline = Date().addingTimeInterval(120)
            while !watch.exited && Date() < deadline {
                if hsNames(outbox).contains(where: { $0.hasPrefix(".") && $0.hasSuffix(".tmp") }) {
                    kill(pid, sig)
                    watch.signalled = true
                    return
                }
                usleep(1000)
            }
        }
        watcher.start()
        let end = await waitForExit(process)
        watch.exited = true
        let sawTemp = watch.signalled
        let stdout = String(decoding: try Data(contentsOf: out), as: UTF8.self), stderr = String(decoding: try Data(contentsOf: err), as: UTF8.self)

        try #require(sawTemp, "the export never showed its temp file; stdout: \(stdout)")
        let name = sig == SIGINT ? "SIGINT" : "SIGTERM"
        #expect(!end.signaled && end.status == 128 + sig, "stdout: \(stdout)\nstderr: \(stderr)")
        #expect(stdout.contains("stopped: interrupted before"), "what is left is printed: \(stdout)")
        #expect(stderr.contains("error: sync interrupted by \(name)") && stderr.contains("hint:"), "\(stderr)")
        #expect(!hsNames(home.outbox).contains { $0.hasPrefix(".") }, "temp files left: \(hsNames(home.outbox))")
        #expect(try ltScalar(home.database, "PRAGMA integrity_check")?.string == "ok")

        let second = try await ltRTSync(["sync", "--home", root.path])

        #expect(second.status == 0, "\(second.stdout)\n\(second.stderr)")
        #expect(try SyncDatabase(path: home.database.path).pendingChangeCount() == 0)
        let inbound = root.appendingPathComponent("bucket").appendingPathComponent(user).appendingPathComponent("inbound")
        let sent = try hsNames(inbound).filter { DiffFile.diffID(fromFileName: $0) != nil }.reduce(0) { total, name in
            let file = try ltDiffFile(inbound.appendingPathComponent(name), scratch: dir)
            return total + Int(try ltScalar(file, "SELECT count(*) FROM sqlite_schema WHERE name = 'things'")?.int64 == 1
                        ? (try ltScalar(file, "SELECT count(*) FROM things WHERE id LIKE 'big-%'")?.int64 ?? 0) : 0)
        }
        #expect(sent == rows, "every row reached the bucket exactly once")
    }
}

/// What the watcher thread of `SyncSignalTests` saw.
final class HSWatch: @unchecked Sendable {
    private let lock = NSLock()
    private var _exited = false, _signalled = false
    var exited: Bool {
        get { lock.lock(); defer { lock.unlock() }; return _exited }
        set { lock.lock(); _exited = newValue; lock.unlock() }
    }
    var signalled: Bool {
        get { lock.lock(); defer { lock.unlock() }; return _signalled }
        set { lock.lock(); _signalled = newValue; lock.unlock() }
    }
}

/// A flag set from a `@Sendable` closure and read from another.
final class HSFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    func set() { lock.lock(); value = true; lock.unlock() }
}
