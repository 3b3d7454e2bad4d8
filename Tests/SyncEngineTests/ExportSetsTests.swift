import Crypto
import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Export coalesces the change log and writes the diff as set operations in SQL (SyncDatabase+ExportSets). Each
/// test copies one device twice, with its pending change log, exports from both copies, one of them row by row
/// (`setExport = false`, the reference), and expects the same diff (tables, rows in the same order, values,
/// clocks, born clocks, changed columns, column clocks, metadata) and the same bookkeeping afterwards.
@Suite("Export as set operations")
struct ExportSetsTests {
    static let schema = """
        CREATE TABLE notes(id TEXT PRIMARY KEY, title TEXT, body TEXT, n INTEGER, r REAL);
        CREATE TABLE counters(id INTEGER PRIMARY KEY, label TEXT, v INTEGER);
        CREATE TABLE tags(name TEXT PRIMARY KEY, color TEXT, weight) WITHOUT ROWID;
        CREATE TABLE pairs(a TEXT, v TEXT, b INTEGER, PRIMARY KEY (a, b));
        CREATE TABLE cells(x INTEGER, y TEXT, z, v TEXT, PRIMARY KEY (y, z, x)) WITHOUT ROWID;
        """

    /// An untracked database made from `sql`.
    func source(_ box: Sandbox, _ name: String, _ sql: String = Self.schema) throws -> URL {
        let url = box.path("\(name)-source.sqlite")
        let c = try Connection(path: url.path)
        try c.execute("PRAGMA journal_mode = WAL")
        try c.execute(sql)
        return url
    }

    /// Two copies of `device` (same site, same pending log): the first exports as sets, the second row by row.
    func twins(_ box: Sandbox, _ device: Replica, _ label: String) throws -> (sets: Replica, rows: Replica) {
        let user = try #require(device.value("SELECT user_id FROM rtsync_site")?.string)
        _ = try device.value("PRAGMA wal_checkpoint(TRUNCATE)")
        let sets = try box.replica("\(label)-sets", source: device.dbURL, user: user)
        sets.db.setExportMinimumRows = 1
        let rows = try box.replica("\(label)-rows", source: device.dbURL, user: user)
        rows.db.setExport = false
        return (sets, rows)
    }

    /// Bookkeeping without what differs between two exports of the same changes (the diff's id, times).
    func bookkeeping(_ r: Replica) throws -> [String: TableDump] {
        var dump = try r.fullDump()
        for (table, column) in [("rtsync_applied", "applied_at"), ("rtsync_applied", "diff_id"), ("rtsync_sent_keys", "diff_id"), ("rtsync_site", "last_export"), ("rtsync_site", "last_diff_id")] {
            guard var t = dump[table], let i = t.columns.firstIndex(of: column) else { continue }
            for j in t.rows.indices { t.rows[j][i] = .null }
            dump[table] = t
        }
        return dump
    }

    /// Exports from both twins and expects the same diff and bookkeeping; returns the set-based export's file.
    @discardableResult
    func expectSameExport(_ t: (sets: Replica, rows: Replica), setBased: Bool? = true, signingKey: Curve25519.Signing.PrivateKey? = nil,
                          sourceLocation: SourceLocation = #_sourceLocation) throws -> URL? {
        let before = t.sets.db.setExportsWritten
        let x = try t.sets.db.exportChanges(to: t.sets.outbox, signingKey: signingKey)
        let y = try t.rows.db.exportChanges(to: t.rows.outbox, signingKey: signingKey)
        #expect((x == nil) == (y == nil), "sets: \(String(describing: x)); rows: \(String(describing: y))", sourceLocation: sourceLocation)
        #expect(t.rows.db.setExportsWritten == 0, sourceLocation: sourceLocation)
        if let x, let y {
            if let setBased {
                #expect(t.sets.db.setExportsWritten == before + (setBased ? 1 : 0), "set-based path used: \(t.sets.db.setExportsWritten - before)", sourceLocation: sourceLocation)
            }
            #expect(x.rows == y.rows && x.tables == y.tables && x.sequence == y.sequence, "sets: \(x); rows: \(y)", sourceLocation: sourceLocation)
            let a = try DiffReader(url: URL(fileURLWithPath: x.file)), b = try DiffReader(url: URL(fileURLWithPath: y.file))
            #expect(a.metadata.id.string == x.diffID, sourceLocation: sourceLocation)
            // The next diff's id is later than this one's.
            #expect(try t.sets.value("SELECT last_diff_id FROM rtsync_site")?.string == x.diffID, sourceLocation: sourceLocation)
            #expect(a.tables == b.tables, sourceLocation: sourceLocation)
            #expect(a.counts == b.counts && a.hasCellClocks == b.hasCellClocks, sourceLocation: sourceLocation)
            #expect(a.metadata.kind == b.metadata.kind && a.metadata.authorUser == b.metadata.authorUser && a.metadata.authorSite == b.metadata.authorSite
                    && a.metadata.sequenceFirst == b.metadata.sequenceFirst && a.metadata.sequenceLast == b.metadata.sequenceLast
                    && a.metadata.seen == b.metadata.seen, "\(a.metadata) vs \(b.metadata)", sourceLocation: sourceLocation)
            #expect((a.metadata.signature == nil) == (signingKey == nil), sourceLocation: sourceLocation)
            if let signingKey { #expect(a.isSigned(byOneOf: [Array(signingKey.publicKey.rawRepresentation)]), sourceLocation: sourceLocation) }
            let ca = try a.changes(), cb = try b.changes()
            #expect(ca == cb, "first difference: \(zip(ca, cb).first { $0 != $1 }.map { "\($0) vs \($1)" } ?? "counts \(ca.count) vs \(cb.count)")",
                    sourceLocation: sourceLocation)
        }
        let p = try bookkeeping(t.sets), q = try bookkeeping(t.rows)
        #expect(p == q, "bookkeeping differs: \(firstDifference(p, q) ?? "")", sourceLocation: sourceLocation)
        #expect(try t.sets.db.pendingChangeCount() == 0, sourceLocation: sourceLocation)
        #expect(try t.sets.value("SELECT count(*) FROM pragma_database_list WHERE name = 'rtsync_out'") == .integer(0), "the diff is still attached", sourceLocation: sourceLocation)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: t.sets.outbox.path).filter { !$0.hasSuffix(".sqlite") }
        #expect(leftovers.isEmpty, "left in the outbox: \(leftovers)", sourceLocation: sourceLocation)
        return x.map { URL(fileURLWithPath: $0.file) }
    }

    static let keys: [SQLValue] = [.text("a"), .text("it's"), .text("naïve ☃"), .text("''"), .text("12"), .text("b"), .text("c"), .text("d"),
                                   .text("p,q")]
    /// Key texts with quotes next to commas, which a key of several columns must not split at.
    static let splittingKeys: [SQLValue] = [.text("x',y"), .text("','"), .text("',"), .text(",'")]

    /// One random write to `c` (an app connection, or the sync database's own).
    func randomWrite(_ run: (String, [SQLValue]) throws -> Void, _ g: inout SeededGenerator) throws {
        func key() -> SQLValue { Int.random(in: 0..<6, using: &g) == 0 ? Self.splittingKeys.randomElement(using: &g)! : Self.keys.randomElement(using: &g)! }
        let k = key(), k2 = key()
        let i = SQLValue.integer(Int64.random(in: -3...5, using: &g)), i2 = SQLValue.integer(Int64.random(in: -3...5, using: &g))
        let v = SQLValue.text("v\(Int.random(in: 0..<4, using: &g))"), w: SQLValue = Bool.random(using: &g) ? .real(Double(Int.random(in: 0..<9, using: &g)) / 4) : .null
        switch Int.random(in: 0..<20, using: &g) {
        case 0: try run("INSERT OR IGNORE INTO notes VALUES (?, ?, ?, ?, ?)", [k, v, v, i, w])
        case 1: try run("INSERT OR REPLACE INTO notes VALUES (?, ?, 'replaced', ?, ?)", [k, v, i, w])
        case 2: try run("UPDATE notes SET title = ? WHERE id = ?", [v, k])
        case 3: try run("UPDATE notes SET body = ?, r = ? WHERE id = ?", [v, w, k])
        case 4: try run("DELETE FROM notes WHERE id = ?", [k])
        case 5: try run("UPDATE OR IGNORE notes SET id = ? WHERE id = ?", [k2, k])
        case 6: try run("INSERT INTO notes(id, title) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET n = coalesce(n, 0) + 1", [k, v])
        case 7: try run("INSERT OR IGNORE INTO counters VALUES (?, ?, ?)", [i, v, i2])
        case 8: try run("UPDATE counters SET v = coalesce(v, 0) + 1 WHERE id = ?", [i])
        case 9: try run("DELETE FROM counters WHERE id = ?", [i])
        case 10: try run("INSERT OR REPLACE INTO tags VALUES (?, ?, ?)", [k, v, w])
        case 11: try run("UPDATE tags SET weight = ? WHERE name = ?", [i, k])
        case 12: try run("DELETE FROM tags WHERE name = ?", [k])
        // Keys of two and three columns: texts with commas and quotes, integers, a REAL or a NULL now and then (row by row).
        case 13: try run("INSERT OR REPLACE INTO pairs VALUES (?, ?, ?)", [k, v, i])
        case 14: try run("UPDATE pairs SET v = ? WHERE a = ? AND b = ?", [v, k, i])
        case 15: try run("DELETE FROM pairs WHERE a = ? AND b = ?", [k, i])
        case 16: try run("UPDATE OR IGNORE pairs SET b = ? WHERE a = ? AND b = ?", [i2, k, i])
        case 17: try run("INSERT OR IGNORE INTO cells VALUES (?, ?, ?, ?)", [i, k, Int.random(in: 0..<40, using: &g) == 0 ? w : k2, v])
        case 18: try run("UPDATE cells SET v = ? WHERE x = ? AND y = ?", [v, i, k])
        default: try run("UPDATE notes SET title = title WHERE id = ?", [k])  // an update that changes nothing
        }
    }

    /// Five rounds of random writes (`write`, given the generator and a way to run SQL) on a device made of `schema`,
    /// half through the sync database's connection and half through a plain one, with another device's diffs applied
    /// in between, so recorded clocks newer than a local edit keep it from being sent; each round's export is compared
    /// between twins (the third one signed). Returns how many rounds were exported as sets.
    func randomRounds(_ box: Sandbox, seed: UInt64, schema: String = Self.schema,
                      write: (inout SeededGenerator, (String, [SQLValue]) throws -> Void) throws -> Void) throws -> Int {
        var g = SeededGenerator(seed: seed)
        let base = try source(box, "base", schema)
        var device = try box.replica("D", source: base, user: "u")
        let other = try box.replica("R", source: base, user: "u")
        var sets = 0
        for round in 0..<5 {
            let app = try Connection(path: device.dbURL.path)
            app.setBusyTimeout(milliseconds: 5_000)
            for _ in 0..<Int.random(in: 1...40, using: &g) {
                if Bool.random(using: &g) { try write(&g) { try device.exec($0, $1) } } else { try write(&g) { try app.execute($0, $1) } }
                if Int.random(in: 0..<8, using: &g) == 0 { tick() }
            }
            if round > 0 {
                // Another device edits the same rows later: its clocks beat the edits pending here.
                tick()
                for _ in 0..<Int.random(in: 0...10, using: &g) { try write(&g) { try other.exec($0, $1) } }
                if let file = try other.export() { _ = device.apply(URL(fileURLWithPath: file.file)) }
                for _ in 0..<Int.random(in: 0...5, using: &g) { try write(&g) { try device.exec($0, $1) } }
            }
            let t = try twins(box, device, "r\(round)")
            // A key value the set export does not decode sends the round row by row; the diff and bookkeeping must
            // match either way.
            let before = t.sets.db.setExportsWritten
            let file = try expectSameExport(t, setBased: nil, signingKey: round == 2 ? Curve25519.Signing.PrivateKey() : nil)
            if file != nil, t.sets.db.setExportsWritten > before { sets += 1 }
            if let file { _ = other.apply(file) }
            device = t.sets
        }
        return sets
    }

    /// Random change logs (inserts, updates, deletes, key changes, REPLACE and UPSERT, updates that change nothing,
    /// keys of one to three columns).
    @Test(arguments: 0..<6)
    func randomChangeLogs_exportTheSameDiffAndBookkeeping(seed: Int) throws {
        let sets = try randomRounds(try Sandbox("export-sets-\(seed)"), seed: UInt64(seed) &* 7919) { g, run in try randomWrite(run, &g) }
        #expect(sets > 0)
    }

    /// Edits of many rows at once (the benchmark's shape, inserts then updates of one column), and a one-row export.
    @Test func bulkInsertsThenUpdates_andOneRow() throws {
        let box = try Sandbox("export-sets-bulk")
        let device = try box.replica("D", source: try source(box, "base"), user: "u")
        try device.exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) INSERT INTO notes SELECT 'key' || i, 'title', 'body', i, i / 3.0 FROM n")
        let first = try twins(box, device, "ins")
        let file = try #require(try expectSameExport(first))
        #expect(try DiffReader(url: file).counts["notes"]?.upserts == 3000)
        #expect(try Connection(path: file.path).scalar("PRAGMA page_size") == .integer(4096))
        tick()
        try first.sets.exec("UPDATE notes SET n = n + 1 WHERE n % 2 = 0")
        try first.sets.exec("UPDATE notes SET title = 'again' WHERE n % 3 = 0")
        let second = try twins(box, first.sets, "upd")
        try expectSameExport(second)
        tick()
        try second.sets.exec("UPDATE notes SET body = 'one' WHERE id = 'key7'")
        let third = try twins(box, second.sets, "one")
        let one = try #require(try expectSameExport(third))
        #expect(try DiffReader(url: one).changes().map(\.changedColumns) == [["body"]])
        // A small diff has small pages, as row by row, so it stays a few KB.
        #expect(try Connection(path: one.path).scalar("PRAGMA page_size") == .integer(512))
    }

    /// An export of fewer than `setExportMinimumRows` (64 by default) changed rows goes row by row, a larger one as sets.
    @Test func smallExports_goRowByRow_belowTheMinimum() throws {
        let box = try Sandbox("export-sets-gate")
        let device = try box.replica("D", source: try source(box, "base"), user: "u")
        device.db.setExportMinimumRows = 64
        try device.exec("INSERT INTO notes(id) VALUES ('one')")
        #expect(try device.export()?.rows == 1)
        #expect(device.db.setExportsWritten == 0)
        try device.exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 64) INSERT INTO notes(id) SELECT 'k' || i FROM n")
        #expect(try device.export()?.rows == 64)
        #expect(device.db.setExportsWritten == 1)
    }

    /// Change logs the set-based export leaves to the row-by-row one (a key of five columns; a key of several columns
    /// with a REAL value) give the same result, written row by row. Keys of two to four columns of TEXT (commas and
    /// quotes included) and INTEGER values go as sets.
    @Test func tablesItDoesNotHandle_goRowByRow() throws {
        let box = try Sandbox("export-sets-fallback")
        let device = try box.replica("D", source: try source(box, "base", Self.schema + "CREATE TABLE wide(a, b, c, d, e, v, PRIMARY KEY (a, b, c, d, e));"), user: "u")
        try device.exec("INSERT INTO notes(id, title) VALUES ('x', 'one')")
        try device.exec("INSERT INTO wide VALUES (1, 2, 3, 4, 5, 'v')")
        let first = try twins(box, device, "wide")
        try expectSameExport(first, setBased: false)
        // Without wide, the same database exports as sets again, keys of two and three columns included.
        try first.sets.exec("UPDATE notes SET title = 'two' WHERE id = 'x'")
        try first.sets.exec("INSERT INTO pairs VALUES ('p,q', 'v', 1), ('it''s', 'w', -2)")
        try first.sets.exec("INSERT INTO cells VALUES (7, 'y', 'z', 'v'), (8, 'y', 12, 'w')")
        let second = try twins(box, first.sets, "notes")
        try expectSameExport(second)
        // Texts holding `',` and `','` are split where their quotes end.
        try second.sets.exec("DELETE FROM pairs WHERE a = 'p,q'")
        try second.sets.exec("INSERT INTO pairs VALUES ('x'',y', 'v', 3), (''',''', 'w', 4)")
        let third = try twins(box, second.sets, "quote-comma")
        try expectSameExport(third)
        // A REAL in a key of several columns does not decode as TEXT or INTEGER: row by row.
        try third.sets.exec("INSERT INTO cells VALUES (9, 'y', 2.5, 'v')")
        let fourth = try twins(box, third.sets, "real-part")
        try expectSameExport(fourth, setBased: false)
    }

    /// A key stored as REAL or BLOB (a BLOB in a TEXT key column, a REAL in a key column without affinity) does
    /// not decode as TEXT or INTEGER: row by row. An INTEGER there, and a number stored as TEXT, go as sets.
    @Test func keysNeitherTextNorInteger_goRowByRow() throws {
        let box = try Sandbox("export-sets-keys")
        let device = try box.replica("D", source: try source(box, "base", Self.schema + "CREATE TABLE loose(k PRIMARY KEY, v);"), user: "u")
        try device.exec("INSERT INTO tags VALUES (x'00ff', 'blob key', 1)")
        let first = try twins(box, device, "blob")
        try expectSameExport(first, setBased: false)
        try first.sets.exec("INSERT INTO loose VALUES (2.5, 'real key')")
        let second = try twins(box, first.sets, "real")
        try expectSameExport(second, setBased: false)
        try second.sets.exec("INSERT INTO loose VALUES (7, 'integer key')")
        try second.sets.exec("INSERT INTO tags VALUES (2.5, 'stored as text', 1)")
        let third = try twins(box, second.sets, "int")
        try expectSameExport(third)
    }

    /// A log that coalesces to nothing (a row inserted and deleted) writes no file, clears the log and keeps the
    /// site's clock past the discarded changes, as row by row.
    @Test func changesThatCancelOut_writeNoFile() throws {
        let box = try Sandbox("export-sets-nothing")
        let device = try box.replica("D", source: try source(box, "base"), user: "u")
        try device.exec("INSERT INTO notes(id) VALUES ('gone')")
        try device.exec("DELETE FROM notes WHERE id = 'gone'")
        let t = try twins(box, device, "nothing")
        try expectSameExport(t)
        #expect(try FileManager.default.contentsOfDirectory(atPath: t.sets.outbox.path).isEmpty)
    }

    /// Stopping during export leaves the changes pending, no file and nothing attached.
    @Test func stoppedExport_leavesTheChangesPending() throws {
        let box = try Sandbox("export-sets-stop")
        let device = try box.replica("D", source: try source(box, "base"), user: "u")
        device.db.setExportMinimumRows = 1
        try device.exec("INSERT INTO notes(id) VALUES ('kept')")
        #expect(throws: SyncEngineError.self) { try device.db.exportChanges(to: device.outbox, shouldStop: { true }) }
        #expect(try device.db.pendingChangeCount() == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: device.outbox.path).isEmpty)
        #expect(try device.value("SELECT count(*) FROM pragma_database_list WHERE name IN ('rtsync_out', 'rtsync_scratch')") == .integer(0))
        #expect(try device.export()?.rows == 1)
        #expect(device.db.setExportsWritten == 1)
    }

    /// The working tables live in a scratch database attached for the export and detached after it, written or
    /// not; one left attached (a detach that failed) is replaced, not reused.
    @Test func scratchDatabase_isDetachedAfterEachExport_andAStaleOneReplaced() throws {
        let box = try Sandbox("export-sets-scratch")
        let device = try box.replica("D", source: try source(box, "base"), user: "u")
        device.db.setExportMinimumRows = 1
        func attached() throws -> SQLValue? { try device.value("SELECT count(*) FROM pragma_database_list WHERE name IN ('rtsync_out', 'rtsync_scratch')") }
        try device.exec("INSERT INTO notes(id) VALUES ('a')")
        #expect(try device.export()?.rows == 1)
        #expect(try attached() == .integer(0))
        try device.exec("INSERT INTO notes(id) VALUES ('gone')")
        try device.exec("DELETE FROM notes WHERE id = 'gone'")
        #expect(try device.export() == nil)
        #expect(try attached() == .integer(0))
        try device.db.execute("ATTACH DATABASE '' AS rtsync_scratch")
        try device.db.execute("CREATE TABLE rtsync_scratch.rtsync_xk(stale)")
        try device.exec("INSERT INTO notes(id) VALUES ('b')")
        #expect(try device.export()?.rows == 1)
        #expect(device.db.setExportsWritten == 2)
        #expect(try attached() == .integer(0))
    }
}
