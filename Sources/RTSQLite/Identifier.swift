/// Quotes a name for use as an SQL identifier: `"name"` with inner quotes doubled.
///
/// Every table and column name that reaches SQL text goes through this, whatever its source.
public func quoteIdentifier(_ name: String) -> String {
    // Most names have no quote in them; skip Foundation's (slow on Linux) replacement for those.
    guard name.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + name + "\"" }
    return "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// Quotes a string as an SQL text literal: `'text'` with inner quotes doubled.
public func quoteLiteral(_ text: String) -> String {
    guard text.utf8.contains(UInt8(ascii: "'")) else { return "'" + text + "'" }
    return "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
}
