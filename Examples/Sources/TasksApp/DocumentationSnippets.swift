import BucketClient
import BucketSync
import Foundation
import SyncEngine

// The code of the DocC articles that is not in the rest of the example, compiled with it so it cannot rot
// (IntegrationTests/DocumentationSnippetTests checks that every article's code is here or in the example).
// Functions the example does not call are compiled only.

/// Getting started: the smallest set-up, everything rtsync writes under one folder of the app's.
func firstSync(appSupport: URL) async throws -> SyncReport {
    let location = SyncLocation(database: appSupport.appendingPathComponent("notes.sqlite"),
                                folder: appSupport.appendingPathComponent("Sync"))
    try SyncDatabase(path: location.database.path).initializeForSync(userID: "user-42")
    let bucket = try ObjectStoreRemote.open("file:///Users/Shared/notes-bucket")
    let syncer = Syncer(home: location, remote: bucket)
    return try await syncer.sync()
}

/// Getting started: the same sync through S3 (credentials from `AWS_ACCESS_KEY_ID`, … or the AWS config files).
func s3Syncer(location: SyncLocation) throws -> Syncer {
    let bucket = try ObjectStoreRemote.open("s3://my-app-sync/prod")
    var settings = try location.loadSettings()
    settings.tier = .premium
    var premium = location
    premium.settings = settings
    return Syncer(home: premium, remote: bucket)
}

/// Syncing your app's database: a sync the user can stop.
func cancellableSync(_ syncer: Syncer) async throws -> SyncReport {
    let task = Task { try await syncer.sync() }
    // Later, e.g. when the app goes to the background:
    task.cancel()
    let report = try await task.value
    if report.interrupted {
        print("stopped at a safe point; the next sync finishes the rest")
    }
    return report
}

/// Syncing your app's database: what to do with a database copied from another device.
func handleCopiedDatabase(_ location: SyncLocation, syncer: Syncer) async throws -> SyncReport {
    do {
        return try await syncer.sync()
    } catch SyncEngineError.databaseCopied {
        let db = try SyncDatabase(path: location.database.path)
        try db.becomeNewSite(outbox: location.outbox)
        return try await syncer.sync()
    }
}

/// Conflicts and policies: per-table policies.
func choosePolicies(_ db: SyncDatabase) throws {
    try db.setPolicy(TablePolicy(.lwwRow), for: "project")
    try db.setPolicy(TablePolicy(.appendOnly), for: "audit_log")
    try db.setPolicy(TablePolicy(.ownerOnly, ownerColumn: "owner_id"), for: "comment")
}

/// Conflicts and policies: putting a value that lost back.
func restoreLosingTitle(_ db: SyncDatabase) throws {
    for record in try db.conflicts(includeRestored: false, table: "todo") where record.column == "title" {
        print("\(record.key): kept \(record.winner), the other value was \(record.losingValue)")
    }
}

/// Backups and restore: the app's own starting database instead of rtsync's demo.
func firstLaunch(_ location: SyncLocation, bundled: URL) async throws -> InitResult {
    let chain = InitChain(home: location, remote: nil, bundledAsset: bundled, demoPrefix: nil)
    return try await chain.run { step in print(step) }
}

/// Sharing: send the rows of one project to another user, read-only.
func shareProject(_ db: SyncDatabase, location: SyncLocation, bucket: any RemoteStore) async throws {
    guard let share = try db.writeShare(table: "todo", filter: "projectId = ?", arguments: [.text("p1")],
                                        to: "user-77", permission: .readOnly, directory: location.outbox) else { return }
    let file = URL(fileURLWithPath: share.file)
    try await bucket.upload(file: file, key: Syncer.inboundPrefix(user: "user-77") + file.lastPathComponent, ifAbsent: true)
    try FileManager.default.removeItem(at: file)
}

/// Security: sign what this device exports and accept only diffs signed by trusted keys.
func signedSyncer(_ location: SyncLocation, bucket: any RemoteStore) throws -> Syncer {
    let keys = DeviceKeys(home: location)
    var settings = try location.loadSettings()
    settings.requireSignatures = true
    var signed = location
    signed.settings = settings
    return Syncer(home: signed, remote: bucket, signingKey: try keys.signingKey(), trustedKeys: try keys.trustedKeys())
}

/// Media: recordings and images beside the database, with their own manifest.
func syncMedia(_ location: SyncLocation) async throws -> MediaSyncReport {
    let store = try makeObjectStore(urlString: "file:///Users/Shared/notes-bucket")
    let media = try MediaSync(store: store, documents: location.documents, user: "user-42",
                              manifestURL: location.support.appendingPathComponent("media-manifest.json"))
    var options = MediaSyncOptions()
    options.kinds = [.images]
    return try await media.run(options)
}

/// The diff format: read a diff as untrusted input.
func describeDiff(at url: URL) throws -> String {
    let reader = try DiffReader(url: url)
    let m = reader.metadata
    let rows = reader.counts.values.reduce(0) { $0 + $1.upserts + $1.deletes }
    return "\(m.kind) \(m.id) by \(m.authorUser)/\(m.authorSite): \(rows) row(s) in \(reader.tables.map(\.name))"
}

/// Values as an app names them: `SQLValue` comes with `import SyncEngine` (also in expressions, beside BucketClient).
func emptyRow(columns: Int) -> [SQLValue] {
    var row = [SQLValue](repeating: .null, count: columns)
    if columns > 0 { row[0] = SQLValue.text("id") }
    return row
}

/// Security: encrypt what rtsync puts in the bucket (premium), and keep a passphrase-sealed copy of the key.
func encryptedBucket(_ location: inout SyncLocation, url: String, keyBackup: URL, passphrase: String) throws -> ObjectStoreRemote {
    var settings = try location.loadSettings()
    settings.tier = .premium
    settings.encryption = EncryptedKind.allCases.map(\.rawValue)
    var ring = try location.contentKeyring() ?? ContentKeyring.generate()
    ring.kinds = settings.encryption
    try ring.save(to: location.contentKeysFile)
    try ContentKeyring.writeSecret(try ring.wrapped(passphrase: passphrase), to: keyBackup)
    location.settings = settings
    return try ObjectStoreRemote.open(url, home: location, settings: settings)
}

/// Security: another device of the same user joins with the key backup.
func joinEncryptedBucket(_ location: inout SyncLocation, url: String, keyBackup: URL, passphrase: String) throws -> ObjectStoreRemote {
    guard let ring = try ContentKeyring.load(file: keyBackup, passphrase: passphrase) else {
        throw EncryptionError.noContentKey(file: keyBackup.path)
    }
    try ring.save(to: location.contentKeysFile)
    var settings = try location.loadSettings()
    settings.tier = .premium
    settings.encryption = ring.kinds
    location.settings = settings
    return try ObjectStoreRemote.open(url, home: location, settings: settings)
}
