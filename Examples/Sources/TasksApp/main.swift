import BucketSync
import Foundation
import SyncEngine

// Two devices of one user sync a to-do app through a local folder, and then through S3 when TASKS_APP_S3_URL names a
// bucket (`s3://bucket/prefix`, with the AWS_* variables set; scripts/test.sh uses a loopback moto_server).
// See README "Using the library in an app".

/// Stops the example with a message when `condition` does not hold.
func expect(_ condition: Bool, _ what: String) throws {
    guard condition else { throw ExampleFailure("check failed: \(what)") }
    print("ok: \(what)")
}

/// The whole story on two new devices syncing through `bucketURL`; `localBucket` is the folder when it is one.
func run(bucketURL: String, localBucket: URL?) async throws {
    print("== two devices through \(bucketURL)")
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-tasks-app-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: root) }
    let phone = try Device(name: "phone", container: root.appendingPathComponent("phone"), user: "user-42", bucket: bucketURL)
    let laptop = try Device(name: "laptop", container: root.appendingPathComponent("laptop"), user: "user-42", bucket: bucketURL)

    // 1. Work on the phone, sync both: the laptop has it.
    try phone.app.addProject(id: "p1", name: "Home")
    try phone.app.addTodo(id: "t1", project: "p1", title: "Buy milk")
    try phone.app.addTodo(id: "t2", project: "p1", title: "Call plumber")
    try await phone.sync()
    try await laptop.sync()
    try expect(try laptop.app.todos() == phone.app.todos() && laptop.app.todos().count == 2, "the laptop has the phone's to-dos")

    // 2. A conflict: both rename t1 while apart; another column edited on one side survives too.
    try phone.app.rename(todo: "t1", to: "Buy oat milk")
    try laptop.app.rename(todo: "t1", to: "Buy milk and bread")
    try laptop.app.complete(todo: "t2")
    try await phone.sync()
    try await laptop.sync()
    try await phone.sync()
    try expect(try phone.app.todos() == laptop.app.todos(), "both devices agree after the conflict")
    try expect(try phone.app.todos() == ["t1|Buy milk and bread|false", "t2|Call plumber|true"], "the custom resolver kept the longer title")
    let logged = try SyncDatabase(path: phone.location.database.path).conflicts(table: "todo")
    try expect(logged.contains { $0.column == "title" && $0.losingValue == .text("Buy oat milk") }, "the losing title is in the phone's conflict log")

    // 3. The app keeps writing through its pool while a sync runs.
    let writer = Task.detached {
        for i in 0..<200 { try phone.app.addTodo(id: String(format: "w%03d", i), project: "p1", title: "item \(i)") }
    }
    try await phone.sync()
    try await writer.value
    try await phone.sync()
    try await laptop.sync()
    try expect(try laptop.app.todos().count == 202 && laptop.app.todos() == phone.app.todos(), "every write made during a sync arrived")

    // 4. Backup and restore: the laptop deletes everything by mistake (not synced yet) and restores its backup.
    let backups = BackupManager(home: laptop.location, keep: 3)
    let backup = try backups.create()
    try laptop.app.deleteAllTodos()
    try expect(try laptop.app.todos().isEmpty, "the mistake removed every to-do on the laptop")
    let restored = try backups.restore(id: backup.id, outbox: laptop.location.outbox)
    try expect(restored.backup.id == backup.id, "the backup was restored")
    try expect(try laptop.app.todos().count == 202, "the app's open pool sees the restored to-dos")
    try await laptop.sync()
    try await phone.sync()
    try expect(try phone.app.todos().count == 202 && phone.app.todos() == laptop.app.todos(), "the mistake never reached the phone; both still agree")

    // 5. Client-side encryption (code of the BucketSync article): another user's two devices encrypt everything they
    //    put in the bucket; the second joins with a passphrase-sealed key backup. Nothing in the bucket reads as text.
    var tablet = try Device(name: "tablet", container: root.appendingPathComponent("tablet"), user: "user-43", bucket: bucketURL)
    var desktop = try Device(name: "desktop", container: root.appendingPathComponent("desktop"), user: "user-43", bucket: bucketURL)
    let keyBackup = root.appendingPathComponent("user-43-key-backup.json")
    try tablet.reopen { try encryptedBucket(&$0, url: bucketURL, keyBackup: keyBackup, passphrase: "correct horse battery") }
    try desktop.reopen { try joinEncryptedBucket(&$0, url: bucketURL, keyBackup: keyBackup, passphrase: "correct horse battery") }
    let secret = "Renew passport 7731"
    try tablet.app.addProject(id: "p9", name: "Errands")
    try tablet.app.addTodo(id: "s1", project: "p9", title: secret)
    try await tablet.sync()
    try await desktop.sync()
    try expect(try desktop.app.todos() == tablet.app.todos() && desktop.app.todos() == ["s1|\(secret)|false"], "the desktop decrypted the tablet's to-do")
    if let bucket = localBucket {
        let objects = FileManager.default.enumerator(at: bucket.appendingPathComponent("user-43"), includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { !$0.hasDirectoryPath } ?? []
        let plain = try objects.filter { try Data(contentsOf: $0).range(of: Data(secret.utf8)) != nil }
        try expect(!objects.isEmpty && plain.isEmpty, "none of user-43's \(objects.count) objects in the bucket holds the to-do's title")
    }

    // 6. Sharing (code of the Sharing article): one project's to-dos go to another user's inbound folder.
    try await shareProject(SyncDatabase(path: phone.location.database.path), location: phone.location,
                           bucket: try ObjectStoreRemote.open(bucketURL))
    guard let bucket = localBucket else { return }
    let inbound = bucket.appendingPathComponent("user-77/inbound")
    let shared = try FileManager.default.contentsOfDirectory(atPath: inbound.path).filter { $0.hasSuffix(".sqlite") }
    try expect(shared.count == 1, "the share is in user-77's inbound folder")
    // In the bucket a diff is compressed for transport; a sync expands it on download, as this does.
    let local = root.appendingPathComponent(shared[0])
    try FileManager.default.copyItem(at: inbound.appendingPathComponent(shared[0]), to: root.appendingPathComponent("download.tmp"))
    try DiffTransport.install(root.appendingPathComponent("download.tmp"), as: local, name: shared[0])
    let summary = try describeDiff(at: local)
    try expect(summary.hasPrefix("share ") && summary.contains("202 row(s)"), "the shared diff reads back: \(summary)")
}

do {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-tasks-app-bucket-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: folder) }
    try await run(bucketURL: folder.path, localBucket: folder)
    if let s3 = ProcessInfo.processInfo.environment["TASKS_APP_S3_URL"], !s3.isEmpty {
        try await run(bucketURL: s3, localBucket: nil)
    }
    print("tasks-app: all checks passed")
} catch {
    FileHandle.standardError.write(Data("tasks-app: \(error)\n".utf8))
    exit(1)
}
