import DiffFormat
import Foundation
import RTSQLite

/// Catch-up: many small diffs applied several to a transaction.
///
/// A device back from a day offline has hundreds of one-row diffs to apply. Each in its own transaction pays a
/// commit (and its sync) per diff; a group shares one. Inside the group every diff still runs exactly the code
/// that applies it alone (`applyLocked`), in a savepoint of its own, so a diff that is rejected or has to wait is
/// rolled back to its savepoint alone and the others land. The group commits once at the end: a process killed
/// before that leaves nothing of any diff of the group applied (their files stay in the inbox), and the
/// never-twice record (`rtsync_applied`) commits with the rows it stands for.
/// What the diffs of one group read once instead of once per diff: a one-row diff spent most of its time
/// reading the tracked tables' definitions (three times), the change log and the site row, and dropping and
/// re-creating the capture triggers. Each diff still runs exactly the code that applies it alone; it starts
/// from what the diff before it in the group left, which is what reading it again would give:
/// - the tracked tables, read after the last schema change (only a diff's schema changes, or the refresh of
///   tracking at the start of each diff, change them; either makes the diff read them again);
/// - the unexported local changes: the merge makes every write to the change log to its copy too;
/// - the capture triggers stay dropped from the first diff merged to the end of the group, and are re-created
///   once before it commits (`applyGroup`), as each diff alone re-creates them before its commit.
/// A diff rolled back to its savepoint may leave any of this otherwise: the next diff then reads it all again.
final class ApplyGroupState {
    /// What one merged diff hands to the next.
    struct Carried {
        var tracked: [String: TrackedInfo]
        var pending: [RowKey: Merger.PendingLocal]
        var plans: [String: Merger.TablePlan]
        var statements: [String: Statement]
        /// Whether the diff dropped the capture triggers (rather than turn them off for the connection).
        var droppedTriggers: Bool
    }

    /// The tracked tables as `loadTracked` would read them now; nil: unknown.
    var tracked: [String: TrackedInfo]?
    /// The unexported local changes by row, as `Merger.loadPending` would read them now; nil: unknown.
    var pending: [RowKey: Merger.PendingLocal]?
    /// Whether the capture triggers of every tracked table are dropped, or turned off for the connection, now.
    var captureSuspended = false
    /// Whether a diff merged and released dropped them: they are re-created before the group commits.
    var triggersToRecreate = false
    /// This device's site id and published clock (no diff changes them).
    var ownSite: String?
    var publishedHLC: Int64?
    /// The plans the merges made of carried tables, valid with `tracked` (a diff takes those of the tables it
    /// carries with the same definition).
    var plans: [String: Merger.TablePlan] = [:]
    /// Statements the merges compiled, by SQL text (SQLite compiles one again itself when the schema changed).
    var statements: [String: Statement] = [:]

    /// Whether a diff of the group was merged and released: the bookkeeping is at this version (`upgradeBookkeeping`
    /// ran inside the group's transaction).
    var bookkeepingCurrent = false
    /// Foreign keys are checked once, by the group's commit, instead of after each diff (`applyGroup(together: true)`,
    /// for diffs that wait for each other's rows).
    var foreignKeysAtCommit = false

    /// Takes what a diff merged and released to its savepoint leaves.
    func carry(_ c: Carried) {
        tracked = c.tracked
        pending = c.pending
        plans = c.plans
        statements = c.statements
        captureSuspended = true
        triggersToRecreate = triggersToRecreate || c.droppedTriggers
        bookkeepingCurrent = true
    }

    /// `db.scalar(sql, arguments)` through a statement the group keeps (reset before returning, so no read stays
    /// open): the same few questions are asked of every diff of a group.
    func scalar(_ db: Connection, _ sql: String, _ arguments: [SQLValue] = []) throws -> SQLValue? {
        try db.scalar(sql, arguments, keptIn: &statements)
    }

    /// After a diff rolled back to its savepoint: nothing it may have changed is known any more (the savepoint
    /// restored what the diff before left, so this only costs the next diff one more reading).
    func forget() {
        tracked = nil
        pending = nil
        plans = [:]
        captureSuspended = false
        bookkeepingCurrent = false
    }
}

extension SyncDatabase {
    /// The first pass of `apply(diffs:)`: `ordered` applied in that order, runs of small diffs in groups.
    /// Returns a report for each diff started, and whether `shouldStop` ended the pass early.
    func applyInGroups(_ ordered: [URL], quarantine: URL?, limits: DiffLimits, shouldStop: (@Sendable () -> Bool)?,
                       onDiff: ((_ done: Int, _ total: Int, _ next: URL) -> Void)?) -> (reports: [ApplyReport], stopped: Bool) {
        var reports: [ApplyReport] = []
        var index = 0
        while index < ordered.count {
            if shouldStop?() == true { return (reports, true) }
            var end = index
            while end < ordered.count, end - index < max(1, applyGroupLimit), isGroupable(ordered[end]) { end += 1 }
            if end - index < 2 {
                // A large diff (merged in bulk, in a transaction of its own), or a small one alone.
                onDiff?(reports.count, ordered.count, ordered[index])
                reports.append(apply(diff: ordered[index], quarantine: quarantine, limits: limits))
                index += 1
                continue
            }
            let group = Array(ordered[index..<end])
            let outcome = applyGroup(group, quarantine: quarantine, limits: limits, shouldStop: shouldStop) { i in
                onDiff?(reports.count + i, ordered.count, group[i])
            }
            if outcome.committed {
                reports += outcome.reports
            } else if outcome.reports.isEmpty {
                // The group's transaction could not begin (another connection holds the database): each diff
                // alone, as before groups (a busy one is deferred).
                for url in group {
                    if shouldStop?() == true { return (reports, true) }
                    onDiff?(reports.count, ordered.count, url)
                    reports.append(apply(diff: url, quarantine: quarantine, limits: limits))
                }
                index = end
                continue
            } else {
                // The group could not start or commit (a busy database, a full disk, a deferred foreign key
                // only its commit found): nothing of it stayed. Each diff is applied alone instead, as before
                // groups; those rejected in the group are already in quarantine and keep their reports.
                for (i, report) in outcome.reports.enumerated() {
                    reports.append(report.status == .rejected ? report : apply(diff: group[i], quarantine: quarantine, limits: limits))
                }
            }
            index += outcome.reports.count
            // Fewer reports than diffs: `shouldStop` ended the group, or SQLite rolled it back (the rest comes next).
            if outcome.reports.count < group.count, outcome.committed { return (reports, true) }
        }
        return (reports, false)
    }

    /// Whether a diff file may join a group: one the merge would not write in bulk (smaller than
    /// `bulkApplyMinimumBytes`, or bulk writes off), or not a regular file (apply rejects it, in or out of a group).
    func isGroupable(_ url: URL) -> Bool {
        guard bulkApply, db.interpretsURIs else { return true }
        var info = stat()
        guard lstat(url.path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return true }
        return Int64(info.st_size) < bulkApplyMinimumBytes
    }

    /// Applies `group` in one transaction, each diff in a savepoint. `committed` is false when the transaction
    /// could not begin or commit (then nothing of it stayed, apart from rejected diffs moved to quarantine).
    /// `shouldStop` is asked between diffs; the diffs done by then are committed, the rest get no report.
    func applyGroup(_ group: [URL], quarantine: URL?, limits: DiffLimits, shouldStop: (@Sendable () -> Bool)?, together: Bool = false,
                    onDiff: (Int) -> Void) -> (reports: [ApplyReport], committed: Bool) {
        locked {
            // Bookkeeping is installed in a transaction of its own (only a never-tracked database needs it).
            if (try? requireTracked()) == nil {
                guard (try? db.transaction({ try installBookkeeping() })) != nil else { return ([], false) }
            }
            // The merges may turn the capture triggers off for this connection: on again however the group ends
            // (turning them on when they are on changes nothing).
            defer { try? db.setMainTriggers(enabled: true) }
            guard (try? db.execute("BEGIN IMMEDIATE")) != nil else { return ([], false) }
            var reports: [ApplyReport] = []
            let state = ApplyGroupState()
            state.foreignKeysAtCommit = together
            for (i, url) in group.enumerated() {
                if i > 0, shouldStop?() == true { break }
                onDiff(i)
                reports.append(applyLocked(diff: url, quarantine: quarantine, limits: limits, replacingHeld: [], group: state))
                // SQLite itself rolled the whole transaction back (a full disk, an I/O error): the group failed.
                if db.isAutocommit { return (reports, false) }
            }
            // Together: all of them or none.
            if together, reports.contains(where: { $0.status != .applied && $0.status != .skipped }) {
                try? db.execute("ROLLBACK")
                return (reports, false)
            }
            do {
                // The capture triggers the merges left dropped, as each diff alone re-creates them before its commit.
                if state.triggersToRecreate { try Self.installAllTriggers(db) }
                try db.execute("COMMIT")
                return (reports, true)
            } catch {
                if !db.isAutocommit { try? db.execute("ROLLBACK") }
                return (reports, false)
            }
        }
    }

    /// Runs one diff's merge in its own transaction, or (`grouped`) in a savepoint of the group's. A diff in a
    /// group that leaves a foreign key unresolved is rolled back to its savepoint with the error its own commit
    /// would have given (it waits for the diffs that bring the rows), so the group's commit finds none.
    func diffTransaction(grouped: Bool, checkForeignKeys: Bool = true, _ body: () throws -> Void) throws {
        guard grouped else { try db.transaction(body); return }
        let unresolvedBefore = db.hasUnresolvedForeignKeys
        try db.execute("SAVEPOINT rtsync_group_diff")
        do {
            try body()
            if checkForeignKeys && !unresolvedBefore && db.hasUnresolvedForeignKeys {
                throw SQLiteError(code: 787, message: "FOREIGN KEY constraint failed")
            }
            try db.execute("RELEASE rtsync_group_diff")
        } catch {
            try? db.execute("ROLLBACK TO rtsync_group_diff")
            try? db.execute("RELEASE rtsync_group_diff")
            throw error
        }
    }
}

extension Connection {
    /// The statement compiled for `sql` kept in `kept` (by its text), reset; compiled and kept there the first time.
    /// SQLite compiles a kept statement again itself when the schema changed.
    func kept(_ sql: String, in kept: inout [String: Statement]) throws -> Statement {
        if let statement = kept[sql] { statement.reset(); return statement }
        let statement = try prepare(sql)
        kept[sql] = statement
        return statement
    }

    /// `scalar(sql, arguments)` through a statement kept in `kept`, reset before returning (no read stays open).
    func scalar(_ sql: String, _ arguments: [SQLValue], keptIn kept: inout [String: Statement]) throws -> SQLValue? {
        let statement = try self.kept(sql, in: &kept)
        try statement.bind(arguments)
        defer { statement.reset() }
        return try statement.step() ? statement.column(0) : nil
    }
}
