import BucketClient
import DiffFormat
import Foundation
import RTSQLite
import SyncEngine

/// What the CLI prints for a failure: one line saying what failed and on which file, key or URL, and a hint the
/// user can act on. The libraries' errors carry app wording; the command line adds its flags and commands here.
struct ErrorExplanation: Equatable {
    /// `error:` text, ending with the subject in parentheses where one is known.
    var what: String
    /// `hint:` text, or nil when there is nothing useful to say.
    var hint: String?

    /// Explains `error`, met while working on `subject` (a database path, home folder or bucket URL) when given.
    init(_ error: Error, subject: String? = nil) {
        switch error {
        case let e as SQLiteError: self = Self.sqlite(e, subject: subject)
        case let e as SyncEngineError: self = Self.syncEngine(e, subject: subject)
        case let e as LifecycleError: self = Self.lifecycle(e)
        case let e as DiffFormatError: self.init(what: e.description, hint: e.hint)
        case let e as BucketError: self.init(what: e.description, hint: e.hint)
        case let e as EncryptionError: self.init(what: e.description, hint: e.hint)
        case let e as RemoteStoreError: self.init(what: e.description, hint: Self.remoteHint(e))
        case let e as CocoaError: self = Self.file(e, subject: subject)
        default:
            let ns = error as NSError
            if ns.domain == NSCocoaErrorDomain { self = Self.file(CocoaError(CocoaError.Code(rawValue: ns.code), userInfo: ns.userInfo), subject: subject); return }
            self.init(what: Self.withSubject("\(error)", subject), hint: nil)
        }
    }

    init(what: String, hint: String? = nil) {
        self.what = what
        self.hint = hint
    }

    /// Appends ` (subject)` unless the text already names it.
    static func withSubject(_ text: String, _ subject: String?) -> String {
        guard let subject, !subject.isEmpty, !text.contains("(\(subject))") else { return text }
        return "\(text) (\(subject))"
    }

    // MARK: - SQLite

    /// SQLite's messages in words a user can act on; the failing SQL is left out of the line (it spans many lines
    /// and means nothing to most users) unless RTSYNC_DEBUG is set.
    static func sqlite(_ e: SQLiteError, subject: String?) -> ErrorExplanation {
        let debugSQL = ProcessInfo.processInfo.environment["RTSYNC_DEBUG"].map { !$0.isEmpty && $0 != "0" } ?? false
        let sql = debugSQL ? e.sql.map { " while executing `\($0)`" } ?? "" : ""
        let message = e.message.lowercased()
        let s = subject
        switch e.code {
        case 26: // SQLITE_NOTADB
            return .init(what: withSubject("not a SQLite database", s),
                         hint: "check the path: it must name a SQLite 3 database file (`sqlite3 FILE .tables` opens one)")
        case 11: // SQLITE_CORRUPT
            return .init(what: withSubject("the database is damaged (\(e.message))\(sql)", s),
                         hint: "restore a good copy of the file; for an rtsync home: rtsync backup restore (rtsync backup list shows the backups; the damaged file is kept beside it)")
        case 14: // SQLITE_CANTOPEN
            if let s, isDirectory(s) {
                return .init(what: withSubject("is a folder, not a database file", s), hint: "give the path of the database file itself, e.g. \(s)/app.sqlite")
            }
            return .init(what: withSubject("cannot open the database file\(sql)", s),
                         hint: "check that the path exists and its folder is readable and writable")
        case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
            return .init(what: withSubject("the database is busy: another program holds its write lock\(sql)", s),
                         hint: "nothing was changed; run the command again when the other program is done")
        case 8: // SQLITE_READONLY
            return .init(what: withSubject("the database is read-only\(sql)", s),
                         hint: "check the permissions of the file, its folder and its -wal/-shm files")
        case 13: // SQLITE_FULL
            return .init(what: withSubject("the disk is full\(sql)", s), hint: "free some space and run the command again; nothing was changed")
        case 10: // SQLITE_IOERR
            return .init(what: withSubject("input/output error reading or writing the database (\(e.message))\(sql)", s),
                         hint: "check the disk and the file system; nothing was changed")
        case 20: // SQLITE_MISMATCH
            return .init(what: withSubject("datatype mismatch: a value that is not an integer was given for an INTEGER PRIMARY KEY column\(sql)", s),
                         hint: "an INTEGER PRIMARY KEY holds integers only; check the value or the column's declared type")
        default: break
        }
        if message.contains("too many columns") {
            return .init(what: withSubject("too many columns: the table or statement has more columns than this SQLite allows (SQLITE_MAX_COLUMN, 2000 by default)\(sql)", s),
                         hint: "split the table, or use a SQLite built with a larger SQLITE_MAX_COLUMN")
        }
        if message.contains("expression tree is too large") {
            return .init(what: withSubject("a statement is too deep for this SQLite (expression tree too large, SQLITE_MAX_EXPR_DEPTH)\(sql)", s),
                         hint: "a table this wide cannot be tracked with this SQLite; split the table or raise SQLITE_MAX_EXPR_DEPTH")
        }
        if message.hasPrefix("no such table") {
            return .init(what: withSubject("\(e.message)\(sql)", s), hint: "list the tables with `sqlite3 DB .tables`; check the --db path")
        }
        if e.code == 19 { // SQLITE_CONSTRAINT
            return .init(what: withSubject("constraint failed: \(e.message)\(sql)", s), hint: "nothing was changed")
        }
        return .init(what: withSubject("SQLite error \(e.extendedCode): \(e.message)\(sql)", s), hint: nil)
    }

    // MARK: - Library errors

    static func syncEngine(_ e: SyncEngineError, subject: String?) -> ErrorExplanation {
        switch e {
        case .databaseNotFound(let p):
            if isDirectory(p) { return .init(what: "is a folder, not a database file (\(p))", hint: "give the path of the database file itself") }
            return .init(what: e.description, hint: "check the --db path, or run `rtsync init` to create the home's database")
        case .notTracked(let p):
            return .init(what: e.description, hint: "rtsync track --db \(shellQuoted(p)) --all")
        case .noSuchTable:
            let db = subject.map(shellQuoted) ?? "DB"
            return .init(what: withSubject(e.description, nil), hint: "list the tables with `sqlite3 \(db) .tables`; `rtsync track --db \(db) --all` tracks every table")
        case .conflictNotFound:
            return .init(what: e.description, hint: "list conflicts with `rtsync conflicts list\(subject.map { " --db \(shellQuoted($0))" } ?? "")`")
        case .cannotRestore(_, let reason):
            let hint: String
            if reason.hasPrefix("row ") {
                hint = "the row was deleted since; re-create it in the app (`rtsync conflicts show` has the logged values), then restore again"
            } else if reason.hasPrefix("table ") || reason.hasPrefix("column ") {
                hint = "a migration removed it; the value stays in the conflict log (`rtsync conflicts show`) to copy by hand"
            } else {
                hint = "`rtsync conflicts show` lists the logged values; set one by hand in the app"
            }
            return .init(what: e.description, hint: hint)
        default:
            return .init(what: withSubject(e.description, nil), hint: e.cliHint)
        }
    }

    static func lifecycle(_ e: LifecycleError) -> ErrorExplanation {
        switch e {
        case .backupNotFound:
            return .init(what: e.description, hint: "`rtsync backup list` shows the backup ids; without an id restore picks the last known good one")
        case .tierRefused:
            return .init(what: e.description, hint: "switch this home to premium with `rtsync init --tier premium`, or use a local-folder bucket (--bucket /path or file:///path)")
        case .invalidSettings(let file, _):
            return .init(what: e.description, hint: "fix the JSON in \(file) (a backup of it is worth keeping: it holds this device's user id)")
        default:
            return .init(what: e.description, hint: e.cliHint)
        }
    }

    static func remoteHint(_ e: RemoteStoreError) -> String? {
        let text = e.description.lowercased()
        if text.contains("bucket not found") || text.contains("nosuchbucket") {
            return "create the bucket, or fix the bucket URL (--bucket or `bucket` in settings.json)"
        }
        switch e {
        case .failed:
            return "check the network and the bucket's endpoint and credentials, then run the command again (what it finished stays done)"
        case .alreadyExists:
            return "another run already stored this object; run the command again to go on from there"
        default:
            return nil
        }
    }

    // MARK: - Files

    /// Foundation file errors: what went wrong with which path, instead of "NSCocoaErrorDomain 512".
    static func file(_ e: CocoaError, subject: String?) -> ErrorExplanation {
        let path = (e.userInfo[NSFilePathErrorKey] as? String) ?? (e.userInfo[NSURLErrorKey] as? URL)?.path ?? subject
        let posix = (e.userInfo[NSUnderlyingErrorKey] as? NSError).flatMap { $0.domain == NSPOSIXErrorDomain ? Int32($0.code) : nil }
        // A path whose parent is a plain file is the usual cause of "could not be completed" (512).
        if let path, let blocker = fileInTheWay(of: path) {
            return .init(what: "not a folder: \(blocker) is a file (needed as a folder for \(path))", hint: "give a folder path (--home names a folder), or move the file \(blocker) away")
        }
        switch (e.code, posix) {
        case (.fileNoSuchFile, _), (.fileReadNoSuchFile, _), (_, ENOENT?):
            return .init(what: withSubject("no such file or folder", path), hint: "check the path")
        case (.fileReadNoPermission, _), (.fileWriteNoPermission, _), (_, EACCES?), (_, EPERM?):
            return .init(what: withSubject("permission denied", path), hint: "check the permissions of the path and its folder")
        case (.fileWriteOutOfSpace, _), (_, ENOSPC?):
            return .init(what: withSubject("no space left on the device", path), hint: "free some space and run the command again")
        case (.fileWriteVolumeReadOnly, _), (_, EROFS?):
            return .init(what: withSubject("the file system is read-only", path), hint: "use a writable location")
        case (_, ENOTDIR?):
            return .init(what: withSubject("a part of the path is a file, not a folder", path), hint: "check the path")
        case (_, EISDIR?):
            return .init(what: withSubject("is a folder, not a file", path), hint: "give the path of a file")
        default:
            let reason = (e.userInfo[NSUnderlyingErrorKey] as? NSError)?.localizedDescription ?? e.localizedDescription
            return .init(what: withSubject("file error: \(reason)", path), hint: "check that the path exists and is writable")
        }
    }

    /// The nearest existing ancestor of `path` (or `path` itself, when a folder is expected below it) that is a
    /// regular file, which makes every write below it fail.
    static func fileInTheWay(of path: String) -> String? {
        var url = URL(fileURLWithPath: path).deletingLastPathComponent()
        while url.path != "/" && !url.path.isEmpty {
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDir) {
                return isDir.boolValue ? nil : url.path
            }
            url.deleteLastPathComponent()
        }
        return nil
    }

    static func isDirectory(_ path: String) -> Bool {
        var isDir: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDir) && isDir.boolValue
    }

    /// `path` quoted for a shell when it needs it, so a hint can be pasted as it is.
    static func shellQuoted(_ path: String) -> String {
        let safe = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%")
        if !path.isEmpty && path.unicodeScalars.allSatisfy(safe.contains) { return path }
        return "'" + path.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
