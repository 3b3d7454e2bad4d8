import BucketClient
import BucketSync
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import RTSyncTestSupport
import SyncEngine
import Testing

// Issue 15 §6, found by the S3 kill -9 trials: a `backup create --upload` killed inside a multipart upload left the
// upload open in the bucket (stored and billed, never listed) and its resume file beside the backup, forever.

@Suite("open multipart uploads of killed backup uploads", .enabled(if: !LTMoto.skipRequested, "RTSYNC_SKIP_S3=1"))
struct InterruptedUploadTests {
    /// Starts a multipart upload of `key` (relative to the bucket URL's prefix) on moto and returns its id.
    func openUpload(_ moto: LTMoto, bucketURL: String, key: String) async throws -> String {
        let prefix = bucketURL.dropFirst("s3://\(LTMoto.bucket)/".count)
        var components = URLComponents(url: moto.endpoint.appendingPathComponent(LTMoto.bucket).appendingPathComponent(String(prefix))
            .appendingPathComponent(key), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "uploads", value: "")]
        var request = URLRequest(url: components.url!)
        request.httpMethod = "POST"
        let (data, _) = try await URLSession.shared.data(for: request)
        let text = String(decoding: data, as: UTF8.self)
        return try #require(text.components(separatedBy: "<UploadId>").dropFirst().first?.components(separatedBy: "</UploadId>").first, "\(text)")
    }

    /// Writes the resume file an upload of `file` to `key` keeps beside the file.
    func writeResumeFile(for file: URL, bucketURL: String, key: String, uploadId: String) throws {
        let prefix = String(bucketURL.dropFirst("s3://\(LTMoto.bucket)/".count))
        let size = (try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value ?? 0
        let state: [String: Any] = ["bucket": LTMoto.bucket, "key": prefix + "/" + key, "uploadId": uploadId, "fileSize": size,
                                    "fileMtimeNanoseconds": 0, "partSize": 8 << 20, "parts": [String: String]()]
        try JSONSerialization.data(withJSONObject: state).write(to: file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).rtsync-upload.json"))
    }

    @Test func sync_afterBackupUploadsKilledMidMultipart_abortsTheirOpenUploads_andRemovesTheirResumeFiles() async throws {
        try await abandonsKilledBackupUploads(encrypted: false)
    }

    /// Encrypted backups go up without a staging copy, so their resume files sit beside the backups as plain ones do,
    /// and the same clean-up gives their uploads up.
    @Test func sync_withEncryptedBackups_afterUploadsKilledMidMultipart_abortsTheirOpenUploads_andRemovesTheirResumeFiles() async throws {
        try await abandonsKilledBackupUploads(encrypted: true)
    }

    func abandonsKilledBackupUploads(encrypted: Bool) async throws {
        let moto = try await LTMoto.shared.value
        let dir = try TemporaryDirectory()
        let bucketURL = moto.freshBucketURL()
        defer { let remote = try? moto.remote(bucketURL); Task { await knEmpty(remote, bucketURL) } }
        let home = ltHome(dir, "A")
        try ltEditSettings(home) { $0.tier = .premium; $0.bucket = bucketURL }
        var remote = try moto.remote(bucketURL)
        let user = try await InitChain(home: home, remote: remote, bundledAsset: try LTFixture.demoCopy(in: dir), retry: ltShortRetry).run().userId
        if encrypted {
            try ContentKeyring.generate().save(to: home.contentKeysFile)
            try ltEditSettings(home) { $0.encryption = ["backups"] }
            remote = ObjectStoreRemote(store: try home.encrypting(remote.store, settings: try home.loadSettings()), isLocal: false)
            try #require(remote.encryptedPrefixes == ["\(user)/backups/"])
        }
        let manager = BackupManager(home: home)
        // One upload killed after its id was saved, one killed before (its resume file has no id yet).
        let saved = try manager.create(), unsaved = try manager.create()
        let savedKey = "\(user)/backups/\(saved.file)", unsavedKey = "\(user)/backups/\(unsaved.file)"
        let savedID = try await openUpload(moto, bucketURL: bucketURL, key: savedKey)
        _ = try await openUpload(moto, bucketURL: bucketURL, key: unsavedKey)
        try writeResumeFile(for: home.backups.appendingPathComponent(saved.file), bucketURL: bucketURL, key: savedKey, uploadId: savedID)
        try writeResumeFile(for: home.backups.appendingPathComponent(unsaved.file), bucketURL: bucketURL, key: unsavedKey, uploadId: "")
        // Another device's upload in progress under the same prefix is none of this device's business.
        let othersKey = "\(user)/backups/3MbOtherDeviceBackup0000000000.sqlite"
        _ = try await openUpload(moto, bucketURL: bucketURL, key: othersKey)
        try #require(try await moto.unfinishedUploads(under: bucketURL).count == 3)

        let report = try await Syncer(home: home, remote: remote, retry: ltShortRetry).sync()
        #expect(report.ok, "\(report.phases)")
        let left = try await moto.unfinishedUploads(under: bucketURL)
        #expect(left.map { $0.hasSuffix(othersKey) } == [true], "\(left)")
        #expect(report.cleanedUp.contains("unfinished upload of \(savedKey)"), "\(report.cleanedUp)")
        #expect(report.cleanedUp.contains("unfinished upload of \(unsavedKey)"), "\(report.cleanedUp)")
        let resumeFiles = try FileManager.default.contentsOfDirectory(atPath: home.backups.path).filter { $0.hasSuffix(".rtsync-upload.json") }
        #expect(resumeFiles.isEmpty, "\(resumeFiles)")
    }
}

@Suite("leftovers of killed writes in a local-folder bucket")
struct LocalBucketLeftoverTests {
    /// Compaction writes `<user>/snapshot.json` through a temp file in the user's folder itself; one a killed
    /// process left there went unremoved (the kill -9 trials found it: seed 11, compact).
    @Test func sync_removesADeadProcessesTempFileInTheUsersFolder() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket")
        let home = ltHome(dir, "A")
        try ltEditSettings(home) { $0.tier = .free; $0.bucket = "file://" + bucket.path }
        let remote = try ObjectStoreRemote.open("file://" + bucket.path)
        let user = try await InitChain(home: home, remote: remote, bundledAsset: try LTFixture.demoCopy(in: dir), retry: ltShortRetry).run().userId
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/sh")
        ended.arguments = ["-c", "exit 0"]
        try ended.run()
        ended.waitUntilExit()
        var buffer = [CChar](repeating: 0, count: 256)
        let hostName = gethostname(&buffer, buffer.count) == 0 ? String(cString: buffer) : "host"
        let host = String(hostName.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) || $0 == "-" }.prefix(32).map(Character.init))
        let leftover = bucket.appendingPathComponent(user).appendingPathComponent(".rtsync-tmp-\(host.isEmpty ? "host" : host)~\(ended.processIdentifier)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: leftover.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: leftover)

        let report = try await Syncer(home: home, remote: remote, retry: ltShortRetry).sync()
        #expect(report.ok, "\(report.phases)")
        #expect(!FileManager.default.fileExists(atPath: leftover.path), "\(report.cleanedUp)")
    }
}

/// The temp-file name a killed process of this machine would have left (its pid is gone).
func ltOrphanTempName() throws -> String {
    let ended = Process()
    ended.executableURL = URL(fileURLWithPath: "/bin/sh")
    ended.arguments = ["-c", "exit 0"]
    try ended.run()
    ended.waitUntilExit()
    var buffer = [CChar](repeating: 0, count: 256)
    let hostName = gethostname(&buffer, buffer.count) == 0 ? String(cString: buffer) : "host"
    let host = String(hostName.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) || $0 == "-" }.prefix(32).map(Character.init))
    return ".rtsync-tmp-\(host.isEmpty ? "host" : host)~\(ended.processIdentifier)-\(UUID().uuidString)"
}

@Suite("leftovers of killed media runs")
struct MediaLeftoverTests {
    /// A killed `media sync` left its uploads' temp files in a local-folder bucket's recordings/ (subfolders too)
    /// and its manifest's beside the manifest (the kill -9 trials found both, seed 23); the next run removes them,
    /// and a live process's temp file stays.
    @Test func mediaSync_removesAKilledRunsTempFilesInTheBucketAndBesideTheManifest_keepsLiveOnes_andUploadsNoAtomicWriteTemp() async throws {
        let dir = try TemporaryDirectory()
        let bucket = dir.url.appendingPathComponent("bucket"), documents = dir.url.appendingPathComponent("documents")
        let nested = bucket.appendingPathComponent("u1/recordings/trip/day1", isDirectory: true)
        try FileManager.default.createDirectory(at: nested, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: documents.appendingPathComponent("recordings"), withIntermediateDirectories: true)
        try Data("a".utf8).write(to: documents.appendingPathComponent("recordings/a.m4a"))
        let inBucket = nested.appendingPathComponent(try ltOrphanTempName())
        let besideManifest = documents.appendingPathComponent(try ltOrphanTempName())
        // This test process is alive: a temp file it names is a write in progress.
        let live = bucket.appendingPathComponent("u1/recordings").appendingPathComponent(".rtsync-tmp-\(try ltOrphanTempName().dropFirst(".rtsync-tmp-".count).split(separator: "~")[0])~\(getpid())-\(UUID().uuidString)")
        for url in [inBucket, besideManifest, live] { try Data("partial".utf8).write(to: url) }
        // An atomic write in progress beside a recording (an app's, or a resume file's before this version) is no
        // recording: the S3 kill trials saw one uploaded to every device.
        let atomicTemp = documents.appendingPathComponent("recordings/.dat.nosync1A2B.Xy9zQw")
        try Data("half a resume file".utf8).write(to: atomicTemp)

        let r = try await ltRTSync(["media", "sync", "--bucket", "file://" + bucket.path, "--documents", documents.path, "--user", "u1"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: inBucket.path))
        #expect(!FileManager.default.fileExists(atPath: besideManifest.path))
        #expect(FileManager.default.fileExists(atPath: live.path))
        #expect(FileManager.default.fileExists(atPath: bucket.appendingPathComponent("u1/recordings/a.m4a").path))
        #expect(!FileManager.default.fileExists(atPath: bucket.appendingPathComponent("u1/recordings/.dat.nosync1A2B.Xy9zQw").path))
    }
}

@Suite("leftovers of killed snapshot pointer writes")
struct SnapshotPointerLeftoverTests {
    /// Compaction and catch-up pass `<user>/snapshot.json` through a temp file in the system temp folder; the one a
    /// killed process left (found by the S3 kill trials, seed 578, compact) goes at the next clean-up, a live
    /// process's stays.
    @Test func homeDebrisClean_removesADeadProcessesSnapshotPointerTemp_andKeepsALiveOnes() throws {
        let dir = try TemporaryDirectory()
        let home = ltHome(dir, "A")
        try FileManager.default.createDirectory(at: home.support, withIntermediateDirectories: true)
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/sh")
        ended.arguments = ["-c", "exit 0"]
        try ended.run()
        ended.waitUntilExit()
        let temp = FileManager.default.temporaryDirectory
        let dead = temp.appendingPathComponent(HomeDebris.snapshotTempPrefix + "\(ended.processIdentifier)-\(UUID().uuidString).json.partial")
        let live = temp.appendingPathComponent(HomeDebris.snapshotTempPrefix + "\(getpid())-\(UUID().uuidString).json")
        for url in [dead, live] { try Data("{}".utf8).write(to: url) }
        defer { for url in [dead, live] { try? FileManager.default.removeItem(at: url) } }
        // Syncs of tests running beside this one clean the same temp folder, so the file may be gone before this
        // call: check that it is gone, not who removed it.
        let removed = HomeDebris.clean(home)
        #expect(!FileManager.default.fileExists(atPath: dead.path), "\(removed)")
        #expect(FileManager.default.fileExists(atPath: live.path))
    }
}

@Suite("leftovers of killed exports as set operations")
struct AttachedExportLeftoverTests {
    /// An export of 64+ rows writes `.export-<UUID>.tmp` in the outbox (with a journal while it writes); one a killed
    /// export left (found by the kill trials, seeds 5013 S3 and 5173 local) goes at the next clean-up, and files of
    /// other names stay.
    @Test func homeDebrisClean_removesAKilledAttachedExportsFiles_andKeepsOtherFiles() throws {
        let dir = try TemporaryDirectory()
        let home = ltHome(dir, "A")
        try FileManager.default.createDirectory(at: home.outbox, withIntermediateDirectories: true)
        let id = UUID().uuidString.lowercased()
        let leftovers = [".export-\(id).tmp", ".export-\(id).tmp-journal"].map { home.outbox.appendingPathComponent($0) }
        let kept = [".export-not-a-uuid.tmp", "notes.txt", KSUID.generate().string + ".sqlite"].map { home.outbox.appendingPathComponent($0) }
        for url in leftovers + kept { try Data("x".utf8).write(to: url) }
        let removed = HomeDebris.clean(home)
        for url in leftovers { #expect(!FileManager.default.fileExists(atPath: url.path), "\(removed)") }
        for url in kept { #expect(FileManager.default.fileExists(atPath: url.path), "\(url.lastPathComponent)") }
    }
}
