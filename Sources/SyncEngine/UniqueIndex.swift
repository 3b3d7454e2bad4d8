import Foundation
import RTSQLite

/// A UNIQUE constraint or unique index of a table, as the merge compares two rows by it: plain columns, expressions
/// (`CREATE UNIQUE INDEX … ON t(lower(name))`), collations and a partial index's WHERE clause included.
struct UniqueIndex {
    /// Each indexed term: SQL text of the column or expression, and the collation the index compares it with.
    var terms: [(sql: String, collation: String)]
    /// The WHERE clause of a partial index: only rows it holds for are in the index.
    var whereSQL: String?
    /// Column names or expression text, for messages.
    var label: [String]

    /// The unique indexes of `table` other than its primary key. An index whose definition cannot be read (an
    /// expression in SQL this reader does not follow) is left out, as before: its collisions reject the diff.
    static func read(_ db: Connection, table: String) throws -> [UniqueIndex] {
        var out: [UniqueIndex] = []
        let list = try db.rows("SELECT name, origin FROM pragma_index_list(?, 'main') WHERE \"unique\" = 1 AND origin <> 'pk' ORDER BY name", [.text(table)])
        for idx in list {
            guard let name = idx[0].string else { continue }
            let cols = try db.rows("SELECT cid, name, coll FROM pragma_index_xinfo(?, 'main') WHERE key = 1 ORDER BY seqno", [.text(name)])
            guard !cols.isEmpty else { continue }
            let sql = try db.scalar("SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?", [.text(name)])?.string
            let parsed = sql.flatMap(parseIndexSQL)
            var terms: [(String, String)] = []
            var label: [String] = []
            for (i, c) in cols.enumerated() {
                let collation = c[2].string ?? "BINARY"
                if let column = c[1].string, (c[0].int64 ?? -2) >= 0 {
                    terms.append((quoteIdentifier(column), collation))
                    label.append(column)
                } else if let parsed, i < parsed.terms.count {
                    terms.append((parsed.terms[i], collation))
                    label.append(parsed.terms[i])
                } else {
                    terms.removeAll()
                    break
                }
            }
            guard !terms.isEmpty else { continue }
            out.append(UniqueIndex(terms: terms, whereSQL: parsed?.whereSQL, label: label))
        }
        return out
    }

    /// The indexed terms (ASC / DESC dropped) and the WHERE clause of a `CREATE [UNIQUE] INDEX` statement as
    /// SQLite stores it, or nil when it does not have that shape. Quotes, brackets and comments are skipped over
    /// (`sqlPieces`); each term keeps its text as written.
    static func parseIndexSQL(_ sql: String) -> (terms: [String], whereSQL: String?)? {
        let bytes = Array(sql.utf8)
        func text(_ range: Range<Int>) -> String { String(decoding: bytes[range], as: UTF8.self) }
        var depth = 0
        var termStart: Int?
        var terms: [String] = []
        var end: Int?
        for piece in sqlPieces(bytes) where piece.kind == .punctuation {
            switch bytes[piece.range.lowerBound] {
            case UInt8(ascii: "("):
                depth += 1
                if depth == 1 && termStart == nil { termStart = piece.range.upperBound }
            case UInt8(ascii: ")"):
                depth -= 1
                if depth == 0, let from = termStart {
                    terms.append(text(from..<piece.range.lowerBound))
                    end = piece.range.lowerBound
                }
            case UInt8(ascii: ",") where depth == 1 && termStart != nil:
                terms.append(text(termStart!..<piece.range.lowerBound))
                termStart = piece.range.upperBound
            default: break
            }
            if end != nil { break }
        }
        guard let end else { return nil }
        let cleaned = terms.map { term -> String in
            var t = term.trimmingCharacters(in: .whitespacesAndNewlines)
            for suffix in ["ASC", "DESC"] where t.uppercased().hasSuffix(suffix) {
                let cut = t.index(t.endIndex, offsetBy: -suffix.count)
                if cut > t.startIndex, t[t.index(before: cut)].isWhitespace { t = String(t[..<cut]).trimmingCharacters(in: .whitespacesAndNewlines) }
            }
            return t
        }
        guard !cleaned.contains(where: \.isEmpty) else { return nil }
        let rest = text((end + 1)..<bytes.count).trimmingCharacters(in: .whitespacesAndNewlines)
        if rest.isEmpty { return (cleaned, nil) }
        guard rest.uppercased().hasPrefix("WHERE"), rest.count > 5 else { return nil }
        let after = rest.index(rest.startIndex, offsetBy: 5)
        guard rest[after].isWhitespace || rest[after] == "(" else { return nil }
        return (cleaned, String(rest[after...]).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Whether every term is a plain column compared as `=` compares it and the index is not partial.
    var isPlain: Bool { whereSQL == nil && terms.allSatisfy { $0.sql.hasPrefix("\"") && $0.collation.uppercased() == "BINARY" } }

    /// A condition, over a row of the table (unqualified column names), that holds when the row has the same entry
    /// in this index as `newRow`, a one-row subquery naming the table's columns. NULLs never match, as in the index.
    func sameEntry(as newRow: String) -> String {
        var conditions = terms.map { t in "(\(t.sql)) COLLATE \(quoteIdentifier(t.collation)) = (SELECT \(t.sql) FROM \(newRow))" }
        if let whereSQL {
            conditions.append("(\(whereSQL))")
            conditions.append("(SELECT (\(whereSQL)) FROM \(newRow))")
        }
        return "(" + conditions.joined(separator: " AND ") + ")"
    }

    /// SQL selecting the key of a row other than the new one that holds the same values in this index. Parameters:
    /// `?1…?n` the new row's values for `columns` (the table's columns in order), then the new row's key values.
    func collisionSQL(table: String, columns: [String], keys: [String]) -> String {
        // The new row's values as a one-row table with the table's column names: an expression evaluated over it
        // (unqualified names resolve to the innermost FROM) gives the new row's index entry.
        let newRow = "(SELECT " + columns.enumerated().map { "?\($0.offset + 1) AS " + quoteIdentifier($0.element) }.joined(separator: ", ") + ")"
        var conditions = [sameEntry(as: newRow)]
        let n = columns.count
        conditions.append("NOT (" + keys.enumerated().map { quoteIdentifier($0.element) + " IS ?\(n + $0.offset + 1)" }.joined(separator: " AND ") + ")")
        return "SELECT " + keys.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(table)
            + " WHERE " + conditions.joined(separator: " AND ") + " LIMIT 1"
    }
}

extension UniqueIndex {
    /// Whether a table's `CREATE TABLE` text gives a UNIQUE or PRIMARY KEY constraint a conflict clause of its own
    /// other than ABORT (`ON CONFLICT REPLACE / IGNORE / FAIL / ROLLBACK`), which SQLite would apply silently to the
    /// merge's writes. A clause whose constraint is not recognised counts too; one on NOT NULL does not. Quoted
    /// names, strings and comments are skipped.
    static func hasUniqueConflictClause(_ createSQL: String) -> Bool {
        let tokens = sqlTokens(createSQL)
        var i = 0
        while i + 2 < tokens.count {
            defer { i += 1 }
            guard tokens[i] == "on", tokens[i + 1] == "conflict", ["rollback", "fail", "ignore", "replace"].contains(tokens[i + 2]) else { continue }
            var j = i - 1
            while j >= 0, tokens[j] == "asc" || tokens[j] == "desc" { j -= 1 }
            if j >= 0, tokens[j] == ")" {
                // A table constraint's column list: back to its opening parenthesis.
                var depth = 0
                while j >= 0 {
                    if tokens[j] == ")" { depth += 1 } else if tokens[j] == "(" { depth -= 1; if depth == 0 { break } }
                    j -= 1
                }
                j -= 1
            }
            if j >= 1, tokens[j] == "null", tokens[j - 1] == "not" { continue }
            return true
        }
        return false
    }

    /// `hasUniqueConflictClause` of table `table` of the main database, as its `CREATE TABLE` text declares it.
    static func hasUniqueConflictClause(table: String, in db: Connection) throws -> Bool {
        hasUniqueConflictClause(try db.scalar("SELECT sql FROM main.sqlite_schema WHERE type = 'table' AND name = ?", [.text(table)])?.string ?? "")
    }

    /// SQL split into lower-cased words and single punctuation characters; quoted parts become one token `"`, and
    /// comments are dropped.
    static func sqlTokens(_ sql: String) -> [String] {
        let bytes = Array(sql.utf8)
        return sqlPieces(bytes).map { piece in
            switch piece.kind {
            case .word: return String(decoding: bytes[piece.range], as: UTF8.self).lowercased()
            case .quoted: return "\""
            case .punctuation: return String(UnicodeScalar(bytes[piece.range.lowerBound]))
            }
        }
    }

    /// One piece of SQL text, by its UTF-8 byte range: a word, a quoted part (a string, or a name in `"…"`, `` `…` ``
    /// or `[…]`; a doubled quote stays inside), or one other character. Whitespace and comments are not pieces.
    struct SQLPiece {
        enum Kind { case word, quoted, punctuation }
        var kind: Kind
        var range: Range<Int>
    }

    /// The pieces of SQL text given as UTF-8 bytes, in order (an unterminated quote or comment runs to the end).
    static func sqlPieces(_ bytes: [UInt8]) -> [SQLPiece] {
        var pieces: [SQLPiece] = []
        var i = 0
        func at(_ j: Int) -> UInt8 { j < bytes.count ? bytes[j] : 0 }
        func isWord(_ b: UInt8) -> Bool { b == UInt8(ascii: "_") || b >= 0x80 || (b >= 0x30 && b <= 0x39) || ((b | 0x20) >= 0x61 && (b | 0x20) <= 0x7A) }
        while i < bytes.count {
            let b = bytes[i], start = i
            switch b {
            case UInt8(ascii: "'"), UInt8(ascii: "\""), UInt8(ascii: "`"), UInt8(ascii: "["):
                let close = b == UInt8(ascii: "[") ? UInt8(ascii: "]") : b
                i += 1
                while i < bytes.count {
                    if bytes[i] == close { if close != UInt8(ascii: "]") && at(i + 1) == close { i += 2; continue }; break }
                    i += 1
                }
                i = min(i + 1, bytes.count)
                pieces.append(SQLPiece(kind: .quoted, range: start..<i))
            case UInt8(ascii: "-") where at(i + 1) == UInt8(ascii: "-"):
                while i < bytes.count && bytes[i] != 0x0A { i += 1 }
            case UInt8(ascii: "/") where at(i + 1) == UInt8(ascii: "*"):
                i += 2
                while i < bytes.count && !(bytes[i] == UInt8(ascii: "*") && at(i + 1) == UInt8(ascii: "/")) { i += 1 }
                i = min(i + 2, bytes.count)
            case _ where isWord(b):
                while i < bytes.count && isWord(bytes[i]) { i += 1 }
                pieces.append(SQLPiece(kind: .word, range: start..<i))
            case 0x20, 0x09, 0x0A, 0x0D:
                i += 1
            default:
                i += 1
                pieces.append(SQLPiece(kind: .punctuation, range: start..<i))
            }
        }
        return pieces
    }
}
