import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

@Suite("Export and apply")
struct ExportApplyTests {
    static let headphones = "account_id = '2siEySuKO1wK4XiJHWQ0YxhLxd2' AND id = '2siF0MQxlcAmWuBgrPsNUQrOdcv'"

    @Test func applyingSameDiffTwice_changesNothing_andReportsSkipped() throws {
        let box = try Sandbox("twice")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("UPDATE things SET title = 'Cans' WHERE \(Self.headphones)")
        try a.exec("INSERT INTO translations VALUES ('fr', 'ui.things', 'Choses', 'ui')")
        let file = try a.exportFile()
        let first = b.apply(file)
        #expect(first.status == .applied)
        #expect(first.inserted == 1 && first.updated == 1)
        let after = try b.fullDump()
        let second = b.apply(file)
        #expect(second.status == .skipped)
        #expect(second.inserted == 0 && second.updated == 0 && second.deleted == 0)
        #expect(try b.fullDump() == after)
        #expect(try b.dump() == a.dump())
        // Applying is not echoed: nothing waits to be exported on B.
        #expect(try b.db.pendingChangeCount() == 0)
        #expect(try b.export() == nil)
    }

    @Test func applyingOwnDiff_isSkippedAndChangesNothing() throws {
        let box = try Sandbox("own")
        let a = try box.replica("A", fixture: "record-thing-demo")
        try a.exec("UPDATE things SET title = 'Cans' WHERE \(Self.headphones)")
        let file = try a.exportFile()
        let before = try a.dump()
        let report = a.apply(file)
        #expect(report.status == .skipped)
        #expect(try a.dump() == before)
        #expect(try a.conflicts().isEmpty)
    }

    @Test func apply_severalFiles_runsInKSUIDOrder() throws {
        let box = try Sandbox("order")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("UPDATE things SET title = 'first' WHERE \(Self.headphones)")
        let f1 = try a.exportFile()
        tick()
        try a.exec("UPDATE things SET title = 'second' WHERE \(Self.headphones)")
        let f2 = try a.exportFile()
        let reports = b.db.apply(diffs: [f2, f1], quarantine: b.quarantine)
        #expect(reports.map(\.file) == [f1.path, f2.path])
        #expect(reports.allSatisfy { $0.status == .applied })
        #expect(try b.value("SELECT title FROM things WHERE \(Self.headphones)") == .text("second"))
        #expect(try b.conflicts().isEmpty)
    }

    @Test func remoteDeleteOfParent_setsLocalChildReferenceToNull() throws {
        let box = try Sandbox("fk")
        let a = try box.replica("A", fixture: "routine-records")
        let b = try box.replica("B", fixture: "routine-records")
        try a.exec("DELETE FROM routine WHERE id = 1")
        let file = try a.exportFile()
        let report = b.apply(file)
        #expect(report.status == .applied, "\(report.reason ?? "")")
        #expect(try b.value("SELECT count(*) FROM routine WHERE id = 1") == .integer(0))
        let records = try b.rows("SELECT id, routine_id, value FROM records ORDER BY id")
        #expect(records == [[.text("r1"), .null, .real(10.0)], [.text("r2"), .null, .real(12.5)], [.text("r3"), .integer(2), .real(30.0)]])
        #expect(try b.dump() == a.dump())
    }

    @Test func remoteDeleteOfParent_childAddedConcurrently_keepsChildWithNullReferenceOnBoth() throws {
        let box = try Sandbox("fk2")
        let a = try box.replica("A", fixture: "routine-records")
        let b = try box.replica("B", fixture: "routine-records")
        try a.exec("DELETE FROM routine WHERE id = 1")
        try b.exec("INSERT INTO records VALUES ('r4', 1, 5.0, 'added on B')")
        let fa = try a.exportFile()
        let fb = try b.exportFile()
        let onB = b.apply(fa)
        let onA = a.apply(fb)
        #expect(onB.status == .applied, "\(onB.reason ?? "")")
        #expect(onA.status == .applied, "\(onA.reason ?? "")")
        #expect(try b.value("SELECT routine_id FROM records WHERE id = 'r4'") == .null)
        #expect(try a.value("SELECT routine_id FROM records WHERE id = 'r4'") == .null)
        try expectSameData(a, b)
        // A third and fourth device receiving the two diffs in either order end the same.
        let c = try box.replica("C", fixture: "routine-records")
        let d = try box.replica("D", fixture: "routine-records")
        #expect(c.apply([fa, fb]).allSatisfy { $0.status == .applied })
        #expect(d.apply([fb, fa]).allSatisfy { $0.status == .applied })
        try expectSameData(a, c)
        try expectSameData(a, d)
    }

    @Test func remoteDeleteOfParent_cascade_childAddedConcurrently_isGoneEverywhere() throws {
        let box = try Sandbox("cascade")
        let base = box.path("base.sqlite")
        do {
            let conn = try Connection(path: base.path)
            try conn.execute("""
                CREATE TABLE lists (id TEXT PRIMARY KEY, title TEXT NOT NULL);
                CREATE TABLE entries (id TEXT PRIMARY KEY, list_id TEXT NOT NULL REFERENCES lists(id) ON DELETE CASCADE, body TEXT);
                INSERT INTO lists VALUES ('l1', 'groceries'), ('l2', 'books');
                INSERT INTO entries VALUES ('e1', 'l1', 'milk'), ('e2', 'l2', 'Dune');
                """)
        }
        let a = try box.replica("A", source: base)
        let b = try box.replica("B", source: base)
        try a.exec("DELETE FROM lists WHERE id = 'l1'")
        try b.exec("INSERT INTO entries VALUES ('e3', 'l1', 'bread')")
        let fa = try a.exportFile()
        let fb = try b.exportFile()
        let onA = a.apply(fb), onB = b.apply(fa)
        #expect(onA.status == .applied, "\(onA.reason ?? "")")
        #expect(onB.status == .applied, "\(onB.reason ?? "")")
        for r in [a, b] {
            #expect(try r.rows("SELECT id FROM entries ORDER BY id") == [[.text("e2")]], "on \(r.name)")
        }
        // The dropped entry is not lost silently on the device that never had it.
        #expect(try a.conflicts(table: "entries").contains { $0.key == "'e3'" })
        try expectSameData(a, b)
    }

    @Test func diffFromNewerSchema_addsColumnAndTable_onOlderReplica() throws {
        let box = try Sandbox("newer")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("ALTER TABLE things ADD COLUMN rating INTEGER")
        try a.exec("CREATE TABLE tags (id TEXT PRIMARY KEY, label TEXT NOT NULL, weight REAL)")
        try a.db.track()
        try a.exec("UPDATE things SET rating = 5 WHERE \(Self.headphones)")
        try a.exec("INSERT INTO tags VALUES ('t1', 'audio', 0.5)")
        try b.db.setPolicy(TablePolicy(addColumns: true), for: "things")
        let report = b.apply(try a.exportFile())
        #expect(report.status == .applied, "\(report.reason ?? "")")
        #expect(report.columnsAdded == ["things.rating"])
        #expect(report.tablesCreated == ["tags"])
        #expect(try b.value("SELECT rating FROM things WHERE \(Self.headphones)") == .integer(5))
        #expect(try b.rows("SELECT id, label, weight FROM tags") == [[.text("t1"), .text("audio"), .real(0.5)]])
        #expect(try b.db.trackedTables().map(\.name).contains("tags"))
        try expectSameData(a, b)
        // The created table and the added column are tracked on B: its edits flow back.
        try b.exec("INSERT INTO tags VALUES ('t2', 'furniture', 1.0)")
        try b.exec("UPDATE things SET rating = 4 WHERE \(Self.headphones)")
        #expect(a.apply(try b.exportFile()).status == .applied)
        #expect(try a.value("SELECT label FROM tags WHERE id = 't2'") == .text("furniture"))
        #expect(try a.value("SELECT rating FROM things WHERE \(Self.headphones)") == .integer(4))
    }

    @Test func diffFromOlderSchema_appliesToNewerReplica_keepingNewColumn() throws {
        let box = try Sandbox("older")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        try a.exec("ALTER TABLE things ADD COLUMN rating INTEGER")
        try a.db.track()
        try a.exec("UPDATE things SET rating = 5 WHERE \(Self.headphones)")
        try b.exec("UPDATE things SET title = 'Cans' WHERE \(Self.headphones)")
        try b.exec("INSERT INTO things(id, account_id, title) VALUES ('2siNEWaaaaaaaaaaaaaaaaaaaaa', '2siEySuKO1wK4XiJHWQ0YxhLxd2', 'Lamp')")
        let fromB = try b.exportFile()
        let report = a.apply(fromB)
        #expect(report.status == .applied, "\(report.reason ?? "")")
        #expect(report.columnsAdded.isEmpty)
        #expect(try a.rows("SELECT title, rating FROM things WHERE \(Self.headphones)") == [[.text("Cans"), .integer(5)]])
        #expect(try a.rows("SELECT title, rating FROM things WHERE id = '2siNEWaaaaaaaaaaaaaaaaaaaaa'") == [[.text("Lamp"), .null]])
        // And back: B, whose policy adds columns, learns the column; both end identical.
        try b.db.setPolicy(TablePolicy(addColumns: true), for: "things")
        #expect(b.apply(try a.exportFile()).status == .applied)
        try expectSameData(a, b)
    }
}
