import BucketSync
import DiffFormat
import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing

/// A backup in `<user>/backups/` is what new devices start from. One that held a row never exported, deleted here
/// before the next export (insert and delete fold into nothing), left that row for good on every device that joined
/// from it (found by the CLI chaos harness with `backup create --upload`).
@Suite("backups that leave the device hold no unexported change")
struct UploadedBackupTests {
    @Test func backupForUpload_exportsPendingChangesFirst_andItsCopyHoldsNone() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let a = try await UnknownDeviceCompactionTests.existingDevice(dir, LTBucket.local(dir), "A")
        try a.execute("INSERT INTO t VALUES ('ghost', 'never exported')")
        let manager = BackupManager(home: a.home)
        try FileManager.default.createDirectory(at: a.home.backups, withIntermediateDirectories: true)

        let (info, uploadable) = try manager.createForUpload(exportingFrom: try SyncDatabase(path: a.db.path), outbox: a.home.outbox)

        #expect(uploadable)
        #expect(a.outbox().count == 1, "the insert went to the outbox first")
        let copy = a.home.backups.appendingPathComponent(info.file)
        #expect(try ltScalar(copy, "SELECT count(*) FROM rtsync_changes") == .integer(0))
        #expect(try ltScalar(copy, "SELECT v FROM t WHERE id = 'ghost'") == .text("never exported"))
    }

    @Test func rowDeletedAfterAnUploadedBackup_isDeletedOnADeviceThatJoinsFromIt() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let bucket = LTBucket.local(dir)
        let a = try await UnknownDeviceCompactionTests.existingDevice(dir, bucket, "A")
        try a.execute("INSERT INTO t VALUES ('keep', 'x')")
        #expect(try await a.sync().ok)
        try a.execute("INSERT INTO t VALUES ('ghost', 'never exported')")
        let (info, uploadable) = try BackupManager(home: a.home).createForUpload(exportingFrom: try SyncDatabase(path: a.db.path), outbox: a.home.outbox)
        #expect(uploadable)
        try await a.remote.upload(file: a.home.backups.appendingPathComponent(info.file), key: "\(try UnknownDeviceCompactionTests.user(a))/backups/\(info.file)", ifAbsent: false)
        try a.execute("DELETE FROM t WHERE id = 'ghost'")
        #expect(try await a.sync().ok)
        let b = try await UnknownDeviceCompactionTests.existingDevice(dir, bucket, "B", user: try UnknownDeviceCompactionTests.user(a))

        for d in [b, a, b] { #expect(try await d.sync().ok) }

        #expect(try UnknownDeviceCompactionTests.ids(b) == ["keep"])
        #expect(try UnknownDeviceCompactionTests.ids(a) == ["keep"])
    }
}
