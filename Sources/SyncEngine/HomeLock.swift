import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive lock on a home folder, so that two runs (a cron job and a person, an app's `Syncer` and the CLI)
/// never interleave export, outbox clean-up, apply, backup, restore, compaction, init or a demo reset on one database.
///
/// It is an `flock` on `support/.rtsync.lock`, which also holds the owner's process id for the message a second run
/// prints. The lock is released when the value is released, and by the system when the process ends, however it ends.
///
/// An operation that takes the lock with `withLock` may call other locking operations (sync runs a compaction and
/// a backup): inside its scope the same task reuses the held lock instead of waiting for itself. Other tasks of the
/// same process wait like other processes do (flock belongs to the open file description, not to the process).
/// Child tasks and `Task {}` started inside the scope inherit it (a task-local value): do not let them outlive it.
public final class HomeLock: @unchecked Sendable {
    private let descriptor: Int32
    /// The lock file.
    public let path: String

    /// Lock files held by the current task, inside `withLock` scopes.
    @TaskLocal static var heldByTask: Set<String> = []

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit {
        // A lock reused inside a scope (descriptor -1) belongs to the scope that took it.
        guard descriptor >= 0 else { return }
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// The lock file of `home`.
    public static func lockFile(_ home: RTSyncHome) -> String { home.support.appendingPathComponent(".rtsync.lock").path }

    /// Whether the current task already holds the lock of `home` (inside a `withLock` scope).
    public static func isHeld(_ home: RTSyncHome) -> Bool { heldByTask.contains(lockFile(home)) }

    /// Takes the lock of `home`, waiting up to `wait` for another run to finish. Inside a `withLock` scope of the
    /// same home, returns at once (the scope's lock covers it). `shouldStop` is asked while waiting; when it says
    /// yes the wait ends (a command told to stop by Ctrl-C does not wait out another run first).
    /// - Throws: `LifecycleError.homeBusy` naming the other run's process id when it is still held;
    ///   `LifecycleError.lockWaitStopped` when `shouldStop` ended the wait.
    public static func acquire(_ home: RTSyncHome, wait: TimeInterval = 30, shouldStop: () -> Bool = { false }) throws -> HomeLock {
        let path = lockFile(home)
        if heldByTask.contains(path) { return HomeLock(descriptor: -1, path: path) }
        try FileManager.default.createDirectory(at: home.support, withIntermediateDirectories: true)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw LifecycleError.homeBusy(path: path, pid: nil) }
        let deadline = Date().addingTimeInterval(wait)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if shouldStop() {
                close(fd)
                throw LifecycleError.lockWaitStopped(path: path)
            }
            guard errno == EWOULDBLOCK || errno == EINTR, Date() < deadline else {
                var buffer = [UInt8](repeating: 0, count: 32)
                let n = pread(fd, &buffer, buffer.count, 0)
                close(fd)
                let pid = n > 0 ? Int32(String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) : nil
                throw LifecycleError.homeBusy(path: path, pid: pid)
            }
            usleep(50_000)
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, text, text.count, 0)
        return HomeLock(descriptor: fd, path: path)
    }

    /// Runs `body` holding the lock of `home` (taken, waiting up to `wait`, unless this task holds it already).
    /// - Throws: `LifecycleError.homeBusy`, `LifecycleError.lockWaitStopped` when `shouldStop` ended the wait
    ///   (`body` did not run), or what `body` throws.
    public static func withLock<T>(_ home: RTSyncHome, wait: TimeInterval = 30, shouldStop: () -> Bool = { false },
                                   _ body: () throws -> T) throws -> T {
        let lock = try acquire(home, wait: wait, shouldStop: shouldStop)
        defer { withExtendedLifetime(lock) {} }
        return try $heldByTask.withValue(heldByTask.union([lock.path])) { try body() }
    }

    /// Runs `body` holding the lock of `home` (taken, waiting up to `wait`, unless this task holds it already).
    /// - Throws: `LifecycleError.homeBusy`, or what `body` throws.
    ///
    /// The wait suspends instead of blocking a thread; it ends when the task is cancelled (`CancellationError`) or
    /// `shouldStop` says yes (`LifecycleError.lockWaitStopped`); `body` did not run then.
    public static func withLock<T>(_ home: RTSyncHome, wait: TimeInterval = 30, shouldStop: () -> Bool = { false },
                                   isolation: isolated (any Actor)? = #isolation,
                                   _ body: () async throws -> T) async throws -> T {
        let lock = try await acquireSuspending(home, wait: wait, shouldStop: shouldStop)
        defer { withExtendedLifetime(lock) {} }
        return try await $heldByTask.withValue(heldByTask.union([lock.path])) { try await body() }
    }

    /// Takes the lock like ``acquire(_:wait:)``, polling without blocking a thread of the cooperative pool (a
    /// blocked thread there starves every other task of the process), and giving up when the task is cancelled.
    static func acquireSuspending(_ home: RTSyncHome, wait: TimeInterval, shouldStop: () -> Bool = { false },
                                  isolation: isolated (any Actor)? = #isolation) async throws -> HomeLock {
        let deadline = Date().addingTimeInterval(wait)
        while true {
            do { return try acquire(home, wait: 0) } catch LifecycleError.homeBusy(let path, let pid) {
                if shouldStop() { throw LifecycleError.lockWaitStopped(path: path) }
                guard Date() < deadline else { throw LifecycleError.homeBusy(path: path, pid: pid) }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
        }
    }

    /// The wait the command-line tool uses: `RTSYNC_LOCK_WAIT` seconds when set, else 30.
    public static var environmentWait: TimeInterval {
        ProcessInfo.processInfo.environment["RTSYNC_LOCK_WAIT"].flatMap { TimeInterval($0) }.map { max(0, $0) } ?? 30
    }
}
