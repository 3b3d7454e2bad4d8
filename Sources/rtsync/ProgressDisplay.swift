import ArgumentParser
import BucketClient
import Foundation
import SyncEngine

/// `--progress` / `--no-progress`: live progress on standard error (default: only when it is a terminal and the
/// output is not `--json`).
struct ProgressOptions: ParsableArguments {
    @Flag(inversion: .prefixedNo, help: "Show live progress on standard error (default: when it is a terminal, and never with --json).")
    var progress: Bool?

    /// Whether to draw progress, given whether the command prints JSON.
    func enabled(json: Bool) -> Bool {
        progress ?? (!json && isatty(STDERR_FILENO) != 0)
    }
}

/// One live line on standard error, as `rclone -P` and `aws s3 cp` draw it: the step, items done/total, bytes
/// done/total with rate and ETA (from the ``TransferProgress`` the work reports into), and the time so far.
/// Redrawn at most 10 times a second from a timer; cleared before the command prints its summary.
final class ProgressDisplay: @unchecked Sendable {
    /// Bytes of bucket transfers made under ``run(_:)``.
    let transfers = TransferProgress()
    private let enabled: Bool
    private let lock = NSLock()
    private var label = ""
    private var drawn = false
    private var finished = false
    private var timer: DispatchSourceTimer?
    private let started = Date()
    private var samples: [(time: Date, bytes: Int64)] = []

    /// A display that draws only when `enabled`.
    init(enabled: Bool) {
        self.enabled = enabled
        guard enabled else { return }
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "rtsync.progress"))
        timer.schedule(deadline: .now() + .milliseconds(100), repeating: .milliseconds(100))
        timer.setEventHandler { [weak self] in self?.draw() }
        timer.resume()
        self.timer = timer
    }

    deinit { timer?.cancel() }

    /// Runs `body` with its bucket transfers counted here, and clears the line when it ends (also on an error).
    func run<T>(_ body: () async throws -> T) async rethrows -> T {
        defer { finish() }
        return try await TransferProgress.$current.withValue(transfers) { try await body() }
    }

    /// The same for work that does not suspend.
    func run<T>(_ body: () throws -> T) rethrows -> T {
        defer { finish() }
        return try TransferProgress.$current.withValue(transfers) { try body() }
    }

    /// The step shown first on the line.
    func set(_ text: String) {
        lock.withLock { label = text }
    }

    /// A step of a sync.
    func set(_ progress: SyncProgress) {
        set(progress.description)
    }

    /// Prints a line on standard output without mixing it into the progress line (cleared first, redrawn by the
    /// next tick).
    func printAbove(_ line: String) {
        lock.withLock {
            if drawn && !finished { FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8)); drawn = false }
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
    }

    /// Stops drawing and clears the line.
    func finish() {
        guard enabled else { return }
        timer?.cancel()
        lock.withLock {
            guard !finished else { return }
            finished = true
            if drawn { FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8)) }
        }
    }

    private func draw() {
        lock.withLock {
            guard !finished else { return }
            let line = Self.fit(render(now: Date()), width: Self.terminalWidth())
            FileHandle.standardError.write(Data(("\r\u{1B}[2K" + line).utf8))
            drawn = true
        }
    }

    /// The line: `upload 2/5 diffs: X · 12.0 MB / 40.0 MB (30%) · 5.1 MB/s · ETA 6s · 3s`.
    func render(now: Date) -> String {
        var parts = [terminalSafe(label.isEmpty ? "working" : label, limit: 120)]
        let t = transfers.snapshot
        if t.bytesDone > 0 || t.bytesTotal > 0 {
            samples.append((now, t.bytesDone))
            samples.removeAll { now.timeIntervalSince($0.time) > 3 }
            var bytes = Self.bytes(t.bytesDone)
            if t.bytesTotal > 0 {
                bytes += " / " + Self.bytes(t.bytesTotal)
                bytes += String(format: " (%.0f%%)", min(100, Double(t.bytesDone) * 100 / Double(t.bytesTotal)))
            }
            parts.append(bytes)
            if let first = samples.first, now.timeIntervalSince(first.time) >= 0.5 {
                let rate = Double(t.bytesDone - first.bytes) / now.timeIntervalSince(first.time)
                parts.append(Self.bytes(Int64(rate)) + "/s")
                if t.bytesTotal > t.bytesDone, rate > 0 {
                    parts.append("ETA " + Self.duration(Double(t.bytesTotal - t.bytesDone) / rate))
                }
            }
        }
        parts.append(Self.duration(now.timeIntervalSince(started)))
        return parts.joined(separator: " · ")
    }

    static func bytes(_ n: Int64) -> String {
        let units = ["B", "KB", "MB", "GB", "TB"]
        var value = Double(n)
        var unit = 0
        while value >= 1000 && unit < units.count - 1 { value /= 1000; unit += 1 }
        return unit == 0 ? "\(n) B" : String(format: "%.1f %@", value, units[unit])
    }

    static func duration(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m\(String(format: "%02d", s % 60))s" }
        return "\(s / 3600)h\(String(format: "%02d", (s % 3600) / 60))m"
    }

    /// Cut to the terminal's width, so the line never wraps (a wrapped line cannot be redrawn in place).
    static func fit(_ line: String, width: Int) -> String {
        line.count < width ? line : String(line.prefix(max(10, width - 2))) + "…"
    }

    static func terminalWidth() -> Int {
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return 80
    }
}
