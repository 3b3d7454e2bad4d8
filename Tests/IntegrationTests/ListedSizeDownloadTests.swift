import BucketClient
import BucketSync
import Foundation
import SyncEngine
import Testing

/// A bucket whose downloads come back shorter than the listing says, each answer consistent in itself (as a
/// server or proxy cutting objects short): a fault no real store produces on demand, so the download is wrapped.
struct ShortDownloadStore: ObjectStore {
    let base: LocalFolderStore
    var displayName: String { base.displayName }
    var requestCounter: RequestCounter { base.requestCounter }
    func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        try await base.list(prefix: prefix, startAfter: startAfter, maxKeys: maxKeys, continuationToken: continuationToken)
    }
    func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data {
        let data = try await base.get(key: key, range: range, ifMatch: ifMatch)
        // Whole diffs read into memory (a sync's small downloads) come back short too.
        return (range?.start ?? 0) == 0 && key.contains("/inbound/") ? data.prefix(data.count / 2) : data
    }
    func download(key: String, to fileURL: URL) async throws -> ObjectInfo {
        let data = try await base.get(key: key)
        try data.prefix(data.count / 2).write(to: fileURL)
        var info = try await base.head(key: key)
        info.size = Int64(data.count / 2)
        return info
    }
    func head(key: String) async throws -> ObjectInfo { try await base.head(key: key) }
    func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo { try await base.put(key: key, data: data, ifNoneMatch: ifNoneMatch) }
    func put(key: String, fileURL: URL) async throws -> ObjectInfo { try await base.put(key: key, fileURL: fileURL) }
    func delete(key: String) async throws { try await base.delete(key: key) }
}

@Suite struct ListedSizeDownloadTests {
    /// `sync` downloads each new diff with the size the inbound listing gave: a diff that comes back shorter fails
    /// the download phase naming its key, and nothing lands in the inbox; the next sync, the bucket answering
    /// whole again, downloads and applies it. Both ways a diff is downloaded: read into memory (small objects), and
    /// through a staging file.
    @Test(arguments: [true, false])
    func syncDownload_diffServedShorterThanListed_failsNamingIt_keepsTheInboxEmpty_thenAppliesOnceFixed(inMemory: Bool) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let bucket = LTBucket.local(dir)
        let devices = try await LTSyncScenarios.makeDevices(dir, bucket)
        let (a, b) = (devices[0], devices[1])
        try a.insertThing("cut-short", title: "sent whole")
        #expect(try await a.sync().ok)

        let short = ObjectStoreRemote(store: ShortDownloadStore(base: try LocalFolderStore(root: dir.url.appendingPathComponent("bucket"))), isLocal: true)
        var syncer = Syncer(home: b.home, remote: short, retry: ltShortRetry)
        if !inMemory { syncer.inMemoryDownloadLimit = 0 }
        let failed = try await syncer.sync()
        let download = try #require(failed.phases.first { $0.name == "download" })
        #expect(!download.ok)
        #expect(download.error?.contains("wrong size") == true, "\(download.error ?? "")")
        #expect(download.error?.contains("/inbound/") == true)
        let inbox = ((try? FileManager.default.contentsOfDirectory(atPath: b.home.inbox.path)) ?? []).filter { !$0.hasPrefix(".") }
        #expect(inbox.isEmpty, "\(inbox)")
        #expect(try b.thingTitle("cut-short") == nil)

        #expect(try await b.sync().ok)
        #expect(try b.thingTitle("cut-short") == "sent whole")
    }
}
