import Crypto
import DiffFormat
import Foundation
import RTSQLite

// Roll-ups: a device offline while another synced many times would otherwise open one file per small diff (SQLite
// needs about 0.1 ms just to open and check one). The author remembers the keys each small diff of its own carried;
// while enough of them are still listed in inbound, its sync uploads one roll-up beside them: the present state of
// every row they touched, written as the catch-up after a restore writes a snapshot's state, naming the diffs it
// stands in for. A device with some of them pending merges the roll-up and records the covered diffs as applied;
// without it (missing, refused, waiting for rows) it applies the diffs themselves, so nothing depends on it.

/// A roll-up this database wrote.
public struct RollupResult: Sendable, Equatable {
    /// The finished file (`<id>.sqlite`, uploaded as `<id>.rollup.sqlite`).
    public var file: String
    /// Its id.
    public var id: String
    /// The diffs it stands in for.
    public var covers: [String]
    /// Rows it carries.
    public var rows: Int
}

extension SyncDatabase {
    /// Most distinct keys a diff may carry and still be remembered for a roll-up (larger diffs are never covered).
    static let rollupKeysPerDiff = 512
    /// Most keys one roll-up carries.
    static let rollupKeyLimit = 20_000
    /// The file-name suffix of a roll-up in inbound: old versions, which know only `<KSUID>.sqlite`, pass it by.
    public static let rollupSuffix = ".rollup.sqlite"

    static let rollupTablesSQL = """
        CREATE TABLE IF NOT EXISTS rtsync_sent_keys(diff_id TEXT NOT NULL, tid INTEGER NOT NULL, pk TEXT NOT NULL,
          PRIMARY KEY(diff_id, tid, pk)) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS rtsync_rollups(id TEXT PRIMARY KEY, covers TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS rtsync_rollup_check(candidates INTEGER NOT NULL);
        """

    /// The roll-up id an inbound object name carries (`<KSUID>.rollup.sqlite`), or nil.
    public static func rollupID(fromFileName name: String) -> KSUID? {
        guard name.hasSuffix(rollupSuffix), !name.contains("/") else { return nil }
        return try? KSUID(string: String(name.dropLast(rollupSuffix.count)))
    }

    /// Inside export's transaction, before the exported changes are removed: remembers the keys of a diff with at most
    /// `rollupKeysPerDiff` of them, for a later roll-up to send those rows' state.
    func recordSentKeys(diffID: String, throughSeq maxSeq: Int64) throws {
        let n = try db.scalar("SELECT count(*) FROM (SELECT DISTINCT tid, pk FROM rtsync_changes WHERE seq <= ? LIMIT ?)",
                              [.integer(maxSeq), .integer(Int64(Self.rollupKeysPerDiff) + 1)])?.int64 ?? 0
        // (The table is made with the bookkeeping, `upgradeBookkeeping`, which every export runs first.)
        guard n > 0, n <= Self.rollupKeysPerDiff else { return }
        try db.execute("INSERT OR IGNORE INTO rtsync_sent_keys(diff_id, tid, pk) SELECT DISTINCT ?, tid, pk FROM rtsync_changes WHERE seq <= ?",
                       [.text(diffID), .integer(maxSeq)])
    }

    /// What a sync should do about roll-ups of this device, given the ids of the diffs listed in inbound, the own
    /// roll-ups listed there and the diffs still waiting in the outbox.
    /// - `candidates`: the own diffs listed whose keys are remembered, when there are at least `threshold` of them,
    ///   the newest own roll-up listed does not cover them all, and their number moved by `threshold / 2` since the
    ///   last look at the other devices' cursors (`recordRollupCheck`), so an idle or steady sync reads no cursor;
    ///   else nil. The caller keeps those some other device has not applied.
    /// - `stale`: own roll-ups to delete from the bucket (older than the newest, or covering nothing still listed).
    /// - `own`: every own roll-up listed.
    /// Also forgets the keys of own diffs neither listed nor waiting (compaction pruned them).
    public func planRollup(listed: [String], listedRollups: [String], outbox: [String], threshold: Int) throws -> (candidates: [String]?, stale: [String], own: [String]) {
        try locked {
            guard threshold > 0, try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_rollup_check'") != nil else { return (nil, [], []) }
            let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
            let listedSet = Set(listed)
            let remembered = Set(try db.rows("SELECT DISTINCT diff_id FROM rtsync_sent_keys").compactMap { $0[0].string })
            // This site's own exports (keys remembered before a restore belong to the site it had then).
            let isOwn = try db.prepare("SELECT 1 FROM rtsync_applied WHERE diff_id = ? AND kind = 'changes' AND author_site = ?")
            let candidates = try remembered.intersection(listedSet).sorted().filter { id in
                try isOwn.bind([.text(id), .text(site)])
                defer { isOwn.reset() }
                return try isOwn.step()
            }
            // Keys of diffs gone from inbound are no longer needed; those still in the outbox will be listed.
            let gone = remembered.subtracting(listedSet).subtracting(outbox)
            if !gone.isEmpty {
                try db.transaction {
                    for id in gone { try db.execute("DELETE FROM rtsync_sent_keys WHERE diff_id = ?", [.text(id)]) }
                }
            }
            var known: [String: Set<String>] = [:]
            for r in try db.rows("SELECT id, covers FROM rtsync_rollups") {
                if let id = r[0].string { known[id] = Set((r[1].string ?? "").split(separator: ",").map(String.init)) }
            }
            let mine = listedRollups.filter { known[$0] != nil }.sorted()
            var stale = Array(mine.dropLast())
            if let newest = mine.last, known[newest]!.isDisjoint(with: listedSet) { stale.append(newest) }
            // Rows of roll-ups no longer listed (deleted, or never uploaded) go too.
            let unlisted = Set(known.keys).subtracting(listedRollups)
            if !unlisted.isEmpty {
                try db.transaction { for id in unlisted { try db.execute("DELETE FROM rtsync_rollups WHERE id = ?", [.text(id)]) } }
            }
            guard candidates.count >= threshold else { return (nil, stale, mine) }
            if let newest = mine.last, Set(candidates).isSubset(of: known[newest]!) { return (nil, stale, mine) }
            if let checked = try db.scalar("SELECT candidates FROM rtsync_rollup_check")?.int64,
               candidates.count >= checked, candidates.count < Int(checked) + max(1, threshold / 2) { return (nil, stale, mine) }
            return (candidates, stale, mine)
        }
    }

    /// Writes a roll-up of this device's diffs `covers` into `directory`: the present state of every row they carried
    /// (as remembered at export). Returns nil when those rows are too many for one roll-up (`rollupKeyLimit`).
    public func writeRollup(covering covers: [String], to directory: URL, signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> RollupResult? {
        try locked {
            try requireTracked()
            var keys: [Int64: Set<String>] = [:]
            var count = 0
            let read = try db.prepare("SELECT tid, pk FROM rtsync_sent_keys WHERE diff_id = ?")
            for id in covers {
                try read.bind([.text(id)])
                while try read.step() {
                    guard let tid = read.column(0).int64, let pk = read.column(1).string else { continue }
                    if keys[tid, default: []].insert(pk).inserted { count += 1 }
                }
                read.reset()
                if count > Self.rollupKeyLimit { return nil }
            }
            // With the sequence number each carried, so a device that merges the roll-up sees no gap.
            let seq = try db.prepare("SELECT seq_last FROM rtsync_applied WHERE diff_id = ?")
            let list = try covers.map { id -> CoveredDiff in
                try seq.bind([.text(id)])
                defer { seq.reset() }
                return CoveredDiff(id: id, sequence: try seq.step() ? seq.column(0).int64 : nil)
            }
            // One read transaction: the rows, their clocks and the unexported changes as of one moment.
            let written = try db.transaction(immediate: false) { try Self.writeState(of: db, to: directory, keys: keys, covers: list, signingKey: signingKey) }
            return RollupResult(file: written.file.path, id: DiffFile.diffID(fromFileName: written.file.lastPathComponent)?.string ?? "",
                                covers: Set(covers).sorted(), rows: written.rows)
        }
    }

    /// Records how many candidates `planRollup` gave when the other devices' cursors were last read.
    public func recordRollupCheck(candidates: Int) throws {
        try locked {
            try db.transaction {
                try db.execute("DELETE FROM rtsync_rollup_check")
                try db.execute("INSERT INTO rtsync_rollup_check(candidates) VALUES (?)", [.integer(Int64(candidates))])
            }
        }
    }

    /// Records that this device uploaded roll-up `id` covering `covers` (so its syncs never merge it, and a later
    /// roll-up replaces it).
    public func recordOwnRollup(id: String, covers: [String]) throws {
        try locked {
            let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
            let user = try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
            try db.transaction {
                try db.execute("INSERT OR REPLACE INTO rtsync_rollups(id, covers) VALUES (?, ?)", [.text(id), .text(covers.joined(separator: ","))])
                try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?, 'rollup', ?, ?, NULL, NULL, ?)",
                               [.text(id), .text(user), .text(site), .text(ISO8601.format(Date(), fractional: true))])
            }
        }
    }

    /// Merges another device's roll-up at `url`; once it is applied, every diff it covers is recorded as applied
    /// here too (in the same transaction, `Merger`). Returns the merge's report and those diffs (none unless it was
    /// applied, now or before). A roll-up that is not applied (refused, waiting for rows) records nothing: the
    /// covered diffs are then applied as they are. Which roll-ups to trust (the user, signatures) is the caller's
    /// decision, as for diffs (`Syncer`).
    public func mergeRollup(_ url: URL, quarantine: URL? = nil) -> (report: ApplyReport, covered: [String]) {
        do {
            return mergeRollup(url, reader: try DiffReader(url: url, rowValidation: .whileReading), quarantine: quarantine)
        } catch {
            return (ApplyReport(file: url.path, diffID: nil, status: .rejected, reason: "\(error)"), [])
        }
    }

    /// `mergeRollup(_:quarantine:)` for a file the caller has opened as `reader` (for its metadata only: apply
    /// reads and checks the file again, every row and the digest).
    func mergeRollup(_ url: URL, reader: DiffReader, quarantine: URL? = nil) -> (report: ApplyReport, covered: [String]) {
        let m = reader.metadata
        guard m.kind == .rollup, let covers = m.covers else {
            return (ApplyReport(file: url.path, diffID: m.id.string, status: .rejected, reason: "not a rollup (kind \(m.kind.rawValue))"), [])
        }
        guard m.authorSite != (try? siteID()) else {
            return (ApplyReport(file: url.path, diffID: m.id.string, status: .skipped, reason: "a roll-up of this device"), [])
        }
        let report = apply(diff: url, quarantine: quarantine)
        // (The same file as `reader` read: apply recorded what it read, and a file replaced meanwhile names another id.)
        guard report.diffID == m.id.string, report.status == .applied || report.status == .skipped && report.reason == Self.alreadyAppliedReason else { return (report, []) }
        return (report, covers.map(\.id))
    }
}
