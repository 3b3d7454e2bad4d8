import DemoAsset
import DiffFormat
import Foundation

/// Restores the original demo database: the newest `demo/*.sqlite` in the bucket, else the bundled one.
public struct DemoReset: Sendable {
    /// The folders.
    public var home: RTSyncHome
    /// The bucket, if any.
    public var remote: (any RemoteStore)?
    /// The bundled demo database.
    public var bundledAsset: URL?
    /// Retries of the download.
    public var retry: RemoteRetryPolicy

    /// How long a reset waits for another run on the same home to finish.
    public var lockWait: TimeInterval = 30

    /// Makes a reset.
    public init(home: RTSyncHome, remote: (any RemoteStore)?, bundledAsset: URL? = DemoAsset.url, retry: RemoteRetryPolicy = RemoteRetryPolicy()) {
        self.home = home
        self.remote = remote
        self.bundledAsset = bundledAsset
        self.retry = retry
    }

    /// Replaces the database's content in place, so an app's open connections read the demo data (the old
    /// content is kept aside), tracks it with a new site id, and re-applies demo protection when `protect`.
    /// Returns where the data came from.
    public func run(scratchTables: [String], protect: Bool) async throws -> String {
        try home.createFolders()
        // Replacing the database must not race a sync, backup or restore of this home.
        return try await HomeLock.withLock(home, wait: lockWait) { try await runLocked(scratchTables: scratchTables, protect: protect) }
    }

    private func runLocked(scratchTables: [String], protect: Bool) async throws -> String {
        var source: String?
        if let remote {
            let temp = home.support.appendingPathComponent(".demo-\(KSUID.generate().string).sqlite")
            defer { try? FileManager.default.removeItem(at: temp) }
            if let newest = try? await remote.downloadNewestDatabase(prefix: "demo/", to: temp, retry: retry),
               BackupManager.verificationProblem(temp, immutable: true) == nil {
                _ = try BackupManager.restoreInPlace(temp, into: home.database)
                source = "bucket \(newest.key)"
            }
        }
        if source == nil {
            guard let asset = bundledAsset, BackupManager.verificationProblem(asset, immutable: true) == nil else {
                throw LifecycleError.noSourceAvailable(attempts: ["demo: no demo database in the bucket", "bundled: not installed with this binary"])
            }
            _ = try BackupManager.restoreInPlace(asset, into: home.database)
            source = "the bundled demo database"
        }
        let db = try SyncDatabase(path: home.database.path)
        try db.trackAllTrackable()
        try db.regenerateSiteID()
        let settings = try home.loadSettings()
        if !settings.userID.isEmpty { try db.setUserID(settings.userID) }
        if protect { try db.setDemoProtection(true, scratchTables: scratchTables) }
        return source!
    }
}
