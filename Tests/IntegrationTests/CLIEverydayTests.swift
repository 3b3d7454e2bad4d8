import DiffFormat
import Foundation
import RTSQLite
import SyncEngine
import Testing
import RTSyncTestSupport

// Issue 17: the command line behaves as Unix tools do — $HOME names the default home, `diff apply` never moves
// the user's files, an untracked target is refused before any diff is touched, and a relative local bucket given
// to `init` is stored absolute.

@Suite("CLI: homes, user files, bucket paths")
struct CLIEverydayTests {
    func rtsync(_ args: [String], env: [String: String?] = [:]) throws -> CommandOutput {
        let binary = try #require(RTSyncBinary.url, "rtsync binary not found")
        return try runCommand(binary, args, environment: env)
    }

    @Test func defaultHome_followsHOME() throws {
        let dir = try TemporaryDirectory()
        let r = try rtsync(["status", "--json"], env: ["HOME": dir.url.path, "RTSYNC_HOME": nil])
        let status = try jsonObject(r.stdout)
        #expect((status["database"] as? String)?.hasPrefix(dir.url.appendingPathComponent(".rtsync").path) == true, "\(r.stdout) \(r.stderr)")
    }

    @Test func diffApply_keepsTheUsersFile_copiesARejectedOne_andRefusesAnUntrackedDatabase() throws {
        let dir = try TemporaryDirectory()
        let a = dir.file("a.sqlite"), b = dir.file("b.sqlite"), plain = dir.file("plain.sqlite")
        for url in [a, b, plain] { try Connection(path: url.path).execute("CREATE TABLE notes(id TEXT PRIMARY KEY NOT NULL, body TEXT)") }
        try Connection(path: b.path).execute("CREATE TABLE other(id TEXT PRIMARY KEY NOT NULL)")
        #expect(try rtsync(["track", "--db", a.path, "--all"]).status == 0)
        #expect(try rtsync(["track", "--db", b.path, "other"]).status == 0)  // notes stays local on b
        try SyncDatabase(path: a.path).execute("INSERT INTO notes VALUES ('n1', 'one')")
        let out = dir.file("out")
        let created = try rtsync(["diff", "create", "--db", a.path, "--out", out.path])
        let file = URL(fileURLWithPath: created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        // b has notes untracked: the diff is rejected, the file stays, a copy goes to quarantine.
        let rejected = try rtsync(["diff", "apply", "--db", b.path, file.path])
        #expect(rejected.status == 1)
        #expect(FileManager.default.fileExists(atPath: file.path), "the user's file was moved")
        let quarantined = (try? FileManager.default.contentsOfDirectory(atPath: dir.file("quarantine").path)) ?? []
        #expect(quarantined.contains(file.lastPathComponent), "\(quarantined)")
        #expect(rejected.stderr.contains("a copy is in"), "\(rejected.stderr)")
        // An untracked database is refused before any diff is read.
        let untracked = try rtsync(["diff", "apply", "--db", plain.path, file.path])
        #expect(untracked.status == 1)
        #expect(untracked.stderr.contains("database is not tracked (\(plain.path))") && untracked.stderr.contains("rtsync track --db"), "\(untracked.stderr)")
        #expect(FileManager.default.fileExists(atPath: file.path))
    }

    @Test func init_storesARelativeLocalBucketAbsolute() throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home")
        let binary = try #require(RTSyncBinary.url)
        let p = Process()
        p.executableURL = binary
        p.arguments = ["init", "--home", home.path, "--bucket", "relative-bucket"]
        p.currentDirectoryURL = dir.url
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let settings = try RTSyncHome(root: home).loadSettings()
        #expect(settings.bucket == dir.url.appendingPathComponent("relative-bucket").standardizedFileURL.path, "\(settings.bucket ?? "-")")
    }

    /// Commands that only read change nothing: a missing local bucket is an error (not created), `keys show` on a
    /// home without a key makes none.
    @Test func readOnlyCommands_createNothing() throws {
        let dir = try TemporaryDirectory()
        let missing = dir.file("no-bucket")
        let ls = try rtsync(["bucket", "ls", "--bucket", "file://" + missing.path])
        #expect(ls.status == 1 && ls.stderr.contains("bucket not found"), "\(ls.stderr)")
        #expect(!FileManager.default.fileExists(atPath: missing.path))
        let home = dir.file("new-home")
        let show = try rtsync(["keys", "show", "--home", home.path])
        #expect(show.status == 1 && show.stderr.contains("no key yet"), "\(show.stderr)")
        #expect(!FileManager.default.fileExists(atPath: home.path))
    }

    /// `status` on a damaged database says so, with the restore hint, and exits 1 (it said nothing was wrong).
    @Test func status_onADamagedDatabase_saysSo() throws {
        let dir = try TemporaryDirectory()
        let support = dir.file("home/support")
        try FileManager.default.createDirectory(at: support, withIntermediateDirectories: true)
        let db = support.appendingPathComponent("primary.sqlite")
        try Connection(path: db.path).execute("CREATE TABLE a(id TEXT PRIMARY KEY, v TEXT); PRAGMA journal_mode = DELETE")
        var bytes = try Data(contentsOf: db)
        for i in 100..<min(bytes.count, 3000) { bytes[i] = UInt8(truncatingIfNeeded: i &* 31) }
        try bytes.write(to: db)
        let r = try rtsync(["status", "--home", dir.file("home").path])
        #expect(r.status == 1)
        #expect(r.stderr.contains("the database is damaged") && r.stderr.contains("rtsync backup restore"), "\(r.stderr)")
        let json = try rtsync(["status", "--home", dir.file("home").path, "--json"])
        #expect(json.status == 1)
        #expect((try jsonObject(json.stdout))["damaged"] is String)
    }

    @Test func track_ownerOnlyWithAMissingOwnerColumn_isRefused() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("t.sqlite")
        try Connection(path: db.path).execute("CREATE TABLE a(id TEXT PRIMARY KEY, v TEXT)")
        let r = try rtsync(["track", "--db", db.path, "--all", "--policy", "owner-only", "--owner-column", "nope"])
        #expect(r.status == 1 && r.stderr.contains("owner column 'nope'"), "\(r.stderr)")
    }

    /// An INTEGER PRIMARY KEY left to SQLite is numbered by each device: two devices inserting between syncs give two
    /// rows one key, and the later insert replaces the other. `track` says so for exactly the rowid keys.
    @Test func track_warnsForKeysEachDeviceNumbers_only() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("app.sqlite")
        try Connection(path: db.path).execute("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT);
            CREATE TABLE events(id INTEGER, at TEXT, PRIMARY KEY (id));
            CREATE TABLE tags(name TEXT PRIMARY KEY, color TEXT);
            CREATE TABLE counts(id INT PRIMARY KEY, n INTEGER);
            CREATE TABLE ranked(id INTEGER PRIMARY KEY DESC, n INTEGER);
            CREATE TABLE pairs(a INTEGER, b INTEGER, PRIMARY KEY (a, b));
            CREATE TABLE plain(id INTEGER PRIMARY KEY, n INTEGER) WITHOUT ROWID;
            """)
        let r = try rtsync(["track", "--db", db.path, "--all"])
        #expect(r.status == 0, "\(r.stderr)")
        let warned = r.stderr.split(separator: "\n").filter { $0.hasPrefix("warning: ") }
        // `id INT PRIMARY KEY`, `INTEGER PRIMARY KEY DESC` and a WITHOUT ROWID table are not rowid aliases: SQLite numbers none of them.
        #expect(warned.count == 2 && warned[0].hasPrefix("warning: events: ") && warned[1].hasPrefix("warning: notes: "), "\(r.stderr)")
        #expect(warned.allSatisfy { $0.contains("same key") && $0.contains("KSUID or UUID") }, "\(r.stderr)")
        #expect(try SyncDatabase(path: db.path).tablesWithDeviceNumberedKeys() == ["events", "notes"])
        // --json carries the same warnings; tracking a table with a TEXT key warns of nothing.
        let json = try jsonObject(try rtsync(["track", "--db", db.path, "notes", "--json"]).stdout)
        #expect((json["warnings"] as? [String])?.count == 1)
        let tags = try rtsync(["track", "--db", db.path, "tags", "--json"])
        #expect((try jsonObject(tags.stdout)["warnings"] as? [String]) == [] && tags.stderr.isEmpty, "\(tags.stderr)")
    }

    /// A row inserted with a NULL in its key (a TEXT key not declared NOT NULL, the id left out) can never be found by
    /// its key, so no export sends it: `diff create`, `status` and `sync` say so instead of "nothing to export" alone.
    @Test func rowsWithANullKey_areNamedByDiffCreateStatusAndSync() throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try rtsync(["init", "--home", home]).status == 0)
        let db = dir.file("home/support/primary.sqlite").path
        // The demo's accounts: account_id TEXT PRIMARY KEY, without NOT NULL.
        try Connection(path: db).execute("INSERT INTO accounts(name) VALUES ('no id'), ('no id either')")
        #expect(try SyncDatabase(path: db).rowsWithNullKeys() == ["accounts": 2])
        let created = try rtsync(["diff", "create", "--db", db, "--out", dir.file("out").path])
        #expect(created.status == 0)
        #expect(created.stderr.contains("nothing to export") && created.stderr.contains("warning: rows with a NULL in their key were inserted or changed and not sent (accounts)"),
                "\(created.stderr)")
        let json = try jsonObject(try rtsync(["status", "--home", home, "--json"]).stdout)
        #expect(json["nullKeyRows"] as? [String] == ["accounts: 2"], "\(json)")
        #expect(try rtsync(["status", "--home", home]).stdout.contains("not synced:      rows with a NULL key"))
        // Given keys, they are sent, and the warning goes.
        try Connection(path: db).execute("UPDATE accounts SET account_id = 'acct-' || rowid WHERE account_id IS NULL")
        let again = try rtsync(["diff", "create", "--db", db, "--out", dir.file("out").path])
        #expect(again.status == 0 && !again.stderr.contains("warning"), "\(again.stderr)")
        let file = again.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try DiffReader(url: URL(fileURLWithPath: file)).counts["accounts"]?.upserts == 2)
        #expect(try SyncDatabase(path: db).rowsWithNullKeys().isEmpty)
        // sync warns for the changes its export drops (and says so in --json).
        try Connection(path: db).execute("INSERT INTO accounts(name) VALUES ('no id again')")
        let synced = try rtsync(["sync", "--home", home])
        #expect(synced.status == 0 && synced.stderr.contains("warning: rows with a NULL in their key were inserted or changed and not sent (accounts)"),
                "\(synced.stdout) \(synced.stderr)")
        try Connection(path: db).execute("UPDATE accounts SET name = 'still no id' WHERE account_id IS NULL")
        let report = try jsonObject(try rtsync(["sync", "--home", home, "--json"]).stdout)["report"] as? [String: Any]
        #expect(report?["nullKeyTables"] as? [String] == ["accounts"], "\(String(describing: report))")
    }

    /// `status` names such tables too: the demo database's `requests` has an INTEGER PRIMARY KEY.
    @Test func status_namesTablesWhoseKeysEachDeviceNumbers() throws {
        let dir = try TemporaryDirectory()
        let home = dir.file("home").path
        #expect(try rtsync(["init", "--home", home]).status == 0)
        let json = try jsonObject(try rtsync(["status", "--home", home, "--json"]).stdout)
        #expect(json["deviceNumberedKeys"] as? [String] == ["requests"], "\(json)")
        let text = try rtsync(["status", "--home", home]).stdout
        #expect(text.contains("key warning:     requests (INTEGER PRIMARY KEY"), "\(text)")
    }
}

/// Text from files or the network is printed terminal-safe: a diff whose name or content carries escape sequences
/// cannot clear the screen or fake an "applied" line.
@Suite("CLI: hostile text stays inert")
struct CLITerminalSafetyTests {
    @Test func hostileDiffFileName_isPrintedWithControlCharactersEscaped() throws {
        let dir = try TemporaryDirectory()
        let db = dir.file("t.sqlite")
        try Connection(path: db.path).execute("CREATE TABLE a(id TEXT PRIMARY KEY, v TEXT)")
        let binary = try #require(RTSyncBinary.url)
        #expect(try runCommand(binary, ["track", "--db", db.path, "--all"]).status == 0)
        let hostile = dir.file("evil\u{1B}[2J\rapplied  fake.sqlite")
        try Data("not a diff".utf8).write(to: hostile)
        let r = try runCommand(binary, ["diff", "apply", "--db", db.path, hostile.path])
        #expect(r.status == 1)
        let all = r.stdout + r.stderr
        #expect(!all.contains("\u{1B}") && !all.contains("\r"), "\(all.debugDescription)")
        #expect(all.contains("\\u{1B}"), "\(all)")
        // Every error is one line (plus its hint).
        #expect(r.stderr.split(separator: "\n").allSatisfy { $0.hasPrefix("error: ") || $0.hasPrefix("hint: ") }, "\(r.stderr)")
    }
}
