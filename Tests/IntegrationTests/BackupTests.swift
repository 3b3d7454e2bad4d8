import DiffFormat
import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing

/// Issue 5: backups — consistency under a concurrent writer, rotation, last-known-good, restore, faults,
/// and copy-on-write clones on a real btrfs filesystem.
@Suite("backups: create, rotate, restore, copy-on-write")
struct BackupTests {
    /// A WAL database with a `log` table, like an app database that another process keeps writing.
    func makeLogDatabase(_ url: URL) throws {
        let db = try Connection(path: url.path)
        try db.execute("PRAGMA journal_mode = WAL")
        try db.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, payload TEXT NOT NULL)")
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
    }

    func rowCount(_ url: URL, _ table: String = "log") throws -> Int64 {
        try ltScalar(url, "SELECT count(*) FROM \(table)")?.int64 ?? -1
    }

    // MARK: - Consistency under a concurrent writer

    @Test func backup_whileAnotherProcessInserts_isConsistentPrefixOfCommits() async throws {
        let sqlite3 = try #require(findExecutable("sqlite3"), "the sqlite3 shell is needed to write from another process")
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try makeLogDatabase(db)
        try FileManager.default.createDirectory(at: dir.file("backups"), withIntermediateDirectories: true)
        // Another process commits one row at a time (ids 1, 2, 3, ...) until told to stop (or this process dies),
        // paced (about 1,000 rows a second) and bounded, so a test starved in a busy run still finds it writing and
        // it cannot fill the disk meanwhile.
        let stop = dir.file("stop")
        let loop = """
            { echo '.timeout 10000'; echo 'PRAGMA synchronous = OFF;'
              n=0; while [ ! -e "$2" ] && [ $n -lt 2000000 ] && kill -0 \(getpid()) 2>/dev/null; do
                echo 'INSERT INTO log(payload) VALUES (hex(randomblob(40)));'; n=$((n+1)); [ $((n % 100)) -ne 0 ] || sleep 0.1
              done; } | "$0" "$1" > /dev/null 2>&1
            """
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", loop, sqlite3, db.path, stop.path]
        try writer.run()
        LTChildren.register(writer)
        defer { if writer.isRunning { FileManager.default.createFile(atPath: stop.path, contents: nil); writer.waitUntilExit() } }
        // Wait until the writer is well under way.
        let deadline = Date().addingTimeInterval(20)
        while (try? rowCount(db)) ?? 0 < 500, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(try rowCount(db) >= 500, "the writer process did not start writing")

        let manager = BackupManager(database: db, folder: dir.file("backups"), keep: 10)
        var made: [BackupInfo] = []
        for _ in 0..<4 {
            made.append(try manager.create())
            try await Task.sleep(for: .milliseconds(30))
        }
        let stillWriting = writer.isRunning
        let countAfterBackups = try rowCount(db)
        try await Task.sleep(for: .milliseconds(100))
        FileManager.default.createFile(atPath: stop.path, contents: nil)
        await waitForExit(writer)
        let writerMax = try ltScalar(db, "SELECT max(id) FROM log")?.int64 ?? 0

        #expect(stillWriting, "the writer stopped before the backups were done")
        #expect(writerMax > countAfterBackups, "the writer was still committing after the last backup")
        var counts: [Int64] = []
        for b in made {
            let file = dir.file("backups").appendingPathComponent(b.file)
            // Checked before this test opens the file (a reader of a WAL-mode file creates side files itself).
            #expect(!FileManager.default.fileExists(atPath: file.path + "-wal"), "a backup is one self-contained file")
            #expect(try ltScalar(file, "PRAGMA quick_check")?.string == "ok")
            let count = try rowCount(file)
            let maxID = try ltScalar(file, "SELECT coalesce(max(id), 0) FROM log")?.int64 ?? -1
            // A prefix of the commits: every id 1...N present, nothing the writer never committed.
            #expect(count == maxID, "backup \(b.id): \(count) rows but max id \(maxID): a commit is missing")
            #expect(maxID <= writerMax)
            counts.append(count)
        }
        #expect(counts.first ?? 0 >= 500)
        #expect(counts == counts.sorted(), "later backups hold later commits: \(counts)")
    }

    // MARK: - Rotation and last-known-good

    @Test func create_moreThanKeep_rotatesToNewestNAndMarksNewestGood() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try makeLogDatabase(db)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let manager = BackupManager(database: db, folder: folder, keep: 3)

        var made: [BackupInfo] = []
        for i in 1...5 {
            try Connection(path: db.path).execute("INSERT INTO log(payload) VALUES ('row \(i)')")
            made.append(try manager.create())
        }

        let listed = manager.list()
        #expect(listed.map(\.id) == made.suffix(3).reversed().map(\.id))
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".sqlite") }.sorted()
        #expect(files == made.suffix(3).map(\.file).sorted(), "files on disk: \(files)")
        #expect(manager.lastKnownGood()?.id == made.last?.id)
        #expect(try rowCount(folder.appendingPathComponent(made.last!.file)) == 5)
        #expect(made.allSatisfy { $0.verified && ["file-copy", "clone"].contains($0.method) })
    }

    /// Backups made by separate processes (an app and `rtsync backup create`) in the same second.
    @Test(.enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
    func backupCreate_separateProcessesSameSecond_newestStaysListedAsLastKnownGood() async throws {
        let dir = try TemporaryDirectory()
        let home = ltHome(dir, "device")
        _ = try await InitChain(home: home, bundledAsset: LTFixture.demoCopy(in: dir)).run()
        try ltEditSettings(home) { $0.keepBackups = 1 }

        var ids: [String] = []
        let manager = BackupManager(database: home.database, folder: home.backups, keep: 1)
        // Until 8 consecutive pairs fell in the same second (each such pair is in random id order); up to 48 tries, as a
        // loaded machine can take most of a second for one create.
        var sameSecondPairs = 0
        for _ in 0..<48 where sameSecondPairs < 8 {
            let r = try await ltRTSync(["backup", "create", "--home", home.root.path, "--json"])
            #expect(r.status == 0, "stderr: \(r.stderr)")
            let id = try #require(try jsonObject(r.stdout)["id"] as? String)
            if let previous = ids.last, try KSUID(string: previous).timestamp == KSUID(string: id).timestamp { sameSecondPairs += 1 }
            ids.append(id)
            // Right after each create, the backup just made is listed and is last-known-good.
            #expect(manager.lastKnownGood()?.id == id, "backup \(id) just made is not last-known-good; manifest lists \(manager.list().map(\.id)) (made so far: \(ids))")
            #expect(manager.list().map(\.id) == [id])
        }
        #expect(sameSecondPairs >= 1, "no two backups fell in the same second; the scenario did not happen")

        let files = try FileManager.default.contentsOfDirectory(atPath: home.backups.path).filter { $0.hasSuffix(".sqlite") }
        #expect(files == [ids.last! + ".sqlite"], "rotation keeps exactly the newest file; on disk: \(files)")
    }

    // MARK: - Restore

    @Test func restore_default_installsLastKnownGoodKeepsReplacedAside() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("support/primary.sqlite")
        try FileManager.default.createDirectory(at: dir.file("support"), withIntermediateDirectories: true)
        try makeLogDatabase(db)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let manager = BackupManager(database: db, folder: folder)
        let second: BackupInfo
        do {
            let conn = try Connection(path: db.path)
            try conn.execute("INSERT INTO notes(body) VALUES ('v1')")
            _ = try manager.create()
            try conn.execute("UPDATE notes SET body = 'v2'")
            second = try manager.create()
            try conn.execute("UPDATE notes SET body = 'v3-not-backed-up'")
            try conn.execute("INSERT INTO log(payload) VALUES ('after the backup')")
        }

        let (restored, replacedAt) = try manager.restore()

        #expect(restored.id == second.id)
        #expect(try ltAppTables(db) == ltAppTables(folder.appendingPathComponent(second.file)))
        #expect(try ltScalar(db, "SELECT body FROM notes")?.string == "v2")
        let aside = try #require(replacedAt)
        #expect(aside.lastPathComponent.hasPrefix("primary.sqlite.replaced-"))
        #expect(try ltScalar(aside, "SELECT body FROM notes")?.string == "v3-not-backed-up", "the replaced database keeps its latest commits (its WAL moved with it)")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.file("support").path).filter { $0.contains("incoming") }
        #expect(leftovers.isEmpty, "no half-written file left: \(leftovers)")
    }

    @Test func restore_corruptLastKnownGood_refusedNamingNextGood() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("primary.sqlite")
        try makeLogDatabase(db)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let manager = BackupManager(database: db, folder: folder)
        try Connection(path: db.path).execute("INSERT INTO notes(body) VALUES ('old good')")
        let first = try manager.create()
        let second = try manager.create()
        try ltWriteGarbage(folder.appendingPathComponent(second.file))
        try Connection(path: db.path).execute("UPDATE notes SET body = 'current'")

        let error = #expect(throws: LifecycleError.self) { try manager.restore() }

        guard case .backupCorrupt(let id, _, let nextGood)? = error else { Issue.record("expected backupCorrupt, got \(String(describing: error))"); return }
        #expect(id == second.id)
        #expect(nextGood == first.id)
        #expect(error?.hint?.contains(first.id) == true)
        #expect(try ltScalar(db, "SELECT body FROM notes")?.string == "current", "a refused restore leaves the database alone")
        #expect(manager.lastKnownGood()?.id == first.id, "verification moved last-known-good to the next good backup")
        let (restored, _) = try manager.restore(id: nextGood)
        #expect(restored.id == first.id)
        #expect(try ltScalar(db, "SELECT body FROM notes")?.string == "old good")
    }

    /// A restored database arrives by copy: it must not keep the site id under which this device already
    /// published later diffs (the library call is what an app uses, not only the CLI).
    @Test func restore_libraryCall_givesRestoredDatabaseNewSiteID() async throws {
        let dir = try TemporaryDirectory()
        let home = ltHome(dir, "device")
        let r = try await InitChain(home: home, bundledAsset: LTFixture.demoCopy(in: dir)).run()
        let manager = BackupManager(database: home.database, folder: home.backups)
        _ = try manager.create()

        try manager.restore()

        #expect(try SyncDatabase(path: home.database.path).siteID() != r.siteId)
    }

    @Test(.enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
    func backupRestoreCommand_default_restoresWithNewSiteIDAndKeepsOldAside() async throws {
        let dir = try TemporaryDirectory()
        let home = ltHome(dir, "device")
        let r = try await InitChain(home: home, bundledAsset: LTFixture.demoCopy(in: dir)).run()
        let created = try await ltRTSync(["backup", "create", "--home", home.root.path])
        try #require(created.status == 0, "stderr: \(created.stderr)")
        try SyncDatabase(path: home.database.path).execute("DELETE FROM things")

        let restored = try await ltRTSync(["backup", "restore", "--home", home.root.path])

        #expect(restored.status == 0, "stderr: \(restored.stderr)")
        #expect(restored.stdout.contains("previous database kept at"))
        #expect(try ltScalar(home.database, "SELECT count(*) FROM things")?.int64 == 3)
        #expect(try SyncDatabase(path: home.database.path).siteID() != r.siteId)
    }

    // MARK: - Faults

    @Test func create_backupFolderMissing_throwsBackupFailedAndCreatesNothing() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("primary.sqlite")
        try makeLogDatabase(db)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let existing = try BackupManager(database: db, folder: folder).create()
        let manifestBefore = try Data(contentsOf: folder.appendingPathComponent("backups.json"))
        let missing = dir.file("gone/backups")

        let error = #expect(throws: LifecycleError.self) { try BackupManager(database: db, folder: missing).create() }

        guard case .backupFailed(let path, let reason)? = error else { Issue.record("expected backupFailed, got \(String(describing: error))"); return }
        #expect(path == missing.path)
        #expect(reason.contains("does not exist"))
        #expect(!FileManager.default.fileExists(atPath: missing.path))
        #expect(try Data(contentsOf: folder.appendingPathComponent("backups.json")) == manifestBefore)
        #expect(BackupManager.verificationProblem(folder.appendingPathComponent(existing.file)) == nil)
    }

    @Test(.enabled(if: LTMounts.canMount, "mounting is not permitted here (needs root and loop/tmpfs mounts)"))
    func create_backupFolderFull_throwsBackupFailedAndKeepsExistingBackups() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("primary.sqlite")
        try makeLogDatabase(db)
        let conn = try Connection(path: db.path)
        try conn.execute("INSERT INTO log(payload) SELECT hex(randomblob(200)) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) SELECT i FROM n)")
        try conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let size = try #require(try FileManager.default.attributesOfItem(atPath: db.path)[.size] as? NSNumber).intValue
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // Room for one backup and its list, not two.
        let kib = (size * 3 / 2) / 1024 + 8
        let mount = try runCapturing("/bin/mount", ["-t", "tmpfs", "-o", "size=\(kib)k", "tmpfs", folder.path])
        try #require(mount.status == 0, "mount tmpfs failed: \(mount.output)")
        defer { _ = try? runCapturing("/bin/umount", [folder.path]) }
        let manager = BackupManager(database: db, folder: folder)
        let existing = try manager.create()
        let existingBytes = try Data(contentsOf: folder.appendingPathComponent(existing.file))
        let manifestBefore = try Data(contentsOf: folder.appendingPathComponent("backups.json"))
        let listingBefore = Set(try FileManager.default.contentsOfDirectory(atPath: folder.path))

        let error = #expect(throws: LifecycleError.self) { try manager.create() }

        guard case .backupFailed(_, let reason)? = error else { Issue.record("expected backupFailed, got \(String(describing: error))"); return }
        #expect(reason.lowercased().contains("full"), "the reason should say the disk is full: \(reason)")
        #expect(try Data(contentsOf: folder.appendingPathComponent(existing.file)) == existingBytes)
        #expect(try Data(contentsOf: folder.appendingPathComponent("backups.json")) == manifestBefore)
        #expect(manager.lastKnownGood()?.id == existing.id)
        let added = Set(try FileManager.default.contentsOfDirectory(atPath: folder.path)).subtracting(listingBefore)
        #expect(added.isEmpty, "the failed backup left files behind: \(added.sorted())")
    }

    @Test func create_succeeded_leavesOnlyBackupFilesAndListInFolder() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("primary.sqlite")
        try makeLogDatabase(db)  // WAL mode, like the app database
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let manager = BackupManager(database: db, folder: folder)

        let made = [try manager.create(), try manager.create()]

        let listing = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(listing == (made.map(\.file) + ["backups.json"]).sorted(), "stray files in the backup folder: \(listing)")
    }

    // MARK: - Copy-on-write on btrfs

    @Test(.enabled(if: LTMounts.canMountBtrfs, "btrfs loop mount not available here (needs root, mkfs.btrfs and loop devices)"))
    func create_onBtrfs_clonesAndSharesExtents() throws {
        let dir = try TemporaryDirectory()
        let mountPoint = try LTMounts.mountBtrfs(in: dir)
        defer { LTMounts.unmount(mountPoint) }
        let db = mountPoint.appendingPathComponent("primary.sqlite")
        try makeLogDatabase(db)
        let conn = try Connection(path: db.path)
        try conn.execute("INSERT INTO log(payload) SELECT hex(randomblob(500)) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) SELECT i FROM n)")
        try conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let folder = mountPoint.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)

        let backup = try BackupManager(database: db, folder: folder).create()

        #expect(backup.method == "clone")
        let file = folder.appendingPathComponent(backup.file)
        #expect(try rowCount(file) == 2000)
        let frag = try runCapturing(try #require(findExecutable("filefrag")), ["-v", file.path])
        #expect(frag.output.contains("shared"), "filefrag shows no shared extents:\n\(frag.output)")
        if let btrfs = findExecutable("btrfs") {
            let du = try runCapturing(btrfs, ["filesystem", "du", "--raw", file.path])
            // Columns: Total, Exclusive, Set shared, Filename; a clone's data is mostly not exclusive.
            let numbers = du.output.split(separator: "\n").last?.split(separator: " ").compactMap { Int($0) } ?? []
            #expect(numbers.count >= 2 && numbers[1] < numbers[0] / 2, "btrfs du: \(du.output)")
        }
    }
}

/// Loop and tmpfs mounts for the copy-on-write and disk-full tests.
enum LTMounts {
    /// Whether this process may mount (tried once with a tiny tmpfs).
    static let canMount: Bool = {
        guard getuid() == 0, let dir = try? TemporaryDirectory() else { return false }
        let point = dir.file("probe")
        try? FileManager.default.createDirectory(at: point, withIntermediateDirectories: true)
        guard let r = try? runCapturing("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", point.path]), r.status == 0 else {
            print("LTMounts: mounting is not permitted here; skipping mount-based tests")
            return false
        }
        _ = try? runCapturing("/bin/umount", [point.path])
        return true
    }()

    /// Whether a btrfs image can be made and loop-mounted here (tried once).
    static let canMountBtrfs: Bool = {
        guard canMount, findExecutable("mkfs.btrfs") != nil else {
            print("LTMounts: mkfs.btrfs missing (apt-get install -y btrfs-progs) or mounting not permitted; skipping the btrfs test")
            return false
        }
        guard let dir = try? TemporaryDirectory(), let point = try? mountBtrfs(in: dir, size: "120M") else {
            print("LTMounts: loop-mounting a btrfs image failed; skipping the btrfs test")
            return false
        }
        unmount(point)
        return true
    }()

    /// Makes a btrfs image in `dir` and mounts it on `dir/mnt`.
    static func mountBtrfs(in dir: TemporaryDirectory, size: String = "300M") throws -> URL {
        let image = dir.file("btrfs.img")
        let point = dir.file("mnt")
        try FileManager.default.createDirectory(at: point, withIntermediateDirectories: true)
        let t = try runCapturing("/usr/bin/truncate", ["-s", size, image.path])
        guard t.status == 0 else { throw TestSetupError("truncate failed: \(t.output)") }
        let mkfs = try runCapturing(findExecutable("mkfs.btrfs") ?? "mkfs.btrfs", ["-q", "-f", image.path])
        guard mkfs.status == 0 else { throw TestSetupError("mkfs.btrfs failed: \(mkfs.output)") }
        let m = try runCapturing("/bin/mount", ["-o", "loop", image.path, point.path])
        guard m.status == 0 else { throw TestSetupError("mount -o loop failed: \(m.output)") }
        return point
    }

    static func unmount(_ point: URL) {
        _ = try? runCapturing("/bin/umount", [point.path])
    }
}
