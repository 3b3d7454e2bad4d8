import Foundation
import RTSyncTestSupport
import Testing

/// The result of running the `rtsync` binary.
typealias CommandResult = CommandOutput

/// A fresh folder under the system temp directory, removed when the value is released.
final class TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("IntegrationTests-" + UUID().uuidString, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
}

enum RTSyncBinary {
    /// The package root: this file is `<root>/Tests/IntegrationTests/CLITestSupport.swift`.
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The built `rtsync` (see `locateBuiltBinary`).
    static let url: URL? = locateBuiltBinary(packageRoot: packageRoot)

    /// Runs `rtsync` with `arguments`, capturing both output streams (through files, so a full pipe cannot stall it).
    static func run(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
        let binary = try #require(url, "rtsync binary not found; build it or set RTSYNC_BIN", sourceLocation: sourceLocation)
        return try runCommand(binary, arguments)
    }
}

/// Parses JSON text into a dictionary.
func jsonObject(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
    let value = try JSONSerialization.jsonObject(with: Data(text.utf8))
    return try #require(value as? [String: Any], "not a JSON object: \(text)", sourceLocation: sourceLocation)
}

/// Parses JSON text that must be an array of exactly one object (the inspect commands print an array whatever the
/// number of arguments) and returns that object.
func onlyJSONElement(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
    let value = try JSONSerialization.jsonObject(with: Data(text.utf8))
    let array = try #require(value as? [[String: Any]], "not a JSON array of objects: \(text)", sourceLocation: sourceLocation)
    try #require(array.count == 1, "expected one element: \(text)", sourceLocation: sourceLocation)
    return array[0]
}

/// Runs SQL on a database with the `sqlite3` shell, as a user or another tool would write to it.
func sqliteShell(_ db: String, _ sql: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let r = try runCommand(URL(fileURLWithPath: "/usr/bin/env"), ["sqlite3", db, sql])
    #expect(r.status == 0, "sqlite3 failed: \(r.stderr)", sourceLocation: sourceLocation)
}
