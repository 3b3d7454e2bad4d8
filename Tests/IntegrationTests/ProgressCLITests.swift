import Foundation
import RTSyncTestSupport
import Testing

/// Live progress on standard error: drawn on a terminal or with --progress, never with --no-progress, in a pipe by
/// default, or with --json; the summary line and JSON on standard output are untouched.
@Suite(.serialized, .disabled(if: LTMoto.skipRequested, "RTSYNC_SKIP_S3=1")) struct ProgressCLITests {
    /// A 48 MB object on the loopback S3 server: its download takes long enough for several redraws.
    func bigObject(_ moto: LTMoto, dir: TemporaryDirectory) async throws -> (url: String, file: URL) {
        let file = dir.file("big.bin")
        var bytes = [UInt8](repeating: 0, count: 48 << 20)
        for i in stride(from: 0, to: bytes.count, by: 4096) { bytes[i] = UInt8(truncatingIfNeeded: i / 4096) }
        try Data(bytes).write(to: file)
        let url = "s3://\(LTMoto.bucket)/progress-\(UUID().uuidString.prefix(8))/big.bin"
        let put = try await ltRTSync(["bucket", "put", "--no-progress", file.path, url], environment: moto.environment)
        try #require(put.status == 0, "\(put.stderr)")
        #expect(!put.stderr.contains("\r"), "--no-progress drew progress: \(put.stderr.debugDescription)")
        return (url, file)
    }

    @Test func bucketGet_withProgress_drawsBytesTotalAndPercent_onStderrOnly() async throws {
        let moto = try await LTMoto.shared.value
        let dir = try TemporaryDirectory()
        let (url, file) = try await bigObject(moto, dir: dir)
        let r = try await ltRTSync(["bucket", "get", "--progress", url, dir.file("back.bin").path], environment: moto.environment)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("\r\u{1B}[2Kdownload progress-") && r.stderr.contains("/big.bin · "), "no progress line: \(r.stderr.debugDescription)")
        #expect(r.stderr.contains("/ 50.3 MB ("), "no total: \(r.stderr.debugDescription)")
        #expect(r.stderr.hasSuffix("\r\u{1B}[2K"), "the line is not cleared at the end: \(r.stderr.suffix(80).debugDescription)")
        #expect(r.stdout == "downloaded \(48 << 20) bytes to \(dir.file("back.bin").path)\n")
        #expect(try Data(contentsOf: dir.file("back.bin")) == Data(contentsOf: file))
    }

    @Test func bucketGet_inAPipe_orWithJSON_drawsNothing() async throws {
        let moto = try await LTMoto.shared.value
        let dir = try TemporaryDirectory()
        let (url, _) = try await bigObject(moto, dir: dir)
        let piped = try await ltRTSync(["bucket", "get", url, dir.file("a.bin").path], environment: moto.environment)
        #expect(piped.status == 0 && piped.stderr.isEmpty, "\(piped.stderr.debugDescription)")
        let json = try await ltRTSync(["bucket", "get", "--json", url, dir.file("b.bin").path], environment: moto.environment)
        #expect(json.status == 0 && json.stderr.isEmpty, "\(json.stderr.debugDescription)")
        #expect(try jsonObject(json.stdout)["size"] as? Int == 48 << 20)
    }

    @Test func sync_withProgress_namesItsPhases_andJSONStaysClean() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await ltRTSync(["init", "--home", home]).status == 0)
        let r = try await ltRTSync(["sync", "--home", home, "--progress"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("done: "), "summary missing: \(r.stdout)")
        let json = try await ltRTSync(["sync", "--home", home, "--json"])
        #expect(json.status == 0 && !json.stderr.contains("\r"))
        #expect(try jsonObject(json.stdout)["ok"] as? Bool == true)
    }
}
