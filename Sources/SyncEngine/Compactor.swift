import Crypto
import DiffFormat
import Foundation

/// What each device has applied, published at `<user>/devices/<site>.json` so compaction knows which
/// inbound diffs are no longer needed by anyone.
public struct DeviceCursor: Sendable, Codable, Equatable {
    /// The device's site id.
    public var site: String
    /// Inbound diff ids the device has applied (or made itself).
    public var applied: [String]
    /// When it was published.
    public var at: String
}

/// The result of a compaction.
public struct CompactionReport: Sendable, Codable {
    /// The snapshot (backup) uploaded for new devices to start from.
    public var snapshotKey: String
    /// Devices whose cursors were considered.
    public var devices: [String]
    /// Inbound diffs deleted.
    public var pruned: [String]
    /// Inbound diffs kept because some known device has not applied them.
    public var kept: Int
    /// What was left undone when `Compactor.shouldStop` stopped the run at a safe point (nil: it finished).
    public var stoppedBefore: String? = nil
}

/// Compaction: upload a snapshot of the database, then delete inbound diffs that every known device has
/// applied. A new device starts from the snapshot plus the diffs still in inbound.
public struct Compactor: Sendable {
    /// The folders.
    public var home: RTSyncHome
    /// The bucket.
    public var remote: any RemoteStore
    /// Retries of network steps.
    public var retry: RemoteRetryPolicy

    /// How long a compaction waits for another run on the same home to finish (`shouldStop` ends the wait early,
    /// with `stoppedBefore` set).
    public var lockWait: TimeInterval = 30

    /// Signs the diff a compaction exports first when the database holds changes not yet exported (see ``run()``).
    public var signingKey: Curve25519.Signing.PrivateKey?

    /// Asked between steps (before the snapshot is made, before it is uploaded, before cursors are read, before each
    /// pruned diff); when it says true the run stops there and its report names what is left (`stoppedBefore`).
    /// Every step it finished stands on its own: a later compaction redoes nothing it needs.
    public var shouldStop: (@Sendable () -> Bool)?

    /// Makes a compactor.
    public init(home: RTSyncHome, remote: any RemoteStore, retry: RemoteRetryPolicy = RemoteRetryPolicy()) {
        self.home = home
        self.remote = remote
        self.retry = retry
    }

    /// The key of a device's cursor.
    public static func cursorKey(user: String, site: String) -> String { "\(user)/devices/\(site).json" }

    /// Publishes this device's cursor: the inbound diffs (among `listed`) it has applied.
    public static func publishCursor(db: SyncDatabase, user: String, listed: [String], remote: any RemoteStore, home: RTSyncHome) async throws {
        let applied = Set(try db.query("SELECT diff_id FROM rtsync_applied").compactMap { $0[0].string })
        let cursor = DeviceCursor(site: try db.siteID(), applied: listed.filter { applied.contains($0) }.sorted(), at: ISO8601.format(Date(), fractional: true))
        let file = home.support.appendingPathComponent(".cursor.json")
        try JSONEncoder().encode(cursor).write(to: file, options: .atomic)
        defer { try? FileManager.default.removeItem(at: file) }
        try await remote.upload(file: file, key: cursorKey(user: user, site: cursor.site), ifAbsent: false)
        try db.recordCursorPublished()
    }

    /// Every published cursor under `<user>/devices/`: site id to the inbound diffs it has applied; nil when one of
    /// them cannot be read.
    static func readCursors(user: String, remote: any RemoteStore, retry: RemoteRetryPolicy, home: RTSyncHome) async throws -> [String: Set<String>]? {
        var sets: [String: Set<String>] = [:]
        let cursorKeys = try await retry.run { try await remote.list(prefix: "\(user)/devices/") }.filter { $0.key.hasSuffix(".json") }
        for obj in cursorKeys {
            let file = home.support.appendingPathComponent(".cursor-\(KSUID.generate().string).json")
            defer { try? FileManager.default.removeItem(at: file) }
            try await retry.run { try await remote.download(obj, to: file) }
            guard let data = try? Data(contentsOf: file), let cursor = try? JSONDecoder().decode(DeviceCursor.self, from: data) else { return nil }
            sets[cursor.site] = Set(cursor.applied)
        }
        return sets
    }

    /// Runs a compaction.
    /// - Throws: `LifecycleError.tierRefused` on the free tier with a cloud bucket, `SyncEngineError.catchUpPending`
    ///   for a restored database that has not synced since, or the store's errors.
    public func run() async throws -> CompactionReport {
        // Its snapshot and cursor must not interleave with a sync, restore or another compaction of this home.
        do {
            return try await HomeLock.withLock(home, wait: lockWait, shouldStop: { shouldStop?() ?? false }) { try await runLocked() }
        } catch LifecycleError.lockWaitStopped {
            // Stopped while another run held the lock: nothing was started, nothing listed.
            return CompactionReport(snapshotKey: "", devices: [], pruned: [], kept: 0,
                                    stoppedBefore: "the whole compaction (it was waiting for another run on this home)")
        }
    }

    private func runLocked() async throws -> CompactionReport {
        let settings = try home.loadSettings()
        if settings.demo { throw LifecycleError.demoMode(action: "compact") }
        try settings.tier.require(.uploadBackup(cloud: !remote.isLocal))
        let db = try SyncDatabase(path: home.database.path)
        // A restored database lacks what was pruned since its backup until its catch-up: its snapshot, recorded as
        // the one devices catch up from, would lose those changes for them.
        if try db.needsCatchUp() { throw SyncEngineError.catchUpPending(path: home.database.path) }
        let user = settings.userID.isEmpty ? try db.userID() : settings.userID
        let inbound = Syncer.inboundPrefix(user: user)
        let listed = Syncer.diffIDs(in: try await retry.run { try await remote.list(prefix: inbound) }, under: inbound)

        let stop = { shouldStop?() ?? false }
        if stop() { return CompactionReport(snapshotKey: "", devices: [], pruned: [], kept: listed.count, stoppedBefore: "the snapshot, then pruning") }

        // 1. The snapshot: a verified backup of this database, which has applied everything it lists as applied.
        // Changes not yet exported go to the outbox first (the next sync uploads them): a snapshot is merged by
        // devices that join or restore, so a row in it must be one whose later delete this device will send.
        // Otherwise a row made here and deleted before any export would live on in the snapshot alone.
        try FileManager.default.createDirectory(at: home.backups, withIntermediateDirectories: true)
        let (backup, uploadable) = try BackupManager(home: home, keep: settings.keepBackups)
            .createForUpload(exportingFrom: db, outbox: home.outbox, signingKey: signingKey, shouldStop: shouldStop)
        guard uploadable else {
            throw LifecycleError.backupFailed(path: home.database.path, reason: "the database changed while each of three snapshots was made (kept as local backups); run compact again when writes pause")
        }
        let snapshotKey = "\(user)/backups/\(backup.file)"
        if stop() {
            return CompactionReport(snapshotKey: "", devices: [], pruned: [], kept: listed.count,
                                    stoppedBefore: "uploading the snapshot (kept as local backup \(backup.id)), then pruning")
        }
        try await retry.run { try await remote.upload(file: home.backups.appendingPathComponent(backup.file), key: snapshotKey, ifAbsent: false) }
        // Recorded before anything is pruned: a device that joins or restores later catches up from this one, not
        // from whichever backup's name sorts last (another device's older backup may, by its clock).
        try await remote.recordSnapshot(user: user, key: snapshotKey, retry: retry)
        try await Self.publishCursor(db: db, user: user, listed: listed, remote: remote, home: home)
        // The snapshot is the newest backup, so rotation keeps it (and what init picks).
        try await remote.rotateBackups(user: user, keep: settings.keepBackups, retry: retry)

        if stop() { return CompactionReport(snapshotKey: snapshotKey, devices: [], pruned: [], kept: listed.count, stoppedBefore: "pruning") }

        // 2. Every known device's cursor. One that cannot be read blocks pruning: better keep diffs than lose them.
        guard let sets = try await Self.readCursors(user: user, remote: remote, retry: retry, home: home) else {
            return CompactionReport(snapshotKey: snapshotKey, devices: [], pruned: [], kept: listed.count)
        }

        // 3. Prune what everyone has applied.
        var pruned: [String] = []
        let prunable = listed.filter { id in !sets.isEmpty && sets.values.allSatisfy({ $0.contains(id) }) }
        for id in prunable {
            if stop() {
                return CompactionReport(snapshotKey: snapshotKey, devices: sets.keys.sorted(), pruned: pruned, kept: listed.count - pruned.count,
                                        stoppedBefore: "pruning \(prunable.count - pruned.count) of \(prunable.count) applied diff(s)")
            }
            let key = inbound + id + ".sqlite"
            try await retry.run { try await remote.delete(key: key) }
            pruned.append(key)
        }
        return CompactionReport(snapshotKey: snapshotKey, devices: sets.keys.sorted(), pruned: pruned, kept: listed.count - pruned.count)
    }
}
