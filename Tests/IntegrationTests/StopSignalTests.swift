import BucketSync
import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Issue 15 §4: SIGINT and SIGTERM stop every long command at a safe point. Each test sends a real signal to the
// built binary while it is provably in the middle of its work (an upload or a delete held by the fault proxy, or
// the wait for the home's lock), then checks the exit status (130 or 143), the one `error:` line saying what was
// finished and what is left, that nothing is half-done or left behind, and that running the command again finishes.

/// The lock wait of a child stopped while it waits: long, because a full parallel run can starve this process's
/// cooperative pool for minutes (on 2 cores), and a shorter wait could run out before the test sends the signal;
/// a child that takes the signal ends its wait at once, so the length costs nothing.
let ltLongLockWait = 3_600

/// A running `rtsync` child whose output goes to files the test can read while it runs.
final class LTChild {
    let process = Process()
    let out: URL
    let err: URL
    private let handles: [FileHandle]

    init(_ arguments: [String], environment: [String: String] = [:], in dir: TemporaryDirectory) throws {
        let binary = try #require(RTSyncBinary.url, "rtsync binary not found; build it or set RTSYNC_BIN")
        let name = UUID().uuidString
        out = dir.url.appendingPathComponent(name + ".out")
        err = dir.url.appendingPathComponent(name + ".err")
        for url in [out, err] { _ = FileManager.default.createFile(atPath: url.path, contents: nil) }
        handles = [try FileHandle(forWritingTo: out), try FileHandle(forWritingTo: err)]
        process.executableURL = binary
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["RTSYNC_HOME"] = nil
        env.merge(environment) { $1 }
        process.environment = env
        process.standardOutput = handles[0]
        process.standardError = handles[1]
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    var stderr: String { String(decoding: (try? Data(contentsOf: err)) ?? Data(), as: UTF8.self) }
    var stdout: String { String(decoding: (try? Data(contentsOf: out)) ?? Data(), as: UTF8.self) }

    /// Waits (polling, up to `limit` seconds as a safety net, not an assertion) until `condition` holds or the
    /// child ended; returns whether it holds.
    func wait(upTo limit: Double = 120, until condition: () async throws -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(limit)
        while Date() < deadline {
            if try await condition() { return true }
            if !process.isRunning { return try await condition() }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        // A task starved past the deadline (a busy cooperative pool in a full run) still looks once more.
        return try await condition()
    }

    func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Starts `arguments` on `home` while this process holds its lock, waits for the child to say it waits for that
    /// lock, sends `sig`, and returns the child's exit status once it ended, the lock still held (so a child that
    /// stops only when the lock is free fails the caller's expectations instead of passing late).
    static func stoppedWhileWaiting(_ arguments: [String], home: RTSyncHome, signal sig: Int32, environment: [String: String] = [:],
                                    in dir: TemporaryDirectory, sourceLocation: SourceLocation = #_sourceLocation) async throws -> (child: LTChild, status: Int32?) {
        var lock: HomeLock? = try HomeLock.acquire(home, wait: 0)
        defer { withExtendedLifetime(lock) {}; lock = nil }
        let child = try LTChild(arguments, environment: environment.merging(["RTSYNC_LOCK_WAIT": "\(ltLongLockWait)"]) { $1 }, in: dir)
        let waiting = try await child.wait { child.stderr.contains("waiting up to \(ltLongLockWait) s for another rtsync run on \(home.root.path) (pid \(getpid())) to finish") }
        try #require(waiting, "\(child.stderr)", sourceLocation: sourceLocation)
        child.signal(sig)
        let name = sig == SIGINT ? "SIGINT" : "SIGTERM"
        // The wait ends at once: the child stops while the other run still holds the lock.
        let stopping = try await child.wait(upTo: 60) { child.stderr.contains("\(name): stopping at the next safe point") }
        #expect(stopping, "the child never said it was stopping on \(name):\n\(child.signalState)\n\(child.stderr)", sourceLocation: sourceLocation)
        if !stopping { child.signal(SIGKILL) }
        return (child, await child.finish())
    }

    /// Each thread's state and signal masks (from /proc, Linux only), for a failure message.
    var signalState: String {
        let task = "/proc/\(process.processIdentifier)/task"
        return ((try? FileManager.default.contentsOfDirectory(atPath: task)) ?? []).sorted().map { tid in
            let status = (try? String(contentsOfFile: "\(task)/\(tid)/status", encoding: .utf8)) ?? ""
            let wanted = status.split(separator: "\n").filter { ["Name", "State", "SigPnd", "ShdPnd", "SigBlk", "SigCgt"].contains(String($0.prefix { $0 != ":" })) }
            return tid + " " + wanted.joined(separator: " ").replacingOccurrences(of: "\t", with: "")
        }.joined(separator: "\n")
    }

    /// Waits for the end; returns the exit status, or nil when a signal ended the process (it did not stop itself).
    func finish() async -> Int32? {
        let end = await waitForExit(process)
        for h in handles { try? h.close() }
        return end.signaled ? nil : end.status
    }
}

/// Two devices of one user on a fresh moto prefix reached through a fault proxy.
struct LTProxiedUser {
    let dir: TemporaryDirectory
    let proxy: LTFaultProxy
    let bucketURL: String
    let environment: [String: String]
    let a: RTSyncHome
    let b: RTSyncHome
    let user: String

    /// The bucket's path prefix as the proxy sees it: `/<bucket>/<prefix>/<user>/`.
    var userPath: String { "/" + bucketURL.dropFirst("s3://".count) + "/" + user + "/" }

    static func make() async throws -> LTProxiedUser {
        let moto = try await LTMoto.shared.value
        let proxy = try await LTFaultProxy.start(upstream: moto.endpoint)
        let dir = try TemporaryDirectory()
        let bucketURL = moto.freshBucketURL()
        let environment = proxy.environment(moto.environment)
        let asset = try LTFixture.demoCopy(in: dir)
        var user: String?
        let a = ltHome(dir, "A"), b = ltHome(dir, "B")
        for home in [a, b] {
            try ltEditSettings(home) { $0.tier = .premium; $0.bucket = bucketURL }
            let remote = try moto.remote(bucketURL)
            let result = try await InitChain(home: home, remote: remote, joinUser: user, bundledAsset: asset, retry: ltShortRetry).run()
            user = result.userId
            let first = try await Syncer(home: home, remote: remote, retry: ltShortRetry).sync()
            try #require(first.ok, "first sync: \(first.phases)")
        }
        return LTProxiedUser(dir: dir, proxy: proxy, bucketURL: bucketURL, environment: environment, a: a, b: b, user: user!)
    }

    func remote() async throws -> ObjectStoreRemote { try await LTMoto.shared.value.remote(bucketURL) }

    func insert(_ home: RTSyncHome, _ prefix: String, count: Int) throws {
        try SyncDatabase(path: home.database.path).execute("""
            WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
            INSERT INTO things(id, account_id, title) SELECT printf('%s%05d', ?, i), (SELECT account_id FROM owners LIMIT 1), 'stop test' FROM n
            """, [.integer(Int64(count)), .text(prefix)])
    }

    func count(_ home: RTSyncHome, _ prefix: String) throws -> Int64 {
        try ltScalar(home.database, "SELECT count(*) FROM things WHERE id LIKE ?", [.text(prefix + "%")])?.int64 ?? -1
    }

    func sync(_ home: RTSyncHome) async throws {
        let r = try await ltRTSync(["sync", "--home", home.root.path], environment: environment)
        try #require(r.status == 0, "sync \(home.root.lastPathComponent): \(r.stderr)")
    }
}

/// Hidden files rtsync leaves only while it works (temp diffs and backups, multipart resume files, atomic-write
/// temps) anywhere under `root`, besides the home's lock, the media manifest and the marker of a cursor to publish.
func ltHiddenLeftovers(_ root: URL) -> [String] {
    var found: [String] = []
    guard let walk = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else { return [] }
    for case let url as URL in walk where url.lastPathComponent.hasPrefix(".")
        && ![".rtsync.lock", ".rtsync-media-manifest.json", ".cursor-pending"].contains(url.lastPathComponent) {
        found.append(url.path)
    }
    return found
}

/// The `error:` lines of a command's standard error.
func ltErrorLines(_ stderr: String) -> [String] {
    stderr.split(separator: "\n").map(String.init).filter { $0.hasPrefix("error:") }
}

@Suite("SIGINT and SIGTERM stop long commands at a safe point",
       .enabled(if: RTSyncBinary.url != nil && !LTMoto.skipRequested, "needs the rtsync binary and moto"))
struct StopSignalTests {
    /// `backup create --upload` is stopped while its upload is on the wire: the upload finishes, the bucket's
    /// rotation is left for later, the backup is whole (listed, verified, in the bucket) and nothing is left over.
    @Test func backupCreateUpload_SIGINTDuringUpload_finishesTheUpload_exits130_andSaysRotationIsLeft() async throws {
        let u = try await LTProxiedUser.make()
        try await u.proxy.set(.init(hold: "PUT " + u.userPath + "backups/"))
        let child = try LTChild(["backup", "create", "--home", u.a.root.path, "--upload"], environment: u.environment, in: u.dir)
        let held = try await child.wait { try await u.proxy.held() > 0 }
        try #require(held, "the upload never reached the proxy: \(child.stderr)")
        child.signal(SIGINT)
        // The signal is handled before the upload may go on.
        _ = try await child.wait { child.stderr.contains("SIGINT: stopping at the next safe point") }
        try await u.proxy.release()
        let status = await child.finish()
        #expect(status == 130, "stderr: \(child.stderr)")
        let errors = ltErrorLines(child.stderr)
        #expect(errors.count == 1, "\(child.stderr)")
        #expect(errors.first?.contains("backup create interrupted by SIGINT at a safe point: backup ") == true, "\(errors)")
        #expect(errors.first?.contains("made and uploaded to \(u.user)/backups/") == true, "\(errors)")
        #expect(errors.first?.contains("left: removing older bucket backups") == true, "\(errors)")
        #expect(child.stderr.contains("\nhint: "), "\(child.stderr)")

        let list = BackupManager(database: u.a.database, folder: u.a.backups).list()
        let newest = try #require(list.first)
        #expect(newest.verified)
        let keys = try await u.remote().list(prefix: u.user + "/backups/").map(\.key)
        #expect(keys.contains(u.user + "/backups/" + newest.file), "\(keys)")
        #expect(ltHiddenLeftovers(u.a.root).isEmpty, "\(ltHiddenLeftovers(u.a.root))")
        let moto = try await LTMoto.shared.value
        #expect(try await moto.unfinishedUploads(under: u.bucketURL).isEmpty)

        // Run again, nothing held: it finishes, rotation included.
        let again = try await ltRTSync(["backup", "create", "--home", u.a.root.path, "--upload"], environment: u.environment)
        #expect(again.status == 0, "\(again.stderr)")
    }

    /// `compact` is stopped while it deletes the first pruned diff: that delete finishes, no other diff is
    /// pruned, the exit status is 143 and the message counts what is left; the next compaction prunes the rest and a
    /// new device still gets every row.
    @Test func compact_SIGTERMDuringPruning_prunesNoMore_exits143_andTheNextCompactionFinishes() async throws {
        let u = try await LTProxiedUser.make()
        // Several diffs that both devices apply.
        for round in 0..<3 {
            try u.insert(u.a, "stop-a\(round)-", count: 20)
            try await u.sync(u.a)
            try u.insert(u.b, "stop-b\(round)-", count: 20)
            try await u.sync(u.b)
        }
        try await u.sync(u.a)
        try await u.sync(u.b)
        let inbound = u.user + "/inbound/"
        let before = try await u.remote().list(prefix: inbound).count
        try #require(before >= 3, "only \(before) diff(s) in inbound")

        try await u.proxy.set(.init(hold: "DELETE " + u.userPath + "inbound/"))
        let child = try LTChild(["compact", "--home", u.a.root.path], environment: u.environment, in: u.dir)
        let held = try await child.wait { try await u.proxy.held() > 0 }
        try #require(held, "compaction never deleted a diff: \(child.stderr) \(child.stdout)")
        child.signal(SIGTERM)
        _ = try await child.wait { child.stderr.contains("SIGTERM: stopping at the next safe point") }
        try await u.proxy.release()
        let status = await child.finish()
        #expect(status == 143, "stderr: \(child.stderr)")
        let errors = ltErrorLines(child.stderr)
        #expect(errors.count == 1, "\(child.stderr)")
        #expect(errors.first?.contains("compact interrupted by SIGTERM at a safe point: snapshot \(u.user)/backups/") == true, "\(errors)")
        #expect(try await u.remote().list(prefix: inbound).count == before - 1)
        #expect(ltHiddenLeftovers(u.a.root).isEmpty, "\(ltHiddenLeftovers(u.a.root))")

        let again = try await ltRTSync(["compact", "--home", u.a.root.path, "--json"], environment: u.environment)
        #expect(again.status == 0, "\(again.stderr)")
        let rest = try #require(try jsonObject(again.stdout)["pruned"] as? [String]).count
        #expect(rest >= 1, "\(again.stdout)")
        // The stopped run counted exactly what the next one pruned as left.
        #expect(errors.first?.contains("uploaded, 1 diff(s) pruned; left: pruning \(rest) of \(rest + 1) applied diff(s)") == true, "\(errors)")
        #expect(try await u.remote().list(prefix: inbound).count == before - 1 - rest)

        // A device joining now starts from the snapshot and has every row.
        let c = ltHome(u.dir, "C")
        let joined = try await ltRTSync(["init", "--home", c.root.path, "--bucket", u.bucketURL, "--user", u.user, "--tier", "premium"], environment: u.environment)
        try #require(joined.status == 0, "\(joined.stderr)")
        try await u.sync(c)
        for round in 0..<3 {
            #expect(try u.count(c, "stop-a\(round)-") == 20)
            #expect(try u.count(c, "stop-b\(round)-") == 20)
        }
    }

    /// `diff apply` stopped while it waits for another run's lock on the home applies nothing (files untouched,
    /// no temp folder), exits 130 and says how many diffs are left; the same command then applies them all.
    @Test func diffApply_SIGINTWhileWaitingForTheHome_appliesNothing_exits130_thenTheRerunAppliesAll() async throws {
        let dir = try TemporaryDirectory()
        let a = ltHome(dir, "A"), b = ltHome(dir, "B")
        let bucket = "file://" + dir.url.appendingPathComponent("bucket").path
        let asset = try LTFixture.demoCopy(in: dir)
        var user: String?
        for home in [a, b] {
            try ltEditSettings(home) { $0.tier = .free; $0.bucket = bucket }
            let remote = try ObjectStoreRemote.open(bucket)
            user = try await InitChain(home: home, remote: remote, joinUser: user, bundledAsset: asset, retry: ltShortRetry).run().userId
            try #require(try await Syncer(home: home, remote: remote, retry: ltShortRetry).sync().ok)
        }
        let hand = dir.url.appendingPathComponent("hand", isDirectory: true)
        for i in 0..<3 {
            try SyncDatabase(path: a.database.path).execute("""
                INSERT INTO things(id, account_id, title) VALUES (?, (SELECT account_id FROM owners LIMIT 1), 'by hand')
                """, [.text("hand-\(i)")])
            let made = try await ltRTSync(["diff", "create", "--db", a.database.path, "--out", hand.path])
            try #require(made.status == 0, "\(made.stderr)")
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: hand.path).sorted()
        try #require(files.count == 3)

        // Another run holds B's home: the apply waits for it, says so, and is stopped meanwhile.
        let tmp = dir.url.appendingPathComponent("tmp", isDirectory: true)
        try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
        let (child, status) = try await LTChild.stoppedWhileWaiting(["diff", "apply", "--db", b.database.path, hand.path], home: b, signal: SIGINT,
                                                                    environment: ["TMPDIR": tmp.path], in: dir)
        #expect(status == 130, "stderr: \(child.stderr)")
        let errors = ltErrorLines(child.stderr)
        #expect(errors == ["error: diff apply interrupted by SIGINT at a safe point: nothing done (it was waiting for another rtsync run on this home); left: all of it (\(b.root.path))"],
                "\(child.stderr)")
        #expect(child.stderr.contains("\nhint: nothing was lost; run the same command again"), "\(child.stderr)")
        #expect(try ltScalar(b.database, "SELECT count(*) FROM things WHERE id LIKE 'hand-%'")?.int64 == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: hand.path).sorted() == files)
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp.path).isEmpty)

        let again = try await ltRTSync(["diff", "apply", "--db", b.database.path, hand.path])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("3 diff(s): 3 applied"), "\(again.stdout)")
        #expect(try ltScalar(b.database, "SELECT count(*) FROM things WHERE id LIKE 'hand-%'")?.int64 == 3)
    }

    /// `media sync` stopped while one upload is held: running uploads finish and are recorded, no other starts,
    /// exit 130 with what is left; the re-run uploads only the files not started (PUTs counted at the proxy).
    @Test func mediaSync_SIGINTDuringAnUpload_startsNoMoreTransfers_exits130_andTheRerunSendsOnlyWhatWasLeft() async throws {
        let u = try await LTProxiedUser.make()
        _ = try mfWriteRecordings(u.a, count: 20)
        try await u.proxy.set(.init(hold: "PUT " + u.userPath + "recordings/"))
        // One transfer at a time would make "left" exact; the default window of 16 still leaves 4 never started.
        let child = try LTChild(["media", "sync", "--home", u.a.root.path], environment: u.environment, in: u.dir)
        let held = try await child.wait { try await u.proxy.held() > 0 }
        try #require(held, "no upload reached the proxy: \(child.stderr)")
        child.signal(SIGINT)
        _ = try await child.wait { child.stderr.contains("SIGINT: stopping at the next safe point") }
        try await u.proxy.release()
        let status = await child.finish()
        #expect(status == 130, "stderr: \(child.stderr)")
        let errors = ltErrorLines(child.stderr)
        #expect(errors.count == 1, "\(child.stderr)")
        #expect(errors.first?.contains("media sync interrupted by SIGINT at a safe point: ") == true, "\(errors)")
        let first = mfMediaPuts(try await u.proxy.stats().puts)
        #expect(first.values.allSatisfy { $0 == 1 } && first.count < 20, "\(first)")
        #expect(errors.first?.contains("\(first.count) uploaded, 0 downloaded; left: \(20 - first.count) transfer(s) or deletion(s) not started") == true,
                "\(errors) \(first)")
        #expect(ltHiddenLeftovers(u.a.documents).isEmpty, "\(ltHiddenLeftovers(u.a.documents))")

        try await u.proxy.resetCounts()
        let again = try await ltRTSync(["media", "sync", "--home", u.a.root.path], environment: u.environment)
        #expect(again.status == 0, "\(again.stderr)")
        let second = mfMediaPuts(try await u.proxy.stats().puts)
        #expect(Set(second.keys).isDisjoint(with: first.keys) && second.count + first.count == 20, "first \(first), then \(second)")
    }

    /// `diff create` stopped while it waits for another run's lock stops waiting at once, exports nothing (no
    /// file, every change still pending) and exits 143; the re-run exports the changes.
    @Test func diffCreate_SIGTERMWhileWaitingForTheHome_exportsNothing_exits143() async throws {
        let dir = try TemporaryDirectory()
        let (a, remote) = try await ltLocalBucketHome(dir)
        try #require(try await Syncer(home: a, remote: remote, retry: ltShortRetry).sync().ok)
        try SyncDatabase(path: a.database.path).execute("INSERT INTO things(id, account_id, title) VALUES ('stop-create', (SELECT account_id FROM owners LIMIT 1), 'x')")
        let pending = try SyncDatabase(path: a.database.path).pendingChangeCount()
        try #require(pending > 0)
        let out = dir.url.appendingPathComponent("out", isDirectory: true)

        let (child, status) = try await LTChild.stoppedWhileWaiting(["diff", "create", "--db", a.database.path, "--out", out.path], home: a, signal: SIGTERM, in: dir)
        #expect(status == 143, "stderr: \(child.stderr)")
        #expect(ltErrorLines(child.stderr) == ["error: diff create interrupted by SIGTERM at a safe point: nothing done (it was waiting for another rtsync run on this home); left: all of it (\(a.root.path))"],
                "\(child.stderr)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: out.path)) ?? []).isEmpty)
        #expect(try SyncDatabase(path: a.database.path).pendingChangeCount() == pending)

        let again = try await ltRTSync(["diff", "create", "--db", a.database.path, "--out", out.path])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try SyncDatabase(path: a.database.path).pendingChangeCount() == 0)
    }

    /// `backup restore` stopped while it waits for another run's lock stops waiting at once, restores nothing
    /// (the database and the backup list as they were) and exits 130; the re-run restores.
    @Test func backupRestore_SIGINTWhileWaitingForTheHome_restoresNothing_exits130() async throws {
        let dir = try TemporaryDirectory()
        let (a, _) = try await ltLocalBucketHome(dir)
        let backup = try BackupManager(home: a).create()
        try SyncDatabase(path: a.database.path).execute("INSERT INTO things(id, account_id, title) VALUES ('after-backup', (SELECT account_id FROM owners LIMIT 1), 'x')")

        let (child, status) = try await LTChild.stoppedWhileWaiting(["backup", "restore", "--home", a.root.path, backup.id], home: a, signal: SIGINT, in: dir)
        #expect(status == 130, "stderr: \(child.stderr)")
        #expect(ltErrorLines(child.stderr) == ["error: backup restore interrupted by SIGINT at a safe point: nothing done (it was waiting for another rtsync run on this home); left: all of it (\(a.root.path))"],
                "\(child.stderr)")
        #expect(try ltScalar(a.database, "SELECT count(*) FROM things WHERE id = 'after-backup'")?.int64 == 1)
        #expect(ltHiddenLeftovers(a.root).isEmpty, "\(ltHiddenLeftovers(a.root))")

        let again = try await ltRTSync(["backup", "restore", "--home", a.root.path, backup.id])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try ltScalar(a.database, "SELECT count(*) FROM things WHERE id = 'after-backup'")?.int64 == 0)
    }

    /// `sync`, `backup create` and `compact` stopped while they wait for another run's lock stop waiting at
    /// once (the lock is still held when they end), do nothing, and exit 143; nothing was exported or made.
    @Test(arguments: [["sync"], ["backup", "create"], ["compact"]])
    func command_SIGTERMWhileWaitingForTheHome_stopsAtOnce_doingNothing(_ command: [String]) async throws {
        let dir = try TemporaryDirectory()
        let (a, remote) = try await ltLocalBucketHome(dir)
        try #require(try await Syncer(home: a, remote: remote, retry: ltShortRetry).sync().ok)
        try SyncDatabase(path: a.database.path).execute("INSERT INTO things(id, account_id, title) VALUES ('stop-wait', (SELECT account_id FROM owners LIMIT 1), 'x')")
        let pending = try SyncDatabase(path: a.database.path).pendingChangeCount()
        let backups = BackupManager(home: a).list().count
        let bucketFiles = try ltFileCount(dir.url.appendingPathComponent("bucket"))

        let (child, status) = try await LTChild.stoppedWhileWaiting(command + ["--home", a.root.path], home: a, signal: SIGTERM, in: dir)
        #expect(status == 143, "stderr: \(child.stderr)")
        let errors = ltErrorLines(child.stderr)
        #expect(errors.count == 1 && errors[0].hasPrefix("error: \(command.joined(separator: " ")) interrupted by SIGTERM at a safe point: "), "\(child.stderr)")
        #expect(errors.first?.contains("waiting for another") == true, "\(errors)")
        #expect(try SyncDatabase(path: a.database.path).pendingChangeCount() == pending)
        #expect(BackupManager(home: a).list().count == backups)
        #expect(try ltFileCount(dir.url.appendingPathComponent("bucket")) == bucketFiles)
    }
}

/// Regular files under `folder`, at any depth.
private func ltFileCount(_ folder: URL) throws -> Int {
    let e = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: [.isRegularFileKey])
    return (e?.allObjects as? [URL] ?? []).filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }.count
}

/// Home A of a new user, set up from the bundled demo database on the free tier with a local-folder bucket in `dir`.
func ltLocalBucketHome(_ dir: TemporaryDirectory) async throws -> (RTSyncHome, ObjectStoreRemote) {
    let a = ltHome(dir, "A")
    let bucket = "file://" + dir.url.appendingPathComponent("bucket").path
    try ltEditSettings(a) { $0.tier = .free; $0.bucket = bucket }
    let remote = try ObjectStoreRemote.open(bucket)
    _ = try await InitChain(home: a, remote: remote, bundledAsset: try LTFixture.demoCopy(in: dir), retry: ltShortRetry).run()
    return (a, remote)
}
