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
    /// `alreadyCounted` bytes of a GET's body were recorded while it arrived (``StreamedBytesPoller``).
    func noteResponse(method: String, operation: String, key: String?, sent: Int, received: Int, alreadyCounted: Int64 = 0,
                      contentRange: String?) {
        switch (method, operation) {
        case ("GET", "GetObject"):
            let total = contentRange.flatMap { $0.split(separator: "/").last.flatMap { Int64($0) } } ?? Int64(received)
            record(bytes: Int64(received) - alreadyCounted, key: key, objectSize: total)
        case ("PUT", "PutObject"):
            record(bytes: Int64(sent), key: key, objectSize: Int64(sent), finishedObject: true)
        case ("PUT", "UploadPart"):
            record(bytes: Int64(sent))
        default:
            break
        }
    }
}

/// Counts the bytes of an answer that libcurl writes into a file while the transfer runs, by the file's size every
/// tenth of a second (the kernel's view, so no memory is shared with the transfer thread), into a
/// ``TransferProgress``; ``stop()`` ends it and says how many bytes it counted.
final class StreamedBytesPoller: @unchecked Sendable {
    private let lock = NSLock()
    private var counted: Int64 = 0
    private var task: Task<Void, Never>?

    init(target: CurlTransport.FileTarget, progress: TransferProgress) {
        task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: 100_000_000)
                var st = stat()
                guard fstat(target.fd, &st) == 0, let self else { continue }
                let now = max(0, Int64(st.st_size) - target.offset)
                let delta: Int64 = self.lock.withLock {
                    let d = now - self.counted
                    if d > 0 { self.counted = now }
                    return d
                }
                if delta > 0 { progress.record(bytes: delta) }
            }
        }
    }

    /// Stops counting (waiting for a count under way) and returns the bytes counted.
    @discardableResult
    func stop() async -> Int64 {
        task?.cancel()
        await task?.value
        return lock.withLock { counted }
    }
}
