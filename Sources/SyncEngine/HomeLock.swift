import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive lock on a home folder, so that two runs (a cron job and a person, an app's `Syncer` and the CLI)
/// never interleave export, outbox clean-up, apply and backup on one database.
///
/// It is an `flock` on `support/.rtsync.lock`, which also holds the owner's process id for the message a second run
/// prints. The lock is released when the value is released, and by the system when the process ends, however it ends.
public final class HomeLock: @unchecked Sendable {
    private let descriptor: Int32
    /// The lock file.
    public let path: String

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// Takes the lock of `home`, waiting up to `wait` for another run to finish.
    /// - Throws: `LifecycleError.homeBusy` naming the other run's process id when it is still held.
    public static func acquire(_ home: RTSyncHome, wait: TimeInterval = 30) throws -> HomeLock {
        try FileManager.default.createDirectory(at: home.support, withIntermediateDirectories: true)
        let path = home.support.appendingPathComponent(".rtsync.lock").path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw LifecycleError.homeBusy(path: path, pid: nil) }
        let deadline = Date().addingTimeInterval(wait)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
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
}
