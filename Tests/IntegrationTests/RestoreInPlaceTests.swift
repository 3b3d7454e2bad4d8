import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
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
}
