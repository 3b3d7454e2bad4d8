import BucketClient
import BucketSync
import Foundation
import SyncEngine
import RTSyncTestSupport
import Testing

/// The library's entry points with client-side encryption on in the home's settings (issue 21).
@Suite("encryption through the library")
struct EncryptionLibraryTests {
    @Test func bucketOpenedWithoutTheSettings_isRefusedBySync_andNothingGoesUpAsPlaintext() async throws {
        let dir = try TemporaryDirectory()
        let a = try await hsDevice(dir)
        try ContentKeyring.generate().save(to: a.home.contentKeysFile)
        try ltEditSettings(a.home) { $0.tier = .premium; $0.encryption = ["inbound", "backups"] }
        let settings = try a.home.loadSettings()
        let before = try await a.remote.list(prefix: settings.userID + "/inbound/").map(\.key)
        try a.insertThing("secret-1", title: "row value nobody else may read")

        // The simplest entry point, ObjectStoreRemote.open(url), does not encrypt: sync refuses it.
        let plain = try ObjectStoreRemote.open(LTBucket.local(dir).url)
        await #expect(throws: SyncEngineError.remoteNotEncrypting(kinds: ["inbound", "backups"], settings: a.home.settingsFile.path)) {
            _ = try await Syncer(home: a.home, remote: plain, retry: ltShortRetry).sync()
        }
        #expect(try await a.remote.list(prefix: settings.userID + "/inbound/").map(\.key) == before)

        // Opened with the home and its settings, the same sync uploads ciphertext.
        let encrypted = try ObjectStoreRemote.open(LTBucket.local(dir).url, home: a.home, settings: settings)
        #expect(encrypted.encryptedPrefixes.contains(settings.userID + "/inbound/"))
        let report = try await Syncer(home: a.home, remote: encrypted, retry: ltShortRetry).sync()
        #expect(report.ok, "\(report.phases)")
        let added = try await a.remote.list(prefix: settings.userID + "/inbound/").map(\.key).filter { !before.contains($0) }
        #expect(added.count == 1)
        let raw = try Data(contentsOf: dir.url.appendingPathComponent("bucket").appendingPathComponent(added[0]))
        #expect(raw.prefix(8) == Data(EncryptionFormat.magic))
        #expect(raw.range(of: Data("row value nobody else may read".utf8)) == nil)
    }
}
