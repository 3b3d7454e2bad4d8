import Crypto
import DiffFormat
import Foundation
import RTSQLite
import Testing

/// A roll-up is a diff of kind `rollup` that names the diffs it stands in for (`rtsync_covers`, covered by the digest).
@Suite("Roll-up format")
struct RollupFormatTests {
    static let covered: [CoveredDiff] = [
        CoveredDiff(id: "1srOrx2ZWZBpBUvZwXKQmoEYga2", sequence: 7),
        CoveredDiff(id: "1srOrx2ZWZBpBUvZwXKQmoEYga3", sequence: nil),
        CoveredDiff(id: "2srOrx2ZWZBpBUvZwXKQmoEYga2", sequence: 9),
    ]

    func writeRollup(in dir: URL, covers: [CoveredDiff] = covered, signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> URL {
        let writer = try DiffWriter(directory: dir, kind: .rollup, authorUser: "user-1", authorSite: authorSite, createdAt: fixedCreatedAt,
                                    expectedRows: 1, covers: covers)
        try writer.addTable(itemsTable)
        try writer.append(RowChange(table: "items", operation: .upsert, values: [.integer(1), .text("one"), .integer(1)],
                                    clock: Clock(hlc: HLC(milliseconds: 1_750_000_000_000, counter: 0), site: authorSite),
                                    born: Clock(hlc: HLC(milliseconds: 1_750_000_000_000, counter: 0), site: authorSite)))
        return try writer.finish(signingKey: signingKey)
    }

    @Test func rollup_roundTrips_withItsCoveredDiffsSortedAndSigned() throws {
        let dir = try TemporaryDirectory()
        let key = Curve25519.Signing.PrivateKey()
        let url = try writeRollup(in: dir.url, covers: Self.covered.reversed() + [Self.covered[0]], signingKey: key)
        let reader = try DiffReader(url: url)
        #expect(reader.metadata.kind == DiffKind.rollup)
        #expect(reader.metadata.kind.carriesState)
        #expect(reader.metadata.covers == Self.covered)
        #expect(reader.isSigned(byOneOf: [Array(key.publicKey.rawRepresentation)]))
    }

    @Test func otherKinds_haveNoCoveredList_andTheirDigestIsUnchanged() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url)
        let reader = try DiffReader(url: url)
        #expect(reader.metadata.covers == nil)
        #expect(throws: DiffFormatError.self) {
            _ = try DiffWriter(directory: dir.url, kind: .changes, authorUser: "u", authorSite: "s", covers: Self.covered)
        }
        #expect(throws: DiffFormatError.self) { _ = try DiffWriter(directory: dir.url, kind: .rollup, authorUser: "u", authorSite: "s") }
    }

    @Test(arguments: ["UPDATE rtsync_covers SET diff_id = '\(KSUID.generate().string)' WHERE rowid = 3",
                      "UPDATE rtsync_covers SET seq = 99 WHERE rowid = 1", "DELETE FROM rtsync_covers WHERE rowid = 2"])
    func coveredList_isInTheDigest(_ sql: String) throws {
        let dir = try TemporaryDirectory()
        let url = try writeRollup(in: dir.url)
        try tamper(url, sql)
        guard case .digestMismatch? = openingError(url) else { Issue.record("\(String(describing: openingError(url)))"); return }
    }

    @Test func coveredList_outOfOrderOrNotAKSUID_isRejected() throws {
        for sql in ["UPDATE rtsync_covers SET diff_id = 'not-a-ksuid' WHERE rowid = 2",
                    "INSERT INTO rtsync_covers(diff_id) VALUES ('\(Self.covered[0].id)')",
                    "UPDATE rtsync_covers SET seq = 'x' WHERE rowid = 1",
                    "UPDATE rtsync_covers SET diff_id = 42 WHERE rowid = 1"] {
            let dir = try TemporaryDirectory()
            let url = try writeRollup(in: dir.url)
            try tamper(url, sql)
            #expect(openingError(url) != nil, "\(sql)")
        }
    }

    @Test func coversTable_inAChangesDiff_orDeclaredOtherwise_isRejected() throws {
        let dir = try TemporaryDirectory()
        let changes = try writeItemsDiff(in: dir.url)
        try tamper(changes, "CREATE TABLE rtsync_covers(diff_id TEXT NOT NULL)")
        #expect(openingError(changes) != nil)
        let other = try TemporaryDirectory()
        let rollup = try writeRollup(in: other.url)
        try tamper(rollup, "ALTER TABLE rtsync_covers ADD COLUMN extra DEFAULT (1)")
        #expect(openingError(rollup) != nil)
    }

    @Test func rollupWithoutCoversTable_isRejected() throws {
        let dir = try TemporaryDirectory()
        let url = try writeRollup(in: dir.url)
        try tamper(url, "DROP TABLE rtsync_covers")
        #expect(openingError(url) != nil)
    }
}
