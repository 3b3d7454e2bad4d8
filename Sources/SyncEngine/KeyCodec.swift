import Foundation
import RTSQLite

/// Row keys in the bookkeeping tables are SQLite `quote()` texts joined by commas, e.g. `'abc',3`, except that
/// TEXT holding a NUL byte is `J` and its `json_quote()` (`SyncDatabase.keyValueText`): computed by the triggers
/// in plain SQL, decoded here to look rows up by their key columns.
enum KeyCodec {
    /// The key text of one value, as `SyncDatabase.keyValueText` makes it in SQL (`number`: its `numbers`); nil where
    /// that is SQLite's own formatting (a REAL, text holding a NUL byte): ask SQLite.
    static func exactText(_ value: SQLValue, number: Bool = false) -> String? {
        switch value {
        case .real(let d) where number:
            // SQLite's `x = CAST(x AS INTEGER)`: an integral value in the INTEGER range (-0.0 included).
            if d == d.rounded(.towardZero), let i = Int64(exactly: d) { return String(i) }
            return nil
        case .real: return nil
        case .text(let t) where t.utf8.contains(0): return nil
        default: return value.sqlLiteral
        }
    }

    /// Decodes a key text into its values; nil when malformed.
    static func decode(_ text: String) -> [SQLValue]? {
        let c = Array(text.utf8)
        var i = 0
        var out: [SQLValue] = []
        while i < c.count {
            if c[i] == UInt8(ascii: "'") {
                var bytes: [UInt8] = []
                i += 1
                while true {
                    guard i < c.count else { return nil }
                    if c[i] == UInt8(ascii: "'") {
                        if i + 1 < c.count && c[i + 1] == UInt8(ascii: "'") { bytes.append(c[i]); i += 2; continue }
                        i += 1; break
                    }
                    bytes.append(c[i]); i += 1
                }
                out.append(.text(String(decoding: bytes, as: UTF8.self)))
            } else if (c[i] == UInt8(ascii: "X") || c[i] == UInt8(ascii: "x")) && i + 1 < c.count && c[i + 1] == UInt8(ascii: "'") {
                guard let end = c[(i + 2)...].firstIndex(of: UInt8(ascii: "'")),
                      let bytes = [UInt8](hexString: String(decoding: c[(i + 2)..<end], as: UTF8.self)) else { return nil }
                out.append(.blob(bytes))
                i = end + 1
            } else if c[i] == UInt8(ascii: "J") && i + 1 < c.count && c[i + 1] == UInt8(ascii: "\"") {
                // A JSON string: up to the first quote not escaped by a backslash.
                var end = i + 2
                while end < c.count && c[end] != UInt8(ascii: "\"") { end += c[end] == UInt8(ascii: "\\") ? 2 : 1 }
                guard end < c.count, let text = try? JSONDecoder().decode(String.self, from: Data(c[(i + 1)...end])) else { return nil }
                out.append(.text(text))
                i = end + 1
            } else {
                let end = c[i...].firstIndex(of: UInt8(ascii: ",")) ?? c.count
                let token = String(decoding: c[i..<end], as: UTF8.self)
                if token == "NULL" { out.append(.null) }
                else if let v = Int64(token) { out.append(.integer(v)) }
                else if let v = Double(token) { out.append(.real(v)) }
                else { return nil }
                i = end
            }
            if i < c.count {
                guard c[i] == UInt8(ascii: ",") else { return nil }
                i += 1
            }
        }
        return out
    }
}

/// A row of a tracked table, by table id and key text, compared by the key text's bytes as SQLite compares it.
/// (Swift's `String` equality treats canonically equivalent texts as equal, such as the NFC and NFD spellings of
/// "café", which are two different keys in SQLite.)
struct RowKey: Hashable {
    let tid: Int64
    let pk: [UInt8]

    init(_ tid: Int64, _ pk: String) {
        self.tid = tid
        self.pk = Array(pk.utf8)
    }
}
