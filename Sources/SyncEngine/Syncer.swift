import Crypto
import DiffFormat
import Foundation
import RTSQLite

/// What one phase of a sync did.
public struct SyncPhase: Sendable, Codable {
    /// Phase name: catch-up (only after a restore or when compaction pruned diffs this device had not applied: the newest
    /// database in the bucket is merged first), export, upload, download, apply, media, backup.
    public var name: String
    /// Whether it completed.
    public var ok: Bool
    /// One line saying what happened.
    public var summary: String
    /// The error, when it failed (everything it did not finish stays queued for the next run).
    public var error: String?
    /// What the user can do about the error, when there is something better than running sync again.
    public var hint: String? = nil
}

/// The report of `Syncer.sync`.
public struct SyncReport: Sendable, Codable {
    /// Phases in order.
    public var phases: [SyncPhase] = []
    /// The diff exported this run, if any.
    public var exported: ExportResult?
    /// Keys uploaded.
    public var uploaded: [String] = []
    /// Keys downloaded.
    public var downloaded: [String] = []
    /// Apply results.
    public var applied: [ApplyReport] = []
    /// Backup made, if any.
    public var backup: BackupInfo?
    /// Requests made to the bucket.
    public var requests = 0
    /// Leftovers of interrupted runs removed (or backups adopted) when this run started.
    public var cleanedUp: [String] = []
    /// Whether the run stopped early at a safe point because `Syncer.shouldStop` asked it to.
    public var interrupted = false
    /// Tables where this run's export dropped inserts or updates of rows whose key holds a NULL: never sent, since no
    /// device can find such a row by its key (`SyncDatabase.lastExportDroppedNullKeys`).
    public var nullKeyTables: [String] = []
    /// Whether every phase completed.
    public var ok: Bool { phases.allSatisfy(\.ok) }
}

/// Brings the primary database up to date with the bucket and publishes local changes: export to the
/// outbox, upload the outbox to `<user>/inbound/`, download and apply diffs not yet applied, then media
/// and a backup when due. Any phase that fails leaves its work queued for the next run.
public struct Syncer: Sendable {
    /// The folders.
    public var home: RTSyncHome
    /// The bucket.
    public var remote: any RemoteStore
    /// Retries of network steps.
    public var retry: RemoteRetryPolicy
    /// Signs exported diffs when set.
    public var signingKey: Curve25519.Signing.PrivateKey?
    /// Raw Ed25519 public keys accepted; with `requireSignatures`, unsigned or otherwise signed diffs are rejected.
    public var trustedKeys: [[UInt8]]
    /// The user each trusted key (lower-case hex) speaks for; a signed diff whose author differs is refused.
    public var keyUsers: [String: String] = [:]
    /// Custom resolvers for column conflicts, by table (tables with the default policy), used by every apply of the
    /// run. A resolver must decide the same way on every device (see ``ConflictResolver``). They are installed on the
    /// database at the start of each run, replacing one set with `SyncDatabase.setResolver(for:_:)` for the same table.
    public var resolvers: [String: ConflictResolver] = [:]
    /// Media phase, supplied by the caller (BucketClient's media sync); nil skips it.
    public var media: (@Sendable () async throws -> String)?
    /// Told where the run is (phase, items done and in all, the current diff) as it goes, for a progress display;
    /// the `progress` closure of `sync` gets the same as text.
    public var onProgress: (@Sendable (SyncProgress) -> Void)?

    /// Makes a syncer.
    public init(home: RTSyncHome, remote: any RemoteStore, retry: RemoteRetryPolicy = RemoteRetryPolicy(), signingKey: Curve25519.Signing.PrivateKey? = nil,
                trustedKeys: [[UInt8]] = [], media: (@Sendable () async throws -> String)? = nil) {
        self.home = home
        self.remote = remote
        self.retry = retry
        self.signingKey = signingKey
        self.trustedKeys = trustedKeys
        self.media = media
    }

    /// The inbound prefix of a user.
    public static func inboundPrefix(user: String) -> String { user + "/inbound/" }

    /// Checks that sync may run: not in demo mode, and the tier allows this bucket.
    /// - Throws: `LifecycleError.demoMode` or `.tierRefused`.
    public func checkAllowed(_ settings: RTSyncSettings) throws {
        if settings.demo { throw LifecycleError.demoMode(action: "sync") }
        try settings.tier.require(.syncDatabase(cloud: !remote.isLocal))
        // A bucket opened without the home's settings (ObjectStoreRemote.open(url)) would upload plaintext.
        if !settings.encryption.isEmpty && !settings.userID.isEmpty {
            let folders = ["inbound", "backups", "recordings", "images"]
            let missing = settings.encryption.filter { folders.contains($0) && !remote.encryptedPrefixes.contains("\(settings.userID)/\($0)/") }
            if !missing.isEmpty { throw SyncEngineError.remoteNotEncrypting(kinds: missing, settings: home.settingsFile.path) }
        }
    }

    /// How long a sync waits for another run on the same home to finish before giving up (`shouldStop` ends the
    /// wait early: the report says the run was interrupted; a cancelled task ends it with `CancellationError`).
    public var lockWait: TimeInterval = 30
    /// Most diffs downloaded at the same time.
    public var downloadConcurrency = 8
    /// Diff objects up to this size are read into memory and written once, expanded, into the inbox (larger ones,
    /// and those of a store that delivers only files, go through a staging file): a catch-up makes one new file per
    /// diff instead of two.
    public var inMemoryDownloadLimit: Int64 = 4 << 20
    /// Most small diffs applied in one transaction (`SyncDatabase.applyGroupLimit`); 1 applies each alone.
    public var applyGroupLimit = 256
    /// Asked at safe points (between phases, diffs and uploads, and every few hundred rows of an export), as is the
    /// cancellation of the task running the sync; when it returns true the run stops there: an export in progress is rolled back and its temp file removed, a diff
    /// being applied is finished, and the report lists what is left (`SyncReport.interrupted`).
    public var shouldStop: (@Sendable () -> Bool)?
    /// How old leftovers that cannot be tied to a process must be before a run removes them (`HomeDebris`).
    public var debrisAge: TimeInterval = HomeDebris.defaultAge

    /// The marker of a cursor that still has to be published (`support/.cursor-pending`).
    public static func pendingCursorMarker(_ home: RTSyncHome) -> URL { home.support.appendingPathComponent(".cursor-pending") }

    /// The ids of the diffs among `listed` objects under `prefix` (an inbound folder); other names are left out.
    static func diffIDs(in listed: [RemoteObject], under prefix: String) -> [String] {
        listed.compactMap { DiffFile.diffID(fromFileName: String($0.key.dropFirst(prefix.count)))?.string }
    }

    /// Downloads the diff `obj` (compressed for transport, `DiffTransport`) and installs it expanded as `local`: read
    /// into memory when the store can (a small diff of a plain store), else fetched to `staging` first (removed after).
    /// A file that does not expand is installed as it came, and apply quarantines it.
    static func fetchDiff(_ obj: RemoteObject, to local: URL, staging: URL, remote: any RemoteStore, retry: RemoteRetryPolicy, inMemoryLimit: Int64) async throws {
        if let data = try await retry.run({ try await remote.contents(of: obj, limit: inMemoryLimit) }) {
            try DiffTransport.install(data, as: local, name: obj.key)
        } else {
            defer { try? FileManager.default.removeItem(at: staging) }
            try await retry.run { try await remote.download(obj, to: staging) }
            try DiffTransport.install(staging, as: local, name: obj.key)
        }
    }

    /// The marker of a backup upload that failed: the next sync makes and uploads a backup even when none is due.
    public static func pendingBackupUploadMarker(_ home: RTSyncHome) -> URL { home.support.appendingPathComponent(".backup-upload-pending") }

    /// Runs one sync. With `dryRun`, only reports what would be uploaded and downloaded.
    ///
    /// Cancelling the task that runs it (`Task.cancel()`) stops the run at its next safe point, as ``shouldStop``
    /// does: an export in progress is rolled back, a diff being applied is finished, nothing is lost, and the report
    /// comes back with `interrupted` set, listing what is left for the next run.
    /// - Throws: only for refusals: demo mode, tier (`LifecycleError`), a database without a user id
    ///   (`SyncEngineError.noUserID`) or one that looks copied from another device (`.databaseCopied`), another run
    ///   holding the location's lock (`LifecycleError.homeBusy`); network failures are reported in the phases.
    public func sync(dryRun: Bool = false, progress: @Sendable (String) -> Void = { _ in }) async throws -> SyncReport {
        let settings = try home.loadSettings()
        try checkAllowed(settings)
        try home.createFolders()
        let cancelled = CancellationFlag()
        let asked = shouldStop
        let stop: @Sendable () -> Bool = { cancelled.isSet || (asked?() ?? false) }
        // One run at a time per home: a second run's outbox clean-up would delete the diff this one has just
        // written and not yet recorded, and its export and apply would interleave with this one's. The
        // compaction and backup it runs reuse the lock.
        do {
            return try await withTaskCancellationHandler {
                try await HomeLock.withLock(home, wait: lockWait, shouldStop: stop) {
                    try await syncLocked(settings: settings, dryRun: dryRun, stop: stop, progress: progress)
                }
            } onCancel: {
                cancelled.set()
            }
        } catch LifecycleError.lockWaitStopped {
            // A cancelled task gets its `CancellationError`, as from any wait.
            if cancelled.isSet { throw CancellationError() }
            // `shouldStop` ended the wait for another run's lock: nothing was started.
            var report = SyncReport()
            report.phases.append(SyncPhase(name: "stopped", ok: false,
                                           summary: "interrupted while waiting for another run on this home; left for the next run: the whole sync"))
            report.interrupted = true
            return report
        }
    }

    private func syncLocked(settings: RTSyncSettings, dryRun: Bool, stop: @escaping @Sendable () -> Bool,
                            progress text: @Sendable (String) -> Void) async throws -> SyncReport {
        let onProgress = self.onProgress
        /// Tells both listeners: the structured one and the text one.
        func step(_ p: SyncProgress) {
            onProgress?(p)
            text(p.description)
        }
        /// A catch-up's messages, to both listeners.
        @Sendable func catchUpProgress(_ message: String) {
            onProgress?(SyncProgress(phase: .catchUp, item: message))
            text(message)
        }
        let db = try SyncDatabase(path: home.database.path)
        db.applyGroupLimit = applyGroupLimit
        // A database never initialized for sync must not sync under an empty user (its keys would start with "/").
        let user = try db.syncUserID(settings: settings)
        guard !user.isEmpty else { throw SyncEngineError.noUserID(path: home.database.path) }
        if !db.isTracked { try db.trackAllTrackable() }
        // A copy of another device's database would sync under that device's site id.
        let location = try db.checkLocation()
        if location.looksCopied { throw SyncEngineError.databaseCopied(path: home.database.path, recordedPath: location.recordedPath ?? "") }
        let shouldStop: (@Sendable () -> Bool)? = stop
        for (table, resolver) in resolvers { db.setResolver(for: table, resolver) }
        let inbound = Self.inboundPrefix(user: user)
        let fm = FileManager.default
        var report = SyncReport()
        let startRequests = remote.requestsMade
        let stopRequested = { stop() }
        /// Ends the run at a safe point before `phase`, saying what stays for the next run.
        func stopped(before phase: String) -> SyncReport {
            var left: [String] = []
            let pending = (try? db.pendingChangeCount()) ?? 0
            if pending > 0 { left.append("\(pending) change(s) to export") }
            let outbox = ((try? fm.contentsOfDirectory(atPath: home.outbox.path)) ?? []).filter { DiffFile.diffID(fromFileName: $0) != nil }.count
            if outbox > 0 { left.append("\(outbox) diff(s) to upload") }
            let inbox = ((try? fm.contentsOfDirectory(atPath: home.inbox.path)) ?? []).filter { DiffFile.diffID(fromFileName: $0) != nil }.count
            if inbox > 0 { left.append("\(inbox) downloaded diff(s) to apply") }
            left.append("the \(phase) phase and those after it")
            report.phases.append(SyncPhase(name: "stopped", ok: false, summary: "interrupted before \(phase); left for the next run: " + left.joined(separator: ", ")))
            report.interrupted = true
            report.requests = remote.requestsMade - startRequests
            return report
        }

        // A database restored from a backup first catches up on what compaction may have pruned since.
        var caughtUpFrom: String?
        if !dryRun { caughtUpFrom = await catchUpAfterRestore(db: db, user: user, report: &report, progress: catchUpProgress) }

        // Diffs this database has applied or made (read once; the export below adds its own id).
        var applied = Set(try db.query("SELECT diff_id FROM rtsync_applied").compactMap { $0[0].string })

        // Leftovers of interrupted runs: temp files, stale apply folders, unlisted backups, partial downloads of
        // diffs applied since (this run holds the lock, so none of them is another run's).
        if !dryRun {
            report.cleanedUp = HomeDebris.clean(home, olderThan: debrisAge)
            for name in (try? fm.contentsOfDirectory(atPath: home.inbox.path)) ?? []
            where (name.hasPrefix(".") && name.contains(".sqlite.incoming")) || name.hasSuffix(".sqlite.expanding") {
                // A diff download cut short before it was expanded into the inbox (and its resume files), or while
                // it was being written there (`DiffTransport.install` renames it into place only when complete).
                let url = home.inbox.appendingPathComponent(name)
                if (try? fm.removeItem(at: url)) != nil { report.cleanedUp.append(url.path) }
            }
            for name in (try? fm.contentsOfDirectory(atPath: home.inbox.path)) ?? [] where name.hasSuffix(".partial") || name.hasSuffix(".partial.etag") {
                let diffName = String(name.prefix(upTo: name.range(of: ".partial")!.lowerBound))
                guard let id = DiffFile.diffID(fromFileName: diffName), applied.contains(id.string) else { continue }
                let url = home.inbox.appendingPathComponent(name)
                if (try? fm.removeItem(at: url)) != nil { report.cleanedUp.append(url.path) }
            }
            if let tidied = try? BackupManager(home: home, keep: settings.keepBackups).tidy() {
                report.cleanedUp += tidied.removed + tidied.adopted.map { "adopted backup \($0)" }
            }
            // The user's folder itself too: compaction writes <user>/snapshot.json there.
            report.cleanedUp += await remote.removeStaleTemporaryFiles(prefixes: [inbound, user + "/backups/", user + "/devices/", user + "/"], olderThan: debrisAge)
            // A backup upload cut short leaves its multipart upload open in the bucket (stored, billed, never listed).
            report.cleanedUp += await remote.abandonInterruptedUploads(in: home.backups, keyPrefix: user + "/backups/")
            if !report.cleanedUp.isEmpty {
                report.phases.append(SyncPhase(name: "cleanup", ok: true, summary: "removed or adopted \(report.cleanedUp.count) leftover(s) of interrupted runs"))
            }
        }

        // 0. A diff in the outbox that the database does not record as its own was left by an export that
        // crashed before committing; its changes are still pending and go into the next export instead.
        // A diff a site this database used before a restore wrote and had not uploaded is that site's real
        // work: it stays and is uploaded.
        if !dryRun {
            let retired = Set(((try? db.retiredSites()) ?? []).map(\.site))
            for name in ((try? fm.contentsOfDirectory(atPath: home.outbox.path)) ?? []) {
                if let id = DiffFile.diffID(fromFileName: name), !applied.contains(id.string) {
                    let file = home.outbox.appendingPathComponent(name)
                    if !retired.isEmpty, let author = try? DiffReader(url: file).metadata.authorSite, retired.contains(author) { continue }
                    try? fm.removeItem(at: file)
                }
            }
        }

        // 1. Export local changes into the outbox (kept there until an upload is confirmed).
        if stopRequested() { return stopped(before: "export") }
        if dryRun {
            report.phases.append(SyncPhase(name: "export", ok: true, summary: "\(try db.pendingChangeCount()) change(s) would be exported"))
        } else {
            do {
                step(SyncProgress(phase: .export, itemsTotal: try? db.pendingChangeCount(), unit: "changes"))
                let exported = try db.exportChanges(to: home.outbox, signingKey: signingKey, shouldStop: shouldStop)
                report.nullKeyTables = db.lastExportDroppedNullKeys
                if let result = exported {
                    report.exported = result
                    applied.insert(result.diffID)
                    report.phases.append(SyncPhase(name: "export", ok: true, summary: "exported \(result.rows) row(s) to \(URL(fileURLWithPath: result.file).lastPathComponent)"))
                } else {
                    report.phases.append(SyncPhase(name: "export", ok: true, summary: "nothing to export"))
                }
            } catch SyncEngineError.interrupted {
                report.phases.append(SyncPhase(name: "export", ok: true, summary: "export stopped and rolled back (its temp file removed)"))
                return stopped(before: "export")
            } catch {
                report.phases.append(SyncPhase(name: "export", ok: false, summary: "export failed", error: "\(error)"))
            }
        }

        // 2. Upload the outbox; a conditional put makes a retried upload harmless.
        let outbox = ((try? fm.contentsOfDirectory(atPath: home.outbox.path)) ?? []).filter { DiffFile.diffID(fromFileName: $0) != nil }.sorted()
        if dryRun {
            report.phases.append(SyncPhase(name: "upload", ok: true, summary: "\(outbox.count) diff(s) would be uploaded"))
        } else {
            var failure: String?
            var failureHint: String?
            for name in outbox {
                if stopRequested() {
                    report.phases.append(SyncPhase(name: "upload", ok: true, summary: "uploaded \(report.uploaded.count) of \(outbox.count) diff(s)"))
                    return stopped(before: "upload of \(name)")
                }
                let file = home.outbox.appendingPathComponent(name)
                let key = inbound + name
                do {
                    step(SyncProgress(phase: .upload, itemsDone: report.uploaded.count, itemsTotal: outbox.count, item: name))
                    do {
                        try await retry.run { try await remote.upload(file: file, key: key, ifAbsent: true) }
                    } catch RemoteStoreError.alreadyExists {
                        // An earlier run uploaded it but stopped before clearing the outbox; unless the object is
                        // another diff of the same name, which must not take this one's place unnoticed.
                        guard try await remote.holdsTheSameDiff(key: key, as: file, scratch: home.support, retry: retry) else {
                            failure = "\(key): the bucket already holds a different diff under this name; \(name) stays in the outbox"
                            failureHint = "keep the outbox file and report this: two devices made the same diff id"
                            break
                        }
                    }
                    try fm.removeItem(at: file)
                    report.uploaded.append(key)
                } catch {
                    failure = "\(key): \(error)"
                    failureHint = RemoteStoreError.hint(for: error)
                    break
                }
            }
            report.phases.append(SyncPhase(name: "upload", ok: failure == nil,
                                           summary: "uploaded \(report.uploaded.count) of \(outbox.count) diff(s)", error: failure, hint: failureHint))
        }

        // 3. Download what this device has not applied (one LIST when idle), then apply in KSUID order.
        if stopRequested() { return stopped(before: "download") }
        var toApply: [URL] = []
        var listedIDs: [String]?
        var listedRollups: [(object: RemoteObject, id: String)] = []
        var rollupReports: [ApplyReport] = []
        do {
            let listed = try await retry.run { try await remote.list(prefix: inbound) }
            listedIDs = Self.diffIDs(in: listed, under: inbound)
            listedRollups = Self.rollups(in: listed, under: inbound)
            var wanted = listed.filter { obj in
                let name = String(obj.key.dropFirst(inbound.count))
                guard !name.contains("/"), let id = DiffFile.diffID(fromFileName: name) else { return false }
                return !applied.contains(id.string)
            }.sorted { $0.key < $1.key }
            // Another device's roll-up, merged first, spares downloading and opening the diffs it covers.
            if !dryRun, !listedRollups.isEmpty {
                let merged = await mergeRollups(db: db, user: user, listed: listedRollups, wanted: wanted, inbound: inbound, applied: applied,
                                                settings: settings, stop: stopRequested, step: step)
                rollupReports = merged.reports
                let before = wanted.count
                wanted = wanted.filter { DiffFile.diffID(fromFileName: String($0.key.dropFirst(inbound.count))).map { !merged.covered.contains($0.string) } ?? true }
                if let phase = Self.rollupPhase(merged.reports, standingIn: before - wanted.count) { report.phases.append(phase) }
                applied.formUnion(merged.covered)
            }
            if dryRun {
                report.phases.append(SyncPhase(name: "download", ok: true, summary: "\(wanted.count) diff(s) would be downloaded and applied"))
            } else {
                var failure: String?
                // Up to `downloadConcurrency` downloads at a time (a catch-up has hundreds of small diffs); each
                // lands in the inbox only once complete, and they are applied in KSUID order whatever order they
                // arrive in. Once a stop is asked for, no new one starts; those under way finish.
                let locals = wanted.map { home.inbox.appendingPathComponent(String($0.key.dropFirst(inbound.count)), isDirectory: false) }
                var outcomes = [DownloadOutcome](repeating: .notStarted, count: wanted.count)
                let (remote, retry, inMemoryLimit) = (self.remote, self.retry, self.inMemoryDownloadLimit)
                await withTaskGroup(of: (Int, DownloadOutcome).self) { group in
                    var next = 0, running = 0
                    while true {
                        while running < max(1, downloadConcurrency), next < wanted.count, !stopRequested() {
                            let i = next
                            next += 1
                            if fm.fileExists(atPath: locals[i].path) { outcomes[i] = .present; continue }
                            let (obj, local) = (wanted[i], locals[i])
                            step(SyncProgress(phase: .download, itemsDone: i, itemsTotal: wanted.count, item: local.lastPathComponent))
                            group.addTask {
                                // Diffs travel compressed (DiffTransport): read into memory when the store can (a small
                                // diff of a plain store), else fetched beside the inbox file; then expanded into it
                                // (one that does not expand is installed as it came, and apply quarantines it).
                                do {
                                    let staging = local.deletingLastPathComponent().appendingPathComponent(".\(local.lastPathComponent).incoming", isDirectory: false)
                                    try await Self.fetchDiff(obj, to: local, staging: staging, remote: remote, retry: retry, inMemoryLimit: inMemoryLimit)
                                    return (i, .downloaded)
                                } catch {
                                    return (i, .failed("\(obj.key): \(error)"))
                                }
                            }
                            running += 1
                        }
                        guard let (i, outcome) = await group.next() else { break }
                        running -= 1
                        outcomes[i] = outcome
                    }
                }
                for (i, outcome) in outcomes.enumerated() {
                    switch outcome {
                    case .notStarted: continue
                    case .failed(let text): failure = text; continue
                    case .downloaded: report.downloaded.append(wanted[i].key)
                    case .present: break
                    }
                    toApply.append(locals[i])
                }
                report.phases.append(SyncPhase(name: "download", ok: failure == nil,
                                               summary: "downloaded \(report.downloaded.count) of \(wanted.count) new diff(s)", error: failure))
            }
        } catch {
            report.phases.append(SyncPhase(name: "download", ok: false, summary: "could not list \(inbound)", error: "\(error)",
                                           hint: RemoteStoreError.hint(for: error)))
        }
        if !dryRun && stopRequested() { return stopped(before: "apply") }
        if !dryRun {
            // Also pick up diffs downloaded by an earlier run that stopped before applying them.
            for name in ((try? fm.contentsOfDirectory(atPath: home.inbox.path)) ?? []) where DiffFile.diffID(fromFileName: name) != nil {
                // Named as `locals` above (`isDirectory: false` spares a lookup on disk per name), so they compare equal.
                let url = home.inbox.appendingPathComponent(name, isDirectory: false)
                if !toApply.contains(url) { toApply.append(url) }
            }
            var reports: [ApplyReport] = rollupReports
            var accepted: [URL] = []
            for url in toApply {
                // A file that does not open as a diff goes to apply, which reports and quarantines it.
                // Fully validated here: requests and other users' shares are recorded before (or without) apply.
                // A diff of this user, with signatures not required, goes to apply on the author its metadata names,
                // read without opening a checked reader (apply opens it and checks all of it, every row and the
                // digest as it merges); a signature, another user's share or a request is judged on a reader that
                // has checked them all.
                if !settings.requireSignatures, DiffReader.peekAuthorUser(of: url) == user { accepted.append(url); continue }
                guard var reader = try? DiffReader(url: url, rowValidation: .whileReading) else { accepted.append(url); continue }
                if settings.requireSignatures || reader.metadata.authorUser != user {
                    guard let full = try? DiffReader(url: url) else { accepted.append(url); continue }
                    reader = full
                }
                let m = reader.metadata
                if let refusal = signatureRefusal(reader, settings: settings) {
                    var r = ApplyReport(file: url.path, diffID: m.id.string, status: .rejected, reason: refusal)
                    r.quarantinedTo = SyncDatabase.moveToQuarantine(url, folder: home.quarantine, reason: refusal)
                    reports.append(r)
                    continue
                }
                // Shares and requests from other users are listed by `inbound list`; requests are never merged.
                if m.authorUser != user {
                    let summary = m.kind == .request ? ShareRequest.summary(reader)
                        : reader.tables.map { "\($0.name): \((reader.counts[$0.name]?.upserts ?? 0) + (reader.counts[$0.name]?.deletes ?? 0)) row(s)" }.joined(separator: ", ")
                    try? db.recordInbound(InboundItem(diffID: m.id.string, kind: m.kind.rawValue, fromUser: m.authorUser, summary: summary,
                                                      receivedAt: ISO8601.format(Date(), fractional: true)))
                    if m.kind == .request {
                        try? db.recordApplied(id: m.id.string, kind: m.kind.rawValue, authorUser: m.authorUser, authorSite: m.authorSite)
                        reports.append(ApplyReport(file: url.path, diffID: m.id.string, status: .skipped, reason: "request from \(m.authorUser): listed by `rtsync inbound list`"))
                        continue
                    }
                }
                accepted.append(url)
            }
            reports += withoutActuallyEscaping(text) { text in
                db.apply(diffs: accepted, quarantine: home.quarantine, shouldStop: shouldStop) { done, total, next in
                    let p = SyncProgress(phase: .apply, itemsDone: done, itemsTotal: total, item: next.lastPathComponent)
                    onProgress?(p)
                    text(p.description)
                }
            }
            // A deferred diff stays in the inbox and is applied again by the next sync. (A roll-up's report names its key.)
            for r in reports[rollupReports.count...] where r.status != .rejected && r.status != .deferred { try? fm.removeItem(atPath: r.file) }
            // Rows held back for a value the app had not declared are merged again (a value may be declared now).
            if let again = try? db.applyHeldRows(scratch: home.support.appendingPathComponent(".held-\(KSUID.generate().string)")) {
                reports.append(again)
            }
            report.applied = reports
            // (Roll-ups have a phase of their own, above.)
            let diffReports = reports[rollupReports.count...]
            let applied = diffReports.filter { $0.status == .applied }
            let rejected = diffReports.filter { $0.status == .rejected }
            let deferred = diffReports.filter { $0.status == .deferred }.count
            let rows = applied.reduce(0) { $0 + $1.inserted + $1.updated + $1.deleted }
            report.phases.append(SyncPhase(name: "apply", ok: rejected.isEmpty,
                                           summary: "applied \(applied.count) diff(s) (\(rows) row(s), \(applied.reduce(0) { $0 + $1.conflicts }) conflict(s)), skipped \(diffReports.filter { $0.status == .skipped }.count), rejected \(rejected.count)"
                                               + (deferred == 0 ? "" : ", deferred \(deferred) (waiting for rows other diffs bring)")
                                               + { let n = (try? db.heldRows().count) ?? 0; return n == 0 ? "" : "; \(n) new row(s) held back for a NOT NULL column without a value (see rtsync status)" }()
                                               + { let t = Set(applied.flatMap(\.typeDifferences)).sorted(); return t.isEmpty ? "" : "; declared types differ from the sender's (values stored as declared here): \(t.joined(separator: "; "))" }(),
                                           error: rejected.isEmpty ? nil : rejected.map { "\(URL(fileURLWithPath: $0.file).lastPathComponent): \($0.reason ?? "")" }.joined(separator: "; ")))
        }

        // A catch-up that failed at the start, typically because the snapshot's rows refer to rows the diffs this
        // sync just applied bring (a foreign key), is tried once more now; one failure is reported, not two.
        if !dryRun, caughtUpFrom == nil, (try? db.needsCatchUp()) == true,
           let failed = report.phases.firstIndex(where: { $0.name == "catch-up" && !$0.ok }) {
            let before = report.phases.count
            caughtUpFrom = await catchUpAfterRestore(db: db, user: user, report: &report, progress: catchUpProgress)
            if caughtUpFrom != nil { report.phases.remove(at: failed) } else if report.phases.count > before { report.phases.removeLast(report.phases.count - before) }
        }

        // A roll-up of this device's diffs still listed, when enough of them are (SyncDatabase+Rollup).
        if !dryRun, let listedIDs, settings.rollupThreshold > 0, !stopRequested() {
            await uploadRollup(db: db, user: user, listedIDs: listedIDs, rollups: listedRollups, inbound: inbound, settings: settings, stop: stopRequested, report: &report)
        }

        // Publish what this device has applied (only when that changed, so an idle sync stays one LIST),
        // and compact automatically once inbound grows past the threshold.
        // A cursor owed by an earlier run (its publish failed, or the run ended first) is published now, even
        // when idle: the marker is written before each publish and removed only once one succeeds.
        if !dryRun {
            let marker = Self.pendingCursorMarker(home)
            let retiring = (try? db.retiredSites().contains { !$0.cursorRemoved && !$0.catchUp }) == true
            let changed = report.exported != nil || report.applied.contains { $0.status == .applied || $0.status == .skipped } || retiring
            // A site whose cursor never reached the bucket publishes it now, even when idle (see below).
            let firstCursor = (try? db.cursorPublished()) == false
            if changed || fm.fileExists(atPath: marker.path) || firstCursor {
                do {
                    try Data("cursor of \(user) to publish to \(Compactor.cursorKey(user: user, site: try db.siteID()))\n".utf8).write(to: marker)
                    guard let listedIDs else { throw RemoteStoreError.failed(key: inbound, reason: "inbound could not be listed; the cursor is published by the next sync") }
                    try await Compactor.publishCursor(db: db, user: user, listed: listedIDs + (report.exported.map { [$0.diffID] } ?? []), remote: remote, home: home)
                    try? fm.removeItem(at: marker)
                    if retiring { await retireOldCursors(db: db, user: user, report: &report) }
                    // Until now no compaction waited for this device: one may have pruned diffs it never applied,
                    // which are in that compaction's snapshot. With the cursor published, no later one will.
                    // (Unless the bucket says it holds no snapshot, catch up: the catch-up finds out for itself.)
                    // (Nor when this sync has just merged that same snapshot, after a restore.)
                    var snapshotMayExist = firstCursor
                    if firstCursor {
                        do { snapshotMayExist = try await remote.latestSnapshotKey(user: user, retry: retry).map { $0 != caughtUpFrom } ?? false } catch {}
                    }
                    if snapshotMayExist {
                        try db.markCatchUpPending()
                        await catchUpAfterRestore(db: db, user: user, report: &report, progress: catchUpProgress)
                    }
                } catch {
                    report.phases.append(SyncPhase(name: "cursor", ok: false, summary: "could not publish this device's cursor (the next sync publishes it)", error: "\(error)"))
                }
            }
        }
        if !dryRun, let listedIDs {
            if listedIDs.count >= settings.compactThreshold && !stopRequested() {
                do {
                    step(SyncProgress(phase: .compact))
                    var compactor = Compactor(home: home, remote: remote, retry: retry)
                    compactor.shouldStop = shouldStop
                    compactor.signingKey = signingKey
                    let c = try await compactor.run()
                    report.phases.append(SyncPhase(name: "compact", ok: true, summary: c.stoppedBefore.map { "stopped before \($0)" }
                        ?? "snapshot \(c.snapshotKey), pruned \(c.pruned.count) diff(s), kept \(c.kept)"))
                } catch {
                    report.phases.append(SyncPhase(name: "compact", ok: false, summary: "compaction failed", error: "\(error)"))
                }
            }
        }

        // 4. Media.
        if !dryRun && stopRequested() { return stopped(before: "media") }
        if let media, !dryRun {
            step(SyncProgress(phase: .media, unit: "files"))
            do { report.phases.append(SyncPhase(name: "media", ok: true, summary: try await media())) } catch {
                report.phases.append(SyncPhase(name: "media", ok: false, summary: "media sync failed", error: "\(error)"))
            }
        }

        // 5. A backup when one is due (premium also keeps it in the bucket, rotated like the local ones).
        if !dryRun && stopRequested() { return stopped(before: "backup") }
        if !dryRun {
            let backups = BackupManager(home: home, keep: settings.keepBackups)
            let last = backups.list().first.flatMap { ISO8601.parse($0.createdAt) }
            // A backup whose upload failed is owed to the bucket (new devices join from it): the next sync makes one
            // and uploads it, due or not.
            let uploadOwed = Self.pendingBackupUploadMarker(home)
            let owed = fm.fileExists(atPath: uploadOwed.path)
            let due = owed || (last.map { Date().timeIntervalSince($0) >= Double(settings.backupIntervalMinutes * 60) } ?? true)
            if due {
                do {
                    step(SyncProgress(phase: .backup))
                    // A backup that leaves the device holds no unexported change (`createForUpload`).
                    let uploading = (try? settings.tier.require(.uploadBackup(cloud: !remote.isLocal))) != nil
                    let (b, uploadable) = uploading
                        ? try backups.createForUpload(exportingFrom: db, outbox: home.outbox, signingKey: signingKey, shouldStop: shouldStop)
                        : (try backups.create(), false)
                    report.backup = b
                    var summary = "backup \(b.id) (\(b.method), \(b.bytes) bytes)"
                    if uploading {
                        try Data("a backup of this database is owed to the bucket\n".utf8).write(to: uploadOwed)
                    } else {
                        try? fm.removeItem(at: uploadOwed)
                    }
                    if uploading && !uploadable {
                        summary += ", kept here only: the database changed while each copy was made (the next sync uploads one)"
                    } else if uploading {
                        try await retry.run { try await remote.upload(file: home.backups.appendingPathComponent(b.file), key: user + "/backups/" + b.file, ifAbsent: false) }
                        summary += ", uploaded"
                        try? fm.removeItem(at: uploadOwed)
                        let rotated = try await remote.rotateBackups(user: user, keep: settings.keepBackups, retry: retry)
                        if !rotated.isEmpty { summary += ", \(rotated.count) old bucket backup(s) rotated away" }
                    }
                    report.phases.append(SyncPhase(name: "backup", ok: true, summary: summary))
                } catch {
                    report.phases.append(SyncPhase(name: "backup", ok: false, summary: "backup failed", error: "\(error)"))
                }
            } else {
                report.phases.append(SyncPhase(name: "backup", ok: true, summary: "not due"))
            }
        }
        report.requests = remote.requestsMade - startRequests
        return report
    }

    /// Why a downloaded diff must be refused for its signature, or nil when it may be applied.
    func signatureRefusal(_ reader: DiffReader, settings: RTSyncSettings) -> String? {
        guard settings.requireSignatures else { return nil }
        if reader.metadata.signature == nil { return "unsigned diff (signatures are required)" }
        guard reader.isSigned(byOneOf: trustedKeys) else { return "signature is not valid or not from a trusted key" }
        // The author a diff names is what owner-only and read-only-share checks go by: it must be the signer's user.
        if let signer = reader.metadata.signerKey?.hexString, let user = keyUsers[signer],
           user != reader.metadata.authorUser {
            return "signed by a key of user '\(user)' but claims to be from user '\(reader.metadata.authorUser)'"
        }
        return nil
    }
}

/// What became of one diff the download phase wanted.
private enum DownloadOutcome: Sendable {
    case notStarted, present, downloaded
    case failed(String)
}

/// Set once when the task running a sync is cancelled; read at the run's safe points, also from other threads.
final class CancellationFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    /// Whether cancellation was asked for.
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    /// Records that cancellation was asked for.
    func set() { lock.lock(); value = true; lock.unlock() }
}

extension SyncDatabase {
    /// Marks a diff as handled without merging it (own diffs, requests).
    public func recordApplied(id: String, kind: String, authorUser: String, authorSite: String) throws {
        try locked {
            try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, applied_at) VALUES (?, ?, ?, ?, ?)",
                           [.text(id), .text(kind), .text(authorUser), .text(authorSite), .text(ISO8601.format(Date(), fractional: true))])
        }
    }
}

extension RemoteStore {
    /// Whether the diff object at `key` holds exactly the diff file `file` (an earlier try's upload of it, whose answer
    /// was lost), read back and expanded as a download would be. Scratch files go in `folder` under names
    /// `HomeDebris` removes when a run is killed meanwhile (a home's support folder).
    public func holdsTheSameDiff(key: String, as file: URL, scratch folder: URL, retry: RemoteRetryPolicy) async throws -> Bool {
        let stem = ".download-check-\(UUID().uuidString).sqlite"
        let staging = folder.appendingPathComponent(stem + ".object", isDirectory: false)
        let expanded = folder.appendingPathComponent(stem, isDirectory: false)
        defer { for f in [staging, expanded] { unlink(f.path) } }
        try await retry.run { try await download(key: key, to: staging) }
        _ = try DiffTransport.install(staging, as: expanded, name: key)
        return try Data(contentsOf: expanded) == Data(contentsOf: file)
    }
}
