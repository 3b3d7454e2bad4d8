import DiffFormat
import Foundation
import RTSQLite
import Testing

/// Each test builds a bad file and checks the reader rejects it with its own `DiffFormatError` case,
/// and that the error's description names the file.
@Suite("Diff reader rejections")
struct DiffReaderRejectionTests {
    /// The error opening `url` throws; records an issue when it opens, or when the description does not name the file.
    func rejection(of url: URL, limits: DiffLimits = .default, sourceLocation: SourceLocation = #_sourceLocation) -> DiffFormatError? {
        guard let error = openingError(url, limits: limits) else {
            Issue.record("\(url.lastPathComponent) opened, expected a rejection", sourceLocation: sourceLocation)
            return nil
        }
        #expect(error.description.contains(url.path), "description \"\(error.description)\" does not name the file", sourceLocation: sourceLocation)
        #expect(error.file == url.path, sourceLocation: sourceLocation)
        #expect(!error.hint.isEmpty, sourceLocation: sourceLocation)
        return error
    }

    /// A valid two-row diff of `items`, the starting point every test damages.
    func validDiff(_ dir: TemporaryDirectory, rows: Int = 2) throws -> URL {
        let url = try writeItemsDiff(in: dir.url, rowCount: rows)
        try #require(openingError(url) == nil)
        return url
    }

    // MARK: - Not a diff at all

    @Test func open_missingFile_throwsFileNotFound() throws {
        let dir = try TemporaryDirectory()
        let url = dir.file("0ujtsYcgvSTl8PAuAdqWYSMnLOv.sqlite")
        #expect(rejection(of: url) == .fileNotFound(file: url.path))
    }

    @Test func open_randomBytes_throwsNotSQLite() throws {
        let dir = try TemporaryDirectory()
        let url = dir.file("0ujtsYcgvSTl8PAuAdqWYSMnLOv.sqlite")
        var rng = SystemRandomNumberGenerator()
        try Data((0..<4096).map { _ in UInt8.random(in: 0...255, using: &rng) }).write(to: url)
        #expect(rejection(of: url) == .notSQLite(file: url.path))
    }

    @Test func open_textFile_throwsNotSQLite() throws {
        let dir = try TemporaryDirectory()
        let url = dir.file("notes.sqlite")
        try Data(String(repeating: "this is a plain text file, not a database\n", count: 50).utf8).write(to: url)
        #expect(rejection(of: url) == .notSQLite(file: url.path))
    }

    @Test func open_emptyFile_throwsNotSQLite() throws {
        let dir = try TemporaryDirectory()
        let url = dir.file("empty.sqlite")
        try Data().write(to: url)
        #expect(rejection(of: url) == .notSQLite(file: url.path))
    }

    @Test func open_validHeaderButGarbageBody_throwsNotSQLiteOrCorrupt() throws {
        // A real header followed by random pages: SQLite itself reports "file is not a database" (SQLITE_NOTADB).
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        var bytes = try Data(contentsOf: url)
        var rng = SystemRandomNumberGenerator()
        for i in 100..<bytes.count { bytes[i] = UInt8.random(in: 0...255, using: &rng) }
        try bytes.write(to: url)
        let error = rejection(of: url)
        switch error {
        case .notSQLite?, .corrupt?: break
        default: Issue.record("expected .notSQLite or .corrupt, got \(String(describing: error))")
        }
    }

    @Test func open_truncatedToHalf_throwsCorrupt() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir, rows: 300)
        let bytes = try Data(contentsOf: url)
        try #require(bytes.count >= 8 * 512, "the diff must span several pages for the cut to matter")
        try bytes.prefix(bytes.count / 2).write(to: url)
        guard case .corrupt(let file, let detail)? = rejection(of: url) else {
            Issue.record("expected .corrupt for a file cut in half")
            return
        }
        #expect(file == url.path)
        #expect(!detail.isEmpty)
    }

    @Test func open_truncatedInsideHeader_throwsNotSQLite() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try Data(contentsOf: url).prefix(60).write(to: url)
        #expect(rejection(of: url) == .notSQLite(file: url.path))
    }

    @Test func open_walModeFile_throwsCorrupt() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "PRAGMA journal_mode = WAL")
        guard case .corrupt(_, let detail)? = rejection(of: url) else {
            Issue.record("expected .corrupt for a WAL-mode file")
            return
        }
        #expect(detail.contains("WAL"))
    }

    // MARK: - Metadata

    @Test func open_formatVersionTwo_throwsUnsupportedVersion() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_meta SET format_version = 2")
        #expect(rejection(of: url) == .unsupportedVersion(file: url.path, found: 2))
    }

    @Test func open_twoMetadataRows_throwsInvalidMetadata() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "INSERT INTO rtsync_meta SELECT * FROM rtsync_meta")
        guard case .invalidMetadata(_, let field, _)? = rejection(of: url) else {
            Issue.record("expected .invalidMetadata")
            return
        }
        #expect(field == "rtsync_meta")
    }

    @Test func open_createdAtNotCanonical_throwsInvalidMetadata() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_meta SET created_at = '2025-06-15 15:06:40'")
        guard case .invalidMetadata(_, let field, _)? = rejection(of: url) else {
            Issue.record("expected .invalidMetadata")
            return
        }
        #expect(field == "created_at")
    }

    @Test func open_fileNamedWithOtherKSUID_throwsFileNameMismatch() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        let id = try #require(DiffFile.diffID(fromFileName: url.lastPathComponent))
        let renamed = dir.file("0ujtsYcgvSTl8PAuAdqWYSMnLOv.sqlite")
        try FileManager.default.copyItem(at: url, to: renamed)
        #expect(rejection(of: renamed) == .fileNameMismatch(file: renamed.path, diffID: id.string))
    }

    // MARK: - Structure

    @Test(arguments: ["rtsync_meta", "rtsync_tables", "rtsync_rows"])
    func open_requiredTableDropped_throwsMissingTable(_ table: String) throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "DROP TABLE \(table)")
        #expect(rejection(of: url) == .missingTable(file: url.path, table: table))
    }

    @Test func open_declaredCarriedTableDropped_throwsMissingTable() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "DROP TABLE items")
        #expect(rejection(of: url) == .missingTable(file: url.path, table: "items"))
    }

    @Test func open_carriesTableNamedRtsyncEvil_throwsReservedTableName() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "CREATE TABLE rtsync_evil(a)")
        #expect(rejection(of: url) == .reservedTableName(file: url.path, table: "rtsync_evil"))
    }

    @Test func open_carriesTableNamedSqliteX_throwsReservedTableName() throws {
        // SQLite refuses CREATE TABLE sqlite_x, so rename an ordinary table in the schema table directly.
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, """
            CREATE TABLE plain_x(a);
            PRAGMA writable_schema = ON;
            UPDATE sqlite_schema SET name = 'sqlite_x', tbl_name = 'sqlite_x', sql = 'CREATE TABLE sqlite_x(a)' WHERE name = 'plain_x';
            PRAGMA writable_schema = OFF;
            """)
        #expect(rejection(of: url) == .reservedTableName(file: url.path, table: "sqlite_x"))
    }

    @Test(arguments: ["sqlite_x", "rtsync_evil", "RTSYNC_Meta"])
    func open_declaresReservedTableInRtsyncTables_throwsReservedTableName(_ name: String) throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "INSERT INTO rtsync_tables(id, name, columns, constraints, schema_hash) VALUES (99, \(quoteLiteral(name)), '[]', '{}', '')")
        #expect(rejection(of: url) == .reservedTableName(file: url.path, table: name))
    }

    @Test func open_undeclaredExtraTable_throwsInvalidTableDefinition() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "CREATE TABLE extra(a)")
        guard case .invalidTableDefinition(_, let table, _)? = rejection(of: url) else {
            Issue.record("expected .invalidTableDefinition")
            return
        }
        #expect(table == "extra")
    }

    @Test func open_containsTrigger_throwsContainsTrigger() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "CREATE TRIGGER on_items AFTER INSERT ON items BEGIN SELECT 1; END")
        #expect(rejection(of: url) == .containsTrigger(file: url.path, name: "on_items"))
    }

    @Test func open_containsView_throwsContainsView() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "CREATE VIEW all_items AS SELECT * FROM items")
        #expect(rejection(of: url) == .containsView(file: url.path, name: "all_items"))
    }

    @Test func open_containsStrayIndex_throwsUnexpectedObject() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "CREATE INDEX stray ON items(name)")
        #expect(rejection(of: url) == .unexpectedObject(file: url.path, type: "index", name: "stray"))
    }

    @Test func open_hostileTriggerWritingElsewhere_throwsContainsTriggerAndLeavesFileUnchanged() throws {
        // A crafted diff: its carried table has an AFTER INSERT trigger that writes to another table.
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, """
            CREATE TABLE loot(x);
            CREATE TRIGGER steal AFTER INSERT ON items BEGIN INSERT INTO loot VALUES (new.name); END;
            """)
        let before = try Data(contentsOf: url)
        let modifiedBefore = try FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date
        #expect(rejection(of: url) == .containsTrigger(file: url.path, name: "steal"))
        #expect(try Data(contentsOf: url) == before)
        #expect(try FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date == modifiedBefore)
        // No journal or WAL file was created next to it either.
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.url.path)
        #expect(names == [url.lastPathComponent])
        let check = try Connection(path: url.path, mode: .readOnly)
        #expect(try check.scalar("SELECT count(*) FROM loot") == .integer(0))
    }

    // MARK: - Definitions, rows and digest

    @Test func open_schemaHashAltered_throwsSchemaHashMismatch() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_tables SET schema_hash = '\(String(repeating: "0", count: 64))' WHERE name = 'items'")
        #expect(rejection(of: url) == .schemaHashMismatch(file: url.path, table: "items"))
    }

    @Test func open_definitionChangedWithoutHash_throwsSchemaHashMismatch() throws {
        // A changed declared type with the old hash kept: the hash no longer describes the definition.
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_tables SET columns = replace(columns, '\"TEXT\"', '\"BLOB\"') WHERE name = 'items'")
        #expect(rejection(of: url) == .schemaHashMismatch(file: url.path, table: "items"))
    }

    @Test func open_rowReferencingMissingCarriedRow_throwsInvalidRow() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_rows SET rid = 999 WHERE rowid = 1")
        guard case .invalidRow(_, let table, let row, let reason)? = rejection(of: url) else {
            Issue.record("expected .invalidRow")
            return
        }
        #expect(table == "items")
        #expect(row == 1)
        #expect(reason.contains("999"))
    }

    @Test func open_rowWithUnknownOperation_throwsInvalidRow() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_rows SET op = 'drop' WHERE rowid = 2")
        guard case .invalidRow(_, "items", 2, _)? = rejection(of: url) else {
            Issue.record("expected .invalidRow for row 2")
            return
        }
    }

    @Test func open_carriedRowNotReferenced_throwsInvalidRow() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "INSERT INTO items VALUES (77, 'orphan', 0)")
        guard case .invalidRow(_, "items", _, _)? = rejection(of: url) else {
            Issue.record("expected .invalidRow")
            return
        }
    }

    @Test func open_carriedValueAltered_throwsDigestMismatch() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        let stored = try #require(try Connection(path: url.path, mode: .readOnly).scalar("SELECT digest FROM rtsync_meta")?.string)
        try tamper(url, "UPDATE items SET name = 'altered' WHERE id = 1")
        guard case .digestMismatch(_, let expected, let actual)? = rejection(of: url) else {
            Issue.record("expected .digestMismatch")
            return
        }
        #expect(expected == stored)
        #expect(actual != stored && actual.count == 64)
    }

    @Test func open_clockAltered_throwsDigestMismatch() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_rows SET hlc = hlc + 1 WHERE rowid = 2")
        guard case .digestMismatch? = rejection(of: url) else {
            Issue.record("expected .digestMismatch")
            return
        }
    }

    @Test func open_authorAltered_throwsDigestMismatch() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        try tamper(url, "UPDATE rtsync_meta SET author_user = 'mallory'")
        guard case .digestMismatch? = rejection(of: url) else {
            Issue.record("expected .digestMismatch")
            return
        }
    }

    // MARK: - Limits

    @Test func open_twoRowsWithMaxRowsOne_throwsLimitExceeded() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir, rows: 2)
        #expect(rejection(of: url, limits: DiffLimits(maxRows: 1)) == .limitExceeded(file: url.path, what: "number of rows", limit: 1))
        #expect(openingError(url, limits: DiffLimits(maxRows: 2)) == nil)
    }

    @Test func open_fileLargerThanMaxFileBytes_throwsLimitExceeded() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        guard case .limitExceeded(_, _, 1024)? = rejection(of: url, limits: DiffLimits(maxFileBytes: 1024)) else {
            Issue.record("expected .limitExceeded with limit 1024")
            return
        }
    }

    @Test func open_moreColumnsThanMaxColumns_throwsLimitExceeded() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        guard case .limitExceeded(_, _, 2)? = rejection(of: url, limits: DiffLimits(maxColumns: 2)) else {
            Issue.record("expected .limitExceeded with limit 2")
            return
        }
    }

    @Test func open_moreTablesThanMaxTables_throwsLimitExceeded() throws {
        let dir = try TemporaryDirectory()
        let url = try validDiff(dir)
        guard case .limitExceeded(_, _, 0)? = rejection(of: url, limits: DiffLimits(maxTables: 0)) else {
            Issue.record("expected .limitExceeded with limit 0")
            return
        }
    }

    // MARK: - Paths

    @Test func open_validDiffInFolderWithURISpecialCharacters_opens() throws {
        let dir = try TemporaryDirectory()
        let folder = dir.file("odd ?name#with%25 chars")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let url = try writeItemsDiff(in: folder, rowCount: 1)
        let reader = try DiffReader(url: url)
        #expect(reader.counts["items"]?.upserts == 1)
    }
}
