import DiffFormat
import Foundation
import RTSQLite
import Testing

/// A fresh folder under the system temp directory, removed when the value is released.
final class TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("DiffFormatTests-" + UUID().uuidString, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
}

/// Runs `/usr/bin/sqlite3` (the system shell) and returns its exit status and standard output.
func runSQLiteShell(_ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    process.arguments = arguments
    let out = Pipe()
    process.standardOutput = out
    process.standardError = Pipe()
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

let sqliteShellAvailable = FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3")

/// The table most diff tests carry: `items(id INTEGER PRIMARY KEY, name TEXT, qty INTEGER)`.
let itemsTable = TableDefinition(name: "items", columns: [
    ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
    ColumnDefinition(name: "name", type: "TEXT"),
    ColumnDefinition(name: "qty", type: "INTEGER"),
])

let authorSite = "site-A"
let fixedCreatedAt = Date(timeIntervalSince1970: 1_750_000_000.123)

/// Writes a valid diff of `items` with `rowCount` upserts into `directory` and returns its URL.
func writeItemsDiff(in directory: URL, rowCount: Int = 2, expectedRows: Int = 0) throws -> URL {
    let writer = try DiffWriter(directory: directory, kind: .changes, authorUser: "user-1", authorSite: authorSite,
                                sequence: 1...Int64(Swift.max(rowCount, 1)), createdAt: fixedCreatedAt, expectedRows: expectedRows)
    try writer.addTable(itemsTable)
    for i in 0..<rowCount {
        try writer.append(RowChange(table: "items", operation: .upsert,
                                    values: [.integer(Int64(i + 1)), .text("item \(i + 1)"), .integer(Int64(i * 10))],
                                    clock: Clock(hlc: HLC(milliseconds: 1_750_000_000_000, counter: i), site: authorSite),
                                    born: Clock(hlc: HLC(milliseconds: 1_750_000_000_000, counter: i), site: authorSite)))
    }
    return try writer.finish()
}

/// Opens `url` with a plain writable connection (no hardening), runs `sql`, and closes it.
func tamper(_ url: URL, _ sql: String) throws {
    let db = try Connection(path: url.path, mode: .readWrite)
    try db.execute(sql)
}

/// The `DiffFormatError` opening `url` throws, or nil when it opens.
func openingError(_ url: URL, limits: DiffLimits = .default) -> DiffFormatError? {
    do {
        _ = try DiffReader(url: url, limits: limits)
        return nil
    } catch let error as DiffFormatError {
        return error
    } catch {
        Issue.record("expected a DiffFormatError, got \(type(of: error)): \(error)")
        return nil
    }
}
