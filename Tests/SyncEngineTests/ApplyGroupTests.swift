import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

/// Catch-up: `apply(diffs:)` applies runs of small diffs in one transaction, each in a savepoint
/// (SyncDatabase+Groups). The result must be exactly what applying them one at a time gives.
@Suite("Apply in groups")
struct ApplyGroupTests {
    static let headphones = "account_id = '2siEySuKO1wK4XiJHWQ0YxhLxd2' AND id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'"

    /// Twenty one-row diffs made on A: edits of one row, inserts and deletes of translations.
    static func oneRowDiffs(_ a: Replica) throws -> [URL] {
        var files: [URL] = []
        for i in 0..<20 {
            switch i % 4 {
            case 0: try a.exec("UPDATE things SET title = ? WHERE \(headphones)", [.text("title \(i)")])
            case 1, 2: try a.exec("INSERT INTO translations VALUES ('fr', ?, ?, 'ui')", [.text("k\(i)"), .text("v\(i)")])
            default: try a.exec("DELETE FROM translations WHERE key = ?", [.text("k\(i - 1)")])
            }
            files.append(try a.exportFile())
            tick()
        }
        return files
    }

    /// The applied-diff records without their times.
    static func appliedRecords(_ r: Replica) throws -> [[SQLValue]] {
        try r.rows("SELECT diff_id, kind, author_user, author_site, seq_first, seq_last, inserted, updated, deleted, conflicts FROM rtsync_applied ORDER BY diff_id")
    }

    @Test func manySmallDiffs_appliedInGroups_sameRowsAndRecordsAsOneAtATime() throws {
        let box = try Sandbox("groups")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let grouped = try box.replica("B", fixture: "record-thing-demo")
        let single = try box.replica("C", fixture: "record-thing-demo")
        let files = try Self.oneRowDiffs(a)
        let reports = grouped.db.apply(diffs: files.reversed(), quarantine: grouped.quarantine)
        #expect(reports.count == files.count)
        #expect(reports.allSatisfy { $0.status == .applied }, "\(reports.map { $0.reason ?? "" })")
        let singleReports = files.map { single.db.apply(diff: $0, quarantine: single.quarantine) }
        #expect(reports.map(\.diffID) == singleReports.map(\.diffID))
        #expect(reports.map { [$0.inserted, $0.updated, $0.deleted, $0.conflicts] } == singleReports.map { [$0.inserted, $0.updated, $0.deleted, $0.conflicts] })
        #expect(firstDifference(try grouped.dump(), try single.dump()) == nil)
        #expect(try grouped.dump() == a.dump())
        #expect(try Self.appliedRecords(grouped) == Self.appliedRecords(single))
        #expect(try grouped.rows("SELECT tid, pk, col, hlc, site FROM rtsync_clocks ORDER BY 1, 2, 3") == single.rows("SELECT tid, pk, col, hlc, site FROM rtsync_clocks ORDER BY 1, 2, 3"))
        // Nothing echoed, and a second pass skips every diff.
        #expect(try grouped.db.pendingChangeCount() == 0)
        #expect(grouped.db.apply(diffs: files).allSatisfy { $0.status == .skipped })
    }

    @Test func badDiffInGroup_isQuarantined_andTheOthersLand() throws {
        let box = try Sandbox("group-bad")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let c = try box.replica("C", fixture: "record-thing-demo")
        var files = try Self.oneRowDiffs(a)
        // The sixth diff is damaged in transit (after its first page), in a copy beside the others.
        let incoming = box.path("incoming")
        try FileManager.default.createDirectory(at: incoming, withIntermediateDirectories: true)
        files = try files.map { f in
            let copy = incoming.appendingPathComponent(f.lastPathComponent)
            try FileManager.default.copyItem(at: f, to: copy)
            return copy
        }
        var bytes = [UInt8](try Data(contentsOf: files[5]))
        for i in stride(from: bytes.count / 2, to: bytes.count, by: 1) { bytes[i] ^= 0xA5 }
        try Data(bytes).write(to: files[5])
        let reports = b.db.apply(diffs: files, quarantine: b.quarantine)
        #expect(reports.count == files.count)
        #expect(reports[5].status == .rejected)
        let moved = try #require(reports[5].quarantinedTo)
        #expect(FileManager.default.fileExists(atPath: moved))
        #expect(reports.enumerated().allSatisfy { $0.offset == 5 || $0.element.status == .applied })
        // The same as applying the good ones one at a time; the bad one is not recorded as applied.
        for (i, f) in files.enumerated() where i != 5 { #expect(c.db.apply(diff: f).status == .applied) }
        #expect(firstDifference(try b.dump(), try c.dump()) == nil)
        #expect(try Self.appliedRecords(b) == Self.appliedRecords(c))
        #expect(try b.value("SELECT count(*) FROM rtsync_applied WHERE diff_id = ?", [.text(reports[5].diffID ?? "?")]) == .integer(0))
    }

    /// A base with a parent and a child table (foreign key), tracked on every replica made from it.
    static func familyBase(_ box: Sandbox) throws -> URL {
        let url = box.path("family.sqlite")
        let c = try Connection(path: url.path, mode: .readWriteCreate)
        try c.execute("CREATE TABLE parent(id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE child(id TEXT PRIMARY KEY, parent INTEGER REFERENCES parent(id), note TEXT); CREATE TABLE other(id INTEGER PRIMARY KEY, v TEXT)")
        return url
    }

    @Test func diffWaitingForAParentInGroup_isDeferredAlone_andAppliedOnceTheParentArrives() throws {
        let box = try Sandbox("group-fk")
        let base = try Self.familyBase(box)
        let a = try box.replica("A", source: base, user: "u")
        let c = try box.replica("C", source: base, user: "u")
        let b = try box.replica("B", source: base, user: "u")
        try a.exec("INSERT INTO parent VALUES (1, 'p')")
        let parentDiff = try a.exportFile()
        #expect(c.apply(parentDiff).status == .applied)
        tick()
        var files: [URL] = []
        try c.exec("INSERT INTO other VALUES (1, 'x')"); files.append(try c.exportFile()); tick()
        try c.exec("INSERT INTO child VALUES ('c1', 1, 'n')"); files.append(try c.exportFile()); tick()
        try c.exec("INSERT INTO other VALUES (2, 'y')"); files.append(try c.exportFile()); tick()
        // B has not got the parent: the child's diff waits, the diffs around it in the group land.
        let reports = b.db.apply(diffs: files, quarantine: b.quarantine)
        #expect(reports.map(\.status) == [.applied, .deferred, .applied], "\(reports.map { $0.reason ?? "" })")
        #expect(try b.value("SELECT count(*) FROM other") == .integer(2))
        #expect(try b.value("SELECT count(*) FROM child") == .integer(0))
        #expect(!FileManager.default.fileExists(atPath: b.quarantine.appendingPathComponent(files[1].lastPathComponent).path))
        // With the parent's diff in the batch, everything lands.
        let again = b.db.apply(diffs: [files[1], parentDiff], quarantine: b.quarantine)
        #expect(again.allSatisfy { $0.status == .applied }, "\(again.map { $0.reason ?? "" })")
        #expect(try b.value("SELECT parent FROM child WHERE id = 'c1'") == .integer(1))
    }

    @Test func stopAskedInTheMiddleOfAGroup_commitsTheDiffsDone_andLeavesTheRestUnapplied() throws {
        let box = try Sandbox("group-stop")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let files = try Self.oneRowDiffs(a)
        let started = Counter()
        let reports = b.db.apply(diffs: files, quarantine: b.quarantine, shouldStop: { started.value >= 7 }) { _, _, _ in started.add() }
        #expect(reports.count == 7)
        #expect(reports.allSatisfy { $0.status == .applied })
        #expect(try b.value("SELECT count(*) FROM rtsync_applied WHERE diff_id IN (\(files.map { "'\(DiffFile.diffID(fromFileName: $0.lastPathComponent)!.string)'" }.joined(separator: ",")))") == .integer(7))
        // The rest applies on the next pass, and the end state is A's.
        #expect(b.db.apply(diffs: files).filter { $0.status == .applied }.count == files.count - 7)
        #expect(try b.dump() == a.dump())
    }
}

/// A count shared with a `@Sendable` closure.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
    func add() { lock.lock(); n += 1; lock.unlock() }
}
