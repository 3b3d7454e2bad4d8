import Foundation

/// A K-sortable unique id compatible with segmentio/ksuid: 4-byte big-endian seconds since
/// 1,400,000,000 (2014-05-13) plus 16 random bytes, written as 27 base62 characters.
public struct KSUID: Sendable, Hashable, Comparable {
    /// Seconds between the Unix epoch and the KSUID epoch.
    public static let epoch: Int64 = 1_400_000_000
    /// Length of the binary form.
    public static let byteCount = 20
    /// Length of the text form.
    public static let stringLength = 27
    static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)

    /// The 20 raw bytes.
    public let bytes: [UInt8]

    /// The all-zero KSUID (`000000000000000000000000000`).
    public static let min = KSUID(uncheckedBytes: [UInt8](repeating: 0, count: 20))
    /// The largest KSUID (`aWgEPTl1tmebfsQzFP4bxwgy80V`).
    public static let max = KSUID(uncheckedBytes: [UInt8](repeating: 0xFF, count: 20))

    init(uncheckedBytes: [UInt8]) { self.bytes = uncheckedBytes }

    /// Makes a KSUID from 20 raw bytes.
    /// - Throws: `KSUIDError.invalidByteCount` for any other length.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == Self.byteCount else { throw KSUIDError.invalidByteCount(bytes.count) }
        self.bytes = bytes
    }

    /// Makes a KSUID from its timestamp (seconds since the KSUID epoch) and 16-byte payload.
    public init(timestamp: UInt32, payload: [UInt8]) throws {
        guard payload.count == 16 else { throw KSUIDError.invalidPayloadLength(payload.count) }
        let t = timestamp.bigEndian
        self.bytes = withUnsafeBytes(of: t) { Array($0) } + payload
    }

    /// Parses the 27-character text form.
    /// - Throws: `KSUIDError` for a wrong length, a character outside `0-9A-Za-z`, or a value above `KSUID.max`.
    public init(string: String) throws {
        let scalars = Array(string.unicodeScalars)
        // A non-ASCII character is named as such (not counted as a wrong length when it fills the bytes).
        if let bad = scalars.firstIndex(where: { !$0.isASCII }), scalars.count <= Self.stringLength {
            throw KSUIDError.invalidCharacter(string, character: String(scalars[bad]), position: bad)
        }
        guard scalars.count == Self.stringLength else {
            throw KSUIDError.invalidLength(string, found: scalars.count)
        }
        let chars = Array(string.utf8)
        // Accumulate into a 192-bit number (6 x 32-bit words, big-endian) so overflow past 160 bits shows.
        var words = [UInt32](repeating: 0, count: 6)
        for (position, c) in chars.enumerated() {
            let digit: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): digit = UInt32(c - UInt8(ascii: "A")) + 10
            case UInt8(ascii: "a")...UInt8(ascii: "z"): digit = UInt32(c - UInt8(ascii: "a")) + 36
            default:
                let scalar = string.unicodeScalars.dropFirst(position).first.map(String.init) ?? "?"
                throw KSUIDError.invalidCharacter(string, character: scalar, position: position)
            }
            var carry = UInt64(digit)
            for i in stride(from: 5, through: 0, by: -1) {
                let v = UInt64(words[i]) * 62 + carry
                words[i] = UInt32(truncatingIfNeeded: v)
                carry = v >> 32
            }
        }
        guard words[0] == 0 else { throw KSUIDError.valueTooLarge(string) }
        var out = [UInt8](); out.reserveCapacity(20)
        for w in words[1...] { out += [UInt8(w >> 24), UInt8(w >> 16 & 0xFF), UInt8(w >> 8 & 0xFF), UInt8(w & 0xFF)] }
        self.bytes = out
    }

    /// Seconds since the KSUID epoch.
    public var timestamp: UInt32 {
        UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
    }

    /// Seconds since the Unix epoch.
    public var unixTime: Int64 { Int64(timestamp) + Self.epoch }

    /// The moment the id was made (one-second resolution).
    public var date: Date { Date(timeIntervalSince1970: TimeInterval(unixTime)) }

    /// The 16 random bytes.
    public var payload: [UInt8] { Array(bytes[4...]) }

    /// The 27-character base62 text form.
    public var string: String {
        var words: [UInt32] = stride(from: 0, to: 20, by: 4).map {
            UInt32(bytes[$0]) << 24 | UInt32(bytes[$0 + 1]) << 16 | UInt32(bytes[$0 + 2]) << 8 | UInt32(bytes[$0 + 3])
        }
        var out = [UInt8](repeating: UInt8(ascii: "0"), count: Self.stringLength)
        var position = Self.stringLength - 1
        while words.contains(where: { $0 != 0 }) {
            var remainder: UInt64 = 0
            for i in words.indices {
                let v = remainder << 32 | UInt64(words[i])
                words[i] = UInt32(v / 62)
                remainder = v % 62
            }
            out[position] = Self.alphabet[Int(remainder)]
            position -= 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Orders by bytes, which is creation order (by second, then by payload).
    public static func < (a: KSUID, b: KSUID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    /// The next larger KSUID (the 160-bit value plus one), or nil past `max`.
    package func successor() -> KSUID? {
        var b = bytes
        for i in stride(from: 19, through: 0, by: -1) {
            if b[i] == 0xFF { b[i] = 0 } else { b[i] += 1; return KSUID(uncheckedBytes: b) }
        }
        return nil
    }

    /// A larger KSUID: this one plus a random step of 1 to 2^64 − 1, or nil past `max`. Two copies of one database
    /// (devices restored from one backup) that continue from the same last id then make different ids.
    package func randomSuccessor() -> KSUID? {
        var rng = SystemRandomNumberGenerator()
        var step = UInt64.random(in: 1...UInt64.max, using: &rng)
        var b = bytes
        var carry: UInt16 = 0
        for i in stride(from: 19, through: 0, by: -1) {
            let sum = UInt16(b[i]) + UInt16(step & 0xFF) + carry
            b[i] = UInt8(sum & 0xFF)
            carry = sum >> 8
            step >>= 8
            if step == 0 && carry == 0 { return KSUID(uncheckedBytes: b) }
        }
        return nil
    }
}

extension KSUID: CustomStringConvertible, LosslessStringConvertible {
    public var description: String { string }
    /// Parses the text form; nil when invalid (use `init(string:)` for the reason).
    public init?(_ description: String) { try? self.init(string: description) }
}

extension KSUID: Codable {
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        try self.init(string: try c.decode(String.self))
    }
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(string)
    }
}

// MARK: - Generation

extension KSUID {
    private static let generator = KSUIDGenerator()
    /// Ids for other times than now keep their own order, so one made for a time ahead (a test's skewed clock)
    /// does not push every later `generate()` of the process past it.
    private static let datedGenerator = KSUIDGenerator()

    /// Makes a new KSUID for now. Ids made in one process sort in the order they were made,
    /// even within the same second.
    public static func generate() -> KSUID { generator.next(at: Date()) }

    /// Makes a new KSUID for `date`. Ids made this way sort in the order they were made among themselves; they do
    /// not take part in the order of ``generate()``.
    public static func generate(at date: Date) -> KSUID { datedGenerator.next(at: date) }
}

/// Hands out monotonic KSUIDs: a new random id, or the previous one plus one when the random one would sort lower.
final class KSUIDGenerator: @unchecked Sendable {
    private let lock = NSLock()
    private var last: KSUID?

    func next(at date: Date) -> KSUID {
        let seconds = Swift.max(0, Swift.min(Int64(UInt32.max), Int64(date.timeIntervalSince1970.rounded(.down)) - KSUID.epoch))
        var rng = SystemRandomNumberGenerator()
        let payload = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let candidate = try! KSUID(timestamp: UInt32(seconds), payload: payload)
        lock.lock(); defer { lock.unlock() }
        if let last, candidate <= last, let bumped = last.successor() {
            self.last = bumped
            return bumped
        }
        last = candidate
        return candidate
    }
}

/// Why a KSUID could not be made or parsed.
public enum KSUIDError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidLength(String, found: Int)
    case invalidCharacter(String, character: String, position: Int)
    case valueTooLarge(String)
    case invalidByteCount(Int)
    case invalidPayloadLength(Int)

    public var description: String {
        switch self {
        case .invalidLength(let s, let n):
            return "invalid KSUID '\(s)': expected 27 characters, found \(n)"
        case .invalidCharacter(let s, let c, let p):
            return "invalid KSUID '\(s)': character '\(c)' at position \(p) is not in the base62 alphabet 0-9A-Za-z"
        case .valueTooLarge(let s):
            return "invalid KSUID '\(s)': value is above the maximum aWgEPTl1tmebfsQzFP4bxwgy80V"
        case .invalidByteCount(let n):
            return "invalid KSUID: expected 20 bytes, found \(n)"
        case .invalidPayloadLength(let n):
            return "invalid KSUID payload: expected 16 bytes, found \(n)"
        }
    }
}
