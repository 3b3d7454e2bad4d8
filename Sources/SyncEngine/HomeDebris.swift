import DiffFormat
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Removes what interrupted runs (Ctrl-C, kill -9, a crash) left behind: only rtsync's own files, by name, and only
/// when no live run can own them. Sync calls it when it starts, holding the home's lock.
///
/// - In the home: diff temp files in the outbox (`.<id>.sqlite.tmp`) and rtsync's hidden work files in support/
///   (`.cursor*.json`, `.download-*`, `.demo-*`, `.catch-up-*`, `.rtsync-restore-*` databases, `.primary.sqlite.incoming`),
///   and atomic-write temps (`.dat.nosync*`) there and in keys/. Every command that writes them holds the home's
///   lock, so under that lock they are debris. When the database lives outside the work folder (an app's
///   `SyncLocation`), the restore and install temp files beside it too (`.rtsync-restore-*.sqlite`,
///   `.<name>.incoming`, `.<name>.restore-*`), and nothing else of that folder.
/// - In the backup folder: backup temp files, under the folder's own lock (every backup holds it while its temp
///   file exists); complete backups renamed into place but never listed are adopted (see `BackupManager.tidy()`).
/// - In the system temp folder: `rtsync-apply-<pid>-<UUID>` folders and `rtsync-snapshot-<pid>-*` files whose
///   process is gone, and any `rtsync-apply-*` folder older than `age` (older versions did not name the pid).
public enum HomeDebris {
    /// The name start of the private folders apply copies large diffs into.
    public static let applyFolderPrefix = "rtsync-apply-"
    /// The name start of the temp files the snapshot pointer goes through (`rtsync-snapshot-<pid>-…`).
    public static let snapshotTempPrefix = "rtsync-snapshot-"
    /// How old an unowned leftover must be before it is removed when its owner cannot be checked.
    public static let defaultAge: TimeInterval = 600

    /// Removes leftovers of earlier runs in `home` and the temp folder; returns the paths removed.
    /// Call it holding the home's lock (`HomeLock`).
    @discardableResult
    public static func clean(_ home: RTSyncHome, olderThan age: TimeInterval = defaultAge) -> [String] {
        let fm = FileManager.default
        var removed: [String] = []
        func remove(_ url: URL) {
            if (try? fm.removeItem(at: url)) != nil { removed.append(url.path) }
        }
        for name in (try? fm.contentsOfDirectory(atPath: home.outbox.path)) ?? [] where isDiffTemp(name) {
            remove(home.outbox.appendingPathComponent(name))
        }
        for name in (try? fm.contentsOfDirectory(atPath: home.support.path)) ?? []
        where isSupportWorkFile(name, database: home.database.lastPathComponent) || isAtomicWriteTemp(name) {
            remove(home.support.appendingPathComponent(name))
        }
        // An app's database may live outside the work folder: restore and init write their temp files beside it.
        let databaseFolder = home.database.deletingLastPathComponent()
        if databaseFolder.standardizedFileURL != home.support.standardizedFileURL {
            for name in (try? fm.contentsOfDirectory(atPath: databaseFolder.path)) ?? [] where isDatabaseWorkFile(name, database: home.database.lastPathComponent) {
                remove(databaseFolder.appendingPathComponent(name))
            }
        }
        // Keys are written under the home's lock too (a new device key, `keys trust`).
        for folder in [home.keys, home.keys.appendingPathComponent("trusted")] {
            for name in (try? fm.contentsOfDirectory(atPath: folder.path)) ?? [] where isAtomicWriteTemp(name) || name.hasPrefix(DeviceKeys.tempPrefix) {
                remove(folder.appendingPathComponent(name))
            }
        }
        let temp = fm.temporaryDirectory
        // The shared temporary folder may hold thousands of other programs' files: only names of ours get a URL
        // (and `appendingPathComponent` without `isDirectory` would stat each one).
        for name in (try? fm.contentsOfDirectory(atPath: temp.path)) ?? [] where name.hasPrefix(applyFolderPrefix) || name.hasPrefix(snapshotTempPrefix) {
            let url = temp.appendingPathComponent(name, isDirectory: false)
            if name.hasPrefix(applyFolderPrefix) {
                if !applyFolderMayBeLive(name: name, modified: modificationDate(url), age: age) { remove(url) }
            } else if name.hasPrefix(snapshotTempPrefix) {
                // Only files named with a process id that is gone (and their `.partial` downloads).
                let rest = name.dropFirst(snapshotTempPrefix.count)
                if let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]), pid > 0, !processIsAlive(pid) { remove(url) }
            }
        }
        return removed
    }

    /// `.<KSUID>.sqlite.tmp` and its journal files: a diff being written; or `.export-<UUID>.tmp` (and its journal
    /// files), the file an export as set operations attaches and writes (`AttachedDiffWriter`).
    static func isDiffTemp(_ name: String) -> Bool {
        guard name.hasPrefix(".") else { return false }
        for suffix in [".tmp", ".tmp-journal", ".tmp-wal", ".tmp-shm"] where name.hasSuffix(suffix) {
            let stem = String(name.dropFirst().dropLast(suffix.count))
            if stem.hasPrefix("export-") { return UUID(uuidString: String(stem.dropFirst("export-".count))) != nil }
            return DiffFile.diffID(fromFileName: stem) != nil
        }
        return false
    }

    /// Foundation's temp file of an atomic write (`Data.write(to:options: .atomic)`, `FileManager.createFile`),
    /// `.dat.nosync<hex>.<random>`, which a run killed during the write leaves beside the file it was writing.
    public static func isAtomicWriteTemp(_ name: String) -> Bool { name.hasPrefix(".dat.nosync") }

    /// Hidden files rtsync's locked commands write in support/ and remove when they finish.
    static func isSupportWorkFile(_ name: String, database: String) -> Bool {
        if name == ".cursor.json" || name == ".\(database).incoming" { return true }
        // Downloads go through `<name>.partial`, so those count too.
        if name.hasPrefix(".cursor-") && name.contains(".json") { return true }
        return [".download-", ".demo-", ".catch-up-", ".rtsync-restore-"].contains { name.hasPrefix($0) } && name.contains(".sqlite")
    }

    /// Hidden files a restore or an init writes beside the database and removes when it finishes (only these: the
    /// database's folder is the app's own).
    static func isDatabaseWorkFile(_ name: String, database: String) -> Bool {
        if name == ".\(database).incoming" { return true }
        if name.hasPrefix(".\(database).restore-") { return true }
        guard name.hasPrefix(".rtsync-restore-") else { return false }
        let rest = name.dropFirst(".rtsync-restore-".count)
        return ["", "-wal", "-shm", "-journal"].contains { rest.hasSuffix(".sqlite" + $0) }
    }

    /// Whether an `rtsync-apply-*` folder may belong to a running apply: its pid (when named) is alive and it is
    /// younger than a day, or (no pid in the name) it is younger than `age`.
    static func applyFolderMayBeLive(name: String, modified: Date?, age: TimeInterval) -> Bool {
        let elapsed = modified.map { Date().timeIntervalSince($0) } ?? .infinity
        let rest = name.dropFirst(applyFolderPrefix.count)
        if let dash = rest.firstIndex(of: "-"), let pid = Int32(rest[..<dash]), pid > 0 {
            return processIsAlive(pid) && elapsed < 86_400
        }
        return elapsed < age
    }

    /// Whether a process with this id exists (EPERM: it exists, owned by someone else).
    public static func processIsAlive(_ pid: Int32) -> Bool {
        kill(pid, 0) == 0 || errno == EPERM
    }

    static func modificationDate(_ url: URL) -> Date? {
        (try? FileManager.default.attributesOfItem(atPath: url.path))?[.modificationDate] as? Date
    }
}
