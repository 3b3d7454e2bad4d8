import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// The real Record Thing app database, tracked and synced as it is.
@Suite("Record Thing database", .enabled(if: FileManager.default.fileExists(atPath: recordThingURL.path),
                                         "the Record Thing database is not at ../shared/fixtures/record-thing/ (it is only on the development machine)"))
struct RecordThingTests {
    static let account = "2siEySuKO1wK4XiJHWQ0YxhLxd2"

    @Test func trackAll_tracksEveryTableIncludingPlusName() throws {
        let box = try Sandbox("rt-track")
        let a = try box.replica("A", source: recordThingURL)
        let names = try a.db.trackedTables().map(\.name)
        #expect(names.count == 21, "\(names)")
        #expect(names.contains("test_custom_decoder+validatedColumns"))
        #expect(names.contains("things_old") && names.contains("evidence_old"))
        // Writes to the oddly named table are captured like any other.
        try a.exec("INSERT INTO \"test_custom_decoder+validatedColumns\" VALUES ('rtsync_probe', 'text')")
        #expect(try a.db.pendingChangeCount() == 1)
    }

    @Test func edits_roundTripToAnotherCopy_bothEndIdentical() throws {
        let box = try Sandbox("rt-sync")
        let a = try box.replica("A", source: recordThingURL)
        let b = try box.replica("B", source: recordThingURL)
        let original = try a.dump()
        #expect(try original == b.dump())
        let thing = try #require(try a.rows("SELECT account_id, id FROM things ORDER BY id LIMIT 1").first)
        let evidenceID = KSUID.generate().string
        let requestID = try #require(try a.value("SELECT min(id) FROM requests")?.int64)
        try a.exec("UPDATE things SET title = 'Edited on A', updated_at = 1744800000.25 WHERE account_id = ? AND id = ?", thing)
        try a.exec("INSERT INTO evidence(id, thing_account_id, thing_id, request_id, created_at, data, local_file) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [.text(evidenceID), thing[0], thing[1], .integer(requestID), .real(1744800000.5), .text(#"{"kind":"note"}"#), .text("/images/new.jpg")])
        try a.exec("UPDATE requests SET created_at = '2025-04-16T10:00:00Z' WHERE id = ?", [.integer(requestID)])
        try a.exec("INSERT INTO \"test_custom_decoder+validatedColumns\" VALUES ('rtsync_probe', 'text')")
        let result = try #require(try a.export())
        #expect(result.rows == 4)
        let report = b.apply(URL(fileURLWithPath: result.file))
        #expect(report.status == .applied, "\(report.reason ?? "")")
        #expect(report.inserted == 2 && report.updated == 2)
        #expect(try b.value("SELECT title FROM things WHERE account_id = ? AND id = ?", thing) == .text("Edited on A"))
        #expect(try b.value("SELECT data FROM evidence WHERE id = ?", [.text(evidenceID)]) == .text(#"{"kind":"note"}"#))
        // ISO text in a FLOAT column stays text (no affinity conversion on the way).
        #expect(try b.rows("SELECT typeof(created_at), created_at FROM requests WHERE id = ?", [.integer(requestID)])
                == [[.text("text"), .text("2025-04-16T10:00:00Z")]])
        let dumpA = try a.dump(), dumpB = try b.dump()
        #expect(dumpA == dumpB, "\(firstDifference(dumpA, dumpB) ?? "")")
        #expect(dumpA != original)
        // And a reply from B comes back.
        try b.exec("DELETE FROM evidence WHERE id = ?", [.text(evidenceID)])
        #expect(a.apply(try b.exportFile()).status == .applied)
        #expect(try a.value("SELECT count(*) FROM evidence WHERE id = ?", [.text(evidenceID)]) == .integer(0))
        #expect(try a.dump() == b.dump())
    }
}
