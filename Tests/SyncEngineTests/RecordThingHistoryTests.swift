import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// The Record Thing database at three points of its history, both ways with round trips. Only the 2025-04-16
/// database is here; the two older ones are made from it by undoing what the app's schema scripts added since
/// (public history of the app): on 2025-04-14 `created_at`/`updated_at` (things, evidence) and
/// `created_at`/`completed_at` (requests); on 2025-03-02 the product, company, brand and feed tables, requests'
/// `account_id`, `type` (NOT NULL, no default) and `data`, and `evidence_type` in place of the older
/// `product_type`/`document_type` columns of things and evidence (read here as a rename of `product_type`, with
/// `document_type` dropped and `evidence_type_name` added). The oldest bundled database had TEXT keys in requests
/// and a TEXT `evidence.request_id` (its `requests_old` and `evidence_old` tables still show them).
@Suite("Record Thing history: three schema versions both ways", .enabled(if: FileManager.default.fileExists(atPath: recordThingURL.path),
                                         "the Record Thing database is not at ../shared/fixtures/record-thing/ (it is only on the development machine)"))
struct RecordThingHistoryTests {
    static let account = RecordThingTests.account
    /// 0: 2025-02-11, 1: 2025-03-28, 2: 2025-04-16.
    static let versions = [0, 1, 2]
    static let names = ["2025-02-11", "2025-03-28", "2025-04-16"]

    /// SQL that takes the 2025-04-16 database back to 2025-03-28.
    static let to0328 = """
        ALTER TABLE things DROP COLUMN created_at; ALTER TABLE things DROP COLUMN updated_at;
        ALTER TABLE requests DROP COLUMN created_at; ALTER TABLE requests DROP COLUMN completed_at;
        ALTER TABLE evidence DROP COLUMN created_at; ALTER TABLE evidence DROP COLUMN updated_at;
        """
    /// SQL that takes the 2025-03-28 database back to 2025-02-11.
    static let to0211 = """
        DROP TABLE product; DROP TABLE company; DROP TABLE brand; DROP TABLE feed;
        CREATE TABLE things_v0 (
            id TEXT NOT NULL DEFAULT '', account_id TEXT NOT NULL DEFAULT '', upc TEXT NULL DEFAULT NULL, asin TEXT NULL DEFAULT NULL,
            elid TEXT NULL DEFAULT NULL, brand TEXT NULL DEFAULT NULL, model TEXT NULL DEFAULT NULL, color TEXT NULL DEFAULT NULL,
            tags TEXT NULL DEFAULT NULL, category TEXT NULL DEFAULT NULL, product_type INTEGER NULL DEFAULT NULL,
            document_type INTEGER NULL DEFAULT NULL, title TEXT NULL DEFAULT NULL, description TEXT NULL DEFAULT NULL,
            PRIMARY KEY (account_id, id));
        INSERT INTO things_v0 SELECT id, account_id, upc, asin, elid, brand, model, color, tags, category, evidence_type, NULL, title, description FROM things;
        DROP TABLE things; ALTER TABLE things_v0 RENAME TO things;
        CREATE TABLE requests_v0 (id TEXT NOT NULL PRIMARY KEY, url TEXT UNIQUE NOT NULL, universe_id INTEGER, status TEXT NOT NULL,
            delivery_method TEXT, delivery_target TEXT);
        INSERT INTO requests_v0 SELECT CAST(id AS TEXT), url, universe_id, status, delivery_method, delivery_target FROM requests;
        DROP TABLE requests; ALTER TABLE requests_v0 RENAME TO requests;
        CREATE TABLE evidence_v0 (id TEXT PRIMARY KEY, thing_account_id TEXT, thing_id TEXT, request_id TEXT, product_type INTEGER,
            document_type INTEGER, data TEXT, local_file TEXT);
        INSERT INTO evidence_v0 SELECT id, thing_account_id, thing_id, CAST(request_id AS TEXT), evidence_type, NULL, data, local_file FROM evidence;
        DROP TABLE evidence; ALTER TABLE evidence_v0 RENAME TO evidence;
        """

    /// The database of version `v`, made in `box`.
    static func database(_ v: Int, in box: Sandbox) throws -> URL {
        let url = box.path("record-thing-\(names[v]).sqlite")
        if FileManager.default.fileExists(atPath: url.path) { return url }
        try FileManager.default.copyItem(at: recordThingURL, to: url)
        let db = try Connection(path: url.path)
        if v < 2 { try db.execute(to0328) }
        if v < 1 { try db.execute(to0211) }
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return url
    }

    /// What every version declares: the rename, and (from 2025-03-02) a value for requests' NOT NULL `type`.
    static func policies(_ v: Int) -> [String: TablePolicy] {
        var p = ["things": TablePolicy(renamed: ["product_type": "evidence_type"]), "evidence": TablePolicy(renamed: ["product_type": "evidence_type"])]
        if v > 0 { p["requests"] = TablePolicy(syncDefaults: ["type": "unknown"]) }
        return p
    }

    /// The app's own edits at version `v`, each through the SQL that version's app would run.
    static func edit(_ r: Replica, version v: Int, tag: String) throws {
        let thing = "rt-\(tag)"
        switch v {
        case 0:
            try r.exec("INSERT INTO things VALUES (?, ?, NULL, NULL, NULL, 'Omega', 'Speedmaster', 'black', NULL, 'watch', 85, NULL, ?, NULL)",
                       [.text(thing), .text(account), .text("thing \(tag)")])
            try r.exec("INSERT INTO requests VALUES (?, ?, NULL, 'active', 'email', 'a@example.com')", [.text("7\(tag.count)"), .text("https://example.com/\(tag)")])
            try r.exec("INSERT INTO evidence VALUES (?, ?, ?, '1', 85, NULL, '{}', '/images/\(tag).jpg')", [.text("ev-\(tag)"), .text(account), .text(thing)])
        case 1:
            try r.exec("INSERT INTO things VALUES (?, ?, NULL, NULL, NULL, 'Omega', 'Speedmaster', 'black', NULL, 'watch', 85, 'Watch', ?, NULL)",
                       [.text(thing), .text(account), .text("thing \(tag)")])
            try r.exec("INSERT INTO requests(id, account_id, url, type, status) VALUES (?, ?, ?, 'Appraisal', 'active')", [.integer(Int64(70 + tag.count)), .text(account), .text("https://example.com/\(tag)")])
            try r.exec("INSERT INTO evidence VALUES (?, ?, ?, 1, 85, '{}', '/images/\(tag).jpg')", [.text("ev-\(tag)"), .text(account), .text(thing)])
        default:
            try r.exec("INSERT INTO things VALUES (?, ?, NULL, NULL, NULL, 'Omega', 'Speedmaster', 'black', NULL, 'watch', 85, 'Watch', ?, NULL, 1744800000.5, NULL)",
                       [.text(thing), .text(account), .text("thing \(tag)")])
            try r.exec("INSERT INTO requests(id, account_id, url, type, status, created_at) VALUES (?, ?, ?, 'Appraisal', 'active', 1744800000.5)", [.integer(Int64(70 + tag.count)), .text(account), .text("https://example.com/\(tag)")])
            try r.exec("INSERT INTO evidence VALUES (?, ?, ?, 1, 1744800000.5, NULL, 85, '{}', '/images/\(tag).jpg')", [.text("ev-\(tag)"), .text(account), .text(thing)])
        }
        // Edits of rows every version has: a thing's title and product/evidence type, a request's status.
        try r.exec("UPDATE things SET title = ?, \(v == 0 ? "product_type" : "evidence_type") = ? WHERE id = '2vlzWomZB0PF7U72ZPXYVJqssj3'", [.text("Submariner (\(tag))"), .integer(Int64(100 + tag.count))])
        try r.exec("UPDATE requests SET status = ? WHERE id = \(v == 0 ? "'3'" : "3")", [.text("reviewed by \(tag)")])
    }

    static let submariner = "2vlzWomZB0PF7U72ZPXYVJqssj3"

    /// Every diff applied or skipped (none refused or deferred); a line per merge for the failure message.
    static func exchange(_ replicas: [Replica], seed: UInt64, label: String) throws {
        var diffs: [URL] = []
        var rng = SeededGenerator(seed: seed)
        try exchangeUntilQuiet(replicas, diffs: &diffs, rng: &rng, label: label, onApply: { r, _, report in
            #expect(report.status == .applied || report.status == .skipped, "\(label) \(r.name): \(report.status) \(report.reason ?? "")")
        })
    }

    @Test(arguments: versions.flatMap { a in versions.filter { $0 > a }.map { (a, $0) } })
    func olderAndNewerVersion_bothWays_roundTrip_everyValueLands(older vo: Int, newer vn: Int) throws {
        let box = try Sandbox("rt-history\(vo)\(vn)")
        let old = try box.replica("old", source: try Self.database(vo, in: box), policies: Self.policies(vo))
        let new = try box.replica("new", source: try Self.database(vn, in: box), policies: Self.policies(vn))
        let label = "\(Self.names[vo]) <-> \(Self.names[vn])"
        try Self.edit(new, version: vn, tag: "new")
        // Values only the newer version has, on a row the older device edits later.
        try new.exec("UPDATE things SET evidence_type_name = 'Dive watch'\(vn == 2 ? ", updated_at = 1744900000.25" : "") WHERE id = ?", [.text(Self.submariner)])
        tick()
        try Self.edit(old, version: vo, tag: "oldest")
        try Self.exchange([old, new], seed: UInt64(vo * 10 + vn), label: label)
        // A round trip through the older device: it edits the row again; the newer values stay.
        tick()
        try old.exec("UPDATE things SET description = 'serviced' WHERE id = ?", [.text(Self.submariner)])
        try Self.exchange([old, new], seed: UInt64(vo * 10 + vn + 100), label: label + " round trip")

        for r in [old, new] {
            #expect(try r.db.heldRows().isEmpty, "\(label) \(r.name)")
            #expect(try r.rows("PRAGMA foreign_key_check").isEmpty, "\(label) \(r.name)")
        }
        for table in ["things", "requests", "evidence"] {
            let columns = try SchemaVersionMatrixTests.commonColumns(old, new, table)
            #expect(try SchemaVersionMatrixTests.commonRows(old, table, columns) == SchemaVersionMatrixTests.commonRows(new, table, columns), "\(label) \(table) (\(columns))")
        }
        // The renamed column holds the same on both (the older device's later edit won).
        let oldType = vo == 0 ? "product_type" : "evidence_type"
        for (t, key) in [("things", "id"), ("evidence", "id")] {
            #expect(try old.rows("SELECT \(key), \(oldType) FROM \(t) ORDER BY 1") == new.rows("SELECT \(key), evidence_type FROM \(t) ORDER BY 1"), "\(label) \(t)")
        }
        #expect(try new.rows("SELECT title, evidence_type, evidence_type_name, description FROM things WHERE id = ?", [.text(Self.submariner)])
                == [[.text("Submariner (oldest)"), .integer(106), .text("Dive watch"), .text("serviced")]], "\(label)")
        if vn == 2 { #expect(try new.value("SELECT updated_at FROM things WHERE id = ?", [.text(Self.submariner)]) == .real(1744900000.25), "\(label)") }
        // Every device's new rows landed on the other (requests by key as SQLite compares it across key types).
        for r in [old, new] {
            #expect(try r.rows("SELECT id FROM things WHERE id IN ('rt-new', 'rt-oldest') ORDER BY id") == [[.text("rt-new")], [.text("rt-oldest")]], "\(label) \(r.name)")
            #expect(try r.rows("SELECT CAST(id AS TEXT) FROM requests WHERE url IN ('https://example.com/new', 'https://example.com/oldest') ORDER BY 1").count == 2, "\(label) \(r.name)")
            #expect(try r.rows("SELECT id FROM evidence WHERE id IN ('ev-new', 'ev-oldest') ORDER BY id").count == 2, "\(label) \(r.name)")
        }
        // Both apps keep working with their own SQL.
        try Self.edit(old, version: vo, tag: "oldest2")
        try Self.edit(new, version: vn, tag: "new22")
        try Self.exchange([old, new], seed: UInt64(vo * 10 + vn + 200), label: label + " after")
        #expect(try old.value("SELECT count(*) FROM things WHERE id IN ('rt-new22', 'rt-oldest2')") == .integer(2))
        #expect(try new.value("SELECT count(*) FROM things WHERE id IN ('rt-new22', 'rt-oldest2')") == .integer(2))
    }

    /// The older device upgrades (2025-03-28 to 2025-04-16, the app's ADD COLUMNs): the newer device's values it
    /// kept aside are in the new columns, and it sends nothing for them.
    @Test func olderDeviceUpgrades_keptValuesMoveIn() throws {
        let box = try Sandbox("rt-history-upgrade")
        let old = try box.replica("old", source: try Self.database(1, in: box), policies: Self.policies(1))
        let new = try box.replica("new", source: try Self.database(2, in: box), policies: Self.policies(2))
        try new.exec("UPDATE things SET updated_at = 1744900000.25, title = 'Sub' WHERE id = ?", [.text(Self.submariner)])
        try new.exec("UPDATE requests SET completed_at = 1744900001.5 WHERE id = 2")
        #expect(old.apply(try new.exportFile()).status == .applied)
        try old.db.migrate(sql: """
            ALTER TABLE things ADD COLUMN created_at FLOAT NULL DEFAULT NULL; ALTER TABLE things ADD COLUMN updated_at FLOAT NULL DEFAULT NULL;
            ALTER TABLE requests ADD COLUMN created_at FLOAT NULL DEFAULT NULL; ALTER TABLE requests ADD COLUMN completed_at FLOAT NULL DEFAULT NULL;
            ALTER TABLE evidence ADD COLUMN created_at FLOAT NULL DEFAULT NULL; ALTER TABLE evidence ADD COLUMN updated_at FLOAT NULL DEFAULT NULL
            """)
        #expect(try old.export() == nil)
        #expect(try old.rows("SELECT title, updated_at FROM things WHERE id = ?", [.text(Self.submariner)]) == [[.text("Sub"), .real(1744900000.25)]])
        #expect(try old.value("SELECT completed_at FROM requests WHERE id = 2") == .real(1744900001.5))
        #expect(try old.db.asideValues(table: "things").isEmpty)
    }

    /// Without a declared value for requests' NOT NULL `type`, a request made by the oldest version is held back
    /// on the newest (visibly, with the rest of the diff applied) and placed once a value is declared.
    @Test func oldestRequest_withoutDeclaredType_heldVisibly_thenPlaced() throws {
        let box = try Sandbox("rt-history-held")
        let old = try box.replica("old", source: try Self.database(0, in: box), policies: Self.policies(0))
        let new = try box.replica("new", source: try Self.database(2, in: box), policies: ["things": TablePolicy(renamed: ["product_type": "evidence_type"])])
        try Self.edit(old, version: 0, tag: "oldest")
        let r = new.apply(try old.exportFile())
        #expect(r.status == .applied && r.held == 1, "\(r)")
        #expect(try new.db.heldRows().map(\.table) == ["requests"])
        #expect(try new.value("SELECT count(*) FROM things WHERE id = 'rt-oldest'") == .integer(1), "the rest of the diff applied")
        #expect(try new.value("SELECT status FROM requests WHERE id = 3") == .text("reviewed by oldest"), "an update of a request both have is no new row: it applies")
        try new.db.setPolicy(TablePolicy(syncDefaults: ["type": "unknown"]), for: "requests")
        #expect(try new.db.applyHeldRows()?.status == .applied)
        #expect(try new.rows("SELECT type, status FROM requests WHERE url = 'https://example.com/oldest'") == [[.text("unknown"), .text("active")]])
    }
}
