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
/// propagate only with ``MediaSyncOptions/delete`` and never after an I/O error in the same run.
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
    }

    /// Runs one sync and returns its report; per-file failures are in the report, not thrown.
    /// - Throws: ``BucketError`` when the bucket cannot be listed or the manifest cannot be read.
    public func run(_ options: MediaSyncOptions) async throws -> MediaSyncReport {
        let started = Date()
        let requestsBefore = store.requestCounter.total
        var report = MediaSyncReport(direction: options.direction, dryRun: options.dryRun)
        var manifest = try MediaManifest.load(from: manifestURL)
        var actions: [Action] = []
        var remoteByPath: [ExactPath: ObjectInfo] = [:]

        // Remote side: one listing of every wanted kind folder together (one LIST per 1,000 objects when
        // nothing lies between them; see ObjectStore.listFolders).
        let kinds = MediaKind.allCases.filter { options.kinds.contains($0) }
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
                walk(kindFolder, relative: kind.rawValue, issues: &report.errors) { path, file in
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
                }
            }
        } else {
            try await execute(actions, options: options, report: &report, manifest: &manifest)
            try manifest.save(to: manifestURL)
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
                if known == nil, l.stat.size == r.size, Self.isPlainMD5(r.etag),
                   let md5 = try? Self.md5Hex(of: l.url), md5 == r.etag {
                    // Same bytes on both sides: adopt without transferring.
                    if let sha = try? LocalFiles.sha256Hex(of: l.url) {
                        manifest[path] = .init(size: l.stat.size, mtimeNanoseconds: l.stat.mtimeNanoseconds, sha256: sha, etag: r.etag)
                        report.unchanged += 1
                        return
                    }
                }
                report.conflicts.append(path)
                switch options.direction {
                case .push: actions.append(.upload(path: path))
                case .pull: actions.append(.download(path: path, remote: r))
                case .both:
                    let remoteTime = r.lastModified ?? .distantPast
                    if l.stat.modificationDate >= remoteTime { actions.append(.upload(path: path)) }
                    else { actions.append(.download(path: path, remote: r)) }
                }
            }
        case (let l?, nil):
            if let known {
                let unchanged = known.size == l.stat.size && known.mtimeNanoseconds == l.stat.mtimeNanoseconds
                if options.delete && canPull && unchanged {
                    actions.append(.deleteLocal(path: path))
                } else if canPush {
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

    // MARK: - Execution

    /// Collects results from concurrent transfers.
    actor Progress {
        var report: MediaSyncReport
        var manifest: MediaManifest
        let total: Int
        var done = 0
        let show: Bool
        let started = Date()

        init(report: MediaSyncReport, manifest: MediaManifest, total: Int, show: Bool) {
            self.report = report
            self.manifest = manifest
            self.total = total
            self.show = show
        }

        func uploaded(_ path: String, entry: MediaManifest.Entry) {
            report.uploaded.append(path)
            report.bytesUploaded += entry.size
            manifest[path] = entry
            step()
        }

        func downloaded(_ path: String, entry: MediaManifest.Entry) {
            report.downloaded.append(path)
            report.bytesDownloaded += entry.size
            manifest[path] = entry
            step()
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
            case .upload, .download: transfers.append(action)
            case .deleteLocal, .deleteRemote: deletions.append(action)
            case .touch(let path, let stat):
                manifest[path]?.mtimeNanoseconds = stat.mtimeNanoseconds
                report.unchanged += 1
            }
        }
        let show = options.showProgress && isatty(STDERR_FILENO) == 1 && !transfers.isEmpty
        let progress = Progress(report: report, manifest: manifest, total: transfers.count, show: show)
        let window = max(1, options.concurrency)
        await withTaskGroup(of: Void.self) { group in
            var next = 0
            func addNext() {
                let action = transfers[next]
                next += 1
                group.addTask { await self.transfer(action, progress: progress) }
            }
            while next < transfers.count && next < window { addNext() }
            while await group.next() != nil {
                if next < transfers.count { addNext() }
            }
        }
        report = await progress.report
        manifest = await progress.manifest
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
                    try await store.delete(key: remoteKey(path))
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

    func transfer(_ action: Action, progress: Progress) async {
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
                let info = try await store.download(key: remoteKey(path), to: url)
                guard let after = FileStat.of(url.path) else {
                    throw BucketError.localIO(path: url.path, description: "downloaded file vanished")
                }
                let sha = try LocalFiles.sha256Hex(of: url)
                await progress.downloaded(path, entry: .init(size: after.size, mtimeNanoseconds: after.mtimeNanoseconds,
                                                             sha256: sha, etag: info.etag.isEmpty ? remote.etag : info.etag))
            } catch {
                await progress.failed(path, Self.reason(error))
            }
        default:
            break
        }
    }

    // MARK: - Helpers

    func remoteKey(_ path: String) -> String { "\(user)/\(path)" }

    /// The bucket folder of a kind: `<user>/<kind>/`.
    func folder(of kind: MediaKind) -> String { "\(user)/\(kind.rawValue)/" }

    func localURL(_ path: String) -> URL {
        // Paths were checked with SafeKey when planned.
        (try? SafeKey.fileURL(root: documents, key: path)) ?? documents.appendingPathComponent(".rtsync-invalid")
    }

    /// Visits regular files below `folder`; an unreadable folder is an I/O error (it must not look like deletions).
    func walk(_ folder: URL, relative: String, issues: inout [MediaSyncReport.FileIssue], _ visit: (String, LocalFile) -> Void) {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            issues.append(.init(path: relative, reason: "cannot read folder: \(error.localizedDescription)"))
            return
        }
        for name in names {
            if name.hasPrefix(".rtsync-") || name.hasSuffix(".partial") || name.hasSuffix(".partial.etag")
                || name.hasSuffix(".rtsync-upload.json") { continue }
            let url = folder.appendingPathComponent(name)
            // Symbolic links are skipped: they could lead outside the documents folder.
            guard let st = FileStat.of(url.path, followSymlinks: false) else { continue }
            if st.isDirectory {
                walk(url, relative: relative + "/" + name, issues: &issues, visit)
            } else if st.isRegularFile {
                visit(relative + "/" + name, LocalFile(url: url, stat: st))
            }
        }
    }

    static func path(of action: Action) -> String {
        switch action {
        case .upload(let p), .download(let p, _), .deleteLocal(let p), .deleteRemote(let p), .touch(let p, _): return p
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
