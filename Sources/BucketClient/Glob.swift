import Foundation

/// A shell-style path pattern: `*` within a segment, `**` across segments, `?` one character.
///
/// A pattern without `/` matches the file name alone (so `*.m4a` matches at any depth), as in rsync.
public struct Glob: Sendable, Hashable {
    /// The pattern text.
    public let pattern: String
    private let chars: [Character]
    private let matchesNameOnly: Bool

    /// Creates a glob from `pattern`.
    public init(_ pattern: String) {
        self.pattern = pattern
        self.chars = Array(pattern)
        self.matchesNameOnly = !pattern.contains("/")
    }

    /// Whether `path` (relative, `/`-separated) matches.
    public func matches(_ path: String) -> Bool {
        let target = matchesNameOnly ? String(path.split(separator: "/").last ?? "") : path
        return Self.match(chars[...], Array(target)[...])
    }

    private static func match(_ p: ArraySlice<Character>, _ s: ArraySlice<Character>) -> Bool {
        guard let first = p.first else { return s.isEmpty }
        if first == "*" {
            let rest = p.dropFirst()
            if rest.first == "*" {
                // `**/` also matches zero folders.
                var after = rest.dropFirst()
                if after.first == "/" {
                    after = after.dropFirst()
                    if match(after, s) { return true }
                }
                var i = s.startIndex
                while true {
                    if match(after, s[i...]) { return true }
                    if i == s.endIndex { return false }
                    i = s.index(after: i)
                }
            }
            var i = s.startIndex
            while true {
                if match(rest, s[i...]) { return true }
                if i == s.endIndex || s[i] == "/" { return false }
                i = s.index(after: i)
            }
        }
        guard let c = s.first else { return false }
        if first == "?" { return c != "/" && match(p.dropFirst(), s.dropFirst()) }
        return first == c && match(p.dropFirst(), s.dropFirst())
    }
}
