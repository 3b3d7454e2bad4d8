import DiffFormat
import Foundation
import RTSQLite
import Testing

/// True when both rows hold the same storage classes and values, comparing REALs bit for bit (so -0.0 ≠ 0.0).
func identical(_ a: [SQLValue], _ b: [SQLValue]) -> Bool {
    guard a.count == b.count else { return false }
    for (x, y) in zip(a, b) {
        switch (x, y) {
        case (.real(let p), .real(let q)): if p.bitPattern != q.bitPattern { return false }
        default: if x != y { return false }
        }
    }
    return true
}

@Suite("Diff round trip")
struct DiffRoundTripTests {
    static let hostileName = "we\"ird tab'le"
    static let plusName = "test_custom_decoder+validatedColumns"

    /// A table with one column per storage class plus an untyped column that mixes classes.
    static let allClasses = TableDefinition(name: hostileName, columns: [
        ColumnDefinition(name: "id", type: "INTEGER", primaryKey: 1),
        ColumnDefinition(name: "nothing", type: ""),
        ColumnDefinition(name: "int col", type: "INTEGER"),
        ColumnDefinition(name: "re\"al", type: "REAL"),
        ColumnDefinition(name: "te'xt", type: "TEXT"),
        ColumnDefinition(name: "blob", type: "BLOB"),
        ColumnDefinition(name: "any", type: ""),
    ])

    static let longText = String(repeating: "0123456789abcdef-ÅÄÖ-", count: 5_000)
    static let allBytes = [UInt8]((0...255).map { UInt8($0) })

    static let allClassRows: [[SQLValue]] = [
        [.integer(1), .null, .null, .null, .null, .null, .null],
        [.integer(2), .null, .integer(Int64.min), .real(0.1), .text("héllo wörld ✓ 日本語 🎉👩‍👩‍👧"), .blob([]), .integer(1)],
        [.integer(3), .null, .integer(Int64.max), .real(-0.0), .text(""), .blob(allBytes), .real(1.0)],
        [.integer(4), .null, .integer(0), .real(1e308), .text("it's \"quoted\" 'twice'' ; DROP TABLE x; --"), .blob([0]), .text("1")],
        [.integer(5), .null, .integer(-1), .real(1.0), .text(longText), .blob(allBytes.reversed() + allBytes), .blob([0x31])],
        [.integer(Int64.min), .null, .integer(Int64.max - 1), .real(-Double.greatestFiniteMagnitude), .text("\u{FEFF}bom"), .blob([0xFF]), .real(Double.leastNonzeroMagnitude)],
    ]

    static let hlcBase = HLC(milliseconds: 1_750_000_000_000, counter: 0).rawValue

    static func clock(_ n: Int64, _ site: String = authorSite) -> Clock { Clock(hlc: HLC(rawValue: hlcBase + n), site: site) }

    /// Writes `changes` (declaring `tables` first) and reads them back.
    func roundTrip(_ tables: [TableDefinition], _ changes: [RowChange], in dir: TemporaryDirectory) throws -> (URL, DiffReader, [RowChange]) {
        let writer = try DiffWriter(directory: dir.url, kind: .changes, authorUser: "user-1", authorSite: authorSite,
                                    sequence: 7...9, createdAt: fixedCreatedAt)
        for t in tables { try writer.addTable(t) }
        for c in changes { try writer.append(c) }
        let url = try writer.finish()
        let reader = try DiffReader(url: url)
        return (url, reader, try reader.changes())
    }

    // MARK: - Values

    @Test func roundTrip_everyStorageClass_valuesComeBackIdentical() throws {
        let dir = try TemporaryDirectory()
        let changes = Self.allClassRows.enumerated().map { i, values in
            RowChange(table: Self.hostileName, operation: .upsert, values: values, clock: Self.clock(Int64(i)), born: Self.clock(0))
        }
        let (_, reader, read) = try roundTrip([Self.allClasses], changes, in: dir)
        try #require(read.count == changes.count)
        for (written, back) in zip(changes, read) {
            #expect(back.table == Self.hostileName)
            #expect(identical(back.values, written.values), "row \(written.values[0]): wrote \(written.values.map(\.sqlLiteral).joined(separator: ", ").prefix(300)), read \(back.values.map(\.sqlLiteral).joined(separator: ", ").prefix(300))")
        }
        #expect(reader.tables == [Self.allClasses])
        #expect(reader.counts[Self.hostileName] == OperationCounts(upserts: changes.count, deletes: 0))
    }

    @Test func roundTrip_realOneAndNegativeZero_stayRealWithSign() throws {
        let dir = try TemporaryDirectory()
        let change = RowChange(table: "items", operation: .upsert, values: [.integer(1), .real(-0.0), .real(1.0)],
                               clock: Self.clock(1), born: Self.clock(1))
        let (_, _, read) = try roundTrip([itemsTable], [change], in: dir)
        let values = try #require(read.first?.values)
        guard case .real(let negativeZero) = values[1], case .real(let one) = values[2] else {
            Issue.record("REAL values changed storage class: \(values)")
            return
        }
        #expect(negativeZero.sign == .minus && negativeZero == 0)
        #expect(one == 1.0)
    }

    @Test func roundTrip_emptyBlob_staysEmptyBlobNotNull() throws {
        let dir = try TemporaryDirectory()
        let change = RowChange(table: "items", operation: .upsert, values: [.integer(1), .blob([]), .text("")],
                               clock: Self.clock(1), born: Self.clock(1))
        let (_, _, read) = try roundTrip([itemsTable], [change], in: dir)
        #expect(read.first?.values == [.integer(1), .blob([]), .text("")])
    }

    @Test func roundTrip_textWithEmbeddedNUL_valueComesBackWhole() throws {
        // SQLite TEXT may hold NUL bytes; a diff must not silently cut them (the digest would no longer match either).
        let dir = try TemporaryDirectory()
        let change = RowChange(table: "items", operation: .upsert, values: [.integer(1), .text("before\u{0}after"), .null],
                               clock: Self.clock(1), born: Self.clock(1))
        let (_, _, read) = try roundTrip([itemsTable], [change], in: dir)
        #expect(read.first?.values == [.integer(1), .text("before\u{0}after"), .null])
    }

    // MARK: - Clocks and operations

    @Test func roundTrip_clocksBornAndSites_comeBackEqual() throws {
        let dir = try TemporaryDirectory()
        let changes = [
            // Clock site equal to the author site (stored as NULL, read back as the author site).
            RowChange(table: "items", operation: .upsert, values: [.integer(1), .text("a"), .integer(1)],
                      clock: Self.clock(5), born: Self.clock(2)),
            // Clock and born sites differing from the author site.
            RowChange(table: "items", operation: .upsert, values: [.integer(2), .text("b"), .integer(2)],
                      clock: Self.clock(6, "site-B"), born: Self.clock(3, "site-C")),
            // The zero clock (empty site), as rows that existed before tracking carry.
            RowChange(table: "items", operation: .upsert, values: [.integer(3), .text("c"), .integer(3)],
                      clock: Clock(hlc: HLC(rawValue: Int64.max), site: "site-Z"), born: .zero),
        ]
        let (_, _, read) = try roundTrip([itemsTable], changes, in: dir)
        #expect(read.map(\.clock) == changes.map(\.clock))
        #expect(read.map(\.born) == changes.map(\.born))
        #expect(read.map(\.clock.hlc.rawValue) == [Self.hlcBase + 5, Self.hlcBase + 6, Int64.max])
        #expect(read.map(\.clock.site) == [authorSite, "site-B", "site-Z"])
        #expect(read.map(\.born.site) == [authorSite, "site-C", ""])
    }

    @Test func roundTrip_changedColumnsAndColumnClockOverrides_comeBackEqual() throws {
        let dir = try TemporaryDirectory()
        let rowClock = Self.clock(10)
        let changes = [
            RowChange(table: "items", operation: .upsert, values: [.integer(1), .text("a"), .integer(1)],
                      changedColumns: ["name", "qty"], clock: rowClock, born: Self.clock(1),
                      columnClocks: ["name": Self.clock(4, "site-B"), "qty": Self.clock(8)]),
            RowChange(table: "items", operation: .upsert, values: [.integer(2), .text("b"), .integer(2)],
                      changedColumns: [], clock: rowClock, born: Self.clock(1)),
            RowChange(table: "items", operation: .upsert, values: [.integer(3), .text("c"), .integer(3)],
                      changedColumns: nil, clock: rowClock, born: Self.clock(1),
                      // Equal to the row clock: not an override, so not stored.
                      columnClocks: ["qty": rowClock]),
        ]
        let (_, reader, read) = try roundTrip([itemsTable], changes, in: dir)
        #expect(reader.hasCellClocks)
        #expect(read.map(\.changedColumns) == [["name", "qty"], [], nil])
        #expect(read[0].columnClocks == ["name": Self.clock(4, "site-B"), "qty": Self.clock(8)])
        #expect(read[0].clock(forColumn: "name") == Self.clock(4, "site-B"))
        #expect(read[0].clock(forColumn: "id") == rowClock)
        #expect(read[1].columnClocks.isEmpty)
        #expect(read[2].columnClocks.isEmpty)
    }

    @Test func roundTrip_withoutOverrides_reportsNoCellClocks() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 1)
        let reader = try DiffReader(url: url)
        #expect(!reader.hasCellClocks)
        #expect(try reader.changes().allSatisfy { $0.columnClocks.isEmpty })
    }

    @Test func roundTrip_deleteRow_keepsKeyAndReadsOtherColumnsAsNull() throws {
        let dir = try TemporaryDirectory()
        let change = RowChange(table: "items", operation: .delete, values: [.integer(42), .text("gone"), .integer(9)],
                               changedColumns: ["name"], clock: Self.clock(3, "site-B"), born: Self.clock(1))
        let (_, reader, read) = try roundTrip([itemsTable], [change], in: dir)
        let back = try #require(read.first)
        #expect(back.operation == .delete)
        #expect(back.values == [.integer(42), .null, .null])
        #expect(back.changedColumns == nil)
        #expect(back.clock == Self.clock(3, "site-B"))
        #expect(reader.counts["items"] == OperationCounts(upserts: 0, deletes: 1))
    }

    @Test func roundTrip_compositeKeyInNonColumnOrder_keepsKeyOnDeleteAndDefinition() throws {
        let dir = try TemporaryDirectory()
        let table = TableDefinition(name: Self.plusName, columns: [
            ColumnDefinition(name: "lang", type: "TEXT", notNull: true, primaryKey: 2),
            ColumnDefinition(name: "value", type: "TEXT", defaultValue: "'x'"),
            ColumnDefinition(name: "key", type: "TEXT", notNull: true, primaryKey: 1),
        ], uniqueConstraints: [["value"]])
        #expect(table.primaryKeyColumns == ["key", "lang"])
        let changes = [
            RowChange(table: Self.plusName, operation: .upsert, values: [.text("en"), .text("Hello"), .text("greeting")],
                      clock: Self.clock(1), born: Self.clock(1)),
            RowChange(table: Self.plusName, operation: .delete, values: [.text("da"), .text("Hej"), .text("greeting")],
                      clock: Self.clock(2), born: Self.clock(1)),
        ]
        let (_, reader, read) = try roundTrip([table], changes, in: dir)
        #expect(reader.tables == [table])
        #expect(read.map(\.values) == [[.text("en"), .text("Hello"), .text("greeting")], [.text("da"), .null, .text("greeting")]])
        #expect(read.map(\.operation) == [.upsert, .delete])
    }

    @Test func roundTrip_severalTables_keepsFileOrderAcrossTables() throws {
        let dir = try TemporaryDirectory()
        let other = TableDefinition(name: "table with spaces", columns: [ColumnDefinition(name: "k", type: "TEXT", primaryKey: 1)])
        let changes = [
            RowChange(table: "items", operation: .upsert, values: [.integer(1), .text("a"), .null], clock: Self.clock(1), born: Self.clock(1)),
            RowChange(table: "table with spaces", operation: .upsert, values: [.text("x")], clock: Self.clock(2), born: Self.clock(2)),
            RowChange(table: "items", operation: .delete, values: [.integer(2), .null, .null], clock: Self.clock(3), born: Self.clock(1)),
        ]
        let (_, reader, read) = try roundTrip([itemsTable, other], changes, in: dir)
        #expect(read.map(\.table) == ["items", "table with spaces", "items"])
        #expect(read.map(\.values) == changes.map { $0.operation == .delete ? [$0.values[0], .null, .null] : $0.values })
        #expect(reader.tables.map(\.name) == ["items", "table with spaces"])
        #expect(reader.counts["items"] == OperationCounts(upserts: 1, deletes: 1))
        #expect(reader.counts["table with spaces"] == OperationCounts(upserts: 1, deletes: 0))
    }

    // MARK: - Metadata

    @Test func roundTrip_metadata_comesBackAsWritten() throws {
        let dir = try TemporaryDirectory()
        let id = try KSUID(string: "0ujtsYcgvSTl8PAuAdqWYSMnLOv")
        let writer = try DiffWriter(directory: dir.url, id: id, kind: .share, authorUser: "user ü", authorSite: "site-Q",
                                    sequence: 3...17, createdAt: fixedCreatedAt)
        try writer.addTable(itemsTable)
        let url = try writer.finish()
        #expect(url.lastPathComponent == "0ujtsYcgvSTl8PAuAdqWYSMnLOv.sqlite")
        let m = try DiffReader(url: url).metadata
        #expect(m.formatVersion == 1)
        #expect(m.id == id)
        #expect(m.kind == .share)
        #expect(m.authorUser == "user ü")
        #expect(m.authorSite == "site-Q")
        #expect(m.sequenceFirst == 3 && m.sequenceLast == 17)
        #expect(ISO8601.format(m.createdAt, fractional: true) == "2025-06-15T15:06:40.123Z")
        #expect(m.digest == writer.metadata.digest && m.digest.count == 64)
        #expect(m.signature == nil && m.signerKey == nil)
        #expect(!FileManager.default.fileExists(atPath: dir.file(".0ujtsYcgvSTl8PAuAdqWYSMnLOv.sqlite.tmp").path))
    }

    // MARK: - From another database

    @Test func appendRows_fromRealDatabaseWithFilter_carriesMatchingRowsExactly() throws {
        let dir = try TemporaryDirectory()
        let source = try Connection(path: dir.file("source.sqlite").path)
        try source.execute("""
            CREATE TABLE "test_custom_decoder+validatedColumns" (id INTEGER PRIMARY KEY, "na""me" TEXT, qty REAL, data BLOB);
            INSERT INTO "test_custom_decoder+validatedColumns" VALUES (1, 'one', 1.0, x'00ff'), (2, 'två', 2.5, x''), (3, NULL, 3, NULL), (4, 'four', -4.0, x'01');
            """)
        let table = try #require(try TableDefinition.read(table: Self.plusName, from: source))
        let expected = try source.rows("SELECT id, \"na\"\"me\", qty, data FROM \"test_custom_decoder+validatedColumns\" WHERE qty > ? ORDER BY rowid", [.real(1.5)])
        let clock = Self.clock(9, "site-S")
        let writer = try DiffWriter(directory: dir.url, kind: .snapshot, authorUser: "", authorSite: "site-S", createdAt: fixedCreatedAt)
        let n = try writer.appendRows(from: source, table: table, filter: "qty > ?", arguments: [.real(1.5)], clock: clock)
        let url = try writer.finish()
        #expect(n == 2 && expected.count == 2)
        let read = try DiffReader(url: url).changes()
        #expect(read.count == expected.count)
        for (back, row) in zip(read, expected) { #expect(identical(back.values, row)) }
        #expect(read.allSatisfy { $0.operation == .upsert && $0.clock == clock && $0.born == .zero && $0.table == Self.plusName })
        // The empty BLOB of row 2 arrives as an empty BLOB, as the source holds it.
        #expect(read.first { $0.values[0] == .integer(2) }?.values[3] == .blob([]))
    }

    // MARK: - Interoperability

    @Test(.enabled(if: sqliteShellAvailable, "needs /usr/bin/sqlite3"))
    func writtenDiff_opensInSQLiteShell_withRowCount() throws {
        let dir = try TemporaryDirectory()
        let url = try writeItemsDiff(in: dir.url, rowCount: 3)
        let result = try runSQLiteShell([url.path, "select count(*) from rtsync_rows; select count(*) from items; pragma integrity_check;"])
        #expect(result.status == 0)
        #expect(result.output == "3\n3\nok\n")
        // The shell left no journal behind and did not make the file invalid.
        #expect(openingError(url) == nil)
    }
}
