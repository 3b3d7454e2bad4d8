import Foundation
import RTSQLite

/// SQLite's type affinity of a declared column type, used to bring incoming key values to the storage class
/// the local column gives them (https://www.sqlite.org/datatype3.html#determination_of_column_affinity).
enum KeyAffinity: Sendable, Equatable {
    case integer, text, blob, real, numeric

    /// The affinity SQLite gives a column declared with `type` (the rules of section 3.1, in their order); in a
    /// `strict` table, `ANY` keeps every value as given (as BLOB affinity does), elsewhere it is NUMERIC.
    init(declaredType type: String, strict: Bool = false) {
        if strict, Self.isAny(type) { self = .blob; return }
        // Declared types are ASCII nearly always: matched on bytes, as SQLite itself does (a merge asks for every
        // column of every diff, and Foundation's case-folding and trimming was a tenth of applying a one-row diff).
        if let affinity = Self.asciiAffinity(type) { self = affinity; return }
        let t = type.uppercased()
        if t.contains("INT") { self = .integer }
        else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") { self = .text }
        else if t.contains("BLOB") || t.trimmingCharacters(in: .whitespaces).isEmpty { self = .blob }
        else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") { self = .real }
        else { self = .numeric }
    }

    /// Whether a column is declared `ANY` (in any letter case, blanks around it).
    static func isAny(_ type: String) -> Bool {
        let t = type.trimmingCharacters(in: .whitespaces)
        return t.utf8.count == 3 && t.uppercased() == "ANY"
    }

    /// The rules of `init(declaredType:)` for a type of ASCII characters only; nil for any other.
    private static func asciiAffinity(_ type: String) -> KeyAffinity? {
        var upper: [UInt8] = []
        upper.reserveCapacity(type.utf8.count)
        var blank = true
        for byte in type.utf8 {
            guard byte < 0x80 else { return nil }
            upper.append(byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte)
            if byte != 0x20 && byte != 0x09 { blank = false }
        }
        func has(_ word: StaticString) -> Bool {
            let n = word.utf8CodeUnitCount
            guard upper.count >= n else { return false }
            return word.withUTF8Buffer { w in
                (0...(upper.count - n)).contains { start in (0..<n).allSatisfy { upper[start + $0] == w[$0] } }
            }
        }
        if has("INT") { return .integer }
        if has("CHAR") || has("CLOB") || has("TEXT") { return .text }
        if has("BLOB") || blank { return .blob }
        if has("REAL") || has("FLOA") || has("DOUB") { return .real }
        return .numeric
    }

    /// What `typeof()` says of a key value that needs no conversion for this affinity (nil: any is kept as it is).
    var naturalTypeof: String? {
        switch self {
        case .integer, .numeric: return "integer"
        case .text: return "text"
        case .real: return "real"
        case .blob: return nil
        }
    }

    /// Whether `value` already has the storage class this affinity keeps.
    func isNatural(_ value: SQLValue) -> Bool {
        switch (self, value) {
        case (.blob, _), (.integer, .integer), (.numeric, .integer), (.text, .text), (.real, .real): return true
        default: return false
        }
    }

    /// `value` as SQLite would store it in a column of this affinity, or nil when that conversion would not give
    /// the same value back (text `' 4'` or `'4.0'` for an INTEGER key, a number too large for a REAL): such a key
    /// would match a different row here than on the device that sent it. `realText` renders a REAL as SQLite does.
    func normalize(_ value: SQLValue, realText: (Double) throws -> String) rethrows -> SQLValue? {
        if isNatural(value) { return value }
        switch (self, value) {
        case (_, .null), (_, .blob):
            return value
        case (.text, .integer(let i)):
            return .text(String(i))
        case (.text, .real(let d)):
            let text = try realText(d)
            return Double(text) == d ? .text(text) : nil
        case (.integer, .real(let d)), (.numeric, .real(let d)):
            if d == d.rounded(), let i = Int64(exactly: d) { return .integer(i) }
            return value
        case (.integer, .text(let t)), (.numeric, .text(let t)):
            if let i = Int64(t), String(i) == t { return .integer(i) }
            return Self.looksNumeric(t) ? nil : value
        case (.real, .integer(let i)):
            guard let d = Double(exactly: i) else { return nil }
            return .real(d)
        case (.real, .text(let t)):
            return Self.looksNumeric(t) ? nil : value
        default:
            return value
        }
    }

    /// Whether SQLite could read `text` as a number when applying a numeric affinity (spaces around it allowed).
    static func looksNumeric(_ text: String) -> Bool {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed.unicodeScalars.allSatisfy({ "0123456789+-.eE".unicodeScalars.contains($0) }) else { return false }
        return Double(trimmed) != nil
    }
}
