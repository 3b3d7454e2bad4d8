import CClone
import DiffFormat
import Foundation
import RTSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension SyncDatabase {
    /// Applies diff files in KSUID order; each diff is one transaction and is applied at most once.
    ///
    /// A rejected diff leaves the database unchanged and is moved to `quarantine` (when given); a diff deferred for
    /// rows another diff of the batch brings is applied after it.
    ///
    /// When any diff applied, open conflict entries whose losing value is now in place (a restore made on another
    /// device arrived) are marked restored (`settleConflictsByCurrentValues`).
    ///
    /// `onDiff` is told before each diff of the first pass starts (how many are done, how many in all, the next one),
    /// for a progress display.
    public func apply(diffs urls: [URL], quarantine: URL? = nil, limits: DiffLimits = .default, shouldStop: (@Sendable () -> Bool)? = nil,
                      onDiff: ((_ done: Int, _ total: Int, _ next: URL) -> Void)? = nil) -> [ApplyReport] {
        let ordered = urls.enumerated().sorted { a, b in
            let ka = DiffFile.diffID(fromFileName: a.element.lastPathComponent), kb = DiffFile.diffID(fromFileName: b.element.lastPathComponent)
            switch (ka, kb) {
            case let (x?, y?): return x < y
            case (nil, _?): return false
            case (_?, nil): return true
            default: return a.offset < b.offset
            }
        }.map(\.element)
        // With `shouldStop`, diffs not started when it says so get no report and stay where they are.
        // Small diffs are applied several to a transaction (SyncDatabase+Groups), each in its own savepoint.
        let firstPass = applyInGroups(ordered, quarantine: quarantine, limits: limits, shouldStop: shouldStop, onDiff: onDiff)
        var reports = firstPass.reports
        let stopped = firstPass.stopped
        // A diff deferred for rows another diff of the batch brings is tried again once that one is applied.
        var progress = !stopped && reports.contains { $0.status == .applied }
        retrying: while progress, reports.contains(where: { $0.status == .deferred }) {
            progress = false
            for i in reports.indices where reports[i].status == .deferred {
                if shouldStop?() == true { break retrying }
                reports[i] = apply(diff: ordered[i], quarantine: quarantine, limits: limits)
                if reports[i].status == .applied { progress = true }
            }
        }
        // Diffs still waiting for rows, each for rows another of them brings (a row that lost a UNIQUE collision here,
        // whose reference a later diff of its author settles, while that diff needs rows of the first): applied together,
        // in file order in one transaction whose commit checks the foreign keys, as one diff holding both. All or none:
        // nothing goes to quarantine from this try, and when any of them fails they stay deferred.
        let waiting = reports.indices.filter { reports[$0].status == .deferred && reports[$0].reason == Self.waitingForRowsReason }
        if !stopped, waiting.count >= 2, shouldStop?() != true {
            let together = applyGroup(waiting.map { ordered[$0] }, quarantine: nil, limits: limits, shouldStop: nil, together: true) { _ in }
            if together.committed, together.reports.count == waiting.count {
                for (k, i) in waiting.enumerated() { reports[i] = together.reports[k] }
            }
        }
        if reports.contains(where: { $0.status == .applied }) { _ = try? settleConflictsByCurrentValues() }
        return reports
    }

    /// The reason of a diff deferred for rows other diffs bring (a foreign key left unresolved).
    /// The reason of a diff skipped because this device applied it before.
    static let alreadyAppliedReason = "already applied"

    static let waitingForRowsReason = "refers to rows this device has not received yet (FOREIGN KEY); nothing was changed, apply it again after the diffs that bring them"

    /// Applies one diff file (see `apply(diffs:quarantine:limits:)`).
    public func apply(diff url: URL, quarantine: URL? = nil, limits: DiffLimits = .default) -> ApplyReport {
        apply(diff: url, quarantine: quarantine, limits: limits, replacingHeld: [])
    }

    /// Applies one diff; `replacingHeld` are held-back rows (`rtsync_held` ids) the diff carries again, removed in
    /// the same transaction.
    func apply(diff url: URL, quarantine: URL? = nil, limits: DiffLimits = .default, replacingHeld: [Int64]) -> ApplyReport {
        locked { applyLocked(diff: url, quarantine: quarantine, limits: limits, replacingHeld: replacingHeld, group: nil) }
    }

    /// The body of `apply(diff:)`, on the locked connection. `group`: inside a transaction of a group of diffs
    /// (`applyGroup`): the diff gets a savepoint instead of its own transaction, is never merged in bulk, and
    /// takes what the diffs before it in the group read (`ApplyGroupState`).
    func applyLocked(diff url: URL, quarantine: URL?, limits: DiffLimits, replacingHeld: [Int64], group: ApplyGroupState?) -> ApplyReport {
        let grouped = group != nil
        // A merge alone may have turned the capture triggers off for this connection; they are on again once it ends,
        // however it ends (a group's are turned on by `applyGroup`). Turning them on when they are on changes nothing.
        defer { if !grouped { try? db.setMainTriggers(enabled: true) } }
        do {
            var report = ApplyReport(file: url.path, diffID: nil, status: .rejected)
            func reject(_ reason: String) -> ApplyReport {
                report.status = .rejected
                report.reason = reason
                report.inserted = 0; report.updated = 0; report.deleted = 0; report.conflicts = 0; report.held = 0
                report.tablesCreated = []; report.columnsAdded = []; report.columnsKeptAside = []
                if let quarantine { report.quarantinedTo = Self.moveToQuarantine(url, folder: quarantine, reason: reason) }
                return report
            }
            func postpone(_ reason: String) -> ApplyReport {
                report.status = .deferred
                report.reason = reason
                report.inserted = 0; report.updated = 0; report.deleted = 0; report.conflicts = 0; report.held = 0
                report.tablesCreated = []; report.columnsAdded = []; report.columnsKeptAside = []
                return report
            }
            // The reader reads a private copy when rows may be written in bulk: that attaches the file a second
            // time, and both reads must see the bytes that were checked even if `url` is replaced meanwhile.
            let copy = !grouped && bulkApply && db.interpretsURIs ? Self.privateCopy(of: url, limits: limits, minimumBytes: bulkApplyMinimumBytes) : nil
            defer { if let copy { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) } }
            let reader: DiffReader
            do { reader = try DiffReader(url: url, contentsAt: copy ?? url, limits: limits, rowValidation: .whileReading) } catch let e as DiffFormatError {
                return reject(e.reason)
            } catch { return reject("\(error)") }
            let meta = reader.metadata
            report.diffID = meta.id.string
            do {
                // Bookkeeping is installed once (track does it); only a never-tracked database needs it here.
                if !grouped, (try? requireTracked()) == nil { try db.transaction { try installBookkeeping() } }
                // The two skips below read no row to merge: check the content first, as a merge would.
                let appliedSQL = "SELECT 1 FROM rtsync_applied WHERE diff_id = ?"
                if try (group.map { try $0.scalar(db, appliedSQL, [.text(meta.id.string)]) } ?? db.scalar(appliedSQL, [.text(meta.id.string)])) != nil {
                    try reader.forEachChange { _ in }
                    report.status = .skipped
                    report.reason = Self.alreadyAppliedReason
                    return report
                }
                let ownSite = try group?.ownSite ?? db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
                group?.ownSite = ownSite
                if meta.authorSite == ownSite {
                    try reader.forEachChange { _ in }
                    // Recorded as handled, without its sequence numbers: a file that only claims to be ours says
                    // nothing about which of our diffs exist.
                    try db.execute("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?,?,?,?,NULL,NULL,?)",
                                   [.text(meta.id.string), .text(meta.kind.rawValue), .text(meta.authorUser), .text(meta.authorSite),
                                    .text(ISO8601.format(Date(), fractional: true))])
                    report.status = .skipped
                    report.reason = "this device's own diff"
                    return report
                }
                // The merge may attach the diff to copy new rows in bulk; it is detached once the transaction ends.
                // (A diff in a group is never merged in bulk, so never attached.)
                defer { if !grouped { try? db.execute("DETACH DATABASE " + Merger.attachedDiff) } }
                var bulkRows = 0, bulkKnownRows = 0
                var after: ApplyGroupState.Carried?
                do {
                    try diffTransaction(grouped: grouped, checkForeignKeys: group?.foreignKeysAtCommit != true) {
                        for id in replacingHeld {
                            try db.execute("DELETE FROM rtsync_held_cells WHERE held_id = ?", [.integer(id)])
                            try db.execute("DELETE FROM rtsync_held WHERE id = ?", [.integer(id)])
                        }
                        if group?.bookkeepingCurrent != true { try upgradeBookkeeping() }
                        var merger = try Merger(db: db, reader: reader, ownSite: ownSite, resolvers: resolvers, report: report)
                        merger.bulkAllowed = copy != nil
                        merger.knownRowsAllowed = bulkApplyKnownRows
                        merger.group = group
                        // Statements kept for the next diff of a group must not be left running when the savepoint
                        // is released or rolled back.
                        defer { if grouped { for s in merger.statements.values { s.reset() } } }
                        try merger.run()
                        report = merger.report
                        bulkRows = merger.bulkRows
                        bulkKnownRows = merger.bulkKnownRows
                        after = merger.carried
                    }
                } catch {
                    // Rolled back to the savepoint (or the whole group gone): the next diff reads it all again rather
                    // than rely on what the group knew from before this diff.
                    group?.forget()
                    throw error
                }
                if let after { group?.carry(after) }
                bulkRowsWritten += bulkRows
                bulkKnownRowsMerged += bulkKnownRows
                report.status = .applied
                return report
            } catch let e as DiffFormatError {
                return reject(e.reason)
            } catch let e as SyncEngineError {
                if case .diffRejected(_, let reason) = e { return reject(reason) }
                return reject(e.description)
            } catch let e as SQLiteError where e.isBusy {
                // Another connection holds the database: a reason to try again later, never to quarantine the diff.
                return postpone("the database is busy (another connection held its write lock past the busy timeout); nothing was changed, apply it again later")
            } catch let e as SQLiteError where e.isForeignKeyViolation {
                // Diffs may arrive in any order: a row whose parent another diff brings waits for it.
                return postpone(Self.waitingForRowsReason)
            } catch let e as SQLiteError {
                return reject(e.isConstraintViolation ? "constraint failed: \(e.message)" : e.description)
            } catch {
                return reject("\(error)")
            }
        }
    }

    /// A copy of `url` in a new folder only this user can read (a clone where the filesystem allows), or nil
    /// when it cannot be made, or `url` is not a regular file, is smaller than `minimumBytes` or over the size
    /// limit (the reader then reads `url`, and says what is wrong with it). The checks and the copy go through
    /// one descriptor, opened without following a symbolic link or waiting on a FIFO, so a path replaced
    /// meanwhile cannot make the copy hang or grow past what was checked.
    static func privateCopy(of url: URL, limits: DiffLimits, minimumBytes: Int64) -> URL? {
        let fd = open(url.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
              Int64(info.st_size) >= minimumBytes, Int64(info.st_size) <= limits.maxFileBytes else { return nil }
        let fm = FileManager.default
        let folder = fm.temporaryDirectory.appendingPathComponent(HomeDebris.applyFolderPrefix + "\(getpid())-" + UUID().uuidString, isDirectory: true)
        do { try fm.createDirectory(at: folder, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700]) } catch { return nil }
        let copy = folder.appendingPathComponent(url.lastPathComponent, isDirectory: false)
        if rtsync_clone_open_file(fd, url.path, copy.path) == 0 || rtsync_copy_open_file(fd, copy.path) == 0 { return copy }
        try? fm.removeItem(at: folder)
        return nil
    }

    /// Moves a rejected diff into the quarantine folder beside a `.reason.txt`; returns its new path.
    static func moveToQuarantine(_ url: URL, folder: URL, reason: String) -> String? {
        quarantine(url, folder: folder, reason: reason, keepingOriginal: false)
    }

    /// Puts a rejected diff into the quarantine folder `folder` beside a `.reason.txt`, moved or (with
    /// `keepingOriginal`, for files that are not rtsync's own) copied; returns its path there, or nil.
    public static func quarantine(_ url: URL, folder: URL, reason: String, keepingOriginal: Bool) -> String? {
        let fm = FileManager.default
        do {
            try fm.createDirectory(at: folder, withIntermediateDirectories: true)
            var target = folder.appendingPathComponent(url.lastPathComponent)
            var info = stat()
            let regular = lstat(url.path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
            // The same file rejected again (a bad diff left in the bucket is downloaded by every sync): one copy.
            if regular, fm.contentsEqual(atPath: url.path, andPath: target.path) {
                if !keepingOriginal { try fm.removeItem(at: url) }
                try? Data((reason + "\n").utf8).write(to: URL(fileURLWithPath: target.path + ".reason.txt"))
                return target.path
            }
            if fm.fileExists(atPath: target.path) {
                target = folder.appendingPathComponent(KSUID.generate().string + "-" + url.lastPathComponent)
            }
            if keepingOriginal {
                // Only a regular file is copied: copying a FIFO would wait for a writer forever, and a folder
                // named like a diff would be copied whole. Otherwise the reason alone is kept.
                guard regular else {
                    try Data((reason + "\n(not copied: not a regular file)\n").utf8).write(to: URL(fileURLWithPath: target.path + ".reason.txt"))
                    return target.path + ".reason.txt"
                }
                try fm.copyItem(at: url, to: target)
            } else {
                try fm.moveItem(at: url, to: target)
            }
            try? Data((reason + "\n").utf8).write(to: URL(fileURLWithPath: target.path + ".reason.txt"))
            return target.path
        } catch { return nil }
    }
}

/// Merges one validated diff into the primary database inside the caller's transaction.
struct Merger {
    let db: Connection
    let reader: DiffReader
    let meta: DiffMetadata
    let ownSite: String
    let resolvers: [String: ConflictResolver]
    var report: ApplyReport
    var tracked: [String: TrackedInfo] = [:]
    /// Pending (not yet exported) local changes by row.
    var pending: [RowKey: PendingLocal] = [:]
    var statements: [String: Statement] = [:]
    var maxRemoteHLC: Int64 = 0
    /// The latest clock of any site in the diff (a state diff or a relayed row carries other sites' clocks): this
    /// device's clock moves past it, so that its next edit of such a row is later than what it holds.
    var maxAnyHLC: Int64 = 0
    /// The largest clock accepted: a day ahead of this device's wall time.
    let clockLimit = (HLC.wallMilliseconds() + 86_400_000) << 16
    var readOnlyShares = Set<RowKey>()
    var plans: [String: TablePlan] = [:]
    /// Each table's UNIQUE constraints and unique indexes, read on first use.
    var uniqueIndexes: [String: [UniqueIndex]] = [:]
    /// Foreign keys with ON DELETE RESTRICT or NO ACTION, by referenced table (lower-cased), read on first use.
    var restrictingKeys: [String: [RestrictingKey]]?
    /// Remote deletes of rows that children still referenced through such a key, decided once the diff is merged.
    var blockedDeletes: [(RowContext, LocalRow)] = []
    /// How this merge keeps its writes out of the change log, once it has decided (`run`).
    var captureSuspension: CaptureSuspension?
    /// Whether rows new to this device may be written in bulk (`insertNewRowsInBulk`).
    var bulkAllowed = true
    /// Rows written in bulk.
    var bulkRows = 0
    /// Whether rows this device already has may be merged in bulk (`mergeKnownRowsInBulk`).
    var knownRowsAllowed = true
    /// Rows of tables merged in bulk by `mergeKnownRowsInBulk` (new rows among them included).
    var bulkKnownRows = 0
    let now = ISO8601.format(Date(), fractional: true)

    /// Marks, in the conflict log, a local value that a merge decision made rather than an edit (an ON DELETE
    /// action applied for a parent deleted here): it has no clock of its own.
    static let unexported = Clock(hlc: HLC(rawValue: Int64.max), site: "")
    /// The largest clock this device has put in a diff it wrote (`rtsync_site.published_hlc`).
    var publishedHLC: Int64 = 0
    /// The group of diffs this one is applied in (`applyGroup`), with what the diffs before it read.
    var group: ApplyGroupState?

    /// How a merge keeps its own writes out of the change log (no echo).
    enum CaptureSuspension {
        /// The capture triggers are dropped, and re-created before the commit (the schema holds other triggers).
        case dropped
        /// Triggers are off for this connection until the apply ends (they are all capture triggers, as they are now).
        case turnedOff
    }

    /// A row's local changes not yet exported, with the clocks they got when they were made.
    struct PendingLocal {
        var sawInsert = false
        var lastOp: Int64 = 0
        /// Clock of the last insert.
        var insertHLC: Int64 = 0
        /// Clock of the last change of any kind.
        var lastHLC: Int64 = 0
        /// Clock of the last update of each column, by position in the trigger's column list.
        var columnHLC: [Int: Int64] = [:]

        /// Folds in one change-log entry (op 1 insert, 2 update of the columns in `mask`, 3 delete), in log order.
        mutating func record(op: Int64, mask: SQLValue, hlc: Int64) {
            lastOp = op
            lastHLC = hlc
            if op == 1 { sawInsert = true; insertHLC = hlc; columnHLC.removeAll() }
            if op == 2 { for position in SyncDatabase.changedPositions(mask) { columnHLC[position] = hlc } }
        }
    }

    init(db: Connection, reader: DiffReader, ownSite: String, resolvers: [String: ConflictResolver], report: ApplyReport) throws {
        self.db = db
        self.reader = reader
        self.meta = reader.metadata
        self.ownSite = ownSite
        self.resolvers = resolvers
        self.report = report
    }

    mutating func run() throws {
        // Compiled statements the group keeps (by SQL text; SQLite compiles one again itself after a schema change).
        if let group { statements = group.statements }
        publishedHLC = try group?.publishedHLC ?? db.scalar("SELECT published_hlc FROM rtsync_site")?.int64 ?? 0
        group?.publishedHLC = publishedHLC
        // No honest author can have seen changes of this device that it never published: a `seen` beyond them
        // would hide overwrites of this device's edits from the conflict log.
        if let claimed = meta.seen[ownSite], claimed > publishedHLC {
            throw SyncEngineError.diffRejected(file: reader.url.path, reason: "the diff claims to have seen changes of this device up to clock \(HLC(rawValue: claimed)), later than any it has published (\(HLC(rawValue: publishedHLC)))")
        }
        // Row order inside a diff must not matter: foreign keys are checked at commit.
        // Setting a flag pragma expires every compiled statement of the connection (SQLite's OP_Expire): in a group
        // it is on from the diff before (only COMMIT and ROLLBACK turn it off), and the statements the group keeps
        // would otherwise be compiled again for each diff.
        if try db.scalar("PRAGMA defer_foreign_keys")?.int64 != 1 { try db.execute("PRAGMA defer_foreign_keys = ON") }
        // Changes captured since a schema change are re-keyed to the columns as they are now, before any is read.
        // In a group, the diff before read the tracked tables after its own schema changes, and only a diff's
        // schema changes or this refresh change them: its reading is what `loadTracked` would read now.
        // A diff alone reads them once here (what `refreshTracking` and `adjustSchema` would each read again).
        let known = try group?.tracked ?? SyncDatabaseInternals.loadTracked(db)
        let retracked = try SyncDatabase.refreshTracking(db, tracked: known)
        let schemaChanged = try adjustSchema(known: retracked ? nil : known) || retracked
        tracked = schemaChanged ? try SyncDatabaseInternals.loadTracked(db) : known
        // Writes made while applying are not captured (no echo). When the schema holds no trigger but the capture
        // triggers as they are now, they are turned off for this connection until the transaction ends
        // (`applyLocked` and `applyGroup` turn them on again, whatever happens): no schema change. Otherwise they
        // are dropped for the length of this transaction and re-created before it commits (a rollback restores
        // them too). In a group they stay off from the first diff merged to the group's commit.
        if group?.captureSuspended != true || schemaChanged {
            if try SyncDatabase.holdsOnlyCurrentCaptureTriggers(db, tracked: tracked) {
                try db.setMainTriggers(enabled: false)
                captureSuspension = .turnedOff
            } else {
                for info in tracked.values { try SyncDatabaseInternals.dropTriggers(db, tid: info.table.id) }
                captureSuspension = .dropped
            }
        }
        // In a group, the unexported local changes as the diff before left them: every write the merge makes to
        // the change log it also makes to its copy (`captureDecision`, `purgePending`).
        if let before = group?.pending, !schemaChanged { pending = before } else { try loadPending() }
        if let group {
            // The plans of tables carried again with the same definition.
            if !schemaChanged {
                for remoteDef in reader.tables { if let p = group.plans[remoteDef.name], p.remoteDef == remoteDef { plans[remoteDef.name] = p } }
            }
        }
        try loadReadOnlyShares()
        if let bulk = try insertNewRowsInBulk() {
            // Every row and the digest were checked while the new rows were written; merge the rest.
            if !bulk.wroteEverything(of: reader) {
                try reader.forEachRow(validated: true) { row in
                    if bulk.wrote(row) { try self.noteClocks(row) } else { try self.merge(row) }
                }
            }
            maxRemoteHLC = max(maxRemoteHLC, bulk.maxAuthorHLC)
            maxAnyHLC = max(maxAnyHLC, bulk.maxAnyHLC)
        } else {
            try reader.forEachRow { row in try self.merge(row) }
        }
        try finishBlockedDeletes()
        if group == nil, captureSuspension == .dropped { try SyncDatabase.installAllTriggers(db) }
        try cached("INSERT INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at, inserted, updated, deleted, conflicts) VALUES (?,?,?,?,?,?,?,?,?,?,?)").run(
                       [.text(meta.id.string), .text(meta.kind.rawValue), .text(meta.authorUser), .text(meta.authorSite),
                        meta.sequenceFirst.map { .integer($0) } ?? .null, meta.sequenceLast.map { .integer($0) } ?? .null, .text(now),
                        .integer(Int64(report.inserted)), .integer(Int64(report.updated)), .integer(Int64(report.deleted)), .integer(Int64(report.conflicts))])
        // A roll-up stands in for the diffs it names: they are applied with it, in the same transaction (with their
        // sequence numbers, so no gap shows).
        if meta.kind == .rollup, let covers = meta.covers {
            let add = try cached("INSERT OR IGNORE INTO rtsync_applied(diff_id, kind, author_user, author_site, seq_first, seq_last, applied_at) VALUES (?, 'changes', ?, ?, ?, ?, ?)")
            for c in covers {
                let seq: SQLValue = c.sequence.map { .integer($0) } ?? .null
                try add.run([.text(c.id), .text(meta.authorUser), .text(meta.authorSite), seq, seq, .text(now)])
            }
        }
        // Move the local clock past everything seen, so later local edits win over what was just applied.
        // A clock more than a day ahead of our wall time is not followed (a badly skewed or hostile device).
        if max(maxRemoteHLC, maxAnyHLC) > 0 {
            try cached("UPDATE rtsync_site SET hlc = max(hlc, ?)").run([.integer(max(maxRemoteHLC, maxAnyHLC))])
        }
        if maxRemoteHLC > 0 {
            try cached("INSERT INTO rtsync_seen(site, hlc) VALUES (?, ?) ON CONFLICT(site) DO UPDATE SET hlc = max(hlc, excluded.hlc)")
                .run([.text(meta.authorSite), .integer(maxRemoteHLC)])
        }
    }

    /// What the next diff of the group may take from this one: read after its last schema change, and kept in
    /// step with its writes.
    var carried: ApplyGroupState.Carried {
        .init(tracked: tracked, pending: pending, plans: plans, statements: statements, droppedTriggers: captureSuspension == .dropped)
    }

    // MARK: - Schema adjustment

    /// Creates missing tables and adds missing columns from the diff's structured definitions;
    /// never runs SQL text from the file. A different primary key rejects the diff. `known`: the tracked tables as
    /// `loadTracked` reads them now, when the caller has them. Returns whether the schema or tracking changed.
    mutating func adjustSchema(known: [String: TrackedInfo]? = nil) throws -> Bool {
        let file = reader.url.path
        var changed = false
        for incoming in reader.tables {
            // What `known` says holds until this loop changes the schema.
            let current = changed ? nil : known
            // SQLite matches table and column names case-insensitively: use the local spelling throughout.
            var def = incoming
            if let localName = try cachedScalar("SELECT name FROM sqlite_schema WHERE type = 'table' AND name = ? COLLATE NOCASE", [.text(incoming.name)])?.string {
                def.name = localName
            }
            let knownInfo = current?[def.name]
            if let local = try knownInfo?.definition ?? TableDefinition.read(table: def.name, from: db) {
                // A table that exists here but is not tracked was left out on purpose (local-only data):
                // a diff may neither write into it nor start exporting it.
                guard try knownInfo != nil || db.scalar("SELECT 1 FROM rtsync_tracked WHERE name = ? COLLATE NOCASE", [.text(def.name)]) != nil else {
                    throw SyncEngineError.diffRejected(file: file, reason: "table '\(def.name)' exists here but is not tracked; rtsync does not write to untracked tables: to sync it, run `rtsync track --db \(db.path) \(def.name)` and apply the diff again; to keep it local, stop tracking it on the device that sent the diff")
                }
                let lp = local.primaryKeyColumns.map { $0.lowercased() }, rp = def.primaryKeyColumns.map { $0.lowercased() }
                guard lp == rp else {
                    throw SyncEngineError.diffRejected(file: file, reason: "incompatible schema for table '\(def.name)': primary key (\(rp.joined(separator: ", "))) in the diff, (\(lp.joined(separator: ", "))) here")
                }
                let tracked = try current ?? SyncDatabaseInternals.loadTracked(db)
                let info = tracked[def.name] ?? tracked.values.first { $0.table.name.lowercased() == def.name.lowercased() }
                // A column renamed between app versions is found under its name here (Merger+Renames).
                let translated = SyncDatabase.translatedColumns(remote: def.columnNames, local: local.columnNames, renames: info?.renames ?? [])
                for (column, localName) in zip(def.columns, translated) {
                    guard let i = local.columnIndex(localName ?? column.name) else { continue }
                    let here = local.columns[i]
                    if KeyAffinity(declaredType: column.type) != KeyAffinity(declaredType: here.type) {
                        let key = local.primaryKeyColumns.contains { $0.lowercased() == column.name.lowercased() }
                        report.typeDifferences.append("\(def.name).\(here.name)\(key ? " (key)" : ""): \(column.type.isEmpty ? "no type" : column.type) in the diff, \(here.type.isEmpty ? "no type" : here.type) here")
                    }
                }
                let missing = zip(def.columns, translated).filter { local.columnIndex($1 ?? $0.name) == nil }.map(\.0)
                // Only the owner changes an owner-only table, its schema included: another user's diff may not add columns.
                if !missing.isEmpty, try db.scalar("SELECT policy FROM rtsync_tracked WHERE name = ? COLLATE NOCASE", [.text(def.name)])?.string == MergePolicy.ownerOnly.rawValue,
                   let ownUser = try db.scalar("SELECT user_id FROM rtsync_site")?.string, !ownUser.isEmpty, meta.authorUser != ownUser {
                    throw SyncEngineError.diffRejected(file: file, reason: "user '\(meta.authorUser)' may not add columns (\(missing.map(\.name).joined(separator: ", "))) to the owner-only table '\(def.name)'")
                }
                if let info, !missing.isEmpty, !info.table.policy.addColumns {
                    // The table stays as this app version made it; the values are kept aside (Merger+Aside).
                    try db.execute(SyncDatabase.asideTablesSQL)
                    for column in missing {
                        try db.execute("INSERT OR IGNORE INTO rtsync_aside_cols(tid, col, type) VALUES (?, ?, ?)", [.integer(info.table.id), .text(column.name), .text(column.type)])
                        report.columnsKeptAside.append(def.name + "." + column.name)
                    }
                    changed = true
                    continue
                }
                for column in missing {
                    do { try db.executeSingle(def.addColumnSQL(column)) } catch {
                        throw SyncEngineError.diffRejected(file: file, reason: "cannot add column '\(column.name)' to '\(def.name)': \(error)")
                    }
                    report.columnsAdded.append(def.name + "." + column.name)
                    changed = true
                }
                if report.columnsAdded.contains(where: { $0.hasPrefix(def.name + ".") }) {
                    _ = try SyncDatabaseInternals.trackTable(db, def.name)
                    changed = true
                }
            } else {
                let sql: String
                do { sql = try def.createTableSQL(file: file) } catch let e as DiffFormatError {
                    throw SyncEngineError.diffRejected(file: file, reason: e.reason)
                }
                try db.executeSingle(sql)
                _ = try SyncDatabaseInternals.trackTable(db, def.name)
                report.tablesCreated.append(def.name)
                changed = true
            }
        }
        return changed
    }

    /// Rows shared read-only with the diff's author (when it is another user).
    mutating func loadReadOnlyShares() throws {
        let ownUser = try cachedScalar("SELECT user_id FROM rtsync_site")?.string ?? ""
        guard meta.authorUser != ownUser, !meta.authorUser.isEmpty,
              try cachedScalar("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'rtsync_shares'") != nil else { return }
        for r in try db.rows("SELECT tid, pk FROM rtsync_shares WHERE to_user = ? AND permission = 'read-only'", [.text(meta.authorUser)]) {
            if let tid = r[0].int64, let pk = r[1].string { readOnlyShares.insert(RowKey(tid, pk)) }
        }
    }

    mutating func loadPending() throws {
        let s = try db.prepare("SELECT tid, pk, op, cols, hlc FROM rtsync_changes ORDER BY seq")
        while try s.step() {
            guard let tid = s.column(0).int64, let pk = s.column(1).string, let op = s.column(2).int64 else { continue }
            let hlc = s.column(4).int64 ?? 0
            let key = RowKey(tid, pk)
            pending[key, default: PendingLocal()].record(op: op, mask: s.column(3), hlc: hlc)
        }
    }

    // MARK: - Local state of one row

    struct LocalRow {
        var key: String
        var hasMeta = false               // whether rtsync_rows has an entry for the key
        var values: [SQLValue]?          // local columns in local order, nil when no row
        var born: Clock                  // incarnation (an unexported insert's own clock)
        var deleted: Clock?              // tombstone clock when deleted (an unexported delete's own clock)
        var clocks: [String: Clock]      // per-column clocks (lower-cased names)
        var pending: PendingLocal?
        var pendingClocks: [String: Clock] // lower-cased names changed locally and not yet exported, with their clocks
        /// Whether this incarnation of the row was made here and never exported (it exists nowhere else).
        var newHere: Bool { pending?.sawInsert == true && values != nil }
    }

    /// Statements are cached by text; SQLite re-prepares them itself if the schema changes.
    mutating func cached(_ sql: String) throws -> Statement { try db.kept(sql, in: &statements) }

    /// The first column of the first row of a cached statement, reset before returning (no read stays open).
    mutating func cachedScalar(_ sql: String, _ arguments: [SQLValue] = []) throws -> SQLValue? {
        try db.scalar(sql, arguments, keptIn: &statements)
    }

    /// The row key text the capture triggers make (`SyncDatabase.keyValueText`): built here for integers,
    /// text and blobs, asked of SQLite for REALs and text holding a NUL byte (SQLite's own formatting).
    /// `values` are the key of a row of `def`, in key order.
    mutating func keyText(_ values: [SQLValue], of def: TableDefinition) throws -> String {
        if values.count == 1, !values[0].isReal, let text = KeyCodec.exactText(values[0]) { return text }
        let numbers = values.contains(where: \.isReal) ? SyncDatabase.numberKeys(def) : []
        let texts = values.indices.map { KeyCodec.exactText(values[$0], number: $0 < numbers.count && numbers[$0]) }
        if !texts.contains(nil) { return texts.map { $0! }.joined(separator: ",") }
        let utf8 = try cachedScalar("PRAGMA main.encoding")?.string == "UTF-8"
        let s = try cached("SELECT " + (1...values.count).map { SyncDatabase.keyValueText("?\($0)", utf8: utf8, numbers: $0 <= numbers.count && numbers[$0 - 1]) }.joined(separator: " || ',' || "))
        try s.bind(values)
        _ = try s.step()
        return s.column(0).string ?? ""
    }

    mutating func localRow(_ info: TrackedInfo, keyValues: [SQLValue], plan: TablePlan) throws -> LocalRow {
        let def = info.definition
        let key = try keyText(keyValues, of: def)
        let tid = info.table.id
        let select = try cached(plan.selectSQL)
        try select.bind(keyValues)
        let values = try select.step() ? select.row() : nil
        select.reset()
        let metaStmt = try cached("SELECT born_hlc, born_site, del_hlc, del_site FROM rtsync_rows WHERE tid = ? AND pk = ?")
        try metaStmt.bind([.integer(tid), .text(key)])
        var born = Clock.zero
        var deleted: Clock?
        let hasMeta = try metaStmt.step()
        if hasMeta {
            born = Clock(hlc: HLC(rawValue: metaStmt.column(0).int64 ?? 0), site: metaStmt.column(1).string ?? "")
            if let d = metaStmt.column(2).int64 { deleted = Clock(hlc: HLC(rawValue: d), site: metaStmt.column(3).string ?? "") }
        }
        metaStmt.reset()
        var clocks: [String: Clock] = [:]
        // Column clocks only matter for a row that exists here (a missing row's clocks are cleared on insert).
        if values != nil {
            let clockStmt = try cached("SELECT col, hlc, site FROM rtsync_clocks WHERE tid = ? AND pk = ?")
            try clockStmt.bind([.integer(tid), .text(key)])
            while try clockStmt.step() {
                clocks[(clockStmt.column(0).string ?? "").lowercased()] = Clock(hlc: HLC(rawValue: clockStmt.column(1).int64 ?? 0), site: clockStmt.column(2).string ?? "")
            }
        }
        let p = pending[RowKey(tid, key)]
        var pendingClocks: [String: Clock] = [:]
        var deletedHere: Clock?
        if let p {
            func own(_ hlc: Int64) -> Clock { Clock(hlc: HLC(rawValue: hlc), site: ownSite) }
            if p.sawInsert && values != nil {
                born = own(p.insertHLC)
                for c in def.columnNames { pendingClocks[c.lowercased()] = born }
            }
            for (i, hlc) in p.columnHLC where i < info.table.columns.count {
                let c = info.table.columns[i].lowercased()
                // An edit older than what a remote change wrote since then no longer holds the column.
                if let recorded = clocks[c], recorded > own(hlc) { continue }
                pendingClocks[c] = own(hlc)
            }
            if p.lastOp == 3 && values == nil { deletedHere = own(p.lastHLC) }
        }
        return LocalRow(key: key, hasMeta: hasMeta, values: values, born: born, deleted: values == nil ? (deletedHere ?? deleted) : nil,
                        clocks: clocks, pending: p, pendingClocks: pendingClocks)
    }

    /// The clock of a local column value: when it was edited here (not yet exported), or the recorded clock.
    func localClock(_ row: LocalRow, _ column: String) -> Clock {
        let c = column.lowercased()
        if let clock = row.pendingClocks[c] { return clock }
        return row.clocks[c] ?? row.born
    }

    /// Whether the author of the diff had not seen the local value when it wrote its change: only then is
    /// overwriting it (or refusing the remote value) a conflict worth logging. A change this device has not
    /// published cannot have been seen.
    func isConcurrent(_ local: Clock) -> Bool {
        if local == Merger.unexported { return true }
        if local == .zero || local.site == meta.authorSite { return false }
        if local.site == ownSite && local.hlc.rawValue > publishedHLC { return true }
        return (meta.seen[local.site] ?? 0) < local.hlc.rawValue
    }
}

/// Internal entry points shared by SyncDatabase and the merger (both run on the locked connection).
enum SyncDatabaseInternals {
    static func loadTracked(_ db: Connection) throws -> [String: TrackedInfo] { try SyncDatabase.loadTracked(db) }
    static func dropTriggers(_ db: Connection, tid: Int64) throws { try SyncDatabase.dropTriggers(db, tid: tid) }
    static func trackTable(_ db: Connection, _ name: String) throws -> TrackedTable { try SyncDatabase.trackTable(db, name, policy: nil) }
}
