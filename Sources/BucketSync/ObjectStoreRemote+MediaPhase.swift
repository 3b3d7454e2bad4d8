import BucketClient
import Foundation
import SyncEngine

extension ObjectStoreRemote {
    /// A media phase for `Syncer.media`: takes the shared-media parcels of shares this home received
    /// (``takeSharedMedia(home:)``), then syncs `recordings/` and `images/` between `home.documents` and the bucket as
    /// `settings` say (mode, selection, deletions, trash). On the free tier with a cloud bucket it only downloads
    /// (uploads to a personal cloud prefix are premium). `onReport` gets each run's full report; `shouldStop` lets
    /// running transfers finish and starts no more.
    ///
    /// ```swift
    /// syncer.media = try remote.mediaPhase(home: home, settings: settings)
    /// ```
    /// - Throws: `LifecycleError.invalidSettings` when the media settings are invalid, before anything syncs. The
    ///   closure throws when a file failed, naming the first ones.
    public func mediaPhase(home: RTSyncHome, settings: RTSyncSettings,
                           onReport: (@Sendable (MediaSyncReport) -> Void)? = nil,
                           shouldStop: (@Sendable () -> Bool)? = nil) throws -> @Sendable () async throws -> String {
        let options = try settings.mediaSyncOptions(file: home.settingsFile.path)
        let remote = self
        return {
            var options = options
            options.shouldStop = shouldStop
            let canUpload = (try? settings.tier.require(.uploadMedia(cloud: !remote.isLocal, community: false, privateRecording: false))) != nil
            options.direction = canUpload ? .both : .pull
            // Conflict copies name this device by the random end of its site id (a KSUID starts with the time).
            if let site = try? SyncDatabase(path: home.database.path).siteID(), !site.isEmpty {
                options.device = String(site.suffix(6))
            }
            // One manifest per documents folder, shared with `rtsync media sync`; earlier versions kept the sync
            // command's in support/.
            let manifest = MediaManifest.defaultURL(documents: home.documents)
            try MediaManifest.absorb(home.support.appendingPathComponent("media-manifest.json"), into: manifest)
            // Media shared with this user as a parcel (it encrypts names) goes into the documents first, so this run
            // uploads it under this user's names.
            let taken = options.direction == .push || options.dryRun ? [] : try await remote.takeSharedMedia(home: home)
            let sync = try MediaSync(store: remote.store, documents: home.documents, user: settings.userID, manifestURL: manifest)
            let report = try await sync.run(options)
            onReport?(report)
            guard report.succeeded else {
                // Name the files that failed, so the sync line says what to look at.
                let failed = report.errors.prefix(3).map { "\($0.reason) (\($0.path))" }
                let more = report.errors.count > 3 ? "; and \(report.errors.count - 3) more (rtsync media sync --home \(home.root.path) --json lists them)" : ""
                throw BucketError.localIO(path: home.documents.path, description: report.summary + ": " + failed.joined(separator: "; ") + more)
            }
            var notes: [String] = []
            if !taken.isEmpty { notes.append("\(taken.count) shared file(s) taken from parcels: " + taken.joined(separator: ", ")) }
            if !canUpload { notes.append("downloads only: uploads to a cloud bucket need premium") }
            if options.selective && options.select.isEmpty { notes.append("selective mode with nothing selected: set mediaSelection in settings.json") }
            if !report.keptOverDelete.isEmpty { notes.append("deleted elsewhere, kept because edited here: " + report.keptOverDelete.joined(separator: ", ")) }
            return report.summary + notes.map { " (\($0))" }.joined()
        }
    }
}
