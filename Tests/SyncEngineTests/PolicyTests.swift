import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

@Suite("Per-table policies")
struct PolicyTests {
    static let policies: [String: TablePolicy] = [
        "logs": TablePolicy(.appendOnly),
        "routines": TablePolicy(.ownerOnly, ownerColumn: "owner_id"),
    ]
    static let logA = "2siG1aaaaaaaaaaaaaaaaaaaaaa", logB = "2siG1bbbbbbbbbbbbbbbbbbbbbb"
    static let routineA = "2siG0aaaaaaaaaaaaaaaaaaaaaa", routineB = "2siG0bbbbbbbbbbbbbbbbbbbbbb"

    @Test func appendOnly_remoteUpdateAndDeleteRefusedAndLogged_newInsertAccepted() throws {
        let box = try Sandbox("append")
        let a = try box.replica("A", fixture: "routines-logs", user: "userA", policies: Self.policies)
        let b = try box.replica("B", fixture: "routines-logs", user: "userB", policies: Self.policies)
        try a.exec("UPDATE logs SET message = 'ran 50 km' WHERE id = ?", [.text(Self.logA)])
        try a.exec("DELETE FROM logs WHERE id = ?", [.text(Self.logB)])
        try a.exec("INSERT INTO logs VALUES ('2siG1ccccccccccccccccccccc', ?, 'userA', '2025-01-02T07:00:00Z', 'ran 3 km')", [.text(Self.routineA)])
        let report = b.apply(try a.exportFile())
        #expect(report.status == .applied)
        #expect(report.inserted == 1 && report.updated == 0 && report.deleted == 0)
        #expect(try b.value("SELECT message FROM logs WHERE id = ?", [.text(Self.logA)]) == .text("ran 5 km"))
        #expect(try b.value("SELECT count(*) FROM logs WHERE id = ?", [.text(Self.logB)]) == .integer(1))
        #expect(try b.value("SELECT message FROM logs WHERE id = '2siG1ccccccccccccccccccccc'") == .text("ran 3 km"))
        let logged = try b.conflicts(table: "logs")
        #expect(logged.contains { $0.key == "'\(Self.logA)'" && $0.column == "message" && $0.remoteValue == .text("ran 50 km") && $0.winner == "local" && $0.reason.contains("append-only") })
        #expect(logged.contains { $0.key == "'\(Self.logB)'" && $0.column == "" && $0.winner == "local" && $0.reason.contains("append-only") })
    }

    @Test func ownerOnly_changeFromNonOwnerRefusedAndLogged_ownersChangeAccepted() throws {
        let box = try Sandbox("owner")
        let a = try box.replica("A", fixture: "routines-logs", user: "userA", policies: Self.policies)
        let b = try box.replica("B", fixture: "routines-logs", user: "userB", policies: Self.policies)
        // userA edits its own routine and userB's routine, and deletes userB's routine's schedule row... (delete below)
        try a.exec("UPDATE routines SET schedule = '0 6 * * *' WHERE id = ?", [.text(Self.routineA)])
        try a.exec("UPDATE routines SET name = 'Water ALL plants' WHERE id = ?", [.text(Self.routineB)])
        let report = b.apply(try a.exportFile())
        #expect(report.status == .applied)
        #expect(try b.value("SELECT schedule FROM routines WHERE id = ?", [.text(Self.routineA)]) == .text("0 6 * * *"))
        #expect(try b.value("SELECT name FROM routines WHERE id = ?", [.text(Self.routineB)]) == .text("Water plants"))
        let logged = try b.conflicts(table: "routines")
        #expect(logged.count == 1)
        #expect(logged.first?.key == "'\(Self.routineB)'")
        #expect(logged.first?.column == "name")
        #expect(logged.first?.remoteValue == .text("Water ALL plants"))
        #expect(logged.first?.winner == "local")
        #expect(logged.first?.reason.contains("owner") == true)
    }

    @Test func ownerOnly_deleteFromNonOwnerRefused_deleteFromOwnerAccepted() throws {
        let box = try Sandbox("owner-del")
        let a = try box.replica("A", fixture: "routines-logs", user: "userA", policies: Self.policies)
        let b = try box.replica("B", fixture: "routines-logs", user: "userB", policies: Self.policies)
        try a.exec("DELETE FROM routines WHERE id = ?", [.text(Self.routineB)])
        try a.exec("DELETE FROM routines WHERE id = ?", [.text(Self.routineA)])
        let report = b.apply(try a.exportFile())
        #expect(report.status == .applied)
        #expect(report.deleted == 1)
        #expect(try b.value("SELECT count(*) FROM routines WHERE id = ?", [.text(Self.routineA)]) == .integer(0))
        #expect(try b.value("SELECT count(*) FROM routines WHERE id = ?", [.text(Self.routineB)]) == .integer(1))
        #expect(try b.conflicts(table: "routines").contains { $0.key == "'\(Self.routineB)'" && $0.column == "" && $0.winner == "local" })
    }

    @Test func remoteWins_overwritesUnexportedLocalEdit_andLogsIt() throws {
        let box = try Sandbox("remotewins")
        let p = ["translations": TablePolicy(.remoteWins)]
        let a = try box.replica("A", fixture: "record-thing-demo", policies: p)
        let b = try box.replica("B", fixture: "record-thing-demo", policies: p)
        try a.exec("UPDATE translations SET value = 'Dinger' WHERE lang = 'de' AND key = 'ui.things'")
        try b.exec("UPDATE translations SET value = 'Sachen' WHERE lang = 'de' AND key = 'ui.things'")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.value("SELECT value FROM translations WHERE lang = 'de' AND key = 'ui.things'") == .text("Dinger"))
        #expect(try b.conflicts(table: "translations").contains { $0.localValue == .text("Sachen") && $0.winner == "remote" })
    }

    @Test func localWins_keepsColumnChangedHere_takesOtherColumns() throws {
        let box = try Sandbox("localwins")
        let p = ["things": TablePolicy(.localWins)]
        let a = try box.replica("A", fixture: "record-thing-demo", policies: p)
        let b = try box.replica("B", fixture: "record-thing-demo", policies: p)
        let key = "id = '2siF0NDzx8GWL1tBd6vx9shlVBj'"
        try b.exec("UPDATE things SET title = 'mine' WHERE \(key)")
        _ = try b.export()
        tick()
        try a.exec("UPDATE things SET title = 'theirs', color = 'gold' WHERE \(key)")
        #expect(b.apply(try a.exportFile()).status == .applied)
        #expect(try b.rows("SELECT title, color FROM things WHERE \(key)") == [[.text("mine"), .text("gold")]])
        #expect(try b.conflicts(table: "things").contains { $0.column == "title" && $0.remoteValue == .text("theirs") && $0.winner == "local" })
    }

    @Test func lwwRow_laterRowWinsWhole() throws {
        let box = try Sandbox("lwwrow")
        let p = ["things": TablePolicy(.lwwRow)]
        let a = try box.replica("A", fixture: "record-thing-demo", policies: p)
        let b = try box.replica("B", fixture: "record-thing-demo", policies: p)
        let key = "id = '2siF0NDzx8GWL1tBd6vx9shlVBj'"
        try exchangeConcurrentEdits(a, "UPDATE things SET color = 'gold' WHERE \(key)", then: b, "UPDATE things SET title = 'Notebook' WHERE \(key)")
        // Row-level: B's later row version wins whole, so A's concurrent colour change is gone on both.
        for r in [a, b] {
            #expect(try r.rows("SELECT title, color FROM things WHERE \(key)") == [[.text("Notebook"), .text("silver")]], "on \(r.name)")
        }
        try expectSameData(a, b)
    }

    @Test func customResolver_decidesColumnConflict_onBothReplicas() throws {
        let box = try Sandbox("resolver")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        // Keep the longer title, whatever the clocks say.
        let longer: ConflictResolver = { ctx in
            let l = ctx.localValue.string ?? "", r = ctx.remoteValue.string ?? ""
            return (r.count, r) > (l.count, l) ? .acceptRemote : .keepLocal
        }
        a.db.setResolver(for: "things", longer)
        b.db.setResolver(for: "things", longer)
        let key = "id = '2siF0NDzx8GWL1tBd6vx9shlVBj'"
        try exchangeConcurrentEdits(a, "UPDATE things SET title = 'A much longer title' WHERE \(key)", then: b, "UPDATE things SET title = 'short' WHERE \(key)")
        for r in [a, b] {
            #expect(try r.value("SELECT title FROM things WHERE \(key)") == .text("A much longer title"), "on \(r.name)")
        }
        #expect(try b.conflicts(table: "things").contains { $0.losingValue == .text("short") })
    }

    @Test func policyConfigFile_loadsAndRejectsUnknownPolicy() throws {
        let box = try Sandbox("config")
        let good = box.path("good.json"), bad = box.path("bad.json")
        try Data(#"{"tables": {"logs": {"policy": "append-only"}, "routines": {"policy": "owner-only", "ownerColumn": "owner_id"}}}"#.utf8).write(to: good)
        try Data(#"{"tables": {"logs": {"policy": "first-wins"}}}"#.utf8).write(to: bad)
        let loaded = try PolicyConfig.load(from: good)
        #expect(loaded["logs"]?.policy == .appendOnly)
        #expect(loaded["routines"] == TablePolicy(.ownerOnly, ownerColumn: "owner_id"))
        #expect(throws: SyncEngineError.self) { try PolicyConfig.load(from: bad) }
        let a = try box.replica("A", fixture: "routines-logs")
        try a.db.applyPolicies(loaded)
        #expect(try a.db.trackedTables().first { $0.name == "logs" }?.policy.policy == .appendOnly)
    }
}
