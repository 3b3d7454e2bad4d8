import Foundation
import Testing
@testable import BucketClient

@Suite struct MediaSyncTests {
    struct Fixture {
        let root: URL
        let documents: URL
        let store: any ObjectStore
        let manifest: URL
        func sync(_ configure: (inout MediaSyncOptions) -> Void = { _ in }) async throws -> MediaSyncReport {
            var options = MediaSyncOptions()
            configure(&options)
            return try await MediaSync(store: store, documents: documents, user: "alice", manifestURL: manifest).run(options)
        }
        func write(_ path: String, _ text: String) throws {
            let url = documents.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: url)
        }
        func read(_ path: String) -> String? {
            (try? Data(contentsOf: documents.appendingPathComponent(path))).map { String(decoding: $0, as: UTF8.self) }
        }
    }

    func makeFixture(store: (any ObjectStore)? = nil) throws -> Fixture {
        let root = try makeTemporaryFolder()
        return Fixture(root: root, documents: root.appendingPathComponent("Documents"),
                       store: try store ?? LocalFolderStore(root: root.appendingPathComponent("bucket")),
                       manifest: root.appendingPathComponent("media-manifest.json"))
    }

    @Test func push_thenUnchangedResync_costsOneListForBothFoldersAndNoTransfers() async throws {
        let f = try makeFixture()
        try f.write("recordings/a.m4a", "aaa")
        try f.write("recordings/2024/b.m4a", "bbbb")
        try f.write("images/c.jpg", "cc")
        let first = try await f.sync { $0.direction = .push }
        #expect(first.uploaded == ["images/c.jpg", "recordings/2024/b.m4a", "recordings/a.m4a"])
        #expect(first.bytesUploaded == 9)
        #expect(try await f.store.get(key: "alice/recordings/2024/b.m4a") == Data("bbbb".utf8))
        let again = try await f.sync()
        #expect(again.uploaded.isEmpty && again.downloaded.isEmpty)
        #expect(again.unchanged == 3)
        #expect(again.requests == 1)  // one LIST for images/ and recordings/ together
        let recordingsOnly = try await f.sync { $0.kinds = [.recordings] }
        #expect(recordingsOnly.requests == 1)
    }

    /// A run that finds nothing to do does not rewrite the manifest (no temporary file, fsync and rename).
    @Test func idleSync_leavesTheManifestFileAsItWas() async throws {
        let f = try makeFixture()
        try f.write("images/c.jpg", "cc")
        _ = try await f.sync()
        let before = try #require(FileStat.of(f.manifest.path))
        let again = try await f.sync()
        #expect(again.unchanged == 1 && again.uploaded.isEmpty && again.downloaded.isEmpty)
        let after = try #require(FileStat.of(f.manifest.path))
        #expect(after.isSameFile(as: before) && after.mtimeNanoseconds == before.mtimeNanoseconds)
    }

    /// A pulled file installed but not yet recorded when a run is killed (the manifest is saved every 0.5 s or
    /// 16 MiB, not after each file) is recognized by the next run from its plain-MD5 ETag: nothing is fetched again.
    @Test func pulledButUnrecordedFiles_areRecognizedByTheNextRun_withoutDownloadingAgain() async throws {
        guard !MotoServer.skipRequested else { return }
        let store = try await MotoServer.anonymous.value.store(prefix: "t-\(UUID().uuidString.prefix(8))/")
        for i in 0..<20 { try await store.put(key: "alice/images/\(i).jpg", data: randomBytes(10_000 + i)) }
        let f = try makeFixture(store: store)
        let pulled = try await f.sync { $0.direction = .pull }
        #expect(pulled.downloaded.count == 20)
        try FileManager.default.removeItem(at: f.manifest)  // as if killed before any save recorded them
        store.requestCounter.reset()
        let again = try await f.sync { $0.direction = .pull }
        #expect(again.downloaded.isEmpty && again.unchanged == 20 && again.errors.isEmpty)
        #expect(store.requestCounter.count("GetObject") == 0)
        #expect(try MediaManifest.load(from: f.manifest).files.count == 20)
    }

    /// Pulled files are not fsynced one by one: each is made durable at the next manifest save (one `syncfs` of the
    /// filesystem on Linux), and no saved manifest ever records a file before that: checked against the manifest on
    /// disk before every download of the run, and at its end.
    @Test func pulledFiles_areFlushedAtManifestSaves_notOneByOne_andRecordedOnlyOnceDurable() async throws {
        guard !MotoServer.skipRequested else { return }
        let base = try await MotoServer.anonymous.value.store(prefix: "t-\(UUID().uuidString.prefix(8))/")
        for i in 0..<40 { try await base.put(key: "alice/images/\(i).jpg", data: randomBytes(20_000 + i)) }
        let plain = try makeFixture(store: base)
        let store = DurabilityObservingStore(base: base, manifest: plain.manifest, documents: plain.documents)
        let f = Fixture(root: plain.root, documents: plain.documents, store: store, manifest: plain.manifest)
        let pulled = try await f.sync { $0.direction = .pull }
        #expect(pulled.downloaded.count == 40 && pulled.errors.isEmpty)
        #expect(store.violations.total == 0, "recorded before durable: \(store.violations.snapshot.keys.sorted())")
        let recorded = try MediaManifest.load(from: f.manifest).files.keys.map(\.string)
        #expect(recorded.count == 40)
        for path in recorded {
            let url = f.documents.appendingPathComponent(path).path
            #expect(LocalFiles.flushes.count("durable \(url)") == 1, "\(path)")
            #expect(LocalFiles.flushes.count("fsync \(url)") == 0, "\(path) was fsynced on its own")
        }
    }

    /// `été` in NFC (as Linux and Windows usually write it) and in NFD (as macOS writes it): Swift's `String ==` calls
    /// them equal, the filesystem and the bucket do not. Both files must be uploaded, pulled and then left alone.
    static let nfc = "images/\u{E9}t\u{E9}.txt"
    static let nfd = "images/e\u{301}te\u{301}.txt"

    func bytes(_ paths: [String]) -> Set<[UInt8]> { Set(paths.map { Array($0.utf8) }) }

    @Test(arguments: FolderListingTests.ListingBackend.allCases)
    func namesDifferingOnlyInNormalization_areTwoFiles_bothUploadedAndPulled_thenIdle(_ backend: FolderListingTests.ListingBackend) async throws {
        #expect(Self.nfc == Self.nfd)  // what Swift says; the bytes differ
        guard let store = try await backend.makeStore() else { return }
        let f = try makeFixture(store: store)
        try f.write(Self.nfc, "composed")
        try f.write(Self.nfd, "decomposed")
        let names = try FileManager.default.contentsOfDirectory(atPath: f.documents.appendingPathComponent("images").path)
        try #require(names.count == 2, "this filesystem normalizes names; the test needs one that keeps them apart")
        let pushed = try await f.sync()
        #expect(bytes(pushed.uploaded) == bytes([Self.nfc, Self.nfd]))
        #expect(pushed.errors.isEmpty)
        #expect(try await f.store.get(key: "alice/" + Self.nfc) == Data("composed".utf8))
        #expect(try await f.store.get(key: "alice/" + Self.nfd) == Data("decomposed".utf8))
        let idle = try await f.sync()
        #expect(idle.uploaded.isEmpty && idle.downloaded.isEmpty && idle.errors.isEmpty)
        #expect(idle.unchanged == 2)
        #expect(try MediaManifest.load(from: f.manifest).files.count == 2)

        // Another device pulls both, each with its own content, then has nothing to do.
        let other = Fixture(root: f.root, documents: f.root.appendingPathComponent("Other"), store: f.store,
                            manifest: f.root.appendingPathComponent("other-manifest.json"))
        let pulled = try await other.sync()
        #expect(bytes(pulled.downloaded) == bytes([Self.nfc, Self.nfd]))
        let nfcURL = other.documents.appendingPathComponent("images").appendingPathComponent(String(Self.nfc.dropFirst(7)))
        let nfdURL = other.documents.appendingPathComponent("images").appendingPathComponent(String(Self.nfd.dropFirst(7)))
        #expect(try Data(contentsOf: nfcURL) == Data("composed".utf8))
        #expect(try Data(contentsOf: nfdURL) == Data("decomposed".utf8))
        let otherIdle = try await other.sync()
        #expect(otherIdle.uploaded.isEmpty && otherIdle.downloaded.isEmpty && otherIdle.errors.isEmpty)
        #expect(otherIdle.unchanged == 2)

        // An edit of one of them travels alone.
        try await Task.sleep(nanoseconds: 10_000_000)
        try f.write(Self.nfd, "decomposed v2")
        let edited = try await f.sync()
        #expect(bytes(edited.uploaded) == bytes([Self.nfd]))
        #expect(try await f.store.get(key: "alice/" + Self.nfc) == Data("composed".utf8))
        let pulledEdit = try await other.sync()
        #expect(bytes(pulledEdit.downloaded) == bytes([Self.nfd]))
        #expect(try Data(contentsOf: nfcURL) == Data("composed".utf8))
        #expect(try Data(contentsOf: nfdURL) == Data("decomposed v2".utf8))
    }

    @Test func manifest_keepsEntriesWhoseNamesDifferOnlyInNormalization() throws {
        var manifest = MediaManifest()
        manifest[Self.nfc] = .init(size: 1, mtimeNanoseconds: 1, sha256: "a", etag: "e1")
        manifest[Self.nfd] = .init(size: 2, mtimeNanoseconds: 2, sha256: "b", etag: "e2")
        #expect(manifest.files.count == 2)
        let url = try makeTemporaryFolder().appendingPathComponent("m.json")
        try manifest.save(to: url)
        let loaded = try MediaManifest.load(from: url)
        #expect(loaded == manifest)
        #expect(loaded[Self.nfc]?.etag == "e1")
        #expect(loaded[Self.nfd]?.etag == "e2")
        // A version 1 manifest (an object keyed by path) still loads.
        try Data(#"{"version":1,"files":{"images/a.jpg":{"size":3,"mtimeNanoseconds":4,"sha256":"s","etag":"t"}}}"#.utf8).write(to: url)
        #expect(try MediaManifest.load(from: url)["images/a.jpg"]?.size == 3)
    }

    @Test func pull_intoEmptyDocuments_restoresFilesThenIsIdle() async throws {
        let f = try makeFixture()
        try f.write("recordings/a.m4a", "hello")
        _ = try await f.sync { $0.direction = .push }
        let other = Fixture(root: f.root, documents: f.root.appendingPathComponent("Other"), store: f.store,
                            manifest: f.root.appendingPathComponent("other-manifest.json"))
        let pulled = try await other.sync { $0.direction = .pull }
        #expect(pulled.downloaded == ["recordings/a.m4a"])
        #expect(other.read("recordings/a.m4a") == "hello")
        let idle = try await other.sync { $0.direction = .pull }
        #expect(idle.downloaded.isEmpty && idle.unchanged == 1 && idle.requests == 1)
    }

    @Test func localEdit_isUploaded_remoteEdit_isDownloaded() async throws {
        let f = try makeFixture()
        try f.write("images/x.jpg", "v1")
        _ = try await f.sync()
        try await Task.sleep(nanoseconds: 10_000_000)
        try f.write("images/x.jpg", "v2-local")
        let pushed = try await f.sync()
        #expect(pushed.uploaded == ["images/x.jpg"])
        #expect(try await f.store.get(key: "alice/images/x.jpg") == Data("v2-local".utf8))
        try await Task.sleep(nanoseconds: 10_000_000)
        try await f.store.put(key: "alice/images/x.jpg", data: Data("v3-remote".utf8))
        let pulled = try await f.sync()
        #expect(pulled.downloaded == ["images/x.jpg"])
        #expect(f.read("images/x.jpg") == "v3-remote")
    }

    // MARK: - Concurrent edits (issue #16, defect 5)

    func otherDevice(of f: Fixture, _ name: String = "Other") -> Fixture {
        Fixture(root: f.root, documents: f.root.appendingPathComponent(name), store: f.store,
                manifest: f.root.appendingPathComponent("\(name)-manifest.json"))
    }

    func files(in f: Fixture, _ folder: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: f.documents.appendingPathComponent(folder).path).sorted()
    }

    @Test func concurrentEdit_localNewer_keepsTheBucketVersionAsAConflictCopy_hereAndInTheBucket() async throws {
        let a = try makeFixture()
        let b = otherDevice(of: a)
        try a.write("images/x.jpg", "v1")
        _ = try await a.sync { $0.device = "devA" }
        _ = try await b.sync { $0.device = "devB" }
        try a.write("images/x.jpg", "v2 from A")
        let pushedA = try await a.sync { $0.device = "devA" }
        #expect(pushedA.uploaded == ["images/x.jpg"])
        try await Task.sleep(nanoseconds: 20_000_000)
        try b.write("images/x.jpg", "v2 from B, later")

        let report = try await b.sync { $0.device = "devB" }
        #expect(report.errors.isEmpty)
        #expect(report.conflicts == ["images/x.jpg"])
        let conflict = try #require(report.conflictCopies.first)
        #expect(conflict.loser == .remote && conflict.device == "devB" && conflict.keptLocally && conflict.keptInBucket)
        #expect(conflict.copy.hasPrefix("images/x (conflict devB ") && conflict.copy.hasSuffix("Z).jpg"))
        // B's newer edit won; A's is kept beside it, here and in the bucket.
        #expect(b.read("images/x.jpg") == "v2 from B, later")
        #expect(b.read(conflict.copy) == "v2 from A")
        #expect(try await a.store.get(key: "alice/images/x.jpg") == Data("v2 from B, later".utf8))
        #expect(try await a.store.get(key: "alice/" + conflict.copy) == Data("v2 from A".utf8))
        #expect(try MediaManifest.load(from: b.manifest).conflicts == [conflict])

        // B is then idle; A gets the winner and the copy: both versions survive on both devices.
        let idle = try await b.sync { $0.device = "devB" }
        #expect(idle.uploaded.isEmpty && idle.downloaded.isEmpty && idle.conflicts.isEmpty && idle.unchanged == 2)
        let pulledA = try await a.sync { $0.device = "devA" }
        #expect(pulledA.conflicts.isEmpty)
        #expect(Set(pulledA.downloaded) == ["images/x.jpg", conflict.copy])
        #expect(a.read("images/x.jpg") == "v2 from B, later")
        #expect(a.read(conflict.copy) == "v2 from A")
    }

    @Test func concurrentEdit_bucketNewer_keepsTheLocalVersionAsAConflictCopy_andUploadsIt() async throws {
        let a = try makeFixture()
        let b = otherDevice(of: a)
        try a.write("recordings/r.m4a", "v1")
        _ = try await a.sync { $0.device = "devA" }
        _ = try await b.sync { $0.device = "devB" }
        try b.write("recordings/r.m4a", "v2 from B, earlier")
        try await Task.sleep(nanoseconds: 20_000_000)
        try a.write("recordings/r.m4a", "v2 from A, later")
        _ = try await a.sync { $0.device = "devA" }

        let report = try await b.sync { $0.device = "devB" }
        #expect(report.errors.isEmpty)
        let conflict = try #require(report.conflictCopies.first)
        #expect(conflict.loser == .local && conflict.keptLocally && conflict.keptInBucket)
        #expect(conflict.copy.hasPrefix("recordings/r (conflict devB ") && conflict.copy.hasSuffix(").m4a"))
        #expect(b.read("recordings/r.m4a") == "v2 from A, later")
        #expect(b.read(conflict.copy) == "v2 from B, earlier")
        #expect(try await a.store.get(key: "alice/" + conflict.copy) == Data("v2 from B, earlier".utf8))
        #expect(try files(in: b, "recordings").count == 2)
        let idle = try await b.sync { $0.device = "devB" }
        #expect(idle.uploaded.isEmpty && idle.downloaded.isEmpty && idle.unchanged == 2)
    }

    @Test func concurrentEdit_pullOnly_keepsTheLocalVersionLocally_andUploadsNothing() async throws {
        let a = try makeFixture()
        let b = otherDevice(of: a)
        try a.write("images/p.png", "v1")
        _ = try await a.sync()
        _ = try await b.sync()
        try b.write("images/p.png", "local edit")
        try a.write("images/p.png", "remote edit")
        _ = try await a.sync()
        let report = try await b.sync { $0.direction = .pull; $0.device = "devB" }
        let conflict = try #require(report.conflictCopies.first)
        #expect(conflict.loser == .local && conflict.keptLocally && !conflict.keptInBucket)
        #expect(b.read("images/p.png") == "remote edit")
        #expect(b.read(conflict.copy) == "local edit")
        #expect(try await a.store.listAll(prefix: "alice/images/").count == 1)
    }

    @Test func bothSidesChangedToTheSameBytes_isNoConflict() async throws {
        let a = try makeFixture()
        let b = otherDevice(of: a)
        try a.write("images/s.jpg", "v1")
        _ = try await a.sync()
        _ = try await b.sync()
        try a.write("images/s.jpg", "same new bytes")
        try b.write("images/s.jpg", "same new bytes")
        _ = try await a.sync()
        let report = try await b.sync()
        #expect(report.conflicts.isEmpty && report.conflictCopies.isEmpty && report.errors.isEmpty)
        #expect(report.uploaded.isEmpty && report.downloaded.isEmpty)
        #expect(try files(in: b, "images") == ["s.jpg"])
        let idle = try await b.sync()
        #expect(idle.unchanged == 1 && idle.downloaded.isEmpty)
    }

    @Test func pullOnly_remoteReuploadedWithTheSameBytes_isNoConflict_andIsNotFetchedAgain() async throws {
        let f = try makeFixture()
        try f.write("images/r.jpg", "v1")
        _ = try await f.sync()
        try f.write("images/r.jpg", "local edit")
        try await Task.sleep(nanoseconds: 20_000_000)
        try await f.store.put(key: "alice/images/r.jpg", data: Data("v1".utf8))  // same bytes, new ETag
        let pulled = try await f.sync { $0.direction = .pull }
        #expect(pulled.conflicts.isEmpty && pulled.downloaded.isEmpty && pulled.errors.isEmpty)
        #expect(f.read("images/r.jpg") == "local edit")
        let again = try await f.sync { $0.direction = .pull }
        #expect(again.requests == 1 && again.conflicts.isEmpty)
        let both = try await f.sync()
        #expect(both.uploaded == ["images/r.jpg"] && both.conflicts.isEmpty)
        #expect(try await f.store.get(key: "alice/images/r.jpg") == Data("local edit".utf8))
    }

    /// The bucket's version was kept as a copy, then the upload of the winner failed: the next run uploads the winner
    /// and makes no second copy.
    @Test func conflict_whoseWinnerFailedToUpload_isFinishedByTheNextRun_withoutASecondCopy() async throws {
        let a = try makeFixture()
        let b = otherDevice(of: a)
        try a.write("images/x.jpg", "v1")
        _ = try await a.sync()
        _ = try await b.sync()
        try a.write("images/x.jpg", "edit on A")
        _ = try await a.sync()
        try await Task.sleep(nanoseconds: 20_000_000)
        try b.write("images/x.jpg", "edit on B, later")
        let failing = FailingPutStore(base: b.store, failingKey: "alice/images/x.jpg")
        let broken = Fixture(root: b.root, documents: b.documents, store: failing, manifest: b.manifest)
        let first = try await broken.sync { $0.device = "devB" }
        #expect(first.errors.map(\.path) == ["images/x.jpg"])
        #expect(first.conflictCopies.count == 1)
        let second = try await b.sync { $0.device = "devB" }
        #expect(second.errors.isEmpty && second.conflicts.isEmpty)
        #expect(second.uploaded == ["images/x.jpg"])
        #expect(try files(in: b, "images").count == 2)
        #expect(try await a.store.listAll(prefix: "alice/images/").count == 2)
        #expect(try await a.store.get(key: "alice/images/x.jpg") == Data("edit on B, later".utf8))
    }

    @Test func conflictCopyName_keepsTheExtension_andNamesDeviceAndUTCTime() {
        let date = Date(timeIntervalSince1970: 1_795_000_000)  // 2026-11-18 11:06:40 UTC
        #expect(MediaConflict.copyPath(of: "images/2024/a.b.jpg", device: "site 7/x", at: date)
                == "images/2024/a.b (conflict site7x 2026-11-18T110640Z).jpg")
        #expect(MediaConflict.copyPath(of: "recordings/.hidden", device: "d", at: date, attempt: 2)
                == "recordings/.hidden (conflict d 2026-11-18T110640Z 2)")
        // A long name is shortened so the copy's name still fits in 255 bytes; the extension stays.
        let long = MediaConflict.copyPath(of: "images/" + String(repeating: "é", count: 120) + ".jpeg", device: "d", at: date)
        #expect(long.split(separator: "/").last!.utf8.count <= 255)
        #expect(long.hasSuffix(" (conflict d 2026-11-18T110640Z).jpeg"))
    }

    // MARK: - Crashes (issue #16, defect 8)

    /// While the second upload is under way, the manifest on disk already records the first: a crash then makes
    /// the next run redo nothing that was finished.
    @Test func manifest_isSavedAsEachTransferFinishes_notOnlyAtTheEndOfTheRun() async throws {
        let base = try makeFixture()
        let observing = ManifestObservingStore(base: base.store, manifest: base.manifest, watchedKey: "alice/recordings/b.m4a")
        let f = Fixture(root: base.root, documents: base.documents, store: observing, manifest: base.manifest)
        try f.write("recordings/a.m4a", "first")
        try f.write("recordings/b.m4a", "second")
        let report = try await f.sync { $0.concurrency = 1 }
        #expect(report.uploaded == ["recordings/a.m4a", "recordings/b.m4a"])
        #expect(observing.seen.snapshot.keys.sorted() == ["recordings/a.m4a"])  // saved before b's upload began
        #expect(try MediaManifest.load(from: f.manifest).files.count == 2)
    }

    /// Killed after the server assembled a multipart upload but before the manifest recorded it: the resume file
    /// (`.<name>.rtsync-upload.json`) is left and the manifest does not know the file. The next run finds the object
    /// holds the file, and neither downloads nor uploads it, nor calls it a conflict.
    @Test func crashAfterTheServerAssembledAnUpload_nextSyncTransfersNothing_andRemovesTheResumeFile() async throws {
        guard !MotoServer.skipRequested else { return }
        let store = try await MotoServer.anonymous.value.store { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20 }
        let f = try makeFixture(store: store)
        let data = randomBytes(11 << 20)
        try f.write("recordings/long.m4a", "")
        let file = f.documents.appendingPathComponent("recordings/long.m4a")
        try data.write(to: file)
        try await store.put(key: "alice/recordings/long.m4a", fileURL: file)
        let stat = try #require(FileStat.of(file.path))
        let resume = store.multipartStateURL(fileURL: file, key: "alice/recordings/long.m4a")
        #expect(resume.lastPathComponent == ".long.m4a.rtsync-upload.json")
        let state = MultipartState(bucket: store.configuration.bucket, key: store.fullKey("alice/recordings/long.m4a"),
                                   uploadId: "completed-before-the-crash", fileSize: stat.size,
                                   fileMtimeNanoseconds: stat.mtimeNanoseconds, partSize: 5 << 20, parts: [1: "p1", 2: "p2"])
        try JSONEncoder().encode(state).write(to: resume)
        let before = store.requestCounter.total
        let partsBefore = store.requestCounter.count("UploadPart"), putsBefore = store.requestCounter.count("PutObject")

        let report = try await f.sync()
        #expect(report.errors.isEmpty && report.conflicts.isEmpty)
        #expect(report.uploaded.isEmpty && report.downloaded.isEmpty && report.unchanged == 1)
        #expect(store.requestCounter.count("GetObject") == 0)
        #expect(store.requestCounter.count("UploadPart") == partsBefore && store.requestCounter.count("PutObject") == putsBefore)
        #expect(store.requestCounter.total - before == 3)  // LIST, ListParts (NoSuchUpload), HEAD
        #expect(!FileManager.default.fileExists(atPath: resume.path))
        let entry = try #require(try MediaManifest.load(from: f.manifest)["recordings/long.m4a"])
        #expect(entry.etag == (try await store.head(key: "alice/recordings/long.m4a")).etag)
        let idle = try await f.sync()
        #expect(idle.unchanged == 1 && idle.requests == 1)
    }

    // MARK: - OS litter

    static let litter = ["recordings/.DS_Store", "images/._x.jpg", "images/2024/Thumbs.db", "recordings/.take.m4a.swp",
                         "images/desktop.ini"]

    @Test func osLitter_isLeftOutByDefault_bothWays_andSyncsWhenIncluded() async throws {
        let f = try makeFixture()
        for path in Self.litter { try f.write(path, "litter") }
        try f.write("images/x.jpg", "photo")
        try f.write("recordings/take.m4a", "take")
        let pushed = try await f.sync()
        #expect(pushed.uploaded == ["images/x.jpg", "recordings/take.m4a"])
        #expect(try await f.store.listAll(prefix: "alice/").map(\.key).sorted() == ["alice/images/x.jpg", "alice/recordings/take.m4a"])
        // Litter in the bucket (left by an older client) is not pulled either.
        try await f.store.put(key: "alice/images/.DS_Store", data: Data("bucket litter".utf8))
        let other = otherDevice(of: f)
        let pulled = try await other.sync()
        #expect(pulled.downloaded == ["images/x.jpg", "recordings/take.m4a"])
        #expect(other.read("images/.DS_Store") == nil)

        let included = try await f.sync { $0.excludeLitter = false }
        #expect(included.uploaded.sorted() == Self.litter.sorted())
        #expect(included.downloaded == ["images/.DS_Store"])
        var settings = MediaSyncSettings()
        #expect(settings.options().excludeLitter)
        settings.includeLitter = true
        #expect(!settings.options().excludeLitter)
        #expect(MediaSyncOptions.litter.map(\.pattern).contains(".*.swp"))
    }

    @Test func deletions_areNotPropagatedUnlessAsked() async throws {
        let f = try makeFixture()
        try f.write("recordings/keep.m4a", "k")
        _ = try await f.sync()
        try FileManager.default.removeItem(at: f.documents.appendingPathComponent("recordings/keep.m4a"))
        let restored = try await f.sync()
        #expect(restored.downloaded == ["recordings/keep.m4a"])
        #expect(restored.deletedRemote.isEmpty)
        try FileManager.default.removeItem(at: f.documents.appendingPathComponent("recordings/keep.m4a"))
        let deleted = try await f.sync { $0.delete = true }
        #expect(deleted.deletedRemote == ["recordings/keep.m4a"])
        #expect(try await f.store.exists(key: "alice/recordings/keep.m4a") == false)
    }

    @Test func deletions_areSkipped_afterAnIOErrorInTheSameRun() async throws {
        let f = try makeFixture()
        try f.write("recordings/gone.m4a", "g")
        _ = try await f.sync()
        try FileManager.default.removeItem(at: f.documents.appendingPathComponent("recordings/gone.m4a"))
        // A remote file whose local path is a folder: its download must fail.
        try await f.store.put(key: "alice/recordings/blocker", data: Data("b".utf8))
        try f.write("recordings/blocker/inner.txt", "i")
        let report = try await f.sync { $0.delete = true }
        #expect(report.errors.map(\.path).contains("recordings/blocker"))
        #expect(report.deletionsSkipped)
        #expect(report.deletedRemote.isEmpty)
        #expect(try await f.store.exists(key: "alice/recordings/gone.m4a"))
    }

    @Test func includeExcludeAndSelect_limitWhatSyncs() async throws {
        let f = try makeFixture()
        try f.write("recordings/a.m4a", "a")
        try f.write("recordings/b.wav", "b")
        try f.write("recordings/sub/c.m4a", "c")
        try f.write("images/d.jpg", "d")
        let filtered = try await f.sync {
            $0.direction = .push
            $0.include = [Glob("*.m4a")]
            $0.exclude = [Glob("recordings/sub/**")]
        }
        #expect(filtered.uploaded == ["recordings/a.m4a"])
        let selected = try await f.sync { $0.direction = .push; $0.select = ["recordings/sub"] }
        #expect(selected.uploaded == ["recordings/sub/c.m4a"])
    }

    @Test func settingsFile_selectiveMode_syncsOnlySelectedPaths_andEmptySelectionSyncsNothing() async throws {
        let f = try makeFixture()
        try f.write("recordings/keep/a.m4a", "a")
        try f.write("recordings/other/b.m4a", "b")
        let json = #"{"mode": "selective", "select": ["recordings/keep"], "direction": "push"}"#
        let file = f.root.appendingPathComponent("media.json")
        try Data(json.utf8).write(to: file)
        let settings = try MediaSyncSettings.load(from: file)
        let report = try await MediaSync(store: f.store, documents: f.documents, user: "alice", manifestURL: f.manifest)
            .run(settings.options())
        #expect(report.uploaded == ["recordings/keep/a.m4a"])
        var empty = MediaSyncSettings()
        empty.mode = .selective
        let none = try await MediaSync(store: f.store, documents: f.documents, user: "alice", manifestURL: f.manifest)
            .run(empty.options())
        #expect(none.uploaded.isEmpty && none.downloaded.isEmpty && none.unchanged == 0)
    }

    @Test func dryRun_reportsPlanAndChangesNothing() async throws {
        let f = try makeFixture()
        try f.write("recordings/a.m4a", "abc")
        let report = try await f.sync { $0.dryRun = true }
        #expect(report.uploaded == ["recordings/a.m4a"])
        #expect(report.bytesUploaded == 3)
        #expect(try await f.store.listAll(prefix: "").isEmpty)
        #expect(!FileManager.default.fileExists(atPath: f.manifest.path))
        let json = try JSONSerialization.jsonObject(with: report.jsonData()) as? [String: Any]
        #expect(json?["dryRun"] as? Bool == true)
    }

    @Test func hostileRemoteKeys_areRefusedAndNothingIsWrittenOutsideDocuments() async throws {
        let f = try makeFixture()
        let hostile = HostileListingStore(keys: ["alice/recordings/../../escaped.txt", "alice/recordings//double",
                                                 "alice/recordings/a\u{0}b", "alice/recordings/./dot", "alice/recordings/ok.m4a"])
        let sync = try MediaSync(store: hostile, documents: f.documents, user: "alice", manifestURL: f.manifest)
        var options = MediaSyncOptions()
        options.direction = .pull
        options.kinds = [.recordings]
        let report = try await sync.run(options)
        #expect(report.refused.count == 4)
        #expect(report.downloaded == ["recordings/ok.m4a"])
        #expect(!FileManager.default.fileExists(atPath: f.root.appendingPathComponent("escaped.txt").path))
        #expect(!FileManager.default.fileExists(atPath: f.documents.appendingPathComponent("escaped.txt").path))
        #expect(hostile.downloadedKeys.snapshot.keys.sorted() == ["alice/recordings/ok.m4a"])
    }

    @Test func idleSyncOnS3_costsOneListing() async throws {
        guard !MotoServer.skipRequested else { return }
        // Listing prefixes here contain "/", which moto's signature checker mishandles: use the server without auth.
        let f = try makeFixture(store: try await MotoServer.anonymous.value.store())
        for i in 0..<20 { try f.write("recordings/r\(i).m4a", String(repeating: "x", count: i + 1)) }
        let first = try await f.sync { $0.kinds = [.recordings] }
        #expect(first.uploaded.count == 20)
        let idle = try await f.sync { $0.kinds = [.recordings] }
        #expect(idle.unchanged == 20)
        #expect(idle.requests == 1)
    }

    @Test func idleSyncOnS3_bothKinds_costsOneListing() async throws {
        guard !MotoServer.skipRequested else { return }
        let f = try makeFixture(store: try await MotoServer.anonymous.value.store())
        for i in 0..<5 { try f.write("recordings/r\(i).m4a", "r\(i)") }
        for i in 0..<5 { try f.write("images/i\(i).jpg", "i\(i)") }
        let first = try await f.sync { $0.direction = .push }
        #expect(first.uploaded.count == 10)
        #expect(first.requests == 11)  // 1 LIST + 10 PUTs
        let idle = try await f.sync()
        #expect(idle.unchanged == 10)
        #expect(idle.requests == 1)
    }

    /// `<user>/inbound/` (diffs) sorts between images/ and recordings/: the listing jumps over it, and its objects
    /// are never taken for media, neither pulled nor deleted.
    @Test(arguments: FolderListingTests.ListingBackend.allCases)
    func objectsInInboundBetweenTheKindFolders_areLeftAlone_andListingStaysBounded(_ backend: FolderListingTests.ListingBackend) async throws {
        guard let base = try await backend.makeStore() else { return }
        let f = try makeFixture(store: SmallPageStore(base: base, pageSize: 2))
        for i in 0..<3 { try f.write("images/i\(i).jpg", "image \(i)") }
        for i in 0..<3 { try f.write("recordings/r\(i).m4a", "recording \(i)") }
        let inbound = (0..<6).map { "alice/inbound/d\($0).sqlite" }
        for key in inbound + ["alice/backups/b.sqlite", "alice/images-old/x.jpg"] {
            try await f.store.put(key: key, data: Data(key.utf8))
        }
        let pushed = try await f.sync { $0.direction = .push }
        #expect(pushed.uploaded.count == 6 && pushed.errors.isEmpty && pushed.refused.isEmpty)
        // Pages of 2 from just before images/: [images-old/x, inbound/d0] ends in the gap, so the next LIST starts
        // just before recordings/ and finds it empty: 2 LISTs, then 6 PUTs.
        #expect(pushed.requests == 2 + 6)
        // Re-sync both ways with deletions on: [images-old/x, i0], [i1, i2], [inbound/d0, d1] ends in the gap, so
        // the next LIST starts just before recordings/: [r0, r1], [r2]. 5 LISTs, where paging through inbound/
        // would cost 7. (trashDays 0: no daily trash pruning, whose one LIST of trash/ MediaTrashTests counts.)
        let idle = try await f.sync { $0.delete = true; $0.trashDays = 0 }
        #expect(idle.unchanged == 6)
        #expect(idle.uploaded.isEmpty && idle.downloaded.isEmpty && idle.deletedLocal.isEmpty && idle.deletedRemote.isEmpty)
        #expect(idle.refused.isEmpty && idle.errors.isEmpty)
        #expect(idle.requests == 5)
        for key in inbound { #expect(try await f.store.get(key: key) == Data(key.utf8)) }
        #expect(!FileManager.default.fileExists(atPath: f.documents.appendingPathComponent("inbound").path))
        // A pull into an empty documents folder brings the media and nothing else.
        let other = Fixture(root: f.root, documents: f.root.appendingPathComponent("Other"), store: f.store,
                            manifest: f.root.appendingPathComponent("other-manifest.json"))
        let pulled = try await other.sync { $0.direction = .pull }
        #expect(pulled.downloaded == ["images/i0.jpg", "images/i1.jpg", "images/i2.jpg",
                                      "recordings/r0.m4a", "recordings/r1.m4a", "recordings/r2.m4a"])
        #expect(other.read("recordings/r2.m4a") == "recording 2")
        let names = try FileManager.default.contentsOfDirectory(atPath: other.documents.path).sorted()
        #expect(names == ["images", "recordings"])
    }

    @Test func userIdWithSlash_isRefused() throws {
        let f = try makeFixture()
        #expect(throws: BucketError.self) {
            _ = try MediaSync(store: f.store, documents: f.documents, user: "../bob", manifestURL: f.manifest)
        }
    }
}

/// A store whose listing returns the given keys; downloads write the key's bytes.
struct HostileListingStore: ObjectStore {
    let keys: [String]
    let requestCounter = RequestCounter()
    let downloadedKeys = RequestCounter()
    var displayName: String { "hostile://" }

    func list(prefix: String, startAfter: String?, maxKeys: Int?, continuationToken: String?) async throws -> ObjectPage {
        requestCounter.record("ListObjectsV2")
        return ObjectPage(objects: keys.filter { $0.hasPrefix(prefix) }.map {
            ObjectInfo(key: $0, size: Int64($0.utf8.count), etag: "e", lastModified: nil)
        }, nextContinuationToken: nil)
    }
    func get(key: String, range: ByteRange?, ifMatch: String?) async throws -> Data { Data(key.utf8) }
    func download(key: String, to fileURL: URL) async throws -> ObjectInfo {
        downloadedKeys.record(key)
        try FileManager.default.createDirectory(at: fileURL.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(key.utf8).write(to: fileURL)
        return ObjectInfo(key: key, size: Int64(key.utf8.count), etag: "e", lastModified: nil)
    }
    func head(key: String) async throws -> ObjectInfo { throw BucketError.notFound(key: key) }
    func put(key: String, data: Data, ifNoneMatch: Bool) async throws -> ObjectInfo { throw BucketError.accessDenied(request: "PUT", hint: "") }
    func put(key: String, fileURL: URL) async throws -> ObjectInfo { throw BucketError.accessDenied(request: "PUT", hint: "") }
    func delete(key: String) async throws {}
}

/// Passes every call to `base`; when `watchedKey` is uploaded, records which entries the manifest file holds then.
struct ManifestObservingStore: ForwardingStore {
    let base: any ObjectStore
    let manifest: URL
    let watchedKey: String
    let seen = RequestCounter()
    func put(key: String, fileURL: URL) async throws -> ObjectInfo {
        if key == watchedKey, let saved = try? MediaManifest.load(from: manifest) {
            for path in saved.files.keys { seen.record(path.string) }
        }
        return try await base.put(key: key, fileURL: fileURL)
    }
}

/// Passes every call to `base`, but a file upload to `failingKey` fails.
struct FailingPutStore: ForwardingStore {
    let base: any ObjectStore
    let failingKey: String
    func put(key: String, fileURL: URL) async throws -> ObjectInfo {
        if key == failingKey { throw BucketError.transport(request: "PUT \(key)", description: "test failure") }
        return try await base.put(key: key, fileURL: fileURL)
    }
}

/// Passes every call to `base`; before each download, notes every file the saved manifest records that was not
/// made durable first (``LocalFiles/flushes``).
struct DurabilityObservingStore: ForwardingStore {
    let base: any ObjectStore
    let manifest: URL
    let documents: URL
    let violations = RequestCounter()
    func downloadReturningSHA256(key: String, to fileURL: URL, expecting listed: ObjectInfo?,
                                 flushing: Bool) async throws -> (info: ObjectInfo, sha256: String) {
        if let saved = try? MediaManifest.load(from: manifest) {
            for path in saved.files.keys {
                let url = documents.appendingPathComponent(path.string).path
                if LocalFiles.flushes.count("durable \(url)") + LocalFiles.flushes.count("fsync \(url)") == 0 { violations.record(path.string) }
            }
        }
        return try await base.downloadReturningSHA256(key: key, to: fileURL, expecting: listed, flushing: flushing)
    }
}
