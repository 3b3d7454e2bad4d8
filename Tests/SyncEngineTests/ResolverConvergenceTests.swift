import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Custom resolvers and convergence (found by a held-out app written from the docs, issue 18): a resolver's choice
/// reaches every device even when only one device saw the edits as concurrent, and values a local edit was made
/// on top of are never handed to the resolver again.
@Suite struct ResolverConvergenceTests {
    static let key = "id = '2siF0NDzx8GWL1tBd6vx9shlVBj'"

    /// Keeps the longer title (ties: the greater), from the values alone.
    static let longer: ConflictResolver = { ctx in
        guard ctx.column == "title" else { return .byClock }
        let l = ctx.localValue.string ?? "", r = ctx.remoteValue.string ?? ""
        return (r.count, r) > (l.count, l) ? .acceptRemote : .keepLocal
    }

    /// Counts the resolver's calls.
    final class Calls: @unchecked Sendable {
        private let lock = NSLock()
        private var n = 0
        func add() { lock.withLock { n += 1 } }
        var count: Int { lock.withLock { n } }
    }

    func title(_ r: Replica) throws -> SQLValue? { try r.value("SELECT title FROM things WHERE \(Self.key)") }

    @Test func resolverChoiceAgainstTheClocks_onOneDeviceOnly_reachesEveryDevice() throws {
        let box = try Sandbox("resolver-three")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let c = try box.replica("C", fixture: "record-thing-demo")
        for r in [a, b, c] { r.db.setResolver(for: "things", Self.longer) }
        // A writes a long title; C sees it and then shortens it (not concurrent: C had seen A's edit).
        try a.exec("UPDATE things SET title = 'A much longer title' WHERE \(Self.key)")
        let fa = try a.exportFile()
        c.apply(fa)
        tick()
        try c.exec("UPDATE things SET title = 'short' WHERE \(Self.key)")
        let fc = try c.exportFile()
        // B gets them the other way round: to B they look concurrent, and its resolver keeps the longer, older one.
        b.apply(fc)
        b.apply(fa)
        a.apply(fc)
        #expect(try title(b) == .text("A much longer title"))
        // B's decision travels as an edit: after one more exchange every device holds it.
        try exchange([a, b, c])
        for r in [a, b, c] { #expect(try title(r) == .text("A much longer title"), "on \(r.name)") }
        try expectSameData(a, b)
        try expectSameData(b, c)
        // The shorter title is not lost: it is in B's conflict log.
        #expect(try b.conflicts(table: "things").contains { $0.losingValue == .text("short") })
    }

    @Test func localEditOnTopOfAValue_isNotAConflict_whenThatValueArrivesAgain() throws {
        let box = try Sandbox("resolver-known")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let calls = Calls()
        a.db.setResolver(for: "things") { ctx in calls.add(); return Self.longer(ctx) }
        try b.exec("UPDATE things SET title = 'Milk, eggs.' WHERE \(Self.key)")
        a.apply(try b.exportFile())
        // B's database as it is now: what a snapshot in the bucket holds (the title with B's clock).
        let snapshot = box.path("snapshot-of-B.sqlite")
        try b.exec("VACUUM INTO '\(snapshot.path)'")
        tick()
        // The user shortens the title on A, knowing B's value; then A merges the snapshot (as after a restore).
        try a.exec("UPDATE things SET title = 'Milk.' WHERE \(Self.key)")
        let before = try a.conflicts().count
        try FileManager.default.createDirectory(at: box.path("scratch"), withIntermediateDirectories: true)
        let report = try a.db.catchUp(from: snapshot, scratch: box.path("scratch"))
        #expect(report.status == .applied || report.status == .skipped, "\(report.status) \(report.reason ?? "")")
        #expect(try title(a) == .text("Milk."))
        #expect(calls.count == 0, "the resolver was asked about a value the edit was made on top of")
        #expect(try a.conflicts().count == before)
        // And the edit still reaches B.
        b.apply(try a.exportFile())
        #expect(try title(b) == .text("Milk."))
    }

    @Test func editAfterARestore_ofAValueTheOldSitePublished_isNotConcurrent_andWinsEverywhere() throws {
        let box = try Sandbox("resolver-restore")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let calls = Calls()
        for r in [a, b] { r.db.setResolver(for: "things") { ctx in calls.add(); return Self.longer(ctx) } }
        try a.exec("UPDATE things SET title = 'Milk, eggs.' WHERE \(Self.key)")
        b.apply(try a.exportFile())
        // A is restored (a new site id; the old one retired), then the user shortens the title there.
        try a.db.regenerateSiteID(afterRestore: true)
        tick()
        try a.exec("UPDATE things SET title = 'Milk.' WHERE \(Self.key)")
        b.apply(try a.exportFile())
        #expect(calls.count == 0, "B took A's edit for a concurrent one")
        for r in [a, b] { #expect(try title(r) == .text("Milk."), "on \(r.name)") }
        #expect(try b.conflicts(table: "things").isEmpty)
    }

    @Test func byClock_decidesAsWithoutAResolver_forColumnsWithoutARule() throws {
        let box = try Sandbox("resolver-byclock")
        let a = try box.replica("A", fixture: "record-thing-demo")
        let b = try box.replica("B", fixture: "record-thing-demo")
        let calls = Calls()
        for r in [a, b] { r.db.setResolver(for: "things") { ctx in calls.add(); return Self.longer(ctx) } }
        try exchangeConcurrentEdits(a, "UPDATE things SET color = 'a much longer colour' WHERE \(Self.key)", then: b, "UPDATE things SET color = 'red' WHERE \(Self.key)")
        #expect(calls.count >= 1, "the edits were concurrent: the resolver was asked")
        // The later edit (B's) wins on both, as without a resolver, and nothing new needs sending.
        for r in [a, b] { #expect(try r.value("SELECT color FROM things WHERE \(Self.key)") == .text("red"), "on \(r.name)") }
        #expect(try a.export() == nil)
        try expectSameData(a, b)
    }
}
