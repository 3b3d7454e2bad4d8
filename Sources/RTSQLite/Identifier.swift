/// Quotes a name for use as an SQL identifier: `"name"` with inner quotes doubled.
///
/// Every table and column name that reaches SQL text goes through this, whatever its source.
public func quoteIdentifier(_ name: String) -> String {
    "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// Quotes a string as an SQL text literal: `'text'` with inner quotes doubled.
public func quoteLiteral(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
}
