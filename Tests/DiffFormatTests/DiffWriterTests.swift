import DiffFormat
import Foundation
import RTSQLite
import Testing

@Suite("DiffWriter")
struct DiffWriterTests {
    let clock = Clock(hlc: HLC(milliseconds: 1_750_000_000_000, counter: 0), site: authorSite)

    func writer(_ dir: TemporaryDirectory, id: KSUID = .generate()) throws -> DiffWriter {
        try DiffWriter(directory: dir.url, id: id, kind: .changes, authorUser: "u", authorSite: authorSite, createdAt: fixedCreatedAt)
    }

    func isWriteFailed(_ error: any Error) -> Bool {
        if case DiffFormatError.writeFailed = error { return true }
        return false
    }

    @Test func addTable_reservedName_throwsInvalidTableDefinition() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        let def = TableDefinition(name: "rtsync_rows", columns: [ColumnDefinition(name: "id", primaryKey: 1)])
        #expect(performing: { try w.addTable(def) }, throws: { error in
            guard case DiffFormatError.invalidTableDefinition(_, "rtsync_rows", _) = error else { return false }
            return true
        })
    }

    @Test func addTable_columnsTakingEveryRowidAlias_throwsInvalidTableDefinition() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        let def = TableDefinition(name: "t", columns: [ColumnDefinition(name: "rowid", primaryKey: 1), ColumnDefinition(name: "_rowid_"), ColumnDefinition(name: "oid")])
        #expect(performing: { try w.addTable(def) }, throws: { error in
            guard case DiffFormatError.invalidTableDefinition(_, "t", _) = error else { return false }
            return true
        })
    }

    @Test func roundTrip_tableWithColumnsNamedRowidAndOid_readsValuesNotRowids() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        let def = TableDefinition(name: "t", columns: [ColumnDefinition(name: "rowid", type: "TEXT", primaryKey: 1), ColumnDefinition(name: "oid", type: "INTEGER")])
        try w.addTable(def)
        try w.append(RowChange(table: "t", operation: .upsert, values: [.text("k1"), .integer(500)], clock: clock, born: clock))
        try w.append(RowChange(table: "t", operation: .upsert, values: [.text("k2"), .integer(600)], clock: clock, born: clock))
        let read = try DiffReader(url: try w.finish()).changes()
        #expect(read.map(\.values) == [[.text("k1"), .integer(500)], [.text("k2"), .integer(600)]])
    }

    @Test func append_beforeAddTable_throwsWriteFailed() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        #expect(performing: {
            try w.append(RowChange(table: "items", operation: .upsert, values: [.integer(1), .null, .null], clock: clock, born: clock))
        }, throws: isWriteFailed)
    }

    @Test func append_wrongValueCount_throwsWriteFailed() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        try w.addTable(itemsTable)
        #expect(performing: {
            try w.append(RowChange(table: "items", operation: .upsert, values: [.integer(1), .null], clock: clock, born: clock))
        }, throws: isWriteFailed)
    }

    @Test func append_changedColumnNotInTable_throwsWriteFailed() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        try w.addTable(itemsTable)
        #expect(performing: {
            try w.append(RowChange(table: "items", operation: .upsert, values: [.integer(1), .null, .null], changedColumns: ["nope"], clock: clock, born: clock))
        }, throws: isWriteFailed)
    }

    @Test func append_realNaN_writerRejectsOrDiffOpens() throws {
        // SQLite stores NaN as NULL; the writer must not produce a file its own reader then rejects.
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        try w.addTable(itemsTable)
        do {
            try w.append(RowChange(table: "items", operation: .upsert, values: [.integer(1), .real(.nan), .null], clock: clock, born: clock))
        } catch {
            #expect(isWriteFailed(error))
            return
        }
        let url = try w.finish()
        #expect(openingError(url) == nil)
    }

    @Test func finish_calledTwice_throwsWriteFailed() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        try w.addTable(itemsTable)
        _ = try w.finish()
        #expect(performing: { _ = try w.finish() }, throws: isWriteFailed)
    }

    @Test func cancel_leavesNoFilesBehind() throws {
        let dir = try TemporaryDirectory()
        let w = try writer(dir)
        try w.addTable(itemsTable)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).count == 1)
        w.cancel()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).isEmpty)
    }

    @Test func init_missingDirectory_throwsWriteFailed() throws {
        let dir = try TemporaryDirectory()
        #expect(performing: {
            _ = try DiffWriter(directory: dir.file("no/such/folder"), kind: .changes, authorUser: "u", authorSite: authorSite)
        }, throws: isWriteFailed)
    }
}
