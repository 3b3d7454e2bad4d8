import Foundation

/// Byte counts of the object transfers made under it, for a progress display: set one as
/// ``TransferProgress/current`` around any work (a media sync, a `Syncer` run, a single download) and read
/// ``snapshot`` from another task or a timer. Every store reports into it: S3 per request (each ranged chunk or
/// multipart part as it completes), the local folder per file.
public final class TransferProgress: @unchecked Sendable {
    /// The progress that transfers started in this task (and its child tasks) report to.
    @TaskLocal public static var current: TransferProgress?

    /// Bytes moved and bytes expected so far.
    public struct Snapshot: Sendable, Equatable {
        /// Bytes uploaded and downloaded so far.
        public var bytesDone: Int64
        /// Bytes expected in all: object sizes as downloads learn them, plus what callers announced with `expect`.
        public var bytesTotal: Int64
        /// Objects whose transfer completed.
        public var objectsDone: Int
    }

    private let lock = NSLock()
    private var state = Snapshot(bytesDone: 0, bytesTotal: 0, objectsDone: 0)
    private var sizedKeys = Set<String>()

    /// An empty count.
    public init() {}

    /// The counts now.
    public var snapshot: Snapshot { lock.withLock { state } }

    /// Announces bytes about to move (a file's size to upload, or with `key` an object's size to download, which a
    /// download of that key then does not add again), so the total is known before the first byte goes.
    public func expect(bytes: Int64, key: String? = nil) {
        lock.withLock {
            if let key, !sizedKeys.insert(key).inserted { return }
            state.bytesTotal += max(0, bytes)
        }
    }

    /// Records bytes moved; `objectSize` with `key` adds an object's size to the total the first time it is seen.
    public func record(bytes: Int64, key: String? = nil, objectSize: Int64? = nil, finishedObject: Bool = false) {
        lock.withLock {
            state.bytesDone += max(0, bytes)
            if let key, let objectSize, sizedKeys.insert(key).inserted { state.bytesTotal += max(0, objectSize) }
            if finishedObject { state.objectsDone += 1 }
        }
    }

    /// What an S3 response moved: a GET's body (the object's size from `Content-Range`, or the body for a whole
    /// object), a PUT's request body (a single upload or one part).
    func noteResponse(method: String, operation: String, key: String?, sent: Int, received: Int, contentRange: String?) {
        switch (method, operation) {
        case ("GET", "GetObject"):
            let total = contentRange.flatMap { $0.split(separator: "/").last.flatMap { Int64($0) } } ?? Int64(received)
            record(bytes: Int64(received), key: key, objectSize: total)
        case ("PUT", "PutObject"):
            record(bytes: Int64(sent), key: key, objectSize: Int64(sent), finishedObject: true)
        case ("PUT", "UploadPart"):
            record(bytes: Int64(sent))
        default:
            break
        }
    }
}
