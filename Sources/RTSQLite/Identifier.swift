/// Quotes a name for use as an SQL identifier: `"name"` with inner quotes doubled.
///
/// Every table and column name that reaches SQL text goes through this, whatever its source.
public func quoteIdentifier(_ name: String) -> String {
    quoted(name, by: UInt8(ascii: "\""))
}

/// Quotes a string as an SQL text literal: `'text'` with inner quotes doubled.
public func quoteLiteral(_ text: String) -> String {
    quoted(text, by: UInt8(ascii: "'"))
}

/// Wraps `text` in `quote` bytes, doubling every quote byte inside. This works on UTF-8 bytes, as SQLite's
/// tokenizer does: a character-level replace would miss a quote followed by a combining mark (`"` + U+0301 is
/// one Swift Character), leaving it unescaped.
private func quoted(_ text: String, by quote: UInt8) -> String {
    var out: [UInt8] = [quote]
    out.reserveCapacity(text.utf8.count + 2)
    for b in text.utf8 {
        out.append(b)
        if b == quote { out.append(quote) }
    }
    out.append(quote)
    return String(decoding: out, as: UTF8.self)
}
