import DiffFormat
import Foundation
import Testing

@Suite("Diff transport (zlib)")
struct DiffTransportTests {
    func bad(_ body: () throws -> Void) -> String? {
        do { try body(); return nil } catch let e as DiffFormatError {
            guard case .badCompression = e else { return "wrong error: \(e)" }
            return e.description
        } catch { return "wrong error: \(error)" }
    }

    @Test func diff_compressedAndExpanded_isTheSameFile_andOpens() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 1, expectedRows: 1)
        let original = try Data(contentsOf: url)
        let packed = try DiffTransport.compress(original, name: url.lastPathComponent)
        #expect(DiffTransport.isCompressed(packed))
        #expect(packed.count < original.count / 3, "\(packed.count) of \(original.count) bytes")
        let staging = dir.file("staging")
        try packed.write(to: staging)
        let installed = dir.file(url.lastPathComponent + ".copy")
        #expect(try DiffTransport.install(staging, as: installed, name: "obj") == nil)
        #expect(try Data(contentsOf: installed) == original)
        #expect(!FileManager.default.fileExists(atPath: staging.path))
    }

    @Test func uncompressedDiff_isInstalledAsItIs() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 1, expectedRows: 1)
        let original = try Data(contentsOf: url)
        let staging = dir.file("staging")
        try original.write(to: staging)
        let installed = dir.file("installed.sqlite")
        #expect(try DiffTransport.install(staging, as: installed, name: "obj") == nil)
        #expect(try Data(contentsOf: installed) == original)
    }

    @Test func truncatedStream_trailingBytes_wrongSize_andBombs_areRefusedNamingTheObject() throws {
        let packed = try DiffTransport.compress(Data(repeating: 7, count: 100_000), name: "x")
        #expect(try DiffTransport.expand(packed, name: "x", limit: 1 << 20, to: nil) == 100_000)
        let truncated = packed.prefix(packed.count - 10)
        #expect(bad { try DiffTransport.expand(Data(truncated), name: "user/inbound/a.sqlite", limit: 1 << 20, to: nil) }?.contains("truncated") == true)
        #expect(bad { try DiffTransport.expand(packed + Data([1, 2, 3]), name: "o", limit: 1 << 20, to: nil) }?.contains("follow") == true)
        // Over the cap: refused from the header, before expanding anything.
        #expect(bad { try DiffTransport.expand(packed, name: "user/inbound/b.sqlite", limit: 50_000, to: nil) }?.contains("user/inbound/b.sqlite") == true)
        // A header declaring less than the stream holds.
        var lying = packed
        lying.replaceSubrange(8..<16, with: [0, 0, 0, 0, 0, 0, 0x10, 0])
        #expect(bad { try DiffTransport.expand(lying, name: "o", limit: 1 << 20, to: nil) }?.contains("expands past") == true)
        // Declaring more than it holds.
        var short = packed
        short.replaceSubrange(8..<16, with: [0, 0, 0, 0, 0, 0x02, 0, 0])
        #expect(bad { try DiffTransport.expand(short, name: "o", limit: 1 << 20, to: nil) }?.contains("not the") == true)
    }

    @Test func damagedObject_installedAsItCame_andTheReaderSaysWhy() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 1, expectedRows: 1)
        var packed = try DiffTransport.compress(try Data(contentsOf: url), name: "x")
        for i in 30..<50 { packed[i] ^= 0x5A }
        let staging = dir.file("staging")
        try packed.write(to: staging)
        let installed = dir.file("in").appendingPathComponent(url.lastPathComponent)
        try FileManager.default.createDirectory(at: installed.deletingLastPathComponent(), withIntermediateDirectories: true)
        let problem = try DiffTransport.install(staging, as: installed, name: "obj")
        #expect(problem != nil)
        #expect(try Data(contentsOf: installed) == packed, "kept as it came, for quarantine")
        let said = bad { _ = try DiffReader(url: installed) }
        #expect(said?.contains(installed.path) == true, "\(said ?? "no error")")
    }

    /// The in-memory install (a sync's small downloads) gives the same file as the staging-file install: expanded,
    /// as it came when uncompressed, and as it came when damaged (the reader then says why); no partial file is left.
    @Test func bytesInMemory_installLikeAStagingFile() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 3, expectedRows: 3)
        let original = try Data(contentsOf: url)
        let packed = try DiffTransport.compress(original, name: "x")
        var damaged = packed
        for i in 30..<50 { damaged[i] ^= 0x5A }
        for (label, bytes, expected, problem) in [("compressed", packed, original, false), ("plain", original, original, false),
                                                  ("damaged", damaged, damaged, true)] {
            let folder = dir.file(label)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let installed = folder.appendingPathComponent(url.lastPathComponent)
            let reason = try DiffTransport.install(bytes, as: installed, name: "obj")
            #expect((reason != nil) == problem, "\(label): \(reason ?? "nil")")
            #expect(try Data(contentsOf: installed) == expected, "\(label)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == [url.lastPathComponent], "\(label): only the diff is left")
            if problem {
                let said = bad { _ = try DiffReader(url: installed) }
                #expect(said?.contains(installed.path) == true, "\(said ?? "no error")")
            } else {
                #expect(try DiffReader(url: installed).counts.values.reduce(0) { $0 + $1.upserts } == 3)
            }
        }
        // A bomb is not expanded: installed as it came (small), with the reason, for apply to quarantine.
        let bomb = try DiffTransport.compress(Data(repeating: 0, count: 200_000), name: "b")
        let target = dir.file("bomb.sqlite")
        let reason = try DiffTransport.install(bomb, as: target, name: "user/inbound/bomb.sqlite", limit: 50_000)
        #expect(reason?.contains("bomb") == true, "\(reason ?? "nil")")
        #expect(try Data(contentsOf: target) == bomb)
        #expect(!FileManager.default.fileExists(atPath: target.path + ".expanding"))
    }
}
