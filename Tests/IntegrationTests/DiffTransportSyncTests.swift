import BucketClient
import BucketSync
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing

// Issue 19, aim 5: diffs travel compressed (DiffTransport), are expanded on download into `<KSUID>.sqlite`, and a
// reader still takes an uncompressed diff from an older version; bombs and damaged streams are refused and kept.

enum LTTransportScenarios {
    /// The raw bytes of an object, as the bucket holds them.
    static func rawObject(_ bucket: LTBucket, _ key: String, in dir: TemporaryDirectory) async throws -> Data {
        let file = dir.url.appendingPathComponent("raw-\(UUID().uuidString)")
        _ = try await bucket.open().store.download(key: key, to: file)
        return try Data(contentsOf: file)
    }

    /// A compressed-diff object whose header declares `declared` bytes, with `stream` (zlib) after it.
    static func object(declaring declared: UInt64, stream: Data) -> Data {
        var out = Data(DiffTransport.magic)
        withUnsafeBytes(of: declared.bigEndian) { out.append(contentsOf: $0) }
        return out + stream
    }

    static func roundTripOldDiffsAndBombs(_ bucket: LTBucket) async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        let devices = try await LTSyncScenarios.makeDevices(dir, bucket)
        let (a, b, c) = (devices[0], devices[1], devices[2])
        let user = try SyncDatabase(path: a.db.path).userID()
        let inbound = Syncer.inboundPrefix(user: user)

        // A one-row diff goes up compressed, well under 1.5 KiB, and B gets the row.
        try a.insertThing("thing-compressed", title: "compressed")
        let ra = try await a.sync()
        #expect(ra.ok, "\(ra.phases)")
        let key = try #require(ra.uploaded.first)
        let raw = try await rawObject(bucket, key, in: dir)
        #expect(DiffTransport.isCompressed(raw))
        #expect(raw.count <= 1536, "a one-row diff is \(raw.count) bytes in the bucket")
        let expandedSize = raw.subdata(in: 8..<16).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        #expect(Int(expandedSize) > raw.count)

        // A diff as an older version uploads it: the SQLite file itself. C exports, the file goes up unchanged.
        try c.insertThing("thing-uncompressed", title: "old format")
        let exported = try #require(try SyncDatabase(path: c.db.path).exportChanges(to: c.home.outbox))
        let oldFile = URL(fileURLWithPath: exported.file)
        _ = try await c.remote.store.put(key: inbound + oldFile.lastPathComponent, data: try Data(contentsOf: oldFile), ifNoneMatch: true)
        try FileManager.default.removeItem(at: oldFile)

        // Three bad objects: a header declaring more than any diff may be, a stream expanding past what its header
        // declares, and a real diff whose compressed stream was damaged.
        let zeros = try DiffTransport.compress(Data(count: 8 << 20), name: "zeros")
        let bombs: [(name: String, data: Data, says: String)] = [
            (KSUID.generate().string + ".sqlite", object(declaring: 5 << 30, stream: zeros.subdata(in: 16..<zeros.count)), "over the limit"),
            (KSUID.generate().string + ".sqlite", object(declaring: 4096, stream: zeros.subdata(in: 16..<zeros.count)), "expands past"),
            (KSUID.generate().string + ".sqlite", { var d = raw; for i in 40..<min(d.count, 60) { d[i] ^= 0x5A }; return d }(), "refused"),
        ]
        for bomb in bombs { _ = try await a.remote.store.put(key: inbound + bomb.name, data: bomb.data, ifNoneMatch: true) }

        // What a download killed before or during its expansion leaves in the inbox: the next run removes it.
        let leftovers = [".\(KSUID.generate().string).sqlite.incoming", ".\(KSUID.generate().string).sqlite.incoming.partial",
                         "\(KSUID.generate().string).sqlite.expanding"]
        try FileManager.default.createDirectory(at: b.home.inbox, withIntermediateDirectories: true)
        for name in leftovers { try Data("cut short".utf8).write(to: b.home.inbox.appendingPathComponent(name)) }

        // B's next sync applies the old-format diff, refuses the three with their reasons, keeps them in quarantine.
        let rb = try await b.sync()
        for name in leftovers { #expect(rb.cleanedUp.contains { $0.hasSuffix("/" + name) }, "\(name) not removed: \(rb.cleanedUp)") }
        #expect(try b.thingTitle("thing-compressed") == "compressed")
        #expect(try b.thingTitle("thing-uncompressed") == "old format")
        for bomb in bombs {
            let report = try #require(rb.applied.first { URL(fileURLWithPath: $0.file).lastPathComponent == bomb.name }, "\(bomb.name) not reported")
            #expect(report.status == .rejected)
            #expect(report.reason?.contains("compressed diff") == true && report.reason?.contains(bomb.says) == true, "\(report.reason ?? "")")
            let kept = try #require(report.quarantinedTo)
            #expect(try Data(contentsOf: URL(fileURLWithPath: kept)) == bomb.data, "the evidence is the object as it came")
        }
        #expect(rb.phases.first { $0.name == "apply" }?.ok == false)
        // Nothing is left half-written in the inbox.
        let left = try FileManager.default.contentsOfDirectory(atPath: b.home.inbox.path)
        #expect(left.isEmpty, "\(left)")
        await LTSyncScenarios.cleanUp(bucket)
    }
}

@Suite("diffs in transit: compressed, old format accepted, bombs refused (local folder)")
struct DiffTransportLocalTests {
    @Test func oneRowDiff_travelsCompressed_oldUncompressedAccepted_bombsAndDamageRefusedAndKept() async throws {
        let dir = try TemporaryDirectory()
        defer { withExtendedLifetime(dir) {} }
        try await LTTransportScenarios.roundTripOldDiffsAndBombs(.local(dir))
    }
}

@Suite("diffs in transit: compressed, old format accepted, bombs refused (moto S3)", .enabled(if: !LTMoto.skipRequested, "RTSYNC_SKIP_S3=1"))
struct DiffTransportS3Tests {
    @Test func oneRowDiff_travelsCompressed_oldUncompressedAccepted_bombsAndDamageRefusedAndKept() async throws {
        try await LTTransportScenarios.roundTripOldDiffsAndBombs(try await .s3())
    }
}
