import DiffFormat
import Foundation

// What sync does for a database restored from a backup (see SyncDatabase+Restore).

extension Syncer {
    /// Catches a restored database up from the user's newest database in the bucket, once, before anything is
    /// exported: diffs it had applied after the backup may have been pruned by compaction since.
    /// Returns the key of the snapshot (or database) it merged, if any.
    @discardableResult
    func catchUpAfterRestore(db: SyncDatabase, user: String, report: inout SyncReport, progress: @Sendable (String) -> Void) async -> String? {
        guard (try? db.needsCatchUp()) == true else { return nil }
        let fm = FileManager.default
        let temp = home.support.appendingPathComponent(".catch-up-\(KSUID.generate().string).sqlite")
        defer { try? fm.removeItem(at: temp) }
        do {
            progress("catching up from the last compaction's snapshot under \(user)/backups/")
            // The last compaction's snapshot holds every diff it pruned; without one, the newest database there.
            var chosen: RemoteObject?
            if let key = try await remote.latestSnapshotKey(user: user, retry: retry),
               let object = try await retry.run({ try await remote.list(prefix: key) }).first(where: { $0.key == key }) {
                try await retry.run { try await remote.download(object, to: temp) }
                chosen = object
            } else {
                chosen = try await remote.downloadNewestDatabase(prefix: user + "/backups/", to: temp, retry: retry)
            }
            guard let newest = chosen else {
                // Compaction uploads a database before it prunes anything: with none there, nothing was pruned.
                try db.clearCatchUp()
                report.phases.append(SyncPhase(name: "catch-up", ok: true, summary: "catch-up: nothing under \(user)/backups/ to catch up from (no diff was pruned)"))
                return nil
            }
            let r = try db.catchUp(from: temp, scratch: home.support)
            let ok = r.status == .applied || r.status == .skipped
            report.phases.append(SyncPhase(name: "catch-up", ok: ok,
                                           summary: "caught up: merged \(newest.key) (inserted \(r.inserted), updated \(r.updated), deleted \(r.deleted), conflicts \(r.conflicts))",
                                           error: ok ? nil : "\(newest.key): \(r.reason ?? "\(r.status)"); the next sync tries again"))
            return ok ? newest.key : nil
        } catch {
            report.phases.append(SyncPhase(name: "catch-up", ok: false, summary: "could not catch up from the bucket",
                                           error: "\(error); the next sync tries again"))
            return nil
        }
    }

    /// Removes from `<user>/devices/` the cursors of sites this database used before a restore, once its own
    /// cursor is published: an old site's cursor never advances and would keep compaction from pruning anything.
    func retireOldCursors(db: SyncDatabase, user: String, report: inout SyncReport) async {
        guard let retired = try? db.retiredSites().filter({ !$0.cursorRemoved && !$0.catchUp }), !retired.isEmpty else { return }
        for r in retired {
            do {
                try await retry.run { try await remote.delete(key: Compactor.cursorKey(user: user, site: r.site)) }
                try db.markCursorRemoved(site: r.site)
            } catch {
                report.phases.append(SyncPhase(name: "cursor", ok: false, summary: "could not remove the cursor of retired site \(r.site)", error: "\(error)"))
            }
        }
    }
}
