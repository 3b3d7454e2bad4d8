import Foundation
import RTSyncTestSupport
import Testing
@testable import BucketClient

/// Runs the built `rtsync` binary (beside the test bundle) and checks output and exit codes.
@Suite struct CLITests {
    struct Run { var status: Int32; var out: String; var err: String }

    static let binary: URL? = locateBuiltBinary(packageRoot: URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent())

    func rtsync(_ arguments: [String], environment: [String: String] = [:]) throws -> Run {
        let binary = try #require(Self.binary, "the rtsync binary was not built beside the tests")
        var changes: [String: String?] = ["RTSYNC_BUCKET": nil]
        for (k, v) in environment { changes[k] = v }
        let output = try runCommand(binary, arguments, environment: changes)
        return Run(status: output.status, out: output.stdout, err: output.stderr)
    }

    /// No credentials in the environment or in a (temporary) HOME: one error line, exit 1, nothing sent unsigned.
    @Test func bucketLs_onS3WithoutAnyCredentials_saysSoInOneLine() throws {
        let home = try makeTemporaryFolder()
        let run = try rtsync(["bucket", "ls", "--bucket", "s3://some-bucket/x"], environment: [
            "HOME": home.path, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
            "AWS_PROFILE": "", "AWS_CONFIG_FILE": "", "AWS_SHARED_CREDENTIALS_FILE": ""])
        #expect(run.status == 1)
        #expect(run.err == "error: no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials\n")
    }

    @Test func bucketHelp_listsSubcommands() throws {
        let run = try rtsync(["bucket", "--help"])
        #expect(run.status == 0)
        for word in ["ls", "get", "put", "rm", "presign"] { #expect(run.out.contains(word)) }
    }

    @Test func putLsGetRm_onLocalFolderBucket_roundTrip() throws {
        let folder = try makeTemporaryFolder()
        let bucket = folder.appendingPathComponent("bucket").absoluteString
        let file = folder.appendingPathComponent("in.txt")
        try Data("payload".utf8).write(to: file)
        #expect(try rtsync(["bucket", "put", file.path, "a/in.txt", "--bucket", bucket]).status == 0)
        let ls = try rtsync(["bucket", "ls", "--json"], environment: ["RTSYNC_BUCKET": bucket])
        #expect(ls.status == 0)
        #expect(ls.out.contains("\"key\" : \"a/in.txt\""))
        let get = try rtsync(["bucket", "get", "a/in.txt", "-", "--bucket", bucket])
        #expect(get.out == "payload")
        #expect(try rtsync(["bucket", "rm", "a/in.txt", "--bucket", bucket]).status == 0)
        #expect(try rtsync(["bucket", "ls", "--bucket", bucket]).out.isEmpty)
    }

    @Test func missingKey_printsErrorWithKeyAndHint_andExitsNonZero() throws {
        let bucket = try makeTemporaryFolder().absoluteString
        let run = try rtsync(["bucket", "get", "no/such.bin", "--bucket", bucket])
        #expect(run.status == 1)
        #expect(run.err.contains("error: object not found (no/such.bin)"))
        #expect(run.err.contains("hint: "))
    }

    @Test func mediaSync_pushThenJSONReportShowsIdle() throws {
        let folder = try makeTemporaryFolder()
        let documents = folder.appendingPathComponent("docs")
        try FileManager.default.createDirectory(at: documents.appendingPathComponent("recordings"), withIntermediateDirectories: true)
        try Data("r".utf8).write(to: documents.appendingPathComponent("recordings/r.m4a"))
        let common = ["media", "sync", "--documents", documents.path, "--user", "u1",
                      "--bucket", folder.appendingPathComponent("bucket").absoluteString]
        let first = try rtsync(common + ["--push"])
        #expect(first.status == 0)
        #expect(first.out.contains("1 uploaded"))
        let second = try rtsync(common + ["--json"])
        let json = try JSONSerialization.jsonObject(with: Data(second.out.utf8)) as? [String: Any]
        #expect(json?["unchanged"] as? Int == 1)
        #expect(json?["requests"] as? Int == 1)  // one LIST for both kind folders
    }

    /// Issue #16, defect 5: an image edited on two devices keeps both versions, and `conflicts media` lists it.
    @Test func mediaSync_concurrentEdit_keepsBothVersions_andConflictsMediaListsIt() throws {
        let folder = try makeTemporaryFolder()
        let a = folder.appendingPathComponent("A"), b = folder.appendingPathComponent("B")
        for docs in [a, b] {
            try FileManager.default.createDirectory(at: docs.appendingPathComponent("images"), withIntermediateDirectories: true)
        }
        func sync(_ docs: URL, _ device: String) throws -> Run {
            try rtsync(["media", "sync", "--documents", docs.path, "--user", "u1", "--device", device,
                        "--bucket", folder.appendingPathComponent("bucket").absoluteString])
        }
        try Data("v1".utf8).write(to: a.appendingPathComponent("images/x.jpg"))
        #expect(try sync(a, "devA").status == 0)
        #expect(try sync(b, "devB").status == 0)
        try Data("edit on B".utf8).write(to: b.appendingPathComponent("images/x.jpg"))
        Thread.sleep(forTimeInterval: 0.02)
        try Data("edit on A".utf8).write(to: a.appendingPathComponent("images/x.jpg"))
        #expect(try sync(a, "devA").status == 0)

        let resolved = try sync(b, "devB")
        #expect(resolved.status == 0, "\(resolved.err)")
        #expect(resolved.out.contains("1 conflict (losing versions kept as conflict copies)"), "\(resolved.out)")
        #expect(resolved.err.contains("conflict: images/x.jpg changed on both sides; the local version is kept as \"images/x (conflict devB "))
        let names = try FileManager.default.contentsOfDirectory(atPath: b.appendingPathComponent("images").path).sorted()
        #expect(names.count == 2)
        let copy = try #require(names.first { $0.hasPrefix("x (conflict devB ") })
        #expect(try Data(contentsOf: b.appendingPathComponent("images/" + copy)) == Data("edit on B".utf8))
        #expect(try Data(contentsOf: b.appendingPathComponent("images/x.jpg")) == Data("edit on A".utf8))

        let listed = try rtsync(["conflicts", "media", "--documents", b.path, "--json"])
        #expect(listed.status == 0, "\(listed.err)")
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(listed.out.utf8)) as? [[String: Any]])
        #expect(entries.count == 1)
        #expect(entries.first?["path"] as? String == "images/x.jpg")
        #expect(entries.first?["copy"] as? String == "images/" + copy)
        #expect(entries.first?["loser"] as? String == "local")
        let text = try rtsync(["conflicts", "media", "--documents", b.path])
        #expect(text.out.contains("images/x.jpg: the local version lost; kept as \"images/\(copy)\" (here and in the bucket), found by devB"))
        #expect(text.out.hasSuffix("1 media conflict(s)\n"))
        let none = try rtsync(["conflicts", "media", "--documents", a.path])
        #expect(none.out == "no media conflicts\n")
    }

    @Test func mediaSync_leavesOutDSStore_unlessIncludeLitter() throws {
        let folder = try makeTemporaryFolder()
        let documents = folder.appendingPathComponent("docs")
        try FileManager.default.createDirectory(at: documents.appendingPathComponent("images"), withIntermediateDirectories: true)
        try Data("x".utf8).write(to: documents.appendingPathComponent("images/.DS_Store"))
        try Data("i".utf8).write(to: documents.appendingPathComponent("images/i.jpg"))
        let common = ["media", "sync", "--push", "--documents", documents.path, "--user", "u1",
                      "--bucket", folder.appendingPathComponent("bucket").absoluteString]
        let first = try rtsync(common)
        #expect(first.status == 0 && first.out.contains("1 uploaded"), "\(first.out)")
        let second = try rtsync(common + ["--include-litter"])
        #expect(second.status == 0 && second.out.contains("1 uploaded"), "\(second.out)")
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("bucket/u1/images/.DS_Store").path))
    }

    @Test func mediaSync_conflictingDirections_isAUsageError() throws {
        let run = try rtsync(["media", "sync", "--push", "--pull", "--documents", "/", "--user", "u", "--bucket", "file:///tmp/x"])
        #expect(run.status == 64)
        #expect(run.err.contains("at most one of --push, --pull, --both"))
    }
}
