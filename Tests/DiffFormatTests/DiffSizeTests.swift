import DiffFormat
import Foundation
import RTSQLite
import Testing

@Suite("Diff size")
struct DiffSizeTests {
    func size(_ url: URL) throws -> Int64 {
        try #require((try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.int64Value)
    }

    @Test func oneRowDiff_isUnderEightKilobytes() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 1, expectedRows: 1)
        let bytes = try size(url)
        print("size: 1-row diff = \(bytes) bytes")
        #expect(bytes < 8 * 1024)
        #expect(try DiffReader(url: url).counts["items"]?.upserts == 1)
    }

    @Test func tenThousandRowDiff_ofFiveColumns_isValidAndComplete() throws {
        let dir = try TemporaryDirectory()
        let table = TableDefinition(name: "notes", columns: [
            ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
            ColumnDefinition(name: "title", type: "TEXT"),
            ColumnDefinition(name: "score", type: "REAL"),
            ColumnDefinition(name: "count", type: "INTEGER"),
            ColumnDefinition(name: "tag", type: "TEXT"),
        ])
        let writer = try DiffWriter(directory: dir.url, kind: .changes, authorUser: "user-1", authorSite: authorSite,
                                    sequence: 1...10_000, createdAt: fixedCreatedAt, expectedRows: 10_000)
        try writer.addTable(table)
        let hlc = HLC(milliseconds: 1_750_000_000_000, counter: 0).rawValue
        for i in 0..<10_000 {
            let clock = Clock(hlc: HLC(rawValue: hlc + Int64(i)), site: authorSite)
            try writer.append(RowChange(table: "notes", operation: .upsert,
                                        values: [.integer(Int64(i)), .text("Note number \(i)"), .real(Double(i) / 7), .integer(Int64(i * 3)), .text("tag\(i % 10)")],
                                        clock: clock, born: clock))
        }
        let url = try writer.finish()
        let bytes = try size(url)
        print("size: 10,000-row diff (5 columns) = \(bytes) bytes")
        let reader = try DiffReader(url: url)
        #expect(reader.counts["notes"] == OperationCounts(upserts: 10_000, deletes: 0))
        var last: [SQLValue] = []
        var n = 0
        try reader.forEachChange { last = $0.values; n += 1 }
        #expect(n == 10_000)
        #expect(last == [.integer(9_999), .text("Note number 9999"), .real(9_999.0 / 7), .integer(29_997), .text("tag9")])
    }
}
