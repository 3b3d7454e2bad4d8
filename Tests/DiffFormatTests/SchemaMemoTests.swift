@testable import DiffFormat
import Foundation
import RTSQLite
import Testing

/// `TableDefinition.read` is remembered on a connection until the schema cookie changes: every change of the
/// schema, by this connection or another, committed or rolled back (to a savepoint too), is seen at once.
@Suite struct SchemaMemoTests {
    private func columns(_ db: Connection, _ table: String = "t") throws -> [String]? {
        try TableDefinition.read(table: table, from: db)?.columnNames
    }

    /// A new folder holding `app.sqlite` with `t(id INTEGER PRIMARY KEY, a)` (in WAL mode when `wal`), its path, and a
    /// connection to it (the folder is removed when `dir` is released).
    private func database(wal: Bool) throws -> (dir: TemporaryDirectory, path: String, db: Connection) {
        let dir = try TemporaryDirectory()
        let path = dir.file("app.sqlite").path
        let db = try Connection(path: path)
        try db.execute((wal ? "PRAGMA journal_mode = WAL; " : "") + "CREATE TABLE t(id INTEGER PRIMARY KEY, a)")
        return (dir, path, db)
    }

    /// Each read must equal one without the memo.
    private func expectFresh(_ db: Connection, _ table: String = "t", sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try TableDefinition.read(table: table, from: db) == TableDefinition.readFromSchema(table: table, from: db), sourceLocation: sourceLocation)
    }

    @Test func anotherConnectionsChanges_areSeen() throws {
        let (dir, path, db) = try database(wal: true)
        defer { withExtendedLifetime(dir) {} }
        #expect(try columns(db) == ["id", "a"])
        #expect(try columns(db, "u") == nil)
        let other = try Connection(path: path)
        try other.execute("ALTER TABLE t ADD COLUMN b")
        #expect(try columns(db) == ["id", "a", "b"])
        try other.execute("CREATE TABLE u(k TEXT PRIMARY KEY)")
        #expect(try columns(db, "u") == ["k"])
        // Dropped and declared again in one transaction: another shape, one cookie step.
        try other.execute("BEGIN; DROP TABLE t; CREATE TABLE t(x TEXT PRIMARY KEY, y UNIQUE, z REFERENCES u(k)); COMMIT")
        let t = try #require(try TableDefinition.read(table: "t", from: db))
        #expect(t.columnNames == ["x", "y", "z"] && t.uniqueConstraints == [["y"]] && t.foreignKeys.count == 1)
        try expectFresh(db)
        // The sqlite3 shell, another process.
        if sqliteShellAvailable {
            #expect(try runSQLiteShell([path, "ALTER TABLE t ADD COLUMN w"]).status == 0)
            #expect(try columns(db) == ["x", "y", "z", "w"])
        }
    }

    @Test func ownChanges_inTransactionsAndSavepoints_areSeen() throws {
        let (dir, path, db) = try database(wal: false)
        defer { withExtendedLifetime(dir) {} }
        #expect(try columns(db) == ["id", "a"])
        try db.execute("BEGIN IMMEDIATE")
        try db.execute("SAVEPOINT s")
        try db.execute("ALTER TABLE t ADD COLUMN b")
        #expect(try columns(db) == ["id", "a", "b"])
        try db.execute("ROLLBACK TO s")
        #expect(try columns(db) == ["id", "a"])
        // The cookie the rolled-back change had is taken again by another change.
        try db.execute("ALTER TABLE t ADD COLUMN c")
        #expect(try columns(db) == ["id", "a", "c"])
        try db.execute("RELEASE s")
        try db.execute("ROLLBACK")
        #expect(try columns(db) == ["id", "a"])
        // A rolled-back change, then another connection's different change committed with the same cookie.
        try db.execute("BEGIN IMMEDIATE; ALTER TABLE t ADD COLUMN d")
        #expect(try columns(db) == ["id", "a", "d"])
        try db.execute("ROLLBACK")
        let other = try Connection(path: path)
        try other.execute("ALTER TABLE t ADD COLUMN e")
        #expect(try columns(db) == ["id", "a", "e"])
        try expectFresh(db)
    }

    @Test func aReadTransaction_seesItsSnapshot_andTheNextOneTheNewSchema() throws {
        let (dir, path, db) = try database(wal: true)
        defer { withExtendedLifetime(dir) {} }
        try db.execute("BEGIN")
        #expect(try columns(db) == ["id", "a"])
        let other = try Connection(path: path)
        try other.execute("ALTER TABLE t ADD COLUMN b")
        #expect(try columns(db) == ["id", "a"])
        try db.execute("COMMIT")
        #expect(try columns(db) == ["id", "a", "b"])
        try expectFresh(db)
    }
}
