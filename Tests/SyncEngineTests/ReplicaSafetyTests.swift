import DiffFormat
import Foundation
import RTSQLite
@testable import SyncEngine
import Testing

/// Apply under a busy database, hostile file types and sequence numbers: nothing is lost, nothing hangs.
@Suite("Replica safety: busy databases, FIFOs, sequence gaps")
struct ReplicaSafetyTests {
    static func pair(_ box: Sandbox) throws -> (Replica, Replica) {
        let base = try ConvergencePropertyTests.makeBase(in: box, uniqueA: false)
        return (try box.replica("A", source: base), try box.replica("B", source: base))
    }

    @Test func busyDatabase_defersTheDiff_neverQuarantinesIt() throws {
        let box = try Sandbox("safety-busy")
        let (a, b) = try Self.pair(box)
        try a.exec("UPDATE items SET a = 'from A' WHERE id = 'k0'")
        let file = try a.exportFile()
        let app = try Connection(path: b.dbURL.path, mode: .readWrite)
        try app.execute("BEGIN IMMEDIATE")
        b.db.setBusyTimeoutForTesting(milliseconds: 50)
        let report = b.apply(file)
        #expect(report.status == .deferred, "\(report)")
        #expect(report.reason?.contains("busy") == true)
        #expect(FileManager.default.fileExists(atPath: file.path), "the diff stays where it was")
        #expect(report.quarantinedTo == nil)
        try app.execute("COMMIT")
        #expect(b.apply(file).status == .applied)
        #expect(try b.value("SELECT a FROM items WHERE id = 'k0'") == .text("from A"))
    }

    @Test func fifoNamedLikeADiff_isRefused_withoutHanging() throws {
        let box = try Sandbox("safety-fifo")
        let (_, b) = try Self.pair(box)
        let fifo = box.path(DiffFile.fileName(for: KSUID.generate()))
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var report: ApplyReport?
        Thread.detachNewThread {
            report = b.db.apply(diff: fifo)
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 20) == .success, "apply of a FIFO hung")
        #expect(report?.status == .rejected)
        #expect(report?.reason?.contains("not a regular file") == true, "\(report?.reason ?? "")")
    }

    /// Found by a diff fuzzer: `rtsync diff apply` of a FIFO (or of a folder holding one under a diff's name) was
    /// rejected, then hung copying it into quarantine (the copy opened the FIFO and waited for a writer).
    @Test func quarantiningACopyOfAFIFOOrAFolder_keepsTheReasonAndReturns() throws {
        let box = try Sandbox("safety-quarantine-fifo")
        let fifo = box.path("3MirsnHcSwlbWOXh5okh3IINGmh.sqlite")
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let folder = box.path("3MisUq7tGcYKerdzZ2xRuwRcCt2.sqlite")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let quarantine = box.path("quarantine")
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var kept: [String?] = []
        Thread.detachNewThread {
            for url in [fifo, folder] { kept.append(SyncDatabase.quarantine(url, folder: quarantine, reason: "not a regular file", keepingOriginal: true)) }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 20) == .success, "quarantine of a FIFO hung")
        #expect(kept.allSatisfy { $0?.hasSuffix(".reason.txt") == true }, "\(kept)")
        let names = try FileManager.default.contentsOfDirectory(atPath: quarantine.path).sorted()
        #expect(names == [fifo.lastPathComponent + ".reason.txt", folder.lastPathComponent + ".reason.txt"].sorted())
    }

    /// Found by a diff fuzzer: a bad diff left in the bucket is downloaded and rejected by every sync, and each
    /// rejection added another copy to the quarantine folder, without bound. The same file is kept once.
    @Test func theSameFileRejectedAgain_isKeptOnceInQuarantine() throws {
        let box = try Sandbox("safety-quarantine-again")
        let quarantine = box.path("quarantine")
        for round in 0..<3 {
            let file = box.path("3MirsnHcSwlbWOXh5okh3IINGmh.sqlite")
            try Data("not a diff".utf8).write(to: file)
            #expect(SyncDatabase.quarantine(file, folder: quarantine, reason: "round \(round)", keepingOriginal: round == 1) != nil)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: quarantine.path).sorted()
        #expect(names == ["3MirsnHcSwlbWOXh5okh3IINGmh.sqlite", "3MirsnHcSwlbWOXh5okh3IINGmh.sqlite.reason.txt"])
        // Another file under the same name still gets a place of its own.
        let other = box.path("3MirsnHcSwlbWOXh5okh3IINGmh.sqlite")
        try Data("another bad file".utf8).write(to: other)
        _ = SyncDatabase.quarantine(other, folder: quarantine, reason: "other", keepingOriginal: false)
        #expect(try FileManager.default.contentsOfDirectory(atPath: quarantine.path).count == 4)
    }

    @Test func diffClaimingAHugeSequenceNumber_givesBoundedGapsQuickly() throws {
        let box = try Sandbox("safety-gaps")
        let (_, b) = try Self.pair(box)
        let folder = box.path("forged")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for seq: Int64 in [1, 4_000_000_000_000_000_000] {
            let w = try DiffWriter(directory: folder, kind: .changes, authorUser: "user-B", authorSite: "site-X", sequence: seq...seq)
            let source = try Connection(path: b.dbURL.path, mode: .readOnly)
            try w.addTable(try #require(try TableDefinition.read(table: "items", from: source)))
            #expect(b.apply(try w.finish()).status == .applied)
        }
        // Enumerating every missing number (the old way) would not finish: bounded ranges return at once.
        let gaps = try b.db.sequenceGaps()
        #expect(gaps["site-X"]?.count == SyncDatabase.maxListedGaps)
        #expect(gaps["site-X"]?.first == 2)
    }

    /// Found by a diff fuzzer: a range ending at Int64.max, then any later one of the site, made `rtsync status`
    /// trap on every run (`covered + 1` overflowed).
    @Test func diffClaimingARangeUpToTheLargestSequenceNumber_thenAnother_givesGapsWithoutTrapping() throws {
        let box = try Sandbox("safety-gaps-max")
        let (_, b) = try Self.pair(box)
        let folder = box.path("forged")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for range: ClosedRange<Int64> in [1...1, 3...Int64.max, 5...5] {
            let w = try DiffWriter(directory: folder, kind: .changes, authorUser: "user-B", authorSite: "site-X", sequence: range)
            let source = try Connection(path: b.dbURL.path, mode: .readOnly)
            try w.addTable(try #require(try TableDefinition.read(table: "items", from: source)))
            #expect(b.apply(try w.finish()).status == .applied)
        }
        #expect(try b.db.sequenceGaps() == ["site-X": [2]])
    }

    @Test func diffClaimingToBeThisDevices_recordsNoSequenceNumbers() throws {
        let box = try Sandbox("safety-own")
        let (_, b) = try Self.pair(box)
        let folder = box.path("forged")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let w = try DiffWriter(directory: folder, kind: .changes, authorUser: "user-B", authorSite: try b.db.siteID(), sequence: 9_000_000...9_000_000)
        let report = b.apply(try w.finish())
        #expect(report.status == .skipped)
        #expect(try b.value("SELECT count(*) FROM rtsync_applied WHERE seq_first IS NOT NULL AND seq_first > 1000") == .integer(0))
        #expect(try b.db.sequenceGaps().isEmpty)
    }
}

extension ReplicaSafetyTests {
    /// A table with 1,500 columns (SQLite's limit is 2,000) is tracked, and an update of one column is exported as it.
    @Test func wideTable_isTracked_andUpdatesAreCapturedByColumn() throws {
        let box = try Sandbox("safety-wide")
        let url = box.path("wide.sqlite")
        let columns = (0..<1_500).map { "c\($0) TEXT" }.joined(separator: ", ")
        try Connection(path: url.path).execute("CREATE TABLE sensor(id TEXT PRIMARY KEY NOT NULL, \(columns)); INSERT INTO sensor(id) VALUES ('s1')")
        let a = try box.replica("A", source: url), b = try box.replica("B", source: url)
        try a.exec("UPDATE sensor SET c1234 = 'hot' WHERE id = 's1'")
        let file = try a.exportFile()
        var changes: [RowChange] = []
        try DiffReader(url: file).forEachChange { changes.append($0) }
        #expect(changes.map(\.changedColumns) == [["c1234"]])
        #expect(b.apply(file).status == .applied)
        #expect(try b.value("SELECT c1234 FROM sensor") == .text("hot"))
    }

    /// A diff bringing 400 new tables creates and tracks every one (tracking a table reads back only its own
    /// entry; timing belongs to the benchmark harness, not to a test on a shared machine).
    @Test func diffCreatingManyTables_createsAndTracksEveryTable() throws {
        let box = try Sandbox("safety-tables")
        let (_, b) = try Self.pair(box)
        let folder = box.path("many")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let w = try DiffWriter(directory: folder, kind: .changes, authorUser: "user-B", authorSite: "site-X", sequence: 1...1)
        let clock = Clock(hlc: HLC(milliseconds: HLC.wallMilliseconds(), counter: 0), site: "site-X")
        for i in 0..<400 {
            let def = TableDefinition(name: "t\(i)", columns: [ColumnDefinition(name: "id", type: "TEXT", notNull: true, primaryKey: 1), ColumnDefinition(name: "v", type: "TEXT")])
            try w.addTable(def)
            try w.append(RowChange(table: def.name, operation: .upsert, values: [.text("k"), .text("v\(i)")], clock: clock, born: clock))
        }
        let report = b.apply(try w.finish())
        #expect(report.status == .applied && report.tablesCreated.count == 400)
        #expect(try b.db.trackedTables().count >= 400)
    }
}
