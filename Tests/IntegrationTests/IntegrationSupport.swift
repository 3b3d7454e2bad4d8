import BucketClient
import BucketSync
import DiffFormat
import Foundation
import RTSyncTestSupport
import RTSQLite
import SyncEngine
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Helpers for the lifecycle (issue 5) and sync (issue 6) tests. Names carry an `LT` prefix so they cannot
// collide with helpers other test files of this target may add.

// MARK: - Fixtures and folders

enum LTFixture {
    /// `Fixtures/databases/record-thing-demo.sqlite` in the package.
    static let demoDatabase = RTSyncBinary.packageRoot.appendingPathComponent("Fixtures/databases/record-thing-demo.sqlite")
    /// The demo account id in the fixture.
    static let demoAccount = "2siEySuKO1wK4XiJHWQ0YxhLxd2"

    /// A private copy of the demo fixture inside `dir` (so a test can never modify the real one).
    static func demoCopy(in dir: TemporaryDirectory, name: String = "asset.sqlite") throws -> URL {
        let url = dir.file(name)
        try FileManager.default.copyItem(at: demoDatabase, to: url)
        return url
    }
}

/// Retries short enough for tests: a fault surfaces after at most two tries within a second.
let ltShortRetry = RemoteRetryPolicy(maxAttempts: 2, baseDelay: .milliseconds(5), maxDelay: .milliseconds(20), totalTimeout: .milliseconds(500))
/// No retries: an injected fault reaches the caller.
let ltNoRetry = RemoteRetryPolicy(maxAttempts: 1, baseDelay: .milliseconds(1), maxDelay: .milliseconds(1), totalTimeout: .seconds(1))

/// A home folder inside a temporary directory.
func ltHome(_ dir: TemporaryDirectory, _ name: String) -> RTSyncHome {
    RTSyncHome(root: dir.url.appendingPathComponent(name, isDirectory: true))
}

/// Updates a home's settings in place.
func ltEditSettings(_ home: RTSyncHome, _ edit: (inout RTSyncSettings) -> Void) throws {
    var s = try home.loadSettings()
    edit(&s)
    try home.saveSettings(s)
}

// MARK: - Database inspection

/// Every row of every app table (not `rtsync_*`, not `sqlite_*`), as sorted text lines per table.
func ltAppTables(_ path: URL) throws -> [String: [String]] {
    let db = try Connection(path: path.path, mode: .readOnly)
    let names = try db.rows("""
        SELECT name FROM sqlite_schema WHERE type = 'table'
          AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'rtsync\\_%' ESCAPE '\\' ORDER BY name
        """).compactMap { $0[0].string }
    var result: [String: [String]] = [:]
    for name in names {
        let rows = try db.rows("SELECT * FROM \"\(name.replacingOccurrences(of: "\"", with: "\"\""))\"")
        result[name] = rows.map { $0.map(\.sqlLiteral).joined(separator: "|") }.sorted()
    }
    return result
}

/// One scalar from a database file.
/// A diff object read straight from a bucket folder, as the SQLite file it carries: expanded into a new file in
/// `scratch` (the test's own folder, removed with it) when it travelled compressed (`DiffTransport`), the file
/// itself otherwise.
func ltDiffFile(_ url: URL, scratch: TemporaryDirectory) throws -> URL {
    guard DiffTransport.isCompressed(file: url) else { return url }
    let out = scratch.file("expanded-\(UUID().uuidString)-\(url.lastPathComponent)")
    try DiffTransport.expand(try Data(contentsOf: url), name: url.path, limit: DiffLimits.default.maxFileBytes, to: out)
    return out
}

func ltScalar(_ path: URL, _ sql: String, _ arguments: [SQLValue] = []) throws -> SQLValue? {
    try Connection(path: path.path, mode: .readOnly).scalar(sql, arguments)
}

/// Writes bytes that are not a database into `url`.
func ltWriteGarbage(_ url: URL, bytes: Int = 8192) throws {
    var data = Data("this is not an SQLite database, just garbage: ".utf8)
    while data.count < bytes { data.append(contentsOf: (0..<64).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ data.count) }) }
    try data.write(to: url)
}

// MARK: - Fault-injecting remote (mocks only for faults)

/// A RemoteStore wrapper that fails on purpose: every call (offline), or the Nth call of one operation,
/// either before reaching the real store or after it completed (a lost response).
final class LTFaultyRemote: RemoteStore, @unchecked Sendable {
    enum Operation: String, Sendable { case list, download, upload, delete }
    enum Mode: Sendable {
        /// Every call fails without reaching the store.
        case offline
        /// The Nth call (1-based) of `op` fails without reaching the store.
        case failBefore(Operation, nth: Int)
        /// The Nth call (1-based) of `op` reaches the store and completes, then the answer is lost.
        case failAfter(Operation, nth: Int)
    }

    let base: (any RemoteStore)?
    let mode: Mode
    private let lock = NSLock()
    private var counts: [Operation: Int] = [:]
    private(set) var injected = 0

    init(_ base: (any RemoteStore)?, _ mode: Mode) {
        self.base = base
        self.mode = mode
    }

    var isLocal: Bool { base?.isLocal ?? true }
    var requestsMade: Int { base?.requestsMade ?? 0 }
    var faultsInjected: Int { lock.lock(); defer { lock.unlock() }; return injected }

    private func fault(_ op: Operation, _ key: String) -> RemoteStoreError {
        RemoteStoreError.failed(key: key, reason: "injected network failure (\(op.rawValue))")
    }

    /// Whether this call fails, and whether before or after the store.
    private func decide(_ op: Operation) -> (before: Bool, after: Bool) {
        lock.lock(); defer { lock.unlock() }
        counts[op, default: 0] += 1
        let n = counts[op]!
        switch mode {
        case .offline: injected += 1; return (true, false)
        case .failBefore(let o, let nth) where o == op && n == nth: injected += 1; return (true, false)
        case .failAfter(let o, let nth) where o == op && n == nth: injected += 1; return (false, true)
        default: return (false, false)
        }
    }

    private func run<T>(_ op: Operation, _ key: String, _ body: (any RemoteStore) async throws -> T) async throws -> T {
        let d = decide(op)
        if d.before { throw fault(op, key) }
        guard let base else { throw fault(op, key) }
        let value = try await body(base)
        if d.after { throw fault(op, key) }
        return value
    }

    func list(prefix: String) async throws -> [RemoteObject] { try await run(.list, prefix) { try await $0.list(prefix: prefix) } }
    func download(key: String, to file: URL) async throws { try await run(.download, key) { try await $0.download(key: key, to: file) } }
    /// A sync's in-memory download of a small diff counts (and fails) as a download.
    func contents(of object: RemoteObject, limit: Int64) async throws -> Data? {
        try await run(.download, object.key) { try await $0.contents(of: object, limit: limit) }
    }
    func upload(file: URL, key: String, ifAbsent: Bool) async throws { try await run(.upload, key) { try await $0.upload(file: file, key: key, ifAbsent: ifAbsent) } }
    func delete(key: String) async throws { try await run(.delete, key) { try await $0.delete(key: key) } }
}

// MARK: - Processes

/// Runs the built `rtsync` with extra environment variables (RTSyncBinary.run inherits the test's environment
/// and blocks a thread while it waits).
func ltRTSync(_ arguments: [String], environment extra: [String: String] = [:]) async throws -> CommandResult {
    let binary = try #require(RTSyncBinary.url, "rtsync binary not found; build it or set RTSYNC_BIN")
    var changes: [String: String?] = ["RTSYNC_HOME": nil]
    for (k, v) in extra { changes[k] = v }
    return try await runCommand(binary, arguments, environment: changes)
}

// MARK: - Loopback S3 (moto_server)

/// A moto_server on a free loopback port, started once per test process and stopped when it ends.
///
/// Authentication is off: moto's SigV4 checker rejects `/` in query values, and sync lists `<user>/inbound/`.
/// The store still signs with the credentials given through the environment dictionary.
struct LTMoto: Sendable {
    let endpoint: URL
    static let bucket = "rtsync-lifetests"

    /// True when the environment asks to skip S3 tests (`RTSYNC_SKIP_S3=1`).
    static var skipRequested: Bool { ProcessInfo.processInfo.environment["RTSYNC_SKIP_S3"] == "1" }

    static let shared = Task<LTMoto, Error> { try await start() }

    /// The environment a device would have for this server.
    var environment: [String: String] {
        ["AWS_ACCESS_KEY_ID": "lifetests", "AWS_SECRET_ACCESS_KEY": "lifetests-secret", "AWS_REGION": "us-east-1",
         "AWS_ENDPOINT_URL": endpoint.absoluteString]
    }

    /// A bucket URL on a fresh random prefix.
    func freshBucketURL() -> String { "s3://\(Self.bucket)/lt-\(UUID().uuidString.prefix(8))" }

    /// Opens the S3 store for `url` with this server's environment, wrapped for SyncEngine.
    func remote(_ url: String) throws -> ObjectStoreRemote {
        let store = try makeObjectStore(url: URL(string: url)!, environment: environment)
        return ObjectStoreRemote(store: store, isLocal: false)
    }

    static func start() async throws -> LTMoto {
        guard let moto = findExecutable("moto_server") else {
            throw TestSetupError("moto_server not found on PATH: install it with `pip install 'moto[server]'` (or set RTSYNC_SKIP_S3=1 to skip the S3 tests)")
        }
        guard let python = findExecutable("python3") else { throw TestSetupError("python3 not found on PATH (needed to create the test bucket)") }
        let port = try freeLoopbackPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-lifetests-moto-\(port).log")
        let process = try startMotoServer(moto, port: port, log: log)
        LTChildren.register(process)
        try await waitForPort(port, seconds: 30, log: log)
        let endpoint = URL(string: "http://127.0.0.1:\(port)")!
        let made = try runCapturing(python, ["-c", """
            import boto3, sys
            boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1", aws_access_key_id="x",
                         aws_secret_access_key="x").create_bucket(Bucket=sys.argv[2])
            """, endpoint.absoluteString, bucket])
        guard made.status == 0 else { throw TestSetupError("could not create the test bucket on moto: \(made.output)") }
        return LTMoto(endpoint: endpoint)
    }
}

/// Child processes to terminate when the test process exits normally (the watchdogs cover crashes).
enum LTChildren {
    nonisolated(unsafe) static var pids: [pid_t] = []
    nonisolated(unsafe) static var folders: [URL] = []
    nonisolated(unsafe) static var installed = false
    static let lock = NSLock()

    /// Terminates `process` at exit and then removes `folder` (a server's storage), if given.
    static func register(_ process: Process, removing folder: URL? = nil) {
        lock.lock()
        defer { lock.unlock() }
        pids.append(process.processIdentifier)
        if let folder { folders.append(folder) }
        if !installed {
            installed = true
            atexit {
                for pid in LTChildren.pids { kill(pid, SIGTERM) }
                for folder in LTChildren.folders { try? FileManager.default.removeItem(at: folder) }
            }
        }
    }
}


