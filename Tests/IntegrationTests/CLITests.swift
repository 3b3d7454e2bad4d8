import DiffFormat
import Foundation
import RTSQLite
import Testing

@Suite("rtsync CLI", .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct CLITests {
    // MARK: - help

    @Test func help_listsKsuidDiffAndSnapshotCommands() throws {
        let r = try RTSyncBinary.run(["--help"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("SUBCOMMANDS"))
        for command in ["ksuid", "diff", "snapshot"] {
            #expect(r.stdout.range(of: "\n  \(command) ") != nil, "help does not list \(command):\n\(r.stdout)")
        }
    }

    @Test func unknownSubcommand_exitsNonZeroWithError() throws {
        let r = try RTSyncBinary.run(["frobnicate"])
        #expect(r.status != 0)
        #expect(r.stderr.hasPrefix("Error:") || r.stderr.hasPrefix("error:"))
    }

    // MARK: - ksuid

    @Test func ksuidNew_countFive_printsFiveSortedValidIDs() throws {
        let r = try RTSyncBinary.run(["ksuid", "new", "--count", "5"])
        #expect(r.status == 0)
        let lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count == 6 && lines.last == "", "expected 5 lines ending in a newline: \(r.stdout)")
        let ids = lines.filter { !$0.isEmpty }
        #expect(ids.count == 5)
        #expect(ids.allSatisfy { (try? KSUID(string: $0)) != nil })
        #expect(ids == ids.sorted())
        #expect(Set(ids).count == 5)
    }

    @Test func ksuidNew_countZero_exitsNonZeroWithMessage() throws {
        let r = try RTSyncBinary.run(["ksuid", "new", "--count", "0"])
        #expect(r.status != 0)
        #expect(r.stderr.contains("--count must be between 1 and 1000000"))
    }

    @Test func ksuidInspect_referenceIDAsJSON_hasTimestampPayloadAndTime() throws {
        let r = try RTSyncBinary.run(["ksuid", "inspect", "0ujtsYcgvSTl8PAuAdqWYSMnLOv", "--json"])
        #expect(r.status == 0)
        let json = try onlyJSONElement(r.stdout)
        #expect(json["id"] as? String == "0ujtsYcgvSTl8PAuAdqWYSMnLOv")
        #expect((json["timestamp"] as? NSNumber)?.int64Value == 107_608_047)
        #expect(json["payload"] as? String == "B5A1CD34B5F99D1154FB6853345C9735")
        #expect(json["raw"] as? String == "0669F7EFB5A1CD34B5F99D1154FB6853345C9735")
        #expect(json["time"] as? String == "2017-10-10T04:00:47Z")
    }

    @Test func ksuidInspect_referenceIDAsText_showsTimestampAndPayload() throws {
        let r = try RTSyncBinary.run(["ksuid", "inspect", "0ujzPyRiIAffKhBux4PvQdDqMHY"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("107610780"))
        #expect(r.stdout.contains("73FC1AA3B2446246D6E89FCD909E8FE8"))
        #expect(r.stdout.contains("2017-10-10T04:46:20Z"))
    }

    @Test(arguments: ["0ujtsYcgvSTl8PAuAdqWYSMnLO", "0ujtsYcgvSTl8PAuAdqWYSMnL-v", "zzzzzzzzzzzzzzzzzzzzzzzzzzz"])
    func ksuidInspect_invalidID_exitsOneWithErrorAndHint(_ id: String) throws {
        let r = try RTSyncBinary.run(["ksuid", "inspect", id])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("error:"), "stderr: \(r.stderr)")
        #expect(r.stderr.contains(id))
        #expect(r.stderr.split(separator: "\n").contains { $0.hasPrefix("hint:") }, "stderr: \(r.stderr)")
        #expect(r.stdout.isEmpty)
    }

    // MARK: - snapshot and diff inspect

    /// A small source database with two keyed tables and one without a key.
    func makeSourceDatabase(_ dir: TemporaryDirectory) throws -> URL {
        let url = dir.file("source.sqlite")
        let db = try Connection(path: url.path)
        try db.execute("""
            CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, data BLOB);
            INSERT INTO items VALUES (1, 'one', x'00'), (2, 'twå', x''), (3, NULL, NULL);
            CREATE TABLE "we""ird tab'le"(a TEXT, b INTEGER, PRIMARY KEY (a, b));
            INSERT INTO "we""ird tab'le" VALUES ('x', 1);
            CREATE TABLE log(line TEXT);
            INSERT INTO log VALUES ('no key');
            """)
        return url
    }

    /// Runs `rtsync snapshot --json` and returns the written file.
    func snapshot(db: URL, out: URL) throws -> URL {
        let r = try RTSyncBinary.run(["snapshot", "--db", db.path, "--out", out.path, "--json"])
        try #require(r.status == 0, "snapshot failed: \(r.stderr)")
        let json = try jsonObject(r.stdout)
        let path = try #require(json["file"] as? String)
        return URL(fileURLWithPath: path)
    }

    @Test func snapshotThenDiffInspectJSON_exitsZeroAndReportsValid() throws {
        let dir = try TemporaryDirectory()
        let source = try makeSourceDatabase(dir)
        let file = try snapshot(db: source, out: dir.file("out"))
        #expect(file.deletingLastPathComponent().standardizedFileURL.path == dir.file("out").standardizedFileURL.path)
        #expect(DiffFile.diffID(fromFileName: file.lastPathComponent) != nil)

        let r = try RTSyncBinary.run(["diff", "inspect", file.path, "--json"])
        #expect(r.status == 0, "stderr: \(r.stderr)")
        let json = try onlyJSONElement(r.stdout)
        #expect(json["valid"] as? Bool == true)
        #expect(json["kind"] as? String == "snapshot")
        #expect(json["formatVersion"] as? Int == 1)
        let tables = try #require(json["tables"] as? [[String: Any]])
        let counts = Dictionary(uniqueKeysWithValues: tables.compactMap { t in (t["name"] as? String).map { ($0, t["upserts"] as? Int ?? -1) } })
        #expect(counts == ["items": 3, "we\"ird tab'le": 1])
    }

    @Test func snapshot_tableWithoutPrimaryKey_isSkippedWithNote() throws {
        let dir = try TemporaryDirectory()
        let source = try makeSourceDatabase(dir)
        let r = try RTSyncBinary.run(["snapshot", "--db", source.path, "--out", dir.file("out").path])
        #expect(r.status == 0, "stderr: \(r.stderr)")
        #expect(r.stdout.contains("note: skipped table without a primary key: log"))
    }

    @Test func snapshot_missingDatabase_exitsOneWithErrorNamingIt() throws {
        let dir = try TemporaryDirectory()
        let missing = dir.file("missing.sqlite").path
        let r = try RTSyncBinary.run(["snapshot", "--db", missing, "--out", dir.file("out").path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("error:"))
        #expect(r.stderr.contains(missing))
        #expect(r.stderr.contains("\nhint:"))
    }

    @Test func diffInspectText_validDiff_showsValidAndTables() throws {
        let dir = try TemporaryDirectory()
        let file = try snapshot(db: try makeSourceDatabase(dir), out: dir.file("out"))
        let r = try RTSyncBinary.run(["diff", "inspect", file.path])
        #expect(r.status == 0)
        #expect(r.stdout.contains("valid:       yes"))
        #expect(r.stdout.contains("items: 3 upserts, 0 deletes"))
    }

    @Test func diffInspect_nonSQLiteFile_exitsOneWithErrorNamingFile() throws {
        let dir = try TemporaryDirectory()
        let file = dir.file("0ujtsYcgvSTl8PAuAdqWYSMnLOv.sqlite")
        try Data("definitely not a database\n".utf8).write(to: file)
        let r = try RTSyncBinary.run(["diff", "inspect", file.path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("error:"), "stderr: \(r.stderr)")
        let firstLine = r.stderr.split(separator: "\n").first.map(String.init) ?? ""
        #expect(firstLine.contains(file.path))
        #expect(firstLine.contains("not a SQLite database"))
        #expect(r.stderr.contains("\nhint:"))
    }

    @Test func diffInspectJSON_nonSQLiteFile_exitsOneAndReportsInvalid() throws {
        let dir = try TemporaryDirectory()
        let file = dir.file("garbage.sqlite")
        try Data(repeating: 0x42, count: 512).write(to: file)
        let r = try RTSyncBinary.run(["diff", "inspect", file.path, "--json"])
        #expect(r.status == 1)
        let json = try onlyJSONElement(r.stdout)
        #expect(json["valid"] as? Bool == false)
        #expect(json["file"] as? String == file.path)
    }

    @Test func diffInspect_tamperedDiff_exitsOneWithDigestError() throws {
        let dir = try TemporaryDirectory()
        let file = try snapshot(db: try makeSourceDatabase(dir), out: dir.file("out"))
        try Connection(path: file.path, mode: .readWrite).execute("UPDATE items SET name = 'changed' WHERE id = 1")
        let r = try RTSyncBinary.run(["diff", "inspect", file.path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("error: content digest mismatch"), "stderr: \(r.stderr)")
        #expect(r.stderr.contains(file.path))
    }

    // MARK: - Record Thing

    static let recordThing = RTSyncBinary.packageRoot.deletingLastPathComponent()
        .appendingPathComponent("shared/fixtures/record-thing/record-thing-2025-04-16.sqlite")

    @Test(.enabled(if: FileManager.default.fileExists(atPath: recordThing.path),
                   "Record Thing fixture not present at ../shared/fixtures/record-thing (only on the development machine)"))
    func snapshot_recordThingDatabase_inspectShowsAllTablesWithSourceRowCounts() throws {
        let dir = try TemporaryDirectory()
        let copy = dir.file("record-thing.sqlite")
        try FileManager.default.copyItem(at: Self.recordThing, to: copy)
        let source = try Connection(path: copy.path, mode: .readOnly)
        let names = try source.rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").compactMap { $0[0].string }
        var expected: [String: Int] = [:]
        for name in names { expected[name] = Int(try source.scalar("SELECT count(*) FROM " + quoteIdentifier(name))?.int64 ?? -1) }

        let file = try snapshot(db: copy, out: dir.file("out"))
        let r = try RTSyncBinary.run(["diff", "inspect", file.path, "--json"])
        #expect(r.status == 0, "stderr: \(r.stderr)")
        let json = try onlyJSONElement(r.stdout)
        #expect(json["valid"] as? Bool == true)
        let tables = try #require(json["tables"] as? [[String: Any]])
        #expect(tables.count == 21)
        var counts: [String: Int] = [:]
        for t in tables {
            let name = try #require(t["name"] as? String)
            counts[name] = (t["upserts"] as? Int ?? -1) + (t["deletes"] as? Int ?? -1)
        }
        #expect(counts == expected)
        let size = (try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value ?? 0
        print("size: Record Thing snapshot (\(expected.values.reduce(0, +)) rows, \(tables.count) tables) = \(size) bytes")
    }
}
