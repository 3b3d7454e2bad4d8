import Foundation

/// A set of short entries kept in a small text file, one a line (sorted), replaced atomically on each save.
package enum LineSetFile {
    /// The entries in `url`; none when the file is missing or unreadable.
    package static func load(_ url: URL) -> Set<String> {
        Set(((try? String(contentsOf: url, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init))
    }

    /// Writes `entries` to `url` (its folder created when missing).
    package static func save(_ entries: Set<String>, to url: URL) throws {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data((entries.sorted().joined(separator: "\n") + "\n").utf8).write(to: url, options: .atomic)
    }
}
