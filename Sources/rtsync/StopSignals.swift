import ArgumentParser
import Dispatch
import Foundation
import SyncEngine
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The first stop signal the process caught (0: none), set by ``stopSignalHandler`` and read by ``StopSignals``.
/// A plain C `sig_atomic_t` store is all a signal handler may do safely; it is touched once before the handler is
/// installed, so the handler never runs a global's lazy initialization.
nonisolated(unsafe) private var caughtStopSignal: sig_atomic_t = 0

/// Catches SIGINT and SIGTERM: the first is recorded and announced on standard error (write(2) only, which is
/// async-signal-safe), a second ends the process at once.
private func stopSignalHandler(_ sig: Int32) {
    if caughtStopSignal != 0 { _exit(128 + sig) }
    caughtStopSignal = sig_atomic_t(sig)
    if sig == SIGINT {
        let text: StaticString = "SIGINT: stopping at the next safe point (send it again to stop at once)\n"
        _ = write(2, text.utf8Start, text.utf8CodeUnitCount)
    } else {
        let text: StaticString = "SIGTERM: stopping at the next safe point (send it again to stop at once)\n"
        _ = write(2, text.utf8Start, text.utf8CodeUnitCount)
    }
}

/// A thread that only exists to take SIGINT and SIGTERM, so that some thread of the process always can.
///
/// A child inherits its signal mask from the thread that started it: one started by a Swift concurrency or
/// Dispatch worker thread (a test runner, an app's `Task`, many supervisors) begins with SIGINT and SIGTERM blocked
/// on its main thread, and Dispatch's own worker threads block them too. The main thread unblocks them only once it
/// parks in `dispatch_main`; until then (or if it never gets there) a stop signal would stay pending.
private let stopSignalThread: Void = {
    let thread = Thread {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        while true { pause() }
    }
    thread.name = "rtsync stop signals"
    thread.start()
}()

/// SIGINT and SIGTERM during a long command: the first asks the command to stop at its next safe point (it
/// finishes or rolls back what it is doing and says what is left); a second one ends the process at once (what
/// it leaves is removed by the next run).
///
/// The handler is installed with `sigaction` before the initializer returns, so a signal sent right after the
/// command started (while it waits for another run's lock, say) is never lost; a dispatch signal source, armed
/// asynchronously after the signal was set to be ignored, could drop one sent in between.
final class StopSignals: @unchecked Sendable {
    /// Starts catching SIGINT and SIGTERM.
    init() {
        _ = caughtStopSignal
        for sig in [SIGINT, SIGTERM] {
            var action = sigaction()
            #if canImport(Glibc)
            action.__sigaction_handler.sa_handler = stopSignalHandler
            #else
            action.__sigaction_u.__sa_handler = stopSignalHandler
            #endif
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(sig, &action, nil)
        }
        // A signal sent before the thread unblocks it stays pending and is taken then.
        _ = stopSignalThread
    }

    /// The signal received, if any.
    var receivedSignal: Int32? {
        let sig = caughtStopSignal
        return sig == 0 ? nil : Int32(sig)
    }

    /// Whether a stop was asked for (for `Syncer.shouldStop`).
    var stopRequested: Bool { receivedSignal != nil }

    /// The exit status of a command stopped by `sig`: 130 for SIGINT, 143 for SIGTERM.
    static func exitStatus(_ sig: Int32) -> Int32 { 128 + sig }

    /// The signal's name.
    static func name(_ sig: Int32) -> String { sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal \(sig)" }
}

extension StopSignals {
    /// How `command` ends when taking `home`'s lock failed: stopped by a signal during the wait (nothing of it
    /// started; exit 130 or 143), or the library's error (a busy home: exit 1).
    static func lockFailure(_ error: LifecycleError, command: String, signals: StopSignals?, home: RTSyncHome) -> ExitCode {
        guard case .lockWaitStopped = error, let sig = signals?.receivedSignal else { return report(error) }
        return stopped(command, by: sig, done: "nothing done (it was waiting for another rtsync run on this home)", left: "all of it", path: home.root.path,
                       hint: "nothing was lost; run the same command again when the other run has finished")
    }

    /// Ends a command that stopped at a safe point after `sig`: one `error:` line saying what was finished and
    /// what is left, a `hint:` line, and exit status 130 (SIGINT) or 143 (SIGTERM).
    static func stopped(_ command: String, by sig: Int32, done: String, left: String, path: String,
                        hint: String = "nothing was lost; run the same command again to finish what is left") -> ExitCode {
        fail("\(command) interrupted by \(name(sig)) at a safe point: \(done); left: \(left) (\(path))", hint: hint, code: exitStatus(sig))
    }
}
