import Foundation

/// What a media sync run does: which folders and files, which way, and whether deletions propagate.
public struct MediaSyncOptions: Sendable {
    /// Folders to sync.
    public var kinds: Set<MediaKind> = Set(MediaKind.allCases)
    /// Direction of copying.
    public var direction: SyncDirection = .both
    /// When not empty, only files matching one of these globs (on the documents-relative path) sync.
    public var include: [Glob] = []
    /// Files matching any of these globs never sync.
    public var exclude: [Glob] = []
    /// Leave out the files operating systems and editors scatter in folders (``litter``); on by default.
    public var excludeLitter = true
    /// When not empty, only these documents-relative files or folders sync.
    public var select: [String] = []
    /// Selective mode: only `select` paths sync, and an empty selection syncs nothing.
    public var selective = false
    /// Plan and report only; change nothing.
    public var dryRun = false
    /// Propagate deletions both ways (never after an I/O error in the same run): a file deleted here is moved to
    /// ``MediaTrash`` in the bucket, and a file deleted in the bucket is deleted here when unchanged here since the
    /// last sync (an edit wins over a delete: the edited file is uploaded again). Off, a deletion another device
    /// made through ``MediaTrash`` still reaches this device; other removals from the bucket are uploaded again.
    public var delete = false
    /// Days a deleted object stays in ``MediaTrash`` before a run with ``delete`` prunes it (0: never pruned).
    public var trashDays = 30
    /// Show a progress line on standard error when it is a terminal.
    public var showProgress = false
    /// Files transferred at the same time (16, as `rclone --transfers 16`); the parts of one large file are bounded
    /// by the store as well (``S3Configuration/maxConcurrency``).
    public var concurrency = 16
    /// Asked before each transfer starts; when it says true no more transfers start (those running finish and are
    /// recorded), no deletion is made, and the report counts what was left (``MediaSyncReport/notStarted``).
    public var shouldStop: (@Sendable () -> Bool)?
    /// Names this device in conflict copies (`name (conflict <device> <date>).ext`); `rtsync sync` uses the site id.
    public var device: String = MediaSyncOptions.hostDevice

    /// The first label of this machine's host name, the default ``device``.
    public static var hostDevice: String {
        String(ProcessInfo.processInfo.hostName.split(separator: ".").first ?? "device")
    }

    /// Default options: both folders, both ways, no deletions, OS litter left out.
    public init() {}

    /// Names that operating systems and editors leave in folders, never synced unless ``excludeLitter`` is off:
    /// Finder's `.DS_Store` and `._*` (AppleDouble), Windows' `Thumbs.db` and `desktop.ini`, Vim's `.*.swp`.
    public static let litter: [Glob] = [".DS_Store", "._*", "Thumbs.db", "desktop.ini", "Desktop.ini", ".*.swp"].map(Glob.init)

    /// Whether a documents-relative path passes the include/exclude/select filters.
    public func accepts(_ path: String) -> Bool {
        if selective || !select.isEmpty {
            let hit = select.contains { sel in
                let s = sel.hasSuffix("/") ? String(sel.dropLast()) : sel
                return path == s || path.hasPrefix(s + "/")
            }
            if !hit { return false }
        }
        if !include.isEmpty && !include.contains(where: { $0.matches(path) }) { return false }
        if excludeLitter && Self.litter.contains(where: { $0.matches(path) }) { return false }
        return !exclude.contains { $0.matches(path) }
    }
}
