import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

@Suite("backups: restore in place")
struct RestoreInPlaceTests {
    /// A database `primary.sqlite` made by `sql` (after switching to `journalMode` when given), a backups folder
    /// beside it, and a manager for both.
    struct Setup {
        let dir: TemporaryDirectory
        let database: URL
        let folder: URL
        let manager: BackupManager

        init(journalMode: String? = nil, _ sql: String = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')") throws {
            dir = try TemporaryDirectory()
            database = dir.file("primary.sqlite")
            folder = dir.url.appendingPathComponent("backups")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let c = try Connection(path: database.path)
            if let journalMode { _ = try c.rows("PRAGMA journal_mode = \(journalMode)") }
            try c.execute(sql)
            manager = BackupManager(database: database, folder: folder, keep: 3)
        }
    }

    @Test func restore_whileAnotherConnectionIsOpen_thatConnectionSeesRestoredRows_andOldContentKeptAside() throws {
        let setup = try Setup(journalMode: "WAL")
        let (database, manager) = (setup.database, setup.manager)
        _ = try manager.create()

        // The app keeps its connection open and writes after the backup.
        let app = try Connection(path: database.path, mode: .readWrite)
        try app.execute("INSERT INTO t VALUES (2, 'after backup')")

        let (_, aside) = try manager.restore()

        let rows = try app.rows("SELECT id, v FROM t ORDER BY id")
        #expect(rows == [[.integer(1), .text("backed up")]], "the open connection reads the restored database")
        let asideURL = try #require(aside)
        let kept = try Connection(path: asideURL.path, mode: .readOnly).rows("SELECT id FROM t ORDER BY id")
        #expect(kept == [[.integer(1)], [.integer(2)]], "the replaced content, including the later write, is kept aside")
        #expect(BackupManager.verificationProblem(database) == nil)
    }

    /// A writer that commits while a restore runs must not lose its row: before the fix, a commit falling
    /// between the copy aside and the restore was in neither the copy nor the restored database.
    @Test(arguments: ["WAL", "DELETE"])
    func restore_commitDuringRestore_waitsAndLandsAfterIt(_ journalMode: String) throws {
        let setup = try Setup(journalMode: journalMode)
        let (database, manager) = (setup.database, setup.manager)
        _ = try manager.create()
        try Connection(path: database.path, mode: .readWrite).execute("INSERT INTO t VALUES (2, 'after backup')")

        let committed = DispatchSemaphore(value: 0)
        let writerError = LockedBox<String?>(nil)
        var committedBeforeRestore = false
        BackupTestHooks.shared.set(.beforeRestore, for: database) {
            Thread {
                do {
                    let c = try Connection(path: database.path, mode: .readWrite)
                    c.setBusyTimeout(milliseconds: 30_000)
                    try c.execute("INSERT INTO t VALUES (3, 'during restore')")
                } catch { writerError.value = "\(error)" }
                committed.signal()
            }.start()
            // Time enough for the writer to commit if nothing holds it back.
            committedBeforeRestore = committed.wait(timeout: .now() + 0.5) == .success
        }
        defer { BackupTestHooks.shared.set(.beforeRestore, for: database, nil) }

        let (_, aside) = try manager.restore()

        #expect(committedBeforeRestore || committed.wait(timeout: .now() + 30) == .success, "the writer never finished")
        #expect(writerError.value == nil)
        #expect(!committedBeforeRestore, "the writer committed while the restore held the lock")
        let live = try Connection(path: database.path, mode: .readOnly).rows("SELECT id FROM t ORDER BY id").compactMap { $0[0].int64 }
        let kept = try Connection(path: try #require(aside).path, mode: .readOnly).rows("SELECT id FROM t ORDER BY id").compactMap { $0[0].int64 }
        #expect(kept == [1, 2], "the copy aside holds the content the restore replaced")
        #expect(live == [1, 3], "the row written during the restore lands on the restored database")
    }

    /// Restoring over a file SQLite cannot read as a database puts the backup in place and keeps the damaged
    /// file aside, byte for byte.
    @Test func restore_overDamagedDatabase_installsBackupAndKeepsDamagedFileAside() throws {
        let setup = try Setup()
        let (database, manager) = (setup.database, setup.manager)
        _ = try manager.create()
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try garbage.write(to: database)

        let (_, aside) = try manager.restore()

        #expect(try Connection(path: database.path, mode: .readOnly).rows("SELECT id FROM t") == [[.integer(1)]])
        #expect(try Data(contentsOf: try #require(aside)) == garbage, "the damaged file is kept aside as it was")
    }

    /// The 0-page step that takes the lock reads the backup first and reports its errors as it would the live
    /// database's: an unreadable backup must leave a good database where it is.
    @Test func restoreInPlace_unreadableBackup_leavesGoodLiveDatabaseInPlace() throws {
        let dir = try TemporaryDirectory()
        let database = dir.file("primary.sqlite")
        do {
            let c = try Connection(path: database.path)
            try c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'live')")
        }
        let backup = dir.file("backup.sqlite")
        try ltWriteGarbage(backup)

        #expect(throws: LifecycleError.self) { try BackupManager.restoreInPlace(backup, into: database) }

        #expect(BackupManager.verificationProblem(database) == nil, "the live database was replaced by the unreadable backup")
        #expect(try Connection(path: database.path, mode: .readOnly).scalar("SELECT v FROM t")?.string == "live")
    }

    /// A hot journal left by a crashed writer (pages already written into the database file) is rolled back when
    /// the restore takes the lock, before the copy aside: the copy holds the last commit, not the half-written one.
    @Test func restore_hotJournal_rolledBackBeforeCopyAside() throws {
        let dir = try TemporaryDirectory()
        let original = dir.file("original.sqlite")
        let database = dir.file("primary.sqlite")
        let folder = dir.url.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        do {
            let c = try Connection(path: original.path)
            try c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
            try c.execute("BEGIN")
            for i in 1...2000 { try c.execute("INSERT INTO t VALUES (\(i), 'original original original original original original')") }
            try c.execute("COMMIT")
        }
        let backup = try BackupManager(database: original, folder: folder, keep: 3).create()
        // A writer whose tiny cache spills changed pages into the file mid-transaction; the copies taken now are
        // what a crash at this point leaves behind.
        let writer = try Connection(path: original.path, mode: .readWrite)
        try writer.execute("PRAGMA cache_size = 2; BEGIN; UPDATE t SET v = 'changed changed changed changed changed changed changed'")
        try FileManager.default.copyItem(at: original, to: database)
        try FileManager.default.copyItem(atPath: original.path + "-journal", toPath: database.path + "-journal")
        let probe = dir.file("probe.sqlite")
        try FileManager.default.copyItem(at: database, to: probe)
        let spilled = try Connection(path: probe.path, mode: .readOnly).scalar("SELECT count(*) FROM t WHERE v LIKE 'changed%'")?.int64 ?? 0
        #expect(spilled > 0, "the journal is not hot: nothing was written to the database file")

        let aside = try #require(try BackupManager.restoreInPlace(folder.appendingPathComponent(backup.file), into: database))

        let kept = try Connection(path: aside.path, mode: .readOnly)
        #expect(try kept.scalar("SELECT count(*) FROM t WHERE v LIKE 'original%'")?.int64 == 2000)
        #expect(try kept.scalar("PRAGMA quick_check")?.string == "ok")
        #expect(!FileManager.default.fileExists(atPath: database.path + "-journal"))
        try writer.execute("ROLLBACK")
    }

    /// In WAL mode the copy aside is the database file plus its WAL, folded into one file: commits still only
    /// in the WAL (no checkpoint since) are in it.
    @Test func restore_walNotCheckpointed_copyAsideHasEveryCommit() throws {
        let setup = try Setup(journalMode: "WAL")
        let (database, manager) = (setup.database, setup.manager)
        let app = try Connection(path: database.path)
        try app.execute("PRAGMA wal_autocheckpoint = 0")
        _ = try manager.create()
        for i in 2...50 { try app.execute("INSERT INTO t VALUES (\(i), 'only in the WAL')") }

        let (_, aside) = try manager.restore()

        let asideURL = try #require(aside)
        #expect(try Connection(path: asideURL.path, mode: .readOnly).scalar("SELECT count(*) FROM t")?.int64 == 50)
        #expect(!FileManager.default.fileExists(atPath: asideURL.path + "-wal"), "the copy aside is one self-contained file")
        #expect(try app.scalar("SELECT count(*) FROM t")?.int64 == 1)
    }

    /// A WAL database's page size cannot change; a backup with another page size is rebuilt with the live
    /// one and restored in place, so an open connection reads the restored rows.
    @Test func restore_backupWithOtherPageSizeIntoWALDatabase_restoresInPlace() throws {
        let setup = try Setup("PRAGMA page_size = 8192; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')")
        let (dir, database, manager) = (setup.dir, setup.database, setup.manager)
        _ = try manager.create()
        // Rebuild the live database with another page size, then switch it to WAL.
        do {
            let c = try Connection(path: database.path, mode: .readWrite)
            try c.execute("PRAGMA page_size = 4096; VACUUM")
            _ = try c.rows("PRAGMA journal_mode = WAL")
            try c.execute("INSERT INTO t VALUES (2, 'after backup')")
            #expect(try c.scalar("PRAGMA page_size")?.int64 == 4096)
        }
        let app = try Connection(path: database.path, mode: .readWrite)
        #expect(try app.scalar("SELECT count(*) FROM t")?.int64 == 2)

        let (_, aside) = try manager.restore()

        #expect(try app.rows("SELECT id FROM t ORDER BY id") == [[.integer(1)]], "the open connection reads the restored database")
        #expect(try app.scalar("PRAGMA page_size")?.int64 == 4096)
        let kept = try Connection(path: try #require(aside).path, mode: .readOnly).rows("SELECT id FROM t ORDER BY id")
        #expect(kept == [[.integer(1)], [.integer(2)]])
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { $0.contains(".restore-") }
        #expect(leftovers.isEmpty, "the rebuilt copy is removed: \(leftovers)")
    }
}

/// A value shared with another thread.
final class LockedBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); defer { lock.unlock() }; stored = newValue }
    }
}
