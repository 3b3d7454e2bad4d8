import ArgumentParser
import Foundation

/// The rtsync command-line tool.
@main
struct RTSync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtsync",
        abstract: "Offline-first SQLite sync through an S3-style bucket.",
        discussion: """
        rtsync tracks changes in a SQLite database, ships them as diff files (themselves SQLite \
        databases named by KSUID) through a bucket, and merges them column by column on other devices.
        """,
        version: "0.1.0",
        subcommands: [Sync.self, Init.self, Status.self, Share.self, Request.self, Inbound.self, Compact.self,
                      Track.self, Untrack.self, Migrate.self, Diff.self, Conflicts.self, BackupCommand.self, Demo.self, Keys.self,
                      Bucket.self, Media.self, Snapshot.self, KSUIDCommand.self]
    )
}

// MARK: - Output helpers shared by commands

/// Prints `error: <what>` and an optional `hint:` line to standard error.
func printError(_ what: String, hint: String?) {
    var text = "error: \(what)\n"
    if let hint { text += "hint: \(hint)\n" }
    FileHandle.standardError.write(Data(text.utf8))
}

/// Prints `error: <what> (<file or key>)` and a `hint:` line to standard error; returns the exit code to throw.
func fail(_ message: String, hint: String? = nil, code: Int32 = 1) -> ExitCode {
    printError(message, hint: hint)
    return ExitCode(code)
}

/// Prints a value as pretty, key-sorted JSON on standard output (dates as ISO-8601).
func printJSON<T: Encodable>(_ value: T) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    if let data = try? encoder.encode(value) { print(String(decoding: data, as: UTF8.self)) }
}

/// Writes a progress line to standard error when it is a terminal.
func progress(_ text: String) {
    if isatty(2) != 0 { FileHandle.standardError.write(Data((text + "\n").utf8)) }
}
