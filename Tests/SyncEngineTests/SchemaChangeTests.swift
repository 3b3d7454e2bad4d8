import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Schema changes made after `track` lose no captured change: added, renamed and dropped columns, new tables.
@Suite("Schema changes after tracking")
struct SchemaChangeTests {
    static func pair(_ box: Sandbox) throws -> (Replica, Replica) {
        let url = box.path("base.sqlite")
        let c = try Connection(path: url.path)
        try c.execute("CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, a TEXT, b TEXT, c TEXT); INSERT INTO notes VALUES ('n1', 'a1', 'b1', 'c1'), ('n2', 'a2', 'b2', 'c2');")
        return (try box.replica("A", source: url), try box.replica("B", source: url))
    }

    /// The app's own connection (SQLite's defaults), as the sqlite3 shell or an app writes.
    static func app(_ r: Replica, _ sql: String) throws {
        let c = try Connection(path: r.dbURL.path, mode: .readWrite)
        c.setBusyTimeout(milliseconds: 5_000)
        try c.execute(sql)
    }

    static func changes(_ file: URL) throws -> [RowChange] {
        var out: [RowChange] = []
        try DiffReader(url: file).forEachChange { out.append($0) }
        return out
    }

    @Test func columnAddedAfterTracking_anUpdateOfOnlyThatColumn_isExported() throws {
        let box = try Sandbox("schema-add")
        let (a, b) = try Self.pair(box)
        try Self.app(a, "ALTER TABLE notes ADD COLUMN tag TEXT; UPDATE notes SET tag = 'urgent' WHERE id = 'n1'")
        let file = try a.exportFile()
        let change = try #require(try Self.changes(file).first)
        #expect(change.changedColumns == ["tag"])
        try b.db.setPolicy(TablePolicy(addColumns: true), for: "notes")  // B's policy adds columns of newer versions
        #expect(b.apply(file).status == .applied)
        #expect(try b.rows("SELECT tag FROM notes ORDER BY id") == [[.text("urgent")], [.null]])
        // Later updates of the new column are captured by the triggers made at export.
        try Self.app(a, "UPDATE notes SET tag = 'later' WHERE id = 'n2'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.rows("SELECT tag FROM notes ORDER BY id") == [[.text("urgent")], [.text("later")]])
    }

    @Test func columnRenamedAfterTracking_changesBeforeAndAfter_areExportedUnderTheNewName() throws {
        let box = try Sandbox("schema-rename")
        let (a, _) = try Self.pair(box)
        try Self.app(a, "UPDATE notes SET b = 'before rename' WHERE id = 'n1'")
        try Self.app(a, "ALTER TABLE notes RENAME COLUMN b TO body")
        try Self.app(a, "UPDATE notes SET body = 'after rename' WHERE id = 'n2'")
        let changes = try Self.changes(try a.exportFile())
        #expect(changes.map(\.changedColumns) == [["body"], ["body"]])
        #expect(changes.map { $0.values[2] } == [.text("before rename"), .text("after rename")])
    }

    @Test func columnDroppedThroughMigrate_keepsEarlierChangesOfOtherColumns() throws {
        let box = try Sandbox("schema-drop")
        let (a, b) = try Self.pair(box)
        try Self.app(a, "UPDATE notes SET c = 'changed c' WHERE id = 'n1'")
        // The shell cannot drop a column the triggers name; migrate can.
        #expect(throws: SQLiteError.self) { try Self.app(a, "ALTER TABLE notes DROP COLUMN b") }
        try a.db.migrate(sql: "ALTER TABLE notes DROP COLUMN b")
        #expect(try a.rows("SELECT name FROM pragma_table_info('notes') ORDER BY cid") == [[.text("id")], [.text("a")], [.text("c")]])
        try Self.app(a, "UPDATE notes SET a = 'changed a' WHERE id = 'n2'")
        let file = try a.exportFile()
        let changes = try Self.changes(file)
        #expect(changes.map(\.changedColumns) == [["c"], ["a"]])
        #expect(b.apply(file).status == .applied)
        #expect(try b.rows("SELECT a, b, c FROM notes ORDER BY id") == [[.text("a1"), .text("b1"), .text("changed c")], [.text("changed a"), .text("b2"), .text("c2")]])
    }

    @Test func tableCreatedAfterTrackAll_isTrackedWithTheRowsItAlreadyHas() throws {
        let box = try Sandbox("schema-new-table")
        let (a, b) = try Self.pair(box)
        try Self.app(a, "CREATE TABLE tags(name TEXT PRIMARY KEY NOT NULL, color TEXT); INSERT INTO tags VALUES ('home', 'blue'), ('work', 'red')")
        let file = try a.exportFile()
        let report = b.apply(file)
        #expect(report.status == .applied && report.tablesCreated == ["tags"])
        #expect(try b.rows("SELECT name, color FROM tags ORDER BY name") == [[.text("home"), .text("blue")], [.text("work"), .text("red")]])
        try Self.app(a, "UPDATE tags SET color = 'green' WHERE name = 'home'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.value("SELECT color FROM tags WHERE name = 'home'") == .text("green"))
    }

    @Test func tablesTrackedByName_doNotPickUpNewTables() throws {
        let box = try Sandbox("schema-named")
        let url = box.path("base.sqlite")
        try Connection(path: url.path).execute("CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, a TEXT)")
        let a = try Replica(name: "A", source: url, in: box, user: "u", track: false)
        try a.db.track(tables: ["notes"])
        try Self.app(a, "CREATE TABLE private(id TEXT PRIMARY KEY NOT NULL); INSERT INTO private VALUES ('x'); INSERT INTO notes VALUES ('n', 'v')")
        let changes = try Self.changes(try a.exportFile())
        #expect(changes.map(\.table) == ["notes"])
    }
}

/// A diff from an older app version lacks a NOT NULL column the newer schema added without a default.
@Suite("Older app versions and NOT NULL columns")
struct OlderVersionTests {
    static func devices(_ box: Sandbox) throws -> (old: Replica, new: Replica) {
        let oldURL = box.path("old.sqlite"), newURL = box.path("new.sqlite")
        try Connection(path: oldURL.path).execute("CREATE TABLE requests(id TEXT PRIMARY KEY NOT NULL, url TEXT, status TEXT); INSERT INTO requests VALUES ('r1', 'https://a', 'new')")
        try Connection(path: newURL.path).execute("CREATE TABLE requests(id TEXT PRIMARY KEY NOT NULL, url TEXT, status TEXT, type TEXT NOT NULL); INSERT INTO requests VALUES ('r1', 'https://a', 'new', 'image')")
        return (try box.replica("old", source: oldURL), try box.replica("new", source: newURL))
    }

    @Test func updateOfARowBothHave_applies_withoutAnyDeclaredValue() throws {
        let box = try Sandbox("older-update")
        let (old, new) = try Self.devices(box)
        try old.exec("UPDATE requests SET status = 'done' WHERE id = 'r1'")
        #expect(new.apply(try old.exportFile()).status == .applied)
        #expect(try new.rows("SELECT status, type FROM requests") == [[.text("done"), .text("image")]])
    }

    /// Without a declared value, the new row is held back (listed, with what to declare) while the rest of the diff
    /// applies; once a value is declared, the held row is placed with it.
    @Test func newRowWithoutTheColumn_isHeldBack_restApplies_thenPlacedWithTheDeclaredValue() throws {
        let box = try Sandbox("older-insert")
        let (old, new) = try Self.devices(box)
        try old.exec("INSERT INTO requests VALUES ('r2', 'https://b', 'new')")
        try old.exec("UPDATE requests SET status = 'done' WHERE id = 'r1'")
        let first = new.apply(try old.exportFile())
        #expect(first.status == .applied && first.held == 1, "\(first)")
        #expect(try new.rows("SELECT id, status FROM requests ORDER BY id") == [[.text("r1"), .text("done")]], "the rest of the diff applied")
        let held = try new.db.heldRows()
        #expect(held.count == 1 && held[0].key == "'r2'" && held[0].reason.contains("'requests'.'type' is NOT NULL") && held[0].reason.contains("defaults"), "\(held)")
        // A later edit of the held row from the old device is held too, and placed after it.
        try old.exec("UPDATE requests SET url = 'https://b2' WHERE id = 'r2'")
        #expect(new.apply(try old.exportFile()).held == 1)
        #expect(try new.db.applyHeldRows()?.held == 2, "still no value declared: still held")
        #expect(try new.db.heldRows().count == 2)
        try new.db.setPolicy(TablePolicy(syncDefaults: ["type": "unknown"]), for: "requests")
        let placed = try #require(try new.db.applyHeldRows())
        #expect(placed.status == .applied && placed.held == 0, "\(placed)")
        #expect(try new.db.heldRows().isEmpty)
        #expect(try new.rows("SELECT id, url, type FROM requests ORDER BY id") == [[.text("r1"), .text("https://a"), .text("image")], [.text("r2"), .text("https://b2"), .text("unknown")]])
        // The value reaches the older device's copy of the row only as the newer device's own later edits do.
        try new.exec("UPDATE requests SET status = 'seen' WHERE id = 'r2'")
        #expect(old.apply(try new.exportFile()).status == .applied)
        #expect(try old.value("SELECT status FROM requests WHERE id = 'r2'") == .text("seen"))
    }

    @Test func policyConfig_readsDefaults() throws {
        let box = try Sandbox("older-config")
        let url = box.path("policy.json")
        try Data(#"{"tables": {"requests": {"defaults": {"type": "unknown"}}}}"#.utf8).write(to: url)
        #expect(try PolicyConfig.load(from: url)["requests"]?.syncDefaults == ["type": "unknown"])
    }

    /// A key column declared TEXT on one side and INTEGER on the other: keys are matched as SQLite compares them on
    /// the receiving side, and the report names the difference instead of passing it silently.
    @Test func keyDeclaredWithAnotherType_isMatchedAsSQLiteCompares_andReported() throws {
        let box = try Sandbox("older-keytype")
        let textURL = box.path("text.sqlite"), intURL = box.path("int.sqlite")
        try Connection(path: textURL.path).execute("CREATE TABLE requests(id TEXT PRIMARY KEY NOT NULL, url TEXT, request_id TEXT)")
        try Connection(path: intURL.path).execute("CREATE TABLE requests(id INTEGER PRIMARY KEY, url TEXT, request_id INTEGER)")
        let textSide = try box.replica("text", source: textURL), intSide = try box.replica("int", source: intURL)
        try intSide.exec("INSERT INTO requests VALUES (11, 'https://new', 5)")
        let report = textSide.apply(try intSide.exportFile())
        #expect(report.status == .applied)
        #expect(report.typeDifferences.contains { $0.contains("requests.id (key): INTEGER in the diff, TEXT here") }, "\(report.typeDifferences)")
        #expect(report.typeDifferences.contains { $0.hasPrefix("requests.request_id:") })
        #expect(try textSide.rows("SELECT id, typeof(id), request_id, typeof(request_id) FROM requests") == [[.text("11"), .text("text"), .text("5"), .text("text")]])
        try textSide.exec("UPDATE requests SET url = 'https://edited' WHERE id = '11'")
        #expect(intSide.apply(try textSide.exportFile()).status == .applied)
        #expect(try intSide.rows("SELECT id, url FROM requests") == [[.integer(11), .text("https://edited")]], "the same row, not a second one")
    }
}
