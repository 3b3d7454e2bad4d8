import CSQLite

/// SQLite's online backup API: copies a live database page by page (https://sqlite.org/backup.html).
public final class Backup {
    private let handle: OpaquePointer
    private let destination: Connection
    private let source: Connection

    /// Prepares a copy of `source`'s main database into `destination`'s main database.
    public init(from source: Connection, to destination: Connection) throws {
        guard let h = sqlite3_backup_init(destination.handle, "main", source.handle, "main") else {
            throw SQLiteError(code: sqlite3_extended_errcode(destination.handle), message: destination.lastErrorMessage)
        }
        self.handle = h
        self.source = source
        self.destination = destination
    }

    deinit { sqlite3_backup_finish(handle) }

    /// Copies up to `pages` pages (-1 = all); returns true when the copy is complete.
    public func step(pages: Int32 = -1) throws -> Bool {
        let rc = sqlite3_backup_step(handle, pages)
        switch rc {
        case SQLITE_DONE: return true
        case SQLITE_OK, SQLITE_BUSY, SQLITE_LOCKED: return false
        // The step's own result code says what failed (e.g. disk full); the destination's last error may not.
        default: throw SQLiteError(code: rc, message: String(cString: sqlite3_errstr(rc)))
        }
    }

    /// Takes the destination's write lock without copying a page (a step of 0 pages) and holds it until the
    /// copy is done or the backup is released; the destination connection must not be used meanwhile. Returns
    /// false when another connection holds the lock past the destination's busy timeout.
    /// - Throws: `SQLiteError`, for example SQLITE_READONLY when the destination is in WAL mode with a page
    ///   size other than the source's.
    public func lockDestination() throws -> Bool {
        let rc = sqlite3_backup_step(handle, 0)
        switch rc & 0xff {
        case SQLITE_OK: return true
        case SQLITE_BUSY, SQLITE_LOCKED: return false
        default: throw SQLiteError(code: rc, message: String(cString: sqlite3_errstr(rc)))
        }
    }

    /// Pages left to copy after the last step.
    public var remaining: Int { Int(sqlite3_backup_remaining(handle)) }
    /// Pages in the source after the last step.
    public var pageCount: Int { Int(sqlite3_backup_pagecount(handle)) }
}
