import DiffFormat
import Foundation
import RTSQLite
import Testing

@Suite("TableDefinition")
struct TableDefinitionTests {
    func scratchDatabase(_ dir: TemporaryDirectory) throws -> Connection {
        try Connection(path: dir.file("scratch.sqlite").path)
    }

    static let hostileNames = [
        "test_custom_decoder+validatedColumns",
        "we\"ird tab'le",
        "with spaces and ; semicolons -- and comments",
        "\"); DROP TABLE victim; --",
        "日本語 table 🎉",
        "[bracketed]",
        "`backticked`",
    ]

    // MARK: - createTableSQL

    @Test(arguments: hostileNames)
    func createTableSQL_hostileTableAndColumnNames_createsExactlyThatTable(_ name: String) throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        try db.execute("CREATE TABLE victim(x); INSERT INTO victim VALUES (1)")
        let def = TableDefinition(name: name, columns: [
            ColumnDefinition(name: "id", type: "INTEGER", notNull: true, primaryKey: 1),
            ColumnDefinition(name: name, type: "TEXT"),
            ColumnDefinition(name: "a\"b'c", type: "VARCHAR(255)"),
        ], uniqueConstraints: [[name]])
        try db.execute(try def.createTableSQL())
        let back = try #require(try TableDefinition.read(table: name, from: db))
        #expect(back == def)
        let tables = try db.rows("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").compactMap { $0[0].string }
        #expect(tables == [name, "victim"].sorted())
        #expect(try db.scalar("SELECT count(*) FROM victim") == .integer(1))
    }

    @Test func createTableSQL_compositeKeyUniqueAndForeignKey_readBackEqual() throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        try db.execute("CREATE TABLE parent(id INTEGER PRIMARY KEY, code TEXT UNIQUE)")
        let def = TableDefinition(name: "child", columns: [
            ColumnDefinition(name: "a", type: "TEXT", notNull: true, primaryKey: 2),
            ColumnDefinition(name: "b", type: "INTEGER", notNull: true, primaryKey: 1),
            ColumnDefinition(name: "parent_id", type: "INTEGER"),
            ColumnDefinition(name: "code", type: "TEXT"),
        ], uniqueConstraints: [["code"]],
           foreignKeys: [ForeignKeyDefinition(columns: ["parent_id"], table: "parent", referencedColumns: ["id"], onDelete: "SET NULL", onUpdate: "CASCADE")],
           withoutRowID: true)
        try db.execute(try def.createTableSQL())
        #expect(try TableDefinition.read(table: "child", from: db) == def)
    }

    @Test(arguments: ["INT); DROP TABLE x; --", "TEXT'", "INT\"", "INT -- c", "INT;", "INT(1))", "VARCHAR((1))", String(repeating: "A", count: 65)])
    func createTableSQL_injectedDeclaredType_throwsInvalidTableDefinition(_ type: String) {
        let def = TableDefinition(name: "t", columns: [ColumnDefinition(name: "id", type: type, primaryKey: 1)])
        #expect(performing: { try def.createTableSQL() }, throws: { error in
            guard case DiffFormatError.invalidTableDefinition(_, "t", _) = error else { return false }
            return true
        })
    }

    @Test(arguments: ["INT CHECK (0)", "TEXT REFERENCES other", "INTEGER GENERATED ALWAYS AS (1)", "TEXT COLLATE NOCASE", "INT DEFAULT 5"])
    func createTableSQL_declaredTypeWithConstraintKeywords_throwsInvalidTableDefinition(_ type: String) {
        // A declared type is names with an optional size; anything else adds constraints the author's table never had.
        let def = TableDefinition(name: "t", columns: [
            ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
            ColumnDefinition(name: "v", type: type),
        ])
        #expect(performing: { try def.createTableSQL() }, throws: { error in
            guard case DiffFormatError.invalidTableDefinition(_, "t", _) = error else { return false }
            return true
        })
    }

    @Test(arguments: ["VARCHAR(255)", "DECIMAL(10, 2)", "UNSIGNED BIG INT", "NUMERIC(-1,+2)", "", "double precision"])
    func createTableSQL_plainDeclaredType_keepsTypeAsWritten(_ type: String) throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        let def = TableDefinition(name: "t", columns: [
            ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
            ColumnDefinition(name: "v", type: type),
        ])
        try db.execute(try def.createTableSQL())
        #expect(try TableDefinition.read(table: "t", from: db)?.columns[1].type == type)
    }

    @Test func createTableSQL_defaults_keepsLiteralsDropsExpressions() throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        let def = TableDefinition(name: "d", columns: [
            ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
            ColumnDefinition(name: "expr", type: "TEXT", defaultValue: "(datetime('now'))"),
            ColumnDefinition(name: "text", type: "TEXT", defaultValue: "'abc'"),
            ColumnDefinition(name: "zero", type: "INTEGER", defaultValue: "0"),
            ColumnDefinition(name: "now", type: "TEXT", defaultValue: "CURRENT_TIMESTAMP"),
            ColumnDefinition(name: "quoted", type: "TEXT", defaultValue: "'it''s'"),
            ColumnDefinition(name: "concat", type: "TEXT", defaultValue: "'a' || 'b'"),
            ColumnDefinition(name: "neg", type: "REAL", defaultValue: "-1.5"),
            ColumnDefinition(name: "hex", type: "BLOB", defaultValue: "X'00FF'"),
            ColumnDefinition(name: "random", type: "INTEGER", defaultValue: "(random())"),
        ])
        let sql = try def.createTableSQL()
        #expect(!sql.contains("datetime"))
        #expect(!sql.contains("random()"))
        #expect(!sql.contains("||"))
        try db.execute(sql)
        let back = try #require(try TableDefinition.read(table: "d", from: db))
        let defaults = Dictionary(uniqueKeysWithValues: back.columns.map { ($0.name, $0.defaultValue) })
        #expect(defaults["expr"] == .some(nil))
        #expect(defaults["text"] == "'abc'")
        #expect(defaults["zero"] == "0")
        #expect(defaults["now"] == "CURRENT_TIMESTAMP")
        #expect(defaults["quoted"] == "'it''s'")
        #expect(defaults["concat"] == .some(nil))
        #expect(defaults["neg"] == "-1.5")
        #expect(defaults["hex"] == "X'00FF'")
        #expect(defaults["random"] == .some(nil))
        try db.execute("INSERT INTO d(id) VALUES (1)")
        let row = try db.rows("SELECT text, zero, quoted, neg, hex FROM d")
        #expect(row == [[.text("abc"), .integer(0), .text("it's"), .real(-1.5), .blob([0, 0xFF])]])
    }

    @Test func createTableSQL_reservedName_throwsInvalidTableDefinition() {
        for name in ["sqlite_x", "rtsync_meta", "RTSYNC_evil"] {
            let def = TableDefinition(name: name, columns: [ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1)])
            #expect(performing: { try def.createTableSQL() }, throws: { error in
                guard case DiffFormatError.invalidTableDefinition(_, let table, let reason) = error else { return false }
                return table == name && reason == "reserved table name"
            })
        }
    }

    @Test(arguments: [
        TableDefinition(name: "t", columns: []),
        TableDefinition(name: "t", columns: [ColumnDefinition(name: "a")]),
        TableDefinition(name: "t", columns: [ColumnDefinition(name: "a", primaryKey: 1), ColumnDefinition(name: "A")]),
        TableDefinition(name: "t", columns: [ColumnDefinition(name: "a", primaryKey: 2)]),
        TableDefinition(name: "", columns: [ColumnDefinition(name: "a", primaryKey: 1)]),
        TableDefinition(name: "t\u{0}x", columns: [ColumnDefinition(name: "a", primaryKey: 1)]),
        TableDefinition(name: "t", columns: [ColumnDefinition(name: "a", primaryKey: 1)], uniqueConstraints: [["missing"]]),
        TableDefinition(name: "t", columns: [ColumnDefinition(name: "a", primaryKey: 1)],
                        foreignKeys: [ForeignKeyDefinition(columns: ["a"], table: "p", referencedColumns: [], onDelete: "DROP TABLE p")]),
    ])
    func validationProblem_unsoundDefinition_isReported(_ def: TableDefinition) {
        #expect(def.validationProblem() != nil)
        #expect(throws: DiffFormatError.self) { try def.createTableSQL() }
    }

    // MARK: - read

    @Test func read_compositeKeyUniqueAndForeignKeySetNull_returnsThem() throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        try db.execute("""
            CREATE TABLE owners(id TEXT PRIMARY KEY);
            CREATE TABLE things(
              account_id TEXT NOT NULL,
              id TEXT NOT NULL,
              owner TEXT REFERENCES owners(id) ON DELETE SET NULL,
              sku TEXT UNIQUE,
              title TEXT DEFAULT 'untitled',
              PRIMARY KEY (account_id, id)
            );
            """)
        let def = try #require(try TableDefinition.read(table: "things", from: db))
        #expect(def.name == "things")
        #expect(def.columnNames == ["account_id", "id", "owner", "sku", "title"])
        #expect(def.primaryKeyColumns == ["account_id", "id"])
        #expect(def.columns.map(\.primaryKey) == [1, 2, 0, 0, 0])
        #expect(def.columns.map(\.notNull) == [true, true, false, false, false])
        #expect(def.columns[4].defaultValue == "'untitled'")
        #expect(def.uniqueConstraints == [["sku"]])
        #expect(def.foreignKeys == [ForeignKeyDefinition(columns: ["owner"], table: "owners", referencedColumns: ["id"], onDelete: "SET NULL", onUpdate: "NO ACTION")])
        #expect(!def.withoutRowID)
        #expect(def.validationProblem() == nil)
    }

    @Test func read_missingTable_returnsNil() throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        #expect(try TableDefinition.read(table: "nope", from: db) == nil)
    }

    @Test func read_generatedColumn_isNotCarried() throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        try db.execute("CREATE TABLE g(id INTEGER PRIMARY KEY, a INTEGER, doubled INTEGER GENERATED ALWAYS AS (a * 2))")
        #expect(try TableDefinition.read(table: "g", from: db)?.columnNames == ["id", "a"])
    }

    // MARK: - schemaHash

    @Test func schemaHash_dependsOnNamesTypesAndKeys_notCaseOrDefaults() {
        let base = itemsTable
        var upper = base
        upper.name = "ITEMS"
        upper.columns[0].name = "ID"
        upper.columns[1].type = "text"
        #expect(upper.schemaHash == base.schemaHash)
        var withDefault = base
        withDefault.columns[2].defaultValue = "0"
        #expect(withDefault.schemaHash == base.schemaHash)
        var retyped = base
        retyped.columns[2].type = "REAL"
        #expect(retyped.schemaHash != base.schemaHash)
        var rekeyed = base
        rekeyed.columns[1].primaryKey = 2
        #expect(rekeyed.schemaHash != base.schemaHash)
        #expect(base.schemaHash.count == 64)
    }

    @Test func schemaHash_isTheLowercaseHexOfItsCanonicalText_asDiffsInTheFieldCarryIt() {
        // Diffs written by every earlier version carry this value; a reader compares it. Computed apart from
        // rtsync: SHA-256 of "rtsync-schema-v1\nitems\nid\tINTEGER\t1\nname\tTEXT\t0\nqty\tINTEGER\t0\n"
        // (Python's hashlib).
        #expect(itemsTable.schemaHash == "93d3cf6550f07a3134f66006c064be4194449b8ab7e0cf6fa1090f22497ee0a8")
    }

    @Test func read_findsWithoutRowID_asSQLiteDoes() throws {
        let dir = try TemporaryDirectory()
        let db = try scratchDatabase(dir)
        // Spellings SQLite accepts (any case, spaces, a comment-free tail), and tables that only mention the words.
        let tables = [
            ("a", "CREATE TABLE a(id INTEGER PRIMARY KEY) WITHOUT ROWID", true),
            ("b", "CREATE TABLE b(id TEXT PRIMARY KEY) without rowid", true),
            ("c", "CREATE TABLE c(id TEXT PRIMARY KEY)   WiThOuT    RoWiD  ", true),
            ("d", "CREATE TABLE d(id TEXT PRIMARY KEY, \"without rowid\" TEXT)", false),
            ("e", "CREATE TABLE e(id TEXT PRIMARY KEY, note TEXT DEFAULT 'WITHOUT ROWID')", false),
            ("日本 WITHOUT ROWID", "CREATE TABLE \"日本 WITHOUT ROWID\"(id TEXT PRIMARY KEY, v TEXT DEFAULT 'é') WITHOUT ROWID", true),
        ]
        for (name, sql, expected) in tables {
            try db.execute(sql)
            let def = try #require(try TableDefinition.read(table: name, from: db))
            #expect(def.withoutRowID == expected, "\(sql)")
        }
    }
}
