import BucketClient
import Foundation
import SyncEngine
import Testing

/// Library errors speak to an app: `LocalizedError` text without the command-line tool's commands or flags (issue 18).
@Suite struct LibraryErrorWordingTests {
    static let errors: [any Error] = [
        SyncEngineError.databaseNotFound(path: "/p"), SyncEngineError.notTracked(path: "/p"), SyncEngineError.noSuchTable(table: "t"),
        SyncEngineError.diffRejected(file: "f", reason: "r"), SyncEngineError.unknownPolicy("x"), SyncEngineError.invalidConfig(file: "f", reason: "r"),
        SyncEngineError.conflictNotFound(id: 1), SyncEngineError.cannotRestore(id: 1, reason: "r"), SyncEngineError.interrupted(operation: "o", path: "/p"),
        SyncEngineError.noUserID(path: "/p"), SyncEngineError.invalidIdentity(path: "/p", reason: "r"),
        SyncEngineError.databaseCopied(path: "/p", recordedPath: "/q"), SyncEngineError.catchUpPending(path: "/p"),
        LifecycleError.invalidSettings(file: "f", reason: "r"), LifecycleError.noSourceAvailable(attempts: ["a"]),
        LifecycleError.backupFailed(path: "/p", reason: "r"), LifecycleError.backupNotFound(id: "i"),
        LifecycleError.backupCorrupt(id: "i", reason: "r", nextGood: "j"), LifecycleError.noGoodBackup,
        LifecycleError.tierRefused(tier: .free, action: "a"), LifecycleError.demoMode(action: "sync"), LifecycleError.homeBusy(path: "/p", pid: 1),
        LifecycleError.lockWaitStopped(path: "/p"),
        BucketError.notFound(key: "k"), BucketError.bucketNotFound(bucket: "b"), BucketError.unsafeKey(key: "k", reason: "r"),
        BucketError.unsupportedURL(url: "u", reason: "r"),
    ]

    @Test func everyLibraryError_isLocalized_withoutCLICommandsOrFlags() {
        for error in Self.errors {
            let localized = error as? LocalizedError
            #expect(localized?.errorDescription?.isEmpty == false, "\(error)")
            let text = (localized?.errorDescription ?? "") + " " + (localized?.recoverySuggestion ?? "")
            #expect(!text.contains(" --") && !text.contains("`rtsync ") && !text.contains("rtsync backup") && !text.contains("rtsync demo"), "\(error): \(text)")
        }
    }
}
