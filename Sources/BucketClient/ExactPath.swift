import Foundation

/// A path or object key compared, hashed and ordered by its UTF-8 bytes.
///
/// Swift's `String` equality and hashing follow Unicode canonical equivalence, so `été` written in NFC and in NFD
/// (as macOS writes names) are one dictionary key; filesystems and S3 keep them apart. Every manifest, set and
/// dictionary of media paths uses this type, so two such names are two files.
public struct ExactPath: Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The path, its bytes as given.
    public let string: String

    /// Wraps `string` without changing its bytes.
    public init(_ string: String) { self.string = string }

    /// Wraps a literal.
    public init(stringLiteral value: String) { self.string = value }

    /// Byte-for-byte equality of the UTF-8 forms.
    public static func == (a: ExactPath, b: ExactPath) -> Bool { a.string.utf8.elementsEqual(b.string.utf8) }

    /// Hashes the UTF-8 bytes.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(string.utf8.count)
        for byte in string.utf8 { hasher.combine(byte) }
    }

    /// UTF-8 byte order: the order of S3 listings.
    public static func < (a: ExactPath, b: ExactPath) -> Bool { a.string.utf8.lexicographicallyPrecedes(b.string.utf8) }

    /// The path itself.
    public var description: String { string }
}
