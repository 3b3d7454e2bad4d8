import Foundation
import SyncEngine
import Testing

/// Issue 5/6 through the built binary: `rtsync sync`, `status --json`, `demo on`, tier refusal.
@Suite("rtsync sync/status/demo CLI", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct SyncCLITests {
    /// A home initialized by a first `rtsync sync` on the embedded default (local-folder bucket, bundled asset).
    func syncedHome(_ dir: TemporaryDirectory) async throws -> (home: URL, first: CommandResult) {
        let home = dir.file("home")
        let first = try await ltRTSync(["sync", "--home", home.path])
        return (home, first)
    }

    @Test func sync_freshHome_initsFromBundledAssetExitsZero_secondRunCostsOneRequest() async throws {
        let dir = try TemporaryDirectory()
        let (home, first) = try await syncedHome(dir)

        #expect(first.status == 0, "stderr: \(first.stderr)")
        #expect(first.stdout.contains("init: database from bundled"), "stdout: \(first.stdout)")
        #expect(FileManager.default.fileExists(atPath: home.appendingPathComponent("support/primary.sqlite").path))
        let second = try await ltRTSync(["sync", "--home", home.path])
        #expect(second.status == 0, "stderr: \(second.stderr)")
        #expect(!second.stdout.contains("init:"), "the second run must not re-initialize: \(second.stdout)")
        #expect(second.stdout.contains("done: 1 bucket request(s)"), "stdout: \(second.stdout)")
    }

    @Test func statusJSON_afterSync_hasDatabasePathAndUserId() async throws {
        let dir = try TemporaryDirectory()
        let (home, first) = try await syncedHome(dir)
        try #require(first.status == 0, "stderr: \(first.stderr)")

        let r = try await ltRTSync(["status", "--home", home.path, "--json"])

        #expect(r.status == 0, "stderr: \(r.stderr)")
        let json = try jsonObject(r.stdout)
        #expect(json["database"] as? String == home.appendingPathComponent("support/primary.sqlite").path)
        let user = try RTSyncHome(root: home).loadSettings().userID
        #expect(!user.isEmpty)
        #expect(json["userId"] as? String == user)
    }

    @Test func sync_afterDemoOn_exitsNonZeroWithErrorNamingDemoMode() async throws {
        let dir = try TemporaryDirectory()
        let (home, first) = try await syncedHome(dir)
        try #require(first.status == 0, "stderr: \(first.stderr)")
        let on = try await ltRTSync(["demo", "on", "--home", home.path])
        try #require(on.status == 0, "demo on: \(on.stderr)")

        let r = try await ltRTSync(["sync", "--home", home.path])

        #expect(r.status != 0)
        #expect(r.stderr.hasPrefix("error:"), "stderr: \(r.stderr)")
        #expect(r.stderr.contains("demo mode"), "stderr: \(r.stderr)")
        #expect(r.stderr.contains("hint:"), "stderr: \(r.stderr)")
    }

    @Test func sync_freeTierWithS3Bucket_exitsNonZeroNamingFreeTier() async throws {
        let dir = try TemporaryDirectory()
        let (home, first) = try await syncedHome(dir)
        try #require(first.status == 0, "stderr: \(first.stderr)")
        // Nothing listens on port 9: the refusal must come before any request.
        let env = ["AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"]

        let r = try await ltRTSync(["sync", "--home", home.path, "--bucket", "s3://rtsync-lifetests/cli"], environment: env)

        #expect(r.status != 0)
        #expect(r.stderr.hasPrefix("error:"), "stderr: \(r.stderr)")
        #expect(r.stderr.contains("free tier"), "stderr: \(r.stderr)")
    }
}

@Suite("rtsync sync: media phase")
struct SyncMediaCLITests {
    @Test func syncWithMedia_imageOnDeviceA_arrivesOnDeviceBOfSameUser() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = dir.url.appendingPathComponent("bucket").path
        let first = try await ltRTSync(["sync", "--home", a.path, "--bucket", bucket])
        #expect(first.status == 0, "\(first.stderr)")
        let user = try RTSyncHome(root: a).loadSettings().userID
        let image = a.appendingPathComponent("documents/images/receipt.jpg")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        let bytes = Data((0..<5000).map { UInt8($0 % 251) })
        try bytes.write(to: image)

        let pushed = try await ltRTSync(["sync", "--home", a.path, "--bucket", bucket, "--media"])
        #expect(pushed.status == 0, "\(pushed.stderr)")
        #expect(pushed.stdout.contains("media: media sync: 1 uploaded"), "\(pushed.stdout)")

        let joined = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket, "--user", user])
        #expect(joined.status == 0, "\(joined.stderr)")
        let pulled = try await ltRTSync(["sync", "--home", b.path, "--media"])
        #expect(pulled.status == 0, "\(pulled.stderr)")
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/images/receipt.jpg")) == bytes)

        // Without --media (and syncMedia off in settings) an idle sync stays one LIST.
        let idle = try await ltRTSync(["sync", "--home", b.path])
        #expect(idle.stdout.contains("done: 1 bucket request(s)"), "\(idle.stdout)")
    }
}

@Suite("rtsync sync --media and rtsync media sync: one manifest")
struct SharedMediaManifestCLITests {
    /// Issue #16: `media sync` and `sync --media` on the same home kept separate manifests, so each took the other's
    /// files for never synced (re-downloads, conflicts). Now one manifest per documents folder; an older
    /// `support/media-manifest.json` is merged into it by the next `sync --media`.
    @Test func syncWithMedia_thenMediaSyncOnTheSameHome_isIdle_andAnOlderManifestIsMerged() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.url.appendingPathComponent("A")
        let bucket = dir.url.appendingPathComponent("bucket").path
        #expect(try await ltRTSync(["sync", "--home", home.path, "--bucket", bucket]).status == 0)
        let user = try RTSyncHome(root: home).loadSettings().userID
        let documents = home.appendingPathComponent("documents")
        for (path, size) in [("images/a.jpg", 3000), ("recordings/b.m4a", 7000)] {
            let url = documents.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data((0..<size).map { UInt8($0 % 199) }).write(to: url)
        }
        let pushed = try await ltRTSync(["sync", "--home", home.path, "--media"])
        #expect(pushed.stdout.contains("media: media sync: 2 uploaded"), "\(pushed.stdout) \(pushed.stderr)")

        let media = try await ltRTSync(["media", "sync", "--documents", documents.path, "--user", user, "--bucket", bucket, "--json"])
        #expect(media.status == 0, "\(media.stderr)")
        let report = try jsonObject(media.stdout)
        #expect(report["unchanged"] as? Int == 2)
        #expect((report["downloaded"] as? [String])?.isEmpty == true && (report["uploaded"] as? [String])?.isEmpty == true)
        #expect((report["conflicts"] as? [String])?.isEmpty == true)
        #expect(report["requests"] as? Int == 1)

        // A manifest where an older version kept it: merged, then removed; nothing transferred.
        let shared = documents.appendingPathComponent(".rtsync-media-manifest.json")
        let legacy = home.appendingPathComponent("support/media-manifest.json")
        try FileManager.default.moveItem(at: shared, to: legacy)
        let merged = try await ltRTSync(["sync", "--home", home.path, "--media"])
        #expect(merged.status == 0, "\(merged.stderr)")
        #expect(merged.stdout.contains("media: media sync: 0 uploaded (0 B), 0 downloaded (0 B), 0 deleted, 2 unchanged"), "\(merged.stdout)")
        #expect(!FileManager.default.fileExists(atPath: legacy.path))
        #expect(FileManager.default.fileExists(atPath: shared.path))
    }
}

@Suite("rtsync share and inbound")
struct ShareCLITests {
    @Test func shareWithMedia_uploadsRowsAndTheirImages_andRecipientListsIt() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket").path
        for home in [h1, h2] {
            let r = try await ltRTSync(["sync", "--home", home.path, "--bucket", bucket])
            #expect(r.status == 0, "\(r.stderr)")
        }
        let user1 = try RTSyncHome(root: h1).loadSettings().userID, user2 = try RTSyncHome(root: h2).loadSettings().userID
        // The fixture's evidence rows refer to /images/receipt1.jpg and /images/laptop.png; give user1 one of them.
        let image = h1.appendingPathComponent("documents/images/laptop.png")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("png bytes".utf8).write(to: image)

        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence",
                                         "--where", "local_file IS NOT NULL", "--with-media"])
        #expect(shared.status == 0, "\(shared.stderr)")
        #expect(shared.stdout.contains("shared 2 row(s) of evidence"), "\(shared.stdout)")
        let uploaded = try Data(contentsOf: URL(fileURLWithPath: bucket).appendingPathComponent("\(user2)/images/laptop.png"))
        #expect(uploaded == Data("png bytes".utf8))

        let synced = try await ltRTSync(["sync", "--home", h2.path])
        #expect(synced.status == 0, "\(synced.stderr)")
        let listed = try await ltRTSync(["inbound", "list", "--home", h2.path, "--json"])
        #expect(listed.status == 0)
        let items = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(items.count == 1)
        #expect(items.first?["kind"] as? String == "share" && items.first?["fromUser"] as? String == user1)
        #expect((items.first?["diffId"] as? String)?.count == 27)
    }
}
