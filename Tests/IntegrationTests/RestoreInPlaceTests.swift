import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

@Suite("backups: restore in place")
struct RestoreInPlaceTests {
    @Test func restore_whileAnotherConnectionIsOpen_thatConnectionSeesRestoredRows_andOldContentKeptAside() throws {
        let dir = try TemporaryDirectory()
        let database = dir.file("primary.sqlite")
        let folder = dir.url.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        do {
            let c = try Connection(path: database.path)
            try c.execute("PRAGMA journal_mode = WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')")
        }
        let manager = BackupManager(database: database, folder: folder, keep: 3)
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
        let dir = try TemporaryDirectory()
        let database = dir.file("primary.sqlite")
        let folder = dir.url.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        do {
            let c = try Connection(path: database.path)
            _ = try c.rows("PRAGMA journal_mode = \(journalMode)")
            try c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')")
        }
        let manager = BackupManager(database: database, folder: folder, keep: 3)
        _ = try manager.create()
        try Connection(path: database.path, mode: .readWrite).execute("INSERT INTO t VALUES (2, 'after backup')")

        let committed = DispatchSemaphore(value: 0)
        let writerError = LockedBox<String?>(nil)
        var committedBeforeRestore = false
        BackupTestHooks.shared.set(.beforeRestore) { restoring in
            guard restoring.path == database.path else { return }
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
        defer { BackupTestHooks.shared.set(.beforeRestore, nil) }

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
        let dir = try TemporaryDirectory()
        let database = dir.file("primary.sqlite")
        let folder = dir.url.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        do {
            let c = try Connection(path: database.path)
            try c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')")
        }
        let manager = BackupManager(database: database, folder: folder, keep: 3)
        _ = try manager.create()
        let garbage = Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try garbage.write(to: database)

        let (_, aside) = try manager.restore()

        #expect(try Connection(path: database.path, mode: .readOnly).rows("SELECT id FROM t") == [[.integer(1)]])
        #expect(try Data(contentsOf: try #require(aside)) == garbage, "the damaged file is kept aside as it was")
    }

    /// In WAL mode the copy aside is the database file plus its WAL, folded into one file: commits still only
    /// in the WAL (no checkpoint since) are in it.
    @Test func restore_walNotCheckpointed_copyAsideHasEveryCommit() throws {
        let dir = try TemporaryDirectory()
        let database = dir.file("primary.sqlite")
        let folder = dir.url.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let app = try Connection(path: database.path)
        _ = try app.rows("PRAGMA journal_mode = WAL")
        try app.execute("PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')")
        let manager = BackupManager(database: database, folder: folder, keep: 3)
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
        let dir = try TemporaryDirectory()
        let database = dir.file("primary.sqlite")
        let folder = dir.url.appendingPathComponent("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        do {
            let c = try Connection(path: database.path)
            try c.execute("PRAGMA page_size = 8192; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'backed up')")
        }
        let manager = BackupManager(database: database, folder: folder, keep: 3)
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
