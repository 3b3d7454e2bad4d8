import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Process and loopback-port helpers shared by the test targets (BucketClientTests, IntegrationTests).

/// A test could not set up what it needs (a server, a tool).
public struct TestSetupError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The full path of a program on PATH (or in /usr/sbin, /sbin), or nil.
public func findExecutable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    for dir in (path + ":/usr/sbin:/sbin").split(separator: ":") {
        let candidate = "\(dir)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// Runs a program to completion and returns its standard output; throws with its standard error when it fails.
@discardableResult
public func runProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    // Read stderr on another thread so a chatty child cannot block on a full pipe.
    nonisolated(unsafe) var errData = Data()
    let errThread = Thread { errData = err.fileHandleForReading.readDataToEndOfFile() }
    errThread.start()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    let end = waitForExitBlocking(process)
    while !errThread.isFinished { usleep(1000) }
    guard end == ProcessEnd(status: 0, signaled: false) else {
        throw TestSetupError("\(executable) \(arguments.prefix(1)) failed (\(end.signaled ? "signal " : "")\(end.status)): \(String(decoding: errData, as: UTF8.self))")
    }
    return String(decoding: outData, as: UTF8.self)
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
public func freeLoopbackPort() throws -> Int {
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw TestSetupError("socket() failed") }
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = 0
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) }
    }
    guard bound == 0 else { throw TestSetupError("bind() failed") }
    _ = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
    }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// Waits until something listens on the loopback port; throws with the end of `log` when nothing does in time.
public func waitForPort(_ port: Int, seconds: Double, log: URL) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
        if connected == 0 { return }
        try await Task.sleep(nanoseconds: 100_000_000)
    }
    let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
    throw TestSetupError("nothing listened on port \(port) within \(Int(seconds)) s: \(text.suffix(500))")
}

/// Runs a program to completion; returns status and combined output.
@discardableResult
public func runCapturing(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let outFile = FileManager.default.temporaryDirectory.appendingPathComponent("lt-run-\(UUID().uuidString)")
    _ = FileManager.default.createFile(atPath: outFile.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: outFile) }
    let handle = try FileHandle(forWritingTo: outFile)
    process.standardOutput = handle
    process.standardError = handle
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let end = waitForExitBlocking(process)
    try handle.close()
    return (end.status, String(decoding: (try? Data(contentsOf: outFile)) ?? Data(), as: UTF8.self))
}

/// How a child process ended: its exit status, or the signal that ended it.
public struct ProcessEnd: Sendable, Equatable {
    /// The exit status when the process exited, else the number of the signal that ended it.
    public let status: Int32
    /// True when a signal ended the process (it did not exit by itself).
    public let signaled: Bool
}

/// Waits for a started process without blocking a thread of the (small) cooperative pool, and says how it ended.
///
/// Polls `waitid(…, WNOWAIT)` rather than waiting for Foundation's `terminationHandler` alone: on Linux a child
/// killed by SIGKILL was once left a zombie that Foundation's monitor never reaped, and a wait on the handler hung
/// the whole test run. `WNOWAIT` leaves the child for Foundation to reap, so its own bookkeeping stays intact;
/// the status comes from the kernel either way.
@discardableResult
public func waitForExit(_ process: Process) async -> ProcessEnd {
    let ended = ExitSignal(process)
    while true {
        if let end = exitIfEnded(process) { return end }
        await ended.wait(upTo: 20)
    }
}

/// The same for synchronous callers: blocks the calling thread until the process has ended.
@discardableResult
public func waitForExitBlocking(_ process: Process) -> ProcessEnd {
    let ended = ExitSignal(process)
    while true {
        if let end = exitIfEnded(process) { return end }
        ended.waitBlocking(upTo: 20)
    }
}

/// Wakes a waiter as soon as Foundation reports the exit (its `terminationHandler`), and otherwise after a
/// few milliseconds, so that a missed report costs a poll and not the run.
private final class ExitSignal: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    init(_ process: Process) {
        process.terminationHandler = { [semaphore] _ in semaphore.signal() }
    }

    func waitBlocking(upTo milliseconds: Int) {
        _ = semaphore.wait(timeout: .now() + .milliseconds(milliseconds))
    }

    func wait(upTo milliseconds: Int) async {
        // Off the cooperative pool: a global queue thread waits on the semaphore.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { [self] in
                waitBlocking(upTo: milliseconds)
                done.resume()
            }
        }
    }
}

/// How `process` ended, or nil while it runs: Foundation's record once it has one, else the kernel's (not reaped).
private func exitIfEnded(_ process: Process) -> ProcessEnd? {
    if !process.isRunning {
        return ProcessEnd(status: process.terminationStatus, signaled: process.terminationReason == .uncaughtSignal)
    }
    let pid = process.processIdentifier
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, childPid(info) == pid else {
        // Still running, or ECHILD: Foundation reaped it between the two checks (isRunning turns false next time).
        return nil
    }
    #if canImport(Glibc)
    let code = info.si_code, status = info._sifields._sigchld.si_status
    #else
    let code = info.si_code, status = info.si_status
    #endif
    return ProcessEnd(status: status, signaled: code != Int32(CLD_EXITED))
}

private func childPid(_ info: siginfo_t) -> pid_t {
    #if canImport(Glibc)
    return info._sifields._sigchld.si_pid
    #else
    return info.si_pid
    #endif
}

/// Starts `moto_server` on 127.0.0.1:`port` under a watchdog shell that kills it as soon as this test
/// process (or the shell) ends. SIGKILL, because moto started from Foundation's Process can ignore SIGTERM.
/// Output goes to `log`; the runner's pipes are never inherited (`swift test` would wait for them).
@discardableResult
public func startMotoServer(_ moto: String, port: Int, log: URL, environment changes: [String: String?] = [:]) throws -> Process {
    let script = """
    "$0" -H 127.0.0.1 -p \(port) >"\(log.path)" 2>&1 &
    M=$!
    trap 'kill -9 $M 2>/dev/null; exit 0' TERM INT EXIT
    while kill -0 \(getpid()) 2>/dev/null && kill -0 $M 2>/dev/null; do sleep 0.5; done
    """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", script, moto]
    var environment = ProcessInfo.processInfo.environment
    for (key, value) in changes { environment[key] = value }
    process.environment = environment
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    return process
}

/// Starts `executable arguments...` in the background, its output in `log`, through a shell that kills it with
/// SIGKILL when this test process ends (as ``startMotoServer(_:port:log:environment:)`` does for moto).
@discardableResult
public func startWatchedServer(_ executable: String, _ arguments: [String], log: URL) throws -> Process {
    let script = """
    "$@" >"\(log.path)" 2>&1 &
    M=$!
    trap 'kill -9 $M 2>/dev/null; exit 0' TERM INT EXIT
    while kill -0 \(getpid()) 2>/dev/null && kill -0 $M 2>/dev/null; do sleep 0.5; done
    """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", script, "sh", executable] + arguments
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    return process
}

// MARK: - The built rtsync binary

/// What a finished command returned and printed.
public struct CommandOutput: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// The built `rtsync`: `$RTSYNC_BIN`, else the one in the build products folder beside the test bundle, else the
/// newest `.build*/debug/rtsync` under `packageRoot`.
public func locateBuiltBinary(packageRoot: URL) -> URL? {
    let fm = FileManager.default
    if let env = ProcessInfo.processInfo.environment["RTSYNC_BIN"], !env.isEmpty { return URL(fileURLWithPath: env) }
    let starts = [Bundle.main.bundleURL, URL(fileURLWithPath: CommandLine.arguments[0])] + Bundle.allBundles.map(\.bundleURL)
    for start in starts {
        var dir = start
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent("rtsync")
            var isDir: ObjCBool = false
            if fm.fileExists(atPath: candidate.path, isDirectory: &isDir), !isDir.boolValue, fm.isExecutableFile(atPath: candidate.path) {
                return candidate
            }
            dir = dir.deletingLastPathComponent()
        }
    }
    let builds = ((try? fm.contentsOfDirectory(atPath: packageRoot.path)) ?? []).filter { $0.hasPrefix(".build") }
    return builds.map { packageRoot.appendingPathComponent($0).appendingPathComponent("debug/rtsync") }
        .filter { fm.isExecutableFile(atPath: $0.path) }
        .max { a, b in
            let da = (try? fm.attributesOfItem(atPath: a.path)[.modificationDate] as? Date) ?? .distantPast
            let db = (try? fm.attributesOfItem(atPath: b.path)[.modificationDate] as? Date) ?? .distantPast
            return da < db
        }
}

/// Starts a program with environment changes (nil removes a variable), its output going to two files.
private func startCapturing(_ executable: URL, _ arguments: [String], environment changes: [String: String?]) throws -> (Process, URL, URL, FileHandle, FileHandle) {
    let base = FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-cmd-\(UUID().uuidString)")
    let outURL = base.appendingPathExtension("out"), errURL = base.appendingPathExtension("err")
    _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
    _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
    let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    var environment = ProcessInfo.processInfo.environment
    for (key, value) in changes { environment[key] = value }
    process.environment = environment
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    return (process, outURL, errURL, out, err)
}

private func collect(_ status: Int32, _ outURL: URL, _ errURL: URL, _ out: FileHandle, _ err: FileHandle) throws -> CommandOutput {
    try out.close(); try err.close()
    defer { try? FileManager.default.removeItem(at: outURL); try? FileManager.default.removeItem(at: errURL) }
    return CommandOutput(status: status,
                         stdout: String(decoding: try Data(contentsOf: outURL), as: UTF8.self),
                         stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
}

/// Runs a program to completion, capturing both output streams through files (a full pipe cannot stall it).
public func runCommand(_ executable: URL, _ arguments: [String], environment: [String: String?] = [:]) throws -> CommandOutput {
    let (process, outURL, errURL, out, err) = try startCapturing(executable, arguments, environment: environment)
    return try collect(waitForExitBlocking(process).status, outURL, errURL, out, err)
}

/// Runs `arguments` (a program and its arguments) under the `faketime` wrapper, its clock shifted by `offset` ("-2h").
/// The wrapper now and then fails before starting the program ("sem_open: File exists": a semaphore left in /dev/shm by
/// a wrapper killed earlier, whose process id this one got); it is run again then, as the chaos harness does.
public func runUnderFaketime(_ faketime: URL, offset: String, _ arguments: [String]) throws -> CommandOutput {
    var result = try runCommand(faketime, ["-f", offset] + arguments)
    for _ in 0..<4 where result.status != 0 && result.stderr.contains("sem_open") && result.stderr.contains("faketime") {
        result = try runCommand(faketime, ["-f", offset] + arguments)
    }
    return result
}

/// The same, waiting without blocking a thread of the (small) cooperative pool.
public func runCommand(_ executable: URL, _ arguments: [String], environment: [String: String?] = [:]) async throws -> CommandOutput {
    let (process, outURL, errURL, out, err) = try startCapturing(executable, arguments, environment: environment)
    let end = await waitForExit(process)
    return try collect(end.status, outURL, errURL, out, err)
}
