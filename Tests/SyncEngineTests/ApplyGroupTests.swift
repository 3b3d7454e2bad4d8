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

// MARK: - What a group reads once: the same result as each diff alone

extension ApplyGroupTests {
    /// Two tables: on the receivers, `notes` takes the columns of newer app versions (`addColumns`), `things` keeps
    /// them aside.
    static func schemaBase(_ box: Sandbox) throws -> URL {
        let url = box.path("schema.sqlite")
        let c = try Connection(path: url.path, mode: .readWriteCreate)
        try c.execute("""
            CREATE TABLE notes(id TEXT PRIMARY KEY, body TEXT); CREATE TABLE things(id INTEGER PRIMARY KEY, name TEXT);
            INSERT INTO notes VALUES ('n1', 'one'), ('n2', 'two'); INSERT INTO things VALUES (1, 'x');
            """)
        return url
    }

    static let addingNotes = ["notes": TablePolicy(addColumns: true)]

    /// Diffs of A around a migration that adds a column to each table, then a new table: the third and fifth diffs
    /// write into what the second and fourth added.
    static func schemaChangingDiffs(_ a: Replica) throws -> [URL] {
        var files: [URL] = []
        try a.exec("UPDATE notes SET body = 'one, edited' WHERE id = 'n1'")
        files.append(try a.exportFile()); tick()
        try a.db.migrate(sql: "ALTER TABLE notes ADD COLUMN color TEXT; ALTER TABLE things ADD COLUMN size INTEGER")
        try a.exec("UPDATE notes SET color = 'red' WHERE id = 'n1'")
        try a.exec("UPDATE things SET size = 5 WHERE id = 1")
        files.append(try a.exportFile()); tick()
        try a.exec("UPDATE notes SET color = 'blue', body = 'Zebra' WHERE id = 'n2'")
        try a.exec("UPDATE things SET size = 6, name = 'y' WHERE id = 1")
        files.append(try a.exportFile()); tick()
        try a.exec("CREATE TABLE tags(id TEXT PRIMARY KEY, label TEXT)")
        try a.exec("INSERT INTO tags VALUES ('t1', 'first')")
        files.append(try a.exportFile()); tick()
        try a.exec("UPDATE tags SET label = 'first, edited' WHERE id = 't1'")
        try a.exec("INSERT INTO notes VALUES ('n3', 'three', 'green')")
        files.append(try a.exportFile()); tick()
        return files
    }

    @Test func groupWhoseMiddleDiffsAddColumnsAndATable_endsAsOneAtATime_andLaterDiffsWriteIntoThem() throws {
        let box = try Sandbox("group-schema")
        let base = try Self.schemaBase(box)
        let a = try box.replica("A", source: base, user: "u", policies: Self.addingNotes)
        let b = try box.replica("B", source: base, user: "u", policies: Self.addingNotes)
        let files = try Self.schemaChangingDiffs(a)
        // B edited rows of both tables meanwhile, not yet exported.
        try b.exec("UPDATE notes SET body = 'two, here' WHERE id = 'n2'")
        try b.exec("UPDATE things SET name = 'z' WHERE id = 1")
        let pendingBefore = try b.db.pendingChangeCount()
        let twins = try GroupTwins(box, b, policies: Self.addingNotes)
        let reports = try twins.apply(files)
        #expect(reports.map(\.status) == Array(repeating: .applied, count: files.count), "\(reports.map { $0.reason ?? "" })")
        #expect(reports[1].columnsAdded == ["notes.color"])
        #expect(reports[1].columnsKeptAside == ["things.size"])
        #expect(reports[3].tablesCreated == ["tags"])
        let g = twins.grouped
        #expect(try g.rows("SELECT id, color FROM notes ORDER BY id") == [[.text("n1"), .text("red")], [.text("n2"), .text("blue")], [.text("n3"), .text("green")]])
        #expect(try g.value("SELECT label FROM tags WHERE id = 't1'") == .text("first, edited"))
        #expect(try g.db.asideValues(table: "things")["1"]?["size"] == .integer(6))
        // Nothing the group wrote was captured as a local change, and the new table is captured from now on.
        #expect(try g.db.pendingChangeCount() == pendingBefore)
        try g.exec("INSERT INTO tags VALUES ('t2', 'mine')")
        #expect(try g.db.pendingChangeCount() == pendingBefore + 1)
    }

    /// The second diff of the group adds a column and merges its rows before its digest is found wrong: it is rolled
    /// back alone (the column with it), and the diffs after it start from the database as the first one left it.
    @Test func diffRejectedAfterItsSchemaChangeAndRows_isRolledBackAlone_andTheGroupEndsAsOneAtATime() throws {
        let box = try Sandbox("group-late-reject")
        let base = try Self.schemaBase(box)
        let a = try box.replica("A", source: base, user: "u", policies: Self.addingNotes)
        let b = try box.replica("B", source: base, user: "u", policies: Self.addingNotes)
        // Without A's second diff, its third is the first to carry the new columns; it is damaged in one byte of
        // the value of its last row.
        let all = try Self.schemaChangingDiffs(a)
        var files = [all[0], all[2], all[3], all[4]]
        var bytes = [UInt8](try Data(contentsOf: files[1]))
        let needle = Array("Zebra".utf8)
        let at = try #require((0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle })
        bytes[at] = UInt8(ascii: "C")
        let damaged = box.path("incoming").appendingPathComponent(files[1].lastPathComponent)
        try FileManager.default.createDirectory(at: damaged.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: damaged)
        files[1] = damaged
        try b.exec("UPDATE notes SET body = 'one, here' WHERE id = 'n1'")
        let twins = try GroupTwins(box, b, policies: Self.addingNotes)
        let reports = try twins.apply(files)
        let damagedID = DiffFile.diffID(fromFileName: damaged.lastPathComponent)?.string
        let rejected = try #require(reports.first { $0.diffID == damagedID })
        #expect(rejected.status == .rejected && rejected.reason?.contains("digest") == true, "\(rejected)")
        #expect(reports.filter { $0.status == .applied }.count == files.count - 1, "\(reports.map { $0.reason ?? "" })")
        #expect(try twins.grouped.value("SELECT body FROM notes WHERE id = 'n2'") == .text("two"))
        #expect(try twins.grouped.value("SELECT color FROM notes WHERE id = 'n3'") == .text("green"))
    }

    /// Parents deleted with children this device added (ON DELETE CASCADE and SET NULL), UNIQUE values taken by
    /// REPLACE and by a collision with an unexported local row, and a diff waiting for a parent, all in one group:
    /// the decisions the merge captures as local changes along the way are seen by the diffs after it.
    @Test func groupWithForeignKeyActionsUniqueCollisionsAndADeferredDiff_endsAsOneAtATime() throws {
        let box = try Sandbox("group-side-effects")
        let url = box.path("family.sqlite")
        let c = try Connection(path: url.path, mode: .readWriteCreate)
        try c.execute("""
            CREATE TABLE parent(id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE child(id TEXT PRIMARY KEY, parent INTEGER REFERENCES parent(id) ON DELETE CASCADE, note TEXT);
            CREATE TABLE ref(id TEXT PRIMARY KEY, parent INTEGER REFERENCES parent(id) ON DELETE SET NULL);
            CREATE TABLE tag(id TEXT PRIMARY KEY, label TEXT UNIQUE);
            INSERT INTO parent VALUES (1, 'one'), (2, 'two'), (3, 'three'); INSERT INTO child VALUES ('c1', 1, 'n');
            INSERT INTO ref VALUES ('r1', 2); INSERT INTO tag VALUES ('t1', 'a');
            """)
        let a = try box.replica("A", source: url, user: "u")
        let b = try box.replica("B", source: url, user: "u")
        let cr = try box.replica("C", source: url, user: "u")
        try a.exec("INSERT INTO parent VALUES (4, 'four')")
        let parentDiff = try a.exportFile(); tick()
        #expect(cr.apply(parentDiff).status == .applied)
        var files: [URL] = []
        try a.exec("UPDATE parent SET name = 'one, edited' WHERE id = 1"); files.append(try a.exportFile()); tick()
        try a.exec("DELETE FROM parent WHERE id = 1"); files.append(try a.exportFile()); tick()
        try a.exec("INSERT INTO tag VALUES ('t2', 'b')"); files.append(try a.exportFile()); tick()
        try cr.exec("INSERT INTO child VALUES ('c4', 4, 'waits')"); files.append(try cr.exportFile()); tick()
        try a.exec("DELETE FROM parent WHERE id = 2"); files.append(try a.exportFile()); tick()
        try a.exec("UPDATE tag SET label = 'c' WHERE id = 't1'"); try a.exec("INSERT INTO child VALUES ('c5', 3, 'n')"); files.append(try a.exportFile()); tick()
        try a.exec("INSERT OR REPLACE INTO tag VALUES ('t3', 'c')"); files.append(try a.exportFile()); tick()
        try a.exec("UPDATE tag SET label = 'b2' WHERE id = 't2'"); files.append(try a.exportFile()); tick()
        // B, offline, added a child of parent 1, a reference to parent 2, and took the label 'b' first.
        try b.exec("INSERT INTO child VALUES ('c2', 1, 'mine')")
        try b.exec("INSERT INTO ref VALUES ('r2', 2)")
        tick()
        try b.exec("INSERT INTO tag VALUES ('t9', 'b')")
        let twins = try GroupTwins(box, b)
        let reports = try twins.apply(files)
        #expect(reports.map(\.status) == [.applied, .applied, .applied, .deferred, .applied, .applied, .applied, .applied], "\(reports.map { $0.reason ?? "" })")
        let g = twins.grouped
        #expect(try g.value("SELECT count(*) FROM child WHERE id IN ('c1', 'c2')") == .integer(0))
        #expect(try g.value("SELECT parent FROM ref WHERE id = 'r2'") == .null)
        #expect(try !g.conflicts().isEmpty)
    }
}

/// A count shared with a `@Sendable` closure.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
    func add() { lock.lock(); n += 1; lock.unlock() }
}
