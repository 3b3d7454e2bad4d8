import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Three replicas edit the VALUES (not the keys) of tables with collated, untyped, REAL, NUMERIC, BLOB and NOT NULL
/// columns, a WITHOUT ROWID table, a UNIQUE COLLATE NOCASE column (rows collide) and an INTEGER PRIMARY KEY table.
/// Values come from a hostile pool, and an edit often replaces a value with one SQLite's `=`/`IS` (under the column's
/// collation) or Swift's `==` finds equal: 'alice'/'Alice'/'ALICE', 'x'/'x '/'x  ' under RTRIM, NFC and NFD 'café',
/// 'K' and the Kelvin sign, texts with NUL bytes, '' / NULL / X'', 1 / 1.0 / '1' / X'31', integers near Int64.max,
/// 1e308, 5e-324, long texts, blobs with NUL bytes, JSON-looking texts. Edits are INSERT, INSERT OR REPLACE, UPDATE
/// of one or several columns, UPSERT, DELETE, all bound as parameters, and now and then a batch of 80+ rows with long
/// values (a diff over 64 KiB: the set paths), some made between an export and the next apply. Diffs are delivered in random order, some twice, some late, some in
/// groups; in the end every replica must hold the same rows by bytes and storage class.
///
/// Left out (known limitations): -0.0 (a value whose only change is the sign of zero is not captured). Keys are
/// never edited here (`HostileKeyPropertyTests` covers keys).
@Suite("Hostile values (property-based)")
struct HostileValuePropertyTests {
    static let rounds = 5

    static let long = String(repeating: "long 'value', \u{E9}; ", count: 110)  // about 2 KB

    /// Classes of values that look alike to SQLite's `=` under some collation or affinity, or to Swift's `==`.
    /// An edit picks a sibling of the current value most of the time.
    static let classes: [[SQLValue]] = [
        [.text("alice"), .text("Alice"), .text("ALICE")],
        [.text("x"), .text("x "), .text("x  ")],
        [.text("caf\u{E9}"), .text("cafe\u{301}"), .text("CAF\u{C9}")],
        [.text("K"), .text("k"), .text("\u{212A}")],
        [.text("a\u{0}b"), .text("a\u{0}c"), .text("a"), .text("\u{0}"), .text("\u{0}\u{0}")],
        [.text(""), .null, .blob([]), .text(" ")],
        [.integer(1), .real(1.0), .text("1"), .blob([0x31]), .text("1.0"), .text(" 1")],
        [.integer(Int64.max), .integer(Int64.max - 1), .real(9.223372036854775807e18), .text("9223372036854775807"),
         .text("9223372036854775808"), .integer(Int64.min)],
        [.real(1e308), .real(Double.leastNonzeroMagnitude), .real(0.5), .real(0.0), .integer(0), .text("0.5"), .text("1e308")],
        [.text(long), .text(long + " "), .text(long.uppercased()), .text(long + "\u{0}")],
        [.blob([0, 0, 1]), .blob([0, 0, 2]), .blob([0]), .blob([0, 0x61, 0]), .text("\u{0}\u{0}\u{1}")],
        [.text("{\"a\":1}"), .text("{\"a\": 1}"), .text("{\"A\":1}"), .text("[1,2]"), .text("[1, 2]"), .text("null")],
    ]
    static let pool = classes.flatMap { $0 }

    /// The UNIQUE COLLATE NOCASE column's values: few, so that rows collide (and look alike without colliding).
    static let handleClasses: [[SQLValue]] = [
        [.text("alice"), .text("Alice"), .text("ALICE")],
        [.text("bob"), .text("Bob"), .text("bob ")],
        [.text("K"), .text("k"), .text("\u{212A}")],
        [.text("caf\u{E9}"), .text("cafe\u{301}")],
        [.text("a\u{0}b"), .text("A\u{0}B"), .null],
    ]
    static let handlePool = handleClasses.flatMap { $0 }

    static let ddl = """
        CREATE TABLE v1(id TEXT PRIMARY KEY, name TEXT COLLATE NOCASE, code TEXT COLLATE RTRIM, any_ /*no type*/, r REAL, n NUMERIC, b BLOB, t TEXT NOT NULL DEFAULT '');
        CREATE TABLE v2(id TEXT PRIMARY KEY, name TEXT COLLATE NOCASE, any_, r REAL, b BLOB) WITHOUT ROWID;
        CREATE TABLE v3(id TEXT PRIMARY KEY, handle TEXT UNIQUE COLLATE NOCASE, note);
        CREATE TABLE v4(id INTEGER PRIMARY KEY, name TEXT COLLATE RTRIM, any_, n NUMERIC)
        """
    static let baseRows = """
        INSERT INTO v1 VALUES ('k0', 'alice', 'x', 1, 0.5, 1, x'000001', ''), ('k1', 'caf\u{E9}', 'x ', '1', 1e308, 9223372036854775807, NULL, '{"a":1}');
        INSERT INTO v2 VALUES ('k0', 'K', 1.0, 0.5, x'31');
        INSERT INTO v3 VALUES ('k0', 'alice', 1), ('k1', 'bob', 'x');
        INSERT INTO v4 VALUES (1, 'x', 1, 1), (2, 'alice', '', 0.5)
        """
    static let tables = ["v1", "v2", "v3", "v4"]
    static let columns: [String: [String]] = [
        "v1": ["name", "code", "any_", "r", "n", "b", "t"],
        "v2": ["name", "any_", "r", "b"],
        "v3": ["handle", "note"],
        "v4": ["name", "any_", "n"],
    ]

    /// Paths taken, summed over the seeds of a run (printed for long runs).
    static let counters = PropertyPathCounters()

    @Test(arguments: ConvergencePropertyTests.seeds(from: 30_000, ci: 12))
    func hostileValues_randomEditsAndDelivery_endIdenticalByBytes(seed: Int) throws {
        try run(seed: seed)
    }

    // MARK: - Beyond the pool

    /// TEXT that is not valid UTF-8 cannot be bound from Swift (a `String` is valid UTF-8), so the pool has none;
    /// the app can still store it with SQL (`CAST(x'61C3' AS TEXT)`). The edit is captured (its bytes changed), but
    /// the export reads the row into a Swift `String` (`Statement.column`, `String(decoding:as:)`), which replaces
    /// the bad bytes with U+FFFD, and the set export falls back to that path on purpose (`AttachedDiffWriter.seal`):
    /// the other device stores `61 EF BF BD` while this one keeps `61 C3`, and nothing tells them apart again
    /// (diffs must hold valid UTF-8: the reader rejects the raw bytes). Found while probing this suite's values; not
    /// among the README's known limitations.
    @Test func invalidUTF8Text_reachesTheOtherDeviceAsReplacementCharacters() throws {
        let box = try Sandbox("hostile-values-bad-utf8")
        let base = try box.baseDatabase(Self.ddl + ";\n" + Self.baseRows)
        let a = try box.replica("a", source: base), b = try box.replica("b", source: base)
        try a.exec("UPDATE v1 SET name = CAST(x'61C3' AS TEXT) WHERE id = 'k0'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        let sql = "SELECT hex(name) FROM v1 WHERE id = 'k0'"
        let here = try a.value(sql), there = try b.value(sql)
        #expect(here == .text("61C3"))
        withKnownIssue("invalid UTF-8 text is sent as U+FFFD: the devices keep different bytes") {
            #expect(there == here)
        }
    }

    // MARK: - Exact values

    static func exact(_ v: SQLValue) -> String { HostileKeyPropertyTests.exact(v) }

    static func exactDump(_ r: Replica) throws -> [String: [String]] {
        var out: [String: [String]] = [:]
        for t in tables { out[t] = try HostileKeyPropertyTests.exactRows(r, "SELECT * FROM \(t)") }
        return out
    }

    static func short(_ s: String) -> String { s.count > 160 ? String(s.prefix(160)) + "…(\(s.count))" : s }

    // MARK: - Edits

    static func key(_ t: String, _ rng: inout SeededGenerator) -> SQLValue {
        t == "v4" ? .integer(Int64.random(in: 1...5, using: &rng)) : .text("k\(Int.random(in: 0..<5, using: &rng))")
    }

    /// A new value for column `c`: most of the time a sibling of `current` (same class), else any value of the pool.
    static func value(_ t: String, _ c: String, current: SQLValue?, _ rng: inout SeededGenerator) -> SQLValue {
        let (cls, all) = c == "handle" ? (handleClasses, handlePool) : (classes, pool)
        if let current, Int.random(in: 0..<10, using: &rng) < 6,
           let siblings = cls.first(where: { $0.contains { exact($0) == exact(current) } }) {
            return siblings.randomElement(using: &rng)!
        }
        return all.randomElement(using: &rng)!
    }

    static func attempt(_ r: Replica, _ sql: String, _ args: [SQLValue]) throws {
        do { try r.exec(sql, args) } catch let e as SQLiteError where e.isConstraintViolation {}
    }

    /// One random edit on `r`.
    static func randomEdit(_ r: Replica, _ rng: inout SeededGenerator, tag: String, counters: inout Int) throws {
        let t = tables.randomElement(using: &rng)!
        let k = key(t, &rng)
        let cols = columns[t]!
        let row = try r.rows("SELECT \(cols.joined(separator: ", ")) FROM \(t) WHERE id = ?", [k]).first
        func current(_ c: String) -> SQLValue? { row.map { $0[cols.firstIndex(of: c)!] } }
        // A random non-empty subset of the value columns, in random order.
        func someColumns() -> [String] {
            let n = Int.random(in: 1...cols.count, using: &rng)
            return Array(cols.shuffled(using: &rng).prefix(n))
        }
        func values(_ cs: [String]) -> [SQLValue] {
            cs.map { c in
                let v = value(t, c, current: current(c), &rng)
                if let cur = current(c), exact(cur) != exact(v) { counters += 1 }
                return v
            }
        }
        func marks(_ n: Int) -> String { Array(repeating: "?", count: n).joined(separator: ", ") }
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<14:
            let cs = someColumns()
            if t == "v4" && Int.random(in: 0..<4, using: &rng) == 0 {
                // A new rowid chosen by SQLite (max + 1: replicas collide on it).
                try attempt(r, "INSERT INTO v4(\(cs.joined(separator: ", "))) VALUES (\(marks(cs.count)))", values(cs))
            } else {
                try attempt(r, "INSERT INTO \(t)(id, \(cs.joined(separator: ", "))) VALUES (\(marks(cs.count + 1)))", [k] + values(cs))
            }
        case 14..<26:
            let cs = someColumns()
            try attempt(r, "INSERT OR REPLACE INTO \(t)(id, \(cs.joined(separator: ", "))) VALUES (\(marks(cs.count + 1)))", [k] + values(cs))
        case 26..<56:
            let cs = Int.random(in: 0..<2, using: &rng) == 0 ? [cols.randomElement(using: &rng)!] : someColumns()
            let verb = t == "v3" && Bool.random(using: &rng) ? "UPDATE OR REPLACE" : "UPDATE"
            try attempt(r, "\(verb) \(t) SET \(cs.map { "\($0) = ?" }.joined(separator: ", ")) WHERE id = ?", values(cs) + [k])
        case 56..<68:
            try attempt(r, "DELETE FROM \(t) WHERE id = ?", [k])
        case 68..<92:
            // UPSERT: insert some columns, on conflict update some (maybe other) columns from `excluded`.
            let ins = someColumns(), upd = someColumns().filter { ins.contains($0) || Bool.random(using: &rng) }
            let set = upd.isEmpty ? "DO NOTHING" : "DO UPDATE SET " + upd.map { "\($0) = excluded.\($0)" }.joined(separator: ", ")
            let target = Bool.random(using: &rng) ? "(id)" : ""
            try attempt(r, "INSERT INTO \(t)(id, \(ins.joined(separator: ", "))) VALUES (\(marks(ins.count + 1))) ON CONFLICT\(target) \(set)", [k] + values(ins))
        default:
            try batch(r, t, &rng, tag: tag)
        }
    }

    /// 80 to 140 rows with long values (a diff over 64 KiB), or a set-based edit of every row that SQLite's `=` may
    /// find a no-op (upper case under NOCASE, trailing spaces under RTRIM, INTEGER to REAL in an untyped column).
    static func batch(_ r: Replica, _ t: String, _ rng: inout SeededGenerator, tag: String) throws {
        let cols = columns[t]!
        switch Int.random(in: 0..<4, using: &rng) {
        case 0, 1:
            let n = Int.random(in: 80...140, using: &rng)
            let verb = ["INSERT OR REPLACE", "INSERT OR IGNORE", "INSERT"][Int.random(in: 0..<3, using: &rng)]
            for _ in 0..<n {
                let i = Int.random(in: 0..<150, using: &rng)
                let k: SQLValue = t == "v4" ? .integer(Int64(100 + i)) : .text("b\(i)")
                var vals: [SQLValue] = []
                for c in cols {
                    if c == "handle" {
                        // Handles made from the pool and a small number: other replicas' batches collide on them.
                        let h = handlePool.randomElement(using: &rng)!
                        vals.append(h.string.map { .text($0 + "\(Int.random(in: 0..<40, using: &rng))") } ?? .null)
                    } else if Bool.random(using: &rng) {
                        vals.append(.text(long + "\(tag)\(Int.random(in: 0..<100, using: &rng))"))
                    } else {
                        vals.append(pool.randomElement(using: &rng)!)
                    }
                }
                try attempt(r, "\(verb) INTO \(t)(id, \(cols.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: cols.count + 1).joined(separator: ", ")))", [k] + vals)
            }
        case 2:
            // Every row: looks like a no-op to the collations and to `=` on numbers, but the bytes change.
            var sets: [String] = []
            for c in cols {
                switch c {
                case "name", "handle": sets.append("\(c) = CASE WHEN typeof(\(c)) = 'text' THEN (CASE WHEN \(c) = upper(\(c)) THEN lower(\(c)) ELSE upper(\(c)) END) ELSE \(c) END")
                case "code": sets.append("code = CASE WHEN typeof(code) = 'text' THEN code || ' ' ELSE code END")
                case "any_": sets.append("any_ = CASE typeof(any_) WHEN 'integer' THEN any_ + 0.0 WHEN 'real' THEN CAST(any_ AS TEXT) ELSE any_ END")
                case "t": sets.append("t = t || ?")
                default: continue
                }
            }
            let args: [SQLValue] = cols.contains("t") ? [.text(Bool.random(using: &rng) ? " " : long)] : []
            try attempt(r, (t == "v3" ? "UPDATE OR REPLACE " : "UPDATE ") + "\(t) SET \(sets.joined(separator: ", "))", args)
        default:
            try r.exec("DELETE FROM \(t) WHERE substr(hex(id), -1) IN ('0', '2', '4', '6', '8', 'A', 'C', 'E')")
        }
    }

    // MARK: - The property

    func run(seed: Int) throws {
        var rng = SeededGenerator(seed: UInt64(seed))
        let box = try Sandbox("hostile-values\(seed)")
        let base = try box.baseDatabase(Self.ddl + ";\n" + Self.baseRows)
        let (replicas, label) = try randomlyConfiguredReplicas(box, base: base, seed: seed, rng: &rng)
        var diffs: [URL] = []
        var problems: [String] = []
        var grouped = 0, lookalikes = 0
        func check(_ r: Replica, _ f: URL, _ report: ApplyReport) {
            if report.status != .applied && report.status != .skipped {
                problems.append("\(r.name) \(report.status) \(f.lastPathComponent): \(report.reason ?? "")")
            }
        }
        for round in 0..<Self.rounds {
            for r in replicas {
                for _ in 0..<Int.random(in: 0...6, using: &rng) {
                    try Self.randomEdit(r, &rng, tag: "\(r.name)\(round)", counters: &lookalikes)
                }
                if let e = try r.export() { diffs.append(URL(fileURLWithPath: e.file)) }
            }
            // Half the time the app writes between the export and the apply: local edits not yet exported when the
            // diffs arrive (they go out with the next round's export).
            grouped += try deliverRandomParts(diffs, to: replicas, rng: &rng, label: label, before: { r, rng in
                if Bool.random(using: &rng) {
                    for _ in 0..<Int.random(in: 0...2, using: &rng) { try Self.randomEdit(r, &rng, tag: "\(r.name)\(round)here", counters: &lookalikes) }
                }
            }, onApply: check)
        }
        try exchangeUntilQuiet(replicas, diffs: &diffs, rng: &rng, label: label, onApply: check)
        try expectQuietAndIdentical(replicas, problems: problems, tables: Self.tables, label: label, exactDump: Self.exactDump, short: Self.short)
        Self.counters.record("HOSTILE-VALUES \(label)", diffs: diffs, grouped: grouped, replicas: replicas, extra: lookalikes, extraName: "changed values")
    }
}
