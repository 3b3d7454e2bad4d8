import CClone
import DiffFormat
import Crypto
import Foundation
import RTSQLite

/// One database backup.
public struct BackupInfo: Sendable, Codable, Equatable {
    /// Backup id (a KSUID; also the file name).
    public var id: String
    /// File name inside the backup folder.
    public var file: String
    /// Size in bytes.
    public var bytes: Int64
    /// "clone" (copy-on-write), "file-copy" (the file copied inside a read transaction), "online-backup"
    /// (SQLite's backup API) or "adopted" (found complete but unlisted after an interrupted run, then checked).
    public var method: String
    /// Whether it passed `quick_check` when last verified.
    public var verified: Bool
    /// When it was made (UTC, ISO-8601).
    public var createdAt: String
    /// True while a backup made with deferred verification has not been checked yet (nil in older lists).
    public var awaitingVerification: Bool?
    /// How long making the copy took, in milliseconds (nil in older lists).
    public var copyMilliseconds: Double?
    /// How long its last `quick_check` took, in milliseconds (nil until verified).
    public var verifyMilliseconds: Double?
}

/// When `BackupManager.create` runs the `quick_check` of a new backup.
public enum BackupVerification: Sendable {
    /// Before `create` returns; the backup becomes last-known-good at once.
    case immediate
    /// Later, by `verifyPending()` (for example from a background task): `create` returns right after the
    /// copy is made, and `verifyPending()` both syncs it to stable storage and checks it. Until verified, the
    /// backup is listed but is not last-known-good, rotation keeps the last-known-good one, and restore does
    /// not pick it by default, so a crash before then loses nothing that was trusted (a copy cut short by the
    /// crash fails its check). A clone costs milliseconds at any size; the check reads every page.
    case deferred
}

/// Makes, lists, verifies, rotates and restores copies of the primary database.
///
/// A backup is a copy that is consistent even while other processes write (WAL included): a
/// copy-on-write clone where the filesystem has one (FICLONE on btrfs/XFS, clonefile on APFS), else the
/// database file (and its WAL) copied inside one read transaction, or, with `fileCopy` off, SQLite's online
/// backup API (https://sqlite.org/backup.html). Each is verified with `quick_check`; the newest verified one
/// is the "last known good".
public struct BackupManager: Sendable {
    /// The database backed up.
    public let database: URL
    /// The folder holding backups and `backups.json`.
    public let folder: URL
    /// How many backups rotation keeps.
    public var keep: Int
    /// Whether to try a copy-on-write clone first.
    public var preferClone: Bool
    /// Without a clone: copy the file inside a read transaction (true, about as fast as `cp`) or page by page
    /// through SQLite's online backup API (false). Both give one consistent state.
    public var fileCopy = true

    /// The home whose lock (`HomeLock`) `create` and `restore` hold; nil for a database outside a home.
    public var home: RTSyncHome?
    /// How long `create` and `restore` wait for another run on `home` to finish.
    public var lockWait: TimeInterval = 30

    /// Makes a manager.
    public init(database: URL, folder: URL, keep: Int = 5, preferClone: Bool = true) {
        self.database = database
        self.folder = folder
        self.keep = max(1, keep)
        self.preferClone = preferClone
    }

    /// Makes a manager for the primary database of `home` and its backup folder, holding the home's lock while it
    /// creates or restores a backup.
    public init(home: RTSyncHome, keep: Int = 5, preferClone: Bool = true) {
        self.init(database: home.database, folder: home.backups, keep: keep, preferClone: preferClone)
        self.home = home
    }

    struct Manifest: Codable {
        var backups: [BackupInfo] = []
        var lastKnownGood: String?
    }

    var manifestURL: URL { folder.appendingPathComponent("backups.json") }

    func loadManifest() -> Manifest {
        guard let data = try? Data(contentsOf: manifestURL), let m = try? JSONDecoder().decode(Manifest.self, from: data) else { return Manifest() }
        return m
    }

    func saveManifest(_ m: Manifest) throws {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        try e.encode(m).write(to: manifestURL, options: .atomic)
    }

    /// Backups, newest first.
    public func list() -> [BackupInfo] { loadManifest().backups.sorted { $0.id > $1.id } }

    /// The newest verified backup.
    public func lastKnownGood() -> BackupInfo? {
        let m = loadManifest()
        return m.backups.first { $0.id == m.lastKnownGood && $0.verified }
    }

    // MARK: - Create

    /// Makes a backup, rotates old ones and, once it passes `quick_check` (now or, with `.deferred`, in
    /// `verifyPending()`), marks it last-known-good.
    /// - Throws: `LifecycleError.backupFailed` (folder missing or full, database unreadable); existing backups are untouched.
    @discardableResult
    public func create(verification: BackupVerification = .immediate) throws -> BackupInfo {
        if let home, !HomeLock.isHeld(home) { return try HomeLock.withLock(home, wait: lockWait) { try create(verification: verification) } }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isDir), isDir.boolValue else {
            throw LifecycleError.backupFailed(path: folder.path, reason: "backup folder does not exist")
        }
        guard FileManager.default.fileExists(atPath: database.path) else {
            throw LifecycleError.backupFailed(path: database.path, reason: "database does not exist")
        }
        // Backups from several processes share one list: hold its lock, and make the id sort above every
        // listed one (KSUIDs only increase within one process).
        let lock = try FolderLock(folder)
        defer { lock.unlock() }
        var newID = KSUID.generate()
        if let top = loadManifest().backups.compactMap({ try? KSUID(string: $0.id) }).max(), newID <= top, let next = top.randomSuccessor() { newID = next }
        let id = newID.string
        let temp = folder.appendingPathComponent(".\(id).sqlite.tmp")
        let final = folder.appendingPathComponent("\(id).sqlite")
        func cleanup() { for s in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: temp.path + s) } }
        cleanup()
        var method = "online-backup"
        let started = DispatchTime.now().uptimeNanoseconds
        var copyMilliseconds = 0.0, verifyMilliseconds: Double?
        do {
            if preferClone, try Self.cloneConsistently(database: database, to: temp) {
                method = "clone"
            } else if fileCopy {
                cleanup()
                try Self.snapshotCopy(database: database, to: temp)
                method = "file-copy"
            } else {
                cleanup()
                try Self.onlineBackup(database: database, to: temp)
            }
            // One self-contained file in rollback-journal mode: opening it later creates no -wal/-shm beside it.
            try Self.makeSelfContained(temp)
            // A deferred backup (file and folder entry) is synced by verify(id:), before its check. Syncing
            // the folder here would cost as much as syncing the file: on ext4 it writes the file's data too.
            if verification == .immediate { try Durable.sync(file: temp) }
            copyMilliseconds = Self.milliseconds(since: started)
            if verification == .immediate {
                let checkStarted = DispatchTime.now().uptimeNanoseconds
                if let problem = Self.verificationProblem(temp, immutable: true) { throw LifecycleError.backupFailed(path: temp.path, reason: "copy failed verification: \(problem)") }
                verifyMilliseconds = Self.milliseconds(since: checkStarted)
            } else if let problem = Self.headerProblem(temp) {
                throw LifecycleError.backupFailed(path: temp.path, reason: "copy is not a complete database: \(problem)")
            }
            try Durable.rename(temp, to: final, syncingFolder: verification == .immediate)
            cleanup()
        } catch let e as LifecycleError {
            cleanup(); throw e
        } catch {
            cleanup()
            throw LifecycleError.backupFailed(path: final.path, reason: "\(error)")
        }
        let size = ((try? FileManager.default.attributesOfItem(atPath: final.path)[.size]) as? NSNumber)?.int64Value ?? 0
        let verified = verification == .immediate
        let info = BackupInfo(id: id, file: final.lastPathComponent, bytes: size, method: method, verified: verified,
                              createdAt: ISO8601.format(Date(), fractional: true), awaitingVerification: verified ? nil : true,
                              copyMilliseconds: copyMilliseconds, verifyMilliseconds: verifyMilliseconds)
        var m = loadManifest()
        m.backups.append(info)
        if verified { m.lastKnownGood = id }
        rotate(&m)
        do { try saveManifest(m) } catch {
            throw LifecycleError.backupFailed(path: manifestURL.path, reason: "backup \(id) was written but the list could not be saved: \(error)")
        }
        return info
    }

    /// Rotation: keeps the newest `keep` backups, and the last-known-good whatever its age.
    func rotate(_ m: inout Manifest) {
        let sorted = m.backups.sorted { $0.id > $1.id }
        for old in sorted.dropFirst(keep) where old.id != m.lastKnownGood {
            try? FileManager.default.removeItem(at: folder.appendingPathComponent(old.file))
        }
        m.backups = sorted.enumerated().filter { $0.offset < keep || $0.element.id == m.lastKnownGood }.map(\.element)
    }

    // MARK: - Leftovers of interrupted backups

    /// Removes temp files of backups that were cut short, and adopts complete backups renamed into place but
    /// never listed (a run killed between the rename and the list update): one that passes `quick_check` is
    /// listed (method "adopted") and rotated like the others, one that does not is removed. Holds the backup
    /// folder's lock, which every backup holds while its temp file exists, so a running backup is never touched.
    /// - Returns: the paths removed and the ids adopted.
    @discardableResult
    public func tidy() throws -> (removed: [String], adopted: [String]) {
        let fm = FileManager.default
        guard let names = try? fm.contentsOfDirectory(atPath: folder.path) else { return ([], []) }
        let lock = try FolderLock(folder)
        defer { lock.unlock() }
        var m = loadManifest()
        let listed = Set(m.backups.map(\.file))
        var removed: [String] = [], adopted: [String] = []
        for name in names.sorted() {
            let url = folder.appendingPathComponent(name)
            // A list save cut short (every save holds the folder's lock).
            if HomeDebris.isAtomicWriteTemp(name) {
                if (try? fm.removeItem(at: url)) != nil { removed.append(url.path) }
                continue
            }
            if name.hasPrefix("."), let range = name.range(of: ".sqlite.tmp"),
               (try? KSUID(string: String(name[name.index(after: name.startIndex)..<range.lowerBound]))) != nil {
                if (try? fm.removeItem(at: url)) != nil { removed.append(url.path) }
                continue
            }
            guard name.hasSuffix(".sqlite"), !listed.contains(name), let id = try? KSUID(string: String(name.dropLast(7))) else { continue }
            var problem: String?
            do { try Durable.sync(file: url) } catch { problem = "could not be synced: \(error)" }
            problem = problem ?? Self.verificationProblem(url, immutable: true)
            guard problem == nil else {
                if (try? fm.removeItem(at: url)) != nil { removed.append(url.path) }
                continue
            }
            let size = ((try? fm.attributesOfItem(atPath: url.path)[.size]) as? NSNumber)?.int64Value ?? 0
            m.backups.append(BackupInfo(id: id.string, file: name, bytes: size, method: "adopted", verified: true,
                                        createdAt: ISO8601.format(id.date, fractional: true)))
            adopted.append(id.string)
        }
        guard !adopted.isEmpty else { return (removed, adopted) }
        m.lastKnownGood = m.backups.filter(\.verified).max { $0.id < $1.id }?.id
        rotate(&m)
        do { try saveManifest(m) } catch {
            throw LifecycleError.backupFailed(path: manifestURL.path, reason: "adopted backups \(adopted.joined(separator: ", ")) but the list could not be saved: \(error)")
        }
        return (removed, adopted)
    }

    /// Clones the database (and its WAL) while holding the write lock, so the copy is one consistent state.
    /// Returns false when the filesystem cannot clone.
    static func cloneConsistently(database: URL, to temp: URL) throws -> Bool {
        let db = try openSource(database)
        if try db.scalar("PRAGMA journal_mode")?.string?.lowercased() == "wal" { _ = try? db.rows("PRAGMA wal_checkpoint(PASSIVE)") }
        // BEGIN IMMEDIATE blocks other writers (not readers) until the clone is done: a few milliseconds. A
        // checkpoint may still copy frames into the database file meanwhile, but the WAL cannot restart or
        // grow, and every frame it holds is in the cloned WAL.
        do { try db.execute("BEGIN IMMEDIATE") } catch let e as SQLiteError where e.code & 0xff == 5 {
            // SQLITE_BUSY: another writer kept the lock past the timeout; the file copy needs no write lock.
            return false
        }
        defer { try? db.execute("ROLLBACK") }
        // Asked inside the transaction: the journal mode cannot change while it is open.
        let wal = try db.scalar("PRAGMA journal_mode")?.string?.lowercased() == "wal"
        // SQLite's own descriptor: opening and closing the file here would drop this process's locks on it.
        let rc = rtsync_clone_open_file(db.mainFileDescriptor() ?? -1, database.path, temp.path)
        if rc != 0 {
            if [EOPNOTSUPP, EXDEV, EINVAL, ENOTTY, ENOSYS, EBADF].contains(rc) || rc == ENOTSUP { return false }
            throw LifecycleError.backupFailed(path: temp.path, reason: String(cString: strerror(rc)))
        }
        // SQLite holds no locks on the WAL file itself, so it may be opened and closed here.
        let walPath = database.path + "-wal"
        if wal, let size = (try? FileManager.default.attributesOfItem(atPath: walPath)[.size]) as? NSNumber, size.int64Value > 0 {
            let rc2 = rtsync_clone_file(walPath, temp.path + "-wal")
            if rc2 != 0 { try copyFile(URL(fileURLWithPath: walPath), to: URL(fileURLWithPath: temp.path + "-wal")) }
        }
        try db.execute("ROLLBACK")
        if wal {
            // Fold the copied WAL into the copy so the backup is one self-contained file.
            let copy = try Connection(path: temp.path, mode: .readWrite)
            _ = try copy.rows("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        for s in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: temp.path + s) }
        return true
    }

    /// Copies the database file, and in WAL mode its WAL, byte for byte inside one read transaction; opening
    /// the copy (`makeSelfContained`) then yields the state of one commit.
    ///
    /// Why that state is consistent:
    /// - Rollback-journal mode: the read transaction's SHARED lock keeps writers from changing the file until the
    ///   copy is done (SQLite's own rule for copying a live database, https://sqlite.org/howtocorrupt.html
    ///   section 1.2). The file is read through SQLite's own descriptor (`mainFileDescriptor`, else
    ///   `copyMainFile`): opening and closing it again in this process would release that lock (section 2.2 there).
    /// - WAL mode, reader on a WAL snapshot (read mark above 0): a checkpoint never writes frames past the
    ///   reader's mark into the database file, and the WAL cannot restart or be truncated while the reader
    ///   uses it. Any page of the copied database file that may have changed during the copy also has a frame
    ///   in the copied WAL, and opening the copy replays the WAL's valid prefix (checksummed frames up to the
    ///   last complete commit): the snapshot's state or a later commit.
    /// - WAL mode, reader on the database file alone (everything was checkpointed; read mark 0): no checkpoint
    ///   may write the database file, so the copied file is exactly the snapshot, but the WAL may restart or be
    ///   truncated during the copy, leaving a stale prefix in the copied WAL. The copied WAL's header (new salts
    ///   on every restart) is compared with the live one after the copy: when they differ, the copy is dropped.
    static func snapshotCopy(database: URL, to temp: URL) throws {
        let source = try openSource(database)
        try source.execute("BEGIN")
        defer { try? source.execute("ROLLBACK") }
        // The first read takes the snapshot (in rollback-journal mode, the SHARED lock, after rolling back a
        // hot journal). Asked after it, the journal mode cannot change until the transaction ends.
        _ = try source.scalar("SELECT count(*) FROM sqlite_schema")
        let wal = try source.scalar("PRAGMA journal_mode")?.string?.lowercased() == "wal"
        try copyDatabaseFile(of: source, to: temp, clone: false, action: "copying \(database.path)")
        BackupTestHooks.shared.run(.afterDatabaseCopy, database)
        let walPath = database.path + "-wal", walCopy = temp.path + "-wal"
        if wal, FileManager.default.fileExists(atPath: walPath) {
            try copyFile(URL(fileURLWithPath: walPath), to: URL(fileURLWithPath: walCopy))
            BackupTestHooks.shared.run(.afterWALCopy, database)
            if walHeader(walPath) != walHeader(walCopy) || walHeader(walCopy) == nil { try? FileManager.default.removeItem(atPath: walCopy) }
        }
    }

    /// The 32-byte header of a WAL file (magic, page size, checkpoint sequence, salts, checksum), or nil.
    static func walHeader(_ path: String) -> Data? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 32), data.count == 32 else { return nil }
        return data
    }

    /// An error as a short phrase, saying so when a disk is full.
    static func describe(_ error: Error) -> String {
        if let e = error as? POSIXError, e.code == .ENOSPC || e.code == .EDQUOT { return "the disk holding it is full (\(e.localizedDescription))" }
        if let e = error as? SQLiteError, e.code & 0xff == 13 { return "the disk is full (\(e.message))" }
        return (error as? SQLiteError)?.message ?? "\(error)"
    }

    /// Opens the database to copy. Read-write, though no data is written through it: the first read rolls
    /// back a hot journal that a crashed writer left (a read-only connection cannot, and fails instead), and,
    /// like any connection, it checkpoints and removes the WAL when it is the last one to close.
    static func openSource(_ database: URL) throws -> Connection {
        let source = try Connection(path: database.path, mode: .readWrite)
        source.setBusyTimeout(milliseconds: 10_000)
        return source
    }

    /// Copies a file into a new one (in the kernel where it can), or throws naming both files.
    static func copyFile(_ source: URL, to destination: URL) throws {
        let rc = rtsync_copy_file(source.path, destination.path)
        guard rc == 0 else {
            throw LifecycleError.backupFailed(path: destination.path, reason: "copying \(source.path) failed: \(describe(POSIXError(.init(rawValue: rc) ?? .EIO)))")
        }
    }

    /// Copies the database with SQLite's online backup API (consistent: one read snapshot).
    static func onlineBackup(database: URL, to temp: URL) throws {
        let source = try openSource(database)
        // Pages not in the WAL are then read straight from the map instead of one pread each.
        _ = try? source.rows("PRAGMA mmap_size = 4294967296")
        let dest = try Connection(path: temp.path)
        // The destination is a private temp file that is synced and renamed only when complete and verified,
        // so its own journal and syncs would be wasted work.
        try dest.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE")
        try copyAll(Backup(from: source, to: dest), database: database, lockedReason: "database stayed locked")
        _ = try? dest.rows("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// Steps `backup` to completion, waiting up to about 10 s in all while another connection holds a lock.
    static func copyAll(_ backup: Backup, database: URL, lockedReason: String) throws {
        var spins = 0
        while try !backup.step(pages: -1) {
            spins += 1
            if spins > 200 { throw LifecycleError.backupFailed(path: database.path, reason: lockedReason) }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    /// Milliseconds since `start` (a `DispatchTime` uptime in nanoseconds).
    static func milliseconds(since start: UInt64) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
    }

    /// Switches a fresh copy to rollback-journal mode, folding any WAL content into the file.
    static func makeSelfContained(_ file: URL) throws {
        let db = try Connection(path: file.path, mode: .readWrite)
        _ = try db.rows("PRAGMA journal_mode = DELETE")
    }

    /// Why a database file is not usable, or nil when `quick_check` passes and it has tables.
    /// `immutable` is for files nothing else writes (backups, downloads, the bundled asset): they are
    /// read without locks and without creating -wal/-shm files beside them.
    public static func verificationProblem(_ file: URL, expectedTables: [String] = [], immutable: Bool = false) -> String? {
        do {
            let db = immutable ? try Connection(path: DiffReader.immutableURI(for: file.path), mode: .readOnly, uri: true)
                               : try Connection(path: file.path, mode: .readOnly)
            // Read through a memory map: one pread per page costs more than the check itself on large files.
            _ = try? db.rows("PRAGMA mmap_size = 4294967296")
            let check = try db.rows("PRAGMA quick_check(5)").compactMap { $0.first?.string }
            if check != ["ok"] { return check.joined(separator: "; ") }
            let tables = Set(try db.rows("SELECT lower(name) FROM sqlite_schema WHERE type = 'table'").compactMap { $0[0].string })
            if tables.isEmpty { return "database has no tables" }
            let missing = expectedTables.filter { !tables.contains($0.lowercased()) }
            if !missing.isEmpty { return "missing expected tables: \(missing.joined(separator: ", "))" }
            return nil
        } catch {
            return "\((error as? SQLiteError)?.message ?? "\(error)")"
        }
    }

    /// Why a fresh copy is not a whole SQLite database file, from its header alone (no page is read):
    /// the check `create(verification: .deferred)` makes before listing a backup.
    static func headerProblem(_ file: URL) -> String? {
        guard let handle = FileHandle(forReadingAtPath: file.path) else { return "cannot open" }
        defer { try? handle.close() }
        let header = [UInt8]((try? handle.read(upToCount: 100)) ?? Data())
        guard header.count == 100, header.prefix(16).elementsEqual("SQLite format 3\0".utf8) else { return "no SQLite header" }
        let rawPageSize = Int(header[16]) << 8 | Int(header[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        let pages = header[28..<32].reduce(0) { $0 << 8 | Int($1) }
        let size = ((try? FileManager.default.attributesOfItem(atPath: file.path)[.size]) as? NSNumber)?.intValue ?? 0
        guard pageSize >= 512, pageSize & (pageSize - 1) == 0 else { return "invalid page size \(rawPageSize)" }
        if pages > 0 && pages * pageSize != size { return "header says \(pages) pages of \(pageSize) bytes, file has \(size) bytes" }
        return nil
    }

    // MARK: - Verify and restore

    /// Syncs a backup to stable storage, re-checks it and records the result; the newest verified backup
    /// becomes last-known-good.
    public func verify(id: String) throws -> BackupInfo {
        let lock = try FolderLock(folder)
        defer { lock.unlock() }
        var m = loadManifest()
        guard let i = m.backups.firstIndex(where: { $0.id == id }) else { throw LifecycleError.backupNotFound(id: id) }
        let started = DispatchTime.now().uptimeNanoseconds
        let file = folder.appendingPathComponent(m.backups[i].file)
        var problem: String?
        do {
            try Durable.sync(file: file)
            Durable.sync(folderOf: file)
        } catch { problem = "could not be synced to stable storage: \(error)" }
        problem = problem ?? Self.verificationProblem(file, immutable: true)
        m.backups[i].verified = problem == nil
        m.backups[i].awaitingVerification = nil
        m.backups[i].verifyMilliseconds = Self.milliseconds(since: started)
        m.lastKnownGood = m.backups.filter(\.verified).max { $0.id < $1.id }?.id
        try saveManifest(m)
        return m.backups[i]
    }

    /// Verifies every backup made with deferred verification and not checked yet, newest first.
    /// - Returns: the backups checked, with their results.
    @discardableResult
    public func verifyPending() throws -> [BackupInfo] {
        // A backup rotated away since the list was read is simply gone: nothing to check.
        try list().filter { $0.awaitingVerification == true }.compactMap { b in
            do { return try verify(id: b.id) } catch LifecycleError.backupNotFound { return nil }
        }
    }

    /// Restores a backup (default: last-known-good) over the database, in place through SQLite (one
    /// transaction, so never half-written). The replaced content is kept beside it as `<name>.replaced-<KSUID>`.
    /// Changes the backup holds that were not exported when it was made are first exported into `outbox` (default:
    /// the `outbox` folder beside the database) as the device they were made on, with the clocks of when they were
    /// made, so later edits made elsewhere still win over them; then the database rejoins as a new site and its next
    /// sync catches up from the bucket (see SyncDatabase+Restore).
    /// - Returns: the backup restored and where the replaced database went.
    /// - Throws: `LifecycleError.backupCorrupt` naming the next good backup when the chosen one is damaged.
    @discardableResult
    public func restore(id: String? = nil, outbox: URL? = nil, signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> (backup: BackupInfo, replacedAt: URL?) {
        if let home, !HomeLock.isHeld(home) { return try HomeLock.withLock(home, wait: lockWait) { try restore(id: id, outbox: outbox, signingKey: signingKey) } }
        let m = loadManifest()
        guard let chosenID = id ?? m.lastKnownGood else { throw LifecycleError.noGoodBackup }
        guard m.backups.contains(where: { $0.id == chosenID }) else { throw LifecycleError.backupNotFound(id: chosenID) }
        let checked = try verify(id: chosenID)
        guard checked.verified else {
            let next = loadManifest().backups.filter { $0.verified && $0.id != chosenID }.max { $0.id < $1.id }
            throw LifecycleError.backupCorrupt(id: chosenID, reason: Self.verificationProblem(folder.appendingPathComponent(checked.file), immutable: true) ?? "failed quick_check", nextGood: next?.id)
        }
        // A restored copy is a copy: it must not reuse the site id (and sequence numbers) it had, and it must catch
        // up on what compaction pruned since. The new site id is given to a private copy of the backup, which is
        // then restored: the database has either its old content or the restored one with its new identity,
        // whenever the run is killed.
        let source = folder.appendingPathComponent(checked.file)
        let prepared = database.deletingLastPathComponent().appendingPathComponent(".rtsync-restore-\(KSUID.generate().string).sqlite")
        defer { for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: prepared.path + suffix) } }
        try Self.copyFile(source, to: prepared)
        do {
            let prepDB = try SyncDatabase(path: prepared.path)
            if prepDB.isTracked, try prepDB.pendingChangeCount() > 0 {
                // Written before the restore commits: if the run stops before that, the next sync finds a diff the
                // database does not record as its own and removes it, as for any export that did not commit.
                _ = try prepDB.exportChanges(to: outbox ?? home?.outbox ?? database.deletingLastPathComponent().appendingPathComponent("outbox"), signingKey: signingKey)
            }
        }
        do {
            let copy = try Connection(path: prepared.path)
            if try copy.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_site'") != nil {
                try copy.transaction { _ = try SyncDatabase.retireSite(copy, afterRestore: true) }
            }
            try copy.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        let replaced = try Self.restoreInPlace(prepared, into: database)
        return (checked, replaced)
    }

    /// Restores `backup` into the live database through SQLite's backup API, so connections other processes
    /// hold see the restored content (or wait on SQLite's locks) instead of writing into a file moved aside.
    /// The current content is first copied aside as `<name>.replaced-<KSUID>`.
    ///
    /// The live database's write lock is taken before the copy aside and held until the restore commits, so
    /// no commit can fall between the two and be in neither. Writers wait meanwhile (in rollback-journal mode
    /// readers too), up to their busy timeout. A file whose header SQLite cannot read (SQLITE_NOTADB, CORRUPT)
    /// is moved aside and the backup put in its place (`install`): a connection still open on it then keeps the
    /// file moved aside (in WAL mode it could go on committing there), so close the app's connections first.
    static func restoreInPlace(_ backup: URL, into database: URL) throws -> URL? {
        guard FileManager.default.fileExists(atPath: database.path) else { return try install(backup, as: database) }
        removeStaleRebuilds(besides: database)
        let live = try Connection(path: database.path, mode: .readWrite)
        live.setBusyTimeout(milliseconds: 10_000)
        var converted: URL?
        defer { if let converted { try? FileManager.default.removeItem(at: converted) } }
        let restore: Backup
        switch try lockedRestore(from: backup, into: live, database: database) {
        case .locked(let r): restore = r
        case .unreadable: return try install(backup, as: database)
        case .readOnly(let backupPageSize):
            // SQLite cannot change the page size of a WAL database: restore a copy made with the live page size.
            let pageSize = try live.scalar("PRAGMA page_size")?.int64 ?? 4096
            guard let backupPageSize, backupPageSize != pageSize else {
                throw LifecycleError.backupFailed(path: database.path, reason: "the database cannot be written (SQLITE_READONLY): check the file's permissions and its folder's")
            }
            converted = try copy(backup, withPageSize: pageSize, besides: database)
            guard case .locked(let r) = try lockedRestore(from: converted!, into: live, database: database) else {
                throw LifecycleError.backupFailed(path: database.path, reason: "the backup rebuilt with page size \(pageSize) could not be written into the database")
            }
            restore = r
        }
        let aside = database.deletingLastPathComponent().appendingPathComponent(database.lastPathComponent + ".replaced-" + KSUID.generate().string)
        try copyAside(live, database: database, to: aside)
        // Folding a copied WAL into the copy needs a readable database; a damaged one keeps its WAL beside it.
        if (try? makeSelfContained(aside)) != nil {
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: aside.path + suffix) }
        }
        try Durable.sync(file: aside)
        if FileManager.default.fileExists(atPath: aside.path + "-wal") { try Durable.sync(file: URL(fileURLWithPath: aside.path + "-wal")) }
        Durable.sync(folderOf: aside)
        BackupTestHooks.shared.run(.beforeRestore, database)
        try copyAll(restore, database: database, lockedReason: "database stayed locked by another connection")
        return aside
    }

    /// What taking the live database's write lock for a restore found.
    enum LockedRestore {
        /// The lock is held by this backup.
        case locked(Backup)
        /// SQLITE_READONLY: a WAL database and a backup with another page size (the backup's is given), or a
        /// database that cannot be written.
        case readOnly(backupPageSize: Int64?)
        /// SQLITE_NOTADB or SQLITE_CORRUPT: the live file is not a readable database.
        case unreadable
    }

    /// A backup from `source` into `live` that holds the live database's write lock.
    static func lockedRestore(from source: URL, into live: Connection, database: URL) throws -> LockedRestore {
        let reader = try Connection(path: DiffReader.immutableURI(for: source.path), mode: .readOnly, uri: true)
        let restore = try Backup(from: reader, to: live)
        do {
            guard try restore.lockDestination() else {
                throw LifecycleError.backupFailed(path: database.path, reason: "database stayed locked by another connection")
            }
        } catch let e as SQLiteError where e.code & 0xff == 8 {  // SQLITE_READONLY
            return .readOnly(backupPageSize: try? reader.scalar("PRAGMA page_size")?.int64)
        } catch let e as SQLiteError where e.code & 0xff == 26 || e.code & 0xff == 11 {  // SQLITE_NOTADB, SQLITE_CORRUPT
            // The step reads the backup first: an unreadable backup must not replace a good database.
            if let problem = verificationProblem(source, immutable: true) {
                throw LifecycleError.backupFailed(path: source.path, reason: "the backup cannot be read: \(problem)")
            }
            return .unreadable
        }
        return .locked(restore)
    }

    /// Copies `connection`'s main database file into the new file `target` through SQLite's own descriptor (a
    /// clone first when `clone`, else or then `copy_file_range`), or through SQLite's file methods for other VFSes.
    /// Opening and closing the file again here would drop this process's locks on it. `action` starts the error.
    static func copyDatabaseFile(of connection: Connection, to target: URL, clone: Bool, action: String) throws {
        func failed(_ error: Error) -> LifecycleError {
            .backupFailed(path: target.path, reason: "\(action) failed: \(Self.describe(error))")
        }
        if let fd = connection.mainFileDescriptor() {
            var rc = clone ? rtsync_clone_open_file(fd, connection.path, target.path) : -1
            if rc != 0 { rc = rtsync_copy_open_file(fd, target.path) }
            guard rc == 0 else { throw failed(POSIXError(.init(rawValue: rc) ?? .EIO)) }
        } else {
            do { _ = try connection.copyMainFile(to: target) } catch { throw failed(error) }
        }
    }

    /// Copies the live database aside, byte for byte, while `live` holds its write lock. Rollback-journal mode:
    /// the lock is EXCLUSIVE, so the file holds the last commit and nothing else reads or writes it. WAL mode:
    /// nothing can commit, and the WAL cannot restart (that needs the write lock), so the database file plus
    /// the whole WAL replay to the last commit even if a checkpoint copies frames into the file meanwhile. No
    /// page is read through SQLite, so a damaged database is copied as it is.
    static func copyAside(_ live: Connection, database: URL, to aside: URL) throws {
        // Bytes 18-19 of the header are 2 in WAL mode; the mode cannot change while the lock is held.
        let header = try live.readMainFileHeader(count: 20)
        let wal = header[18] == 2 || header[19] == 2
        try copyDatabaseFile(of: live, to: aside, clone: true, action: "copying \(database.path) aside")
        // SQLite holds no locks on the WAL file itself, so it may be opened and closed here.
        let walPath = database.path + "-wal"
        if wal, FileManager.default.fileExists(atPath: walPath) {
            if rtsync_clone_file(walPath, aside.path + "-wal") != 0 { try copyFile(URL(fileURLWithPath: walPath), to: URL(fileURLWithPath: aside.path + "-wal")) }
        }
    }

    /// Removes rebuilt copies (`copy(_:withPageSize:besides:)`) that a restore killed midway left behind.
    static func removeStaleRebuilds(besides database: URL) {
        let folder = database.deletingLastPathComponent()
        let prefix = ".\(database.lastPathComponent).restore-"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [] where name.hasPrefix(prefix) {
            try? FileManager.default.removeItem(at: folder.appendingPathComponent(name))
        }
    }

    /// A temporary copy of `backup` beside `database`, rebuilt with `pageSize` (VACUUM).
    static func copy(_ backup: URL, withPageSize pageSize: Int64, besides database: URL) throws -> URL {
        let temp = database.deletingLastPathComponent().appendingPathComponent(".\(database.lastPathComponent).restore-\(KSUID.generate().string)")
        try copyFile(backup, to: temp)
        do {
            let db = try Connection(path: temp.path, mode: .readWrite)
            _ = try db.rows("PRAGMA journal_mode = DELETE")
            try db.execute("PRAGMA page_size = \(pageSize); VACUUM")
            guard try db.scalar("PRAGMA page_size")?.int64 == pageSize else {
                throw LifecycleError.backupFailed(path: database.path, reason: "could not rebuild the backup with page size \(pageSize)")
            }
        } catch {
            try? FileManager.default.removeItem(at: temp)
            throw error
        }
        return temp
    }

    /// Copies `source` next to `target`, syncs it, moves any existing target (and its WAL files) aside,
    /// and renames the copy into place. Returns where the old target went.
    static func install(_ source: URL, as target: URL) throws -> URL? {
        let fm = FileManager.default
        try fm.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        let temp = target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).incoming")
        try? fm.removeItem(at: temp)
        if rtsync_clone_file(source.path, temp.path) != 0 {
            try? fm.removeItem(at: temp)
            try fm.copyItem(at: source, to: temp)
        }
        try Durable.sync(file: temp)
        var aside: URL?
        if fm.fileExists(atPath: target.path) {
            let dest = target.deletingLastPathComponent().appendingPathComponent(target.lastPathComponent + ".replaced-" + KSUID.generate().string)
            try fm.moveItem(at: target, to: dest)
            aside = dest
        }
        for s in ["-wal", "-shm", "-journal"] {
            if fm.fileExists(atPath: target.path + s) {
                if let aside { try? fm.moveItem(atPath: target.path + s, toPath: aside.path + s) } else { try? fm.removeItem(atPath: target.path + s) }
            }
        }
        try Durable.rename(temp, to: target)
        return aside
    }
}

/// Points where tests make another process act in the middle of a backup or restore (faults real timing cannot
/// produce on demand). A hook is set for one database: backups of other databases, such as those of tests running
/// at the same time, pass through untouched.
final class BackupTestHooks: @unchecked Sendable {
    /// Where a hook runs.
    enum Point: Hashable {
        /// Between copying the database file and copying its WAL.
        case afterDatabaseCopy
        /// After copying the WAL, before comparing its header with the live one.
        case afterWALCopy
        /// In a restore, after the copy aside and before the backup is copied in (the write lock held).
        case beforeRestore
    }

    static let shared = BackupTestHooks()
    private let lock = NSLock()
    private var hooks: [Point: [String: () -> Void]] = [:]

    /// Sets (or with nil removes) the hook run at `point` for `database`.
    func set(_ point: Point, for database: URL, _ hook: (() -> Void)?) {
        lock.lock(); defer { lock.unlock() }
        hooks[point, default: [:]][database.standardizedFileURL.path] = hook
    }

    func run(_ point: Point, _ database: URL) {
        lock.lock()
        let hook = hooks[point]?[database.standardizedFileURL.path]
        lock.unlock()
        hook?()
    }
}

/// An exclusive advisory lock (flock) on a folder itself, so processes sharing a backup folder take
/// turns without leaving a lock file behind.
final class FolderLock {
    private let fd: Int32

    init(_ url: URL) throws {
        fd = open(url.path, O_RDONLY)
        guard fd >= 0 else { throw LifecycleError.backupFailed(path: url.path, reason: String(cString: strerror(errno))) }
        guard flock(fd, LOCK_EX) == 0 else {
            close(fd)
            throw LifecycleError.backupFailed(path: url.path, reason: String(cString: strerror(errno)))
        }
    }

    func unlock() {
        flock(fd, LOCK_UN)
        close(fd)
    }
}

extension BackupManager {
    /// Makes a backup fit to leave the device (`<user>/backups/`, a compaction's snapshot): the database's pending
    /// changes are exported to `outbox` first, and a copy that still holds some (another connection wrote meanwhile)
    /// is kept locally only and made again, up to `attempts` times. Devices join from such a copy, so each row in it
    /// must be one whose later delete this device will send: a row inserted and deleted before an export is never
    /// sent at all. Returns the backup and whether it is fit to upload (false after `attempts` copies with changes).
    public func createForUpload(exportingFrom db: SyncDatabase, outbox: URL, signingKey: Curve25519.Signing.PrivateKey? = nil,
                                verification: BackupVerification = .immediate, attempts: Int = 3,
                                shouldStop: (@Sendable () -> Bool)? = nil) throws -> (info: BackupInfo, uploadable: Bool) {
        var info: BackupInfo?
        for _ in 0..<max(1, attempts) {
            if db.isTracked, try db.pendingChangeCount() > 0 {
                try FileManager.default.createDirectory(at: outbox, withIntermediateDirectories: true)
                _ = try db.exportChanges(to: outbox, signingKey: signingKey, shouldStop: shouldStop)
            }
            let made = try create(verification: verification)
            info = made
            if try !Self.holdsPendingChanges(folder.appendingPathComponent(made.file, isDirectory: false)) { return (made, true) }
        }
        return (info!, false)
    }

    /// Whether the database file at `url` holds captured changes not yet exported.
    static func holdsPendingChanges(_ url: URL) throws -> Bool {
        let c = try Connection(path: url.path, mode: .readOnly)
        guard try c.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'rtsync_changes'") != nil else { return false }
        return try c.scalar("SELECT 1 FROM rtsync_changes LIMIT 1") != nil
    }
}
