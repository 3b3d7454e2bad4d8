import BucketClient
import BucketSync
import Foundation
import SyncEngine
import Testing

/// Issue #21: `share --with-media` to a recipient that encrypts media names. The sender cannot write names there, so
/// the files travel as a parcel (`<recipient>/shared-media/<share>/`, encrypted to the recipient's share key); the
/// recipient's sync takes it into its documents and uploads the files under its own encrypted names.
@Suite("shared media for a name-encrypting recipient", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct SharedMediaParcelCLITests {
    func run(_ args: [String], _ env: [String: String]) async throws -> CommandResult {
        try await ltRTSync(args, environment: env)
    }

    func scenario(bucket: String, environment env: [String: String]) async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2"), h2b = dir.url.appendingPathComponent("u2b")
        for home in [h1, h2] {
            try #require(try await run(["init", "--home", home.path, "--bucket", bucket, "--tier", "premium"], env).status == 0)
            try #require(try await run(["keys", "encrypt", "all,names", "--home", home.path], env).status == 0)
        }
        let user2 = try RTSyncHome(root: h2).loadSettings().userID
        let store = try makeObjectStore(urlString: bucket, environment: env)
        // The recipient has media of its own under encrypted names.
        let own = Data((0..<20_000).map { _ in UInt8.random(in: 0...255) })
        let ownURL = h2.appendingPathComponent("documents/recordings/own-memo.m4a")
        try FileManager.default.createDirectory(at: ownURL.deletingLastPathComponent(), withIntermediateDirectories: true)
        try own.write(to: ownURL)
        try #require(try await run(["sync", "--home", h2.path, "--media"], env).status == 0)

        let image = h1.appendingPathComponent("documents/images/laptop.png")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        let marker = Data("png bytes only user2 may read ".utf8)
        let bytes = marker + Data((0..<70_000).map { _ in UInt8.random(in: 0...255) })
        try bytes.write(to: image)
        let shared = try await run(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL", "--with-media"], env)
        try #require(shared.status == 0, "\(shared.stdout) \(shared.stderr)")
        #expect(shared.stdout.contains("as a parcel"), "\(shared.stdout)")
        let parcel = try await store.listAll(prefix: "\(user2)/shared-media/")
        #expect(parcel.count == 2 && parcel.contains { $0.key.hasSuffix("/manifest") }, "\(parcel.map(\.key))")
        #expect(try await store.listAll(prefix: "\(user2)/images/").isEmpty)

        // The recipient's sync takes the parcel, installs the file and uploads it under its own encrypted name.
        let pulled = try await run(["sync", "--home", h2.path, "--media"], env)
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try Data(contentsOf: h2.appendingPathComponent("documents/images/laptop.png")) == bytes)
        #expect(try await store.listAll(prefix: "\(user2)/shared-media/").isEmpty, "the parcel is deleted once taken")
        let images = try await store.listAll(prefix: "\(user2)/images/")
        #expect(images.count == 1)
        // Its media listing keeps working: a second media sync is idle, and another device of the user pulls both files.
        let again = try await run(["media", "sync", "--home", h2.path, "--json"], env)
        #expect(again.status == 0, "\(again.stdout) \(again.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        #expect((report["uploaded"] as? [Any])?.isEmpty == true && (report["downloaded"] as? [Any])?.isEmpty == true, "\(again.stdout)")
        let keyFile = dir.url.appendingPathComponent("u2.key")
        try #require(try await run(["keys", "export", keyFile.path, "--home", h2.path], env).status == 0)
        let joined = try await run(["init", "--home", h2b.path, "--bucket", bucket, "--tier", "premium", "--user", user2, "--key-file", keyFile.path], env)
        try #require(joined.status == 0, "\(joined.stdout) \(joined.stderr)")
        let second = try await run(["sync", "--home", h2b.path, "--media"], env)
        #expect(second.status == 0, "\(second.stdout) \(second.stderr)")
        #expect(try Data(contentsOf: h2b.appendingPathComponent("documents/images/laptop.png")) == bytes)
        #expect(try Data(contentsOf: h2b.appendingPathComponent("documents/recordings/own-memo.m4a")) == own)

        // Nowhere in the bucket: the file's name or its bytes.
        for info in try await store.listAll(prefix: "") {
            #expect(!info.key.contains("laptop") && !info.key.contains("own-memo"), "plaintext name in \(info.key)")
            let data = try await store.get(key: info.key)
            #expect(data.range(of: marker) == nil && data.range(of: Data("laptop.png".utf8)) == nil, "plaintext in \(info.key)")
        }
    }

    @Test func shareWithMedia_toANameEncryptingRecipient_localFolder_arrivesAsAParcel_noPlaintextInTheBucket() async throws {
        let dir = try TemporaryDirectory()
        try await scenario(bucket: dir.url.appendingPathComponent("bucket").path, environment: [:])
    }

    @Test func shareWithMedia_toANameEncryptingRecipient_loopbackS3_arrivesAsAParcel_noPlaintextInTheBucket() async throws {
        if LTMoto.skipRequested { return }
        let moto = try await LTMoto.shared.value
        try await scenario(bucket: moto.freshBucketURL(), environment: moto.environment)
    }

    /// A sender without encryption of its own still reads the recipient's published share key before sending media,
    /// so the files go as a parcel encrypted to it, not under a plaintext name that would break the recipient's listing.
    @Test func shareWithMedia_fromASenderWithoutEncryption_toANameEncryptingRecipient_arrivesAsAParcel() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket").path
        for home in [h1, h2] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket, "--tier", "premium"]).status == 0)
        }
        try #require(try await ltRTSync(["keys", "encrypt", "all,names", "--home", h2.path]).status == 0)
        try #require(try await ltRTSync(["sync", "--home", h2.path, "--media"]).status == 0)
        let user2 = try RTSyncHome(root: h2).loadSettings().userID
        let store = try makeObjectStore(urlString: bucket, environment: [:])
        let image = h1.appendingPathComponent("documents/images/laptop.png")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        let marker = Data("png bytes only user2 may read ".utf8)
        let bytes = marker + Data((0..<30_000).map { _ in UInt8.random(in: 0...255) })
        try bytes.write(to: image)
        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL", "--with-media"])
        try #require(shared.status == 0, "\(shared.stdout) \(shared.stderr)")
        #expect(shared.stdout.contains("as a parcel"), "\(shared.stdout)")
        #expect(try await store.listAll(prefix: "\(user2)/images/").isEmpty, "nothing under a plaintext name in the recipient's media")
        for info in try await store.listAll(prefix: "\(user2)/shared-media/") {
            #expect(try await store.get(key: info.key).range(of: marker) == nil, "plaintext in \(info.key)")
        }
        let pulled = try await ltRTSync(["sync", "--home", h2.path, "--media"])
        #expect(pulled.status == 0, "\(pulled.stdout) \(pulled.stderr)")
        #expect(try Data(contentsOf: h2.appendingPathComponent("documents/images/laptop.png")) == bytes)
        #expect(try await store.listAll(prefix: "\(user2)/shared-media/").isEmpty, "the parcel is deleted once taken")
        let again = try await ltRTSync(["media", "sync", "--home", h2.path])
        #expect(again.status == 0, "the recipient's media listing keeps working: \(again.stdout) \(again.stderr)")
    }

    /// An app's Syncer with the library's media phase takes a parcel as `rtsync sync --media` does: the file lands in
    /// the documents and goes up under the recipient's own encrypted name, and the parcel is deleted.
    @Test func syncerWithTheLibraryMediaPhase_takesTheParcel_andUploadsItUnderAnEncryptedName() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket").path
        for home in [h1, h2] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket, "--tier", "premium"]).status == 0)
            try #require(try await ltRTSync(["keys", "encrypt", "all,names", "--home", home.path]).status == 0)
        }
        let user2 = try RTSyncHome(root: h2).loadSettings().userID
        let image = h1.appendingPathComponent("documents/images/laptop.png")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        let bytes = Data((0..<40_000).map { _ in UInt8.random(in: 0...255) })
        try bytes.write(to: image)
        let shared = try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL", "--with-media"])
        try #require(shared.status == 0 && shared.stdout.contains("as a parcel"), "\(shared.stdout) \(shared.stderr)")

        let home = RTSyncHome(root: h2)
        let settings = try home.loadSettings()
        let remote = try ObjectStoreRemote.open(bucket, home: home, settings: settings)
        var syncer = Syncer(home: home, remote: remote)
        let reports = ReportList()
        syncer.media = try remote.mediaPhase(home: home, settings: settings, onReport: { reports.append($0) })
        let report = try await syncer.sync()
        #expect(report.ok, "\(report.phases)")
        #expect(try Data(contentsOf: h2.appendingPathComponent("documents/images/laptop.png")) == bytes)
        let store = try makeObjectStore(urlString: bucket, environment: [:])
        #expect(try await store.listAll(prefix: "\(user2)/shared-media/").isEmpty, "the parcel is deleted once taken")
        let images = try await store.listAll(prefix: "\(user2)/images/")
        #expect(images.count == 1 && !images[0].key.contains("laptop"), "\(images.map(\.key))")
        #expect(reports.all.count == 1 && reports.all.first?.uploaded.count == 1)
    }

    /// A parcel file that does not match its manifest (or does not open) is refused naming the object; nothing is
    /// installed and the parcel stays for the next try.
    @Test func tamperedParcel_isRefusedNamingTheObject_andNothingIsInstalled() async throws {
        let dir = try TemporaryDirectory()
        let h1 = dir.url.appendingPathComponent("u1"), h2 = dir.url.appendingPathComponent("u2")
        let bucket = dir.url.appendingPathComponent("bucket")
        for home in [h1, h2] {
            try #require(try await ltRTSync(["init", "--home", home.path, "--bucket", bucket.path, "--tier", "premium"]).status == 0)
            try #require(try await ltRTSync(["keys", "encrypt", "all,names", "--home", home.path]).status == 0)
        }
        let user2 = try RTSyncHome(root: h2).loadSettings().userID
        let image = h1.appendingPathComponent("documents/images/laptop.png")
        try FileManager.default.createDirectory(at: image.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data((0..<5_000).map { _ in UInt8.random(in: 0...255) }).write(to: image)
        try #require(try await ltRTSync(["share", "--home", h1.path, "--to", user2, "--table", "evidence", "--where", "local_file IS NOT NULL", "--with-media"]).status == 0)
        let folder = try #require(try FileManager.default.contentsOfDirectory(atPath: bucket.appendingPathComponent("\(user2)/shared-media").path).first)
        let part = bucket.appendingPathComponent("\(user2)/shared-media/\(folder)/0")
        var data = try Data(contentsOf: part)
        data[data.count - 20] ^= 1
        try data.write(to: part)
        let refused = try await ltRTSync(["sync", "--home", h2.path, "--media"])
        #expect(refused.status == 1)
        #expect((refused.stdout + refused.stderr).contains("\(user2)/shared-media/\(folder)/0"), "\(refused.stdout) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: h2.appendingPathComponent("documents/images/laptop.png").path))
        #expect(FileManager.default.fileExists(atPath: part.path))
    }
}

/// The media reports a media phase handed over, from its task.
private final class ReportList: @unchecked Sendable {
    private let lock = NSLock()
    private var reports: [MediaSyncReport] = []
    func append(_ r: MediaSyncReport) { lock.withLock { reports.append(r) } }
    var all: [MediaSyncReport] { lock.withLock { reports } }
}
