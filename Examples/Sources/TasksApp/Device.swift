import BucketSync
import Foundation
import SyncEngine

/// One installation of the app: its data folder, its database and its sync set-up.
struct Device {
    /// A name for the printout.
    let name: String
    /// The app's database layer.
    let app: AppDatabase
    /// Where rtsync keeps its files for this database: the app's own layout, no rtsync home.
    private(set) var location: SyncLocation
    /// Runs syncs of this device.
    private(set) var syncer: Syncer

    /// Sets up a device whose data lives under `container` and syncs as `user` through `bucket` (`file:///…` or
    /// `s3://bucket/prefix`; a cloud bucket needs the premium tier).
    init(name: String, container: URL, user: String, bucket: String) throws {
        self.name = name
        let database = container.appendingPathComponent("Library/Application Support/tasks.sqlite")
        app = try AppDatabase(url: database)
        // The app decides where everything goes; these names are its own.
        let sync = container.appendingPathComponent("Library/Application Support/Sync")
        var location = SyncLocation(
            database: database,
            outbox: sync.appendingPathComponent("Outgoing"),
            inbox: sync.appendingPathComponent("Incoming"),
            quarantine: sync.appendingPathComponent("Rejected"),
            backups: container.appendingPathComponent("Documents/Backups"),
            cache: container.appendingPathComponent("Library/Caches/Sync"),
            work: sync.appendingPathComponent("Work"),
            media: container.appendingPathComponent("Documents/Media"),
            settingsFile: sync.appendingPathComponent("settings.json"),
            keys: sync.appendingPathComponent("Keys"))
        // Settings in code instead of a settings file: back up at every sync, keep three.
        var settings = RTSyncSettings()
        settings.backupIntervalMinutes = 0
        settings.keepBackups = 3
        location.settings = settings
        if bucket.hasPrefix("s3://") { location.settings?.tier = .premium }
        self.location = location

        // Once per database: rtsync's bookkeeping and triggers, and the user it syncs as. Running it again is harmless.
        try SyncDatabase(path: database.path).initializeForSync(userID: user)

        var syncer = Syncer(home: location, remote: try ObjectStoreRemote.open(bucket))
        syncer.resolvers["todo"] = TitleResolver.resolve
        self.syncer = syncer
    }

    /// From now on syncs through `bucket` opened by `open` (which may change the location's settings: encryption).
    mutating func reopen(_ open: (inout SyncLocation) throws -> ObjectStoreRemote) throws {
        let remote = try open(&location)
        let resolvers = syncer.resolvers
        syncer = Syncer(home: location, remote: remote)
        syncer.resolvers = resolvers
    }

    /// Runs one sync and returns its report; a phase that failed is an error here.
    @discardableResult
    func sync() async throws -> SyncReport {
        let report = try await syncer.sync()
        for phase in report.phases where !phase.ok {
            throw ExampleFailure("\(name): sync phase \(phase.name) failed: \(phase.error ?? phase.summary)")
        }
        return report
    }
}

/// The app's conflict rule for to-do titles: when two devices rename the same item concurrently, the longer title
/// wins (ties: the greater one), on every device alike, since it looks only at the two values.
enum TitleResolver {
    static let resolve: ConflictResolver = { conflict in
        guard conflict.column == "title", case .text(let local) = conflict.localValue, case .text(let remote) = conflict.remoteValue else {
            return .byClock
        }
        if local.count != remote.count { return local.count > remote.count ? .keepLocal : .acceptRemote }
        return local >= remote ? .keepLocal : .acceptRemote
    }
}

/// A check of the example that did not hold.
struct ExampleFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
