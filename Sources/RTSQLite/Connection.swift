import CSQLite
import Foundation

/// A connection to one SQLite database file; the only owner of a `sqlite3*` handle.
///
/// Not thread-safe: use one connection per thread or serialize access.
public final class Connection {
    /// How to open a database.
    public enum Mode: Sendable {
        /// Read and write; create the file if missing.
        case readWriteCreate
        /// Read and write an existing file.
        case readWrite
        /// Read only.
        case readOnly
    }

    let handle: OpaquePointer
    /// The path this connection was opened with.
    public let path: String
    /// Whether `file:` URIs are understood, here and in `ATTACH` (opened with `uri: true`).
    public let interpretsURIs: Bool

    /// Opens (or creates) a database.
    /// - Throws: `SQLiteError` when the file cannot be opened.
    public init(path: String, mode: Mode = .readWriteCreate, uri: Bool = false) throws {
        var flags: Int32
        switch mode {
        case .readWriteCreate: flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        case .readWrite: flags = SQLITE_OPEN_READWRITE
        case .readOnly: flags = SQLITE_OPEN_READONLY
        }
        flags |= SQLITE_OPEN_NOMUTEX
        if uri { flags |= SQLITE_OPEN_URI }
        _ = Connection.configureOnce
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            // sqlite3_open_v2 may hand back a handle even on failure; it must still be closed.
            if let db { sqlite3_close_v2(db) }
            throw SQLiteError(code: rc, message: message + " (\(path))")
        }
        self.handle = db
        self.path = path
        self.interpretsURIs = uri
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        if let cookieStatement { sqlite3_finalize(cookieStatement) }
        sqlite3_close_v2(handle)
    }

    // MARK: - Schema memo

    /// `PRAGMA main.schema_version`, prepared once (a raw statement: a `Statement` kept here would hold this connection).
    private var cookieStatement: OpaquePointer?
    /// Values computed from the schema (`memoizedBySchema`), valid while the schema cookie is `cookie`.
    private var schemaMemo: (cookie: Int64, values: [String: Any]) = (-1, [:])

    /// The schema cookie of the main database: SQLite changes it with every change of the schema, by any connection.
    package func schemaCookie() throws -> Int64 {
        if cookieStatement == nil {
            var statement: OpaquePointer?
            let rc = sqlite3_prepare_v2(handle, "PRAGMA main.schema_version", -1, &statement, nil)
            guard rc == SQLITE_OK, let statement else { throw SQLiteError(code: rc, message: lastErrorMessage) }
            cookieStatement = statement
        }
        let statement = cookieStatement!
        defer { sqlite3_reset(statement) }
        let rc = sqlite3_step(statement)
        guard rc == SQLITE_ROW else { throw SQLiteError(code: rc, message: lastErrorMessage) }
        return sqlite3_column_int64(statement, 0)
    }

    /// `compute()`, which must depend on the main database's schema only, remembered on this connection under `key`
    /// while the schema cookie stays the same.
    ///
    /// A value is remembered only when it was read from a committed schema: outside a write transaction (whose own
    /// schema change may be rolled back to a savepoint, and the cookie it had reused by another change), and with
    /// the cookie the same before and after reading. Committed cookies only grow, so a remembered value is never
    /// taken for another schema; inside a write transaction the cookie equals it only while the transaction has
    /// changed no schema (or rolled such a change back).
    package func memoizedBySchema<T>(_ key: String, _ compute: () throws -> T) throws -> T {
        let cookie = try schemaCookie()
        if schemaMemo.cookie == cookie, let remembered = schemaMemo.values[key], let value = remembered as? T { return value }
        let value = try compute()
        if sqlite3_txn_state(handle, "main") != SQLITE_TXN_WRITE, try schemaCookie() == cookie {
            if schemaMemo.cookie != cookie { schemaMemo = (cookie, [:]) }
            schemaMemo.values[key] = value
        }
        return value
    }

    /// Test hook: `julianday('now')` on this connection reports the wall clock shifted by `offsetMilliseconds`, as on a
    /// device whose clock is wrong (the capture triggers take a change's time from it). Only `'now'` is understood.
    package func shiftWallClockForTesting(offsetMilliseconds: Int64) throws {
        let offset = UnsafeMutablePointer<Int64>.allocate(capacity: 1)
        offset.initialize(to: offsetMilliseconds)
        let rc = sqlite3_create_function_v2(handle, "julianday", 1, SQLITE_UTF8, offset, { context, _, arguments in
            guard let arguments, let text = sqlite3_value_text(arguments[0]), String(cString: text) == "now" else {
                sqlite3_result_error(context, "julianday is shifted for testing and understands only 'now'", -1)
                return
            }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            let shift = sqlite3_user_data(context)!.assumingMemoryBound(to: Int64.self).pointee
            let milliseconds = Double(now.tv_sec) * 1000 + Double(now.tv_nsec) / 1_000_000 + Double(shift)
            sqlite3_result_double(context, milliseconds / 86_400_000 + 2_440_587.5)
        }, nil, nil, { pointer in pointer?.assumingMemoryBound(to: Int64.self).deallocate() })
        guard rc == SQLITE_OK else { throw SQLiteError(code: rc, message: "cannot shift the wall clock (\(path))") }
    }

    /// Process-wide settings applied before the first connection opens.
    private static let configureOnce: Void = { _ = rtsync_disable_memstatus() }()

    // MARK: - Executing

    /// Runs one or more SQL statements that return no rows needed by the caller.
    public func execute(_ sql: String) throws {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let message = err.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(err)
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: message, sql: sql)
        }
    }

    /// Runs exactly one statement; text after it (a second statement) is an error, so built SQL can never
    /// smuggle in more than it says.
    public func executeSingle(_ sql: String) throws {
        var stmt: OpaquePointer?
        var rest = ""
        let rc = sql.withCString { text -> Int32 in
            var tail: UnsafePointer<CChar>?
            let rc = sqlite3_prepare_v2(handle, text, -1, &stmt, &tail)
            // Read the tail while the C string is alive.
            if let tail { rest = String(cString: tail) }
            return rc
        }
        guard rc == SQLITE_OK, let stmt else {
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: lastErrorMessage, sql: sql)
        }
        let statement = Statement(connection: self, handle: stmt, sql: sql)
        if !rest.allSatisfy({ $0.isWhitespace || $0 == ";" }) {
            throw SQLiteError(code: SQLITE_ERROR, message: "more than one statement", sql: sql)
        }
        while try statement.step() {}
    }

    /// Runs one statement with bound arguments.
    public func execute(_ sql: String, _ arguments: [SQLValue]) throws {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        while try statement.step() {}
    }

    /// Compiles one statement.
    public func prepare(_ sql: String) throws -> Statement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v2(handle, sql, -1, &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: lastErrorMessage, sql: sql)
        }
        return Statement(connection: self, handle: stmt, sql: sql)
    }

    /// All rows of a query.
    public func rows(_ sql: String, _ arguments: [SQLValue] = []) throws -> [[SQLValue]] {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        var out: [[SQLValue]] = []
        while try statement.step() { out.append(statement.row()) }
        return out
    }

    /// The first column of the first row, or nil when there is no row.
    public func scalar(_ sql: String, _ arguments: [SQLValue] = []) throws -> SQLValue? {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        return try statement.step() ? statement.column(0) : nil
    }

    /// Runs `body` inside a transaction, committing on return and rolling back on throw.
    public func transaction<T>(immediate: Bool = true, _ body: () throws -> T) throws -> T {
        try execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            if !isAutocommit { try? execute("ROLLBACK") }
            throw error
        }
    }

    // MARK: - State

    /// The rowid of the last inserted row.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    /// Rows changed by the last statement.
    public var changes: Int { Int(sqlite3_changes(handle)) }
    /// False while a transaction is open.
    public var isAutocommit: Bool { sqlite3_get_autocommit(handle) != 0 }
    /// Whether the open transaction has foreign-key violations not yet resolved (deferred ones, checked at
    /// COMMIT): `SQLITE_DBSTATUS_DEFERRED_FKS`. A rollback to a savepoint restores it as it was there.
    public var hasUnresolvedForeignKeys: Bool {
        var current: Int32 = 0, highwater: Int32 = 0
        // SQLITE_DBSTATUS_DEFERRED_FKS (10): a macro Swift cannot import.
        _ = sqlite3_db_status(handle, 10, &current, &highwater, 0)
        return current != 0
    }
    var lastErrorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// Waits up to `milliseconds` for locks held by other connections.
    public func setBusyTimeout(milliseconds: Int32) { sqlite3_busy_timeout(handle, milliseconds) }

    // MARK: - rtsync's key texts

    /// Adds the SQL function `rtsync_key_value(text, i)` to this connection: value `i` (from 0) of a row key text,
    /// the `quote()` texts of the key's values joined by commas (`'abc',3`). A quoted TEXT part gives its text, an
    /// INTEGER part its integer; anything else (a REAL, a BLOB, NULL, a `J"…"` part, a missing or malformed part)
    /// gives the integer 0, which `quote()` does not turn back into that part, so a caller that compares the
    /// `quote()` of the values with the key text finds it. Deterministic and free of side effects.
    package func installKeyValueFunction() throws {
        let rc = sqlite3_create_function_v2(handle, "rtsync_key_value", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, nil, { context, _, arguments in
            guard let arguments, let value = arguments[0], sqlite3_value_type(value) == SQLITE_TEXT, let text = sqlite3_value_text(value) else {
                sqlite3_result_int64(context, 0); return
            }
            let count = Int(sqlite3_value_bytes(value)), wanted = sqlite3_value_int64(arguments[1])
            let quote = UInt8(ascii: "'"), comma = UInt8(ascii: ",")
            var position = 0, part: Int64 = 0
            while position < count {
                let start = position
                var end: Int  // one past the part
                if text[position] == quote {
                    var j = position + 1
                    while j < count && !(text[j] == quote && (j + 1 == count || text[j + 1] != quote)) { j += text[j] == quote ? 2 : 1 }
                    guard j < count else { break }
                    end = j + 1
                } else {
                    end = position
                    while end < count && text[end] != comma { end += 1 }
                }
                guard end == count || text[end] == comma else { break }
                if part == wanted {
                    if text[start] == quote {
                        // Between the quotes, with each doubled quote made one.
                        var bytes: [UInt8] = []
                        bytes.reserveCapacity(end - start - 2)
                        var j = start + 1
                        while j < end - 1 { bytes.append(text[j]); j += text[j] == quote ? 2 : 1 }
                        bytes.withUnsafeBytes { b in
                            // SQLite copies the bytes; an empty text still needs a pointer that is not NULL.
                            let chars = (b.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!).assumingMemoryBound(to: CChar.self)
                            sqlite3_result_text(context, chars, Int32(b.count), rtsync_transient())
                        }
                        return
                    }
                    // An integer: an optional minus sign and digits, within Int64.
                    var j = start, negative = false, magnitude: UInt64 = 0
                    if j < end && text[j] == UInt8(ascii: "-") { negative = true; j += 1 }
                    guard j < end else { break }
                    while j < end, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(text[j]) {
                        let (m, o1) = magnitude.multipliedReportingOverflow(by: 10)
                        let (a, o2) = m.addingReportingOverflow(UInt64(text[j] - UInt8(ascii: "0")))
                        guard !o1, !o2 else { sqlite3_result_int64(context, 0); return }
                        magnitude = a; j += 1
                    }
                    guard j == end else { break }
                    if negative {
                        guard magnitude <= UInt64(Int64.max) + 1 else { break }
                        sqlite3_result_int64(context, magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))
                    } else {
                        guard magnitude <= UInt64(Int64.max) else { break }
                        sqlite3_result_int64(context, Int64(magnitude))
                    }
                    return
                }
                guard end < count else { break }
                position = end + 1
                part += 1
            }
            sqlite3_result_int64(context, 0)
        }, nil, nil, nil)
        guard rc == SQLITE_OK else { throw SQLiteError(code: rc, message: "cannot add rtsync_key_value (\(path))") }
    }

    // MARK: - Triggers of this connection

    /// Turns the main schema's triggers off or on for this connection's own writes (`SQLITE_DBCONFIG_ENABLE_TRIGGER`;
    /// TEMP triggers and foreign key actions run either way). No schema change and nothing written: other
    /// connections keep firing them and keep their compiled statements; SQLite recompiles this connection's.
    package func setMainTriggers(enabled: Bool) throws {
        let rc = rtsync_db_config_int(handle, SQLITE_DBCONFIG_ENABLE_TRIGGER, enabled ? 1 : 0)
        if rc != SQLITE_OK { throw SQLiteError(code: rc, message: "sqlite3_db_config(SQLITE_DBCONFIG_ENABLE_TRIGGER) failed") }
    }

    /// Whether the main schema's triggers fire for this connection's own writes (``setMainTriggers(enabled:)``).
    package var mainTriggersEnabled: Bool {
        var on: Int32 = 1
        _ = rtsync_db_config_query(handle, SQLITE_DBCONFIG_ENABLE_TRIGGER, &on)
        return on != 0
    }

    // MARK: - Hardening for untrusted files

    /// Locks the connection down for reading a file from outside: defensive mode, untrusted schema,
    /// no triggers, no views, no extension loading (https://sqlite.org/security.html).
    public func hardenForUntrustedInput() throws {
        let settings: [(Int32, Int32)] = [
            (SQLITE_DBCONFIG_DEFENSIVE, 1),
            (SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0),
            (SQLITE_DBCONFIG_ENABLE_TRIGGER, 0),
            (SQLITE_DBCONFIG_ENABLE_VIEW, 0),
            (SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0),
        ]
        for (op, value) in settings {
            let rc = rtsync_db_config_int(handle, op, value)
            if rc != SQLITE_OK { throw SQLiteError(code: rc, message: "sqlite3_db_config(\(op)) failed") }
        }
        // Limits keep a hostile file from making us build huge statements or recurse deeply.
        sqlite3_limit(handle, SQLITE_LIMIT_ATTACHED, 0)
        try execute("PRAGMA trusted_schema = OFF; PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0")
    }
}
