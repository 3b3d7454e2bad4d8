import Crypto
import Foundation
import RTSQLite

/// One column of a carried table, as SQLite's `PRAGMA table_xinfo` describes it.
public struct ColumnDefinition: Sendable, Hashable, Codable {
    /// Column name.
    public var name: String
    /// Declared type, as written (may be empty).
    public var type: String
    /// Whether the column is declared NOT NULL.
    public var notNull: Bool
    /// Default value as SQL text (only literals survive when a table is created from a diff).
    public var defaultValue: String?
    /// 1-based position in the primary key, 0 when not part of it.
    public var primaryKey: Int

    /// Makes a column definition.
    public init(name: String, type: String = "", notNull: Bool = false, defaultValue: String? = nil, primaryKey: Int = 0) {
        self.name = name
        self.type = type
        self.notNull = notNull
        self.defaultValue = defaultValue
        self.primaryKey = primaryKey
    }
}

/// A foreign key of a carried table.
public struct ForeignKeyDefinition: Sendable, Hashable, Codable {
    /// Columns of this table.
    public var columns: [String]
    /// The referenced table.
    public var table: String
    /// Referenced columns (empty = the referenced table's primary key).
    public var referencedColumns: [String]
    /// ON DELETE action (NO ACTION, RESTRICT, SET NULL, SET DEFAULT, CASCADE).
    public var onDelete: String
    /// ON UPDATE action.
    public var onUpdate: String

    /// Makes a foreign key definition.
    public init(columns: [String], table: String, referencedColumns: [String], onDelete: String = "NO ACTION", onUpdate: String = "NO ACTION") {
        self.columns = columns
        self.table = table
        self.referencedColumns = referencedColumns
        self.onDelete = onDelete
        self.onUpdate = onUpdate
    }
}

/// The structure of a table carried by a diff: enough to create it or add its missing columns,
/// never raw SQL to execute.
public struct TableDefinition: Sendable, Hashable, Codable {
    /// Table name.
    public var name: String
    /// Columns in table order (generated and hidden columns excluded).
    public var columns: [ColumnDefinition]
    /// UNIQUE constraints other than the primary key, each a list of columns.
    public var uniqueConstraints: [[String]]
    /// Foreign keys.
    public var foreignKeys: [ForeignKeyDefinition]
    /// Whether the table is declared WITHOUT ROWID.
    public var withoutRowID: Bool

    /// Makes a table definition.
    public init(name: String, columns: [ColumnDefinition], uniqueConstraints: [[String]] = [], foreignKeys: [ForeignKeyDefinition] = [], withoutRowID: Bool = false) {
        self.name = name
        self.columns = columns
        self.uniqueConstraints = uniqueConstraints
        self.foreignKeys = foreignKeys
        self.withoutRowID = withoutRowID
    }

    /// Column names in order.
    public var columnNames: [String] { columns.map(\.name) }

    /// Primary key columns in key order.
    public var primaryKeyColumns: [String] {
        columns.filter { $0.primaryKey > 0 }.sorted { $0.primaryKey < $1.primaryKey }.map(\.name)
    }

    /// Indexes of the primary key columns in `columns`, in key order.
    public var primaryKeyIndexes: [Int] {
        columns.indices.filter { columns[$0].primaryKey > 0 }.sorted { columns[$0].primaryKey < columns[$1].primaryKey }
    }

    /// Index of a column by name (case-insensitive, as SQLite compares names).
    public func columnIndex(_ name: String) -> Int? {
        let lower = name.lowercased()
        return columns.firstIndex { $0.name.lowercased() == lower }
    }

    /// SHA-256 (hex) of what decides compatibility: the table name, column names, declared types
    /// and primary key positions. Two replicas with equal hashes store rows the same way.
    public var schemaHash: String {
        var text = "rtsync-schema-v1\n" + name.lowercased() + "\n"
        for c in columns {
            text += c.name.lowercased() + "\t" + c.type.uppercased() + "\t" + String(c.primaryKey) + "\n"
        }
        // RTSQLite's hex (Foundation's `String(format:)` per byte cost more than the hash itself).
        return Array(SHA256.hash(data: Data(text.utf8))).hexString
    }
}

// MARK: - Validation and DDL

extension TableDefinition {
    /// Names a diff may never carry: SQLite's own tables and rtsync's bookkeeping.
    public static func isReservedName(_ name: String) -> Bool {
        let lower = name.lowercased()
        return lower.hasPrefix("sqlite_") || lower.hasPrefix("rtsync_")
    }

    /// Why `name` is not acceptable as a table or column name, or nil when it is.
    public static func problem(withName name: String) -> String? {
        if name.isEmpty { return "empty name" }
        if name.utf8.count > 255 { return "longer than 255 bytes" }
        if name.utf8.contains(0) { return "contains a NUL byte" }
        return nil
    }

    static let allowedActions: Set<String> = ["NO ACTION", "RESTRICT", "SET NULL", "SET DEFAULT", "CASCADE"]

    /// Why this definition cannot be used, or nil when it is sound.
    public func validationProblem() -> String? {
        if let p = Self.problem(withName: name) { return p }
        if Self.isReservedName(name) { return "reserved table name" }
        if columns.isEmpty { return "no columns" }
        var seen = Set<String>()
        for c in columns {
            if let p = Self.problem(withName: c.name) { return "column '\(c.name)': \(p)" }
            if !seen.insert(c.name.lowercased()).inserted { return "duplicate column '\(c.name)'" }
            if !Self.isSafeType(c.type) { return "column '\(c.name)' has an unsupported declared type '\(c.type)'" }
            if c.primaryKey < 0 || c.primaryKey > columns.count { return "column '\(c.name)' has an invalid primary key position" }
        }
        let pk = columns.map(\.primaryKey).filter { $0 > 0 }.sorted()
        if pk.isEmpty { return "no primary key" }
        if pk != Array(1...pk.count) { return "primary key positions are not 1...\(pk.count)" }
        for u in uniqueConstraints where u.isEmpty || u.contains(where: { columnIndex($0) == nil }) {
            return "a UNIQUE constraint names an unknown column"
        }
        for fk in foreignKeys {
            if fk.columns.isEmpty || fk.columns.contains(where: { columnIndex($0) == nil }) { return "a foreign key names an unknown column" }
            if let p = Self.problem(withName: fk.table) { return "foreign key table: \(p)" }
            if !fk.referencedColumns.isEmpty && fk.referencedColumns.count != fk.columns.count { return "a foreign key has mismatched column counts" }
            if fk.referencedColumns.contains(where: { Self.problem(withName: $0) != nil }) { return "a foreign key names an invalid column" }
            if !Self.allowedActions.contains(fk.onDelete.uppercased()) || !Self.allowedActions.contains(fk.onUpdate.uppercased()) {
                return "a foreign key has an unknown action"
            }
        }
        return nil
    }

    /// Words that end a type name and start a constraint: a declared type containing one is refused,
    /// because written into `CREATE TABLE` it would become a real CHECK, DEFAULT, REFERENCES... clause.
    static let constraintKeywords: Set<String> = ["CONSTRAINT", "PRIMARY", "NOT", "NULL", "UNIQUE", "CHECK", "DEFAULT",
                                                  "COLLATE", "REFERENCES", "GENERATED", "AS", "KEY", "ON", "FOREIGN"]

    /// True when a declared type is plain words with an optional size, e.g. `VARCHAR(255)`,
    /// `DECIMAL(10, 2)`, `UNSIGNED BIG INT`: name+ [ '(' signed [',' signed] ')' ].
    static func isSafeType(_ type: String) -> Bool {
        if type.isEmpty { return true }
        guard type.utf8.count <= 64 else { return false }
        var namePart = Substring(type)
        var sizePart: Substring?
        if let open = type.firstIndex(of: "(") {
            guard type.hasSuffix(")") else { return false }
            namePart = type[..<open]
            sizePart = type[type.index(after: open)..<type.index(before: type.endIndex)]
        }
        let words = namePart.split(separator: " ", omittingEmptySubsequences: true)
        guard !words.isEmpty else { return false }
        for word in words {
            guard let first = word.unicodeScalars.first, first.isASCII, CharacterSet.letters.contains(first) || first == "_",
                  word.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_") }),
                  !constraintKeywords.contains(word.uppercased()) else { return false }
        }
        if let sizePart {
            let numbers = sizePart.split(separator: ",", omittingEmptySubsequences: false)
            guard (1...2).contains(numbers.count) else { return false }
            for n in numbers {
                var digits = n.trimmingCharacters(in: .whitespaces)
                if digits.hasPrefix("+") || digits.hasPrefix("-") { digits.removeFirst() }
                guard !digits.isEmpty, digits.utf8.allSatisfy({ (48...57).contains($0) }) else { return false }
            }
        }
        return true
    }

    /// A default value is kept only when it is a plain literal; anything else (an expression) is dropped.
    package static func safeDefault(_ value: String?) -> String? {
        guard var v = value?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
        while v.hasPrefix("(") && v.hasSuffix(")") && v.count >= 2 { v = String(v.dropFirst().dropLast()).trimmingCharacters(in: .whitespaces) }
        let upper = v.uppercased()
        if ["NULL", "TRUE", "FALSE", "CURRENT_TIME", "CURRENT_DATE", "CURRENT_TIMESTAMP"].contains(upper) { return upper }
        if Double(v) != nil, v.utf8.allSatisfy({ "0123456789+-.eE".utf8.contains($0) }) { return v }
        if v.hasPrefix("'") && v.hasSuffix("'") && v.count >= 2 {
            // Every quote byte inside must be doubled, so the literal cannot end early (bytes, not Characters:
            // a quote followed by a combining mark is one Character but still a quote to SQLite).
            let inner = Array(v.utf8.dropFirst().dropLast())
            var i = 0
            while i < inner.count {
                if inner[i] == UInt8(ascii: "'") {
                    guard i + 1 < inner.count, inner[i + 1] == UInt8(ascii: "'") else { return nil }
                    i += 2
                } else { i += 1 }
            }
            return v
        }
        if upper.hasPrefix("X'") && v.count >= 3 && v.hasSuffix("'"), [UInt8](hexString: String(v.dropFirst(2).dropLast())) != nil { return v }
        return nil
    }

    /// `CREATE TABLE` text built from the structure, every name quoted; never text taken from a file.
    /// - Throws: `DiffFormatError.invalidTableDefinition` when the definition is unsound.
    public func createTableSQL(file: String = "") throws -> String {
        if let p = validationProblem() { throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: p) }
        var parts = columns.map { c -> String in
            var s = quoteIdentifier(c.name)
            if !c.type.isEmpty { s += " " + c.type }
            if c.notNull { s += " NOT NULL" }
            if let d = Self.safeDefault(c.defaultValue) { s += " DEFAULT " + d }
            return s
        }
        parts.append("PRIMARY KEY (" + primaryKeyColumns.map(quoteIdentifier).joined(separator: ", ") + ")")
        for u in uniqueConstraints { parts.append("UNIQUE (" + u.map(quoteIdentifier).joined(separator: ", ") + ")") }
        for fk in foreignKeys {
            var s = "FOREIGN KEY (" + fk.columns.map(quoteIdentifier).joined(separator: ", ") + ") REFERENCES " + quoteIdentifier(fk.table)
            if !fk.referencedColumns.isEmpty { s += " (" + fk.referencedColumns.map(quoteIdentifier).joined(separator: ", ") + ")" }
            s += " ON DELETE " + fk.onDelete.uppercased() + " ON UPDATE " + fk.onUpdate.uppercased()
            parts.append(s)
        }
        return "CREATE TABLE " + quoteIdentifier(name) + " (" + parts.joined(separator: ", ") + ")" + (withoutRowID ? " WITHOUT ROWID" : "")
    }

    /// `ALTER TABLE ... ADD COLUMN` text for one column of this definition.
    public func addColumnSQL(_ column: ColumnDefinition) -> String {
        var s = "ALTER TABLE " + quoteIdentifier(name) + " ADD COLUMN " + quoteIdentifier(column.name)
        if !column.type.isEmpty && Self.isSafeType(column.type) { s += " " + column.type }
        // SQLite only allows NOT NULL on an added column with a non-NULL default.
        if let d = Self.safeDefault(column.defaultValue), d != "NULL", !d.hasPrefix("CURRENT_") {
            if column.notNull { s += " NOT NULL" }
            s += " DEFAULT " + d
        }
        return s
    }
}

// MARK: - Reading a live schema

extension TableDefinition {
    /// Whether `sql`, uppercased and without its spaces, ends with `WITHOUTROWID`. Compared byte by byte when it
    /// is ASCII (Foundation's uppercasing and replacing were most of reading a table's definition).
    static func endsWithWithoutRowID(_ sql: String) -> Bool {
        guard sql.utf8.allSatisfy({ $0 < 0x80 }) else {
            return sql.uppercased().replacingOccurrences(of: " ", with: "").hasSuffix("WITHOUTROWID")
        }
        var expected = Array("WITHOUTROWID".utf8).reversed().makeIterator()
        var want = expected.next()
        for byte in sql.utf8.reversed() where byte != 0x20 {
            guard let w = want else { return true }
            let upper = byte >= 0x61 && byte <= 0x7A ? byte - 0x20 : byte
            guard upper == w else { return false }
            want = expected.next()
        }
        return want == nil
    }

    /// Reads the definition of `table` from a database through SQLite's schema pragmas (from schema `main`,
    /// also when other databases are attached).
    /// - Returns: nil when the table does not exist.
    package static func read(table: String, from db: Connection) throws -> TableDefinition? {
        // Read before every export and apply, while the schema seldom changes: remembered until it does.
        try db.memoizedBySchema("TableDefinition.read\u{0}" + table) { try readFromSchema(table: table, from: db) }
    }

    /// `read(table:from:)` without the memo: the pragmas themselves.
    static func readFromSchema(table: String, from db: Connection) throws -> TableDefinition? {
        let info = try db.rows("SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?, 'main')", [.text(table)])
        if info.isEmpty { return nil }
        let columns = info.compactMap { r -> ColumnDefinition? in
            // Hidden (virtual table) and generated columns cannot be written, so they are not carried.
            if let h = r[5].int64, h != 0 { return nil }
            return ColumnDefinition(name: r[0].string ?? "", type: r[1].string ?? "", notNull: r[2].int64 == 1,
                                    defaultValue: r[3].string, primaryKey: Int(r[4].int64 ?? 0))
        }
        var uniques: [[String]] = []
        for idx in try db.rows("SELECT name, \"unique\", origin FROM pragma_index_list(?, 'main')", [.text(table)]) {
            guard idx[1].int64 == 1, idx[2].string == "u", let iname = idx[0].string else { continue }
            let cols = try db.rows("SELECT name FROM pragma_index_info(?, 'main') ORDER BY seqno", [.text(iname)]).compactMap { $0[0].string }
            if !cols.isEmpty { uniques.append(cols) }
        }
        var fks: [Int64: ForeignKeyDefinition] = [:]
        var order: [Int64] = []
        for r in try db.rows("SELECT id, seq, \"table\", \"from\", \"to\", on_update, on_delete FROM pragma_foreign_key_list(?, 'main') ORDER BY id, seq", [.text(table)]) {
            let id = r[0].int64 ?? 0
            if fks[id] == nil {
                order.append(id)
                fks[id] = ForeignKeyDefinition(columns: [], table: r[2].string ?? "", referencedColumns: [],
                                               onDelete: r[6].string ?? "NO ACTION", onUpdate: r[5].string ?? "NO ACTION")
            }
            fks[id]!.columns.append(r[3].string ?? "")
            if let to = r[4].string { fks[id]!.referencedColumns.append(to) }
        }
        let foreignKeys: [ForeignKeyDefinition] = order.compactMap { id in
            guard var fk = fks[id] else { return nil }
            if fk.referencedColumns.count != fk.columns.count { fk.referencedColumns = [] }
            return fk
        }
        let sql = try db.scalar("SELECT sql FROM main.sqlite_schema WHERE type = 'table' AND name = ?", [.text(table)])?.string ?? ""
        let withoutRowID = endsWithWithoutRowID(sql)

        return TableDefinition(name: table, columns: columns, uniqueConstraints: uniques, foreignKeys: foreignKeys, withoutRowID: withoutRowID)
    }
}
