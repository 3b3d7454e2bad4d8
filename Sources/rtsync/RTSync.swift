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

/// Prints `error: <what>` and an optional `hint:` line to standard error, each one line, terminal-safe.
/// Warns that the export dropped inserts or updates of rows with a NULL in their key in `tables` (`sync`, `diff create`).
func warnNullKeys(_ tables: [String]) {
    let list = terminalSafe(tables.joined(separator: ", "), limit: 2_000)
    FileHandle.standardError.write(Data(("warning: rows with a NULL in their key were inserted or changed and not sent (\(list)): no device can find a row by a NULL key\n"
        + "hint: give those rows a key and declare the key columns NOT NULL; rtsync status counts them\n").utf8))
}

func printError(_ what: String, hint: String?) {
    var text = "error: \(terminalSafe(what, limit: 2_000))\n"
    if let hint { text += "hint: \(terminalSafe(hint, limit: 2_000))\n" }
    FileHandle.standardError.write(Data(text.utf8))
}

/// Text from a file or the network made safe to print: control characters (escape sequences, carriage returns,
/// line feeds) shown as `\u{1B}`-style escapes, so a hostile name cannot move the cursor, clear the screen or fake
/// a line, and anything past `limit` characters cut with a count of what was left out.
func terminalSafe(_ text: String, limit: Int = 300) -> String {
    var out = ""
    var count = 0
    for scalar in text.unicodeScalars {
        if count >= limit {
            let rest = text.unicodeScalars.count - count
            out += "…(\(rest) more characters)"
            break
        }
        let v = scalar.value
        if v < 0x20 || v == 0x7F || (0x80...0x9F).contains(v) || v == 0x2028 || v == 0x2029 || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) {
            out += "\\u{" + String(v, radix: 16, uppercase: true) + "}"
        } else {
            out.unicodeScalars.append(scalar)
        }
        count += 1
    }
    return out
}

/// Prints `error: <what> (<file or key>)` and a `hint:` line to standard error; returns the exit code to throw.
func fail(_ message: String, hint: String? = nil, code: Int32 = 1) -> ExitCode {
    printError(message, hint: hint)
    return ExitCode(code)
}

/// Prints a value as pretty, key-sorted JSON on standard output (dates as ISO-8601), with property names in
/// camelCase throughout (`diffID` in Swift is `diffId` in JSON; docs/json.md documents every command's keys).
func printJSON<T: Encodable>(_ value: T) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    encoder.keyEncodingStrategy = .custom { path in jsonKey(path.last!) }
    if let data = try? encoder.encode(value) { print(String(decoding: data, as: UTF8.self)) }
}

/// Writes a progress line to standard error when it is a terminal.
func progress(_ text: String) {
    if isatty(2) != 0 { FileHandle.standardError.write(Data((text + "\n").utf8)) }
}

/// A property's JSON key: a trailing abbreviation is a word (`diffID` -> `diffId`, `fileURL` -> `fileUrl`), as in
/// every other key. Only keys of a type's own properties are renamed, never dictionary keys, which are data
/// (table names, paths).
func jsonKey(_ key: CodingKey) -> CodingKey {
    guard String(describing: type(of: key)) == "CodingKeys", key.intValue == nil else { return key }
    for abbreviation in ["ID", "URL"] where key.stringValue.hasSuffix(abbreviation) && key.stringValue.count > abbreviation.count {
        let word = abbreviation.prefix(1) + abbreviation.dropFirst().lowercased()
        return JSONKey(stringValue: String(key.stringValue.dropLast(abbreviation.count)) + word)
    }
    return key
}

/// A plain coding key, for renamed JSON keys.
struct JSONKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
