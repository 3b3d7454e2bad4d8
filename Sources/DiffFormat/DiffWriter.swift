import Crypto
import Foundation
import RTSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Builds one diff file: add table definitions, append row changes, then `finish()` writes
/// `<KSUID>.sqlite` durably (fsync, then rename into place).
///
/// A writer is a builder with one owner, like a prepared statement: not `Sendable`. Create, fill and finish it
/// in one task; Swift's region-based isolation still lets a task hand a writer it no longer uses to another
/// (`sending`). What it produces, the finished file's URL and ``DiffMetadata``, is `Sendable`.
public final class DiffWriter {
    /// The diff's metadata (digest and signature are filled in by `finish`).
    public private(set) var metadata: DiffMetadata
    /// Rows appended so far.
    public private(set) var rowCount = 0
    /// Where the finished file will be.
    public let destination: URL

    private var db: Connection?
    private let temporary: URL
    private var tables: [String: (id: Int64, definition: TableDefinition, insert: Statement)] = [:]
    private var tablesHash = CanonicalHasher()
    private var rowsHash = CanonicalHasher()
    private var cellsHash = CanonicalHasher()
    private let insertRow: Statement
    private let insertCell: Statement
    private var finished = false

    /// Starts a diff in `directory`.
    /// - Parameters:
    ///   - directory: the folder the finished `<id>.sqlite` goes to.
    ///   - id: the diff's id (also its file name).
    ///   - kind: changes, share, request or snapshot.
    ///   - authorUser: the user the diff speaks for.
    ///   - authorSite: the site (device database) that wrote it.
    ///   - sequence: the site's sequence numbers the diff covers, for gap detection.
    ///   - createdAt: the creation time recorded in the metadata.
    ///   - seen: the newest clock the author had seen per site.
    ///   - expectedRows: a hint: small diffs use 512-byte pages so a one-row diff stays a few KB.
    ///   - covers: for a `rollup` (and only for one), the ids of the diffs it stands in for.
    /// - Throws: `DiffFormatError.writeFailed` when the folder is not writable or `covers` does not match `kind`.
    public init(directory: URL, id: KSUID = .generate(), kind: DiffKind, authorUser: String, authorSite: String,
                sequence: ClosedRange<Int64>? = nil, createdAt: Date = Date(), seen: [String: Int64] = [:], expectedRows: Int = 0,
                covers: [CoveredDiff]? = nil) throws {
        let covered = covers.map { list in Dictionary(list.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a }).values.sorted { $0.id < $1.id } }
        metadata = DiffMetadata(formatVersion: DiffFile.formatVersion, id: id, kind: kind, authorUser: authorUser,
                                authorSite: authorSite, sequenceFirst: sequence?.lowerBound, sequenceLast: sequence?.upperBound,
                                createdAt: createdAt, seen: seen, digest: "", signature: nil, signerKey: nil, covers: covered)
        // `isDirectory: false`: without it Foundation looks the path up on disk to decide.
        destination = directory.appendingPathComponent(DiffFile.fileName(for: id), isDirectory: false)
        temporary = directory.appendingPathComponent("." + DiffFile.fileName(for: id) + ".tmp", isDirectory: false)
        guard (kind == .rollup) == (covers != nil), (covered?.count ?? 0) <= DiffFile.maxCovered,
              covered?.allSatisfy({ (try? KSUID(string: $0.id)) != nil }) ?? true else {
            throw DiffFormatError.writeFailed(file: destination.path, reason: "a rollup, and only a rollup, names the diffs it covers (KSUIDs, at most \(DiffFile.maxCovered))")
        }
        do {
            // A temporary file left by a crash (plain `unlink`: FileManager stats and walks before removing).
            _ = unlink(temporary.path)
            let pageSize = expectedRows <= 64 ? 512 : 4096
            // Starts from a copy of an empty diff (the structure tables only) when one could be made: running the
            // structure DDL was a fifth of a one-row export.
            let template = DiffWriter.emptyDiffs[pageSize]
            if let template { try DiffWriter.create(temporary, holding: template) }
            let db = try Connection(path: temporary.path)
            // The temp file is renamed into place only after an explicit fsync, so SQLite's journal adds nothing.
            try db.execute("PRAGMA page_size = \(pageSize); PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; PRAGMA auto_vacuum = NONE")
            try db.execute("BEGIN")
            if template == nil { try db.execute(DiffFile.structureDDL) }
            if let covered {
                try db.execute(DiffFile.coversDDL)
                let add = try db.prepare("INSERT INTO rtsync_covers(diff_id, seq) VALUES (?, ?)")
                for c in covered { try add.run([.text(c.id), c.sequence.map { .integer($0) } ?? .null]) }
            }
            insertRow = try db.prepare("INSERT INTO rtsync_rows(tid, rid, op, born, born_site, hlc, site, changed) VALUES (?,?,?,?,?,?,?,?)")
            insertCell = try db.prepare("INSERT INTO rtsync_cells(tid, rid, col, hlc, site) VALUES (?,?,?,?,?)")
            self.db = db
        } catch {
            throw DiffFormatError.writeFailed(file: destination.path, reason: "\(error)")
        }
    }

    deinit { if !finished { cancel() } }

    /// Creates `file` (which must not exist) holding `bytes`, without syncing it: the finished diff is synced once
    /// before it is renamed into place (Foundation's `Data.write` syncs every file it writes, a third of the disk
    /// waits of a one-row export).
    private static func create(_ file: URL, holding bytes: Data) throws {
        let fd = open(file.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        guard bytes.withUnsafeBytes({ DiffTransport.writeAll(fd, $0) }) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    }

    /// The bytes of an empty diff file (the structure tables, nothing else) of each page size writers use, made once
    /// per process by the same statements a writer runs; nil when they could not be made (a writer then runs them).
    private static let emptyDiffs: [Int: Data] = {
        var made: [Int: Data] = [:]
        for pageSize in [512, 4096] {
            let path = FileManager.default.temporaryDirectory
                .appendingPathComponent("rtsync-empty-diff-\(getpid())-\(UUID().uuidString).sqlite", isDirectory: false).path
            defer { _ = unlink(path) }
            do {
                let db = try Connection(path: path)
                try db.execute("PRAGMA page_size = \(pageSize); PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA auto_vacuum = NONE")
                try db.transaction { try db.execute(DiffFile.structureDDL) }
            } catch { continue }
            // The connection is closed: its scope ended.
            guard let bytes = FileManager.default.contents(atPath: path), bytes.count >= 2 * pageSize, bytes.count % pageSize == 0 else { continue }
            made[pageSize] = bytes
        }
        return made
    }()

    /// Declares a carried table; must precede its rows.
    /// - Throws: `DiffFormatError.invalidTableDefinition` for reserved names or unsound definitions.
    public func addTable(_ definition: TableDefinition) throws {
        guard let db else { throw DiffFormatError.writeFailed(file: destination.path, reason: "writer already finished") }
        if tables[definition.name] != nil { return }
        let id = Int64(tables.count + 1)
        let row = try DiffFile.declare(definition, id: id, in: db, schema: nil, file: destination.path)
        do {
            let insert = try db.prepare("INSERT INTO " + quoteIdentifier(definition.name) + " VALUES (" + Array(repeating: "?", count: definition.columns.count).joined(separator: ",") + ")")
            tables[definition.name] = (id, definition, insert)
        } catch {
            throw DiffFormatError.writeFailed(file: destination.path, reason: "\(error)")
        }
        tablesHash.add(row)
    }

    /// Appends one row change of a declared table.
    public func append(_ change: RowChange) throws {
        guard db != nil else { throw DiffFormatError.writeFailed(file: destination.path, reason: "writer already finished") }
        guard let table = tables[change.table] else {
            throw DiffFormatError.writeFailed(file: destination.path, reason: "table '\(change.table)' was not added before its rows")
        }
        let def = table.definition
        guard change.values.count == def.columns.count else {
            throw DiffFormatError.writeFailed(file: destination.path, reason: "row of '\(def.name)' has \(change.values.count) values, table has \(def.columns.count) columns")
        }
        // SQLite stores a NaN REAL as NULL; hash what will be stored, so the digest matches on reading.
        var values = change.values.map { v -> SQLValue in if case .real(let d) = v, d.isNaN { return .null } else { return v } }
        if change.operation == .delete {
            let keys = Set(def.primaryKeyIndexes)
            for i in values.indices where !keys.contains(i) { values[i] = .null }
        }
        var changed: SQLValue = .null
        if let cols = change.changedColumns, change.operation == .upsert {
            for c in cols where def.columnIndex(c) == nil {
                throw DiffFormatError.writeFailed(file: destination.path, reason: "changed column '\(c)' is not a column of '\(def.name)'")
            }
            changed = .text(JSON.encode(cols))
        }
        let site = metadata.authorSite
        func siteValue(_ s: String) -> SQLValue { s == site ? .null : .text(s) }
        do {
            try table.insert.run(values)
            let rid = db!.lastInsertRowID
            let rowValues: [SQLValue] = [.integer(table.id), .integer(rid), .text(change.operation.rawValue),
                                         .integer(change.born.hlc.rawValue), siteValue(change.born.site),
                                         .integer(change.clock.hlc.rawValue), siteValue(change.clock.site), changed]
            try insertRow.run(rowValues)
            rowsHash.add(rowValues)
            rowsHash.add(values)
            for (col, clock) in change.columnClocks.sorted(by: { $0.key < $1.key }) where clock != change.clock {
                guard def.columnIndex(col) != nil else { continue }
                let cell: [SQLValue] = [.integer(table.id), .integer(rid), .text(col), .integer(clock.hlc.rawValue), siteValue(clock.site)]
                try insertCell.run(cell)
                cellsHash.add(cell)
            }
        } catch {
            throw DiffFormatError.writeFailed(file: destination.path, reason: "\(error)")
        }
        rowCount += 1
    }

    /// Appends every row of `table` in `source` matching `filter` (an SQL expression over the table's
    /// columns, from the local user, never from a file) as upserts stamped with `clock`.
    /// - Returns: the number of rows appended.
    @discardableResult
    package func appendRows(from source: Connection, table: TableDefinition, filter: String? = nil,
                           arguments: [SQLValue] = [], clock: Clock, born: Clock = .zero) throws -> Int {
        try addTable(table)
        var sql = "SELECT " + table.columnNames.map(quoteIdentifier).joined(separator: ", ") + " FROM " + quoteIdentifier(table.name)
        if let filter, !filter.isEmpty { sql += " WHERE " + filter }
        let statement = try source.prepare(sql)
        try statement.bind(arguments)
        var n = 0
        while try statement.step() {
            try append(RowChange(table: table.name, operation: .upsert, values: statement.row(), clock: clock, born: born))
            n += 1
        }
        return n
    }

    /// Writes the metadata and digest, signs when a key is given, syncs the file to disk and renames it
    /// to `<KSUID>.sqlite`.
    /// - Returns: the finished file.
    public func finish(signingKey: Curve25519.Signing.PrivateKey? = nil) throws -> URL {
        guard let db else { throw DiffFormatError.writeFailed(file: destination.path, reason: "writer already finished") }
        let digest = CanonicalHasher.digest(meta: metadata.digestInput, tables: tablesHash, rows: rowsHash, cells: cellsHash)
        metadata.digest = digest
        if let key = signingKey {
            metadata.signature = Array(try key.signature(for: [UInt8](hexString: digest)!))
            metadata.signerKey = Array(key.publicKey.rawRepresentation)
        }
        do {
            var values: [SQLValue] = [.integer(metadata.formatVersion)]
            values += metadata.digestedValues
            values += [.text(digest), metadata.signature.map { .blob($0) } ?? .null, metadata.signerKey.map { .blob($0) } ?? .null]
            try db.execute("INSERT INTO rtsync_meta(format_version, diff_id, kind, author_user, author_site, seq_first, seq_last, created_at, seen, digest, signature, signer_key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", values)
            try db.execute("COMMIT")
            // Switch back to the default journal so the file opens like any database in the sqlite3 shell.
            try db.execute("PRAGMA locking_mode = NORMAL; PRAGMA journal_mode = DELETE")
        } catch {
            cancel()
            throw DiffFormatError.writeFailed(file: destination.path, reason: "\(error)")
        }
        tables.removeAll()
        self.db = nil
        finished = true
        do {
            try Durable.sync(file: temporary)
            try Durable.rename(temporary, to: destination)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw DiffFormatError.writeFailed(file: destination.path, reason: "\(error)")
        }
        return destination
    }

    /// Abandons the diff and removes its temporary file.
    public func cancel() {
        tables.removeAll()
        db = nil
        finished = true
        try? FileManager.default.removeItem(at: temporary)
    }
}

extension DiffFile {
    /// Each declared definition's `rtsync_tables` texts: columns, constraints and schema hash.
    private static let declaredTexts = Memo<TableDefinition, [String]>(capacity: 64)

    /// Checks `definition` and declares it in the diff file open on `db` (attached as `schema`, or the main database):
    /// its `rtsync_tables` row and its carried table. Returns that row's values, which the content digest hashes.
    /// - Throws: `DiffFormatError.invalidTableDefinition` naming `file`, or `writeFailed`.
    static func declare(_ definition: TableDefinition, id: Int64, in db: Connection, schema: String?, file: String) throws -> [SQLValue] {
        if let p = definition.validationProblem() {
            throw DiffFormatError.invalidTableDefinition(file: file, table: definition.name, reason: p)
        }
        guard rowidAlias(for: definition.columnNames) != nil else {
            throw DiffFormatError.invalidTableDefinition(file: file, table: definition.name, reason: "columns named rowid, _rowid_ and oid leave no way to address rows")
        }
        // The texts declared for a definition, remembered: an app exporting often declares the same tables each time.
        let texts = declaredTexts.value(for: definition) { d in
            let constraints = TableConstraints(unique: d.uniqueConstraints, foreignKeys: d.foreignKeys, withoutRowID: d.withoutRowID)
            return [JSON.encode(d.columns), JSON.encode(constraints), d.schemaHash]
        }!
        let row: [SQLValue] = [.integer(id), .text(definition.name), .text(texts[0]), .text(texts[1]), .text(texts[2])]
        let prefix = schema.map { $0 + "." } ?? ""
        do {
            try db.execute("INSERT INTO \(prefix)rtsync_tables(id, name, columns, constraints, schema_hash) VALUES (?,?,?,?,?)", row)
            // Carried values keep their storage class exactly: the columns have no declared type (BLOB affinity).
            try db.execute(DiffFile.carriedTableSQL(name: definition.name, columns: definition.columnNames, schemaPrefix: prefix))
        } catch {
            throw DiffFormatError.writeFailed(file: file, reason: "\(error)")
        }
        return row
    }
}

@available(*, unavailable, message: "a DiffWriter has one owner; finish it in the task that fills it")
extension DiffWriter: Sendable {}

/// fsync and atomic rename, so a crash leaves either the old state or the complete new file.
public enum Durable {
    /// Flushes a file's data to stable storage.
    public static func sync(file: URL) throws {
        let fd = open(file.path, O_RDONLY)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    }

    /// Renames `source` over `destination` atomically, then (unless `syncingFolder` is false, for a caller
    /// that syncs later with `sync(folderOf:)`) syncs the folder so the rename survives a crash.
    public static func rename(_ source: URL, to destination: URL, syncingFolder: Bool = true) throws {
        #if canImport(Glibc)
        let rc = Glibc.rename(source.path, destination.path)
        #else
        let rc = Darwin.rename(source.path, destination.path)
        #endif
        guard rc == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        if syncingFolder { sync(folderOf: destination) }
    }

    /// Syncs the folder holding `file`, so a rename or creation of `file` survives a crash (best effort).
    public static func sync(folderOf file: URL) {
        let dir = open(file.deletingLastPathComponent().path, O_RDONLY)
        if dir >= 0 { _ = fsync(dir); close(dir) }
    }
}
