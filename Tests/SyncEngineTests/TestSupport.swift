import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// MARK: - Locations

/// The package root, found from this file's location (Tests/SyncEngineTests/TestSupport.swift).
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// A fixture database built by `Fixtures/databases/build.sh`.
func fixtureURL(_ name: String) -> URL {
    packageRoot.appendingPathComponent("Fixtures/databases/\(name).sqlite")
}

/// The real Record Thing database (present only beside the shared folder of the development machine;
/// `RTSYNC_RECORD_THING=PATH` names it from elsewhere, e.g. a worktree).
let recordThingURL = ProcessInfo.processInfo.environment["RTSYNC_RECORD_THING"].map { URL(fileURLWithPath: $0) }
    ?? packageRoot.deletingLastPathComponent().appendingPathComponent("shared/fixtures/record-thing/record-thing-2025-04-16.sqlite")

// MARK: - Temporary directories

/// A temporary directory removed when the value is released.
final class Sandbox: @unchecked Sendable {
    let url: URL

    init(_ label: String = "test") throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("rtsync-synctests-\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func path(_ name: String) -> URL { url.appendingPathComponent(name) }

    /// `base.sqlite` made of `ddl` (statements separated by `;`), in WAL mode and checkpointed: replicas are
    /// copied from it.
    func baseDatabase(_ ddl: String) throws -> URL {
        let url = path("base.sqlite")
        let conn = try Connection(path: url.path)
        try conn.execute("PRAGMA journal_mode = WAL;\n" + ddl + ";\nPRAGMA wal_checkpoint(TRUNCATE);")
        return url
    }

    /// Makes a replica from a fixture (copied, never used in place).
    func replica(_ name: String, fixture: String, user: String? = nil, policies: [String: TablePolicy] = [:]) throws -> Replica {
        try Replica(name: name, source: fixtureURL(fixture), in: self, user: user ?? "user-\(name)", policies: policies)
    }

    /// Makes a replica from any database file (copied).
    func replica(_ name: String, source: URL, user: String? = nil, policies: [String: TablePolicy] = [:]) throws -> Replica {
        try Replica(name: name, source: source, in: self, user: user ?? "user-\(name)", policies: policies)
    }
}

// MARK: - Replicas

/// One device: a copy of a database, tracked, with an outbox for its diffs and a quarantine folder.
final class Replica: @unchecked Sendable {
    let name: String
    let dir: URL
    let dbURL: URL
    let outbox: URL
    let quarantine: URL
    let db: SyncDatabase

    init(name: String, source: URL, in sandbox: Sandbox, user: String, policies: [String: TablePolicy] = [:], track: Bool = true) throws {
        self.name = name
        dir = sandbox.path(name)
        outbox = dir.appendingPathComponent("outbox")
        quarantine = dir.appendingPathComponent("quarantine")
        dbURL = dir.appendingPathComponent("\(name).sqlite")
        let fm = FileManager.default
        try fm.createDirectory(at: outbox, withIntermediateDirectories: true)
        try fm.copyItem(at: source, to: dbURL)
        // A WAL-mode source may still hold committed pages in its -wal file.
        for suffix in ["-wal"] where fm.fileExists(atPath: source.path + suffix) {
            try fm.copyItem(atPath: source.path + suffix, toPath: dbURL.path + suffix)
        }
        db = try SyncDatabase(path: dbURL.path)
        if track {
            try db.track()
            try db.setUserID(user)
            try db.applyPolicies(policies)
        }
    }

    /// Creates a table with `sql` and has it tracked as `track --all` takes a table created later (at the next
    /// export), which does not refuse a key column whose collation differs from its PRIMARY KEY's: such a table
    /// tracked by a version before `track` refused it.
    func createTableTrackedLater(_ sql: String) throws {
        try exec(sql)
        _ = try db.exportChanges(to: outbox)
    }

    /// With `RTSYNC_PROPERTY_TRACE` set, edits, exports and applies are printed (`TRACE <replica> …`).
    static let tracing = ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_TRACE"] != nil

    func trace(_ text: @autoclosure () -> String) {
        guard Self.tracing else { return }
        let rows = ((try? db.query("SELECT * FROM items ORDER BY 1")) ?? []).map { $0.map(\.sqlLiteral).joined(separator: ",") }
        let box = dbURL.deletingLastPathComponent().deletingLastPathComponent().lastPathComponent
        print("TRACE \(box.dropFirst(17).dropLast(37))/\(name) \(text()) -> items \(rows.joined(separator: " ; "))")
    }

    /// Runs SQL through the sync database's own connection.
    func exec(_ sql: String, _ args: [SQLValue] = []) throws {
        defer { trace("exec \(sql) \(args.map(\.sqlLiteral))") }
        try db.execute(sql, args)
    }

    /// Runs a query through the sync database's connection.
    func rows(_ sql: String, _ args: [SQLValue] = []) throws -> [[SQLValue]] { try db.query(sql, args) }

    /// One value.
    func value(_ sql: String, _ args: [SQLValue] = []) throws -> SQLValue? { try db.query(sql, args).first?.first }

    /// Exports pending changes; nil when there was nothing.
    @discardableResult
    func export() throws -> ExportResult? {
        let result = try db.exportChanges(to: outbox)
        if Self.tracing, let result {
            trace("export \(URL(fileURLWithPath: result.file).deletingPathExtension().lastPathComponent.suffix(6)): \((try? ForeignKeyPropertyTests.describe(URL(fileURLWithPath: result.file))) ?? "")")
        }
        return result
    }

    /// Exports and requires a file.
    func exportFile(sourceLocation: SourceLocation = #_sourceLocation) throws -> URL {
        let result = try #require(try export(), "\(name) had nothing to export", sourceLocation: sourceLocation)
        return URL(fileURLWithPath: result.file)
    }

    /// Applies files one at a time, in the given order (not KSUID order).
    @discardableResult
    func apply(_ files: [URL]) -> [ApplyReport] { files.map { db.apply(diff: $0, quarantine: quarantine) } }

    @discardableResult
    func apply(_ file: URL) -> ApplyReport {
        let report = db.apply(diff: file, quarantine: quarantine)
        trace("apply \(file.deletingPathExtension().lastPathComponent.suffix(6)) \(report.status) ins \(report.inserted) upd \(report.updated) del \(report.deleted) conf \(report.conflicts)")
        return report
    }

    /// Every app table (not sqlite_ or rtsync_), its columns and rows sorted by all columns.
    func dump() throws -> [String: TableDump] { try Self.dump(db, includeBookkeeping: false) }

    /// Every table including rtsync's bookkeeping (for "nothing changed" checks).
    func fullDump() throws -> [String: TableDump] { try Self.dump(db, includeBookkeeping: true) }

    static func dump(_ db: SyncDatabase, includeBookkeeping: Bool) throws -> [String: TableDump] {
        var out: [String: TableDump] = [:]
        let names = try db.query("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")
            .compactMap { $0[0].string }
        for name in names where includeBookkeeping || !name.hasPrefix("rtsync_") {
            let columns = try db.query("SELECT name FROM pragma_table_info(?) ORDER BY cid", [.text(name)]).compactMap { $0[0].string }
            let quoted = columns.map { "\"" + $0.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
            let rows = try db.query("SELECT \(quoted.joined(separator: ", ")) FROM \"\(name.replacingOccurrences(of: "\"", with: "\"\""))\" ORDER BY \(quoted.joined(separator: ", "))")
            out[name] = TableDump(columns: columns, rows: rows)
        }
        return out
    }

    /// Conflicts logged here.
    func conflicts(table: String? = nil) throws -> [ConflictRecord] { try db.conflicts(table: table) }

    /// The clock of the first row change of a diff file (all rows of an export share one stamp).
    static func stamp(of file: URL) throws -> Clock {
        let reader = try DiffReader(url: file)
        let changes = try reader.changes()
        return try #require(changes.first?.clock)
    }

    /// The files currently in the outbox, in KSUID order.
    func outboxFiles() throws -> [URL] {
        try FileManager.default.contentsOfDirectory(at: outbox, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sqlite" }.sorted { $0.lastPathComponent < $1.lastPathComponent }
    }
}

/// One table's columns and sorted rows.
struct TableDump: Equatable, CustomStringConvertible {
    var columns: [String]
    var rows: [[SQLValue]]
    var description: String {
        columns.joined(separator: "|") + "\n" + rows.map { $0.map(\.sqlLiteral).joined(separator: "|") }.joined(separator: "\n")
    }
}

/// Describes the first difference between two dumps, for readable failures.
func firstDifference(_ a: [String: TableDump], _ b: [String: TableDump]) -> String? {
    for name in Set(a.keys).union(b.keys).sorted() where a[name] != b[name] {
        guard let x = a[name], let y = b[name] else { return "table \(name) exists only on one side" }
        if x.columns != y.columns { return "\(name): columns \(x.columns) vs \(y.columns)" }
        let sx = Set(x.rows.map { $0.map(\.sqlLiteral).joined(separator: "|") }), sy = Set(y.rows.map { $0.map(\.sqlLiteral).joined(separator: "|") })
        return "\(name): only left \(sx.subtracting(sy).sorted()), only right \(sy.subtracting(sx).sorted())"
    }
    return nil
}

/// Waits until the wall clock has moved on, so the next export's clock is strictly later.
func tick() { Thread.sleep(forTimeInterval: 0.003) }

/// Concurrent edits: `a` runs `sqlA` and exports, then (a moment later, so its clock is later) `b` runs `sqlB`
/// and exports; each then applies the other's diff.
func exchangeConcurrentEdits(_ a: Replica, _ sqlA: String, then b: Replica, _ sqlB: String,
                             sourceLocation: SourceLocation = #_sourceLocation) throws {
    try a.exec(sqlA)
    let fa = try a.exportFile(sourceLocation: sourceLocation)
    tick()
    try b.exec(sqlB)
    let fb = try b.exportFile(sourceLocation: sourceLocation)
    _ = a.apply(fb)
    _ = b.apply(fa)
}

/// Exchanges all pending changes between replicas: each exports, every other applies. Returns the files.
@discardableResult
func exchange(_ replicas: [Replica]) throws -> [URL] {
    var files: [(Replica, URL)] = []
    for r in replicas { if let e = try r.export() { files.append((r, URL(fileURLWithPath: e.file))) } }
    for r in replicas {
        for (author, f) in files where author !== r {
            let report = r.apply(f)
            #expect(report.status == .applied, "\(r.name) applying \(author.name)'s diff: \(report.status) \(report.reason ?? "")")
        }
    }
    return files.map(\.1)
}

/// Expects two replicas to hold the same app data, naming the first difference when they do not.
func expectSameData(_ a: Replica, _ b: Replica, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let x = try a.dump(), y = try b.dump()
    #expect(x == y, "\(a.name) and \(b.name) differ: \(firstDifference(x, y) ?? "")", sourceLocation: sourceLocation)
}

// MARK: - Bulk writes against the per-row merge

/// Two copies of one tracked device (same site id and state); the second merges every row one by one.
struct Twins {
    let bulk: Replica
    let perRow: Replica

    init(_ box: Sandbox, _ device: Replica, policies: [String: TablePolicy] = [:]) throws {
        let user = try #require(device.value("SELECT user_id FROM rtsync_site")?.string)
        bulk = try box.replica(device.name + "-bulk", source: device.dbURL, user: user, policies: policies)
        perRow = try box.replica(device.name + "-rows", source: device.dbURL, user: user, policies: policies)
        perRow.db.bulkApply = false
        bulk.db.bulkApplyMinimumBytes = 0
    }

    /// Applies a copy of `file` to each twin (a rejected file is moved to the twin's quarantine); expects the
    /// same report and the same database, and nothing left attached or in `temp`.
    @discardableResult
    func apply(_ file: URL, sourceLocation: SourceLocation = #_sourceLocation) throws -> (bulk: ApplyReport, perRow: ApplyReport) {
        func copy(for twin: Replica) throws -> URL {
            let folder = twin.dir.appendingPathComponent("incoming")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let target = folder.appendingPathComponent(file.lastPathComponent)
            try FileManager.default.copyItem(at: file, to: target)
            return target
        }
        let a = bulk.apply(try copy(for: bulk)), b = perRow.apply(try copy(for: perRow))
        #expect(a.status == b.status && a.reason == b.reason, "bulk: \(a.status) \(a.reason ?? ""); per row: \(b.status) \(b.reason ?? "")", sourceLocation: sourceLocation)
        func counts(_ r: ApplyReport) -> [Int] { [r.inserted, r.updated, r.deleted, r.conflicts] }
        #expect(counts(a) == counts(b), "bulk: \(a); per row: \(b)", sourceLocation: sourceLocation)
        let x = try Twins.comparableDump(bulk), y = try Twins.comparableDump(perRow)
        #expect(x == y, "the databases differ: \(firstDifference(x, y) ?? "")", sourceLocation: sourceLocation)
        #expect(try bulk.value("SELECT count(*) FROM pragma_database_list WHERE name = 'rtsync_diff'") == .integer(0),
                "the diff is still attached", sourceLocation: sourceLocation)
        #expect(try bulk.value("SELECT count(*) FROM temp.sqlite_schema") == .integer(0), "temp objects left", sourceLocation: sourceLocation)
        return (a, b)
    }

    /// `apply(_:)`, and how many rows the twin with the set paths merged as known rows meanwhile.
    func applyCountingSetRows(_ file: URL, sourceLocation: SourceLocation = #_sourceLocation) throws -> (bulk: ApplyReport, perRow: ApplyReport, setRows: Int) {
        let before = bulk.db.bulkKnownRowsMerged
        let r = try apply(file, sourceLocation: sourceLocation)
        return (r.bulk, r.perRow, bulk.db.bulkKnownRowsMerged - before)
    }

    /// Every table with bookkeeping, the times of applying and logging blanked, plus the triggers. (The clock of a
    /// change captured while applying, a collision's loser deleted, is taken when it is made: it is blanked too.)
    static func comparableDump(_ r: Replica) throws -> [String: TableDump] {
        var dump = try r.fullDump()
        for (table, column) in [("rtsync_applied", "applied_at"), ("rtsync_conflicts", "at"), ("rtsync_changes", "hlc")] {
            guard var t = dump[table], let i = t.columns.firstIndex(of: column) else { continue }
            for j in t.rows.indices { t.rows[j][i] = .null }
            t.rows.sort { $0.map(\.sqlLiteral).joined(separator: "|") < $1.map(\.sqlLiteral).joined(separator: "|") }
            dump[table] = t
        }
        dump["(triggers)"] = TableDump(columns: ["name", "sql"], rows: try r.rows("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' ORDER BY name"))
        return dump
    }
}

// MARK: - Groups of diffs against one diff at a time

/// Two copies of one tracked device (same site id and state): `grouped` applies a batch as `apply(diffs:)` does by
/// default (small diffs several to a transaction, `SyncDatabase+Groups`), `oneByOne` each diff in a transaction of
/// its own (`applyGroupLimit = 1`, as before groups).
struct GroupTwins {
    let grouped: Replica
    let oneByOne: Replica

    init(_ box: Sandbox, _ device: Replica, policies: [String: TablePolicy] = [:]) throws {
        let user = try #require(device.value("SELECT user_id FROM rtsync_site")?.string)
        grouped = try box.replica(device.name + "-grouped", source: device.dbURL, user: user, policies: policies)
        oneByOne = try box.replica(device.name + "-single", source: device.dbURL, user: user, policies: policies)
        oneByOne.db.applyGroupLimit = 1
        // A change the merge captures (a collision's loser deleted) is timed by the wall clock, or just after the
        // latest clock the database holds when that is later: with the wall clock a year back, both twins time it alike.
        for twin in [grouped, oneByOne] { try twin.db.shiftWallClockForTesting(milliseconds: -365 * 86_400_000) }
    }

    /// Applies copies of `files` (in the given order, duplicates included) to each twin with `apply(diffs:)`; expects
    /// the same reports (status, reason, counts, schema changes) and the same database: rows, bookkeeping, conflict
    /// log, change log and triggers (`Twins.comparableDump`). Returns the grouped twin's reports.
    @discardableResult
    func apply(_ files: [URL], sourceLocation: SourceLocation = #_sourceLocation) throws -> [ApplyReport] {
        // The same folder name in each twin, so that reasons naming a file read alike.
        let batch = "incoming-" + UUID().uuidString
        func copies(for twin: Replica) throws -> [URL] {
            let folder = twin.dir.appendingPathComponent(batch)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            var made: [String: URL] = [:]
            return try files.map { file in
                if let copy = made[file.path] { return copy }
                let copy = folder.appendingPathComponent(file.lastPathComponent)
                try FileManager.default.copyItem(at: file, to: copy)
                made[file.path] = copy
                return copy
            }
        }
        let a = grouped.db.apply(diffs: try copies(for: grouped), quarantine: grouped.quarantine)
        let b = oneByOne.db.apply(diffs: try copies(for: oneByOne), quarantine: oneByOne.quarantine)
        func summary(_ r: ApplyReport, _ twin: Replica) -> String {
            let reason = (r.reason ?? "").replacingOccurrences(of: twin.dir.path, with: "<twin>")
            return "\(r.diffID ?? "?") \(r.status) [\(reason)] \(r.inserted)/\(r.updated)/\(r.deleted)/\(r.conflicts)/\(r.held)"
                + " created \(r.tablesCreated) added \(r.columnsAdded) aside \(r.columnsKeptAside) types \(r.typeDifferences)"
        }
        let x = a.map { summary($0, grouped) }, y = b.map { summary($0, oneByOne) }
        #expect(x == y, "the reports differ:\n grouped: \(x)\n one by one: \(y)", sourceLocation: sourceLocation)
        let g = try Twins.comparableDump(grouped), o = try Twins.comparableDump(oneByOne)
        #expect(g == o, "the databases differ: \(firstDifference(g, o) ?? "")", sourceLocation: sourceLocation)
        return a
    }
}

// MARK: - Random delivery (property tests)

/// Delivers `files` to `r` as a chaos run does: in random order, some twice. Returns how many were deferred.
@discardableResult
func deliverRandomly(_ files: [URL], to r: Replica, rng: inout SeededGenerator, label: String,
                     beforeApply: ((Replica, URL) -> Void)? = nil,
                     onApply: ((Replica, URL, ApplyReport) -> Void)? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> Int {
    var batch = files
    for _ in 0..<Int.random(in: 0...2, using: &rng) { if let f = files.randomElement(using: &rng) { batch.append(f) } }
    batch.shuffle(using: &rng)
    var deferred = 0
    for f in batch {
        beforeApply?(r, f)
        let report = r.apply(f)
        if report.status == .deferred { deferred += 1 }
        onApply?(r, f, report)
        #expect(report.status != .rejected, "\(label): \(r.name) rejected \(f.lastPathComponent): \(report.reason ?? "")", sourceLocation: sourceLocation)
    }
    return deferred
}

/// Exports and delivers every diff to every replica until none has anything to send and nothing was deferred:
/// decisions made while applying travel as new changes, and a diff deferred for rows not yet received is
/// applied again, as the next sync does. At most `limit` exchanges.
func exchangeUntilQuiet(_ replicas: [Replica], diffs: inout [URL], rng: inout SeededGenerator, label: String, limit: Int = 10,
                        onExport: ((Replica, URL) -> Void)? = nil, onApply: ((Replica, URL, ApplyReport) -> Void)? = nil) throws {
    var deferred = 0
    for exchange in 0..<limit {
        var fresh: [URL] = []
        for r in replicas {
            guard let e = try r.export() else { continue }
            fresh.append(URL(fileURLWithPath: e.file))
            onExport?(r, URL(fileURLWithPath: e.file))
        }
        diffs += fresh
        if exchange > 0 && fresh.isEmpty && deferred == 0 { return }
        deferred = 0
        for r in replicas { deferred += deliverRandomly(diffs, to: r, rng: &rng, label: label, onApply: onApply) }
    }
}

/// Writes `file` again as a device of another implementation might, with each INTEGER value in a key or reference
/// column sent randomly as TEXT ('3') or REAL (3.0), and digits in a TEXT key column as an INTEGER: SQLite's
/// affinity gives the same stored value, so every replica must end as if the values had been sent as they are.
/// Returns the new file (same id, author and `seen`).
func reencodingKeys(_ file: URL, into directory: URL, rng: inout SeededGenerator) throws -> URL {
    let reader = try DiffReader(url: file)
    let m = reader.metadata
    let writer = try DiffWriter(directory: directory, id: m.id, kind: m.kind, authorUser: m.authorUser, authorSite: m.authorSite,
                                sequence: m.sequenceFirst.flatMap { first in m.sequenceLast.map { first...$0 } }, createdAt: m.createdAt, seen: m.seen)
    for t in reader.tables { try writer.addTable(t) }
    let byName = Dictionary(uniqueKeysWithValues: reader.tables.map { ($0.name, $0) })
    var changes: [RowChange] = []
    try reader.forEachChange { changes.append($0) }
    for var change in changes {
        if let def = byName[change.table] {
            let keyish = Set(def.primaryKeyIndexes + def.foreignKeys.flatMap { fk in fk.columns.compactMap { def.columnIndex($0) } })
            for i in keyish where i < change.values.count {
                switch change.values[i] {
                case .integer(let n):
                    switch Int.random(in: 0..<3, using: &rng) {
                    case 0: change.values[i] = .text(String(n))
                    case 1: change.values[i] = .real(Double(n))
                    default: break
                    }
                case .text(let t):
                    // Digits in a TEXT column may travel as an INTEGER: the column's affinity makes them the same text.
                    if let n = Int64(t), String(n) == t, def.columns[i].type.uppercased().contains("TEXT"), Bool.random(using: &rng) {
                        change.values[i] = .integer(n)
                    }
                default: break
                }
            }
        }
        try writer.append(change)
    }
    return try writer.finish()
}

// MARK: - Hostile-input properties

/// One round of a chaos run's delivery: each replica receives a random part of `diffs` (the rest arrives later), in
/// random order, some twice; one time in three as one batch through `apply(diffs:)` (small diffs grouped).
/// `before` runs first for each replica (the app writing between syncs). Returns how many batches were grouped.
func deliverRandomParts(_ diffs: [URL], to replicas: [Replica], rng: inout SeededGenerator, label: String,
                        before: ((Replica, inout SeededGenerator) throws -> Void)? = nil,
                        onApply check: @escaping (Replica, URL, ApplyReport) -> Void) throws -> Int {
    var grouped = 0
    for r in replicas {
        let some = diffs.filter { _ in Bool.random(using: &rng) }
        try before?(r, &rng)
        if Int.random(in: 0..<3, using: &rng) == 0 {
            var batch = some
            for _ in 0..<Int.random(in: 0...2, using: &rng) { if let f = some.randomElement(using: &rng) { batch.append(f) } }
            batch.shuffle(using: &rng)
            let reports = r.db.apply(diffs: batch, quarantine: r.quarantine)
            for (f, report) in zip(batch, reports) { check(r, f, report) }
            grouped += 1
        } else {
            deliverRandomly(some, to: r, rng: &rng, label: label, onApply: check)
        }
    }
    return grouped
}

/// The end of a chaos run: no diff failed to apply (`problems`), nothing left to send or quarantined, and every
/// replica holds what the first holds in `tables`, compared as `exactDump` renders rows (bytes and storage class).
func expectQuietAndIdentical(_ replicas: [Replica], problems: [String], tables: [String], label: String,
                             exactDump: (Replica) throws -> [String: [String]], short: (String) -> String = { $0 }) throws {
    #expect(problems.isEmpty, "\(label): diffs not applied: \(problems)")
    for r in replicas {
        #expect(try r.db.pendingChangeCount() == 0, "\(label): \(r.name) still has changes to send")
        let quarantined = (try? FileManager.default.contentsOfDirectory(atPath: r.quarantine.path)) ?? []
        #expect(quarantined.isEmpty, "\(label): \(r.name) quarantined \(quarantined)")
    }
    let reference = try exactDump(replicas[0])
    for r in replicas.dropFirst() {
        let d = try exactDump(r)
        for t in tables where d[t] != reference[t] {
            let a = Set(reference[t] ?? []), b = Set(d[t] ?? [])
            Issue.record("\(label): \(t) differs: only on \(replicas[0].name) \(a.subtracting(b).sorted().map(short)), only on \(r.name) \(b.subtracting(a).sorted().map(short))")
        }
    }
}

/// Which paths a property's seeds took (set paths, set exports, groups, diffs over 64 KiB), summed over a run and
/// printed for long runs (`RTSYNC_PROPERTY_SEEDS`), so a run can show it exercised them.
final class PropertyPathCounters: @unchecked Sendable {
    private let lock = NSLock()
    private var bulkRows = 0, knownRowsAsSets = 0, setExports = 0, groupedBatches = 0, bigDiffs = 0, diffs = 0, seeds = 0, extra = 0

    /// Adds one seed's run (`extra`: a count of the property's own), and prints the totals on a long run.
    func record(_ label: String, diffs files: [URL], grouped: Int, replicas: [Replica], extra more: Int = 0, extraName: String = "") {
        let big = files.filter { ((try? FileManager.default.attributesOfItem(atPath: $0.path)[.size] as? Int) ?? 0) >= 64 * 1024 }.count
        lock.lock()
        defer { lock.unlock() }
        seeds += 1; diffs += files.count; bigDiffs += big; groupedBatches += grouped; extra += more
        for r in replicas {
            bulkRows += r.db.bulkRowsWritten
            knownRowsAsSets += r.db.bulkKnownRowsMerged
            setExports += r.db.setExportsWritten
        }
        guard ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_SEEDS"] != nil else { return }
        print("\(label); totals after \(seeds) seeds: diffs \(diffs), over 64 KiB \(bigDiffs), " + (extraName.isEmpty ? "" : "\(extraName) \(extra), ")
              + "rows written in bulk \(bulkRows), known rows merged as sets \(knownRowsAsSets), set exports \(setExports), grouped batches \(groupedBatches)")
    }
}

/// Replicas A, B and C of `base`, each at random merging every diff through the set paths and exporting through the
/// set export; and a label naming the seed and that choice.
func randomlyConfiguredReplicas(_ box: Sandbox, base: URL, seed: Int, rng: inout SeededGenerator) throws -> (replicas: [Replica], label: String) {
    let replicas = try ["A", "B", "C"].map { try box.replica($0, source: base) }
    var config: [String] = []
    for r in replicas {
        let sets = Bool.random(using: &rng), setExport = Bool.random(using: &rng)
        if sets { r.db.bulkApplyMinimumBytes = 0 }
        if setExport { r.db.setExportMinimumRows = 1 }
        config.append("\(r.name):\(sets ? "sets" : "-")/\(setExport ? "setexport" : "-")")
    }
    return (replicas, "seed \(seed) [\(config.joined(separator: " "))]")
}
