import Foundation
import RTSyncTestSupport
import Testing

/// Bad input on the command line: one `error: <what> (<path, key or URL>)` line, a `hint:` right for the case,
/// exit 1, no raw Foundation or SQLite text (issue #17's list of cases that broke this).
@Suite struct CLIErrorTests {
    /// The two lines a failing command prints, checked for shape; returns (error line, hint line).
    func failure(_ r: CommandOutput, sourceLocation: SourceLocation = #_sourceLocation) -> (error: String, hint: String) {
        #expect(r.status == 1, "exit \(r.status): \(r.stderr)", sourceLocation: sourceLocation)
        let lines = r.stderr.split(separator: "\n").map(String.init)
        let error = lines.first { $0.hasPrefix("error: ") } ?? ""
        let hint = lines.first { $0.hasPrefix("hint: ") } ?? ""
        #expect(!error.isEmpty && !hint.isEmpty, "no error/hint pair: \(r.stderr)", sourceLocation: sourceLocation)
        #expect(lines.count == 2, "more than an error and a hint line: \(r.stderr)", sourceLocation: sourceLocation)
        for raw in ["NSCocoaErrorDomain", "SQLite error", "while executing", "Error Domain"] {
            #expect(!r.stderr.contains(raw), "raw library text '\(raw)' in: \(r.stderr)", sourceLocation: sourceLocation)
        }
        return (error, hint)
    }

    func rtsync(_ args: [String], env: [String: String] = [:]) async throws -> CommandOutput {
        try await ltRTSync(args, environment: env)
    }

    @Test func track_onAFileThatIsNotSQLite_saysSoAndNamesTheFile() async throws {
        let dir = try TemporaryDirectory()
        let file = dir.file("notes.db")
        try Data("just text, not a database\n".utf8).write(to: file)
        let (error, hint) = failure(try await rtsync(["track", "--db", file.path, "--all"]))
        #expect(error == "error: not a SQLite database (\(file.path))")
        #expect(hint.contains("SQLite 3 database file"))
    }

    @Test func track_onAFolder_saysItIsAFolder_once() async throws {
        let dir = try TemporaryDirectory()
        let (error, hint) = failure(try await rtsync(["track", "--db", dir.url.path, "--all"]))
        #expect(error == "error: is a folder, not a database file (\(dir.url.path))")
        #expect(hint.contains("database file itself"))
    }

    @Test func sync_withAHomeThatIsAFile_saysTheHomeIsAFile() async throws {
        let dir = try TemporaryDirectory()
        let file = dir.file("home")
        try Data("x".utf8).write(to: file)
        let (error, hint) = failure(try await rtsync(["sync", "--home", file.path]))
        #expect(error == "error: the home is a file, not a folder (\(file.path))")
        #expect(hint.contains("names a folder"))
    }

    @Test func corruptDatabase_trackStatusAndSync_sayDamaged_withRestoreHint_andSyncChangesNothing() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await rtsync(["init", "--home", home]).status == 0)
        let db = home + "/support/primary.sqlite"
        // Overwrite a few pages past the header: the schema still reads, the tables do not.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: db))
        try handle.seek(toOffset: 4096 * 2)
        handle.write(Data(repeating: 0xFF, count: 4096 * 3))
        try handle.close()
        let bucketBefore = (try? FileManager.default.subpathsOfDirectory(atPath: home + "/bucket")) ?? []

        let track = failure(try await rtsync(["track", "--db", db, "--all"]))
        #expect(track.error.hasPrefix("error: the database is damaged") && track.error.hasSuffix("(\(db))"))
        #expect(track.hint.contains("rtsync backup restore"))
        let status = failure(try await rtsync(["status", "--home", home]))
        #expect(status.error.hasPrefix("error: the database is damaged"))
        #expect(status.hint.contains("rtsync backup restore"))
        let sync = failure(try await rtsync(["sync", "--home", home]))
        #expect(sync.error.hasPrefix("error: the database is damaged"))
        #expect(sync.hint.contains("nothing was synced"))
        #expect(((try? FileManager.default.subpathsOfDirectory(atPath: home + "/bucket")) ?? []) == bucketBefore)
    }

    @Test func backupRestore_unknownId_hintsBackupList() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await rtsync(["init", "--home", home]).status == 0)
        let (error, hint) = failure(try await rtsync(["backup", "restore", "--home", home, "NOPE"]))
        #expect(error == "error: no backup with id NOPE")
        #expect(hint.contains("rtsync backup list"))
    }

    @Test func track_unknownTable_hintsHowToListTables() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await rtsync(["init", "--home", home]).status == 0)
        let db = home + "/support/primary.sqlite"
        let (error, hint) = failure(try await rtsync(["track", "--db", db, "nosuch"]))
        #expect(error == "error: no such table (nosuch)")
        #expect(hint.contains(".tables") && hint.contains("--all"))
    }

    @Test func conflictsRestore_unknownId_andRowDeletedSince_giveHints_andASecondRestoreSaysAlreadyRestored() async throws {
        let dir = try TemporaryDirectory()
        let a = dir.file("a").path, b = dir.file("b").path, bucket = dir.file("bucket").path
        #expect(try await rtsync(["init", "--home", a, "--bucket", bucket]).status == 0)
        let user = try #require(try jsonObject(try await rtsync(["status", "--home", a, "--json"]).stdout)["userId"] as? String)
        #expect(try await rtsync(["sync", "--home", a]).status == 0)
        #expect(try await rtsync(["init", "--home", b, "--bucket", bucket, "--user", user]).status == 0)
        let dbA = a + "/support/primary.sqlite", dbB = b + "/support/primary.sqlite"
        try sqliteShell(dbA, "UPDATE things SET title = 'a' WHERE rowid = (SELECT min(rowid) FROM things)")
        try sqliteShell(dbB, "UPDATE things SET title = 'b' WHERE rowid = (SELECT min(rowid) FROM things)")
        #expect(try await rtsync(["sync", "--home", a]).status == 0)
        #expect(try await rtsync(["sync", "--home", b]).status == 0)

        let unknown = failure(try await rtsync(["conflicts", "restore", "--db", dbB, "999"]))
        #expect(unknown.error == "error: no conflict with id 999")
        #expect(unknown.hint.contains("rtsync conflicts list --db \(dbB)"))

        let list = try JSONSerialization.jsonObject(with: Data(try await rtsync(["conflicts", "list", "--db", dbB, "--json"]).stdout.utf8)) as? [[String: Any]]
        let id = try #require(list?.first?["id"] as? Int)
        let first = try await rtsync(["conflicts", "restore", "--db", dbB, String(id)])
        #expect(first.status == 0, "\(first.stderr)")
        let again = try await rtsync(["conflicts", "restore", "--db", dbB, String(id)])
        #expect(again.status == 0)
        #expect(again.stdout.contains("already restored"))

        // A second conflict whose row is then deleted here: the restore explains and says what to do.
        try sqliteShell(dbA, "UPDATE things SET title = 'a2' WHERE rowid = (SELECT max(rowid) FROM things)")
        try sqliteShell(dbB, "UPDATE things SET title = 'b2' WHERE rowid = (SELECT max(rowid) FROM things)")
        #expect(try await rtsync(["sync", "--home", a]).status == 0)
        #expect(try await rtsync(["sync", "--home", b]).status == 0)
        let open = try JSONSerialization.jsonObject(with: Data(try await rtsync(["conflicts", "list", "--db", dbB, "--open", "--json"]).stdout.utf8)) as? [[String: Any]]
        let entry = try #require(open?.first { ($0["column"] as? String) == "title" })
        let table = try #require(entry["table"] as? String)
        #expect(table == "things")
        try sqliteShell(dbB, "PRAGMA foreign_keys = OFF; DELETE FROM things WHERE rowid = (SELECT max(rowid) FROM things)")
        let gone = failure(try await rtsync(["conflicts", "restore", "--db", dbB, String(try #require(entry["id"] as? Int))]))
        #expect(gone.error.contains("no longer exists"))
        #expect(gone.hint.contains("re-create it"))
    }

    @Test func freeTierRefusal_namesTheWayToPremium() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        let (error, hint) = failure(try await rtsync(["sync", "--home", home, "--bucket", "s3://some-bucket/p"],
                                                     env: ["AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1"]))
        #expect(error.contains("free tier"))
        #expect(hint.contains("rtsync init --tier premium"))
    }

    @Test func presign_onALocalBucket_explainsInsteadOfSuggestingFileURLs() async throws {
        let dir = try TemporaryDirectory()
        let (error, hint) = failure(try await rtsync(["bucket", "presign", "--bucket", dir.url.path, "key"]))
        #expect(error.contains("presigned URLs are for s3:// buckets") && error.hasSuffix("(\(dir.url.path))"))
        #expect(!hint.contains("file://"))
    }

    @Test func keysTrust_aShortKey_saysWhatAKeyIs_andLeavesSettingsAlone() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await rtsync(["init", "--home", home]).status == 0)
        let settings = try Data(contentsOf: URL(fileURLWithPath: home + "/settings.json"))
        let (error, hint) = failure(try await rtsync(["keys", "trust", "--home", home, "deadbeef", "--user", "u"]))
        #expect(error.hasPrefix("error: not a public key") && error.hasSuffix("(deadbeef)"))
        #expect(hint.contains("rtsync keys show") && !hint.contains("delete"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: home + "/settings.json")) == settings)
    }

    @Test(.disabled(if: LTMoto.skipRequested, "RTSYNC_SKIP_S3=1"))
    func sync_toABucketThatDoesNotExist_hintsCreatingItOrFixingTheURL() async throws {
        let moto = try await LTMoto.shared.value
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await rtsync(["init", "--home", home, "--tier", "premium"]).status == 0)
        let r = try await rtsync(["sync", "--home", home, "--bucket", "s3://no-such-bucket-\(UUID().uuidString.prefix(8).lowercased())/p"],
                                 env: moto.environment)
        let (error, hint) = failure(r)
        #expect(error.hasPrefix("error: sync incomplete"))
        #expect(hint.contains("create the bucket, or fix the bucket URL"), "hint: \(hint)")
    }

    @Test func bucketGet_takesAFullS3URL_likeAwsS3Cp() async throws {
        // A URL and --bucket together is a usage error; the URL alone names bucket and key.
        let both = try await rtsync(["bucket", "get", "--bucket", "s3://b", "s3://b/k", "-"])
        #expect(both.status == 64)
        #expect(both.stderr.contains("either --bucket and a key, or a full s3://bucket/key URL"))
    }

    @Test(.disabled(if: LTMoto.skipRequested, "RTSYNC_SKIP_S3=1"))
    func bucketPutAndGet_fullS3URLs_roundTrip() async throws {
        let moto = try await LTMoto.shared.value
        let dir = try TemporaryDirectory()
        let file = dir.file("hello.txt")
        try Data("hello through a full URL".utf8).write(to: file)
        let prefix = "url-\(UUID().uuidString.prefix(8))"
        let put = try await rtsync(["bucket", "put", file.path, "s3://\(LTMoto.bucket)/\(prefix)/"], env: moto.environment)
        #expect(put.status == 0, "\(put.stderr)")
        let get = try await rtsync(["bucket", "get", "s3://\(LTMoto.bucket)/\(prefix)/hello.txt", dir.file("back.txt").path], env: moto.environment)
        #expect(get.status == 0, "\(get.stderr)")
        #expect(try Data(contentsOf: dir.file("back.txt")) == Data("hello through a full URL".utf8))
        let ls = try await rtsync(["bucket", "ls", "s3://\(LTMoto.bucket)/\(prefix)/"], env: moto.environment)
        #expect(ls.stdout.contains("\(prefix)/hello.txt"))
    }

    @Test func bucketAndMediaCommands_takeHome_asEveryOtherCommand() async throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try await rtsync(["init", "--home", home]).status == 0)
        let file = dir.file("n.txt")
        try Data("n".utf8).write(to: file)
        #expect(try await rtsync(["bucket", "put", "--home", home, file.path, "notes/n.txt"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: home + "/bucket/notes/n.txt"))
        let ls = try await rtsync(["bucket", "ls", "--home", home, "notes/"])
        #expect(ls.stdout.contains("notes/n.txt"))
        let media = try await rtsync(["media", "sync", "--home", home])
        #expect(media.status == 0, "\(media.stderr)")
    }

    @Test func snapshot_ofAWALDatabase_leavesNoWalOrShmBeside_andChangesNothing() async throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite").path
        try sqliteShell(db, "PRAGMA journal_mode = WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');")
        let before = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).sorted()
        #expect(before == ["app.sqlite"])
        let bytes = try Data(contentsOf: URL(fileURLWithPath: db))
        let r = try await rtsync(["snapshot", "--db", db, "--out", dir.file("out").path])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).sorted() == ["app.sqlite", "out"])
        #expect(try Data(contentsOf: URL(fileURLWithPath: db)) == bytes)
    }

    @Test func bucketLs_fileURLWithARelativePath_readsThatFolder_neverTheRootOne() async throws {
        let dir = try TemporaryDirectory()
        try FileManager.default.createDirectory(at: dir.file("rel/b"), withIntermediateDirectories: true)
        try Data("x".utf8).write(to: dir.file("rel/b/k"))
        let binary = try #require(RTSyncBinary.url)
        let process = Process()
        process.executableURL = binary
        process.arguments = ["bucket", "ls", "--bucket", "file://rel/b"]
        process.currentDirectoryURL = dir.url
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).hasSuffix("  k\n"))
        let missing = try await rtsync(["bucket", "ls", "--bucket", "file:///\(dir.url.path)/nope"])
        let (error, _) = failure(missing)
        #expect(error.hasPrefix("error: bucket not found"))
        #expect(!FileManager.default.fileExists(atPath: dir.file("nope").path))
    }

}
