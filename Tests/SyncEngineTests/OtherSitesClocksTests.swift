import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// A diff can carry clocks of sites other than its author's: a snapshot merged by a catch-up holds every device's
/// rows, a row relayed by a device that did not make it keeps its maker's clocks. This device's clock moves past all
/// of them, so its next edit of such a row is later than what it holds. Found by the CLI chaos harness (seed 3681): a
/// device that joined from the bucket edited a row made on a device whose clock ran 30 minutes ahead; its clock had
/// moved past its author's clocks only, so the edit was stamped before the row's birth, every other device kept the
/// old value (logging the edit as the loser) and this one kept its own.
@Suite("Clocks of other sites in a diff")
struct OtherSitesClocksTests {
    let k = BulkKnownRowsTests()

    /// A diff by `site` of notes n0…n39 made on another device, with that device's `clock`.
    func relayed(_ box: Sandbox, by site: String, clock: Clock) throws -> URL {
        let w = try k.writer(box, site: site)
        try w.addTable(BulkKnownRowsTests.notes)
        for i in 0..<40 {
            try w.append(RowChange(table: "notes", operation: .upsert, values: [.text("n\(i)"), .text("body"), .null, .integer(Int64(i))], clock: clock, born: clock))
        }
        return try w.finish()
    }

    @Test(arguments: [false, true])
    func editAfterMergingAnotherSitesRow_isLaterThanThatRow(setPaths: Bool) throws {
        let box = try Sandbox("other-sites-clocks")
        let device = try k.device(box, "B")
        device.db.bulkApply = setPaths
        if setPaths { device.db.bulkApplyMinimumBytes = 0 }
        // Author "other" relays rows made on "ahead", whose clock runs ten minutes ahead of everyone's.
        let ahead = k.clock(-600_000, "ahead")
        #expect(device.apply(try relayed(box, by: "other", clock: ahead)).status == .applied)
        try device.exec("UPDATE notes SET body = 'edited' WHERE id = 'n0'")
        let edit = try #require(try device.value("SELECT hlc FROM rtsync_changes ORDER BY seq DESC LIMIT 1")?.int64)
        #expect(edit > ahead.hlc.rawValue, "the local edit (\(HLC(rawValue: edit))) must be later than the row it edits (\(ahead.hlc))")
        // Another device holding the same rows takes the edit.
        let other = try k.device(box, "C")
        #expect(other.apply(try relayed(box, by: "relay", clock: ahead)).status == .applied)
        // (The value it replaces may be logged as a conflict: this device's `seen` names the sites of the diffs it
        // applied, not every site whose clocks they carried. Logged, not lost.)
        let report = other.apply(try device.exportFile())
        #expect(report.status == .applied && report.updated == 1, "\(report)")
        #expect(try other.value("SELECT body FROM notes WHERE id = 'n0'") == .text("edited"))
    }
}
