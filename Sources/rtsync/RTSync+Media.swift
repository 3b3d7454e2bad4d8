import ArgumentParser
import BucketClient
import BucketSync
import Foundation
import SyncEngine

extension RTSync {
    /// `rtsync media`: selective media sync and the download cache.
    struct Media: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "media",
            abstract: "Sync recordings and images with the bucket, or fetch media URLs into a cache.",
            subcommands: [Sync.self, Restore.self, Fetch.self]
        )
    }
}

extension RTSync.Media {
    /// `rtsync media sync`.
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sync",
            abstract: "Sync <documents>/recordings and <documents>/images with <user>/recordings and <user>/images.",
            discussion: """
            Without --recordings or --images both folders sync. Deletions are propagated only with \
            --delete (or "delete" in --config, mediaDeletes in the settings of --home), and never after an I/O \
            error in the same run: a file deleted here is moved to <user>/trash/<UTC date>/<path> in the bucket \
            (`rtsync media restore` puts it back; pruned after 30 days), and a file deleted in the bucket is \
            deleted here unless it was edited here since the last sync (the edit wins and is uploaded again). \
            With --home, documents, user, bucket and the selection (mediaMode, mediaSelection) come from that \
            home's settings.json unless given. A file changed here and in the bucket \
            since the last sync keeps the newer version under its name and the other beside it as \
            'name (conflict <device> <UTC date>).ext', here and in the bucket; `rtsync conflicts media` lists them. An unchanged tree costs one \
            LIST per 1,000 objects for both folders together (one more for each other folder between \
            them, such as inbound/) and no uploads or hashing. A run with failed files ends with one error line counting \
            them and a hint; finished transfers are recorded as they finish, so the next run redoes only what is left. \
            Ctrl-C or SIGTERM lets running transfers finish, starts no more, says what is left and exits 130 or 143.
            """
        )

        /// --bucket and --home (a home's settings.json gives documents, user, bucket, mediaMode, mediaSelection,
        /// mediaDeletes, mediaTrashDays and mediaIncludeLitter; without --documents and --user the default home is used).
        @OptionGroup var bucketOptions: BucketOptions
        var home: String? { bucketOptions.home ?? (documents == nil || user == nil ? RTSync.existingDefaultHome() : nil) }
        @Option(help: ArgumentHelp("Local documents folder (default with --home: <home>/documents).", valueName: "dir")) var documents: String?
        @Option(help: ArgumentHelp("User id: the first segment of the bucket keys (default with --home: its user).", valueName: "id")) var user: String?
        @Option(help: ArgumentHelp("Manifest file (default: <documents>/.rtsync-media-manifest.json, shared with rtsync sync --media).", valueName: "file"))
        var manifest: String?
        @Option(help: ArgumentHelp("JSON media sync settings (mode all|selective, kinds, direction, include, exclude, select, delete, trashDays, includeLitter); flags override it.",
                                   valueName: "file"))
        var config: String?
        @Flag(help: "Sync recordings/.") var recordings = false
        @Flag(help: "Sync images/.") var images = false
        @Flag(help: "Copy local changes to the bucket only.") var push = false
        @Flag(help: "Copy bucket changes to the local folder only.") var pull = false
        @Flag(help: "Copy both ways (the default).") var both = false
        @Option(help: ArgumentHelp("Only sync paths matching this glob (repeatable).", valueName: "glob")) var include: [String] = []
        @Option(help: ArgumentHelp("Never sync paths matching this glob (repeatable).", valueName: "glob")) var exclude: [String] = []
        @Option(help: ArgumentHelp("Only sync this documents-relative file or folder (repeatable).", valueName: "path"))
        var select: [String] = []
        @Flag(name: .customLong("dry-run"), help: "Show what would change; change nothing.") var dryRun = false
        @Flag(help: "Propagate deletions.") var delete = false
        @Flag(name: .customLong("include-litter"), help: "Also sync .DS_Store, ._*, Thumbs.db, desktop.ini and .*.swp files (left out by default).")
        var includeLitter = false
        @Option(help: ArgumentHelp("Name of this device in conflict copies (default: the host name).", valueName: "name"))
        var device: String?
        @Flag(help: "Print the report as JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        func validate() throws {
            if [push, pull, both].filter({ $0 }).count > 1 {
                throw ValidationError("give at most one of --push, --pull, --both")
            }
            if home == nil && (documents == nil || user == nil) {
                throw ValidationError("give --documents and --user, or --home (no home at $RTSYNC_HOME or ~/.rtsync either)")
            }
            if let documents {
                var isDirectory: ObjCBool = false
                if !FileManager.default.fileExists(atPath: documents, isDirectory: &isDirectory) || !isDirectory.boolValue {
                    throw ValidationError("the documents folder does not exist (\(documents))")
                }
            }
        }

        func run() async throws {
            let signals = StopSignals()
            let rtHome = home.map { RTSyncHome(root: URL(fileURLWithPath: $0)) }
            let settings: RTSyncSettings?
            do { settings = try rtHome?.loadSettings() } catch { throw report(error) }
            var options: MediaSyncOptions
            if let config {
                options = try await reportingBucketErrors { try MediaSyncSettings.load(from: URL(fileURLWithPath: config)).options() }
            } else if let settings, let rtHome {
                do { options = try settings.mediaSyncOptions(file: rtHome.settingsFile.path) } catch { throw report(error) }
            } else {
                options = MediaSyncOptions()
            }
            let documents = self.documents ?? rtHome!.documents.path
            let user = self.user ?? settings?.userID ?? ""
            if let rtHome, settings?.userID.isEmpty != false, self.user == nil {
                throw fail("no user id in the settings of \(rtHome.root.path)", hint: "run rtsync init --home \(rtHome.root.path), or pass --user")
            }
            try FileManager.default.createDirectory(atPath: documents, withIntermediateDirectories: true)
            if recordings || images {
                options.kinds = Set((recordings ? [MediaKind.recordings] : []) + (images ? [MediaKind.images] : []))
            }
            if push || pull || both { options.direction = push ? .push : pull ? .pull : .both }
            if !include.isEmpty { options.include = include.map(Glob.init) }
            if !exclude.isEmpty { options.exclude = exclude.map(Glob.init) }
            if !select.isEmpty { options.select = select }
            options.dryRun = dryRun
            if let device { options.device = device }
            if includeLitter { options.excludeLitter = false }
            options.delete = options.delete || delete
            // The command's own display draws progress (bytes, rate, ETA), not the library's per-file line.
            options.showProgress = false
            options.shouldStop = { signals.stopRequested }
            let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
            display.set("media sync")
            let documentsURL = URL(fileURLWithPath: documents, isDirectory: true)
            let manifestURL = manifest.map { URL(fileURLWithPath: $0) } ?? MediaManifest.defaultURL(documents: documentsURL)
            if let rtHome, manifest == nil, self.documents == nil {
                // As `rtsync sync --media` does: a manifest an older version kept in support/ is merged first.
                try await reportingBucketErrors {
                    try MediaManifest.absorb(rtHome.support.appendingPathComponent("media-manifest.json"), into: manifestURL)
                }
            }
            let report = try await reportingBucketErrors {
                let store = try mediaStore(bucketOptions, settings: settings, home: rtHome)
                // Media shared with this user as a parcel (it encrypts names) goes into the home's documents first, so
                // this run uploads it under this user's names.
                if let rtHome, self.documents == nil, !dryRun, options.direction != .push {
                    let taken = try await ObjectStoreRemote(store: store, isLocal: false).takeSharedMedia(home: rtHome)
                    if !taken.isEmpty {
                        FileHandle.standardError.write(Data("shared: \(taken.count) file(s) taken from parcels: \(terminalSafe(taken.joined(separator: ", "), limit: 2_000))\n".utf8))
                    }
                }
                let sync = try MediaSync(store: store, documents: documentsURL, user: user, manifestURL: manifestURL)
                return try await display.run { try await sync.run(options) }
            }
            for refused in report.refused {
                printError("refused bucket key: \(refused.reason) (\(refused.path))",
                           hint: nil)
            }
            // A few failures by name; the run's one `error:` line below counts them all.
            for failure in report.errors.prefix(Self.failuresShown) {
                FileHandle.standardError.write(Data("failed: \(terminalSafe(failure.path)): \(terminalSafe(failure.reason, limit: 500))\n".utf8))
            }
            if report.errors.count > Self.failuresShown {
                FileHandle.standardError.write(Data("failed: and \(report.errors.count - Self.failuresShown) more (--json lists them)\n".utf8))
            }
            for c in report.conflictCopies {
                FileHandle.standardError.write(Data("conflict: \(c.path) changed on both sides; the \(c.loser == .local ? "local" : "bucket's") version is kept as \(c.copy.debugDescription)\n".utf8))
            }
            for path in report.keptOverDelete {
                FileHandle.standardError.write(Data("kept: \(path) was deleted in the bucket but edited here since the last sync; the edit wins and is uploaded again\n".utf8))
            }
            if json {
                FileHandle.standardOutput.write(try report.jsonData())
                FileHandle.standardOutput.write(Data("\n".utf8))
            } else {
                print(report.summary)
            }
            let bucket = (try? bucketOptions.bucketURL()) ?? settings?.bucket ?? documents
            if let sig = signals.receivedSignal {
                throw StopSignals.stopped("media sync", by: sig, done: "\(report.uploaded.count) uploaded, \(report.downloaded.count) downloaded",
                                          left: "\(report.notStarted) transfer(s) or deletion(s) not started" + (report.errors.isEmpty ? "" : ", \(report.errors.count) failed"),
                                          path: bucket, hint: "nothing was lost; run the same command again: finished files are not sent again")
            }
            if !report.succeeded { throw fail(Self.incomplete(report, bucket: bucket), hint: Self.retryHint(report)) }
        }

        /// Failed files named one by one before the summary.
        static let failuresShown = 3

        /// The one error line of a run with failed files: how many failed, and what finished.
        static func incomplete(_ report: MediaSyncReport, bucket: String) -> String {
            "media sync incomplete: \(report.errors.count) file(s) failed; \(report.uploaded.count) uploaded and \(report.downloaded.count) downloaded "
                + "in this run are recorded and will not be sent again (\(bucket))"
        }

        /// The hint of a run with failed files.
        static func retryHint(_ report: MediaSyncReport) -> String {
            let network = report.errors.contains { isNetworkReason($0.reason) }
            return (network ? "the bucket did not answer every request (server errors or dropped connections); " : "")
                + "run the same command again to retry the \(report.errors.count) failed file(s) only"
                + (report.deletionsSkipped ? "; deletions were skipped and run then too" : "")
        }

        /// Whether a failure reason is the network's or the server's (not a local file's).
        static func isNetworkReason(_ reason: String) -> Bool {
            let r = reason.lowercased()
            return ["http 5", "status 5", "server error", "internalerror", "service unavailable", "slowdown", "transport", "connection",
                    "timed out", "network"].contains { r.contains($0) }
        }
    }

    /// `rtsync media restore PATH...`: deleted media back from the bucket's trash.
    struct Restore: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "restore",
            abstract: "Put deleted recordings or images back from <user>/trash/ in the bucket, or list the trash.",
            discussion: """
            Media sync with deletions on moves each deleted object to <user>/trash/<UTC date>/<path> instead of \
            destroying it, and prunes it after mediaTrashDays (default 30). This puts the newest deleted version of \
            each documents-relative PATH (such as images/receipt.jpg) back at <user>/<path>, so the next media sync \
            of every device downloads it again. A path that exists in the bucket is not overwritten.
            """
        )

        /// --bucket and --home (user and bucket come from the home's settings.json unless given).
        @OptionGroup var bucketOptions: BucketOptions
        @Option(help: ArgumentHelp("User id: the first segment of the bucket keys.", valueName: "id")) var user: String?
        var home: String? { bucketOptions.home ?? (user == nil ? RTSync.existingDefaultHome() : nil) }
        @Flag(help: "List what the trash holds, newest first, instead of restoring.") var list = false
        @Flag(help: "Print JSON.") var json = false
        @Argument(help: ArgumentHelp("Documents-relative paths to restore (images/a.jpg).", valueName: "path")) var paths: [String] = []

        func validate() throws {
            if home == nil && user == nil { throw ValidationError("give --user, or --home (no home at $RTSYNC_HOME or ~/.rtsync either)") }
            if !list && paths.isEmpty { throw ValidationError("give a path to restore, or --list") }
        }

        func run() async throws {
            let rtHome = home.map { RTSyncHome(root: URL(fileURLWithPath: $0)) }
            let settings: RTSyncSettings?
            do { settings = try rtHome?.loadSettings() } catch { throw report(error) }
            guard let user = user ?? settings?.userID, !user.isEmpty else {
                throw fail("no user id in the settings of \(rtHome?.root.path ?? "")", hint: "pass --user")
            }
            try await reportingBucketErrors {
                let trash = MediaTrash(store: try mediaStore(bucketOptions, settings: settings, home: rtHome), user: user,
                                       scratch: rtHome?.support ?? FileManager.default.temporaryDirectory)
                if list {
                    let items = try await trash.list()
                    if json { printJSON(items); return }
                    for item in items {
                        print("\(ISO8601DateFormatter().string(from: item.deletedAt))\t\(item.size)\t\(item.path)")
                    }
                    print("\(items.count) deleted file(s) in \(trash.prefix)")
                    return
                }
                var restored: [MediaTrash.Item] = []
                for path in paths {
                    do {
                        restored.append(try await trash.restore(path: path))
                    } catch BucketError.notFound {
                        throw fail("nothing deleted under this path in the trash (\(trash.prefix)<date>/\(path))",
                                   hint: "rtsync media restore --list shows what the trash holds; entries older than mediaTrashDays are pruned")
                    } catch BucketError.preconditionFailed(let key) {
                        throw fail("the file exists in the bucket; not overwritten (\(key))",
                                   hint: "rename or delete it first, or sync to get it")
                    }
                    if !json { print("restored \(path) (deleted \(ISO8601DateFormatter().string(from: restored.last!.deletedAt))); the next media sync downloads it") }
                }
                if json { printJSON(restored) }
            }
        }
    }

    /// `rtsync media fetch URL...`.
    struct Fetch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "fetch",
            abstract: "Fetch media URLs (http, https, file) into a cache folder, revalidating cached copies.")

        @Argument(help: "URLs to fetch.") var urls: [String]
        @Option(help: ArgumentHelp("Cache folder.", valueName: "dir")) var cache: String
        @Option(name: .customLong("max-bytes"), help: "Evict least recently used files past this size.")
        var maxBytes: Int64 = 512 << 20
        @Flag(help: "Print results as JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions
        @Option(name: .customLong("decrypt-to"), help: ArgumentHelp("Decrypt the (one) fetched object with --home's content keys and write the plaintext here; the cache keeps the ciphertext.", valueName: "file"))
        var decryptTo: String?
        @Option(help: ArgumentHelp("With --decrypt-to: the home whose content keys decrypt.", valueName: "dir")) var home: String?
        @Option(help: ArgumentHelp("With --decrypt-to: only plaintext bytes START-END (END may be left out); only the chunks holding them are decrypted.", valueName: "start-end"))
        var range: String?
        @Option(help: ArgumentHelp("With --decrypt-to: the media path an object under an encrypted name is bound to (images/a.jpg).", valueName: "path"))
        var name: String?

        /// `--range START-END` as a byte range.
        var byteRange: ByteRange? {
            get throws {
                guard let range else { return nil }
                let parts = range.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, let start = Int64(parts[0]), start >= 0 else { throw ValidationError("--range is START-END or START- (\(range))") }
                if parts[1].isEmpty { return ByteRange(start: start) }
                guard let end = Int64(parts[1]), end >= start else { throw ValidationError("--range is START-END with END >= START (\(range))") }
                return ByteRange(start: start, end: end)
            }
        }

        func validate() throws {
            if urls.isEmpty { throw ValidationError("give at least one URL") }
            if decryptTo != nil && (urls.count != 1 || home == nil) { throw ValidationError("--decrypt-to takes one URL and --home") }
            if decryptTo == nil && (range != nil || name != nil) { throw ValidationError("--range and --name go with --decrypt-to") }
            _ = try byteRange
            if maxBytes <= 0 { throw ValidationError("--max-bytes must be positive") }
            for text in urls {
                guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                      ["http", "https", "file"].contains(scheme) else {
                    throw ValidationError("not an http, https or file URL (\(text))")
                }
            }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let downloadCache = try DownloadCache(folder: URL(fileURLWithPath: cache, isDirectory: true), maxBytes: maxBytes)
                var results: [DownloadCache.Result] = []
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                defer { display.finish() }
                if let decryptTo, let home {
                    let ring = try RTSync.Keys.requireKeyring(RTSyncHome.resolve(home))
                    let (result, plain) = try await downloadCache.decrypted(URL(string: urls[0])!, range: try byteRange, keyring: ring, name: name)
                    let target = URL(fileURLWithPath: decryptTo)
                    let temp = target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).\(UUID().uuidString).tmp")
                    do {
                        try plain.write(to: temp)
                        if FileManager.default.fileExists(atPath: target.path) { try FileManager.default.removeItem(at: target) }
                        try FileManager.default.moveItem(at: temp, to: target)
                    } catch {
                        try? FileManager.default.removeItem(at: temp)
                        throw BucketError.localIO(path: target.path, description: error.localizedDescription)
                    }
                    // A ranged read of a URL not in the cache fetched only its chunks and cached nothing (no result).
                    if json {
                        if let result { printJSON([result]) } else { printJSON([["url": urls[0], "status": "ranged"]]) }
                    } else {
                        print("\(result?.status.rawValue ?? "ranged")\t\(target.path)\t\(urls[0])\t\(plain.count) bytes decrypted")
                    }
                    return
                }
                for (index, text) in urls.enumerated() {
                    display.set("fetch \(index + 1)/\(urls.count): \(text)")
                    let result = try await TransferProgress.$current.withValue(display.transfers) { try await downloadCache.fetch(URL(string: text)!) }
                    results.append(result)
                    if !json { display.printAbove("\(result.status.rawValue)\t\(result.fileURL.path)\t\(result.url)") }
                }
                if json { printJSON(results) }
            }
        }
    }
}

extension RTSync {
    /// The default home ($RTSYNC_HOME, else ~/.rtsync) when it has settings, for commands whose --home is optional.
    static func existingDefaultHome() -> String? {
        let home = RTSyncHome.resolve(nil)
        return FileManager.default.fileExists(atPath: home.settingsFile.path) ? home.root.path : nil
    }
}

/// The bucket of a media command: --bucket or RTSYNC_BUCKET, else (with --home) the home's bucket or `<home>/bucket`.
func mediaStore(_ options: BucketOptions, settings: RTSyncSettings?, home: RTSyncHome?) throws -> any ObjectStore {
    guard let home, options.bucket == nil, ProcessInfo.processInfo.environment["RTSYNC_BUCKET"]?.isEmpty ?? true else {
        let store = try options.makeStore()
        // A home's media stays encrypted whichever bucket option named the store.
        if let home, let settings { return try home.encrypting(store, settings: settings) }
        return store
    }
    let raw = try makeObjectStore(urlString: HomeOptions.bucketURL(of: home, settings: settings))
    return try settings.map { try home.encrypting(raw, settings: $0) } ?? raw
}
