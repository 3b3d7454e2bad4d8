import DiffFormat
import Foundation
import RTSQLite
import Testing

/// A diff declares its carried tables exactly as a writer does (plain columns, nothing else) and holds nothing after
/// its last page: a generated column, a CHECK, a declared type or bytes SQLite never reads are refused by name.
/// The digest does not cover `CREATE TABLE` text, so these forgeries keep a valid digest.
@Suite struct DeclaredStructureTests {
    /// Rebuilds the carried `items` table of `url` as `declaration`, keeping every row and its rowid.
    private func redeclareItems(_ url: URL, as declaration: String, columns: String = "id, name, qty") throws {
        try tamper(url, """
            ALTER TABLE items RENAME TO items_old;
            \(declaration);
            INSERT INTO items(rowid, \(columns)) SELECT rowid, \(columns) FROM items_old;
            DROP TABLE items_old;
            """)
    }

    private func expectRefusedTable(_ url: URL, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .invalidTableDefinition(let file, let table, let reason)? = openingError(url) else {
            Issue.record("expected .invalidTableDefinition for \(what), got \(String(describing: openingError(url)))", sourceLocation: sourceLocation)
            return
        }
        #expect(file == url.path, sourceLocation: sourceLocation)
        #expect(table == "items", sourceLocation: sourceLocation)
        #expect(reason.contains("not as its definition's plain columns"), "\(reason)", sourceLocation: sourceLocation)
    }

    @Test func writerDeclaration_opens_andIsTheTextTheReaderExpects() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 3)
        #expect(openingError(url) == nil)
        let db = try Connection(path: url.path, mode: .readOnly)
        #expect(try db.scalar("SELECT sql FROM sqlite_schema WHERE name = 'items'")?.string == #"CREATE TABLE "items" ("id", "name", "qty")"#)
    }

    @Test func generatedColumn_isRefused() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url)
        // `PRAGMA table_info` does not list a generated column: the file would have passed the column check.
        try redeclareItems(url, as: #"CREATE TABLE items("id", "name", "qty", "shout" AS (upper("name")))"#)
        expectRefusedTable(url, "a generated column")
    }

    @Test func checkConstraintDefaultAndType_areRefused() throws {
        for declaration in [
            #"CREATE TABLE items("id", "name", "qty" CHECK ("qty" >= 0))"#,
            #"CREATE TABLE items("id", "name", "qty" DEFAULT (random()))"#,
            #"CREATE TABLE items("id" INTEGER, "name" TEXT, "qty" INTEGER)"#,
            #"CREATE TABLE items("id" PRIMARY KEY, "name", "qty")"#,
            #"CREATE TABLE items("id", "name" COLLATE NOCASE, "qty")"#,
        ] {
            let dir = try TemporaryDirectory()
            let url = try writeItemsDiff(in: dir.url)
            try redeclareItems(url, as: declaration)
            expectRefusedTable(url, declaration)
        }
    }

    @Test func sameColumnsOtherSpelling_isRefused() throws {
        // Strict on purpose: only the writer's text is known to declare nothing more.
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url)
        try redeclareItems(url, as: "CREATE TABLE items(id, name, qty)")
        expectRefusedTable(url, "unquoted names")
    }

    @Test func bytesAfterTheLastPage_areRefused() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url)
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(repeating: 0x41, count: 10))
        try handle.close()
        guard case .corrupt(let file, let detail)? = openingError(url) else {
            Issue.record("expected .corrupt, got \(String(describing: openingError(url)))")
            return
        }
        #expect(file == url.path)
        #expect(detail.contains("10 bytes after the last page"), "\(detail)")
    }

    @Test func aWholePageAfterTheLast_isRefused() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int)
        let pageSize = try Connection(path: url.path, mode: .readOnly).scalar("PRAGMA page_size")?.int64 ?? 4096
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(repeating: 0, count: Int(pageSize)))
        try handle.close()
        guard case .corrupt(_, let detail)? = openingError(url) else {
            Issue.record("expected .corrupt, got \(String(describing: openingError(url)))")
            return
        }
        #expect(detail.contains("\(size + Int(pageSize)) bytes in the file"), "\(detail)")
    }
}
