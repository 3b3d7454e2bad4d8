import CSQLite

/// An error returned by SQLite: result code, message and the SQL that failed (bound values are never included).
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    /// The extended result code (https://sqlite.org/rescode.html).
    public let extendedCode: Int32
    /// SQLite's message for the failure.
    public let message: String
    /// The statement that failed, if any.
    public let sql: String?

    /// The primary result code (the low byte of the extended code).
    public var code: Int32 { extendedCode & 0xFF }

    /// Makes an error from a result code, message and SQL.
    public init(code: Int32, message: String, sql: String? = nil) {
        self.extendedCode = code
        self.message = message
        self.sql = sql
    }

    /// True for a UNIQUE or PRIMARY KEY constraint failure.
    public var isUniqueViolation: Bool {
        // SQLITE_CONSTRAINT_UNIQUE (2067) and SQLITE_CONSTRAINT_PRIMARYKEY (1555): macros Swift cannot import.
        extendedCode == 2067 || extendedCode == 1555
    }

    /// True when another connection held a lock past the busy timeout (SQLITE_BUSY, SQLITE_LOCKED).
    public var isBusy: Bool { code == SQLITE_BUSY || code == SQLITE_LOCKED }

    /// True for a FOREIGN KEY constraint failure (SQLITE_CONSTRAINT_FOREIGNKEY).
    public var isForeignKeyViolation: Bool { extendedCode == 787 }

    /// True for any constraint failure (NOT NULL, CHECK, FOREIGN KEY, UNIQUE...).
    public var isConstraintViolation: Bool { code == SQLITE_CONSTRAINT }

    /// True when the file is not a database or is corrupt.
    public var isCorruption: Bool { code == SQLITE_NOTADB || code == SQLITE_CORRUPT }

    public var description: String {
        var text = "SQLite error \(extendedCode): \(message)"
        if let sql { text += " — while executing `\(sql)`" }
        return text
    }
}
