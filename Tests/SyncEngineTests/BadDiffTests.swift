import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

@Suite("Rejected diffs")
struct BadDiffTests {
    static let thingKey = "account_id = '2siEySuKO1wK4XiJHWQ0YxhLxd2' AND id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'"

    /// Writes a diff by hand, as another (possibly buggy or hostile) device could.
    static func handMadeDiff(in dir: URL, tables: [TableDefinition], rows: [RowChange]) throws -> URL {
        let site = KSUID.generate().string
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let writer = try DiffWriter(directory: dir, kind: .changes, authorUser: "mallory", authorSite: site, sequence: 1...1)
        for t in tables { try writer.addTable(t) }
        let clock = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: site)
        for r in rows {
            var r = r
            r.clock = clock
            try writer.append(r)
        }
        return try writer.finish()
    }

    /// A valid change to `things` to put in front of the bad part: it must not be applied either.
    static func validThingsChange(_ replica: Replica) throws -> (TableDefinition, RowChange) {
        let conn = try Connection(path: replica.dbURL.path, mode: .readOnly)
        let def = try #require(try TableDefinition.read(table: "things", from: conn))
        var values = try #require(try conn.rows("SELECT * FROM things WHERE \(thingKey)").first)
        values[try #require(def.columnIndex("title"))] = .text("hacked")
        return (def, RowChange(table: "things", operation: .upsert, values: values, changedColumns: ["title"], clock: .zero, born: .zero))
    }

    static func expectRejectedAndQuarantined(_ report: ApplyReport, file: URL, replica: Replica, before: [String: TableDump],
                                             sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(report.status == .rejected, sourceLocation: sourceLocation)
        #expect(report.reason?.isEmpty == false, sourceLocation: sourceLocation)
        #expect(!FileManager.default.fileExists(atPath: file.path), "file left in place", sourceLocation: sourceLocation)
        let moved = try #require(report.quarantinedTo, sourceLocation: sourceLocation)
        #expect(moved.hasPrefix(replica.quarantine.path), sourceLocation: sourceLocation)
        #expect(FileManager.default.fileExists(atPath: moved), sourceLocation: sourceLocation)
        #expect(FileManager.default.fileExists(atPath: moved + ".reason.txt"), sourceLocation: sourceLocation)
        let after = try replica.fullDump()
        #expect(after == before, "database changed: \(firstDifference(before, after) ?? "")", sourceLocation: sourceLocation)
    }

    @Test func diffWithDifferentPrimaryKey_isRejected_databaseUnchanged_fileQuarantined() throws {
        let box = try Sandbox("badpk")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let (thingsDef, thingsChange) = try Self.validThingsChange(b)
        let translations = TableDefinition(name: "translations", columns: [
            ColumnDefinition(name: "lang", type: "VARCHAR", notNull: true, primaryKey: 1),
            ColumnDefinition(name: "key", type: "VARCHAR", notNull: true),
            ColumnDefinition(name: "value", type: "TEXT", notNull: true),
            ColumnDefinition(name: "context", type: "VARCHAR"),
        ])
        let file = try Self.handMadeDiff(in: box.path("incoming"), tables: [thingsDef, translations], rows: [
            thingsChange,
            RowChange(table: "translations", operation: .upsert, values: [.text("fr"), .text("k"), .text("v"), .null], clock: .zero, born: .zero),
        ])
        let before = try b.fullDump()
        let report = b.apply(file)
        try Self.expectRejectedAndQuarantined(report, file: file, replica: b, before: before)
        #expect(report.reason?.contains("primary key") == true, "\(report.reason ?? "")")
        #expect(report.inserted == 0 && report.updated == 0)
    }

    @Test func corruptDiff_flippedBytes_isRejected_databaseUnchanged_fileQuarantined() throws {
        let box = try Sandbox("corrupt")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("UPDATE things SET title = 'Cans' WHERE \(Self.thingKey)")
        try a.exec("INSERT INTO translations VALUES ('fr', 'ui.things', 'Choses', 'ui')")
        let good = try a.exportFile()
        var bytes = [UInt8](try Data(contentsOf: good))
        // Keep the 100-byte header so it still looks like SQLite; ruin everything after the first page.
        for i in stride(from: bytes.count / 2, to: bytes.count, by: 1) { bytes[i] ^= 0xA5 }
        let file = box.path("incoming").appendingPathComponent(good.lastPathComponent)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: file)
        let before = try b.fullDump()
        let report = b.apply(file)
        try Self.expectRejectedAndQuarantined(report, file: file, replica: b, before: before)
        // The intact original still applies: the rejection was about the bytes, not the content.
        #expect(b.apply(good).status == .applied)
        #expect(try b.value("SELECT title FROM things WHERE \(Self.thingKey)") == .text("Cans"))
    }

    @Test func corruptDiff_singleByteInContentFlipped_isRejectedByDigest() throws {
        let box = try Sandbox("digest")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("UPDATE things SET title = 'Cans' WHERE \(Self.thingKey)")
        let good = try a.exportFile()
        var bytes = [UInt8](try Data(contentsOf: good))
        // Change one character of the carried value (still a valid SQLite file).
        let needle = Array("Cans".utf8)
        let at = try #require((0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[at] = UInt8(ascii: "F")
        let file = box.path("incoming").appendingPathComponent(good.lastPathComponent)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: file)
        let before = try b.fullDump()
        let report = b.apply(file)
        try Self.expectRejectedAndQuarantined(report, file: file, replica: b, before: before)
    }

    @Test func notADiff_isRejected_andQuarantined() throws {
        let box = try Sandbox("garbage")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let file = box.path(KSUID.generate().string + ".sqlite")
        try Data("this is not a database".utf8).write(to: file)
        let before = try b.fullDump()
        try Self.expectRejectedAndQuarantined(b.apply(file), file: file, replica: b, before: before)
    }

    @Test func diffViolatingNotNull_isRejected_databaseUnchanged_fileQuarantined() throws {
        let box = try Sandbox("notnull")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let (thingsDef, thingsChange) = try Self.validThingsChange(b)
        let conn = try Connection(path: b.dbURL.path, mode: .readOnly)
        let requests = try #require(try TableDefinition.read(table: "requests", from: conn))
        let file = try Self.handMadeDiff(in: box.path("incoming"), tables: [thingsDef, requests], rows: [
            thingsChange,
            RowChange(table: "requests", operation: .upsert,
                      values: [.integer(99), .text("acc"), .null, .text("lookup"), .text("pending"), .null], clock: .zero,
                      born: Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: "x")),
        ])
        let before = try b.fullDump()
        let report = b.apply(file)
        try Self.expectRejectedAndQuarantined(report, file: file, replica: b, before: before)
        #expect(report.reason?.localizedCaseInsensitiveContains("NOT NULL") == true, "\(report.reason ?? "")")
        #expect(try b.value("SELECT title FROM things WHERE \(Self.thingKey)") == .text("Headphones"))
    }
}
