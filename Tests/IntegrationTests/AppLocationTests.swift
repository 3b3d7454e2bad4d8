import BucketSync
import Foundation
import RTSQLite
import SyncEngine
import Testing

// An app's own database at its own path, its own folders, its own connection beside rtsync's (issue 18).

/// One device of an app that keeps `notes.db` in its own data folder and rtsync's folders in `sync/`.
private struct AppDevice {
    let database: URL
    let location: SyncLocation

    init(_ dir: TemporaryDirectory, _ name: String) throws {
        let base = dir.url.appendingPathComponent(name, isDirectory: true)
        database = base.appendingPathComponent("data/notes.db")
        try FileManager.default.createDirectory(at: database.deletingLastPathComponent(), withIntermediateDirectories: true)
        var location = SyncLocation(database: database, folder: base.appendingPathComponent("sync", isDirectory: true))
        location.settings = RTSyncSettings()
        self.location = location
    }

    /// Creates the app's schema in WAL mode through the app's own connection.
    func createSchema() throws {
        let c = try Connection(path: database.path)
        _ = try c.rows("PRAGMA journal_mode = WAL")
        try c.execute("CREATE TABLE IF NOT EXISTS note(id TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT)")
    }

    func write(_ sql: String, _ args: [SQLValue] = []) throws {
        let c = try Connection(path: database.path)
        c.setBusyTimeout(milliseconds: 5_000)
        try c.execute(sql, args)
    }

    func notes() throws -> [String] {
        try Connection(path: database.path, mode: .readOnly).rows("SELECT id, title FROM note ORDER BY id").map { "\($0[0].string ?? "")=\($0[1].string ?? "")" }
    }

    /// Devices "a" and "b" of user-1, each with the app's schema, initialized for sync.
    static func initializedPair(_ dir: TemporaryDirectory) throws -> (AppDevice, AppDevice) {
        let a = try AppDevice(dir, "a"), b = try AppDevice(dir, "b")
        for d in [a, b] {
            try d.createSchema()
            try SyncDatabase(path: d.database.path).initializeForSync(userID: "user-1")
        }
        return (a, b)
    }

    func syncer(_ bucket: URL) throws -> Syncer {
        Syncer(home: location, remote: try ObjectStoreRemote.open(bucket.path), retry: ltShortRetry)
    }
}

@Suite struct AppLocationTests {
    @Test func appDatabaseAtItsOwnPath_twoDevicesSyncThroughLocalFolder_convergeWithoutHomeLayout() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket")
        let (a, b) = try AppDevice.initializedPair(dir)
        try a.write("INSERT INTO note VALUES ('n1', 'from a', NULL)")
        try b.write("INSERT INTO note VALUES ('n2', 'from b', NULL)")
        for d in [a, b, a] { _ = try await d.syncer(bucket).sync() }
        #expect(try a.notes() == ["n1=from a", "n2=from b"])
        #expect(try b.notes() == a.notes())
        // Everything rtsync wrote is in the app's sync/ folder or the bucket; no home layout appeared.
        let fm = FileManager.default
        #expect(fm.fileExists(atPath: a.location.outbox.path) && a.location.outbox.path.hasSuffix("a/sync/outbox"))
        #expect(!fm.fileExists(atPath: dir.url.appendingPathComponent("a/support").path))
        #expect(!fm.fileExists(atPath: dir.url.appendingPathComponent("a/data/support").path))
        #expect(fm.fileExists(atPath: bucket.appendingPathComponent("user-1/inbound").path))
    }

    @Test func databaseNeverInitializedForSync_syncThrowsNoUserID_andLeavesTheDatabaseUntouched() async throws {
        let dir = try TemporaryDirectory()
        let a = try AppDevice(dir, "a")
        try a.createSchema()
        try a.write("INSERT INTO note VALUES ('n1', 'hello', NULL)")
        await #expect(throws: SyncEngineError.noUserID(path: a.database.path)) { _ = try await a.syncer(dir.url.appendingPathComponent("bucket")).sync() }
        let rtsyncTables = try Connection(path: a.database.path, mode: .readOnly).rows("SELECT name FROM sqlite_schema WHERE name LIKE 'rtsync%'")
        #expect(rtsyncTables.isEmpty)
        let error: any Error = SyncEngineError.noUserID(path: a.database.path)
        let hint = (error as? LocalizedError)?.recoverySuggestion ?? ""
        #expect(hint.contains("initializeForSync") && !hint.contains("--"), "\(hint)")
        // An unusable user id is refused before anything is written.
        #expect(throws: SyncEngineError.self) { try SyncDatabase(path: a.database.path).initializeForSync(userID: "../x") }
        #expect(try Connection(path: a.database.path, mode: .readOnly).rows("SELECT name FROM sqlite_schema WHERE name LIKE 'rtsync%'").isEmpty)
    }

    @Test func initializeForSync_tracksTheAppsTables_butNotGRDBsMigrationsTable() throws {
        let dir = try TemporaryDirectory()
        let a = try AppDevice(dir, "a")
        try a.createSchema()
        try a.write("CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
        try a.write("INSERT INTO grdb_migrations VALUES ('v1')")
        let db = try SyncDatabase(path: a.database.path)
        try db.initializeForSync(userID: "user-1")
        let tracked = try db.trackedTables().map(\.name)
        #expect(!tracked.isEmpty && !tracked.contains("grdb_migrations"), "\(tracked)")
    }

    @Test func initializeForSync_givenSiteID_isRecorded_andAnotherUserLaterIsRefused() throws {
        let dir = try TemporaryDirectory()
        let a = try AppDevice(dir, "a")
        try a.createSchema()
        let site = KSUID.generate().string
        let db = try SyncDatabase(path: a.database.path)
        #expect(try db.initializeForSync(userID: "user-1", siteID: site) == site)
        #expect(try db.userID() == "user-1")
        #expect(try db.initializeForSync(userID: "user-1") == site)
        #expect(throws: SyncEngineError.self) { try db.initializeForSync(userID: "user-2") }
        #expect(try db.userID() == "user-1")
    }

    @Test func secondConnectionWritingInWAL_whileSyncRuns_everyWriteReachesTheOtherDevice() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket")
        let (a, b) = try AppDevice.initializedPair(dir)
        let total = 400
        let path = a.database.path
        // The app's own connection: WAL, its own busy timeout, one transaction per write, on another thread.
        let finished = WriterDone()
        let writer = Task.detached { () throws -> Int in
            defer { finished.set() }
            let c = try Connection(path: path)
            c.setBusyTimeout(milliseconds: 10_000)
            for i in 0..<total {
                try c.transaction { try c.execute("INSERT INTO note(id, title) VALUES (?, ?)", [.text(String(format: "w%04d", i)), .text("t\(i)")]) }
            }
            return total
        }
        let syncer = try a.syncer(bucket)
        // Syncs run while the writer writes (at least three, and until it is done).
        var runs = 0
        repeat {
            _ = try await syncer.sync()
            runs += 1
        } while runs < 3 || !finished.isSet
        #expect(try await writer.value == total)
        _ = try await syncer.sync()
        _ = try await b.syncer(bucket).sync()
        #expect(try b.notes().count == total)
        #expect(try b.notes() == a.notes())
        #expect(try SyncDatabase(path: path).pendingChangeCount() == 0)
    }

    @Test func copiedDatabase_syncRefusesItAsACopy_untilItBecomesANewSite_thenNothingIsLost() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket")
        let a = try AppDevice(dir, "a"), c = try AppDevice(dir, "c")
        try a.createSchema()
        try SyncDatabase(path: a.database.path).initializeForSync(userID: "user-1")
        try a.write("INSERT INTO note VALUES ('n1', 'synced', NULL)")
        _ = try await a.syncer(bucket).sync()
        // A change A has not exported yet, then the copy.
        try a.write("INSERT INTO note VALUES ('n2', 'pending on a', NULL)")
        try FileManager.default.copyItem(at: a.database, to: c.database)
        let oldSite = try SyncDatabase(path: c.database.path).siteID()
        await #expect {
            _ = try await c.syncer(bucket).sync()
        } throws: { error in
            guard case .databaseCopied(let path, let recorded)? = error as? SyncEngineError else { return false }
            return path == c.database.path && recorded.hasSuffix("a/data/notes.db")
        }
        let copy = try SyncDatabase(path: c.database.path)
        #expect(try copy.siteID() == oldSite)
        let newSite = try copy.becomeNewSite(outbox: c.location.outbox)
        #expect(newSite != oldSite)
        #expect(try copy.pendingChangeCount() == 0)
        try c.write("INSERT INTO note VALUES ('n3', 'from the copy', NULL)")
        let report = try await c.syncer(bucket).sync()
        #expect(report.ok, "\(report.phases)")
        // The original still syncs as itself, and each device gets the other's work.
        _ = try await a.syncer(bucket).sync()
        _ = try await c.syncer(bucket).sync()
        #expect(try a.notes() == ["n1=synced", "n2=pending on a", "n3=from the copy"])
        #expect(try c.notes() == a.notes())
        // A file that was only moved (same identity) keeps syncing without a new site.
        let moved = try AppDevice(dir, "moved")
        try FileManager.default.moveItem(at: a.database, to: moved.database)
        for s in ["-wal", "-shm"] { try? FileManager.default.moveItem(atPath: a.database.path + s, toPath: moved.database.path + s) }
        #expect(try SyncDatabase(path: moved.database.path).checkLocation().looksCopied == false)
    }

    @Test func databaseCopiedToAnotherDisk_confirmLocation_keepsItsSiteAndSyncs() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket")
        let a = try AppDevice(dir, "a"), b = try AppDevice(dir, "b")
        try a.createSchema()
        try SyncDatabase(path: a.database.path).initializeForSync(userID: "user-1")
        _ = try await a.syncer(bucket).sync()
        // A move across disks is a copy and a delete: another path and another inode.
        try FileManager.default.copyItem(at: a.database, to: b.database)
        try FileManager.default.removeItem(at: a.database)
        let db = try SyncDatabase(path: b.database.path)
        let site = try db.siteID()
        #expect(try db.checkLocation().looksCopied)
        try db.confirmLocation()
        #expect(try db.checkLocation().looksCopied == false)
        try b.write("INSERT INTO note VALUES ('n1', 'after the move', NULL)")
        let report = try await b.syncer(bucket).sync()
        #expect(report.ok, "\(report.phases)")
        #expect(try db.siteID() == site)
    }

    @Test func appDatabaseFolder_restoreLeftovers_areRemovedBySync_andTheAppsOwnFilesStay() async throws {
        let dir = try TemporaryDirectory()
        let a = try AppDevice(dir, "a")
        try a.createSchema()
        try SyncDatabase(path: a.database.path).initializeForSync(userID: "user-1")
        let folder = a.database.deletingLastPathComponent()
        let leftovers = [".rtsync-restore-\(KSUID.generate().string).sqlite", ".notes.db.incoming", ".notes.db.restore-\(KSUID.generate().string)"]
        let appFiles = [".download-1.sqlite", "attachments.sqlite", ".rtsync-restore-notes.txt"]
        for name in leftovers + appFiles { try Data("x".utf8).write(to: folder.appendingPathComponent(name)) }
        let syncer = try a.syncer(dir.url.appendingPathComponent("bucket"))
        let report = try await syncer.sync()
        for name in leftovers {
            #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent(name).path), "\(name) is left")
            #expect(report.cleanedUp.contains(folder.appendingPathComponent(name).path))
        }
        for name in appFiles { #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent(name).path), "\(name) was removed") }
    }

    @Test func cancellingTheSyncTask_stopsAtASafePoint_andTheNextRunFinishesWithNothingLost() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket")
        let (a, b) = try AppDevice.initializedPair(dir)
        try a.write("INSERT INTO note VALUES ('n1', 'one', NULL)")
        let syncer = try a.syncer(bucket)
        // Cancelled from inside the run, the moment it starts uploading: no timing involved.
        let report = try await Task {
            try await syncer.sync(progress: { line in
                if line.hasPrefix("upload ") { withUnsafeCurrentTask { $0?.cancel() } }
            })
        }.value
        #expect(report.interrupted)
        #expect(report.phases.contains { $0.name == "stopped" }, "\(report.phases)")
        #expect(!report.phases.contains { $0.name == "apply" })
        let again = try await syncer.sync()
        #expect(!again.interrupted && again.ok, "\(again.phases)")
        _ = try await b.syncer(bucket).sync()
        #expect(try b.notes() == ["n1=one"])
    }
}

/// Set by the writer thread when it is done.
private final class WriterDone: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    func set() { lock.lock(); value = true; lock.unlock() }
}
