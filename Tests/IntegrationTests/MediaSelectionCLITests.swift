import BucketClient
import BucketSync
import Foundation
import SyncEngine
import Testing

/// Issue #16: `mediaMode: "selective"` syncs the `mediaSelection` of settings.json, and never touches files outside it.
@Suite("media selection and deletions from settings.json")
struct MediaSelectionCLITests {
    func write(_ root: URL, _ path: String, _ text: String) throws {
        let url = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url)
    }

    func read(_ root: URL, _ path: String) -> String? {
        (try? Data(contentsOf: root.appendingPathComponent(path))).map { String(decoding: $0, as: UTF8.self) }
    }

    @Test func settingsSelection_becomesOptions_andUnknownKindOrModeIsRefusedNamingIt() throws {
        var settings = RTSyncSettings()
        settings.mediaMode = "selective"
        #expect(try settings.mediaSyncOptions().select.isEmpty)  // nothing selected: nothing syncs
        settings.mediaSelection = MediaSelection(kinds: ["images"], include: ["images/2025/*"])
        let options = try settings.mediaSyncOptions()
        #expect(options.kinds == [.images])
        #expect(options.accepts("images/2025/a.jpg"))
        #expect(!options.accepts("images/2024/a.jpg"))
        settings.mediaSelection = MediaSelection(kinds: ["videos"])
        #expect(throws: LifecycleError.self) { try settings.mediaSyncOptions() }
        settings.mediaMode = "some"
        #expect(throws: LifecycleError.invalidSettings(file: "settings.json", reason: "mediaMode: unknown mode \"some\" (use \"all\" or \"selective\")")) {
            try settings.mediaSyncOptions()
        }
        // The JSON shape documented in README.
        let json = #"{"mediaMode": "selective", "mediaDeletes": true, "mediaTrashDays": 7, "mediaSelection": {"kinds": ["images"], "paths": ["images/2025"], "exclude": ["*.tmp"]}}"#
        let decoded = try JSONDecoder().decode(RTSyncSettings.self, from: Data(json.utf8))
        #expect(decoded.mediaSelection == MediaSelection(kinds: ["images"], paths: ["images/2025"], exclude: ["*.tmp"]))
        let decodedOptions = try decoded.mediaSyncOptions()
        #expect(decodedOptions.delete && decodedOptions.trashDays == 7)
        #expect(decodedOptions.accepts("images/2025/a.jpg") && !decodedOptions.accepts("images/2025/a.tmp"))
    }

    /// A device that synced everything, then narrowed its selection and removed the rest locally to save space,
    /// must not delete (or trash) those files in the bucket, nor conflict-copy a different local file outside it.
    @Test func selectiveDevice_withDeletes_neverDeletesOrConflictCopiesOutsideItsSelection() async throws {
        let dir = try TemporaryDirectory()
        let store = try LocalFolderStore(root: dir.file("bucket"))
        let a = dir.file("A"), b = dir.file("B")
        func run(_ documents: URL, _ options: MediaSyncOptions) async throws -> MediaSyncReport {
            try await MediaSync(store: store, documents: documents, user: "u", manifestURL: MediaManifest.defaultURL(documents: documents)).run(options)
        }
        try write(a, "images/2025/in.jpg", "in")
        try write(a, "images/2024/out.jpg", "out from a")
        try write(a, "recordings/r.m4a", "rec")
        _ = try await run(a, MediaSyncOptions())
        _ = try await run(b, MediaSyncOptions())
        #expect(read(b, "images/2024/out.jpg") == "out from a")

        var settings = RTSyncSettings()
        settings.mediaMode = "selective"
        settings.mediaDeletes = true
        settings.mediaSelection = MediaSelection(kinds: ["images"], paths: ["images/2025"])
        let selective = try settings.mediaSyncOptions()
        try FileManager.default.removeItem(at: b.appendingPathComponent("images/2024"))
        try FileManager.default.removeItem(at: b.appendingPathComponent("recordings"))
        try write(b, "images/2023/mine.jpg", "never selected")
        try await Task.sleep(nanoseconds: 10_000_000)
        try write(a, "images/2025/in.jpg", "in v2")
        try write(a, "images/2024/out.jpg", "out v2")
        _ = try await run(a, MediaSyncOptions())

        let report = try await run(b, selective)
        #expect(report.downloaded == ["images/2025/in.jpg"])
        #expect(report.deletedRemote.isEmpty && report.deletedLocal.isEmpty && report.uploaded.isEmpty)
        #expect(report.conflicts.isEmpty && report.errors.isEmpty)
        #expect(read(b, "images/2025/in.jpg") == "in v2")
        #expect(read(b, "images/2024/out.jpg") == nil)
        #expect(try await store.get(key: "u/images/2024/out.jpg") == Data("out v2".utf8))
        #expect(try await store.get(key: "u/recordings/r.m4a") == Data("rec".utf8))
        #expect(try await store.exists(key: "u/images/2023/mine.jpg") == false)
        #expect(try await store.listAll(prefix: "u/trash/").isEmpty)
    }

    func initHome(_ home: URL, bucket: String, user: String? = nil) async throws -> String {
        let r = user.map { ["init", "--home", home.path, "--bucket", bucket, "--user", $0] } ?? ["sync", "--home", home.path, "--bucket", bucket]
        let result = try await ltRTSync(r)
        try #require(result.status == 0, "\(result.stderr)")
        return try RTSyncHome(root: home).loadSettings().userID
    }

    @Test func syncWithMedia_selectiveSettings_pullOnlyTheSelection_andMediaSyncWithHomeHonoursIt() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.file("A"), b = dir.file("B"), bucket = dir.file("bucket").path
        let user = try await initHome(a, bucket: bucket)
        for path in ["images/2025/in.jpg", "images/2024/out.jpg", "recordings/r.m4a"] {
            try write(a.appendingPathComponent("documents"), path, path)
        }
        let pushed = try await ltRTSync(["sync", "--home", a.path, "--media"])
        #expect(pushed.status == 0, "\(pushed.stderr)")
        _ = try await initHome(b, bucket: bucket, user: user)
        let bHome = RTSyncHome(root: b)
        var settings = try bHome.loadSettings()
        settings.mediaMode = "selective"
        settings.mediaSelection = MediaSelection(kinds: ["images"], include: ["images/2025/*"])
        try bHome.saveSettings(settings)

        let pulled = try await ltRTSync(["sync", "--home", b.path, "--media"])
        #expect(pulled.status == 0, "\(pulled.stderr)")
        #expect(pulled.stdout.contains("media: media sync: 0 uploaded (0 B), 1 downloaded"), "\(pulled.stdout)")
        #expect(read(b, "documents/images/2025/in.jpg") == "images/2025/in.jpg")
        #expect(read(b, "documents/images/2024/out.jpg") == nil)
        #expect(read(b, "documents/recordings/r.m4a") == nil)

        // `media sync --home` reads the same selection: the new 2025 image only.
        try write(a.appendingPathComponent("documents"), "images/2025/second.jpg", "second")
        try write(a.appendingPathComponent("documents"), "images/2024/other.jpg", "other")
        #expect(try await ltRTSync(["sync", "--home", a.path, "--media"]).status == 0)
        let media = try await ltRTSync(["media", "sync", "--home", b.path, "--json"])
        #expect(media.status == 0, "\(media.stderr)")
        #expect(try jsonObject(media.stdout)["downloaded"] as? [String] == ["images/2025/second.jpg"])

        // Selective with no selection syncs nothing, and says what to set.
        settings.mediaSelection = nil
        try bHome.saveSettings(settings)
        let none = try await ltRTSync(["sync", "--home", b.path, "--media"])
        #expect(none.stdout.contains("selective mode with nothing selected: set mediaSelection in settings.json"), "\(none.stdout)")
    }

    @Test func syncDelete_deletionReachesTheOtherDevice_throughTheTrash_andMediaRestoreBringsItBack() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.file("A"), b = dir.file("B"), bucket = dir.file("bucket").path
        let user = try await initHome(a, bucket: bucket)
        _ = try await initHome(b, bucket: bucket, user: user)
        try write(a.appendingPathComponent("documents"), "images/receipt.jpg", "receipt")
        #expect(try await ltRTSync(["sync", "--home", a.path, "--media"]).status == 0)
        #expect(try await ltRTSync(["sync", "--home", b.path, "--media"]).status == 0)
        #expect(read(b, "documents/images/receipt.jpg") == "receipt")

        // Without deletions on, a deleted file comes back (the documented rule).
        try FileManager.default.removeItem(at: a.appendingPathComponent("documents/images/receipt.jpg"))
        #expect(try await ltRTSync(["sync", "--home", a.path, "--media"]).status == 0)
        #expect(read(a, "documents/images/receipt.jpg") == "receipt")

        try FileManager.default.removeItem(at: a.appendingPathComponent("documents/images/receipt.jpg"))
        let deleted = try await ltRTSync(["sync", "--home", a.path, "--delete"])
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(deleted.stdout.contains("1 moved to the bucket's trash"), "\(deleted.stdout)")
        #expect(!FileManager.default.fileExists(atPath: "\(bucket)/\(user)/images/receipt.jpg"))

        // mediaDeletes in settings does the same as --delete on the other device.
        let bHome = RTSyncHome(root: b)
        var settings = try bHome.loadSettings()
        settings.mediaDeletes = true
        try bHome.saveSettings(settings)
        let propagated = try await ltRTSync(["sync", "--home", b.path, "--media"])
        #expect(propagated.status == 0, "\(propagated.stderr)")
        #expect(read(b, "documents/images/receipt.jpg") == nil)

        let listed = try await ltRTSync(["media", "restore", "--home", b.path, "--list"])
        #expect(listed.stdout.contains("images/receipt.jpg"), "\(listed.stdout)")
        let restored = try await ltRTSync(["media", "restore", "--home", b.path, "images/receipt.jpg"])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try await ltRTSync(["sync", "--home", b.path, "--media"]).status == 0)
        #expect(read(b, "documents/images/receipt.jpg") == "receipt")

        let missing = try await ltRTSync(["media", "restore", "--home", b.path, "images/never.jpg"])
        #expect(missing.status != 0)
        #expect(missing.stderr.hasPrefix("error: nothing deleted under this path in the trash"), "\(missing.stderr)")
        #expect(missing.stderr.contains("hint:"), "\(missing.stderr)")
    }

    @Test func syncWithMedia_aFileThatFails_isNamedInTheMediaPhaseError() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.file("A"), bucket = dir.file("bucket").path
        let user = try await initHome(a, bucket: bucket)
        // A bucket object whose local path is a folder: its download must fail.
        try write(URL(fileURLWithPath: bucket), "\(user)/images/blocker", "b")
        try write(a.appendingPathComponent("documents"), "images/blocker/inner.jpg", "i")

        let r = try await ltRTSync(["sync", "--home", a.path, "--media"])
        #expect(r.status != 0)
        #expect(r.stdout.contains("FAIL media"), "\(r.stdout)")
        #expect(r.stdout.contains("(images/blocker)"), "\(r.stdout)")
    }

    @Test func mediaSyncWithHome_mergesAnOlderManifestFromSupport_andIsIdle() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.file("A"), bucket = dir.file("bucket").path
        _ = try await initHome(a, bucket: bucket)
        try write(a.appendingPathComponent("documents"), "images/a.jpg", "a")
        #expect(try await ltRTSync(["sync", "--home", a.path, "--media"]).status == 0)
        let shared = a.appendingPathComponent("documents/.rtsync-media-manifest.json")
        let legacy = a.appendingPathComponent("support/media-manifest.json")
        try FileManager.default.moveItem(at: shared, to: legacy)

        let r = try await ltRTSync(["media", "sync", "--home", a.path, "--json"])
        #expect(r.status == 0, "\(r.stderr)")
        let report = try jsonObject(r.stdout)
        #expect(report["unchanged"] as? Int == 1)
        #expect((report["conflicts"] as? [String])?.isEmpty == true)
        #expect(!FileManager.default.fileExists(atPath: legacy.path))
    }
}
