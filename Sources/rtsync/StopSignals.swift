import ArgumentParser
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// SIGINT and SIGTERM during a long command: the first asks the command to stop at its next safe point (it
/// finishes or rolls back what it is doing and says what is left); a second one ends the process at once (what
/// it leaves is removed by the next run).
final class StopSignals: @unchecked Sendable {
    private let lock = NSLock()
    private var received: Int32?
    private var sources: [DispatchSourceSignal] = []

    /// Starts catching SIGINT and SIGTERM.
    init() {
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [weak self] in self?.receive(sig) }
            source.resume()
            sources.append(source)
        }
    }

    deinit {
        for source in sources { source.cancel() }
    }

    private func receive(_ sig: Int32) {
        lock.lock()
        let first = received == nil
        if first { received = sig }
        lock.unlock()
        if !first { _exit(128 + sig) }
        let name = sig == SIGINT ? "SIGINT" : "SIGTERM"
        FileHandle.standardError.write(Data("\(name): stopping at the next safe point (send it again to stop at once)\n".utf8))
    }

    /// The signal received, if any.
    var receivedSignal: Int32? {
        lock.lock(); defer { lock.unlock() }
        return received
    }

    /// Whether a stop was asked for (for `Syncer.shouldStop`).
    var stopRequested: Bool { receivedSignal != nil }

    /// The exit status of a command stopped by `sig`: 130 for SIGINT, 143 for SIGTERM.
    static func exitStatus(_ sig: Int32) -> Int32 { 128 + sig }

    /// The signal's name.
    static func name(_ sig: Int32) -> String { sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal \(sig)" }
}

extension StopSignals {
    /// Ends a command that stopped at a safe point after `sig`: one `error:` line saying what was finished and
    /// what is left, a `hint:` line, and exit status 130 (SIGINT) or 143 (SIGTERM).
    static func stopped(_ command: String, by sig: Int32, done: String, left: String, path: String,
                        hint: String = "nothing was lost; run the same command again to finish what is left") -> ExitCode {
        fail("\(command) interrupted by \(name(sig)) at a safe point: \(done); left: \(left) (\(path))", hint: hint, code: exitStatus(sig))
    }
}
