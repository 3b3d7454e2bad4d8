import Foundation
import RTSyncTestSupport
import RTSQLite
@testable import SyncEngine
import Testing

/// Issue 5: backups without a clone copy the database file (and its WAL) inside one read transaction. These
/// tests back up a database that another process keeps changing, with a checkpoint after every commit in WAL
/// mode (so the database file itself changes during the copy), and check each backup is one commit's state.
@Suite("backups: file copy under a concurrent writer")
struct FileCopyBackupTests {
    static let fillerRows = 20_000

    /// A database with `filler` (about 20 MB, indexed by `gen`), `log`, and `meta` holding what they must add up to.
    func makeDatabase(_ url: URL, journalMode: String) throws {
        let db = try Connection(path: url.path)
        try db.execute("PRAGMA journal_mode = \(journalMode)")
        try db.execute("""
            CREATE TABLE meta(commits INTEGER NOT NULL, gensum INTEGER NOT NULL);
            INSERT INTO meta VALUES (0, 0);
            CREATE TABLE log(id INTEGER PRIMARY KEY, payload BLOB NOT NULL);
            CREATE TABLE filler(id INTEGER PRIMARY KEY, v BLOB NOT NULL, gen INTEGER NOT NULL);
            CREATE INDEX filler_gen ON filler(gen);
            WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < \(Self.fillerRows))
            INSERT INTO filler SELECT i, randomblob(900), 0 FROM n;
            """)
    }

    /// Starts a process that commits until `stop` exists: each commit adds log row `commits`, rewrites one
    /// filler row (spread over the table) and keeps `meta.gensum` equal to the sum of `filler.gen`.
    func startWriter(_ db: URL, stop: URL, walCheckpointEveryCommit: Bool) throws -> Process {
        let sqlite3 = try #require(findExecutable("sqlite3"), "the sqlite3 shell is needed to write from another process")
        let pragmas = walCheckpointEveryCommit ? "PRAGMA synchronous = OFF; PRAGMA wal_autocheckpoint = 1;" : "PRAGMA synchronous = OFF;"
        let target = "(SELECT commits * 7919 % \(Self.fillerRows) FROM meta)"
        let commit = """
            BEGIN; UPDATE meta SET commits = commits + 1; \
            UPDATE meta SET gensum = gensum - (SELECT gen FROM filler WHERE id = \(target)) + commits; \
            UPDATE filler SET v = randomblob(900), gen = (SELECT commits FROM meta) WHERE id = \(target); \
            INSERT INTO log(id, payload) SELECT commits, randomblob(1500) FROM meta; COMMIT;
            """
        // Paced (at most about 500 commits a second) and bounded, so a test task starved for minutes in a busy full
        // run finds the writer still going, and the writer cannot fill the disk meanwhile (unpaced, it wrote 35 GB).
        let loop = """
            { echo '.timeout 10000'; echo '\(pragmas)'
              n=0; while [ ! -e "$2" ] && [ $n -lt 500000 ] && kill -0 \(getpid()) 2>/dev/null; do
                echo '\(commit)'; n=$((n+1)); [ $((n % 50)) -ne 0 ] || sleep 0.1
              done; } | "$0" "$1" > /dev/null 2>&1
            """
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", loop, sqlite3, db.path, stop.path]
        try writer.run()
        LTChildren.register(writer)
        return writer
    }

    /// The writer's commit count (waiting while it holds the lock, as in rollback-journal mode).
    func commits(_ db: URL) throws -> Int64 {
        let c = try Connection(path: db.path, mode: .readOnly)
        c.setBusyTimeout(milliseconds: 10_000)
        return try #require(try c.scalar("SELECT commits FROM meta")?.int64)
    }

    @Test(arguments: [("wal", true), ("delete", true), ("wal", false)])
    func backup_whileAnotherProcessCommits_holdsOneCommitsState(journalMode: String, fileCopy: Bool) async throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try makeDatabase(db, journalMode: journalMode)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let stop = dir.file("stop")
        let writer = try startWriter(db, stop: stop, walCheckpointEveryCommit: journalMode == "wal")
        defer { if writer.isRunning { FileManager.default.createFile(atPath: stop.path, contents: nil); writer.waitUntilExit() } }
        let deadline = Date().addingTimeInterval(20)
        while try commits(db) < 200, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(try commits(db) >= 200, "the writer process did not start committing")

        var manager = BackupManager(database: db, folder: folder, keep: 20, preferClone: false)
        manager.fileCopy = fileCopy
        var made: [(info: BackupInfo, before: Int64)] = []
        for _ in 0..<10 {
            let before = try commits(db)
            made.append((try manager.create(), before))
            try await Task.sleep(for: .milliseconds(15))
        }
        let committedMeanwhile = try commits(db) - (made.first?.before ?? 0)
        FileManager.default.createFile(atPath: stop.path, contents: nil)
        await waitForExit(writer)
        let final = try commits(db)

        #expect(committedMeanwhile > 0, "the writer committed nothing while the backups ran; the scenario did not happen")
        var seen: [Int64] = []
        for (info, before) in made {
            #expect(info.method == (fileCopy ? "file-copy" : "online-backup"))
            let file = folder.appendingPathComponent(info.file)
            #expect(!FileManager.default.fileExists(atPath: file.path + "-wal"), "a backup is one self-contained file")
            let copy = try Connection(path: file.path, mode: .readOnly)
            #expect(try copy.scalar("PRAGMA journal_mode")?.string == "delete")
            #expect(try copy.rows("PRAGMA integrity_check").compactMap { $0.first?.string } == ["ok"], "backup \(info.id)")
            let n = try #require(try copy.scalar("SELECT commits FROM meta")?.int64)
            #expect(n >= before && n <= final, "backup \(info.id) holds commit \(n), taken between \(before) and \(final)")
            #expect(try copy.scalar("SELECT count(*) FROM log")?.int64 == n, "backup \(info.id): a commit's log row is missing or extra")
            #expect(try copy.scalar("SELECT coalesce(max(id), 0) FROM log")?.int64 == n)
            #expect(try copy.scalar("SELECT total(gen) = (SELECT gensum FROM meta) FROM filler")?.int64 == 1,
                    "backup \(info.id): filler rows from different commits")
            #expect(try copy.scalar("SELECT count(*) FROM filler")?.int64 == Int64(Self.fillerRows))
            seen.append(n)
        }
        #expect(seen == seen.sorted(), "later backups hold later commits: \(seen)")
    }

    /// A copy made from a WAL database whose WAL holds commits not yet checkpointed carries those commits.
    @Test func fileCopy_walNotCheckpointed_copyHasEveryCommit() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try makeDatabase(db, journalMode: "wal")
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // This connection stays open with checkpoints off, so the commits below exist only in the WAL.
        let app = try Connection(path: db.path)
        try app.execute("PRAGMA wal_autocheckpoint = 0")
        for i in 1...50 { try app.execute("INSERT INTO log(id, payload) VALUES (\(i), randomblob(100)); UPDATE meta SET commits = \(i)") }
        let walSize = (try FileManager.default.attributesOfItem(atPath: db.path + "-wal")[.size] as? NSNumber)?.intValue ?? 0
        #expect(walSize > 0, "the commits are in the WAL")

        let info = try BackupManager(database: db, folder: folder, preferClone: false).create()
        #expect(info.method == "file-copy")
        let copy = folder.appendingPathComponent(info.file)
        #expect(try ltScalar(copy, "SELECT count(*) FROM log")?.int64 == 50)
        #expect(try ltScalar(copy, "SELECT commits FROM meta")?.int64 == 50)
        // The source is left as it was: still WAL mode, nothing checkpointed by the backup.
        #expect(try app.scalar("PRAGMA journal_mode")?.string == "wal")
        #expect(((try FileManager.default.attributesOfItem(atPath: db.path + "-wal")[.size] as? NSNumber)?.intValue ?? 0) == walSize)
    }
}

/// A writer that died mid-transaction leaves a hot journal (rollback-journal mode) and changed pages in the file.
@Suite("backups: after a crashed writer")
struct CrashedWriterBackupTests {
    @Test(arguments: [true, false])
    func backup_withHotJournal_holdsTheRolledBackState(fileCopy: Bool) async throws {
        let sqlite3 = try #require(findExecutable("sqlite3"), "the sqlite3 shell is needed to crash a writer")
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        let setup = try Connection(path: db.path)
        try setup.execute("""
            PRAGMA journal_mode = DELETE;
            CREATE TABLE t(id INTEGER PRIMARY KEY, gen INTEGER NOT NULL, v BLOB NOT NULL);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) INSERT INTO t SELECT i, 0, randomblob(1000) FROM n;
            """)
        // A small cache makes the UPDATE spill changed pages into the database file before it commits;
        // the writer is then killed with the transaction open.
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: sqlite3)
        writer.arguments = [db.path]
        let input = Pipe()
        writer.standardInput = input
        writer.standardOutput = FileHandle.nullDevice
        try writer.run()
        LTChildren.register(writer)
        input.fileHandleForWriting.write(Data("PRAGMA cache_size = 5; BEGIN; UPDATE t SET gen = 1, v = randomblob(1000);\n".utf8))
        let journal = db.path + "-journal"
        func journalSize() -> Int { ((try? FileManager.default.attributesOfItem(atPath: journal)[.size]) as? NSNumber)?.intValue ?? 0 }
        // The UPDATE is done when the journal stops growing.
        let deadline = Date().addingTimeInterval(20)
        var stable = 0, last = -1
        while Date() < deadline, stable < 5 {
            let size = journalSize()
            stable = size > 0 && size == last ? stable + 1 : 0
            last = size
            try await Task.sleep(for: .milliseconds(100))
        }
        kill(writer.processIdentifier, SIGKILL)
        await waitForExit(writer)
        try #require(journalSize() > 0, "no hot journal was left behind")

        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var manager = BackupManager(database: db, folder: folder, preferClone: false)
        manager.fileCopy = fileCopy
        let info = try manager.create()
        let copy = folder.appendingPathComponent(info.file)
        #expect(try ltScalar(copy, "PRAGMA integrity_check")?.string == "ok")
        #expect(try ltScalar(copy, "SELECT count(*) FROM t WHERE gen = 0")?.int64 == 2000, "the backup holds the uncommitted update")
        #expect(try ltScalar(db, "SELECT count(*) FROM t WHERE gen = 1")?.int64 == 0)
    }
}

/// A backup must not release this process's SQLite locks on the database: opening and closing the file again
/// in the same process drops every POSIX lock the process holds on it (https://sqlite.org/howtocorrupt.html 2.2).
@Suite("backups: locks of other connections in the same process", .serialized)
struct BackupKeepsLocksTests {
    /// Whether another process can take the write lock right now (without waiting).
    func otherProcessCanLockExclusively(_ db: URL) throws -> Bool {
        let sqlite3 = try #require(findExecutable("sqlite3"), "the sqlite3 shell is needed to lock from another process")
        return try runCapturing(sqlite3, [db.path, "BEGIN EXCLUSIVE; COMMIT;"]).status == 0
    }

    func check(database db: URL, folder: URL, preferClone: Bool, expectedMethod: String) throws {
        // An app connection of this process in a read transaction: no other process may write until it ends.
        let app = try Connection(path: db.path)
        try app.execute("BEGIN")
        _ = try app.scalar("SELECT count(*) FROM log")
        try #require(try !otherProcessCanLockExclusively(db), "the read transaction does not block other writers to begin with")

        let info = try BackupManager(database: db, folder: folder, preferClone: preferClone).create()

        #expect(info.method == expectedMethod)
        #expect(try !otherProcessCanLockExclusively(db), "after the backup (\(info.method)), another process could lock the database while this process was reading it")
        try app.execute("COMMIT")
        #expect(try otherProcessCanLockExclusively(db))
    }

    func makeDatabase(_ db: URL) throws {
        let c = try Connection(path: db.path)
        try c.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, payload TEXT); INSERT INTO log(payload) VALUES ('a'), ('b')")
    }

    @Test func fileCopy_keepsTheLocksOfThisProcess() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try makeDatabase(db)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try check(database: db, folder: folder, preferClone: false, expectedMethod: "file-copy")
    }

    @Test(.enabled(if: LTMounts.canMountBtrfs, "btrfs loop mount not available here (needs root, mkfs.btrfs from btrfs-progs, and loop devices)"))
    func clone_keepsTheLocksOfThisProcess() throws {
        let dir = try TemporaryDirectory()
        let mountPoint = try LTMounts.mountBtrfs(in: dir)
        defer { LTMounts.unmount(mountPoint) }
        let db = mountPoint.appendingPathComponent("app.sqlite")
        try makeDatabase(db)
        let folder = mountPoint.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try check(database: db, folder: folder, preferClone: true, expectedMethod: "clone")
    }

    /// Everything is checkpointed when the backup starts (its reader then reads the database file alone), and
    /// another process truncates the WAL and commits more between the copy of the database file and of the WAL.
    @Test func fileCopy_walTruncatedAndRewrittenDuringTheBackup_copyIsOneCommit() throws {
        try backUpCheckpointedWALDatabase(hookAt: .afterDatabaseCopy, { db, _, sqlite3 in
            truncateWALAndCommit(db, ids: 301...310, sqlite3: sqlite3)
        }, check: { copy throws in
            let n = try #require(try ltScalar(copy, "SELECT n FROM meta")?.int64)
            #expect([300, 310].contains(n), "the copy holds commit \(n)")
            #expect(try ltScalar(copy, "SELECT count(*) FROM log")?.int64 == n)
        })
    }
}

/// A WAL database whose `log` has rows 1...300, one commit each, with `meta.n` the last one; everything is
/// checkpointed but the WAL is kept, so a backup's reader then reads the database file alone (read mark 0).
/// The returned connection keeps the WAL (and must stay open for that).
func makeCheckpointedWALDatabase(_ db: URL) throws -> Connection {
    let keeper = try Connection(path: db.path)
    try keeper.execute("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0")
    try keeper.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, payload BLOB); CREATE INDEX log_payload ON log(payload); CREATE TABLE meta(n INTEGER); INSERT INTO meta VALUES (0)")
    for i in 1...300 { try keeper.execute("BEGIN; INSERT INTO log VALUES (\(i), randomblob(300)); UPDATE meta SET n = \(i); COMMIT") }
    _ = try keeper.rows("PRAGMA wal_checkpoint(PASSIVE)")
    return keeper
}

/// Backs up a `makeCheckpointedWALDatabase` database by file copy with `hook` (given the database, the backups
/// folder and the sqlite3 shell) run at `point`; checks that the hook ran and that the copy passes
/// `integrity_check`, then hands the copy to `check`.
func backUpCheckpointedWALDatabase(hookAt point: BackupTestHooks.Point, _ hook: @escaping (URL, URL, String) -> Void,
                                   check: (URL) throws -> Void) throws {
    let sqlite3 = try #require(findExecutable("sqlite3"))
    let dir = try TemporaryDirectory()
    let db = dir.file("app.sqlite")
    let keeper = try makeCheckpointedWALDatabase(db)
    defer { withExtendedLifetime(keeper) {} }
    let folder = dir.file("backups")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    var hookRan = false
    BackupTestHooks.shared.set(point, for: db) {
        hookRan = true
        hook(db, folder, sqlite3)
    }
    defer { BackupTestHooks.shared.set(point, for: db, nil) }

    let info = try BackupManager(database: db, folder: folder, preferClone: false).create()

    #expect(hookRan)
    let copy = folder.appendingPathComponent(info.file)
    #expect(try ltScalar(copy, "PRAGMA integrity_check")?.string == "ok")
    try check(copy)
}

/// Another process truncates the WAL (a TRUNCATE checkpoint), then commits log rows `ids`, one at a time.
func truncateWALAndCommit(_ db: URL, ids: ClosedRange<Int>, sqlite3: String) {
    var sql = ".timeout 5000\nPRAGMA wal_checkpoint(TRUNCATE);\n"
    for i in ids { sql += "BEGIN; INSERT INTO log VALUES (\(i), randomblob(300)); UPDATE meta SET n = \(i); COMMIT;\n" }
    let r = try? runCapturing("/bin/sh", ["-c", "printf '%s' \"$1\" | \"$0\" \"$2\"", sqlite3, sql, db.path])
    #expect(r?.status == 0, "the concurrent writer failed: \(r?.output ?? "")")
}

/// The WAL restarting while the backup copies it (possible when everything was checkpointed as the backup began).
@Suite("backups: WAL restarted during its copy", .serialized)
struct WALRestartDuringCopyTests {
    @Test func fileCopy_walCopyCutShortByATruncate_isDropped_copyIsTheSnapshot() throws {
        // What a TRUNCATE checkpoint racing the WAL copy leaves: the start of the old WAL (up to a commit in its
        // middle) in the copy, while the live WAL has started over.
        try backUpCheckpointedWALDatabase(hookAt: .afterWALCopy, { db, folder, sqlite3 in
            truncateWALAndCommit(db, ids: 301...305, sqlite3: sqlite3)
            let copiedWAL = folder.path
            for name in (try? FileManager.default.contentsOfDirectory(atPath: copiedWAL)) ?? [] where name.hasSuffix("-wal") {
                let path = copiedWAL + "/" + name
                let size = ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.intValue ?? 0
                let frame = 24 + 4096
                if let h = FileHandle(forWritingAtPath: path) { try? h.truncate(atOffset: UInt64(32 + ((size - 32) / frame / 2) * frame)); try? h.close() }
            }
        }, check: { copy throws in
            #expect(try ltScalar(copy, "SELECT n FROM meta")?.int64 == 300, "the copy is not the state the backup began with")
            #expect(try ltScalar(copy, "SELECT count(*) FROM log")?.int64 == 300)
        })
    }
}

/// The two ways a backup reads the live database file without opening it again.
@Suite("SQLite's own open database file")
struct MainFileTests {
    @Test func copyMainFile_andMainFileDescriptor_seeTheDatabaseFile() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        let c = try Connection(path: db.path)
        try c.execute("CREATE TABLE t(v BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) INSERT INTO t SELECT randomblob(700) FROM n")
        try c.execute("BEGIN")
        _ = try c.scalar("SELECT count(*) FROM t")
        // Reading through SQLite's file methods (the path for VFSes without a descriptor).
        let bytes = try c.copyMainFile(to: dir.file("copy.sqlite"))
        #expect(bytes > 2_000_000)
        #expect(try Data(contentsOf: dir.file("copy.sqlite")) == Data(contentsOf: db))
        // The descriptor is SQLite's own, of this very file.
        let fd = try #require(c.mainFileDescriptor(), "the unix VFS's descriptor was not found")
        var held = stat(), named = stat()
        #expect(fstat(fd, &held) == 0 && stat(db.path, &named) == 0 && held.st_ino == named.st_ino)
        try c.execute("COMMIT")
        // A destination that exists is refused, not overwritten.
        #expect(throws: (any Error).self) { _ = try c.copyMainFile(to: dir.file("copy.sqlite")) }
    }
}
