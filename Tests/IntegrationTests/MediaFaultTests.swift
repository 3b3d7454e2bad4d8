import BucketSync
import Foundation
import RTSyncTestSupport
import SyncEngine
import Testing

// Issue 15 §6: under 5xx answers and connections reset mid-body (a loopback fault proxy in front of moto), a media
// run ends with one summary of what failed and a `hint:` line (exit 1), never re-sends a file the server already
// stored (not in a retry, where a HEAD finds it, nor in the next run), and a re-run with the faults gone uploads only
// what was left (PUTs counted at the proxy).

/// Media files for a test: `count` recordings of different sizes, named `rec-<i>.m4a`.
func mfWriteRecordings(_ home: RTSyncHome, count: Int) throws -> [String: Data] {
    let folder = home.documents.appendingPathComponent("recordings", isDirectory: true)
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    var files: [String: Data] = [:]
    for i in 0..<count {
        let data = Data((0..<(40_000 + i * 3_001)).map { UInt8(truncatingIfNeeded: $0 &* (i + 7) ^ i) })
        try data.write(to: folder.appendingPathComponent("rec-\(i).m4a"))
        files["rec-\(i).m4a"] = data
    }
    return files
}

/// The PUTs of media objects in the proxy's counts, by file name.
func mfMediaPuts(_ puts: [String: Int]) -> [String: Int] {
    var out: [String: Int] = [:]
    for (path, n) in puts where path.contains("/recordings/") { out[String(path.split(separator: "/").last!), default: 0] += n }
    return out
}

@Suite("media runs under network faults: one summary with a hint, no re-sent work",
       .enabled(if: RTSyncBinary.url != nil && !LTMoto.skipRequested, "needs the rtsync binary and moto"))
struct MediaFaultTests {
    /// The faults of both tests: rec-3's uploads always get 503, rec-7's reach the server and then get 503 (the
    /// object is stored, the answer lost: the retry's HEAD finds it, so it is sent once and counts as uploaded), and
    /// every other file's first upload attempt is reset halfway through its body (its retry goes through).
    static let faults = LTFaultProxy.Rules(fail503: ["/rec-3.m4a"], loseAnswer: ["/rec-7.m4a"], resetFirstPut: true)

    @Test func mediaSync_under5xxAndResets_endsWithOneErrorAndAHint_andTheRerunUploadsOnlyTheFileNotStored() async throws {
        let u = try await LTProxiedUser.make()
        _ = try mfWriteRecordings(u.a, count: 10)
        try await u.proxy.set(Self.faults)
        let failed = try await ltRTSync(["media", "sync", "--home", u.a.root.path], environment: u.environment)
        #expect(failed.status == 1, "\(failed.stdout)\n\(failed.stderr)")
        let errors = ltErrorLines(failed.stderr)
        #expect(errors.count == 1, "one summary, not one error per file: \(failed.stderr)")
        #expect(errors.first?.hasPrefix("error: media sync incomplete: 1 file(s) failed; 9 uploaded and 0 downloaded in this run are recorded") == true, "\(errors)")
        let hints = failed.stderr.split(separator: "\n").filter { $0.hasPrefix("hint:") }
        #expect(hints == ["hint: the bucket did not answer every request (server errors or dropped connections); run the same command again to retry the 1 failed file(s) only"],
                "\(failed.stderr)")
        let first = try await u.proxy.stats()
        #expect(first.faults >= 10, "the proxy injected only \(first.faults) fault(s)")
        // Reset uploads were sent again (they never arrived); a stored one, whose answer was lost, never was.
        let firstPuts = mfMediaPuts(first.puts)
        for i in 0..<10 where i != 3 { #expect(firstPuts["rec-\(i).m4a"] == 1, "rec-\(i): \(firstPuts)") }
        #expect(firstPuts["rec-3.m4a"] == nil)

        try await u.proxy.set(.init())
        try await u.proxy.resetCounts()
        let rerun = try await ltRTSync(["media", "sync", "--home", u.a.root.path], environment: u.environment)
        #expect(rerun.status == 0, "\(rerun.stdout)\n\(rerun.stderr)")
        // rec-3 never reached the server; nothing else is sent again.
        #expect(mfMediaPuts(try await u.proxy.stats().puts) == ["rec-3.m4a": 1])

        try await u.proxy.resetCounts()
        let idle = try await ltRTSync(["media", "sync", "--home", u.a.root.path], environment: u.environment)
        #expect(idle.status == 0, "\(idle.stderr)")
        #expect(try await u.proxy.stats().puts.isEmpty)
    }

    @Test func syncWithMedia_under5xxAndResets_endsWithOneErrorAndAHint_thenUploadsOnlyWhatWasLeft_andResetDownloadsArriveWhole() async throws {
        let u = try await LTProxiedUser.make()
        let files = try mfWriteRecordings(u.a, count: 10)
        try await u.proxy.set(Self.faults)
        let failed = try await ltRTSync(["sync", "--home", u.a.root.path, "--media"], environment: u.environment)
        #expect(failed.status == 1, "\(failed.stdout)\n\(failed.stderr)")
        let errors = ltErrorLines(failed.stderr)
        #expect(errors.count == 1, "\(failed.stderr)")
        #expect(errors.first?.hasPrefix("error: sync incomplete: media failed") == true, "\(errors)")
        #expect(failed.stderr.contains("\nhint: "), "\(failed.stderr)")
        #expect(failed.stdout.contains("FAIL media: "), "\(failed.stdout)")
        #expect(failed.stdout.contains("1 failed"), "\(failed.stdout)")
        let firstPuts = mfMediaPuts(try await u.proxy.stats().puts)
        for i in 0..<10 where i != 3 { #expect(firstPuts["rec-\(i).m4a"] == 1, "rec-\(i): \(firstPuts)") }

        try await u.proxy.set(.init())
        try await u.proxy.resetCounts()
        let rerun = try await ltRTSync(["sync", "--home", u.a.root.path, "--media"], environment: u.environment)
        #expect(rerun.status == 0, "\(rerun.stdout)\n\(rerun.stderr)")
        #expect(mfMediaPuts(try await u.proxy.stats().puts) == ["rec-3.m4a": 1])

        // B pulls everything while the first GET of each object is cut off halfway: each arrives whole.
        try await u.proxy.set(.init(resetFirstGet: true))
        let pulled = try await ltRTSync(["sync", "--home", u.b.root.path, "--media"], environment: u.environment)
        #expect(pulled.status == 0, "\(pulled.stdout)\n\(pulled.stderr)")
        #expect(try await u.proxy.stats().faults >= 10)
        for (name, data) in files {
            let got = try? Data(contentsOf: u.b.documents.appendingPathComponent("recordings").appendingPathComponent(name))
            #expect(got == data, "\(name) on B")
        }
    }
}
