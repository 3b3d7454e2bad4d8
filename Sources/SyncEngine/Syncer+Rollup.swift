import DiffFormat
import Foundation

// What sync does with roll-ups (SyncDatabase+Rollup): merges another device's before downloading the diffs it
// covers, and uploads its own while enough of its diffs are still listed.

extension Syncer {
    /// The inbound objects among `listed` that are roll-ups, with their ids.
    static func rollups(in listed: [RemoteObject], under prefix: String) -> [(object: RemoteObject, id: String)] {
        listed.compactMap { obj in SyncDatabase.rollupID(fromFileName: String(obj.key.dropFirst(prefix.count))).map { (obj, $0.string) } }
    }

    /// With at least half the roll-up threshold of diffs `wanted` (and never fewer than two), merges the roll-ups of
    /// other devices listed and not yet merged here, newest first, each only while it is smaller than the diffs still
    /// wanted. Returns their reports and the diffs now recorded as applied (those the merged roll-ups cover).
    func mergeRollups(db: SyncDatabase, user: String, listed rollups: [(object: RemoteObject, id: String)], wanted: [RemoteObject], inbound: String,
                      applied: Set<String>, settings: RTSyncSettings, stop: () -> Bool, step: (SyncProgress) -> Void) async -> (reports: [ApplyReport], covered: Set<String>) {
        guard settings.rollupThreshold > 0 else { return ([], []) }
        let fm = FileManager.default
        var reports: [ApplyReport] = []
        var covered: Set<String> = []
        for (obj, id) in rollups.filter({ !applied.contains($0.id) }).sorted(by: { $0.id > $1.id }) {
            let left = wanted.filter { obj in DiffFile.diffID(fromFileName: String(obj.key.dropFirst(inbound.count))).map { !covered.contains($0.string) } ?? false }
            guard left.count >= max(2, settings.rollupThreshold / 2), obj.size < left.reduce(0, { $0 + $1.size }) else { continue }
            if stop() { break }
            step(SyncProgress(phase: .download, itemsDone: 0, itemsTotal: 1, item: obj.key))
            let local = home.support.appendingPathComponent(".catch-up-rollup-\(id).sqlite", isDirectory: false)
            defer { try? fm.removeItem(at: local) }
            do {
                try await Self.fetchDiff(obj, to: local, staging: URL(fileURLWithPath: local.path + ".incoming", isDirectory: false),
                                         remote: remote, retry: retry, inMemoryLimit: inMemoryDownloadLimit)
                // As for a diff: a signature is judged on a reader that has checked every row and the digest; without
                // that requirement the metadata is enough here (apply checks all of it as it merges).
                let reader = settings.requireSignatures ? try DiffReader(url: local) : try DiffReader(url: local, rowValidation: .whileReading)
                if let refusal = signatureRefusal(reader, settings: settings) {
                    reports.append(ApplyReport(file: obj.key, diffID: id, status: .skipped, reason: "roll-up not used: \(refusal)"))
                    continue
                }
                // Only this user's roll-ups stand in for diffs (another user's diffs are shares, judged one by one).
                guard reader.metadata.authorUser == user else {
                    reports.append(ApplyReport(file: obj.key, diffID: id, status: .skipped, reason: "roll-up not used: from user \(reader.metadata.authorUser)"))
                    continue
                }
                var (r, recorded) = db.mergeRollup(local, reader: reader)
                r.file = obj.key
                reports.append(r)
                covered.formUnion(recorded)
            } catch {
                // The diffs it covers are downloaded and applied as they are.
                reports.append(ApplyReport(file: obj.key, diffID: id, status: .skipped, reason: "roll-up not used: \(error)"))
            }
        }
        return (reports, covered)
    }

    /// The sync phase that reports the roll-ups `mergeRollups` considered (nil when none), `standingIn` for that many
    /// pending diffs.
    static func rollupPhase(_ reports: [ApplyReport], standingIn pending: Int) -> SyncPhase? {
        guard !reports.isEmpty else { return nil }
        func name(_ r: ApplyReport) -> String { URL(fileURLWithPath: r.file).lastPathComponent }
        let used = reports.filter { $0.status == .applied || $0.status == .skipped && $0.reason == SyncDatabase.alreadyAppliedReason }
        let notUsed = reports.filter { !used.contains($0) }
        var parts: [String] = []
        if !used.isEmpty {
            parts.append("merged \(used.map(name).joined(separator: ", ")) (\(used.reduce(0) { $0 + $1.inserted + $1.updated + $1.deleted }) row(s)), standing in for \(pending) pending diff(s)")
        }
        if !notUsed.isEmpty {
            parts.append(notUsed.map { "\(name($0)) not used (\($0.status.rawValue): \($0.reason ?? ""))" }.joined(separator: "; ") + "; its diffs are applied as they are")
        }
        return SyncPhase(name: "rollup", ok: true, summary: parts.joined(separator: "; "))
    }

    /// Uploads a roll-up of this device's diffs still listed in inbound when the threshold says so, and deletes this
    /// device's roll-ups a newer one replaces or whose diffs are all gone. Failures are reported, never fatal: the
    /// diffs themselves stay, so a missing roll-up costs only time.
    func uploadRollup(db: SyncDatabase, user: String, listedIDs: [String], rollups: [(object: RemoteObject, id: String)], inbound: String,
                      settings: RTSyncSettings, stop: () -> Bool, report: inout SyncReport) async {
        let fm = FileManager.default
        let outbox = ((try? fm.contentsOfDirectory(atPath: home.outbox.path)) ?? []).compactMap { DiffFile.diffID(fromFileName: $0)?.string }
        let plan: (candidates: [String]?, stale: [String], own: [String])
        do { plan = try db.planRollup(listed: listedIDs, listedRollups: rollups.map(\.id), outbox: outbox, threshold: settings.rollupThreshold) } catch {
            report.phases.append(SyncPhase(name: "rollup", ok: false, summary: "could not plan a roll-up", error: "\(error)"))
            return
        }
        var stale = plan.stale
        var summary: [String] = []
        var failure: String?
        // Only diffs some other device that published a cursor has not applied (with every device up to date there is
        // nothing to roll up: the roll-up would only grow with inbound until compaction).
        var covers: [String]?
        if let candidates = plan.candidates, !stop() {
            do {
                let mine = try db.siteID()
                if let cursors = try await Compactor.readCursors(user: user, remote: remote, retry: retry, home: home) {
                    let others = cursors.filter { $0.key != mine }.values
                    let needed = candidates.filter { id in others.contains { !$0.contains(id) } }
                    if needed.count >= settings.rollupThreshold { covers = needed }
                    try db.recordRollupCheck(candidates: candidates.count)
                }
            } catch {
                failure = "could not read the devices' cursors: \(error)"
            }
        }
        if let covers, !stop() {
            var written: URL?
            defer { if let written { try? fm.removeItem(at: written) } }
            do {
                if let r = try db.writeRollup(covering: covers, to: home.support, signingKey: signingKey) {
                    // Named so that a run killed before the removal leaves a file the next run's cleanup knows.
                    let file = home.support.appendingPathComponent(".catch-up-rollup-\(r.id).sqlite", isDirectory: false)
                    try? fm.removeItem(at: file)
                    try fm.moveItem(at: URL(fileURLWithPath: r.file), to: file)
                    written = file
                    let key = inbound + r.id + SyncDatabase.rollupSuffix
                    try await retry.run { try await remote.upload(file: file, key: key, ifAbsent: true) }
                    try db.recordOwnRollup(id: r.id, covers: r.covers)
                    stale = plan.own
                    summary.append("uploaded \(key), standing in for \(r.covers.count) diff(s) of this device (\(r.rows) row(s))")
                }
            } catch {
                failure = "\(error)"
            }
        }
        var removed = 0
        for id in Set(stale) {
            do {
                try await retry.run { try await remote.delete(key: inbound + id + SyncDatabase.rollupSuffix) }
                removed += 1
            } catch {
                failure = failure ?? "\(inbound + id + SyncDatabase.rollupSuffix): \(error)"
            }
        }
        if removed > 0 { summary.append("removed \(removed) older roll-up(s)") }
        if !summary.isEmpty || failure != nil {
            report.phases.append(SyncPhase(name: "rollup", ok: failure == nil, summary: summary.isEmpty ? "no roll-up uploaded" : summary.joined(separator: "; "),
                                           error: failure.map { "\($0); the diffs themselves stay in inbound, so nothing is missing" }))
        }
    }
}
