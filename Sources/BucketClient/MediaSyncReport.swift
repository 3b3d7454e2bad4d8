import Foundation

/// What a media sync run did (or, with a dry run, would do); encodes to JSON for `--json`.
public struct MediaSyncReport: Codable, Sendable {
    /// A file that was refused or failed, with why.
    public struct FileIssue: Codable, Sendable, Hashable {
        /// Documents-relative path or bucket key.
        public var path: String
        /// Human-readable reason.
        public var reason: String
    }

    /// Direction of the run.
    public var direction: SyncDirection
    /// Whether nothing was changed.
    public var dryRun: Bool
    /// Paths copied to the bucket.
    public var uploaded: [String] = []
    /// Paths copied from the bucket.
    public var downloaded: [String] = []
    /// Local files removed because they were deleted in the bucket (`--delete`).
    public var deletedLocal: [String] = []
    /// Objects removed because the local file was deleted (`--delete`); each was moved to ``MediaTrash`` first.
    public var deletedRemote: [String] = []
    /// Files deleted in the bucket but edited here since the last sync: kept and uploaded again (the edit wins).
    public var keptOverDelete: [String] = []
    /// Trash entries pruned by this run (older than ``MediaSyncOptions/trashDays``).
    public var trashPruned: [String] = []
    /// Files that changed on both sides since the last sync (resolved by direction, newest wins for `both`).
    public var conflicts: [String] = []
    /// Where each conflict's losing version was kept (not filled by a dry run).
    public var conflictCopies: [MediaConflict] = []
    /// Number of files already in sync.
    public var unchanged = 0
    /// Bucket keys refused because they could escape the documents folder.
    public var refused: [FileIssue] = []
    /// Files that failed to transfer.
    public var errors: [FileIssue] = []
    /// True when `--delete` was asked but deletions were skipped because of errors in this run.
    public var deletionsSkipped = false
    /// Transfers and deletions not started because ``MediaSyncOptions/shouldStop`` asked the run to stop.
    public var notStarted = 0
    /// Bytes sent.
    public var bytesUploaded: Int64 = 0
    /// Bytes received.
    public var bytesDownloaded: Int64 = 0
    /// Requests made to the store.
    public var requests = 0
    /// Wall time of the run.
    public var seconds: Double = 0

    /// True when no file failed.
    public var succeeded: Bool { errors.isEmpty }

    /// One line for people: counts, bytes, time and requests.
    public var summary: String {
        let verb = dryRun ? "would be " : ""
        var parts = ["\(uploaded.count) \(verb)uploaded (\(Self.bytes(bytesUploaded)))",
                     "\(downloaded.count) \(verb)downloaded (\(Self.bytes(bytesDownloaded)))",
                     "\(deletedLocal.count + deletedRemote.count) \(verb)deleted",
                     "\(unchanged) unchanged"]
        if !deletedRemote.isEmpty { parts.append("\(deletedRemote.count) \(verb)moved to the bucket's trash") }
        if !keptOverDelete.isEmpty { parts.append("\(keptOverDelete.count) deleted elsewhere but edited here, \(verb)kept") }
        if !conflicts.isEmpty { parts.append("\(conflicts.count) conflict\(conflicts.count == 1 ? "" : "s") (\(dryRun ? "losing versions would be kept" : "losing versions kept") as conflict copies)") }
        if !refused.isEmpty { parts.append("\(refused.count) refused") }
        if !errors.isEmpty { parts.append("\(errors.count) failed") }
        if deletionsSkipped { parts.append("deletions skipped after errors") }
        if notStarted > 0 { parts.append("\(notStarted) not started (stopped)") }
        return "media sync\(dryRun ? " (dry run)" : ""): " + parts.joined(separator: ", ")
            + String(format: " in %.2f s, %d request%@", seconds, requests, requests == 1 ? "" : "s")
    }

    static func bytes(_ n: Int64) -> String {
        if n < 1024 { return "\(n) B" }
        if n < 1 << 20 { return String(format: "%.1f KB", Double(n) / 1024) }
        if n < 1 << 30 { return String(format: "%.1f MB", Double(n) / 1_048_576) }
        return String(format: "%.2f GB", Double(n) / 1_073_741_824)
    }

    /// The report as pretty JSON with sorted keys.
    public func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return try encoder.encode(self)
    }
}
