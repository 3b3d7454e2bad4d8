import CSQLite

/// SQLite's storage classes, as `sqlite3_column_type` reports them.
public enum StorageClass: Int32, Sendable {
    case integer = 1, real = 2, text = 3, blob = 4, null = 5
}

/// A compiled SQL statement; finalized when released.
public final class Statement {
    let handle: OpaquePointer
    /// The connection that compiled it (kept alive while the statement lives).
    public let connection: Connection
    /// The statement's SQL text.
    public let sql: String

    init(connection: Connection, handle: OpaquePointer, sql: String) {
        self.connection = connection
        self.handle = handle
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Number of result columns.
    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    /// Name of result column `index`.
    public func columnName(_ index: Int) -> String {
        sqlite3_column_name(handle, Int32(index)).map { String(cString: $0) } ?? ""
    }

    /// Binds values to parameters 1...n, resetting the statement first.
    public func bind(_ values: [SQLValue]) throws {
        sqlite3_reset(handle)
        // Parameters not given are NULL; when all are given, each is overwritten anyway.
        if values.count < Int(sqlite3_bind_parameter_count(handle)) { sqlite3_clear_bindings(handle) }
        for (i, value) in values.enumerated() { try bind(value, at: i + 1) }
    }

    /// Binds one value to the 1-based parameter `index`.
    public func bind(_ value: SQLValue, at index: Int) throws {
        let i = Int32(index)
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, i)
        case .integer(let v): rc = sqlite3_bind_int64(handle, i, v)
        case .real(let v): rc = sqlite3_bind_double(handle, i, v)
        case .text(let s):
            // Bind with an explicit byte length: text may contain NUL bytes, which -1 would cut at.
            // SQLite copies the bytes (SQLITE_TRANSIENT), so a native string's own storage is used as is.
            func bindBytes(_ buffer: UnsafeBufferPointer<UInt8>) -> Int32 {
                buffer.withMemoryRebound(to: CChar.self) { chars in
                    // An empty string still needs a non-NULL pointer, or SQLite binds NULL instead of ''.
                    sqlite3_bind_text(handle, i, chars.baseAddress ?? UnsafePointer(bitPattern: 1), Int32(chars.count), rtsync_transient())
                }
            }
            if let done = s.utf8.withContiguousStorageIfAvailable(bindBytes) {
                rc = done
            } else {
                rc = Array(s.utf8).withUnsafeBufferPointer(bindBytes)
            }
        case .blob(let b):
            rc = b.withUnsafeBytes { raw in
                // An empty array has no base address; SQLite needs a non-NULL pointer for an empty BLOB (not NULL).
                sqlite3_bind_blob(handle, i, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(b.count), rtsync_transient())
            }
        }
        if rc != SQLITE_OK {
            throw SQLiteError(code: rc, message: connection.lastErrorMessage, sql: sql)
        }
    }

    /// Advances to the next row; false when done.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let code = sqlite3_extended_errcode(connection.handle)
            let message = connection.lastErrorMessage
            sqlite3_reset(handle)
            throw SQLiteError(code: code, message: message, sql: sql)
        }
    }

    /// Resets the statement so it can run again with new bindings.
    public func reset() { sqlite3_reset(handle) }

    /// Value of result column `index` in the current row.
    public func column(_ index: Int) -> SQLValue {
        let i = Int32(index)
        switch sqlite3_column_type(handle, i) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, i))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, i))
        case SQLITE_TEXT:
            guard let p = sqlite3_column_text(handle, i) else { return .text("") }
            let n = Int(sqlite3_column_bytes(handle, i))
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self))
        case SQLITE_BLOB:
            let n = Int(sqlite3_column_bytes(handle, i))
            guard n > 0, let p = sqlite3_column_blob(handle, i) else { return .blob([]) }
            return .blob([UInt8](UnsafeRawBufferPointer(start: p, count: n)))
        default: return .null
        }
    }

    /// Column `index` of the current row when it is TEXT, else nil; returns `previous` itself when it holds the
    /// same bytes, so a value repeated row after row (a site id) is not copied into a new string each time.
    public func text(_ index: Int, reusing previous: String?) -> String? {
        let i = Int32(index)
        guard sqlite3_column_type(handle, i) == SQLITE_TEXT else { return nil }
        // Text first, then its length (the order SQLite's documentation asks for).
        guard let p = sqlite3_column_text(handle, i) else { return "" }
        let n = Int(sqlite3_column_bytes(handle, i))
        let bytes = UnsafeBufferPointer(start: p, count: n)
        if var previous, previous.utf8.count == n,
           previous.withUTF8({ $0.elementsEqual(bytes) }) { return previous }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Storage class of column `index` in the current row.
    public func columnType(_ index: Int) -> StorageClass { StorageClass(rawValue: sqlite3_column_type(handle, Int32(index))) ?? .null }

    /// Column `index` of the current row as an integer (SQLite's conversion when it is not one).
    public func int64(_ index: Int) -> Int64 { sqlite3_column_int64(handle, Int32(index)) }

    /// Column `index` of the current row as a double (SQLite's conversion when it is not one).
    public func double(_ index: Int) -> Double { sqlite3_column_double(handle, Int32(index)) }

    /// Calls `body` with the bytes of a TEXT or BLOB column of the current row, without copying them;
    /// the buffer is valid only during the call. Only for TEXT and BLOB columns: for others SQLite would
    /// convert the stored value.
    public func withColumnBytes<R>(_ index: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let i = Int32(index)
        // Text or blob pointer first, then the length (the order SQLite's documentation asks for).
        let p: UnsafeRawPointer? = sqlite3_column_type(handle, i) == SQLITE_BLOB
            ? sqlite3_column_blob(handle, i) : sqlite3_column_text(handle, i).map { UnsafeRawPointer($0) }
        let n = Int(sqlite3_column_bytes(handle, i))
        return try body(UnsafeRawBufferPointer(start: n > 0 ? p : nil, count: p == nil ? 0 : n))
    }

    /// Whether column `index` of the current row is TEXT with exactly the bytes of `text`.
    public func columnIsText(_ index: Int, equalTo text: String) -> Bool {
        guard columnType(index) == .text else { return false }
        return withColumnBytes(index) { bytes in
            var text = text
            return text.withUTF8 { $0.count == bytes.count && $0.elementsEqual(bytes) }
        }
    }

    /// Whether column `index` of the current row is TEXT holding a NUL byte (read as stored, no Swift string made).
    public func columnIsTextWithNUL(_ index: Int) -> Bool {
        guard columnType(index) == .text else { return false }
        return withColumnBytes(index) { $0.contains(0) }
    }

    /// Binds column `column` of `source`'s current row to the 1-based parameter `index`, as it is stored
    /// (no conversion to a Swift value and back). `source` may belong to another connection of this thread.
    public func bind(columnOf source: Statement, _ column: Int, at index: Int) throws {
        let rc = sqlite3_bind_value(handle, Int32(index), sqlite3_column_value(source.handle, Int32(column)))
        if rc != SQLITE_OK {
            throw SQLiteError(code: rc, message: connection.lastErrorMessage, sql: sql)
        }
    }

    /// The number of parameters (the largest `?NNN` index used).
    public var parameterCount: Int { Int(sqlite3_bind_parameter_count(handle)) }

    /// Steps a statement that returns no rows to completion and resets it, keeping its bindings
    /// (for statements bound parameter by parameter).
    public func runBound() throws {
        defer { sqlite3_reset(handle) }
        while try step() {}
    }

    /// All columns of the current row.
    public func row() -> [SQLValue] { (0..<columnCount).map { column($0) } }

    /// Runs the statement with `values` and steps it to completion.
    public func run(_ values: [SQLValue]) throws {
        try bind(values)
        while try step() {}
    }
}
