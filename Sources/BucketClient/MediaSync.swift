import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Selective sync of `recordings/` and `images/` between a local documents folder and `<user>/<kind>/` in a bucket.
///
/// A manifest records size, mtime, SHA-256 and ETag of each synced file, so a run over an unchanged
/// tree costs one listing for all its kind folders (per 1,000 objects) and neither uploads nor hashing. Deletions
/// propagate only with ``MediaSyncOptions/delete`` and never after an I/O error in the same run; a deleted object
/// is moved to ``MediaTrash``, not destroyed. A file changed on
/// both sides keeps the losing version as a conflict copy (``MediaConflict``); nothing a user made is overwritten.
/// Bucket keys that could escape the documents folder are refused and reported, never written.
public struct MediaSync: Sendable {
    /// The bucket.
    public let store: any ObjectStore
    /// The local documents folder holding `recordings/` and `images/`.
    public let documents: URL
    /// The user id: the first segment of the bucket keys.
    public let user: String
    /// Where the manifest JSON lives.
    public let manifestURL: URL

    /// Creates a sync job.
    /// - Throws: ``BucketError/unsafeKey(key:reason:)`` when `user` is not a single safe path segment.
    public init(store: any ObjectStore, documents: URL, user: String, manifestURL: URL) throws {
        guard try SafeKey.segments(of: user).count == 1 else {
            throw BucketError.unsafeKey(key: user, reason: "a user id must be one path segment")
        }
        self.store = store
        self.documents = documents.standardizedFileURL
        self.user = user
        self.manifestURL = manifestURL
    }

    struct LocalFile { var url: URL; var stat: FileStat }

    enum Action {
        case upload(path: String)
        case download(path: String, remote: ObjectInfo)
        case deleteLocal(path: String)
        case deleteRemote(path: String)
        case touch(path: String, stat: FileStat)  // content unchanged, only mtime moved: refresh the manifest
        case resolve(path: String, remote: ObjectInfo, known: MediaManifest.Entry?)  // changed on both sides
        // Gone from the bucket, unchanged here, deletions off: deleted here too if the trash says it was deleted
        // since this copy was written, else uploaded (decided in ``resolveTrashed``, before anything runs).
        case uploadUnlessTrashed(path: String, stat: FileStat)
    }

    /// Runs one sync and returns its report; per-file failures are in the report, not thrown.
    /// - Throws: ``BucketError`` when the bucket cannot be listed or the manifest cannot be read.
    public func run(_ options: MediaSyncOptions) async throws -> MediaSyncReport {
        let started = Date()
        let requestsBefore = store.requestCounter.total
        var report = MediaSyncReport(direction: options.direction, dryRun: options.dryRun)
        var manifest = try MediaManifest.load(from: manifestURL)
        let loaded = manifest
        var actions: [Action] = []
        var remoteByPath: [ExactPath: ObjectInfo] = [:]

        // Remote side: one listing of every wanted kind folder together (one LIST per 1,000 objects when
        // nothing lies between them; see ObjectStore.listFolders).
        let kinds = MediaKind.allCases.filter { options.kinds.contains($0) }
        if !options.dryRun {
            // Temp files a killed run of this machine left: of the manifest beside it, and of uploads in a
            // local-folder bucket (a live writer's are kept; the kind folders' downloads go in `walk`).
            for name in (try? FileManager.default.contentsOfDirectory(atPath: manifestURL.deletingLastPathComponent().path)) ?? []
            where TemporaryOwner.isOrphan(name, prefix: ".rtsync-tmp-") {
                unlink(manifestURL.deletingLastPathComponent().appendingPathComponent(name).path)
            }
            if let local = store as? LocalFolderStore {
                for kind in kinds { local.removeStaleTemporaryFiles(under: folder(of: kind), olderThan: 600) }
            }
        }
        // Keyed by bytes: names that differ only in Unicode normalization are different objects.
        var remoteByKind: [MediaKind: [ExactPath: ObjectInfo]] = [:]
        for object in try await store.listFolders(kinds.map(folder(of:))) {
            guard let kind = kinds.first(where: { FolderSet.key(object.key, isIn: folder(of: $0)) }) else { continue }
            // Cut the folder off by bytes (it ends in "/", so the rest is valid UTF-8).
            let relative = String(decoding: object.key.utf8.dropFirst(folder(of: kind).utf8.count), as: UTF8.self)
            do {
                _ = try SafeKey.segments(of: relative)
            } catch let error as BucketError {
                report.refused.append(.init(path: object.key, reason: Self.reason(error)))
                continue
            }
            let path = "\(kind.rawValue)/\(relative)"
            if options.accepts(path) { remoteByKind[kind, default: [:]][ExactPath(path)] = object }
        }

        for kind in kinds {
            let remote = remoteByKind[kind] ?? [:]
            // Local side: one stat per file, no reading.
            var local: [ExactPath: LocalFile] = [:]
            let kindFolder = documents.appendingPathComponent(kind.rawValue, isDirectory: true)
            if FileStat.of(kindFolder.path) != nil {
                walk(kindFolder, relative: kind.rawValue, removingOrphans: !options.dryRun, issues: &report.errors) { path, file in
                    if options.accepts(path) { local[ExactPath(path)] = file }
                }
            }
            let knownPaths = manifest.files.keys.filter { $0.string.hasPrefix(kind.rawValue + "/") && options.accepts($0.string) }
            // Local names by canonical equivalence (String's own equality). On a filesystem that keeps names as
            // given (ext4, APFS as Linux and iOS use it) NFC and NFD names are two files and are synced as two.
            // On one that normalizes (HFS+, APFS on macOS) they are one file: a local name whose bytes differ from
            // the only remote name it is equivalent to is that object (a name the filesystem rewrote), and a second
            // remote twin is not downloaded, since it would overwrite the first.
            var localByText: [String: ExactPath] = [:]
            for path in local.keys { localByText[path.string] = path }
            for path in remote.keys.sorted() where local[path] == nil {
                guard let twin = localByText[path.string], remote[twin] == nil, let file = local[twin],
                      let opened = FileStat.of(localURL(path.string).path), opened.isSameFile(as: file.stat) else { continue }
                local[path] = file
                local[twin] = nil
                localByText[path.string] = path
            }
            let paths = Set(remote.keys).union(local.keys).union(knownPaths)
            for path in paths.sorted() {
                if local[path] == nil, remote[path] != nil, let twin = localByText[path.string], twin != path,
                   FileStat.of(localURL(path.string).path) != nil {
                    // Not listed under these bytes, yet the name opens a file: the filesystem took it for its twin.
                    report.errors.append(.init(path: path.string, reason: "differs from \(twin.string.debugDescription) only in Unicode normalization, and this filesystem keeps one file for both; not downloaded, so neither is overwritten (rename one of them in the bucket)"))
                    continue
                }
                plan(path: path.string, local: local[path], remote: remote[path], known: manifest.files[path],
                     options: options, actions: &actions, report: &report, manifest: &manifest)
            }
            remoteByPath.merge(remote) { a, _ in a }
        }

        actions = await resolveTrashed(actions, options: options, report: &report)
        if options.dryRun {
            for action in actions {
                switch action {
                case .upload(let path):
                    report.uploaded.append(path)
                    report.bytesUploaded += FileStat.of(localURL(path).path)?.size ?? 0
                case .download(let path, let remote):
                    report.downloaded.append(path)
                    report.bytesDownloaded += remote.size
                case .deleteLocal(let path): report.deletedLocal.append(path)
                case .deleteRemote(let path): report.deletedRemote.append(path)
                case .touch: report.unchanged += 1
                case .resolve, .uploadUnlessTrashed: break
                }
            }
        } else {
            try await execute(actions, options: options, report: &report, manifest: &manifest)
            if options.delete && options.trashDays > 0 && report.errors.isEmpty && report.notStarted == 0 && options.shouldStop?() != true,
               manifest.trashPrunedAt.map({ Date().timeIntervalSince($0) >= 86_400 }) ?? true {
                // At most once a day, so an idle run stays one listing.
                do {
                    report.trashPruned = try await trash.prune(olderThan: options.trashDays)
                    manifest.trashPrunedAt = Date()
                } catch {
                    report.errors.append(.init(path: trash.prefix, reason: "cannot prune the trash: \(Self.reason(error))"))
                }
            }
            // A run that changed nothing (an idle sync) leaves the file as it is: no rewrite, no fsync.
            if manifest != loaded || FileStat.of(manifestURL.path) == nil { try manifest.save(to: manifestURL) }
        }
        report.uploaded.sort()
        report.downloaded.sort()
        report.requests = store.requestCounter.total - requestsBefore
        report.seconds = Date().timeIntervalSince(started)
        return report
    }

    // MARK: - Planning

    func plan(path: String, local: LocalFile?, remote: ObjectInfo?, known: MediaManifest.Entry?, options: MediaSyncOptions,
              actions: inout [Action], report: inout MediaSyncReport, manifest: inout MediaManifest) {
        let canPush = options.direction != .pull
        let canPull = options.direction != .push
        switch (local, remote) {
        case (let l?, let r?):
            let localChanged = known.map { $0.size != l.stat.size || $0.mtimeNanoseconds != l.stat.mtimeNanoseconds } ?? true
            let remoteChanged = known.map { $0.etag != r.etag } ?? true
            if !localChanged && !remoteChanged {
                report.unchanged += 1
            } else if let known, localChanged && !remoteChanged {
                if l.stat.size == known.size, (try? LocalFiles.sha256Hex(of: l.url)) == known.sha256 {
                    actions.append(.touch(path: path, stat: l.stat))
                } else if canPush {
                    actions.append(.upload(path: path))
                }
            } else if known != nil && !localChanged && remoteChanged {
                if canPull { actions.append(.download(path: path, remote: r)) }
            } else {
                // Changed on both sides (or never synced and present on both).
                if Self.isPlainMD5(r.etag), l.stat.size == r.size, let md5 = try? Self.md5Hex(of: l.url), md5 == r.etag {
                    // Same bytes on both sides: adopt without transferring.
                    if let sha = try? LocalFiles.sha256Hex(of: l.url) {
                        manifest[path] = .init(size: l.stat.size, mtimeNanoseconds: l.stat.mtimeNanoseconds, sha256: sha, etag: r.etag)
                        report.unchanged += 1
                        return
                    }
                }
                if let known, l.stat.size == known.size, (try? LocalFiles.sha256Hex(of: l.url)) == known.sha256 {
                    // Only the local mtime moved: the bucket's version is the one edit.
                    if canPull { actions.append(.download(path: path, remote: r)) }
                    return
                }
                // Resolved when run: the bucket's version is fetched and compared first, and the losing version
                // is kept as a conflict copy, never overwritten.
                if options.dryRun {
                    report.conflicts.append(path)
                    if Self.localWins(l.stat, r, direction: options.direction) { actions.append(.upload(path: path)) }
                    else { actions.append(.download(path: path, remote: r)) }
                } else {
                    actions.append(.resolve(path: path, remote: r, known: known))
                }
            }
        case (let l?, nil):
            if let known {
                let unchanged = known.size == l.stat.size && known.mtimeNanoseconds == l.stat.mtimeNanoseconds
                if options.delete && canPull && unchanged {
                    actions.append(.deleteLocal(path: path))
                } else if canPull && unchanged {
                    actions.append(.uploadUnlessTrashed(path: path, stat: l.stat))
                } else if canPush {
                    // Deleted elsewhere but edited here since: the edit wins over the delete.
                    if canPull { report.keptOverDelete.append(path) }
                    actions.append(.upload(path: path))
                }
            } else if canPush {
                actions.append(.upload(path: path))
            }
        case (nil, let r?):
            if let known, options.delete && canPush && known.etag == r.etag {
                actions.append(.deleteRemote(path: path))
            } else if canPull {
                actions.append(.download(path: path, remote: r))
            }
        case (nil, nil):
            manifest[path] = nil
        }
    }

    /// Decides the ``Action/uploadUnlessTrashed(path:stat:)`` actions with one listing of the trash (only when
    /// there are any): a deletion another device made through the trash after this copy was last written reaches
    /// this device even with deletions off here; a file removed from the bucket otherwise (or longer ago) is
    /// uploaded again, as before. When the trash cannot be listed, those files are left alone and reported.
    func resolveTrashed(_ actions: [Action], options: MediaSyncOptions, report: inout MediaSyncReport) async -> [Action] {
        guard actions.contains(where: { if case .uploadUnlessTrashed = $0 { return true } else { return false } }) else { return actions }
        var deletedAt: [ExactPath: Date] = [:]
        do {
            for item in try await trash.list() {
                deletedAt[ExactPath(item.path)] = max(deletedAt[ExactPath(item.path)] ?? .distantPast, item.deletedAt)
            }
        } catch {
            report.errors.append(.init(path: trash.prefix, reason: "cannot list the trash to tell files deleted on another device from files to upload again: \(Self.reason(error)); those files were left alone"))
            return actions.filter { if case .uploadUnlessTrashed = $0 { return false } else { return true } }
        }
        return actions.compactMap { action in
            guard case .uploadUnlessTrashed(let path, let stat) = action else { return action }
            // The trash stamp is in whole seconds, rounded down: a copy written within that second may be newer
            // than the delete, and is kept (keeping loses nothing; deleting might).
            if let deleted = deletedAt[ExactPath(path)], deleted > stat.modificationDate {
                return .deleteLocal(path: path)
            }
            return options.direction != .pull ? .upload(path: path) : nil
        }
    }

    // MARK: - Execution

    /// Longest wait between manifest saves while small transfers finish (larger ones save at once).
    static let saveInterval: TimeInterval = 0.5
    /// Finished transfers of this many bytes (together, or one file) are saved in the manifest at once: 16 MiB, the
    /// size above which an upload goes in parts. A smaller file installed or uploaded but not yet recorded when a
    /// run is killed costs the next run only a hash, not a transfer: its plain-MD5 ETag shows the bytes are the
    /// same (``plan``), where a multipart ETag does not (a larger file, or a smaller one another tool put in parts,
    /// which the next run then fetches once more to compare: time lost, nothing else).
    static let saveAfterBytes: Int64 = 16 << 20

    /// Collects results from concurrent transfers.
    ///
    /// Durability of pulled files: a file the manifest records must be on stable storage before the manifest saying
    /// so is, and a file installed under its name must never be empty or short after a power cut. A small download
    /// (up to ``saveAfterBytes``) is fetched without an fsync of its own into a temporary file beside its place
    /// (`.rtsync-tmp-…`, which a later run removes if this one is killed) and waits in ``unflushed``. Before each
    /// manifest save one durability point (``makeInstalledDurable()``) makes all waiting files' bytes durable at
    /// once (`syncfs` of their filesystem on Linux, elsewhere an fsync of each), then renames them into place,
    /// fsyncs the folders holding them (so the names are durable too), and only then puts them in the manifest that
    /// is saved (itself written to a temporary file, fsynced and renamed). So a kill -9 or a power cut at any
    /// moment leaves the manifest recording only files whose bytes and names were on disk before it was written,
    /// and any file under its own name complete: before the rename there is only a temporary file (fetched again
    /// by the next run), after it a complete file, which if not yet recorded the next run recognizes from its
    /// plain-MD5 ETag without a transfer (``plan``). A larger download is fsynced by the store before it is
    /// installed, as before, and resumes across runs from `<name>.partial`; it is saved in the manifest at once.
    actor Progress {
        var report: MediaSyncReport
        var manifest: MediaManifest
        let total: Int
        var done = 0
        let show: Bool
        let started = Date()

        /// Where the manifest is saved as transfers finish (nil: not saved here).
        let saveURL: URL?
        var lastSave = Date.distantPast
        var bytesSinceSave: Int64 = 0
        /// Pulled files in their temporary files, not yet durable: where each goes, and its manifest entry.
        var unflushed: [String: (entry: MediaManifest.Entry, staged: URL, url: URL)] = [:]
        /// A save is under way (it awaits the durability point off the actor); others wait in ``saveWaiters``.
        var saving = false
        var saveWaiters: [CheckedContinuation<Void, Never>] = []

        init(report: MediaSyncReport, manifest: MediaManifest, total: Int, show: Bool, saveURL: URL?) {
            self.report = report
            self.manifest = manifest
            self.total = total
            self.show = show
            self.saveURL = saveURL
        }

        /// Saves the manifest after a finished transfer, so a crash does not make the next run redo it. A save
        /// rewrites the whole manifest (temporary file + rename), so after small files it waits up to
        /// ``saveInterval``; after ``saveAfterBytes`` or more of transfers, or with `now`, it is immediate (`now`
        /// also waits for a save under way, and returns once what it recorded is saved).
        func saveIfDue(bytes: Int64, now: Bool = false) async {
            bytesSinceSave += bytes
            guard let saveURL else { return }
            if saving {
                // The save under way reads the manifest after its durability point, so it records this too,
                // except pulled files, which wait for the next one.
                guard now else { return }
                while saving { await withCheckedContinuation { saveWaiters.append($0) } }
            }
            guard now || bytesSinceSave >= MediaSync.saveAfterBytes || Date().timeIntervalSince(lastSave) >= MediaSync.saveInterval else { return }
            saving = true
            let counted = bytesSinceSave
            await makeInstalledDurable()
            // A failed save here is not fatal: the run saves again at its end, and reports that failure.
            try? manifest.save(to: saveURL)
            lastSave = Date()
            bytesSinceSave -= counted
            saving = false
            let waiters = saveWaiters
            saveWaiters = []
            for waiter in waiters { waiter.resume() }
        }

        /// The durability point: makes the bytes of every file in ``unflushed`` durable, installs each under its
        /// name, makes the names durable, then records them in the manifest. A file that fails any step is reported
        /// and not recorded (a temporary file left is removed).
        func makeInstalledDurable() async {
            guard !unflushed.isEmpty else { return }
            let batch = unflushed.sorted { $0.key < $1.key }
            unflushed = [:]
            func fail(_ path: String, _ entry: MediaManifest.Entry, _ error: Error) {
                report.errors.append(.init(path: path, reason: "downloaded but not installed: \(MediaSync.reason(error))"))
                report.downloaded.removeAll { $0 == path }
                report.bytesDownloaded -= entry.size
            }
            let staged = batch.map(\.value.staged)
            do {
                try await LocalFiles.offPool { try LocalFiles.makeDurable(staged) }
            } catch {
                for (path, item) in batch { unlink(item.staged.path); fail(path, item.entry, error) }
                return
            }
            var installed: [(path: String, entry: MediaManifest.Entry, url: URL)] = []
            for (path, item) in batch {
                if rename(item.staged.path, item.url.path) == 0 {
                    installed.append((path, item.entry, item.url))
                } else {
                    fail(path, item.entry, BucketError.localIO(path: item.url.path, description: "cannot install: \(LocalFiles.errnoText())"))
                    unlink(item.staged.path)
                }
            }
            let names = installed.map(\.url)
            do {
                try await LocalFiles.offPool { try LocalFiles.makeNamesDurable(names) }
                for file in installed { manifest[file.path] = file.entry }
            } catch {
                // Installed and complete, only not recorded: the next run recognizes them (plain-MD5 ETag).
                for file in installed {
                    report.errors.append(.init(path: file.path, reason: "installed but not recorded: \(MediaSync.reason(error))"))
                }
            }
        }

        /// Waits for a save under way, then makes the files still waiting durable and records them (the end of
        /// the transfers; the run saves the manifest itself).
        func finish() async {
            while saving { await withCheckedContinuation { saveWaiters.append($0) } }
            await makeInstalledDurable()
        }

        func uploaded(_ path: String, entry: MediaManifest.Entry) async {
            report.uploaded.append(path)
            report.bytesUploaded += entry.size
            manifest[path] = entry
            step()
            await saveIfDue(bytes: entry.size)
        }

        /// Records a pulled file that is already durable.
        func downloaded(_ path: String, entry: MediaManifest.Entry) async {
            report.downloaded.append(path)
            report.bytesDownloaded += entry.size
            manifest[path] = entry
            step()
            await saveIfDue(bytes: entry.size)
        }

        /// Records a pulled file fetched without a flush into `staged`: it is installed at `url` and enters the
        /// manifest at the next durability point (see ``Progress``).
        func staged(_ path: String, entry: MediaManifest.Entry, staged: URL, url: URL) async {
            report.downloaded.append(path)
            report.bytesDownloaded += entry.size
            unflushed[path] = (entry, staged, url)
            step()
            await saveIfDue(bytes: entry.size)
        }

        /// Records a file whose two sides turned out to hold the same bytes (or an upload finished before a crash).
        func adopted(_ path: String, entry: MediaManifest.Entry) async {
            report.unchanged += 1
            manifest[path] = entry
            step()
            await saveIfDue(bytes: 0)
        }

        /// Records a conflict whose losing version was kept as a copy.
        func conflict(_ conflict: MediaConflict, copyEntry: MediaManifest.Entry?, pathEntry: MediaManifest.Entry? = nil) async {
            report.conflicts.append(conflict.path)
            report.conflictCopies.append(conflict)
            manifest.conflicts.append(conflict)
            if let copyEntry { manifest[conflict.copy] = copyEntry }
            if let pathEntry { manifest[conflict.path] = pathEntry }
            // Saved at once (conflicts are rare): a crash now must not make the next run keep a second copy.
            await saveIfDue(bytes: 0, now: true)
        }

        /// Records that a transfer finished without counting it as a file done (a conflict copy's upload).
        func copied(bytes: Int64) {
            report.bytesUploaded += bytes
        }

        func failed(_ path: String, _ reason: String) {
            report.errors.append(.init(path: path, reason: reason))
            step()
        }

        func step() {
            done += 1
            guard show else { return }
            let bytes = report.bytesUploaded + report.bytesDownloaded
            let rate = Double(bytes) / max(0.001, Date().timeIntervalSince(started))
            let line = "\r\u{1B}[Kmedia: \(done)/\(total) files, \(MediaSyncReport.bytes(bytes)), \(MediaSyncReport.bytes(Int64(rate)))/s"
            FileHandle.standardError.write(Data(line.utf8))
            if done == total { FileHandle.standardError.write(Data("\n".utf8)) }
        }
    }

    func execute(_ actions: [Action], options: MediaSyncOptions, report: inout MediaSyncReport,
                 manifest: inout MediaManifest) async throws {
        var transfers: [Action] = []
        var deletions: [Action] = []
        for action in actions {
            switch action {
            case .upload, .download, .resolve: transfers.append(action)
            case .deleteLocal, .deleteRemote: deletions.append(action)
            case .uploadUnlessTrashed: break  // decided before execution
            case .touch(let path, let stat):
                manifest[path]?.mtimeNanoseconds = stat.mtimeNanoseconds
                report.unchanged += 1
            }
        }
        // A progress display set by the caller learns the bytes to move before any transfer starts.
        for case .upload(let path) in transfers { TransferProgress.current?.expect(bytes: FileStat.of(localURL(path).path)?.size ?? 0, key: remoteKey(path)) }
        for case .download(_, let remote) in transfers { TransferProgress.current?.expect(bytes: remote.size, key: remote.key) }
        let show = options.showProgress && isatty(STDERR_FILENO) == 1 && !transfers.isEmpty
        let progress = Progress(report: report, manifest: manifest, total: transfers.count, show: show,
                                saveURL: options.dryRun ? nil : manifestURL)
        let window = max(1, options.concurrency)
        let started = await withTaskGroup(of: Void.self, returning: Int.self) { group in
            var next = 0
            func addNext() {
                let action = transfers[next]
                next += 1
                group.addTask { await self.transfer(action, options: options, progress: progress) }
            }
            let stop = { options.shouldStop?() ?? false }
            while next < transfers.count && next < window && !stop() { addNext() }
            while await group.next() != nil {
                if next < transfers.count && !stop() { addNext() }
            }
            return next
        }
        await progress.finish()
        report = await progress.report
        manifest = await progress.manifest
        if options.shouldStop?() == true {
            // Stopped at a safe point: every finished transfer is in the manifest; the rest is the next run's.
            report.notStarted = transfers.count - started + deletions.count
            return
        }
        guard !deletions.isEmpty else { return }
        if !report.errors.isEmpty {
            // Never delete on a run that had an I/O error: the listing or the local tree may be incomplete.
            report.deletionsSkipped = true
            return
        }
        for action in deletions {
            do {
                switch action {
                case .deleteLocal(let path):
                    let url = localURL(path)
                    if unlink(url.path) != 0 && errno != ENOENT {
                        throw BucketError.localIO(path: url.path, description: LocalFiles.errnoText())
                    }
                    report.deletedLocal.append(path)
                    manifest[path] = nil
                case .deleteRemote(let path):
                    // Moved, not destroyed: a mistaken delete stays recoverable (`rtsync media restore`).
                    try await trash.move(path: path)
                    report.deletedRemote.append(path)
                    manifest[path] = nil
                default:
                    break
                }
            } catch {
                report.errors.append(.init(path: Self.path(of: action), reason: Self.reason(error)))
            }
        }
    }

    func transfer(_ action: Action, options: MediaSyncOptions, progress: Progress) async {
        switch action {
        case .upload(let path):
            let url = localURL(path)
            do {
                guard let before = FileStat.of(url.path) else {
                    throw BucketError.localIO(path: url.path, description: "file vanished")
                }
                let (info, sha) = try await store.putReturningSHA256(key: remoteKey(path), fileURL: url)
                await progress.uploaded(path, entry: .init(size: before.size, mtimeNanoseconds: before.mtimeNanoseconds,
                                                           sha256: sha, etag: info.etag))
            } catch {
                await progress.failed(path, Self.reason(error))
            }
        case .download(let path, let remote):
            let url = localURL(path)
            do {
                // Hashed as it arrives. A large file is fsynced and installed by the store (resumable from
                // `<name>.partial`); a small one is made durable and installed with the others waiting at the next
                // manifest save, rather than with one fsync each (see ``Progress``).
                let large = remote.size > Self.saveAfterBytes
                let target = large ? url : LocalFiles.temporaryURL(beside: url)
                do {
                    let (info, sha) = try await store.downloadReturningSHA256(key: remoteKey(path), to: target, expecting: remote,
                                                                              flushing: large)
                    guard let after = FileStat.of(target.path) else {
                        throw BucketError.localIO(path: target.path, description: "downloaded file vanished")
                    }
                    let entry = MediaManifest.Entry(size: after.size, mtimeNanoseconds: after.mtimeNanoseconds, sha256: sha,
                                                    etag: info.etag.isEmpty ? remote.etag : info.etag)
                    if large { await progress.downloaded(path, entry: entry) }
                    else { await progress.staged(path, entry: entry, staged: target, url: url) }
                } catch {
                    if !large { LocalFiles.removeDownload(at: target) }
                    throw error
                }
            } catch {
                await progress.failed(path, Self.reason(error))
            }
        case .resolve(let path, let remote, let known):
            do {
                try await resolve(path: path, remote: remote, known: known, options: options, progress: progress)
            } catch {
                await progress.failed(path, Self.reason(error))
            }
        default:
            break
        }
    }

    /// Whether the local version wins a conflict: always when pushing, never when pulling, else the newer one.
    static func localWins(_ local: FileStat, _ remote: ObjectInfo, direction: SyncDirection) -> Bool {
        switch direction {
        case .push: return true
        case .pull: return false
        case .both: return local.modificationDate >= (remote.lastModified ?? .distantPast)
        }
    }

    /// A file changed on both sides: fetches the bucket's version beside the local one and compares the bytes.
    /// Identical versions are adopted; otherwise the newer (or the direction's) version wins and the other is kept
    /// as `name (conflict <device> <date>).ext`, locally and in the bucket, before anything is overwritten.
    func resolve(path: String, remote: ObjectInfo, known: MediaManifest.Entry?, options: MediaSyncOptions,
                 progress: Progress) async throws {
        let url = localURL(path)
        let canPush = options.direction != .pull
        let canPull = options.direction != .push
        guard let localStat = FileStat.of(url.path) else {
            throw BucketError.localIO(path: url.path, description: "file vanished")
        }
        if canPush, let finished = try await store.finishedUpload(key: remoteKey(path), fileURL: url) {
            // This file's upload completed on the server before an earlier run stopped: nothing to transfer.
            await progress.adopted(path, entry: .init(size: localStat.size, mtimeNanoseconds: localStat.mtimeNanoseconds,
                                                      sha256: try LocalFiles.sha256Hex(of: url), etag: finished.etag))
            return
        }
        let fetched = LocalFiles.temporaryURL(beside: url)
        defer { LocalFiles.removeDownload(at: fetched) }
        // Hashed as it arrives where the store can (the file is not read back); flushed as a plain download is.
        let (info, remoteSHA) = try await store.downloadReturningSHA256(key: remoteKey(path), to: fetched, expecting: remote, flushing: true)
        let remoteETag = info.etag.isEmpty ? remote.etag : info.etag
        let localSHA = try LocalFiles.sha256Hex(of: url)
        func entry(_ stat: FileStat, _ sha: String, _ etag: String) -> MediaManifest.Entry {
            .init(size: stat.size, mtimeNanoseconds: stat.mtimeNanoseconds, sha256: sha, etag: etag)
        }
        if remoteSHA == localSHA {
            await progress.adopted(path, entry: entry(localStat, localSHA, remoteETag))
            return
        }
        let remoteEdited = remoteSHA != known?.sha256
        let localEdited = localSHA != known?.sha256
        if !remoteEdited || !localEdited {
            // Only one side's bytes changed (the other only got a new ETag or mtime): no conflict.
            if !remoteEdited, canPush {
                let (uploaded, sha) = try await store.putReturningSHA256(key: remoteKey(path), fileURL: url)
                await progress.uploaded(path, entry: entry(localStat, sha, uploaded.etag))
            } else if !localEdited, canPull {
                try install(fetched, at: url)
                guard let after = FileStat.of(url.path) else { throw BucketError.localIO(path: url.path, description: "downloaded file vanished") }
                await progress.downloaded(path, entry: entry(after, remoteSHA, remoteETag))
            } else if let known {
                // A one-way run that may not copy the edit: remember that the other side only looks changed, so
                // the next run neither fetches it again nor calls the edit a conflict.
                var seen = known
                if !remoteEdited { seen.etag = remoteETag }
                if !localEdited { seen.size = localStat.size; seen.mtimeNanoseconds = localStat.mtimeNanoseconds }
                await progress.adopted(path, entry: seen)
            }
            return
        }
        // Whole seconds: the copy's name shows seconds, and the manifest stores ISO 8601 times.
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let localWins = Self.localWins(localStat, remote, direction: options.direction)
        let copy = uniqueCopyPath(of: path, device: options.device, at: now)
        let copyURL = try SafeKey.fileURL(root: documents, key: copy)
        if localWins {
            // Keep the bucket's version under the copy name (in the bucket, and here unless only pushing), then upload.
            let kept = try await store.put(key: remoteKey(copy), fileURL: fetched)
            await progress.copied(bytes: kept.size)
            var copyEntry: MediaManifest.Entry? = nil
            if canPull {
                try install(fetched, at: copyURL)
                if let st = FileStat.of(copyURL.path) { copyEntry = entry(st, remoteSHA, kept.etag) }
            }
            // Recorded before the upload: should it fail, the next run sees the bucket's version as already kept
            // (not changed since the last sync) and simply uploads the local one, making no second copy.
            await progress.conflict(.init(path: path, copy: copy, loser: .remote, device: options.device, at: now,
                                          keptLocally: canPull, keptInBucket: true), copyEntry: copyEntry,
                                    pathEntry: .init(size: remote.size, mtimeNanoseconds: -1, sha256: remoteSHA, etag: remoteETag))
            let (uploaded, sha) = try await store.putReturningSHA256(key: remoteKey(path), fileURL: url)
            await progress.uploaded(path, entry: entry(localStat, sha, uploaded.etag))
        } else {
            // Move the local version aside (a rename keeps its bytes and mtime), upload it unless only pulling,
            // then put the bucket's version in place.
            if rename(url.path, copyURL.path) != 0 {
                throw BucketError.localIO(path: copyURL.path, description: "cannot keep the local version as a conflict copy: \(LocalFiles.errnoText())")
            }
            var copyEntry: MediaManifest.Entry? = nil
            if canPush, let st = FileStat.of(copyURL.path) {
                let kept = try await store.put(key: remoteKey(copy), fileURL: copyURL)
                await progress.copied(bytes: kept.size)
                copyEntry = entry(st, localSHA, kept.etag)
            }
            try install(fetched, at: url)
            guard let after = FileStat.of(url.path) else { throw BucketError.localIO(path: url.path, description: "downloaded file vanished") }
            await progress.conflict(.init(path: path, copy: copy, loser: .local, device: options.device, at: now,
                                          keptLocally: true, keptInBucket: canPush), copyEntry: copyEntry)
            await progress.downloaded(path, entry: entry(after, remoteSHA, remoteETag))
        }
    }

    /// A copy path that names no local file yet (a second conflict in the same second gets ` 2`, ` 3`, ...).
    func uniqueCopyPath(of path: String, device: String, at date: Date) -> String {
        var attempt = 1
        while true {
            // No upper bound: returning a name in use would overwrite that file.
            let copy = MediaConflict.copyPath(of: path, device: device, at: date, attempt: attempt)
            guard let url = try? SafeKey.fileURL(root: documents, key: copy) else { return copy }  // refused by the caller
            if FileStat.of(url.path, followSymlinks: false) == nil { return copy }
            attempt += 1
        }
    }

    /// Renames a fetched file into place (same folder, so atomic).
    func install(_ fetched: URL, at url: URL) throws {
        if rename(fetched.path, url.path) != 0 {
            throw BucketError.localIO(path: url.path, description: "cannot install the downloaded file: \(LocalFiles.errnoText())")
        }
    }

    // MARK: - Helpers

    func remoteKey(_ path: String) -> String { "\(user)/\(path)" }

    /// Where deleted objects go: `<user>/trash/` (temporary copies beside the manifest).
    var trash: MediaTrash { MediaTrash(store: store, user: user, scratch: manifestURL.deletingLastPathComponent()) }

    /// The bucket folder of a kind: `<user>/<kind>/`.
    func folder(of kind: MediaKind) -> String { "\(user)/\(kind.rawValue)/" }

    func localURL(_ path: String) -> URL {
        // Paths were checked with SafeKey when planned.
        (try? SafeKey.fileURL(root: documents, key: path)) ?? documents.appendingPathComponent(".rtsync-invalid")
    }

    /// Visits regular files below `folder`; an unreadable folder is an I/O error (it must not look like deletions).
    func walk(_ folder: URL, relative: String, removingOrphans: Bool = false, issues: inout [MediaSyncReport.FileIssue],
              _ visit: (String, LocalFile) -> Void) {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            issues.append(.init(path: relative, reason: "cannot read folder: \(error.localizedDescription)"))
            return
        }
        for name in names {
            // A download a killed run of this machine left (its process is gone); others' stay.
            if removingOrphans, TemporaryOwner.isOrphan(name, prefix: ".rtsync-tmp-") { unlink(folder.appendingPathComponent(name).path) }
            // Foundation's temp file of an atomic write in progress (an app's, or an older rtsync's) is no media.
            if name.hasPrefix(".rtsync-") || name.hasPrefix(".dat.nosync") || name.hasSuffix(".partial") || name.hasSuffix(".partial.etag")
                || name.hasSuffix(".rtsync-upload.json") { continue }
            let url = folder.appendingPathComponent(name)
            // Symbolic links are skipped: they could lead outside the documents folder.
            guard let st = FileStat.of(url.path, followSymlinks: false) else { continue }
            if st.isDirectory {
                walk(url, relative: relative + "/" + name, removingOrphans: removingOrphans, issues: &issues, visit)
            } else if st.isRegularFile {
                visit(relative + "/" + name, LocalFile(url: url, stat: st))
            }
        }
    }

    static func path(of action: Action) -> String {
        switch action {
        case .upload(let p), .download(let p, _), .deleteLocal(let p), .deleteRemote(let p), .touch(let p, _), .resolve(let p, _, _),
             .uploadUnlessTrashed(let p, _): return p
        }
    }

    static func reason(_ error: Error) -> String {
        (error as? BucketError)?.description ?? String(describing: error)
    }

    static func isPlainMD5(_ etag: String) -> Bool {
        etag.count == 32 && etag.allSatisfy { $0.isHexDigit }
    }

    static func md5Hex(of url: URL) throws -> String {
        Hashing.md5Hex(try Data(contentsOf: url, options: .alwaysMapped))
    }
}
