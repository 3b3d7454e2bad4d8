import Foundation
import RTSQLite
import SyncEngine
import Testing

/// `DeviceStatus.damage` (run before every sync) reads the database through a read-only connection. A writer killed
/// in the middle of a transaction leaves a hot rollback journal, which only a connection that may write can roll
/// back: the read-only check failed with "attempt to write a readonly database", and sync refused to run, calling the
/// database damaged and telling the user to restore a backup (the kill -9 harness, S3 seed 9601).
@Suite("Damage check after a killed writer")
struct DamageCheckTests {
    @Test func hotRollbackJournal_isRolledBack_notCalledDamage() throws {
        let box = try Sandbox("damage-hot-journal")
        let live = box.path("live.sqlite"), crashed = box.path("crashed.sqlite")
        let writer = try Connection(path: live.path)
        try writer.execute("PRAGMA journal_mode = DELETE; CREATE TABLE t(x); INSERT INTO t VALUES ('committed')")
        // A transaction big enough to spill pages into the file before its commit, copied as a crash would leave it:
        // the file with uncommitted pages and the journal holding the originals, no process holding a lock.
        try writer.execute("PRAGMA cache_size = 1; BEGIN")
        let insert = try writer.prepare("INSERT INTO t VALUES (?)")
        for _ in 0..<500 { try insert.run([.text(String(repeating: "u", count: 500))]) }
        let journal = URL(fileURLWithPath: live.path + "-journal")
        #expect(FileManager.default.fileExists(atPath: journal.path))
        try FileManager.default.copyItem(at: live, to: crashed)
        try FileManager.default.copyItem(at: journal, to: URL(fileURLWithPath: crashed.path + "-journal"))
        try writer.execute("ROLLBACK")

        #expect(DeviceStatus.damage(crashed.path) == nil)
        let after = try Connection(path: crashed.path, mode: .readOnly)
        #expect(try after.rows("SELECT x FROM t") == [[.text("committed")]])
        #expect(!FileManager.default.fileExists(atPath: crashed.path + "-journal"))
    }

    /// Real damage is still reported.
    @Test func damagedFile_isReported() throws {
        let box = try Sandbox("damage-real")
        let path = box.path("bad.sqlite")
        try Data(repeating: 0x41, count: 8192).write(to: path)
        #expect(DeviceStatus.damage(path.path) != nil)
    }
}
