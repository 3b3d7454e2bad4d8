import Foundation
import SyncEngine

/// The app-like table every SQL suite uses: a TEXT (KSUID-like) key, text, integer and real columns.
enum Items {
    static let ddl = "CREATE TABLE items(id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, qty INTEGER NOT NULL, price REAL, note TEXT, updated_at INTEGER NOT NULL)"
    static let insertSQL = "INSERT INTO items(id, name, qty, price, note, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
    static let updateSQL = "UPDATE items SET qty = ?, note = ?, updated_at = ? WHERE id = ?"

    /// `count` rows from `seed`; the same seed gives the same rows.
    static func rows(_ count: Int, seed: UInt64) -> [[BenchValue]] {
        var rng = SplitMix64(seed: seed)
        return (0..<count).map { i in
            [.text(String(format: "%07d", i) + rng.word(20)), .text(rng.word(12) + " " + rng.word(8)),
             .int(Int64(rng.next() % 1000)), .real(Double(rng.next() % 100_000) / 100), .text(rng.word(40)),
             .int(1_700_000_000 + Int64(i))]
        }
    }

    /// Update arguments (qty, note, updated_at, id) for each of `keys`.
    static func updates(keys: [String], seed: UInt64) -> [[BenchValue]] {
        var rng = SplitMix64(seed: seed)
        return keys.enumerated().map { i, k in
            [.int(Int64(rng.next() % 1000)), .text(rng.word(40)), .int(1_800_000_000 + Int64(i)), .text(k)]
        }
    }

    static func keys(of rows: [[BenchValue]]) -> [String] {
        rows.map { if case .text(let k) = $0[0] { return k } else { return "" } }
    }

    /// A new database file with the items table, in WAL mode (as apps on iOS usually run SQLite).
    static func createDatabase(_ path: String, tracked: Bool) throws {
        removeDatabase(path)
        do {
            let db = try PlainDB(path: path)
            try db.exec("PRAGMA journal_mode=WAL; " + ddl)
        }
        if tracked { _ = try SyncDatabase(path: path).track(tables: ["items"]) }
    }

    /// Opens a connection the way an app would for bulk writes.
    static func open(_ path: String) throws -> PlainDB {
        let db = try PlainDB(path: path)
        try db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
        return db
    }

    /// Inserts all rows in one transaction with one prepared statement.
    static func bulkInsert(_ db: PlainDB, _ rows: [[BenchValue]]) throws {
        try db.exec("BEGIN")
        let s = try db.prepare(insertSQL)
        for r in rows { try s.run(r) }
        try db.exec("COMMIT")
    }

    /// Updates the first `columns` of (note, qty, updated_at) of each row (or of `names`, taking their values from
    /// `positions` of each `updates` argument), with one prepared statement in one transaction. `note` comes first: its new value always differs from the old one.
    static func bulkUpdate(_ db: PlainDB, _ args: [[BenchValue]], columns: Int, names: [String] = ["note", "qty", "updated_at"],
                           positions: [Int] = [1, 0, 2]) throws {
        let names = names.prefix(columns), positions = positions.prefix(columns)
        try db.exec("BEGIN")
        let s = try db.prepare("UPDATE items SET " + names.map { "\($0) = ?" }.joined(separator: ", ") + " WHERE id = ?")
        for a in args { try s.run(positions.map { a[$0] } + [a[3]]) }
        try db.exec("COMMIT")
    }

    /// Deletes the rows with `keys` with one prepared statement in one transaction.
    static func bulkDelete(_ db: PlainDB, _ keys: [String]) throws {
        try db.exec("BEGIN")
        let s = try db.prepare("DELETE FROM items WHERE id = ?")
        for k in keys { try s.run([.text(k)]) }
        try db.exec("COMMIT")
    }

    static func bulkUpdate(_ db: PlainDB, _ args: [[BenchValue]]) throws {
        try db.exec("BEGIN")
        let s = try db.prepare(updateSQL)
        for a in args { try s.run(a) }
        try db.exec("COMMIT")
    }
}
