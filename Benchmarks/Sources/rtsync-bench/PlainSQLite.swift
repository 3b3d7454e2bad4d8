import CSQLiteBench
import Foundation

// Baseline-only access to the system SQLite: a tiny connection/statement wrapper plus the session
// extension. rtsync never uses this; it exists so baselines run the same SQLite the same way.

struct BenchSQLiteError: Error, CustomStringConvertible {
    var code: Int32
    var message: String
    var description: String { "SQLite error \(code): \(message)" }
}

enum BenchValue {
    case int(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
    case null
}

final class PlainDB {
    let handle: OpaquePointer

    init(path: String) throws {
        var h: OpaquePointer?
        let rc = sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let h else {
            let msg = h.map { String(cString: sqlite3_errmsg($0)) } ?? "open failed"
            sqlite3_close_v2(h)
            throw BenchSQLiteError(code: rc, message: msg)
        }
        handle = h
        sqlite3_busy_timeout(h, 5_000)
    }

    deinit { sqlite3_close_v2(handle) }

    func check(_ rc: Int32) throws {
        if rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW {
            throw BenchSQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)))
        }
    }

    func exec(_ sql: String) throws {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let msg = err.map { String(cString: $0) } ?? ""
            sqlite3_free(err)
            throw BenchSQLiteError(code: rc, message: msg + " in: " + sql.prefix(200))
        }
    }

    func prepare(_ sql: String) throws -> PlainStatement { try PlainStatement(db: self, sql: sql) }

    /// First column of the first row as an integer (nil when no row).
    func scalarInt(_ sql: String) throws -> Int64? {
        let s = try prepare(sql)
        return try s.step() ? sqlite3_column_int64(s.handle, 0) : nil
    }

    func scalarText(_ sql: String) throws -> String? {
        let s = try prepare(sql)
        guard try s.step(), let c = sqlite3_column_text(s.handle, 0) else { return nil }
        return String(cString: c)
    }
}

final class PlainStatement {
    let handle: OpaquePointer
    let db: PlainDB

    init(db: PlainDB, sql: String) throws {
        var h: OpaquePointer?
        try db.check(sqlite3_prepare_v2(db.handle, sql, -1, &h, nil))
        guard let h else { throw BenchSQLiteError(code: SQLITE_MISUSE, message: "empty statement") }
        handle = h
        self.db = db
    }

    deinit { sqlite3_finalize(handle) }

    func bind(_ values: [BenchValue]) throws {
        for (i, v) in values.enumerated() {
            let idx = Int32(i + 1)
            let rc: Int32
            switch v {
            case .int(let x): rc = sqlite3_bind_int64(handle, idx, x)
            case .real(let x): rc = sqlite3_bind_double(handle, idx, x)
            case .text(let x): rc = sqlite3_bind_text(handle, idx, x, -1, bench_transient())
            case .blob(let x): rc = x.withUnsafeBytes { sqlite3_bind_blob(handle, idx, $0.baseAddress, Int32($0.count), bench_transient()) }
            case .null: rc = sqlite3_bind_null(handle, idx)
            }
            try db.check(rc)
        }
    }

    /// True while a row is available.
    @discardableResult
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw BenchSQLiteError(code: rc, message: String(cString: sqlite3_errmsg(db.handle)))
    }

    /// Binds, runs to completion and resets.
    func run(_ values: [BenchValue]) throws {
        try bind(values)
        while try step() {}
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }
}

/// SQLite's session extension on one connection: records changes to attached tables as a changeset.
final class PlainSession {
    let handle: OpaquePointer

    init(db: PlainDB, table: String?) throws {
        var h: OpaquePointer?
        try db.check(sqlite3session_create(db.handle, "main", &h))
        guard let h else { throw BenchSQLiteError(code: SQLITE_ERROR, message: "sqlite3session_create") }
        handle = h
        try db.check(sqlite3session_attach(h, table))
    }

    deinit { sqlite3session_delete(handle) }

    /// The changeset recorded so far.
    func changeset() throws -> [UInt8] {
        var n: Int32 = 0
        var p: UnsafeMutableRawPointer?
        let rc = sqlite3session_changeset(handle, &n, &p)
        defer { sqlite3_free(p) }
        guard rc == SQLITE_OK else { throw BenchSQLiteError(code: rc, message: "sqlite3session_changeset") }
        guard let p, n > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: Int(n)))
    }
}

extension PlainDB {
    /// Applies a changeset with `sqlite3changeset_apply` (conflicts: replace), in one savepoint as SQLite does.
    func applyChangeset(_ bytes: [UInt8]) throws {
        var copy = bytes
        let rc = copy.withUnsafeMutableBytes { bench_changeset_apply(handle, Int32($0.count), $0.baseAddress) }
        try check(rc)
    }
}

/// Removes a database file and its side files.
func removeDatabase(_ path: String) {
    for s in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: path + s) }
}

func sqlite3ColumnText(_ s: PlainStatement, _ i: Int32) -> String? {
    sqlite3_column_text(s.handle, i).map { String(cString: $0) }
}
func sqlite3Reset(_ s: PlainStatement) {
    sqlite3_reset(s.handle)
    sqlite3_clear_bindings(s.handle)
}

func plainSQLiteVersion() -> String { String(cString: sqlite3_libversion()) }
