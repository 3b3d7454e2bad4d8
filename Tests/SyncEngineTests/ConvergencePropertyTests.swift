import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// A small deterministic generator (SplitMix64), so a failing seed can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("Convergence (property-based)")
struct ConvergencePropertyTests {
    static let rounds = 4
    static let keys = (0..<8).map { "k\($0)" }
    /// Keys of TEXT columns made of digits, which another implementation may send as INTEGERs.
    static let digitKeys = (0..<8).map { "\(10 + $0)" }

    /// Seeds for one property: `ci` of them in the suite, or `RTSYNC_PROPERTY_SEEDS` of them for a long run
    /// outside CI (`RTSYNC_PROPERTY_SEEDS=2000 swift test --filter Convergence`).
    /// `RTSYNC_PROPERTY_SEED=N` replays one seed (with `--filter` naming the property).
    static func seeds(from first: Int, ci: Int) -> Range<Int> {
        if let one = ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_SEED"].flatMap(Int.init) {
            return (first...(first + 99_999)).contains(one) ? one..<(one + 1) : first..<first
        }
        let n = ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_SEEDS"].flatMap(Int.init) ?? ci
        return first..<(first + n)
    }

    /// Builds the shared starting database: one table with a TEXT key and three value columns.
    static func makeBase(in box: Sandbox, uniqueA: Bool, index: String? = nil, replaceClause: Bool = false) throws -> URL {
        try box.baseDatabase("""
            CREATE TABLE items (id TEXT PRIMARY KEY, a TEXT\(replaceClause ? " UNIQUE ON CONFLICT REPLACE" : uniqueA && index == nil ? " UNIQUE" : ""), b INTEGER, c REAL);
            \(index ?? "");
            INSERT INTO items VALUES ('k0', 'zero', 0, 0.5), ('k1', 'one', 1, 1.5), ('k2', 'two', 2, NULL)
            """)
    }

    /// One random local edit: insert a missing key, or update some columns of / delete an existing one.
    static func randomEdit(_ r: Replica, _ rng: inout SeededGenerator, tag: String, uniqueA: Bool, digits: Bool = false) throws {
        let key = (digits ? digitKeys : keys).randomElement(using: &rng)!
        let exists = try r.value("SELECT count(*) FROM items WHERE id = ?", [.text(key)]) == .integer(1)
        // With a UNIQUE column, values come from a small shared set so that devices collide.
        let a: SQLValue = Int.random(in: 0..<5, using: &rng) == 0 ? .null
            : uniqueA ? .text("\(Bool.random(using: &rng) ? "u" : "U")\(Int.random(in: 0..<6, using: &rng))") : .text("\(tag)-\(Int.random(in: 0..<100, using: &rng))")
        let b: SQLValue = .integer(Int64.random(in: 0..<50, using: &rng))
        let c: SQLValue = Bool.random(using: &rng) ? .real(Double(Int.random(in: 0..<100, using: &rng)) / 4) : .null
        if !exists {
            // With a UNIQUE column, REPLACE may take another row's value (that row is deleted).
            let verb = uniqueA && Bool.random(using: &rng) ? "INSERT OR REPLACE" : "INSERT OR IGNORE"
            try r.exec("\(verb) INTO items VALUES (?, ?, ?, ?)", [.text(key), a, b, c])
            return
        }
        switch Int.random(in: 0..<10, using: &rng) {
        case 0..<2:
            try r.exec("DELETE FROM items WHERE id = ?", [.text(key)])
        case 2..<5:
            try r.exec("UPDATE OR IGNORE items SET a = ? WHERE id = ?", [a, .text(key)])
        case 5:
            try r.exec("UPDATE OR IGNORE items SET b = ?, c = ? WHERE id = ?", [b, c, .text(key)])
        case 6:
            // An UPSERT on the key; a collision on a UNIQUE value fails, as it would for the app.
            do {
                try r.exec("INSERT INTO items VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET a = excluded.a, b = excluded.b", [.text(key), a, b, c])
            } catch let e as SQLiteError where e.isUniqueViolation {}
        default:
            try r.exec("UPDATE OR IGNORE items SET a = ?, b = ?, c = ? WHERE id = ?", [a, b, c, .text(key)])
        }
    }

    @Test(arguments: seeds(from: 0, ci: 30))
    func randomEditsOnThreeReplicas_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: false)
    }

    @Test(arguments: seeds(from: 1000, ci: 20))
    func randomEditsWithUniqueColumn_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: true)
    }

    /// The UNIQUE column declares `ON CONFLICT REPLACE`: the merge must settle collisions by its own rule, not by the
    /// clause (which deleted the other row by arrival order: seed 1505 diverged before every merge write said OR ABORT).
    @Test(arguments: seeds(from: 1500, ci: 20))
    func randomEditsWithAUniqueColumnThatReplaces_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: true, index: "", replaceClause: true)
    }

    @Test(arguments: seeds(from: 2000, ci: 30))
    func randomEditsWithLastWriterWinsDeletes_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: false, policy: TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins))
    }

    /// Each replica's wall clock is off by up to an hour either way (changes are timed by when they were made).
    @Test(arguments: seeds(from: 3000, ci: 20))
    func randomEditsWithSkewedClocks_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: seed % 2 == 0, skewed: true)
    }

    /// Unique indexes on an expression, with a collation, and partial: a name collides with another whatever its
    /// case, and only rows the index holds collide. REPLACE and UPSERT hit them too.
    @Test(arguments: seeds(from: 4000, ci: 20))
    func randomEditsWithExpressionAndPartialUniqueIndexes_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        let index = ["CREATE UNIQUE INDEX items_a ON items(lower(a))",
                     "CREATE UNIQUE INDEX items_a ON items(a COLLATE NOCASE) WHERE b < 35",
                     "CREATE UNIQUE INDEX items_a ON items(upper(a), b / 10) WHERE c IS NOT NULL"][seed % 3]
        try run(seed: seed, uniqueA: true, index: index)
    }

    /// TEXT keys made of digits arrive as INTEGERs half the time (as another implementation may send them), with
    /// a UNIQUE column and skewed clocks.
    @Test(arguments: seeds(from: 8000, ci: 15))
    func randomEditsWithKeysInAnotherStorageClass_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: seed % 2 == 0, skewed: seed % 3 == 0, reencode: true)
    }

    /// A custom resolver on every replica (the greater text for `a`, the larger number for `b`, the clocks for `c`):
    /// its choices against the clocks travel as new edits, so replicas end identical however diffs arrive.
    @Test(arguments: seeds(from: 9000, ci: 20))
    func randomEditsWithACustomResolver_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        let greater: ConflictResolver = { ctx in
            switch ctx.column {
            case "a": return ctx.remoteValue.sqlLiteral > ctx.localValue.sqlLiteral ? .acceptRemote : .keepLocal
            case "b": return (ctx.remoteValue.int64 ?? -1) > (ctx.localValue.int64 ?? -1) ? .acceptRemote : .keepLocal
            default: return .byClock
            }
        }
        try run(seed: seed, uniqueA: false, skewed: seed % 2 == 0, resolver: greater)
    }


    /// Every apply is also made on two copies of the receiving replica, one merging known rows as sets and one
    /// merging every row (`Twins`), which must end alike (report, rows, bookkeeping, conflict log). Default
    /// policy, last-writer-wins deletes and skewed clocks in turn.
    @Test(arguments: seeds(from: 9500, ci: 12))
    func randomEdits_setPathAndPerRowMergeAgreeOnEveryApply(seed: Int) throws {
        let merged = try run(seed: seed, uniqueA: false, policy: seed % 3 == 1 ? TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins) : nil,
                             skewed: seed % 3 == 2, twins: true)
        if ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_SEEDS"] != nil { print("seed \(seed): \(merged) rows merged as sets") }
    }

    /// The same twins with unexported local edits on the receiving replica when the diffs arrive (so rows of a table
    /// merged as a set may be left to the per-row merge one by one), last-writer-wins deletes and skewed clocks in turn.
    @Test(arguments: seeds(from: 10_700, ci: 12))
    func randomEditsLeftUnexported_setPathAndPerRowMergeAgreeOnEveryApply(seed: Int) throws {
        let merged = try run(seed: seed, uniqueA: false, policy: seed % 3 == 1 ? TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins) : nil,
                             skewed: seed % 3 == 2, twins: true, unexportedEdits: true)
        if ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_SEEDS"] != nil { print("seed \(seed): \(merged) rows merged as sets") }
    }

    /// The set-path twins on a table with a UNIQUE index on `c` (rows collide on it; edits of `a` alone and deletes
    /// leave it unwritten, so those diffs may be merged as sets) or on `(b, c)`, with and without unexported local
    /// edits, skewed clocks in every third seed.
    @Test(arguments: seeds(from: 11_000, ci: 12))
    func randomEditsWithAUniqueIndex_setPathAndPerRowMergeAgreeOnEveryApply(seed: Int) throws {
        let index = ["CREATE UNIQUE INDEX items_c ON items(c)", "CREATE UNIQUE INDEX items_bc ON items(b, c)"][seed % 2]
        let merged = try run(seed: seed, uniqueA: false, index: index, skewed: seed % 3 == 0, twins: true, unexportedEdits: seed % 4 < 2)
        if ProcessInfo.processInfo.environment["RTSYNC_PROPERTY_SEEDS"] != nil { print("seed \(seed): \(merged) rows merged as sets") }
    }

    /// Every batch a replica receives is also applied to two copies of it, with the same few unexported local edits
    /// made on both first: one applying the batch in groups (one transaction for many diffs, `SyncDatabase+Groups`), one diff at
    /// a time (`GroupTwins`); they must end alike (reports, rows, bookkeeping, change log, conflict log, triggers).
    /// A UNIQUE column in every other seed, skewed clocks in every third.
    @Test(arguments: seeds(from: 9800, ci: 12))
    func randomEdits_batchesAppliedInGroupsAndOneAtATimeAgree(seed: Int) throws {
        try run(seed: seed, uniqueA: seed % 2 == 0, skewed: seed % 3 == 0, groupTwins: true)
    }

    /// The app writes between a sync's export and its apply: before each delivery up to two random local edits are
    /// made on the replica itself and are still unexported when the diffs arrive, so a UNIQUE collision's loser may
    /// be a row never exported, and an insert never exported may beat a remote one and then be deleted before the
    /// next export. Every batch is also applied in groups and one at a time (`GroupTwins`, the local edits made
    /// before the copies). A UNIQUE column in every other seed, skewed clocks in every third. Seeds 10032 and 10036
    /// diverged before a UNIQUE loser never exported sent its delete and such an insert that beat a remote one
    /// kept its birth (Merger+Rules), as did 9848, 9890, 9948 and 9968 with the same edits and deliveries.
    @Test(arguments: seeds(from: 10_020, ci: 20))
    func randomEditsLeftUnexportedWhenDiffsArrive_randomDeliveryWithDuplicates_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: seed % 2 == 0, skewed: seed % 3 == 0, groupTwins: true, unexportedEdits: true)
    }

    /// The same with the other policies that promise convergence: whole rows by the last writer (`lww-row`), and
    /// updates against deletes decided by the later clock (`last-writer-wins`), in turn, with and without a UNIQUE
    /// column and skewed clocks. Seeds 10565, 10616, 10618, 10619 and 10664 diverged before an unexported insert
    /// that outlived a delete of an older version recorded its birth and `lww-row` tables kept rows whole against
    /// last-writer-wins deletes (`RowIncarnationScenarioTests`).
    @Test(arguments: seeds(from: 10_560, ci: 12))
    func randomEditsLeftUnexportedWhenDiffsArrive_rowAndDeletePolicies_endIdentical(seed: Int) throws {
        let policy = [TablePolicy(.lwwRow), TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins),
                      TablePolicy(.lwwRow, onDeleteConflict: .lastWriterWins)][seed % 3]
        try run(seed: seed, uniqueA: seed % 2 == 0, policy: policy, skewed: seed % 4 == 0, groupTwins: true, unexportedEdits: true)
    }

    /// Roll-ups (issue 19, aim 4): after an export a replica may write a roll-up of a random part of its own diffs
    /// (the present state of the rows they touched); a replica receiving a batch may merge any roll-up first, which
    /// records the diffs it covers as applied, and then gets only some of those diffs (as a sync downloads none of
    /// them). With and without a UNIQUE column, unexported edits and skewed clocks in turn.
    @Test(arguments: seeds(from: 12_000, ci: 16))
    func randomEditsWithRollupsInsteadOfSomeDiffs_endIdentical(seed: Int) throws {
        try run(seed: seed, uniqueA: seed % 2 == 0, skewed: seed % 3 == 0, unexportedEdits: seed % 4 < 2, rollups: true)
    }

    /// Roll-ups with the other policies, a custom resolver (a resolver's choice may keep an author's value under another
    /// clock, which is why a roll-up carries every row its diffs touched) and batches applied in groups.
    @Test(arguments: seeds(from: 12_500, ci: 12))
    func randomEditsWithRollups_policiesResolverAndGroups_endIdentical(seed: Int) throws {
        let greater: ConflictResolver = { ctx in
            switch ctx.column {
            case "a": return ctx.remoteValue.sqlLiteral > ctx.localValue.sqlLiteral ? .acceptRemote : .keepLocal
            default: return .byClock
            }
        }
        let policy = [nil, TablePolicy(.lwwRow), TablePolicy(.lwwColumn, onDeleteConflict: .lastWriterWins)][seed % 3]
        try run(seed: seed, uniqueA: seed % 4 == 1, policy: policy, skewed: seed % 2 == 0, groupTwins: seed % 4 == 3,
                unexportedEdits: seed % 5 < 2, resolver: seed % 4 == 0 ? greater : nil, rollups: true)
    }

    /// Returns, with `twins`, how many rows the twin with the set paths merged as known rows.
    @discardableResult
    func run(seed: Int, uniqueA: Bool, index: String? = nil, policy: TablePolicy? = nil, skewed: Bool = false, reencode: Bool = false,
             twins: Bool = false, groupTwins: Bool = false, unexportedEdits: Bool = false, resolver: ConflictResolver? = nil, replaceClause: Bool = false,
             rollups: Bool = false) throws -> Int {
        var rng = SeededGenerator(seed: UInt64(seed))
        let box = try Sandbox("prop\(seed)")
        let base = try Self.makeBase(in: box, uniqueA: uniqueA, index: index, replaceClause: replaceClause)
        let replicas = try ["A", "B", "C"].map { try box.replica($0, source: base, policies: policy.map { ["items": $0] } ?? [:]) }
        if let resolver { for r in replicas { r.db.setResolver(for: "items", resolver) } }
        if skewed { for r in replicas { try r.db.shiftWallClockForTesting(milliseconds: Int64.random(in: -3_600_000...3_600_000, using: &rng)) } }
        var diffs: [URL] = []
        var setMerged = 0
        let mixer = rollups ? RollupMixer(box: box, label: "seed \(seed)") : nil
        func deliver(_ files: [URL], to r: Replica, duplicates: Bool, editFirst: Bool = false) throws {
            var batch = files
            // Roll-ups first, as a sync merges them before it downloads; the diffs they cover may then not come.
            if let mixer {
                batch = mixer.mergeSome(into: r, batch, rng: &rng) { url, report in
                    r.trace("merge rollup \(url.deletingPathExtension().lastPathComponent.suffix(6)): \(report.status) \(report.reason ?? "")")
                }
            }
            if duplicates { for _ in 0..<Int.random(in: 0...3, using: &rng) { if let f = files.randomElement(using: &rng) { batch.append(f) } } }
            batch.shuffle(using: &rng)
            // With `unexportedEdits` the app writes between a sync's export and its apply: the edits are made on the
            // replica itself and are still unexported when the diffs arrive (exported with its next round's edits).
            if editFirst && unexportedEdits {
                for _ in 0..<Int.random(in: 0...2, using: &rng) { try Self.randomEdit(r, &rng, tag: "\(r.name)-here", uniqueA: uniqueA) }
            }
            if groupTwins {
                do {
                    // Without `unexportedEdits`, the edits are made on a copy, which the twins copy: the replica itself
                    // goes on as in the other properties (every edit exported before diffs arrive).
                    let scratch = try Sandbox("prop\(seed)-groups")
                    let device = try scratch.replica(r.name, source: r.dbURL, user: "user-\(r.name)", policies: policy.map { ["items": $0] } ?? [:])
                    if editFirst && !unexportedEdits {
                        for _ in 0..<Int.random(in: 0...2, using: &rng) { try Self.randomEdit(device, &rng, tag: "\(r.name)-here", uniqueA: uniqueA) }
                    }
                    let pair = try GroupTwins(scratch, device, policies: policy.map { ["items": $0] } ?? [:])
                    try pair.apply(batch)
                } catch { Issue.record("seed \(seed): group twins of \(r.name): \(error)") }
            }
            for f in batch {
                if twins {
                    do {
                        let scratch = try Sandbox("prop\(seed)-twins")
                        let copy = try scratch.replica(r.name, source: r.dbURL, user: "user-\(r.name)", policies: policy.map { ["items": $0] } ?? [:])
                        let pair = try Twins(scratch, copy, policies: policy.map { ["items": $0] } ?? [:])
                        try pair.apply(f)
                        setMerged += pair.bulk.db.bulkKnownRowsMerged
                    } catch { Issue.record("seed \(seed): twins of \(r.name): \(error)") }
                }
                let report = r.apply(f)
                #expect(report.status != .rejected, "seed \(seed): \(r.name) rejected \(f.lastPathComponent): \(report.reason ?? "")")
            }
        }
        for round in 0..<Self.rounds {
            for r in replicas {
                for _ in 0..<Int.random(in: 0...4, using: &rng) { try Self.randomEdit(r, &rng, tag: "\(r.name)\(round)", uniqueA: uniqueA, digits: reencode) }
                if let e = try r.export() {
                    defer {
                        do {
                            try mixer?.exported(e.diffID, by: r, rng: &rng) { url, made in
                                r.trace("rollup \(made.id.suffix(6)) of \(made.covers.map { $0.suffix(6) }): \((try? ForeignKeyPropertyTests.describe(url)) ?? "")")
                            }
                        } catch { Issue.record("seed \(seed): roll-up of \(r.name): \(error)") }
                    }
                    var file = URL(fileURLWithPath: e.file)
                    if reencode {
                        let dir = box.path("reencoded-\(r.name)-\(round)")
                        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
                        file = try reencodingKeys(file, into: dir, rng: &rng)
                    }
                    diffs.append(file)
                }
            }
            // Each replica receives a random part of what exists so far, in random order, some twice.
            for r in replicas {
                let some = diffs.filter { _ in Bool.random(using: &rng) }
                try deliver(some, to: r, duplicates: true, editFirst: true)
            }
        }
        // Final full exchange: whatever is still pending goes out, then everyone gets everything.
        // Without UNIQUE columns or indexes applying never creates local changes (no echo), so one exchange is enough;
        // a UNIQUE collision's loser is deleted as a new local change, which needs further exchanges to spread.
        var exchanges = 0
        while true {
            var fresh: [URL] = []
            for r in replicas { if let e = try r.export() { fresh.append(URL(fileURLWithPath: e.file)) } }
            if fresh.isEmpty && exchanges > 0 { break }
            diffs += fresh
            for r in replicas { try deliver(diffs, to: r, duplicates: true) }
            exchanges += 1
            // A resolver's choice against the clocks is a new local change too.
            if (!uniqueA && index == nil && resolver == nil) || exchanges == 6 { break }
        }
        for r in replicas { #expect(try r.db.pendingChangeCount() == 0, "seed \(seed): \(r.name) still has changes after \(exchanges) exchanges") }
        for r in replicas {
            // Apply's fast path for rows new to a device relies on this: no column clocks without a row entry.
            let orphans = try r.value("SELECT count(*) FROM rtsync_clocks c WHERE NOT EXISTS (SELECT 1 FROM rtsync_rows m WHERE m.tid = c.tid AND m.pk = c.pk)")
            #expect(orphans == .integer(0), "seed \(seed): \(r.name) has column clocks for keys without an rtsync_rows entry")
        }
        let reference = try replicas[0].dump()
        for r in replicas.dropFirst() {
            let d = try r.dump()
            if d != reference { print("convergence failure, seed \(seed)") }
            #expect(d == reference, "seed \(seed): A and \(r.name) differ: \(firstDifference(reference, d) ?? "")")
        }
        return setMerged
    }
}
