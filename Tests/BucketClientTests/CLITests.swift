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

    @Test func mediaSync_conflictingDirections_isAUsageError() throws {
        let run = try rtsync(["media", "sync", "--push", "--pull", "--documents", "/", "--user", "u", "--bucket", "file:///tmp/x"])
        #expect(run.status == 64)
        #expect(run.err.contains("at most one of --push, --pull, --both"))
    }
}
