import Crypto
import DiffFormat
import Foundation
import RTSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Who a database syncs as, and whether the file is still the one its site id belongs to

// A database syncs as one user (the bucket prefix its diffs go under) and one site (this device's id in every
// clock and diff). An app's own database gets both from `initializeForSync`; a database without a user id is
// refused by sync instead of writing under an empty prefix.
//
// A copy of a tracked database (`cp`, a restored device image) carries its site id along; two devices sharing one
// site id skip each other's diffs as "this device's own". The file a site id was first synced from is recorded next
// to it (`rtsync_location`: path, device and inode); a file at another path AND with another identity is taken for a
// copy and refused until it is given its own site id (`becomeNewSite`) or confirmed as moved (`confirmLocation`).

/// Where a site id was recorded, and what the file looks like now.
public struct DatabaseLocationCheck: Sendable, Equatable {
    /// The path the site id was recorded for (nil when none was recorded yet).
    public var recordedPath: String?
    /// Whether the file is taken for a copy: another path and another file identity than recorded.
    public var looksCopied: Bool
}

extension SyncDatabase {
    static let locationTableSQL = "CREATE TABLE IF NOT EXISTS rtsync_location(id INTEGER PRIMARY KEY CHECK (id = 1), site_id TEXT NOT NULL, path TEXT NOT NULL, device INTEGER, inode INTEGER)"

    /// Prepares an app's database for sync as `userID`: installs rtsync's bookkeeping if missing, tracks every table
    /// that can be tracked when no table is tracked yet (call `track(tables:)` first to choose), and records the user
    /// id and, when given, the site id (only before this database has exported anything). Running it again with the
    /// same ids changes nothing. Tables without a usable key are left out (see ``trackedTables()``; `track(tables:)`
    /// says why). Returns the site id.
    /// - Throws: `SyncEngineError.invalidIdentity` when an id is unusable or differs from the one recorded.
    @discardableResult
    public func initializeForSync(userID: String, siteID: String? = nil) throws -> String {
        if let problem = Self.userIDProblem(userID) { throw SyncEngineError.invalidIdentity(path: path, reason: problem) }
        if let siteID, (try? KSUID(string: siteID)) == nil {
            throw SyncEngineError.invalidIdentity(path: path, reason: "site id '\(siteID)' is not a 27-character KSUID")
        }
        if try !isTracked || trackedTables().isEmpty { try trackAllTrackable() }
        return try locked {
            try db.transaction {
                let recordedUser = try db.scalar("SELECT user_id FROM rtsync_site")?.string ?? ""
                if !recordedUser.isEmpty && recordedUser != userID {
                    throw SyncEngineError.invalidIdentity(path: path, reason: "it already belongs to user '\(recordedUser)'")
                }
                try db.execute("UPDATE rtsync_site SET user_id = ?", [.text(userID)])
                let current = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
                if let siteID, siteID != current {
                    let exported = try db.scalar("SELECT diff_seq FROM rtsync_site")?.int64 ?? 0
                    if exported > 0 {
                        throw SyncEngineError.invalidIdentity(path: path, reason: "it has exported diffs as site \(current) already")
                    }
                    try db.execute("UPDATE rtsync_site SET site_id = ?", [.text(siteID)])
                }
                try recordLocationLocked()
                return try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
            }
        }
    }

    /// Why `user` cannot be a user id (it becomes the first segment of every object key), or nil.
    static func userIDProblem(_ user: String) -> String? {
        if user.isEmpty { return "the user id is empty" }
        if user.utf8.count > 128 { return "the user id is longer than 128 bytes" }
        if user == "." || user == ".." || user == "demo" { return "'\(user)' cannot be a user id" }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        if !user.allSatisfy({ allowed.contains($0) }) { return "user id '\(user)' may hold only letters, digits, '-', '_' and '.'" }
        return nil
    }

    /// Gives a copy of a database (a new device made with `cp`, a copied app container) its own site id. Changes the
    /// copy holds that the old site had not exported belong to the old site: they are first exported into `outbox`
    /// as the old site, with the clocks of when they were made (as a restore does), so nothing is lost if the
    /// original never syncs again, and the original exporting them too changes nothing. The old site is not retired:
    /// it is another live device. Returns the new site id.
    /// - Throws: `SyncEngineError.notTracked`, or what the export throws (nothing is changed then).
    @discardableResult
    public func becomeNewSite(outbox: URL, signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> String {
        try locked { try requireTracked() }
        if try pendingChangeCount() > 0 {
            try FileManager.default.createDirectory(at: outbox, withIntermediateDirectories: true)
            _ = try exportChanges(to: outbox, signingKey: signingKey)
        }
        return try locked {
            try db.transaction {
                let id = try Self.retireSite(db, afterRestore: false)
                try recordLocationLocked()
                return id
            }
        }
    }

    /// Records the database's current path and file identity as the place of its site id (a moved file, not a copy).
    public func confirmLocation() throws {
        try locked {
            try requireTracked()
            try db.transaction { try recordLocationLocked() }
        }
    }

    /// Compares the file with the place its site id was recorded for; records the place when none is recorded for
    /// the current site id, and follows a file that was only moved (same identity) or replaced in place (same path).
    public func checkLocation() throws -> DatabaseLocationCheck {
        try locked {
            try requireTracked()
            return try db.transaction {
                try db.execute(Self.locationTableSQL)
                let site = try db.scalar("SELECT site_id FROM rtsync_site")?.string ?? ""
                let rows = try db.rows("SELECT site_id, path, device, inode FROM rtsync_location")
                guard let r = rows.first, r[0].string == site else {
                    try recordLocationLocked()
                    return DatabaseLocationCheck(recordedPath: nil, looksCopied: false)
                }
                let recordedPath = r[1].string ?? ""
                let here = Self.fileIdentity(path)
                let samePath = recordedPath == Self.canonicalPath(path)
                let sameFile = here != nil && r[2].int64 == here?.device && r[3].int64 == here?.inode
                if samePath && sameFile { return DatabaseLocationCheck(recordedPath: recordedPath, looksCopied: false) }
                if samePath || sameFile {
                    try recordLocationLocked()
                    return DatabaseLocationCheck(recordedPath: recordedPath, looksCopied: false)
                }
                return DatabaseLocationCheck(recordedPath: recordedPath, looksCopied: true)
            }
        }
    }

    /// Inside the caller's lock and transaction: records path and file identity for the current site id.
    func recordLocationLocked() throws {
        try db.execute(Self.locationTableSQL)
        let id = Self.fileIdentity(path)
        try db.execute("INSERT OR REPLACE INTO rtsync_location(id, site_id, path, device, inode) VALUES (1, (SELECT site_id FROM rtsync_site), ?, ?, ?)",
                       [.text(Self.canonicalPath(path)), id.map { .integer($0.device) } ?? .null, id.map { .integer($0.inode) } ?? .null])
    }

    static func canonicalPath(_ path: String) -> String {
        URL(fileURLWithPath: path).resolvingSymlinksInPath().standardizedFileURL.path
    }

    /// Device and inode numbers of a file (its identity while it is not copied).
    static func fileIdentity(_ path: String) -> (device: Int64, inode: Int64)? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return (Int64(truncatingIfNeeded: st.st_dev), Int64(truncatingIfNeeded: st.st_ino))
    }
}
