import CSQLite
import DiffFormat
import Foundation
@testable import RTSQLite
@testable import SyncEngine
import Testing

/// Apply writes carried tables whose rows are all new to a device with `INSERT … SELECT` from the attached diff
/// and leaves every other table to the per-row merge. Each test applies the same diff to two identical copies
/// of one device (`Twins`), one with the bulk writes turned off, and expects the same report and database:
/// rows, bookkeeping, conflict log, triggers.
@Suite("Applying new rows in bulk")
struct BulkApplyTests {
    /// A tracked device made from `sql`.
    func device(_ box: Sandbox, _ name: String, _ sql: String) throws -> Replica {
        let source = box.path("\(name)-source.sqlite")
        do { let c = try Connection(path: source.path); try c.execute(sql) }
        return try box.replica(name, source: source)
    }

    /// A diff writer for another device (site "other", user "u-other").
    func writer(_ box: Sandbox, id: KSUID = .generate(), folder: String = "in") throws -> DiffWriter {
        let dir = box.path(folder)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return try DiffWriter(directory: dir, id: id, kind: .changes, authorUser: "u-other", authorSite: "other", expectedRows: 4)
    }

    /// A clock of the other device `msAgo` milliseconds ago (negative: ahead).
    func clock(_ msAgo: Int64) -> Clock {
        Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds() - msAgo, counter: 0), site: "other")
    }

    static let notes = TableDefinition(name: "notes", columns: [
        ColumnDefinition(name: "id", type: "TEXT", primaryKey: 1),
        ColumnDefinition(name: "body", type: "TEXT"),
        ColumnDefinition(name: "extra", type: "TEXT"),
    ])

    // MARK: What is written in bulk

    /// Keys of every kind (text with quotes and non-ASCII, negative integers, composite keys), REAL and NULL
    /// values: all new to the device, so all written in bulk, with the bookkeeping the per-row merge writes.
    /// A later diff of updates, deletes and new rows in the same tables is merged row by row.
    @Test func newRows_areWrittenInBulk_asThePerRowMergeWritesThem() throws {
        let box = try Sandbox("bulk-new")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try Twins(box, try box.replica("B", fixture: "record-thing-demo"))
        for i in 0..<300 { try a.exec("INSERT INTO translations VALUES (?, ?, ?, NULL)", [.text(i % 3 == 0 ? "it's" : "naïve ☃"), .text("key.\(i)"), .text("value \(i)")]) }
        for i in 0..<40 { try a.exec("INSERT INTO requests(id, url, type, status, created_at) VALUES (?, ?, 'image', 'new', ?)", [.integer(Int64(-i - 1)), .text("https://example.com/\(i)"), .real(Double(i) + 0.25)]) }
        for i in 0..<25 { try a.exec("INSERT INTO things(id, account_id, title, created_at) VALUES (?, 'acct', ?, 1.5e300)", [.text("thing-\(i)"), .text("Thing \(i)")]) }
        let first = try b.apply(try a.exportFile())
        #expect(first.bulk.status == .applied && first.bulk.inserted == 365, "\(first.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 365)
        #expect(b.perRow.db.bulkRowsWritten == 0)

        tick()
        try a.exec("UPDATE translations SET value = 'changed' WHERE key IN ('key.1', 'key.2')")
        try a.exec("DELETE FROM requests WHERE id = -3")
        for i in 300..<310 { try a.exec("INSERT INTO translations VALUES ('it''s', ?, 'late', 'ctx')", [.text("key.\(i)")]) }
        let second = try b.apply(try a.exportFile())
        #expect(second.bulk.status == .applied && second.bulk.inserted == 10 && second.bulk.updated == 2 && second.bulk.deleted == 1, "\(second.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 365)
        try expectSameData(a, b.bulk)
    }

    /// A table with any row that is not new here goes whole to the per-row merge: a key present without
    /// history, a key inserted and deleted here and not yet exported, a local edit not yet exported, a UNIQUE
    /// value another key holds here. A table of only new rows in the same diff is still written in bulk.
    @Test func tablesWithLocalHistory_areLeftToThePerRowMerge() throws {
        let box = try Sandbox("bulk-mixed")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let device = try box.replica("B", fixture: "record-thing-demo")
        let tid = try #require(device.value("SELECT tid FROM rtsync_tracked WHERE name = 'evidence'")?.int64)
        try device.exec("DROP TRIGGER rtsync_ins_\(tid)")
        try device.exec("INSERT INTO evidence(id, data) VALUES ('ev-untracked', 'from before tracking')")
        try device.db.track()
        try device.exec("INSERT INTO things(id, account_id, title) VALUES ('t-gone', 'acct', 'inserted then deleted here')")
        try device.exec("DELETE FROM things WHERE id = 't-gone'")
        try device.exec("INSERT INTO requests(id, url, type, status) VALUES (500, 'https://example.com/taken', 'image', 'new')")
        try device.exec("UPDATE accounts SET region = 'US'")
        tick()
        for i in 0..<100 { try a.exec("INSERT INTO translations VALUES ('mx', ?, 'new', NULL)", [.text("k\(i)")]) }
        try a.exec("INSERT INTO evidence(id, data) VALUES ('ev-untracked', 'from A'), ('ev-new', 'from A')")
        try a.exec("INSERT INTO things(id, account_id, title) VALUES ('t-gone', 'acct', 'from A'), ('t-new', 'acct', 'from A')")
        try a.exec("INSERT INTO requests(id, url, type, status) VALUES (501, 'https://example.com/taken', 'image', 'new')")
        for i in 0..<5 { try a.exec("INSERT INTO requests(id, url, type, status) VALUES (?, ?, 'image', 'new')", [.integer(Int64(600 + i)), .text("https://example.com/free\(i)")]) }
        try a.exec("INSERT INTO accounts(account_id, name, username, email) VALUES ('acct-new', 'New', 'new', 'new@example.com')")
        try a.exec("UPDATE accounts SET region = 'APAC' WHERE account_id = '2siEySuKO1wK4XiJHWQ0YxhLxd2'")
        let b = try Twins(box, device)
        let report = try b.apply(try a.exportFile())
        #expect(report.bulk.status == .applied, "\(report.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 100, "only translations is new throughout")
        #expect(try b.bulk.value("SELECT data FROM evidence WHERE id = 'ev-untracked'") == .text("from A"))
    }

    /// Rows whose columns carry different clocks (born in an earlier diff this device has not seen) need
    /// column clocks, which only the per-row merge writes: their table is merged row by row. (Bulk writes are
    /// tried only when the tables that may take them hold at least half the diff's rows.)
    @Test func rowsWithColumnClocks_sendTheirTableToThePerRowMerge() throws {
        let box = try Sandbox("bulk-clocks")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try Twins(box, try box.replica("B", fixture: "record-thing-demo"))
        for i in 0..<20 { try a.exec("INSERT INTO translations VALUES ('cc', ?, 'v1', NULL)", [.text("k\(i)")]) }
        let born = try a.exportFile()
        tick()
        try a.exec("UPDATE translations SET value = 'v2' WHERE lang = 'cc' AND key IN ('k1', 'k2', 'k3')")
        for i in 20..<30 { try a.exec("INSERT INTO translations VALUES ('cc', ?, 'v1', NULL)", [.text("k\(i)")]) }
        for i in 0..<30 { try a.exec("INSERT INTO requests(id, url, type, status) VALUES (?, ?, 'image', 'new')", [.integer(Int64(700 + i)), .text("https://example.com/cc\(i)")]) }
        let later = try a.exportFile()
        // The later diff first: k1-k3 are new here but carry a born clock older than their value's clock.
        let first = try b.apply(later)
        #expect(first.bulk.inserted == 43, "\(first.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 30)
        let second = try b.apply(born)
        #expect(second.bulk.status == .applied, "\(second.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 30)
        try expectSameData(a, b.bulk)
    }

    /// Owner-only tables: a table of rows all owned by the diff's author is written in bulk; one with a row
    /// of another owner goes to the per-row merge, which refuses that row.
    @Test func ownerOnlyTables_areWrittenInBulkOnlyWhenTheAuthorOwnsEveryRow() throws {
        let policies = ["logs": TablePolicy(.appendOnly), "routines": TablePolicy(.ownerOnly, ownerColumn: "owner_id")]
        let box = try Sandbox("bulk-owner")
        let a = try box.replica("A", fixture: "routines-logs", user: "userA", policies: policies)
        let b = try Twins(box, try box.replica("B", fixture: "routines-logs", user: "userB", policies: policies), policies: policies)
        for i in 0..<10 { try a.exec("INSERT INTO routines(id, owner_id, name) VALUES (?, 'userA', 'mine')", [.text("r\(i)")]) }
        for i in 0..<10 { try a.exec("INSERT INTO logs(id, routine_id, author_id, at) VALUES (?, ?, 'userA', '2026-01-01')", [.text("l\(i)"), .text("r\(i)")]) }
        let first = try b.apply(try a.exportFile())
        #expect(first.bulk.status == .applied && first.bulk.inserted == 20, "\(first.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 20)
        try a.exec("INSERT INTO routines(id, owner_id, name) VALUES ('r-mine', 'userA', 'mine'), ('r-theirs', 'userB', 'not mine')")
        let second = try b.apply(try a.exportFile())
        #expect(second.bulk.status == .applied && second.bulk.inserted == 1 && second.bulk.conflicts > 0, "\(second.bulk)")
        #expect(b.bulk.db.bulkRowsWritten == 20)
        #expect(try b.bulk.value("SELECT count(*) FROM routines WHERE id = 'r-theirs'") == .integer(0))
    }

    /// Keys sent with another storage class than the local column holds, NOCASE keys colliding with local rows
    /// and with each other, REAL and composite WITHOUT ROWID keys.
    @Test func keyAffinityAndCollation_asThePerRowMerge() throws {
        let box = try Sandbox("bulk-keys")
        let b = try Twins(box, try device(box, "B", """
            CREATE TABLE ci(k TEXT COLLATE NOCASE PRIMARY KEY, v TEXT);
            CREATE TABLE ip(id INTEGER PRIMARY KEY, v TEXT);
            CREATE TABLE rk(k REAL PRIMARY KEY, v TEXT);
            CREATE TABLE ck(a INTEGER, b TEXT COLLATE NOCASE, v TEXT, PRIMARY KEY (a, b)) WITHOUT ROWID;
            INSERT INTO ci VALUES ('abc', 'local'); INSERT INTO ip VALUES (5, 'local'); INSERT INTO rk VALUES (1.5, 'local');
            INSERT INTO ck VALUES (1, 'x', 'local');
            """))
        let w = try writer(box)
        func table(_ name: String, _ cols: [(String, String, Int)]) -> TableDefinition {
            TableDefinition(name: name, columns: cols.map { ColumnDefinition(name: $0.0, type: $0.1, primaryKey: $0.2) })
        }
        try w.addTable(table("ci", [("k", "TEXT", 1), ("v", "TEXT", 0)]))
        try w.addTable(table("ip", [("id", "INTEGER", 1), ("v", "TEXT", 0)]))
        try w.addTable(table("rk", [("k", "REAL", 1), ("v", "TEXT", 0)]))
        try w.addTable(table("ck", [("a", "INTEGER", 1), ("b", "TEXT", 2), ("v", "TEXT", 0)]))
        let c = clock(1_000)
        func up(_ t: String, _ v: [SQLValue]) throws { try w.append(RowChange(table: t, operation: .upsert, values: v, clock: c, born: c)) }
        try up("ci", [.text("ABC"), .text("remote")]); try up("ci", [.text("new"), .text("remote")]); try up("ci", [.text("NEW"), .text("remote2")])
        try up("ip", [.text("5"), .text("remote")]); try up("ip", [.text("6"), .text("remote")]); try up("ip", [.real(7.0), .text("remote")])
        try up("rk", [.integer(1), .text("remote")]); try up("rk", [.text("1.5"), .text("remote")]); try up("rk", [.real(2.25), .text("remote")])
        try up("ck", [.text("1"), .text("X"), .text("remote")]); try up("ck", [.integer(2), .text("y"), .text("remote")])
        try b.apply(try w.finish())
    }

    /// All new keys of mixed storage classes: keys in another storage class than the local column's are converted
    /// by the per-row merge, so tables holding them are not written in bulk; a later local edit is captured under
    /// the same key texts on both twins.
    @Test func mixedStorageClassKeys_allNew_asThePerRowMerge() throws {
        let box = try Sandbox("bulk-keys2")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE ip(id INTEGER PRIMARY KEY, v TEXT); CREATE TABLE tk(k TEXT PRIMARY KEY, v TEXT); CREATE TABLE nk(k PRIMARY KEY, v TEXT)"))
        let w = try writer(box)
        for t in ["ip", "tk", "nk"] {
            try w.addTable(TableDefinition(name: t, columns: [ColumnDefinition(name: t == "ip" ? "id" : "k", type: t == "ip" ? "INTEGER" : "TEXT", primaryKey: 1), ColumnDefinition(name: "v", type: "TEXT")]))
        }
        let c = clock(1_000)
        func up(_ t: String, _ v: [SQLValue]) throws { try w.append(RowChange(table: t, operation: .upsert, values: v, clock: c, born: c)) }
        try up("ip", [.text("5"), .text("a")]); try up("ip", [.integer(6), .text("b")]); try up("ip", [.real(8.0), .text("b")])
        try up("tk", [.integer(5), .text("a")]); try up("tk", [.text("5"), .text("b")]); try up("tk", [.real(1.0), .text("c")])
        try up("nk", [.integer(5), .text("a")]); try up("nk", [.text("5"), .text("b")]); try up("nk", [.blob([0, 1]), .text("c")])
        try b.apply(try w.finish())
        #expect(b.bulk.db.bulkRowsWritten == 0)
        #expect(try b.bulk.rows("SELECT k, typeof(k), v FROM tk ORDER BY k") == [[.text("1.0"), .text("text"), .text("c")], [.text("5"), .text("text"), .text("a")]])
        try b.bulk.exec("UPDATE tk SET v = 'z'"); try b.perRow.exec("UPDATE tk SET v = 'z'")
        #expect(try b.bulk.rows("SELECT pk FROM rtsync_changes ORDER BY seq") == b.perRow.rows("SELECT pk FROM rtsync_changes ORDER BY seq"))
    }

    // MARK: Order: what must be merged in file order

    /// The later version of a key (clock > born, only `body` changed) comes before its first version in the
    /// file: the table is merged row by row, in file order.
    @Test func sameKeyTwice_newestVersionFirst() throws {
        let box = try Sandbox("bulk-dupkey")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)"))
        let born = clock(10_000), later = clock(5_000)
        let w = try writer(box)
        try w.addTable(Self.notes)
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n7"), .text("B1"), .text("E1")], changedColumns: ["body"], clock: later, born: born))
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n7"), .text("B0"), .text("E0")], clock: born, born: born))
        #expect(try b.apply(try w.finish()).bulk.status == .applied)
    }

    /// The same key twice, both versions new-looking: the claim counts show it and the table is merged row by row.
    @Test func sameKeyTwice_bothNew() throws {
        let box = try Sandbox("bulk-dupkey2")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)"))
        let w = try writer(box)
        try w.addTable(Self.notes)
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n9"), .text("first"), .null], clock: clock(9_000), born: clock(9_000)))
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n9"), .text("second"), .null], clock: clock(8_000), born: clock(8_000)))
        #expect(try b.apply(try w.finish()).bulk.status == .applied)
        #expect(b.bulk.db.bulkRowsWritten == 0)
    }

    /// A delete of a key, then an upsert of a newer incarnation of it, in one diff.
    @Test func sameKeyTwice_deleteThenUpsert() throws {
        let box = try Sandbox("bulk-delup")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)"))
        let w = try writer(box)
        try w.addTable(Self.notes)
        try w.append(RowChange(table: "notes", operation: .delete, values: [.text("n8"), .null, .null], clock: clock(3_000), born: clock(9_000)))
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n8"), .text("v"), .null], clock: clock(6_000), born: clock(6_000)))
        try b.apply(try w.finish())
    }

    /// Twins of a device whose app trigger `name` counts items per list, and a diff from another device
    /// holding, in this order, item i1, list L, item i2.
    func listCountingTrigger(_ box: Sandbox, named name: String) throws -> (Twins, URL) {
        let schema = "CREATE TABLE lists(id TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 0); CREATE TABLE items(id TEXT PRIMARY KEY, list_id TEXT)"
        let a = try device(box, "A", schema)
        let device = try device(box, "B", schema)
        try device.exec("CREATE TRIGGER \(name) AFTER INSERT ON items BEGIN UPDATE lists SET n = n + 1 WHERE id = NEW.list_id; END")
        let b = try Twins(box, device)
        try a.exec("INSERT INTO items VALUES ('i1', 'L')")
        try a.exec("INSERT INTO lists(id) VALUES ('L')")
        try a.exec("INSERT INTO items VALUES ('i2', 'L')")
        return (b, try a.exportFile())
    }

    /// An app trigger on the receiving device counts items per list, so it sees the order rows arrive in:
    /// a database with triggers of its own is merged row by row, in file order.
    @Test func appTriggers_seeRowsInFileOrder() throws {
        let box = try Sandbox("bulk-trigger")
        let (b, file) = try listCountingTrigger(box, named: "app_count")
        #expect(try b.apply(file).bulk.status == .applied)
        #expect(try b.bulk.value("SELECT n FROM lists") == .integer(1))
        #expect(b.bulk.db.bulkRowsWritten == 0)
    }

    // MARK: Bad input

    /// Twins of a fixture device, and a diff from another device of `count` new translations in `lang`.
    func translationsDiff(_ box: Sandbox, lang: String, count: Int) throws -> (Twins, URL) {
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try Twins(box, try box.replica("B", fixture: "record-thing-demo"))
        for i in 0..<count { try a.exec("INSERT INTO translations VALUES (?, ?, 'v', NULL)", [.text(lang), .text("k\(i)")]) }
        return (b, try a.exportFile())
    }

    /// A carried table with a generated column (an expression the file would have SQLite evaluate, which
    /// `PRAGMA table_info` does not list) is refused by the reader, before any write, by both merges.
    @Test func diffWithAGeneratedColumn_isRejected() throws {
        let box = try Sandbox("bulk-hidden")
        let (b, file) = try translationsDiff(box, lang: "gg", count: 20)
        do { try Connection(path: file.path).execute("ALTER TABLE translations ADD COLUMN extra AS (length(value) * 2)") }
        let before = try b.bulk.fullDump()
        let report = try b.apply(file)
        #expect(report.bulk.status == .rejected && report.bulk.reason?.contains("carried table is declared as") == true, "\(report.bulk)")
        #expect(try b.bulk.fullDump() == before)
        #expect(b.bulk.db.bulkRowsWritten == 0)
    }

    /// A damaged row found after the bulk writes (here by the digest) rolls them back with everything else.
    @Test func digestMismatch_rollsBackTheBulkWrites() throws {
        let box = try Sandbox("bulk-digest")
        let (b, file) = try translationsDiff(box, lang: "dd", count: 50)
        do { try Connection(path: file.path).execute("UPDATE translations SET value = 'w' WHERE key = 'k49'") }
        let before = try b.bulk.fullDump()
        let report = try b.apply(file)
        #expect(report.bulk.status == .rejected && report.bulk.reason?.contains("digest") == true, "\(report.bulk)")
        let after = try b.bulk.fullDump()
        #expect(after == before, "database changed: \(firstDifference(before, after) ?? "")")
    }

    /// A damaged overflow page (which opening the diff does not read, but the whole-file check does): apply
    /// runs that check with the row checks (on the check thread when rows are written in bulk), yet rejects
    /// the file for the same reason as a reader that checks the whole file before anything else.
    @Test func damagedOverflowPage_isRejectedForTheSameReasonAsByAnUpfrontReader() throws {
        let box = try Sandbox("bulk-corrupt")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try Twins(box, try box.replica("B", fixture: "record-thing-demo"))
        for i in 0..<2000 { try a.exec("INSERT INTO translations VALUES ('pp', ?, ?, NULL)", [.text("k\(i)"), .text(String(repeating: "v", count: 40))]) }
        try a.exec("INSERT INTO translations VALUES ('pp', 'long', ?, NULL)", [.text(String(repeating: "w", count: 20_000))])
        let file = try a.exportFile()
        let overflow: Int64
        do {
            let raw = try Connection(path: file.path, mode: .readOnly)
            guard let page = try? raw.scalar("SELECT pageno FROM dbstat WHERE pagetype = 'overflow' ORDER BY pageno LIMIT 1")?.int64 else {
                print("skipped: this SQLite has no dbstat table to find an overflow page"); return
            }
            overflow = page
        }
        var bytes = [UInt8](try Data(contentsOf: file))
        let pageSize = Int(bytes[16]) << 8 | Int(bytes[17])
        let at = Int(overflow - 1) * pageSize
        bytes.replaceSubrange(at..<(at + 4), with: [0x00, 0xff, 0xff, 0xff])  // the next overflow page: far past the end
        try Data(bytes).write(to: file)
        let expected: String
        do { _ = try DiffReader(url: file); Issue.record("the damaged file was accepted"); return } catch let e as DiffFormatError { expected = e.reason }
        let report = try b.apply(file)
        #expect(report.bulk.status == .rejected && report.bulk.reason == expected, "\(report.bulk.reason ?? "") vs \(expected)")
    }

    /// Two problems: row 1 breaks a local NOT NULL constraint, row 2 carries a clock two days ahead. The diff
    /// is rejected for the first in file order, as by the per-row merge, not for what the background check saw.
    @Test func rejectedDiff_namesTheFirstProblemInFileOrder() throws {
        let box = try Sandbox("bulk-reason")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT NOT NULL, extra TEXT)"))
        let w = try writer(box)
        try w.addTable(Self.notes)
        let now = clock(0), future = clock(-2 * 86_400_000)
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n1"), .null, .null], clock: now, born: now))
        try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n2"), .text("x"), .null], clock: future, born: future))
        let report = try b.apply(try w.finish())
        #expect(report.bulk.status == .rejected && report.bulk.reason?.contains("NOT NULL") == true, "\(report.bulk)")
    }

    /// The diff file is replaced (renamed over) the moment the bulk path attaches it. Apply reads a private
    /// copy made before the reader opened it, so the rows written are those checked, not the replacement's
    /// (whose born clock is ten days ahead and whose rows the digest never covered).
    @Test func fileReplacedWhileApplying_theCheckedBytesAreWritten() throws {
        let box = try Sandbox("bulk-toctou")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)"))
        let id = KSUID.generate()
        let legit = try writer(box, id: id, folder: "legit")
        try legit.addTable(Self.notes)
        try legit.append(RowChange(table: "notes", operation: .upsert, values: [.text("n1"), .text("legit"), .null], clock: clock(0), born: clock(0)))
        let legitFile = try legit.finish()
        let evil = try writer(box, id: id, folder: "evil")
        try evil.addTable(Self.notes)
        let far = clock(-10 * 86_400_000)
        try evil.append(RowChange(table: "notes", operation: .upsert, values: [.text("n1"), .text("EVIL"), .null], clock: far, born: far))
        let evilFile = try evil.finish()

        let folder = b.bulk.dir.appendingPathComponent("incoming")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let target = folder.appendingPathComponent(legitFile.lastPathComponent)
        let replacement = folder.appendingPathComponent("replacement.tmp")
        try FileManager.default.copyItem(at: legitFile, to: target)
        try FileManager.default.copyItem(at: evilFile, to: replacement)
        SwapOnAttach.set(from: replacement.path, to: target.path)
        sqlite3_trace_v2(b.bulk.db.db.handle, UInt32(SQLITE_TRACE_STMT), swapOnAttachTrace, nil)
        let report = b.bulk.apply(target)
        sqlite3_trace_v2(b.bulk.db.db.handle, 0, nil, nil)
        let swapped = SwapOnAttach.paths == nil
        SwapOnAttach.clear()
        #expect(swapped, "the bulk path did not attach the diff")
        #expect(report.status == .applied, "\(report)")
        #expect(try b.bulk.value("SELECT body FROM notes WHERE id = 'n1'") == .text("legit"))
        let limit = (HLC.wallMilliseconds() + 86_400_000) << 16
        #expect((try b.bulk.value("SELECT max(born_hlc) FROM rtsync_rows")?.int64 ?? 0) <= limit)
    }

    // MARK: Second review

    /// A diff of new `notes` rows with these keys.
    func newNotesDiff(_ box: Sandbox, keys: [String]) throws -> URL {
        let w = try writer(box)
        try w.addTable(Self.notes)
        let c = clock(1_000)
        for k in keys { try w.append(RowChange(table: "notes", operation: .upsert, values: [.text(k), .text("remote"), .null], clock: c, born: c)) }
        return try w.finish()
    }

    /// A diff whose rtsync_rows lacks a column the row scan reads (renamed): the reader's checks at open do
    /// not read it, so the per-row merge fails when it prepares its scan. The bulk path's 64-row probe
    /// (outside the do/catch that falls back to the per-row merge) fails first, with another message.
    @Test func rowsTableMissingAColumn_sameReasonAsPerRow() throws {
        let box = try Sandbox("rev2-missing-col")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)"))
        let file = try newNotesDiff(box, keys: (0..<10).map { "n\($0)" })
        do { try Connection(path: file.path).execute("ALTER TABLE rtsync_rows RENAME COLUMN born_site TO bs") }
        let r = try b.apply(file)
        #expect(r.bulk.status == .rejected && r.perRow.status == .rejected)
    }

    /// A local key inserted and deleted here, not yet exported, is 'café' (NFC); the diff brings the new key
    /// 'café' spelled NFD (a different key to SQLite). The per-row merge looks pending changes up in a Swift
    /// dictionary (canonical equivalence: the two keys are equal there); the bulk path asks SQLite (bytes).
    @Test func pendingLocalDelete_ofACanonicallyEquivalentKey() throws {
        let box = try Sandbox("rev2-nfd")
        let device = try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        try device.exec("INSERT INTO notes VALUES ('caf\u{E9}', 'local', NULL)")
        try device.exec("DELETE FROM notes")
        let b = try Twins(box, device)
        let file = try newNotesDiff(box, keys: ["cafe\u{301}", "n1", "n2"])
        try b.apply(file)
        let q = "SELECT hex(id) FROM notes ORDER BY 1"
        let x = try b.bulk.rows(q).map { $0.map(\.sqlLiteral) }, y = try b.perRow.rows(q).map { $0.map(\.sqlLiteral) }
        #expect(x == y, "bulk: \(x); per row: \(y)")
        #expect(try b.bulk.value("SELECT count(*) FROM rtsync_conflicts") == b.perRow.value("SELECT count(*) FROM rtsync_conflicts"))
    }

    /// A row 'café' (NFC) is shared read-only with the diff's author; the diff brings the new key 'café'
    /// spelled NFD, another key to SQLite (and to the bulk path's SQL). The per-row merge keeps read-only shares
    /// in a Set<String>, where Swift's canonical equivalence makes the two keys equal, and refuses the row.
    @Test func readOnlyShare_ofACanonicallyEquivalentKey() throws {
        let box = try Sandbox("rev2-nfd-share")
        let device = try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        try device.exec("INSERT INTO notes VALUES ('caf\u{E9}', 'local', NULL)")
        _ = try device.export()
        _ = try device.db.writeShare(table: "notes", filter: nil, to: "u-other", permission: .readOnly, directory: box.path("shares"))
        let b = try Twins(box, device)
        let file = try newNotesDiff(box, keys: ["cafe\u{301}", "n1", "n2"])
        try b.apply(file)
        let q = "SELECT hex(id) FROM notes ORDER BY 1"
        let x = try b.bulk.rows(q).map { $0.map(\.sqlLiteral) }, y = try b.perRow.rows(q).map { $0.map(\.sqlLiteral) }
        #expect(x == y, "bulk: \(x); per row: \(y)")
    }

    /// An app trigger whose name starts with rtsync_ (LIKE is case-insensitive too: RTSync_…) is taken for one
    /// of rtsync's own, so the bulk path runs and the trigger sees rows in another order than the file's.
    @Test func appTriggerNamedRtsyncSomething_seesRowsInFileOrder() throws {
        let box = try Sandbox("rev2-trigger")
        let (b, file) = try listCountingTrigger(box, named: "RTSync_count")
        try b.apply(file)
        #expect(try b.bulk.value("SELECT n FROM lists") == b.perRow.value("SELECT n FROM lists"))
        #expect(b.bulk.db.bulkRowsWritten == 0)
    }

    /// No rtsync-apply-* folder is left in the temp directory by any exit path.
    @Test func privateCopies_areRemovedOnEveryPath() throws {
        let tmp = FileManager.default.temporaryDirectory, fm = FileManager.default
        /// Folders holding a copy of one of `names`: this process's (named with its pid), and of this test's diffs
        /// (other tests of the process apply diffs meanwhile, and their folders come and go).
        func leftovers(of names: Set<String>) -> Set<String> {
            let folders = ((try? fm.contentsOfDirectory(atPath: tmp.path)) ?? []).filter { $0.hasPrefix("rtsync-apply-\(getpid())-") }
            return Set(folders.filter { folder in
                ((try? fm.contentsOfDirectory(atPath: tmp.appendingPathComponent(folder).path)) ?? []).contains(where: names.contains)
            })
        }
        let box = try Sandbox("rev2-leaks")
        let device = try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        device.db.bulkApplyMinimumBytes = 0
        let file = try newNotesDiff(box, keys: (0..<10).map { "n\($0)" })
        let keep = box.path("keep.sqlite")
        try FileManager.default.copyItem(at: file, to: keep)
        #expect(device.db.apply(diff: file).status == .applied)
        #expect(device.db.apply(diff: file).status == .skipped)            // already applied
        try device.exec("INSERT INTO notes VALUES ('mine', 'x', NULL)")
        let own = try device.exportFile()
        #expect(device.db.apply(diff: own).status == .skipped)             // own diff
        let bad = try newNotesDiff(box, keys: ["z1", "z2"])
        do { try Connection(path: bad.path).execute("UPDATE notes SET body = 'tampered'") }
        #expect(device.db.apply(diff: bad, quarantine: box.path("q")).status == .rejected)   // digest
        // A symlink to a diff: no private copy, merged row by row.
        let other = try newNotesDiff(box, keys: ["s1"])
        let linkDir = box.path("links")
        try FileManager.default.createDirectory(at: linkDir, withIntermediateDirectories: true)
        let link = linkDir.appendingPathComponent(other.lastPathComponent)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: other)
        let r = device.db.apply(diff: link)
        #expect(r.status == .applied, "\(r)")
        let left = leftovers(of: Set([file, own, bad, other].map(\.lastPathComponent)))
        #expect(left.isEmpty, "\(left)")
    }

    /// quick_check does not compare an index with its table. A diff carries a partial index on rtsync_rows
    /// (renamed sqlite_autoindex_…, which the reader and the attach check let through) whose b-tree is really
    /// that of an index on a carried table ("decoy") holding forged (tid, op, rid, hlc, born, …) values: born
    /// clocks ten days ahead. The reader scans rtsync_rows itself (genuine, checked rows); the bulk claim reads
    /// the index and writes the forged born clocks.
    @Test func forgedIndexOnRowsTable_isNotReadByTheBulkWrites() throws {
        let box = try Sandbox("rev2-index")
        let b = try Twins(box, try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)"))
        let decoy = TableDefinition(name: "decoy", columns: [
            ColumnDefinition(name: "k", type: "TEXT", primaryKey: 1),
            ColumnDefinition(name: "tid", type: ""), ColumnDefinition(name: "op", type: ""), ColumnDefinition(name: "rid", type: ""),
            ColumnDefinition(name: "hlc", type: ""), ColumnDefinition(name: "born", type: ""),
            ColumnDefinition(name: "site", type: ""), ColumnDefinition(name: "born_site", type: ""),
        ])
        let far = clock(-10 * 86_400_000).hlc.rawValue
        func write() throws -> URL {
            let w = try writer(box)
            try w.addTable(Self.notes)
            try w.addTable(decoy)
            let c = clock(1_000)
            let n = 20
            for i in 1...n { try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n\(i)"), .text("remote"), .null], clock: c, born: c)) }
            for i in 1...n {
                try w.append(RowChange(table: "decoy", operation: .upsert, values: [.text("d\(i)"), .integer(1), .text("upsert"), .integer(Int64(i)), .integer(far), .integer(far), .null, .null], clock: c, born: c))
            }
            return try w.finish()
        }
        let file = try write()
        do {
            let x = try Connection(path: file.path)
            let cols = "(tid, op, rid, hlc, born, site, born_site) WHERE tid = 1"
            try x.execute("CREATE INDEX ixr ON rtsync_rows\(cols); CREATE INDEX ixd ON decoy\(cols)")
            let r = try #require(try x.scalar("SELECT rootpage FROM sqlite_schema WHERE name = 'ixr'")?.int64)
            let d = try #require(try x.scalar("SELECT rootpage FROM sqlite_schema WHERE name = 'ixd'")?.int64)
            try x.execute("PRAGMA writable_schema = ON")
            try x.execute("UPDATE sqlite_schema SET rootpage = \(d), name = 'sqlite_autoindex_rtsync_rows_1', sql = 'CREATE INDEX sqlite_autoindex_rtsync_rows_1 ON rtsync_rows\(cols)' WHERE name = 'ixr'")
            try x.execute("UPDATE sqlite_schema SET rootpage = \(r), name = 'sqlite_autoindex_decoy_1', sql = 'CREATE INDEX sqlite_autoindex_decoy_1 ON decoy\(cols)' WHERE name = 'ixd'")
            try x.execute("PRAGMA writable_schema = OFF")
        }
        _ = try DiffReader(url: file)   // the file passes every check of an upfront reader
        let r = try b.apply(file)
        #expect(r.bulk.status == .applied, "\(r.bulk)")
        let limit = (HLC.wallMilliseconds() + 86_400_000) << 16
        let maxBorn = try b.bulk.value("SELECT max(born_hlc) FROM rtsync_rows")?.int64 ?? 0
        #expect(maxBorn <= limit, "born clock \(maxBorn) written, limit \(limit); bulk rows \(b.bulk.db.bulkRowsWritten)")
    }

    /// Two keys that differ only in Unicode normalization are two rows to SQLite: export carries both (its
    /// coalescing once keyed rows by Swift String equality, which took them for one).
    @Test func keysDifferingOnlyInNormalization_areExportedAsTwoRows() throws {
        let box = try Sandbox("nfc-nfd-export")
        let a = try device(box, "A", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        try a.exec("INSERT INTO notes VALUES ('caf\u{E9}', 'nfc', NULL), ('cafe\u{301}', 'nfd', NULL)")
        let file = try a.exportFile()
        #expect(try DiffReader(url: file).counts["notes"]?.upserts == 2)
        let b = try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        #expect(b.apply(file).inserted == 2)
        try expectSameData(a, b)
    }

    // MARK: Threads

    /// Many applies at once from Swift tasks: each blocks its thread until its own check thread is done.
    @Test func manyConcurrentAppliesFromTasks_finish() async throws {
        let box = try Sandbox("bulk-tasks")
        let a = try device(box, "A", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        for i in 0..<200 { try a.exec("INSERT INTO notes VALUES (?, 'x', NULL)", [.text("n\(i)")]) }
        let file = try a.exportFile()
        let source = try device(box, "B", "CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT, extra TEXT)")
        var pairs: [(Replica, URL)] = []
        for i in 0..<16 {
            let d = try box.replica("B\(i)", source: source.dbURL)
            d.db.bulkApplyMinimumBytes = 0
            let target = d.dir.appendingPathComponent(file.lastPathComponent)
            try FileManager.default.copyItem(at: file, to: target)
            pairs.append((d, target))
        }
        let statuses = await withTaskGroup(of: ApplyStatus.self) { group in
            for (d, f) in pairs { group.addTask { d.apply(f).status } }
            var out: [ApplyStatus] = []
            for await s in group { out.append(s) }
            return out
        }
        #expect(statuses.count == 16 && statuses.allSatisfy { $0 == .applied })
        #expect(pairs.allSatisfy { $0.0.db.bulkRowsWritten == 200 })
    }
}

/// Where the trace callback of `fileReplacedWhileApplying_theCheckedBytesAreWritten` renames the replacement
/// file to, once, when the traced connection starts an ATTACH.
enum SwapOnAttach {
    nonisolated(unsafe) static var paths: (from: String, to: String)?
    static func set(from: String, to: String) { paths = (from, to) }
    static func clear() { paths = nil }
}

let swapOnAttachTrace: @convention(c) (UInt32, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32 = { _, _, _, x in
    guard let x, let p = SwapOnAttach.paths else { return 0 }
    if String(cString: x.assumingMemoryBound(to: CChar.self)).uppercased().hasPrefix("ATTACH") {
        rename(p.from, p.to)
        SwapOnAttach.paths = nil
    }
    return 0
}
