import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// UNIQUE collisions on partial, expression and collated unique indexes are resolved like those on plain columns
/// (the row created first keeps the value, on every device), and only rows the index really holds collide.
@Suite("Unique indexes: partial, expressions, collations")
struct UniqueIndexTests {
    static func makeBase(in box: Sandbox, index: String) throws -> URL {
        try box.baseDatabase("""
            CREATE TABLE people(id TEXT PRIMARY KEY NOT NULL, name TEXT, archived INTEGER NOT NULL DEFAULT 0);
            \(index);
            INSERT INTO people VALUES ('k1', 'ann', 1)
            """)
    }

    /// Two devices add a person whose name collides through the index; after an exchange both keep the one created
    /// first, and the archived row 'ann' (outside the partial index) is untouched.
    @Test(arguments: [
        ("CREATE UNIQUE INDEX people_name ON people(name) WHERE archived = 0", "ann", "ann", true),
        ("CREATE UNIQUE INDEX people_name ON people(lower(name))", "Bob", "bob", true),
        ("CREATE UNIQUE INDEX people_name ON people(name COLLATE NOCASE DESC)", "Bob", "bOB", true),
        ("CREATE UNIQUE INDEX \"people (name)\" ON people( trim( name , ' ') , archived ) WHERE name <> 'x,y'", " bob", "bob ", true),
        ("CREATE UNIQUE INDEX people_name ON people(lower(name))", "Bob", "Rob", false),
    ])
    func concurrentInsertsCollidingThroughIndex_firstCreatedKeepsIt(index: String, nameA: String, nameB: String, collides: Bool) throws {
        let box = try Sandbox("uidx")
        let base = try Self.makeBase(in: box, index: index)
        let a = try box.replica("A", source: base), b = try box.replica("B", source: base)
        try a.exec("INSERT INTO people VALUES ('k2', ?, 0)", [.text(nameA)])
        let fa = try a.exportFile()
        tick()
        try b.exec("INSERT INTO people VALUES ('k3', ?, 0)", [.text(nameB)])
        let fb = try b.exportFile()
        #expect(a.apply(fb).status == .applied)
        #expect(b.apply(fa).status == .applied)
        var diffs = [fa, fb]
        var rng = SeededGenerator(seed: 1)
        try exchangeUntilQuiet([a, b], diffs: &diffs, rng: &rng, label: index)
        try expectSameData(a, b)
        let ids = try a.rows("SELECT id FROM people ORDER BY id").map { $0[0] }
        if collides {
            #expect(ids == [.text("k1"), .text("k2")], "\(index): k2 was created first; the archived k1 stays")
            #expect(try (a.conflicts() + b.conflicts()).contains { $0.reason.contains("UNIQUE") })
        } else {
            #expect(ids == [.text("k1"), .text("k2"), .text("k3")])
        }
    }

    /// A UNIQUE constraint with a conflict clause of its own (REPLACE would delete the other row, IGNORE drop the
    /// write, each silently and by arrival order): the merge writes with OR ABORT, so the collision is settled by its
    /// own rule on both devices (the row created first keeps the value), and they end alike.
    @Test(arguments: ["REPLACE", "IGNORE", "FAIL", "ROLLBACK"])
    func uniqueConstraintWithAConflictClause_concurrentInsertsConverge(clause: String) throws {
        let box = try Sandbox("uclause")
        let url = try box.baseDatabase("""
            CREATE TABLE people(id TEXT PRIMARY KEY NOT NULL, name TEXT UNIQUE ON CONFLICT \(clause), archived INTEGER NOT NULL DEFAULT 0);
            INSERT INTO people VALUES ('k1', 'ann', 1)
            """)
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        try a.exec("INSERT INTO people VALUES ('k2', 'bob', 0)")
        let fa = try a.exportFile()
        tick()
        try b.exec("INSERT INTO people VALUES ('k3', 'bob', 0)")
        let fb = try b.exportFile()
        #expect(a.apply(fb).status == .applied)
        #expect(b.apply(fa).status == .applied)
        var diffs = [fa, fb]
        var rng = SeededGenerator(seed: 2)
        try exchangeUntilQuiet([a, b], diffs: &diffs, rng: &rng, label: clause)
        try expectSameData(a, b)
        #expect(try a.rows("SELECT id FROM people ORDER BY id").map { $0[0] } == [.text("k1"), .text("k2")], "\(clause): k2 was created first")
    }

    /// Which tables the merge writes with OR ABORT: a UNIQUE or PRIMARY KEY conflict clause other than ABORT, on a
    /// column or a table constraint (a clause on NOT NULL, or text in names, strings and comments, does not count).
    @Test func uniqueConflictClause_isFoundOnUniqueAndPrimaryKeyConstraintsOnly() {
        let yes = ["CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT UNIQUE ON CONFLICT REPLACE)",
                   "CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT, b INT, UNIQUE (a, \"b\") ON CONFLICT IGNORE)",
                   "CREATE TABLE t(id INTEGER PRIMARY KEY DESC ON CONFLICT REPLACE, a TEXT)",
                   "CREATE TABLE t(id TEXT, a TEXT NOT NULL ON CONFLICT REPLACE DEFAULT '' UNIQUE ON CONFLICT FAIL, PRIMARY KEY(id))",
                   "create table t(id text primary key, a text constraint u unique on conflict rollback)"]
        let no = ["CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT UNIQUE)",
                  "CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT UNIQUE ON CONFLICT ABORT)",
                  "CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT NOT NULL ON CONFLICT REPLACE DEFAULT 'x')",
                  "CREATE TABLE t(id TEXT PRIMARY KEY, \"on conflict replace\" TEXT, b TEXT DEFAULT 'unique on conflict ignore')",
                  "CREATE TABLE t(id TEXT PRIMARY KEY, a TEXT /* UNIQUE ON CONFLICT REPLACE */, b -- unique on conflict ignore\n TEXT)"]
        for sql in yes { #expect(UniqueIndex.hasUniqueConflictClause(sql), "\(sql)") }
        for sql in no { #expect(!UniqueIndex.hasUniqueConflictClause(sql), "\(sql)") }
    }

    /// Without such a clause the merge's writes say no OR, so the app's triggers keep their own conflict handling
    /// (an OR clause on a statement governs the triggers it fires): a trigger that keeps a name index with
    /// INSERT OR REPLACE and counts with INSERT OR IGNORE works during apply as for the app's own writes, and a NULL
    /// for a NOT NULL ON CONFLICT REPLACE column takes the default on both devices.
    @Test func appTriggersAndNotNullClauses_keepTheirConflictHandlingDuringApply() throws {
        let box = try Sandbox("trigger-or")
        let url = try box.baseDatabase("""
            CREATE TABLE people(id TEXT PRIMARY KEY NOT NULL, name TEXT UNIQUE, nick TEXT NOT NULL ON CONFLICT REPLACE DEFAULT 'none');
            CREATE TABLE names(name TEXT PRIMARY KEY, id TEXT);
            CREATE TABLE counts(name TEXT PRIMARY KEY, n INTEGER);
            CREATE TRIGGER people_names AFTER INSERT ON people BEGIN
              INSERT OR REPLACE INTO names VALUES (NEW.name, NEW.id);
              INSERT OR IGNORE INTO counts VALUES (NEW.name, 1);
            END;
            CREATE TRIGGER people_renamed AFTER UPDATE OF name ON people BEGIN
              INSERT OR REPLACE INTO names VALUES (NEW.name, NEW.id);
              INSERT OR IGNORE INTO counts VALUES (NEW.name, 1);
            END;
            INSERT INTO names VALUES ('bob', 'old');
            INSERT INTO counts VALUES ('bob', 7)
            """)
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        try a.exec("INSERT INTO people VALUES ('k1', 'bob', 'b')")
        try a.exec("INSERT INTO people VALUES ('k2', 'ann', NULL)")
        #expect(try a.value("SELECT nick FROM people WHERE id = 'k2'") == .text("none"))
        let first = try a.exportFile()
        let r = b.apply(first)
        #expect(r.status == .applied, "\(r.reason ?? "")")
        #expect(try b.rows("SELECT name, id FROM names ORDER BY name") == [[.text("ann"), .text("k2")], [.text("bob"), .text("k1")]])
        #expect(try b.value("SELECT n FROM counts WHERE name = 'bob'") == .integer(7))
        try a.exec("UPDATE people SET name = 'cy' WHERE id = 'k2'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.value("SELECT id FROM names WHERE name = 'cy'") == .text("k2"))
        try expectSameData(a, b)
    }

    @Test func indexSQL_isParsedIntoTermsAndWhere() throws {
        let p = try #require(UniqueIndex.parseIndexSQL("CREATE UNIQUE INDEX \"a(b\" ON \"t(\"( lower(x) , [y,z] DESC, 'q)' || w ) WHERE x > 0 AND (y, z) IS NOT (1, 2)"))
        #expect(p.terms == ["lower(x)", "[y,z]", "'q)' || w"])
        #expect(p.whereSQL == "x > 0 AND (y, z) IS NOT (1, 2)")
        #expect(UniqueIndex.parseIndexSQL("CREATE UNIQUE INDEX i ON t(a)")?.whereSQL == nil)
        #expect(UniqueIndex.parseIndexSQL("CREATE UNIQUE INDEX i ON t(a) garbage") == nil)
    }

    /// The partial index case that went wrong: an archived row outside the index, created after the incoming row,
    /// has the incoming name; it was taken for the colliding row and deleted (it is first in rowid order).
    @Test func rowOutsidePartialIndex_isNotTakenForTheCollision() throws {
        let box = try Sandbox("uidx-partial")
        let base = try Self.makeBase(in: box, index: "CREATE UNIQUE INDEX people_name ON people(name) WHERE archived = 0")
        let a = try box.replica("A", source: base), b = try box.replica("B", source: base)
        try a.exec("INSERT INTO people VALUES ('k0', 'ann', 0)")
        let fa = try a.exportFile()
        tick()
        try b.exec("INSERT INTO people VALUES ('k9', 'ann', 0)")
        let fb = try b.exportFile()
        tick()
        try a.exec("INSERT INTO people(rowid, id, name, archived) VALUES (-1, 'k5', 'ann', 1)")
        #expect(a.apply(fb).status == .applied)
        #expect(try a.rows("SELECT id FROM people ORDER BY id") == [[.text("k0")], [.text("k1")], [.text("k5")]], "k9 lost to k0; the archived rows stay")
        #expect(b.apply(fa).status == .applied)
        var diffs = [fa, fb]
        var rng = SeededGenerator(seed: 2)
        try exchangeUntilQuiet([a, b], diffs: &diffs, rng: &rng, label: "partial")
        try expectSameData(a, b)
    }
}
