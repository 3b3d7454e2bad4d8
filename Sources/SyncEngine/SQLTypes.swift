import RTSQLite

/// A value read from or bound to SQLite, the type rows, keys and conflict-log values are given in: an enum with the
/// cases `.null`, `.integer(Int64)`, `.real(Double)`, `.text(String)` and `.blob([UInt8])`, `Sendable` and
/// `Hashable`, with the accessors `int64` and `string` (nil for another case), `isNull`, `isReal` and `sqlLiteral`
/// (the value as SQL text, like SQLite's `quote()`). Defined in rtsync's internal SQLite wrapper; named here so apps reach it from the products.
/// (Declared in this module, it is also the one name SyncEngine's own code means.)
public typealias SQLValue = RTSQLite.SQLValue

/// An error SQLite returned: `code` (the primary result code, e.g. 5 for SQLITE_BUSY), `extendedCode`, `message` and
/// the SQL it ran (bound values are not shown); `isUniqueViolation` and `isForeignKeyViolation` say which constraint
/// failed.
public typealias SQLiteError = RTSQLite.SQLiteError

extension SQLValue {
    /// Whether `other` is stored as this value is: text by its bytes (Swift's `==` takes the NFC and NFD spellings
    /// of a text for one, which SQLite stores, compares and syncs as two), other values by `==`.
    func isStoredLike(_ other: SQLValue) -> Bool {
        if case .text(let a) = self, case .text(let b) = other { return a.utf8.elementsEqual(b.utf8) }
        return self == other
    }
}
