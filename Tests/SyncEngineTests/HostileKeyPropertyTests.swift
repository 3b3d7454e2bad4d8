import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Three replicas edit tables whose keys come from a small pool of hostile values (texts with NUL bytes, quotes and
/// commas, texts that look like key texts or SQL literals, 1 as INTEGER, REAL and TEXT, -0.0 and 0.0, blobs, NFC and
/// NFD spellings, K and the Kelvin sign, a long text), so that keys collide and key texts may be confused. Diffs are
/// delivered in random order, some twice, some late, row by row, through the set paths (some replicas merge every
/// diff as sets and export through the set path) and in groups; in the end every replica must hold the same rows,
/// compared by their bytes and storage classes (Swift's `==` would call NFC and NFD, or -0.0 and 0.0, equal).
@Suite("Hostile keys (property-based)")
struct HostileKeyPropertyTests {
    static let rounds = 5

    /// The pool. Texts holding a NUL are not `quote()`-safe (their key text is `J` + `json_quote()`).
    static let pool: [SQLValue] = [
        .text(""), .text("k"), .text("k\u{0}"), .text("k\u{0}x"), .text("\u{0}"), .text("\u{0}\u{0}"),
        .text("'"), .text("''"), .text(","), .text("J\"k\""), .text("X'00'"), .text("NULL"), .text("1"),
        .integer(1), .real(1.0), .real(-0.0), .real(0.0), .blob([0]), .blob([0x6B, 0]),
        .text("\u{E9}"), .text("e\u{301}"), .text("K"), .text("\u{212A}"), .text("k "), .text("\u{1F98A}"),
        .text(String(repeating: "long,'key'", count: 30)),
    ]
    static let safePool = pool.filter { !hasNul($0) }
    /// `RTSYNC_HOSTILE_NO_REAL_KEYS=1` leaves REAL keys out of both pools (and out of the batches' keys), to tell
    /// failures of INTEGER and REAL keys that SQLite finds equal (1 and 1.0) from others.
    static let noRealKeys = ProcessInfo.processInfo.environment["RTSYNC_HOSTILE_NO_REAL_KEYS"] != nil
    static func usable(_ pool: [SQLValue]) -> [SQLValue] { noRealKeys ? pool.filter { !$0.isReal } : pool }

    static func hasNul(_ v: SQLValue) -> Bool { v.string?.utf8.contains(0) == true }

    /// The tables: an untyped key, a TEXT key, a key of two columns (TEXT and untyped), a WITHOUT ROWID table.
    static let ddl = """
        CREATE TABLE t1(id PRIMARY KEY, v);
        CREATE TABLE t2(id TEXT PRIMARY KEY, v TEXT);
        CREATE TABLE t3(a TEXT, b, v, PRIMARY KEY (a, b));
        CREATE TABLE t4(id TEXT PRIMARY KEY, v) WITHOUT ROWID
        """
    static let tables = ["t1", "t2", "t3", "t4"]

    static func keyCondition(_ table: String) -> String { table == "t3" ? "a = ? AND b = ?" : "id = ?" }
    static func keyColumns(_ table: String) -> String { table == "t3" ? "a, b" : "id" }

    /// Paths taken, summed over the seeds of a run (printed for long runs).
    static let counters = PropertyPathCounters()

    @Test(arguments: ConvergencePropertyTests.seeds(from: 20_000, ci: 16))
    func hostileKeys_randomEditsAndDelivery_endIdenticalByBytes(seed: Int) throws {
        try run(seed: seed, pool: Self.usable(Self.pool))
    }

    /// The same without texts holding a NUL (every key text is `quote()`'s): tells NUL-key failures from others.
    @Test(arguments: ConvergencePropertyTests.seeds(from: 21_000, ci: 6))
    func quoteSafeKeys_randomEditsAndDelivery_endIdenticalByBytes(seed: Int) throws {
        try run(seed: seed, pool: Self.usable(Self.safePool))
    }

    // MARK: - Reproductions (shrunk from the property's failures: all are INTEGER and REAL keys SQLite finds equal)

    /// An untyped key column holds 1 and 1.0 as one key (SQLite compares them equal) with two key texts ('1' and
    /// '1.0'). Two devices start from `t1` holding `(1, 'base')` (these diffs are small: the per-row merge; with
    /// `bulkApplyMinimumBytes = 0` the new row 1.0 is written in bulk and the devices end the same way).
    func integerAndRealKeyPair(_ label: String, base: String = "INSERT INTO t1 VALUES (1, 'base')") throws -> (Sandbox, Replica, Replica) {
        let box = try Sandbox(label)
        let url = try box.baseDatabase(Self.ddl + ";\n" + base)
        let a = try box.replica("a", source: url), b = try box.replica("b", source: url)
        return (box, a, b)
    }

    func expectSameExactData(_ a: Replica, _ b: Replica, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let x = try Self.exactDump(a), y = try Self.exactDump(b)
        #expect(x == y, "a: \(x["t1"] ?? []), b: \(y["t1"] ?? [])", sourceLocation: sourceLocation)
    }

    /// The key's storage class changes (1 becomes 1.0), SQLite's key stays the same: the change is never logged
    /// (export has nothing), so the devices keep 1 and 1.0. A known limitation (README, "Known limitations").
    @Test func keyUpdatedFromIntegerToEqualReal_isNotSent() throws {
        let (_, a, b) = try integerAndRealKeyPair("hostile-int-real-update")
        try b.exec("UPDATE t1 SET id = ? WHERE id = ?", [.real(1.0), .integer(1)])
        if let e = try b.export() { #expect(a.apply(URL(fileURLWithPath: e.file)).status == .applied) }
        withKnownIssue("a key's storage class alone changing is not captured") { try expectSameExactData(a, b) }
    }

    /// a deletes 1; later b replaces the row with 1.0 (its export sends only the upsert of 1.0). b receives a's
    /// older delete of '1' and deletes its row 1.0; a inserts 1.0. (Seed 20003.)
    @Test func staleDeleteOfIntegerKey_leavesTheEqualRealRowAlone() throws {
        let (_, a, b) = try integerAndRealKeyPair("hostile-int-real-delete")
        try a.exec("DELETE FROM t1 WHERE id = ?", [.integer(1)])
        let fa = try a.exportFile()
        tick()
        try b.exec("INSERT OR REPLACE INTO t1 VALUES (?, 'b')", [.real(1.0)])
        let fb = try b.exportFile()
        #expect(b.apply(fa).status == .applied)
        #expect(a.apply(fb).status == .applied)
        try expectSameExactData(a, b)
    }

    /// a inserts 1, later b inserts 1.0: a takes b's newer row (1.0, 'b'); b takes a's older '1' as a row new to it
    /// and ends with (1, 'a'). (Seeds 20105 and 21029 mix this and the stale delete, with rows of batches.)
    @Test func concurrentInsertsOfEqualIntegerAndRealKeys_converge() throws {
        let (_, a, b) = try integerAndRealKeyPair("hostile-int-real-insert", base: "SELECT 1")
        try a.exec("INSERT INTO t1 VALUES (?, 'a')", [.integer(1)])
        let fa = try a.exportFile()
        tick()
        try b.exec("INSERT INTO t1 VALUES (?, 'b')", [.real(1.0)])
        let fb = try b.exportFile()
        #expect(b.apply(fa).status == .applied)
        #expect(a.apply(fb).status == .applied)
        try expectSameExactData(a, b)
    }

    // MARK: - Exact values

    /// A value as text that differs whenever the bytes or the storage class differ (ASCII only, readable).
    static func exact(_ v: SQLValue) -> String {
        switch v {
        case .null: return "NULL"
        case .integer(let n): return "\(n)"
        case .real(let d): return (d == 0 && d.sign == .minus ? "-0.0" : "\(d)") + "r"
        case .blob(let b): return "x'\(b.hexString)'"
        case .text(let s):
            var out = "'"
            for u in s.unicodeScalars {
                if u.value >= 0x20 && u.value < 0x7F && u != "\\" { out.unicodeScalars.append(u) } else { out += "\\u{\(String(u.value, radix: 16))}" }
            }
            return out + "'"
        }
    }

    static func exactRows(_ r: Replica, _ sql: String, _ args: [SQLValue] = []) throws -> [String] {
        try r.rows(sql, args).map { $0.map(exact).joined(separator: " | ") }.sorted()
    }

    static func exactDump(_ r: Replica) throws -> [String: [String]] {
        var out: [String: [String]] = [:]
        for t in tables { out[t] = try exactRows(r, "SELECT * FROM \(t)") }
        return out
    }

    // MARK: - Edits

    /// A key for `table` from the pool (for t3, two values).
    static func key(_ table: String, _ pool: [SQLValue], _ rng: inout SeededGenerator) -> [SQLValue] {
        table == "t3" ? [pool.randomElement(using: &rng)!, pool.randomElement(using: &rng)!] : [pool.randomElement(using: &rng)!]
    }

    /// Runs one statement, ignoring constraint failures (a key update or an insert onto a taken key, as the app sees them).
    static func attempt(_ r: Replica, _ sql: String, _ args: [SQLValue]) throws {
        do { try r.exec(sql, args) } catch let e as SQLiteError where e.isConstraintViolation {}
    }

    /// One random edit on `r`; returns the keys it named (with the table).
    static func randomEdit(_ r: Replica, _ rng: inout SeededGenerator, pool: [SQLValue], tag: String, written: inout Set<String>) throws {
        let t = tables.randomElement(using: &rng)!
        let k = key(t, pool, &rng)
        written.insert(t + ":" + k.map(exact).joined(separator: ","))
        let v: SQLValue = .text("\(tag)-\(Int.random(in: 0..<1000, using: &rng))")
        let cols = keyColumns(t), cond = keyCondition(t)
        let marks = k.map { _ in "?" }.joined(separator: ", ")
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<20: try attempt(r, "INSERT INTO \(t)(\(cols), v) VALUES (\(marks), ?)", k + [v])
        case 20..<38: try attempt(r, "INSERT OR REPLACE INTO \(t)(\(cols), v) VALUES (\(marks), ?)", k + [v])
        case 38..<56: try attempt(r, "UPDATE \(t) SET v = ? WHERE \(cond)", [v] + k)
        case 56..<74:
            let to = key(t, pool, &rng)
            // A key set to a value SQLite finds equal in another storage class (1 to 1.0, 0.0 to -0.0) is not
            // captured: a known limitation (`keyUpdatedFromIntegerToEqualReal_isNotSent`, README).
            if try zip(k, to).allSatisfy({ try r.value("SELECT ? = ?", [$0, $1]) == .integer(1) }) {
                try attempt(r, "UPDATE \(t) SET v = ? WHERE \(cond)", [v] + k)
                return
            }
            written.insert(t + ":" + to.map(exact).joined(separator: ","))
            let set = t == "t3" ? "a = ?, b = ?" : "id = ?"
            // Sometimes onto a taken key with OR REPLACE (the row there is deleted).
            let verb = Int.random(in: 0..<4, using: &rng) == 0 ? "UPDATE OR REPLACE" : "UPDATE"
            try attempt(r, "\(verb) \(t) SET \(set) WHERE \(cond)", to + k)
        case 74..<90: try attempt(r, "DELETE FROM \(t) WHERE \(cond)", k)
        default: try batch(r, t, &rng, pool: pool, tag: tag, written: &written)
        }
    }

    /// 80 to 140 rows with long values, so that the diff is over 64 KiB: inserts of keys made from the pool (and the
    /// pool's keys themselves), or an update of every row, or deletes of about half the rows.
    static func batch(_ r: Replica, _ t: String, _ rng: inout SeededGenerator, pool: [SQLValue], tag: String, written: inout Set<String>) throws {
        let long = String(repeating: "\(tag)~", count: 900 / (tag.utf8.count + 1) + 1)
        let cols = keyColumns(t)
        switch Int.random(in: 0..<3, using: &rng) {
        case 0:
            let n = Int.random(in: 80...140, using: &rng)
            let verb = Bool.random(using: &rng) ? "INSERT OR REPLACE" : "INSERT OR IGNORE"
            for _ in 0..<n {
                // A pool key, or one made from a pool key and a small number (so other replicas' batches collide).
                func made() -> SQLValue {
                    let base = pool.randomElement(using: &rng)!
                    guard Int.random(in: 0..<4, using: &rng) != 0 else { return base }
                    let i = Int.random(in: 0..<60, using: &rng)
                    switch base {
                    case .text(let s): return .text(s + "\(i)")
                    case .integer(let x): return .integer(x + Int64(i))
                    case .real(let d): return .real(d + Double(i) / 4)  // (none with RTSYNC_HOSTILE_NO_REAL_KEYS)
                    case .blob(let b): return .blob(b + [UInt8(i)])
                    case .null: return .null
                    }
                }
                let k = t == "t3" ? [made(), made()] : [made()]
                if k.allSatisfy({ v in pool.contains { exact($0) == exact(v) } }) { written.insert(t + ":" + k.map(exact).joined(separator: ",")) }
                let marks = k.map { _ in "?" }.joined(separator: ", ")
                try attempt(r, "\(verb) INTO \(t)(\(cols), v) VALUES (\(marks), ?)", k + [.text(long + "\(Int.random(in: 0..<100, using: &rng))")])
            }
        case 1:
            try r.exec("UPDATE \(t) SET v = ? || length(\(t == "t3" ? "a" : "id"))", [.text(long)])
        default:
            // Rows whose key's hex ends in an even digit (deterministic, any storage class).
            let keyExpr = t == "t3" ? "hex(a) || hex(b)" : "hex(id)"
            try r.exec("DELETE FROM \(t) WHERE substr(\(keyExpr), -1) IN ('0', '2', '4', '6', '8', 'A', 'C', 'E') OR \(keyExpr) = ''")
        }
    }

    // MARK: - The property

    func run(seed: Int, pool: [SQLValue]) throws {
        var rng = SeededGenerator(seed: UInt64(seed))
        let box = try Sandbox("hostile\(seed)")
        let base = try box.baseDatabase(Self.ddl + ";\nINSERT INTO t1 VALUES (1, 'base'), ('k', 'base'), (x'00', 'base');\n"
                                        + "INSERT INTO t2 VALUES ('k', 'base'); INSERT INTO t3 VALUES ('k', 1, 'base'); INSERT INTO t4 VALUES ('', 'base')")
        let (replicas, label) = try randomlyConfiguredReplicas(box, base: base, seed: seed, rng: &rng)
        var written: Set<String> = []
        var diffs: [URL] = []
        var problems: [String] = []
        var grouped = 0
        func check(_ r: Replica, _ f: URL, _ report: ApplyReport) {
            if report.status != .applied && report.status != .skipped {
                problems.append("\(r.name) \(report.status) \(f.lastPathComponent): \(report.reason ?? "")")
            }
        }
        for round in 0..<Self.rounds {
            for r in replicas {
                for _ in 0..<Int.random(in: 0...5, using: &rng) {
                    try Self.randomEdit(r, &rng, pool: pool, tag: "\(r.name)\(round)", written: &written)
                }
                if let e = try r.export() { diffs.append(URL(fileURLWithPath: e.file)) }
            }
            grouped += try deliverRandomParts(diffs, to: replicas, rng: &rng, label: label, onApply: check)
        }
        try exchangeUntilQuiet(replicas, diffs: &diffs, rng: &rng, label: label, onApply: check)
        // Every replica holds the same rows, by bytes and storage class.
        try expectQuietAndIdentical(replicas, problems: problems, tables: Self.tables, label: label, exactDump: Self.exactDump)
        for r in replicas.dropFirst() {
            // As `expectSameData`, naming only the first difference (the dumps hold long values).
            let x = try replicas[0].dump(), y = try r.dump()
            let same = x == y
            #expect(same, "\(label): A and \(r.name) differ: \(firstDifference(x, y) ?? "")")
        }
        // Every key written holds the same row (or none) everywhere.
        for entry in written.sorted() {
            let t = String(entry.prefix(2))
            let exactKey = String(entry.dropFirst(3))
            var k: [SQLValue] = []
            for a in pool {
                if t != "t3" {
                    if Self.exact(a) == exactKey { k = [a] }
                } else {
                    for b in pool where "\(Self.exact(a)),\(Self.exact(b))" == exactKey { k = [a, b] }
                }
            }
            guard !k.isEmpty else { continue }
            let sql = "SELECT * FROM \(t) WHERE \(Self.keyCondition(t))"
            let here = try Self.exactRows(replicas[0], sql, k)
            for r in replicas.dropFirst() {
                let there = try Self.exactRows(r, sql, k)
                #expect(here == there, "\(label): \(t) key \(exactKey): A \(here), \(r.name) \(there)")
            }
        }
        Self.counters.record("HOSTILE \(label) written \(written.count) keys", diffs: diffs, grouped: grouped, replicas: replicas)
    }
}
