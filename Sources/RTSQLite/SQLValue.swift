/// One SQLite value, by storage class.
public enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    /// The value if it is an integer.
    public var int64: Int64? { if case .integer(let v) = self { return v } else { return nil } }
    /// The value if it is text.
    public var string: String? { if case .text(let v) = self { return v } else { return nil } }
    /// True for NULL.
    public var isNull: Bool { self == .null }
    /// Whether this is a REAL.
    public var isReal: Bool { if case .real = self { return true } else { return false } }

    /// The value as SQL literal text, like SQLite's `quote()` (used for display and row keys).
    public var sqlLiteral: String {
        switch self {
        case .null: return "NULL"
        case .integer(let v): return String(v)
        case .real(let v):
            if v.isNaN { return "NULL" }
            if v.isInfinite { return v < 0 ? "-9e999" : "9e999" }
            return "\(v)"
        case .text(let s): return quoteLiteral(s)
        case .blob(let b):
            let hex = "0123456789ABCDEF".utf8.map { $0 }
            var out = [UInt8]("X'".utf8)
            for byte in b { out.append(hex[Int(byte >> 4)]); out.append(hex[Int(byte & 15)]) }
            out.append(UInt8(ascii: "'"))
            return String(decoding: out, as: UTF8.self)
        }
    }
}

extension SQLValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case .text(let s): return s
        default: return sqlLiteral
        }
    }
}

extension SQLValue: Codable {
    // JSON form for reports and the conflict log: null, number, string, or {"blob": "<hex>"}.
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null; return }
        if let i = try? c.decode(Int64.self) { self = .integer(i); return }
        if let d = try? c.decode(Double.self) { self = .real(d); return }
        if let s = try? c.decode(String.self) { self = .text(s); return }
        let obj = try c.decode([String: String].self)
        guard let hex = obj["blob"], let bytes = [UInt8](hexString: hex) else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "expected null, number, string or {\"blob\": hex}")
        }
        self = .blob(bytes)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .integer(let v): try c.encode(v)
        case .real(let v): try c.encode(v)
        case .text(let s): try c.encode(s)
        case .blob(let b): try c.encode(["blob": b.hexString])
        }
    }
}

extension Array where Element == UInt8 {
    /// Lower-case hex text of the bytes.
    public var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](); out.reserveCapacity(count * 2)
        for b in self { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses hex text (either case); nil when it is not valid hex.
    public init?(hexString: String) {
        let chars = Array(hexString.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 65...70: return c - 55
            case 97...102: return c - 87
            default: return nil
            }
        }
        var out = [UInt8](); out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = nibble(chars[i]), let lo = nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo); i += 2
        }
        self = out
    }
}
