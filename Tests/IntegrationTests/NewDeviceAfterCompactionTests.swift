import BucketSync
import DiffFormat
import Foundation
import SyncEngine
import Testing

// Found by the kill -9 harness (KillNineTests, seed 214, a `compact` trial): a device joining after a compaction
// starts from the key that sorts last under `<user>/backups/`, and that need not be the compaction's snapshot.
// Every device's `sync` uploads its backups there too, named by KSUIDs of its own clock, so another device's older
// backup sorts after the snapshot when it was made in the same second (KSUIDs of one second order by their random
// part) or on a device whose clock runs ahead. The new device then starts from a database lacking the pruned diffs,
// and nothing in inbound brings them back. Fixed: compaction records its snapshot (`<user>/snapshot.json`), and a
// device that started from another database merges that snapshot at its first sync.

@Suite("a new device after compaction")
struct NewDeviceAfterCompactionTests {
    @Test func newDevice_whenAnOlderBackupSortsAfterTheSnapshot_stillGetsThePrunedRows() async throws {
        let dir = try TemporaryDirectory()
        let devices = try await LTSyncScenarios.makeDevices(dir, LTBucket.local(dir))
        let (a, b) = (devices[0], devices[1])
        let user = try a.home.loadSettings().userID
        // B's backup from before A's rows, uploaded under an id one hour ahead: what B's sync uploads when B's
        // clock runs an hour fast (or, within one second, what an unlucky random part does).
        let old = try BackupManager(database: b.db, folder: b.home.backups, keep: 10).create()
        let ahead = try KSUID(timestamp: UInt32(Int64(Date().timeIntervalSince1970) + 3600 - KSUID.epoch), payload: [UInt8](repeating: 7, count: 16))
        try await b.remote.upload(file: b.home.backups.appendingPathComponent(old.file), key: "\(user)/backups/\(ahead.string).sqlite", ifAbsent: false)

        try a.insertThing("compacted-away", title: "in a diff that compaction prunes")
        _ = try await LTSyncScenarios.rounds(devices, 2)
        let c = try await Compactor(home: a.home, remote: a.remote, retry: ltShortRetry).run()
        try #require(!c.pruned.isEmpty, "\(c)")

        let asset = try LTFixture.demoCopy(in: dir, name: "asset-d.sqlite")
        let d = ltHome(dir, "D")
        try ltEditSettings(d) { $0.tier = .free; $0.bucket = LTBucket.local(dir).url }
        let remote = try LTBucket.local(dir).open()
        let joined = try await InitChain(home: d, remote: remote, joinUser: user, bundledAsset: asset, retry: ltShortRetry).run()
        let keys = try await remote.list(prefix: "\(user)/backups/").map(\.key)
        let pointer = try await remote.latestSnapshotKey(user: user)
        let synced = try await Syncer(home: d, remote: remote, retry: ltShortRetry).sync()
        #expect(synced.ok, "\(synced.phases)")

        let title = try ltScalar(d.database, "SELECT title FROM things WHERE id = 'compacted-away'")?.string
        #expect(title == "in a diff that compaction prunes", "the row from a pruned diff is missing on the new device")
        #expect(synced.phases.contains { $0.name == "catch-up" && $0.ok }, "\(synced.phases); init: \(joined); backups: \(keys); snapshot: \(pointer ?? "none"); ahead: \(ahead.string)")
    }
}
