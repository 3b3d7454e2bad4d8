import BucketSync
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Issue 15 §6: a kill -9 harness. Each seeded trial sets up two devices of one user on a local-folder bucket, makes
// edits whose rows it records in a ledger, starts one `rtsync` command as a child process, kills it with SIGKILL
// after a seeded delay, re-runs the commands normally until both devices are quiet, and then checks that both
// databases pass integrity_check, hold every ledger row exactly once, are identical, that no run got stuck and
// that no debris of the killed run outlives the runs after it.
//
// The same trials run through S3 too (the loopback moto server; the child runs get its AWS_* environment), where
// every second group of eight seeds also lowers the multipart threshold to 1 MiB, so kills land inside multipart uploads
// of diffs and backups; the bucket's debris check then lists unfinished multipart uploads under the trial's prefix.
//
// RTSYNC_KILL_TRIALS=N runs N local-folder trials (default 40: 5 per command, seeds 1...N; RTSYNC_KILL_FIRST_SEED
// moves the start); RTSYNC_KILL_S3_TRIALS=N runs N S3 trials (default 8, one per command; RTSYNC_KILL_S3_FIRST_SEED
// moves the start; 0 runs none, as RTSYNC_SKIP_S3=1 does); RTSYNC_KILL_SEED=S replays seed S on both (RTSYNC_KILL_TRIALS
// times, default once). A seed fixes the command, the edits and the kill delay; where in the command the kill lands
// still depends on the machine's load, so a timing-sensitive failure may need a few repetitions of its seed.

// MARK: - Configuration

/// Where a trial's bucket lives.
enum KNBucketKind: String, Sendable {
    /// A folder beside the homes (`file://`).
    case local
    /// A fresh prefix on the loopback moto server (`s3://`).
    case s3
}

/// One trial: a seed, which repetition of it (replaying one seed several times), and the bucket kind.
struct KNTrial: Sendable, CustomTestStringConvertible {
    let seed: UInt64
    let repetition: Int
    var bucket: KNBucketKind = .local
    var testDescription: String {
        (bucket == .s3 ? "s3 " : "") + (repetition == 0 ? "seed \(seed)" : "seed \(seed) #\(repetition + 1)")
    }

    /// The trials the environment asks for, on `bucket`.
    static func fromEnvironment(_ bucket: KNBucketKind = .local) -> [KNTrial] {
        let env = ProcessInfo.processInfo.environment
        let prefix = bucket == .s3 ? "RTSYNC_KILL_S3_" : "RTSYNC_KILL_"
        if bucket == .s3 && LTMoto.skipRequested { return [] }
        let count = env[prefix + "TRIALS"].flatMap { Int($0) }.map { max(bucket == .s3 ? 0 : 1, $0) }
        if let seed = env["RTSYNC_KILL_SEED"].flatMap({ UInt64($0) }) {
            return (0..<(env["RTSYNC_KILL_TRIALS"].flatMap { Int($0) }.map { max(1, $0) } ?? 1))
                .map { KNTrial(seed: seed, repetition: $0, bucket: bucket) }
        }
        let first = env[prefix + "FIRST_SEED"].flatMap { UInt64($0) } ?? 1
        return (0..<(count ?? (bucket == .s3 ? 8 : 40))).map { KNTrial(seed: first + UInt64($0), repetition: 0, bucket: bucket) }
    }

    /// S3 trials of every second group of eight seeds (each group covers every command once) upload files above
    /// 1 MiB in parts, so kills also land inside multipart uploads.
    var smallMultipartThreshold: Bool { bucket == .s3 && (seed / UInt64(KNCommand.allCases.count)) % 2 == 1 }
}

/// SplitMix64: a small generator whose sequence depends only on its seed, on every platform.
struct KNRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed &* 0x9E37_79B9_7F4A_7C15 ^ 0xD1B5_4A32_D192_ED03 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The command a trial kills.
enum KNCommand: String, CaseIterable, Sendable {
    /// `rtsync sync` on A with a large export pending (export, upload, then apply of B's small diff).
    case syncExport = "sync (export+upload)"
    /// `rtsync sync` on B with A's large diff to download and apply.
    case syncApply = "sync (download+apply)"
    /// `rtsync backup create` on A, sometimes with `--upload`.
    case backupCreate = "backup create"
    /// `rtsync backup restore` on B of a backup holding unexported rows.
    case backupRestore = "backup restore"
    /// `rtsync compact` on A after both devices applied a large diff.
    case compact = "compact"
    /// `rtsync diff create` on A into its outbox (the export step on its own).
    case diffCreate = "diff create"
    /// `rtsync diff apply` on B of A's large diff (B's sync later downloads the same diff and must skip it).
    case diffApply = "diff apply"
    /// `rtsync media sync` on A pushing new recordings (some above the multipart threshold on S3 trials that lower
    /// it); B then pulls them and must get every file byte for byte.
    case mediaSync = "media sync"

    /// Consecutive seeds cycle through every command.
    static func forSeed(_ seed: UInt64) -> KNCommand { allCases[Int(seed % UInt64(allCases.count))] }
}

/// Lets a few trials run at once: all of them at once (Swift Testing starts every case together) would stretch
/// each kill delay and time limit far beyond what the seed says on a 2-core machine.
actor KNGate {
    static let shared = KNGate(width: 2)
    private let width: Int
    private var running = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(width: Int) { self.width = width }

    func enter() async {
        if running < width { running += 1; return }
        await withCheckedContinuation { waiting.append($0) }
    }

    func leave() {
        if waiting.isEmpty { running -= 1 } else { waiting.removeFirst().resume() }
    }
}

/// Seeds whose trial finds a known bug, with the symptom; their checks run inside `withKnownIssue`.
let knKnownBugs: [UInt64: String] = [:]

// MARK: - Child processes

/// How a child run ended.
struct KNRun: CustomStringConvertible {
    let arguments: [String]
    let status: Int32
    let killed: Bool
    let timedOut: Bool
    let seconds: Double
    let stdout: String
    let stderr: String
    var description: String {
        "rtsync \(arguments.joined(separator: " ")) → \(killed ? "killed" : timedOut ? "TIMED OUT" : "exit \(status)") after \(String(format: "%.0f ms", seconds * 1000))"
            + (status != 0 && !killed ? "\nstdout: \(stdout.suffix(800))\nstderr: \(stderr.suffix(800))" : "")
    }
}

/// Runs `rtsync` children for one trial: output in files, `TMPDIR` in the trial's own folder (so temp folders
/// left by a killed run can be counted), `RTSYNC_HOME` unset.
struct KNRunner {
    let binary: URL
    let scratch: URL
    let tmp: URL
    /// Added to every child's environment (the S3 server's AWS_* variables).
    var environment: [String: String] = [:]

    /// Starts `rtsync arguments`, then either kills it with SIGKILL after `killAfter` seconds (if it is still
    /// running) or waits for it up to `limit` seconds and kills it as stuck after that.
    func run(_ arguments: [String], killAfter: Double? = nil, limit: Double = 60) async throws -> KNRun {
        let name = UUID().uuidString
        let outURL = scratch.appendingPathComponent(name + ".out"), errURL = scratch.appendingPathComponent(name + ".err")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: outURL); try? FileManager.default.removeItem(at: errURL) }
        let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["RTSYNC_HOME"] = nil
        environment["TMPDIR"] = tmp.path
        environment.merge(self.environment) { $1 }
        process.environment = environment
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let started = Date()
        try process.run()
        let pid = process.processIdentifier
        var timedOut = false
        if let killAfter {
            // A timer off the cooperative pool, so a busy pool cannot push the kill later than the seed says.
            DispatchQueue.global().asyncAfter(deadline: .now() + killAfter) { if process.isRunning { kill(pid, SIGKILL) } }
        } else {
            let deadline = started.addingTimeInterval(limit)
            while process.isRunning && Date() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            if process.isRunning { timedOut = true; kill(pid, SIGKILL) }
        }
        let end = await waitForExit(process)
        try out.close(); try err.close()
        return KNRun(arguments: arguments, status: end.status,
                     killed: end.signaled && !timedOut, timedOut: timedOut,
                     seconds: Date().timeIntervalSince(started),
                     stdout: String(decoding: try Data(contentsOf: outURL), as: UTF8.self),
                     stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }
}

// MARK: - One trial

/// The state of one trial: two homes on one bucket, the ledger, and everything to report on failure.
final class KNTrialRun {
    let trial: KNTrial
    let command: KNCommand
    var rng: KNRandom
    let dir: TemporaryDirectory
    /// The local-folder bucket (for S3 trials a folder that stays empty).
    let bucket: URL
    /// The bucket's URL as settings and `--bucket` take it.
    let bucketURL: String
    /// The S3 server of an S3 trial.
    let moto: LTMoto?
    let a: RTSyncHome
    let b: RTSyncHome
    let runner: KNRunner
    /// Every row the trial inserted: id → title.
    var ledger: [String: String] = [:]
    /// What happened, in order, for the failure message.
    var events: [String] = []
    var nextRow = 0
    var user = ""

    init(_ trial: KNTrial) async throws {
        self.trial = trial
        command = KNCommand.forSeed(trial.seed)
        rng = KNRandom(seed: trial.seed)
        dir = try TemporaryDirectory()
        bucket = dir.url.appendingPathComponent("bucket", isDirectory: true)
        if trial.bucket == .s3 {
            let moto = try await LTMoto.shared.value
            self.moto = moto
            bucketURL = moto.freshBucketURL()
        } else {
            moto = nil
            bucketURL = "file://" + bucket.path
        }
        a = ltHome(dir, "A")
        b = ltHome(dir, "B")
        let tmp = dir.url.appendingPathComponent("tmp", isDirectory: true)
        let scratch = dir.url.appendingPathComponent("runs", isDirectory: true)
        for d in [bucket, tmp, scratch] { try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true) }
        let binary = try #require(RTSyncBinary.url, "rtsync binary not found; build it or set RTSYNC_BIN")
        var environment = moto?.environment ?? [:]
        if trial.smallMultipartThreshold { environment["RTSYNC_S3_MULTIPART_THRESHOLD"] = String(1 << 20) }
        runner = KNRunner(binary: binary, scratch: scratch, tmp: tmp, environment: environment)
    }

    /// Opens the trial's bucket in this process.
    func openRemote() throws -> ObjectStoreRemote {
        if let moto { return try moto.remote(bucketURL) }
        return try ObjectStoreRemote.open(bucketURL)
    }

    /// Names the trial in every issue, with the line that replays it.
    var label: String {
        let where_ = trial.bucket == .s3 ? "s3\(trial.smallMultipartThreshold ? ", 1 MiB multipart threshold" : "")" : "local folder"
        return "seed \(trial.seed) [\(command.rawValue); \(where_)] — replay: RTSYNC_KILL_SEED=\(trial.seed) swift test --filter KillNineTests"
    }

    func fail(_ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        Issue.record("\(label)\n\(what)\nlog:\n  \(events.joined(separator: "\n  "))", sourceLocation: sourceLocation)
    }

    // MARK: Setup and edits

    /// A starts from the bundled demo database as a new user and syncs; B joins that user through the bucket.
    func setUp() async throws {
        let asset = try LTFixture.demoCopy(in: dir)
        var joinUser: String?
        for home in [a, b] {
            // A cloud bucket needs the premium tier; a local folder works on free.
            try ltEditSettings(home) { $0.tier = moto == nil ? .free : .premium; $0.bucket = bucketURL }
            let remote = try openRemote()
            let result = try await InitChain(home: home, remote: remote, joinUser: joinUser, bundledAsset: asset, retry: ltShortRetry).run()
            joinUser = result.userId
            let first = try await Syncer(home: home, remote: remote, retry: ltShortRetry).sync()
            try #require(first.ok, "\(label): first sync of \(home.root.lastPathComponent): \(first.phases)")
        }
        user = joinUser ?? ""
    }

    /// Inserts `count` ledger rows into `things` on `home` in one statement, each with `payload` random bytes of
    /// description (as hex), so a large batch makes a diff, a backup and an apply that take a while.
    func insert(_ home: RTSyncHome, count: Int, payload: Int) throws {
        let prefix = "kn-\(home.root.lastPathComponent)-"
        let start = nextRow
        nextRow += count
        try SyncDatabase(path: home.database.path).execute("""
            WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
            INSERT INTO things(id, account_id, title, description)
            SELECT printf('%s%07d', ?, ? + i), (SELECT account_id FROM owners LIMIT 1),
                   printf('ledger %s%07d', ?, ? + i), hex(randomblob(?)) FROM n
            """, [.integer(Int64(count)), .text(prefix), .integer(Int64(start)), .text(prefix), .integer(Int64(start)), .integer(Int64(payload))])
        for i in start..<(start + count) {
            let id = prefix + String(format: "%07d", i)
            ledger[id] = "ledger " + id
        }
        events.append("inserted \(count) row(s) of \(payload * 2) characters on \(home.root.lastPathComponent)")
    }

    /// A large batch: 300 to 2,500 rows of about 1 KB.
    func insertLarge(_ home: RTSyncHome) throws {
        try insert(home, count: Int.random(in: 300...2_500, using: &rng), payload: 500)
    }

    /// A few small rows.
    func insertSmall(_ home: RTSyncHome) throws {
        try insert(home, count: Int.random(in: 1...5, using: &rng), payload: 8)
    }

    /// Recordings written on `home`: their names and bytes, to compare with what the other device pulls.
    var media: [String: Data] = [:]

    /// Writes `count` recordings of 20 KB to 2.5 MB of seeded bytes into `home`'s documents.
    func writeMedia(_ home: RTSyncHome, count: Int) throws {
        let folder = home.documents.appendingPathComponent("recordings", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for i in 0..<count {
            let size = Int.random(in: 20_000...2_500_000, using: &rng)
            var words = [UInt64](repeating: 0, count: (size + 7) / 8)
            for j in words.indices { words[j] = rng.next() }
            let data = words.withUnsafeBytes { Data($0.prefix(size)) }
            let name = "kn-\(i).m4a"
            try data.write(to: folder.appendingPathComponent(name))
            media[name] = data
        }
        events.append("wrote \(count) recording(s) of \(media.values.map(\.count).reduce(0, +)) bytes on \(home.root.lastPathComponent)")
    }

    /// B has every recording A wrote, byte for byte, and no other.
    func checkMedia() {
        let folder = b.documents.appendingPathComponent("recordings", isDirectory: true)
        let names = Set(((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { !$0.hasPrefix(".") })
        if names != Set(media.keys) { fail("B's recordings \(names.sorted()) are not A's \(media.keys.sorted())") }
        for (name, data) in media where (try? Data(contentsOf: folder.appendingPathComponent(name))) != data {
            fail("B's \(name) differs from A's")
        }
    }

    // MARK: Running commands

    /// Runs a command normally; it must exit 0 within the time limit.
    @discardableResult
    func normal(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> KNRun {
        let r = try await runner.run(arguments)
        events.append(r.description.components(separatedBy: "\n")[0])
        if r.timedOut { fail("stuck: \(r)", sourceLocation: sourceLocation) }
        else if r.status != 0 { fail("a normal run failed: \(r)", sourceLocation: sourceLocation) }
        return r
    }

    /// Runs the command under test and kills it after a seeded delay (2 ms to 400 ms, log-uniform); one time in
    /// three the run that follows a kill is killed too (up to three kills), so recovery itself is interrupted.
    func killed(_ arguments: [String]) async throws {
        for attempt in 1...3 {
            let delay = Foundation.exp(Double.random(in: Foundation.log(0.002)...Foundation.log(0.4), using: &rng))
            let r = try await runner.run(arguments, killAfter: delay)
            events.append("KILL -9 after \(String(format: "%.0f ms", delay * 1000)): " + (r.killed ? "killed" : "had already ended, exit \(r.status)")
                       + " (\(r.description.components(separatedBy: "\n")[0]))")
            if !r.killed && r.status != 0 { fail("the run to be killed failed on its own: \(r)") }
            if !r.killed || attempt == 3 || Int.random(in: 0..<3, using: &rng) != 0 { return }
        }
    }

    func sync(_ home: RTSyncHome) -> [String] { ["sync", "--home", home.root.path, "--json"] }

    /// Syncs A then B, round after round, until one round changes nothing on either (up to 8 rounds); every
    /// run must finish within its time limit.
    func settle() async throws {
        for round in 1...8 {
            var quiet = true
            for home in [a, b] {
                let r = try await normal(sync(home))
                guard r.status == 0, !r.timedOut else { quiet = false; continue }
                if let json = try? jsonObject(String(r.stdout.drop(while: { $0 != "{" }))), let report = json["report"] as? [String: Any] {
                    let moved = ((report["uploaded"] as? [Any])?.count ?? 0) + ((report["downloaded"] as? [Any])?.count ?? 0)
                    if moved > 0 || report["exported"] != nil && !(report["exported"] is NSNull) { quiet = false }
                } else {
                    quiet = false
                    fail("sync --json printed no report: \(r.stdout.prefix(500))")
                }
            }
            if quiet && round > 1 { return }
        }
        fail("the devices never settled: 8 rounds of sync on A and B kept moving diffs")
    }

    // MARK: Scenarios

    /// Prepares the command's situation, kills it, and re-runs it normally.
    func killAndRecover() async throws {
        let db = { (h: RTSyncHome) in h.database.path }
        switch command {
        case .syncExport:
            try insertSmall(b)
            try await normal(sync(b))
            try insertLarge(a)
            try await killed(sync(a))
        case .syncApply:
            try insertLarge(a)
            try await normal(sync(a))
            try insertSmall(b)
            try await killed(sync(b))
        case .backupCreate:
            try insertLarge(a)
            let upload = Bool.random(using: &rng)
            let arguments = ["backup", "create", "--home", a.root.path] + (upload ? ["--upload"] : [])
            try await killed(arguments)
            try await normal(arguments)
            try checkBackups(a)
        case .backupRestore:
            // The backup holds rows B has not exported yet; later rows reach the bucket before the restore.
            try insertSmall(b)
            let made = try await normal(["backup", "create", "--home", b.root.path, "--json"])
            let id = try #require(try jsonObject(made.stdout)["id"] as? String, "\(label): backup create printed no id: \(made.stdout)")
            try insertLarge(a)
            try await normal(sync(a))
            try await normal(sync(b))
            try insertSmall(b)
            try await normal(sync(b))
            let restore = ["backup", "restore", "--home", b.root.path, id]
            try await killed(restore)
            // Either the person repeats the restore, or just syncs (issue 15 §2: any later command must finish it).
            if Bool.random(using: &rng) { try await normal(restore) } else { events.append("no repeat of the restore") }
        case .compact:
            try insertLarge(a)
            try insertSmall(b)
            for h in [a, b, a] { try await normal(sync(h)) }
            let compact = ["compact", "--home", a.root.path]
            try await killed(compact)
            try await normal(compact)
        case .diffCreate:
            try insertLarge(a)
            let create = ["diff", "create", "--db", db(a), "--out", a.outbox.path]
            try await killed(create)
            try await normal(create)
        case .diffApply:
            try insertLarge(a)
            let created = try await normal(["diff", "create", "--db", db(a), "--out", a.outbox.path])
            let file = URL(fileURLWithPath: created.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
            // B applies its own copy, as if it came by mail; A's outbox still uploads the same diff.
            let hand = dir.url.appendingPathComponent("hand", isDirectory: true)
            try FileManager.default.createDirectory(at: hand, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: file, to: hand.appendingPathComponent(file.lastPathComponent))
            let apply = ["diff", "apply", "--db", db(b), hand.path]
            try await killed(apply)
            try await normal(apply)
        case .mediaSync:
            try writeMedia(a, count: Int.random(in: 3...8, using: &rng))
            let push = ["media", "sync", "--home", a.root.path]
            try await killed(push)
            try await normal(push)
            try await normal(["media", "sync", "--home", b.root.path])
        }
        // More edits after the kill, on both sides, so recovery also carries new work.
        try insertSmall(a)
        try insertSmall(b)
        try await settle()
    }

    // MARK: Checks

    /// Every listed backup is verified, no more are kept than the settings say.
    func checkBackups(_ home: RTSyncHome) throws {
        let list = BackupManager(database: home.database, folder: home.backups, keep: try home.loadSettings().keepBackups).list()
        if list.count > (try home.loadSettings().keepBackups) { fail("\(list.count) backups kept on \(home.root.lastPathComponent), more than keepBackups") }
        for b in list where !b.verified && b.awaitingVerification != true { fail("backup \(b.id) on \(home.root.lastPathComponent) is listed as damaged") }
    }

    func checkIntegrity(_ home: RTSyncHome) throws {
        let result = try Connection(path: home.database.path, mode: .readOnly).rows("PRAGMA integrity_check").compactMap { $0.first?.string }
        if result != ["ok"] { fail("integrity_check on \(home.root.lastPathComponent): \(result.prefix(10))") }
    }

    /// Every ledger row is present exactly once with its title; no row with a ledger id or title that the ledger lacks.
    /// - Parameter lostIsKnown: a known bug that explains lost rows on this device; they are then recorded as
    ///   that known issue (duplicates, strangers and wrong titles still fail).
    func checkLedger(_ home: RTSyncHome, lostIsKnown: String? = nil) throws {
        let name = home.root.lastPathComponent
        let rows = try Connection(path: home.database.path, mode: .readOnly)
            .rows("SELECT id, title FROM things WHERE id LIKE 'kn-%' OR title LIKE 'ledger kn-%'")
        var seen: [String: Int] = [:]
        var wrongTitle: [String] = []
        for row in rows {
            let id = row[0].string ?? "", title = row[1].string ?? ""
            seen[id, default: 0] += 1
            if let expected = ledger[id], expected != title { wrongTitle.append(id) }
        }
        let titles = Dictionary(grouping: rows.compactMap { $0[1].string }, by: { $0 }).filter { $0.value.count > 1 }.keys
        let lost = ledger.keys.filter { seen[$0] == nil }.sorted()
        let duplicated = seen.filter { $0.value > 1 }.map(\.key).sorted() + titles.sorted()
        let unknown = seen.keys.filter { ledger[$0] == nil }.sorted()
        if !lost.isEmpty {
            let message = "\(name) LOST \(lost.count) of \(ledger.count) ledger row(s), e.g. \(lost.prefix(5))"
            if let lostIsKnown { withKnownIssue(Comment(rawValue: lostIsKnown)) { fail(message) } } else { fail(message) }
        }
        if !duplicated.isEmpty { fail("\(name) DUPLICATED \(duplicated.count) ledger row(s), e.g. \(duplicated.prefix(5))") }
        if !unknown.isEmpty { fail("\(name) has \(unknown.count) row(s) the ledger never made, e.g. \(unknown.prefix(5))") }
        if !wrongTitle.isEmpty { fail("\(name) has \(wrongTitle.count) ledger row(s) with another title, e.g. \(wrongTitle.prefix(5))") }
    }

    func checkIdentical() throws {
        let ta = try ltAppTables(a.database), tb = try ltAppTables(b.database)
        for table in Set(ta.keys).union(tb.keys).sorted() where ta[table] != tb[table] {
            let onlyA = Set(ta[table] ?? []).subtracting(tb[table] ?? []).count, onlyB = Set(tb[table] ?? []).subtracting(ta[table] ?? []).count
            fail("table \(table) differs: \(onlyA) row(s) only on A, \(onlyB) only on B")
        }
    }

    /// Hidden files that belong where they are: the home lock and the media manifest.
    static let keptHiddenFiles: Set<String> = [".rtsync.lock", ".rtsync-media-manifest.json"]

    /// Files a killed run may leave and a later run should remove: every hidden file in the homes and the bucket
    /// except ``keptHiddenFiles`` (temp diffs and backups `.<id>.sqlite.tmp`, the local bucket's `.rtsync-tmp-*`,
    /// restore, catch-up and download temps, atomic-write temps), apply folders `rtsync-apply-*` in TMPDIR, and
    /// backup files no list names.
    func debris() async throws -> [String] {
        var found: [String] = []
        let fm = FileManager.default
        for root in [a.root, b.root, runner.tmp] + (moto == nil ? [bucket] : []) {
            guard let walk = fm.enumerator(at: root, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walk {
                let name = url.lastPathComponent
                if (name.hasPrefix(".") && !Self.keptHiddenFiles.contains(name)) || name.hasPrefix("rtsync-apply-") || name.hasPrefix("rtsync-snapshot-") {
                    found.append(url.path.replacingOccurrences(of: dir.url.path + "/", with: ""))
                    walk.skipDescendants()
                }
            }
        }
        for home in [a, b] {
            let listed = Set(BackupManager(database: home.database, folder: home.backups).list().map(\.file))
            let files = ((try? fm.contentsOfDirectory(atPath: home.backups.path)) ?? []).filter { $0.hasSuffix(".sqlite") && !$0.hasPrefix(".") }
            for f in files where !listed.contains(f) { found.append("\(home.root.lastPathComponent)/documents/backups/\(f) (not listed)") }
        }
        if let moto { found += try await moto.unfinishedUploads(under: bucketURL).map { "bucket: unfinished multipart upload of \($0)" } }
        return found.sorted()
    }

    /// After a compaction, a new device joining from the bucket (snapshot plus later diffs) has every ledger row.
    func checkNewDevice() async throws {
        let c = ltHome(dir, "C")
        try await normal(["init", "--home", c.root.path, "--bucket", bucketURL, "--user", user] + (moto == nil ? [] : ["--tier", "premium"]))
        try await normal(sync(c))
        try checkIntegrity(c)
        // Not caused by the kill (seed 298 fails the same way when the kill lands after compact ended): see
        // NewDeviceAfterCompactionTests. Timing decides it, so any compact seed may hit it; 214, 277 and 298 did.
        try checkLedger(c)
    }

    func checkAll() async throws {
        for home in [a, b] {
            try checkIntegrity(home)
            try checkLedger(home)
        }
        try checkIdentical()
        for home in [a, b] {
            let name = home.root.lastPathComponent
            let quarantined = ((try? FileManager.default.contentsOfDirectory(atPath: home.quarantine.path)) ?? []).filter { !$0.hasPrefix(".") }
            if !quarantined.isEmpty { fail("\(name) quarantined valid diffs: \(quarantined)") }
            let pending = try SyncDatabase(path: home.database.path).pendingChangeCount()
            if pending != 0 { fail("\(name) still has \(pending) change(s) to export after settling") }
        }
        if command == .compact { try await checkNewDevice() }
        if command == .mediaSync { checkMedia() }
    }
}

// MARK: - The test

@Suite("kill -9 harness: killed commands lose, duplicate, corrupt and wedge nothing",
       .enabled(if: RTSyncBinary.url != nil, "the rtsync binary is not built"))
struct KillNineTests {
    @Test("a command killed at a random point, then re-run, leaves both devices whole and equal",
          arguments: KNTrial.fromEnvironment())
    func killedCommand_thenRerun_losesDuplicatesCorruptsNothing_andLeavesNoDebris(_ trial: KNTrial) async throws {
        try await Self.trial(trial)
    }

    @Test("a command killed at a random point with an S3 bucket, then re-run, leaves both devices whole and equal and no unfinished upload",
          .enabled(if: !LTMoto.skipRequested, "RTSYNC_SKIP_S3=1"), arguments: KNTrial.fromEnvironment(.s3))
    func killedCommandOnS3_thenRerun_losesDuplicatesCorruptsNothing_andLeavesNoDebrisInHomesOrBucket(_ trial: KNTrial) async throws {
        try await Self.trial(trial)
    }

    static func trial(_ trial: KNTrial) async throws {
        await KNGate.shared.enter()
        defer { Task { await KNGate.shared.leave() } }
        let run = try await KNTrialRun(trial)
        defer { if run.moto != nil { let url = run.bucketURL, remote = try? run.openRemote(); Task { await knEmpty(remote, url) } } }
        try await run.setUp()
        let before = try await run.debris()
        if let bug = knKnownBugs[trial.seed] {
            await withKnownIssue("\(run.label): \(bug)", isIntermittent: true) {
                try await run.killAndRecover()
                try await run.checkAll()
            }
            return
        }
        try await run.killAndRecover()
        try await run.checkAll()
        let after = try await run.debris()
        if ProcessInfo.processInfo.environment["RTSYNC_KILL_VERBOSE"] == "1" {
            print("kill -9 \(run.label)\n  \(run.events.joined(separator: "\n  "))\n  debris before \(before.count), after \(after.count): \(after)")
        }
        let left = after.filter { !before.contains($0) }
        // Every kind a killed run may leave (a killed export's temp diff in the outbox, a killed backup's temp copy,
        // a killed restore's prepared copy, a killed apply's folder or snapshot pointer in TMPDIR, a killed write's
        // temp file in the local-folder bucket, atomic-write temps, a complete backup never listed, and on S3 an open
        // multipart upload with its resume file) is removed by the next sync's clean-up, which the settling runs
        // include: anything left is a failure.
        #expect(left.isEmpty, "\(run.label)\ndebris the runs after the kill did not remove: \(left)\nlog:\n  \(run.events.joined(separator: "\n  "))")
    }
}

// MARK: - S3 helpers

extension LTMoto {
    /// The multipart uploads started and neither completed nor aborted under the prefix of `bucketURL`
    /// (`s3://bucket/prefix`): their keys and upload ids, from ListMultipartUploads (moto runs without
    /// authentication, so a plain GET does).
    func unfinishedUploadIDs(under bucketURL: String) async throws -> [(key: String, uploadID: String)] {
        let url = try #require(URL(string: bucketURL))
        let prefix = url.path.drop(while: { $0 == "/" }) + "/"
        var components = URLComponents(url: endpoint.appendingPathComponent(url.host ?? Self.bucket), resolvingAgainstBaseURL: false)!
        components.queryItems = [URLQueryItem(name: "uploads", value: ""), URLQueryItem(name: "prefix", value: String(prefix))]
        let (data, response) = try await URLSession.shared.data(from: components.url!)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let text = String(decoding: data, as: UTF8.self)
        try #require(status == 200, "ListMultipartUploads answered \(status): \(text.prefix(300))")
        func values(_ tag: String, in text: Substring) -> [String] {
            text.components(separatedBy: "<\(tag)>").dropFirst().compactMap { $0.components(separatedBy: "</\(tag)>").first }
        }
        return text.components(separatedBy: "<Upload>").dropFirst().compactMap { upload in
            let body = Substring(upload.components(separatedBy: "</Upload>")[0])
            guard let key = values("Key", in: body).first, let id = values("UploadId", in: body).first else { return nil }
            return (key, id)
        }
    }

    /// The keys of ``unfinishedUploadIDs(under:)``.
    func unfinishedUploads(under bucketURL: String) async throws -> [String] {
        try await unfinishedUploadIDs(under: bucketURL).map(\.key)
    }

    /// Aborts every unfinished multipart upload under the prefix of `bucketURL`.
    func abortUnfinishedUploads(under bucketURL: String) async {
        guard let uploads = try? await unfinishedUploadIDs(under: bucketURL) else { return }
        for upload in uploads {
            var components = URLComponents(url: endpoint.appendingPathComponent(Self.bucket).appendingPathComponent(upload.key), resolvingAgainstBaseURL: false)!
            components.queryItems = [URLQueryItem(name: "uploadId", value: upload.uploadID)]
            var request = URLRequest(url: components.url!)
            request.httpMethod = "DELETE"
            _ = try? await URLSession.shared.data(for: request)
        }
    }
}

/// Empties an S3 trial's prefix (objects and unfinished uploads), so hundreds of trials do not fill moto's memory.
func knEmpty(_ remote: ObjectStoreRemote?, _ bucketURL: String) async {
    if let moto = try? await LTMoto.shared.value { await moto.abortUnfinishedUploads(under: bucketURL) }
    guard let remote, let all = try? await remote.list(prefix: "") else { return }
    for o in all { try? await remote.delete(key: o.key) }
}
