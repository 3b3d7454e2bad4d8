import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing

/// Issue 5: `create(verification: .deferred)` returns once the copy is durable; the quick_check runs later
/// (`verifyPending`, `rtsync backup verify --pending`), and only a verified backup becomes last-known-good.
@Suite("backups: deferred verification")
struct DeferredVerificationTests {
    func makeDatabase(_ url: URL, rows: Int = 50) throws {
        let db = try Connection(path: url.path)
        try db.execute("PRAGMA journal_mode = WAL")
        try db.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, payload TEXT NOT NULL)")
        for i in 0..<rows { try db.execute("INSERT INTO log(payload) VALUES (?)", [.text("row \(i)")]) }
    }

    func setUp() throws -> (TemporaryDirectory, URL, URL) {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try makeDatabase(db)
        let folder = dir.file("backups")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return (dir, db, folder)
    }

    @Test func deferred_isListedUnverified_notLastKnownGood_untilVerifyPending() throws {
        let (dir, db, folder) = try setUp()
        _ = dir
        let manager = BackupManager(database: db, folder: folder, keep: 5)
        let first = try manager.create()
        #expect(first.verified && first.awaitingVerification == nil && first.verifyMilliseconds != nil)

        let later = try manager.create(verification: .deferred)
        #expect(!later.verified && later.awaitingVerification == true && later.verifyMilliseconds == nil)
        #expect(later.copyMilliseconds != nil)
        // The copy is complete and durable already; it is just not trusted yet.
        #expect(try ltScalar(folder.appendingPathComponent(later.file), "SELECT count(*) FROM log")?.int64 == 50)
        #expect(manager.lastKnownGood()?.id == first.id)

        let checked = try manager.verifyPending()
        #expect(checked.map(\.id) == [later.id])
        #expect(checked.allSatisfy { $0.verified && $0.awaitingVerification == nil && $0.verifyMilliseconds != nil })
        #expect(manager.lastKnownGood()?.id == later.id)
        #expect(try manager.verifyPending().isEmpty)
    }

    @Test func deferred_damagedCopy_failsVerification_lastKnownGoodStays() throws {
        let (dir, db, folder) = try setUp()
        _ = dir
        let manager = BackupManager(database: db, folder: folder, keep: 5)
        let good = try manager.create()
        let later = try manager.create(verification: .deferred)
        // Damage the unverified copy after it was made (a bad sector, a bug elsewhere): the check must catch it.
        let file = folder.appendingPathComponent(later.file)
        var bytes = [UInt8](try Data(contentsOf: file))
        let pageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        for i in pageSize..<min(bytes.count, 2 * pageSize) { bytes[i] = 0xEE }
        try Data(bytes).write(to: file)

        let checked = try manager.verifyPending()
        #expect(checked.count == 1 && !checked[0].verified)
        #expect(manager.lastKnownGood()?.id == good.id)
        #expect(manager.list().first { $0.id == later.id }?.awaitingVerification == nil)
        // Restore by default takes the last-known-good, never the damaged one.
        let (restored, _) = try manager.restore()
        #expect(restored.id == good.id)
    }

    @Test func rotation_keepsTheLastKnownGood_whenNewerOnesAwaitVerification() throws {
        let (dir, db, folder) = try setUp()
        _ = dir
        let manager = BackupManager(database: db, folder: folder, keep: 2)
        let good = try manager.create()
        var pending: [BackupInfo] = []
        for _ in 0..<3 { pending.append(try manager.create(verification: .deferred)) }
        let listed = manager.list().map(\.id)
        #expect(listed == [pending[2].id, pending[1].id, good.id], "\(listed)")
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".sqlite") })
        #expect(files == Set([pending[2].file, pending[1].file, good.file]))
        #expect(manager.lastKnownGood()?.id == good.id)
    }

    @Test(.enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
    func cli_verifyLater_thenVerifyPending() throws {
        let home = try TemporaryDirectory()
        let initRun = try RTSyncBinary.run(["init", "--home", home.url.path])
        #expect(initRun.status == 0, "\(initRun.stderr)")
        let made = try RTSyncBinary.run(["backup", "create", "--home", home.url.path, "--verify-later"])
        #expect(made.status == 0, "\(made.stdout)")
        #expect(made.stdout.contains("not verified yet"), "\(made.stdout)")
        let listed = try RTSyncBinary.run(["backup", "list", "--home", home.url.path])
        #expect(listed.stdout.contains("not verified yet"), "\(listed.stdout)")
        let verified = try RTSyncBinary.run(["backup", "verify", "--pending", "--home", home.url.path])
        #expect(verified.status == 0, "\(verified.stdout)")
        #expect(verified.stdout.contains(": ok"), "\(verified.stdout)")
        let after = try RTSyncBinary.run(["backup", "list", "--home", home.url.path])
        #expect(after.stdout.contains("last-known-good") && !after.stdout.contains("not verified yet"), "\(after.stdout)")
        let none = try RTSyncBinary.run(["backup", "verify", "--pending", "--home", home.url.path])
        #expect(none.stdout.contains("no backups waiting"), "\(none.stdout)")
    }
}
