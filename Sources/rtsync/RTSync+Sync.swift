import ArgumentParser
import BucketClient
import BucketSync
import Foundation
import SyncEngine

extension RTSync {
    /// `rtsync sync`: the main job.
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish local changes and apply everyone else's: the main job.",
            discussion: """
            Exports local changes into the outbox, uploads the outbox to <user>/inbound/ (conditional put, so \
            retries never duplicate), downloads the diffs this device has not applied, applies them in KSUID \
            order, syncs recordings/ and images/ when asked (--media, or syncMedia in settings), then makes a \
            backup when one is due. A phase that fails leaves its work queued for the next \
            run and the exit status is 1. With no database yet, runs the init chain first. Refused in demo mode, \
            and on the free tier for a cloud (s3://) bucket; a local-folder bucket works on every tier. \
            One run at a time per home: another waits up to RTSYNC_LOCK_WAIT seconds (default 30), then exits 1 \
            (Ctrl-C or SIGTERM ends the wait at once). \
            Leftovers of interrupted runs are removed first. Ctrl-C or SIGTERM stops at the next safe point, \
            prints what is left and exits 130 or 143.
            """
        )
        @OptionGroup var options: HomeOptions
        @Flag(help: "Only report what would be uploaded and downloaded.") var dryRun = false
        @Flag(help: "Also sync recordings/ and images/ this time (settings: syncMedia).") var media = false
        @Flag(help: "Propagate media deletions this time, both ways (implies --media; settings: mediaDeletes). Deleted objects go to <user>/trash/ (rtsync media restore).")
        var delete = false
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        struct Output: Encodable {
            var initialized: InitResult?
            var report: SyncReport
            /// The media phase's report (files uploaded, downloaded, conflicts, errors), when it ran.
            var media: MediaSyncReport?
            var ok: Bool
        }

        func run() async throws {
            let home = options.resolvedHome
            var settings = try options.loadSettings()
            let remote = try options.openRemote(settings)
            var initialized: InitResult?
            let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
            let signals = StopSignals()
            do { try await options.locked(stoppingOn: signals, command: "sync") {
                if FileManager.default.fileExists(atPath: home.database.path), let damaged = DeviceStatus.damage(home.database.path) {
                    // Syncing a damaged file would spread what can still be read and back up the damage.
                    throw fail("the database is damaged: \(damaged) (\(home.database.path))",
                               hint: "nothing was synced; restore the last-known-good backup: rtsync backup restore\(options.home.map { " --home \(ErrorExplanation.shellQuoted($0))" } ?? "") (rtsync backup list shows them)")
                }
                if !FileManager.default.fileExists(atPath: home.database.path) {
                    initialized = try await display.run {
                        try await InitChain(home: home, remote: remote).run(progress: { display.set("init: \($0)") })
                    }
                    settings = try options.loadSettings()
                    // As with `rtsync init --bucket`, the bucket a device was set up with is remembered.
                    if let bucket = options.bucket {
                        settings.bucket = bucket
                        try home.saveSettings(settings)
                    }
                    if !json { print("init: database from \(initialized!.source.rawValue), user \(initialized!.userId)") }
                }
                let keys = DeviceKeys(home: home)
                var syncer = Syncer(home: home, remote: remote, signingKey: try keys.signingKey(), trustedKeys: try keys.trustedKeys())
                syncer.shouldStop = { signals.stopRequested }
                syncer.keyUsers = try keys.trustedIdentities(ownUser: settings.userID)
                let mediaReport = MediaReportBox()
                if media || delete || settings.syncMedia {
                    var mediaSettings = settings
                    if delete { mediaSettings.mediaDeletes = true }
                    syncer.media = try remote.mediaPhase(home: home, settings: mediaSettings, onReport: { mediaReport.value = $0 },
                                                         shouldStop: { signals.stopRequested })
                }
                syncer.onProgress = { display.set($0) }
                let report = try await display.run { try await syncer.sync(dryRun: dryRun) }
                // Without a media phase, parcels of media shared with this user still come into the documents (the
                // next media sync uploads them).
                var taken: [String] = []
                var parcelError: Error?
                if syncer.media == nil && !dryRun && report.ok {
                    do { taken = try await remote.takeSharedMedia(home: home) } catch { parcelError = error }
                }
                if json {
                    printJSON(Output(initialized: initialized, report: report, media: mediaReport.value, ok: report.ok))
                } else {
                    print("sync \(home.database.path) <-> \(options.bucketURL(settings)) as user \(settings.userID)")
                    for p in report.phases {
                        print("  \(p.ok ? "ok  " : "FAIL") \(p.name): \(terminalSafe(p.summary, limit: 2_000))\(p.error.map { " — \(terminalSafe($0, limit: 2_000))" } ?? "")")
                    }
                    if !taken.isEmpty { print("  ok   shared media: \(taken.count) file(s) taken from parcels into the documents (the next media sync uploads them)") }
                    print("\(report.ok ? "done" : "incomplete"): \(report.requests) bucket request(s)")
                }
                if !report.nullKeyTables.isEmpty { warnNullKeys(report.nullKeyTables) }
                if let parcelError { throw parcelError }
                if let sig = signals.receivedSignal {
                    // Stopped at a safe point: what was done is above, what is left is in the "stopped" phase.
                    throw fail("sync interrupted by \(StopSignals.name(sig)) at a safe point (\(home.database.path))",
                               hint: "nothing was lost; run rtsync sync again to finish what is left", code: StopSignals.exitStatus(sig))
                }
                if !report.ok {
                    let failedPhases = report.phases.filter { !$0.ok }
                    let failed = failedPhases.map(\.name).joined(separator: ", ")
                    let hint = failedPhases.compactMap(\.hint).first.map { $0 + "; unfinished work stays queued for the next rtsync sync" }
                    throw fail("sync incomplete: \(failed) failed (\(options.bucketURL(settings)))", hint: hint ?? "unfinished work stays queued; run rtsync sync again")
                }
            } } catch { throw report(error) }
        }
    }
}

extension RTSync {
    /// `rtsync compact`.
    struct Compact: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Upload a snapshot and prune inbound diffs that every known device has applied.",
            discussion: "A new device then starts from the snapshot plus the recent diffs. Devices are known once they have published a cursor (every sync that changes something does). Sync also compacts by itself when inbound holds more than compactThreshold diffs (settings.json). Ctrl-C or SIGTERM stops between steps (snapshot, upload, each pruned diff), says what is left and exits 130 or 143."
        )
        @OptionGroup var options: HomeOptions
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        func run() async throws {
            do {
                let settings = try options.loadSettings()
                let signals = StopSignals()
                var compactor = Compactor(home: options.resolvedHome, remote: try options.openRemote(settings))
                compactor.lockWait = HomeLock.environmentWait
                compactor.shouldStop = { signals.stopRequested }
                compactor.signingKey = try? DeviceKeys(home: options.resolvedHome).signingKey()
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                announceWaitIfBusy(options.resolvedHome)
                display.set("compact: snapshot, upload, prune")
                let r = try await display.run { try await compactor.run() }
                if json { printJSON(r) }
                if let sig = signals.receivedSignal {
                    // Each step stands alone (the snapshot is a listed backup, pruned diffs are gone for good), so
                    // stopping between them leaves nothing half-done; the next compaction does the rest.
                    let done = r.snapshotKey.isEmpty ? "no snapshot uploaded" : "snapshot \(r.snapshotKey) uploaded, \(r.pruned.count) diff(s) pruned"
                    throw StopSignals.stopped("compact", by: sig, done: done, left: r.stoppedBefore ?? "nothing", path: options.bucketURL(settings))
                }
                if json { return }
                print("snapshot \(r.snapshotKey); \(r.devices.count) known device(s); pruned \(r.pruned.count) diff(s), kept \(r.kept)")
            } catch { throw report(error) }
        }
    }
}

/// Holds the media phase's report for `sync --json` (the phase itself returns only its summary line to Syncer).
final class MediaReportBox: @unchecked Sendable {
    private let lock = NSLock()
    private var report: MediaSyncReport?
    /// The report, once the media phase has run.
    var value: MediaSyncReport? {
        get { lock.withLock { report } }
        set { lock.withLock { report = newValue } }
    }
}
