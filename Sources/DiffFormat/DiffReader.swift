import Crypto
import Foundation
import RTSQLite

/// Row counts of one carried table, by operation.
public struct OperationCounts: Sendable, Hashable, Codable {
    /// Upserted rows.
    public var upserts = 0
    /// Deleted rows.
    public var deletes = 0
    /// Makes counts.
    public init(upserts: Int = 0, deletes: Int = 0) { self.upserts = upserts; self.deletes = deletes }
}

/// When a `DiffReader` checks rows and the content digest.
public enum RowValidation: Sendable {
    /// Every row and the digest are checked before `init` returns (for callers that act on what they read).
    case upfront
    /// Rows are checked as `forEachChange` reads them and the digest after the last one (one pass, for
    /// callers that can undo what they did with earlier rows, like apply inside a transaction).
    case whileReading
}

/// Opens a diff file as untrusted input and validates all of it before any caller sees a row:
/// read-only and immutable, defensive mode, untrusted schema, triggers and views disabled,
/// structure, names, limits and content digest checked.
///
/// `Sendable`: everything but the file's connection is immutable after `init`, and reads of rows take turns on
/// the connection (one `forEachChange` at a time per reader; open a second reader to read in parallel).
public final class DiffReader: @unchecked Sendable {
    /// The file.
    public let url: URL
    /// Where its bytes are read from: `url`, or a private copy of it.
    package let contentURL: URL
    /// The validated metadata.
    public let metadata: DiffMetadata
    /// Carried table definitions, in file order.
    public let tables: [TableDefinition]
    /// Row counts per carried table.
    public let counts: [String: OperationCounts]
    /// Whether the diff carries per-column clock overrides.
    public let hasCellClocks: Bool

    /// When rows are validated: `.upfront` (all of them, before `init` returns) or `.whileReading`.
    public let rowValidation: RowValidation

    /// Carried table definitions by the table id rows refer to (`rtsync_rows.tid`).
    package let tableIDs: [Int64: TableDefinition]
    private let db: Connection
    /// Row reads take turns: the connection is opened without SQLite's own mutex.
    private let reading = NSRecursiveLock()
    private let cellClocks: [Int64: [Int64: [String: Clock]]]
    private let tablesHash: CanonicalHasher
    private let cellsHash: CanonicalHasher

    /// Opens and validates `url`: the file, its structure, metadata and table definitions always, its
    /// rows and content digest before returning (`.upfront`) or while `forEachChange` reads them.
    /// - Throws: `DiffFormatError` naming the file and the reason.
    public convenience init(url: URL, limits: DiffLimits = .default, rowValidation: RowValidation = .upfront) throws {
        try self.init(url: url, contentsAt: url, limits: limits, rowValidation: rowValidation)
    }

    /// Opens and validates the diff `url` from a copy of it at `content` (errors and names still say `url`).
    package init(url: URL, contentsAt content: URL, limits: DiffLimits = .default, rowValidation: RowValidation = .upfront) throws {
        self.url = url
        self.contentURL = content
        let file = url.path
        func corrupt(_ error: Error) -> DiffFormatError {
            if let e = error as? DiffFormatError { return e }
            if let e = error as? SQLiteError, e.code == 26 { return .notSQLite(file: file) }  // SQLITE_NOTADB
            if let e = error as? SQLiteError { return .corrupt(file: file, detail: e.message) }
            return .corrupt(file: file, detail: "\(error)")
        }

        // 1. The file itself: exists, within the size limit, has a SQLite header. One stat (following a symbolic
        //    link, as opening it does) and one read of the header, on the path the connection opens.
        var info = stat()
        guard stat(content.path, &info) == 0 else { throw DiffFormatError.fileNotFound(file: file) }
        // Opening a FIFO or a device would wait for a writer, or read without end: only plain files are diffs.
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw DiffFormatError.corrupt(file: file, detail: "not a regular file (\(Self.fileTypeName(info.st_mode))); a diff is a plain file")
        }
        let size = Int64(info.st_size)
        if size > limits.maxFileBytes { throw DiffFormatError.limitExceeded(file: file, what: "file size \(size) bytes", limit: limits.maxFileBytes) }
        let fd = open(content.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw DiffFormatError.fileNotFound(file: file) }
        var headerBytes = [UInt8](repeating: 0, count: 100)
        let got = headerBytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 100, 0) }
        close(fd)
        let header = Data(headerBytes.prefix(max(0, got)))
        // A diff still compressed for transport: say why it was not expanded (damaged, a bomb), or that it has to be.
        if DiffTransport.isCompressed(header) {
            do {
                try DiffTransport.expand(try Data(contentsOf: content, options: .mappedIfSafe), name: file, limit: limits.maxFileBytes, to: nil)
            } catch let e as DiffFormatError { throw e } catch { throw DiffFormatError.badCompression(file: file, reason: "\(error)") }
            throw DiffFormatError.badCompression(file: file, reason: "still compressed for transport, as a bucket stores diffs; a sync expands it on download (`DiffTransport.install`)")
        }
        guard header.count == 100, header.prefix(16) == Data("SQLite format 3\0".utf8) else { throw DiffFormatError.notSQLite(file: file) }
        // Bytes 18-19 are 2 in WAL mode: such a file may need a -wal file we would not read; ours never are.
        if header[18] == 2 || header[19] == 2 {
            throw DiffFormatError.corrupt(file: file, detail: "database is in WAL mode; diffs are single self-contained files")
        }
        // Nothing after the last page: bytes SQLite never reads would travel, be stored and be kept unchecked. The
        // header's page count (bytes 28-31) is SQLite's own when bytes 92-95 match the change counter (24-27), as
        // every SQLite since 3.7.0 writes it; otherwise SQLite takes the file's size, which must then be whole pages.
        func be32(_ at: Int) -> Int64 { header[at..<(at + 4)].reduce(0) { $0 << 8 | Int64($1) } }
        let pageSize: Int64 = header[16] == 0 && header[17] == 1 ? 65536 : Int64(header[16]) << 8 | Int64(header[17])
        if pageSize >= 512 {
            let expected = be32(92) == be32(24) && be32(28) > 0 ? be32(28) * pageSize : size - size % pageSize
            if size != expected {
                throw DiffFormatError.corrupt(file: file, detail: "\(size - expected) bytes \(size > expected ? "after the last page" : "missing from the last pages") (\(size) bytes in the file, \(expected) in its pages); a diff is exactly its SQLite pages")
            }
        }

        // 2. Open read-only and immutable, locked down against anything the file could run.
        do {
            db = try Connection(path: DiffReader.immutableURI(for: content.path), mode: .readOnly, uri: true)
            try db.hardenForUntrustedInput()
            let check = try db.rows("PRAGMA quick_check(20)").compactMap { $0.first?.string }
            if check != ["ok"] { throw DiffFormatError.corrupt(file: file, detail: check.prefix(3).joined(separator: "; ")) }
        } catch { throw corrupt(error) }

        do {
            // 3. Schema objects: only our structure tables and the declared carried tables; no triggers, views or indexes.
            //    (Automatic indexes are tolerated, but every query below reads the tables themselves (NOT INDEXED):
            //    quick_check does not compare an index with its table, so an index could hold other values.)
            let objects = try db.rows("SELECT type, name, sql FROM sqlite_schema")
            var fileTables = Set<String>()
            var declaredSQL: [String: String] = [:]
            for o in objects {
                let type = o[0].string ?? "", name = o[1].string ?? ""
                if type == "table" { declaredSQL[name] = o[2].string ?? "" }
                switch type {
                case "trigger": throw DiffFormatError.containsTrigger(file: file, name: name)
                case "view": throw DiffFormatError.containsView(file: file, name: name)
                case "table":
                    if DiffFile.structureTables.contains(name) { fileTables.insert(name); continue }
                    if TableDefinition.isReservedName(name) { throw DiffFormatError.reservedTableName(file: file, table: name) }
                    fileTables.insert(name)
                case "index" where name.hasPrefix("sqlite_autoindex_"): continue
                default: throw DiffFormatError.unexpectedObject(file: file, type: type, name: name)
                }
            }
            for required in [DiffFile.metaTable, DiffFile.tablesTable, DiffFile.rowsTable] where !fileTables.contains(required) {
                throw DiffFormatError.missingTable(file: file, table: required)
            }

            // 4. Metadata.
            let metaRows: [[SQLValue]]
            do {
                metaRows = try db.rows("SELECT format_version, diff_id, kind, author_user, author_site, seq_first, seq_last, created_at, seen, digest, signature, signer_key FROM rtsync_meta NOT INDEXED LIMIT 2")
            } catch { throw DiffFormatError.invalidMetadata(file: file, field: "rtsync_meta", reason: "missing columns (\((error as? SQLiteError)?.message ?? "\(error)"))") }
            guard metaRows.count == 1, let m = metaRows.first else {
                throw DiffFormatError.invalidMetadata(file: file, field: "rtsync_meta", reason: "expected exactly one row, found \(metaRows.count)")
            }
            guard let version = m[0].int64 else { throw DiffFormatError.invalidMetadata(file: file, field: "format_version", reason: "not an integer") }
            guard version == DiffFile.formatVersion else { throw DiffFormatError.unsupportedVersion(file: file, found: version) }
            guard let idText = m[1].string, let id = try? KSUID(string: idText) else {
                throw DiffFormatError.invalidMetadata(file: file, field: "diff_id", reason: "not a KSUID")
            }
            // A file named for its id (the usual case) needs no second parse of the name.
            let name = url.lastPathComponent
            if name != idText + "." + DiffFile.fileExtension, let nameID = DiffFile.diffID(fromFileName: name), nameID != id {
                throw DiffFormatError.fileNameMismatch(file: file, diffID: id.string)
            }
            guard let kindText = m[2].string, let kind = DiffKind(rawValue: kindText) else {
                throw DiffFormatError.invalidMetadata(file: file, field: "kind", reason: "must be one of changes, share, request, snapshot, rollup")
            }
            // A roll-up names the diffs it stands in for in `rtsync_covers`, declared exactly so, ascending KSUIDs
            // without repeats; no other kind has the table.
            var covers: [CoveredDiff]?
            if kind == .rollup {
                guard declaredSQL[DiffFile.coversTable] == DiffFile.coversDDL else {
                    throw DiffFormatError.invalidMetadata(file: file, field: DiffFile.coversTable, reason: "a rollup must declare \(DiffFile.coversDDL)")
                }
                let rows = try db.rows("SELECT diff_id, seq FROM rtsync_covers NOT INDEXED ORDER BY rowid LIMIT ?", [.integer(Int64(DiffFile.maxCovered) + 1)])
                guard rows.count <= DiffFile.maxCovered else {
                    throw DiffFormatError.limitExceeded(file: file, what: "diffs covered by a rollup", limit: Int64(DiffFile.maxCovered))
                }
                var list: [CoveredDiff] = []
                for r in rows {
                    guard let t = r[0].string, (try? KSUID(string: t)) != nil, list.last.map({ $0.id < t }) ?? true, r[1].isNull || r[1].int64 != nil else {
                        throw DiffFormatError.invalidMetadata(file: file, field: DiffFile.coversTable, reason: "must hold KSUIDs in ascending order, each once, with an integer or NULL sequence number")
                    }
                    list.append(CoveredDiff(id: t, sequence: r[1].int64))
                }
                covers = list
            } else if fileTables.contains(DiffFile.coversTable) {
                throw DiffFormatError.invalidMetadata(file: file, field: DiffFile.coversTable, reason: "only a rollup names diffs it covers")
            }
            guard let user = m[3].string, let site = m[4].string, !site.isEmpty else {
                throw DiffFormatError.invalidMetadata(file: file, field: "author", reason: "author_user and author_site must be text")
            }
            func optionalInt(_ v: SQLValue, _ field: String) throws -> Int64? {
                switch v {
                case .null: return nil
                case .integer(let i): return i
                default: throw DiffFormatError.invalidMetadata(file: file, field: field, reason: "not an integer")
                }
            }
            let seqFirst = try optionalInt(m[5], "seq_first"), seqLast = try optionalInt(m[6], "seq_last")
            if let a = seqFirst, let b = seqLast, a > b { throw DiffFormatError.invalidMetadata(file: file, field: "seq_first", reason: "greater than seq_last") }
            guard let createdText = m[7].string, let created = ISO8601.parse(createdText) else {
                throw DiffFormatError.invalidMetadata(file: file, field: "created_at", reason: "not an ISO-8601 time")
            }
            guard let seenText = m[8].string, let seen = CanonicalSeen.decode(seenText) else {
                throw DiffFormatError.invalidMetadata(file: file, field: "seen", reason: "must be a canonical JSON object of site id to integer clock")
            }
            guard let digest = m[9].string, digest.count == 64, [UInt8](hexString: digest) != nil else {
                throw DiffFormatError.invalidMetadata(file: file, field: "digest", reason: "not a SHA-256 hex string")
            }
            func optionalBlob(_ v: SQLValue, _ field: String, _ size: Int) throws -> [UInt8]? {
                switch v {
                case .null: return nil
                case .blob(let b) where b.count == size: return b
                default: throw DiffFormatError.invalidMetadata(file: file, field: field, reason: "must be NULL or a \(size)-byte BLOB")
                }
            }
            if (m[10].isNull) != (m[11].isNull) {
                throw DiffFormatError.invalidMetadata(file: file, field: "signature", reason: "signature and signer_key must both be set or both be NULL")
            }
            let metadata = DiffMetadata(formatVersion: version, id: id, kind: kind, authorUser: user, authorSite: site,
                                        sequenceFirst: seqFirst, sequenceLast: seqLast, createdAt: created, seen: seen, digest: digest,
                                        signature: try optionalBlob(m[10], "signature", 64), signerKey: try optionalBlob(m[11], "signer_key", 32),
                                        covers: covers)
            // The digest covers created_at as written; a differently formatted time would not hash the same.
            guard ISO8601.format(created, fractional: true) == createdText else {
                throw DiffFormatError.invalidMetadata(file: file, field: "created_at", reason: "not in the canonical form YYYY-MM-DDTHH:MM:SS.sssZ")
            }

            // 5. Table definitions, checked against the carried tables actually present.
            var tablesHash = CanonicalHasher()
            var defs: [TableDefinition] = []
            var byID: [Int64: TableDefinition] = [:]
            let tableRows = try db.rows("SELECT id, name, columns, constraints, schema_hash FROM rtsync_tables NOT INDEXED ORDER BY id")
            if tableRows.count > limits.maxTables { throw DiffFormatError.limitExceeded(file: file, what: "number of tables (\(tableRows.count))", limit: Int64(limits.maxTables)) }
            for r in tableRows {
                guard let tid = r[0].int64, let name = r[1].string, let colsText = r[2].string, let consText = r[3].string, let hash = r[4].string else {
                    throw DiffFormatError.invalidTableDefinition(file: file, table: r[1].string ?? "?", reason: "missing fields in rtsync_tables")
                }
                let def: TableDefinition
                let text = ValidatedDefinitions.Key(name: name, columns: colsText, constraints: consText, hash: hash)
                if let known = ValidatedDefinitions.shared.cached(text) {
                    // The same text passed every check below before; only the limit depends on this reader.
                    if known.columns.count > limits.maxColumns { throw DiffFormatError.limitExceeded(file: file, what: "columns of '\(name)' (\(known.columns.count))", limit: Int64(limits.maxColumns)) }
                    def = known
                } else {
                    if let p = TableDefinition.problem(withName: name) { throw DiffFormatError.invalidName(file: file, name: name, reason: p) }
                    if TableDefinition.isReservedName(name) { throw DiffFormatError.reservedTableName(file: file, table: name) }
                    guard let columns = JSON.decode([ColumnDefinition].self, colsText) else {
                        throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: "columns is not valid JSON")
                    }
                    if columns.count > limits.maxColumns { throw DiffFormatError.limitExceeded(file: file, what: "columns of '\(name)' (\(columns.count))", limit: Int64(limits.maxColumns)) }
                    guard let cons = JSON.decode(TableConstraints.self, consText) else {
                        throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: "constraints is not valid JSON")
                    }
                    def = TableDefinition(name: name, columns: columns, uniqueConstraints: cons.unique, foreignKeys: cons.foreignKeys, withoutRowID: cons.withoutRowID)
                    if let p = def.validationProblem() { throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: p) }
                    guard hash == def.schemaHash else { throw DiffFormatError.schemaHashMismatch(file: file, table: name) }
                    ValidatedDefinitions.shared.remember(def, for: text)
                }
                guard fileTables.contains(name) else { throw DiffFormatError.missingTable(file: file, table: name) }
                if byID[tid] != nil || defs.contains(where: { $0.name.lowercased() == name.lowercased() }) {
                    throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: "declared twice")
                }
                // The carried table must be declared exactly as a writer declares it: its definition's columns, no
                // types, constraints, defaults or generated columns (an expression in the file would be SQL of its
                // own, and `PRAGMA table_info` does not list generated columns). One string comparison, no query.
                let expected = DiffFile.carriedTableSQL(name: name, columns: def.columnNames)
                guard declaredSQL[name] == expected else {
                    throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: "carried table is declared as \(String(reflecting: String((declaredSQL[name] ?? "").prefix(200)))), not as its definition's plain columns (\(expected))")
                }
                guard DiffFile.rowidAlias(for: def.columnNames) != nil else {
                    throw DiffFormatError.invalidTableDefinition(file: file, table: name, reason: "no rowid alias left to address rows")
                }
                tablesHash.add([.integer(tid), .text(name), .text(colsText), .text(consText), .text(hash)])
                defs.append(def)
                byID[tid] = def
            }
            for t in fileTables where !DiffFile.structureTables.contains(t) && !defs.contains(where: { $0.name == t }) {
                throw DiffFormatError.invalidTableDefinition(file: file, table: t, reason: "table is present but not declared in rtsync_tables")
            }

            // 6. Row counts per table (one aggregate query); every carried row must be referenced.
            var counts: [String: OperationCounts] = [:]
            var total: Int64 = 0
            for r in try db.rows("SELECT tid, count(*), sum(op = 'delete') FROM rtsync_rows NOT INDEXED GROUP BY tid") {
                let n = r[1].int64 ?? 0
                total += n
                guard let tid = r[0].int64, let def = byID[tid] else { continue }  // an unknown table id is reported by the row check
                let deletes = Int(r[2].int64 ?? 0)
                counts[def.name] = OperationCounts(upserts: Int(n) - deletes, deletes: deletes)
            }
            if total > limits.maxRows { throw DiffFormatError.limitExceeded(file: file, what: "number of rows", limit: limits.maxRows) }
            for def in defs {
                let n = try db.scalar("SELECT count(*) FROM " + quoteIdentifier(def.name) + " NOT INDEXED")?.int64 ?? 0
                let c = counts[def.name] ?? .init()
                if n != Int64(c.upserts + c.deletes) {
                    throw DiffFormatError.invalidRow(file: file, table: def.name, row: 0, reason: "\(n) carried rows but \(c.upserts + c.deletes) referenced by rtsync_rows")
                }
            }

            // 7. Cell clocks: well formed, one per cell, hashed for the digest (that each names a row in
            //    rtsync_rows is checked by the row scan).
            var cellsHash = CanonicalHasher()
            var cellClocks: [Int64: [Int64: [String: Clock]]] = [:]
            if fileTables.contains(DiffFile.cellsTable) {
                let cells = try db.prepare("SELECT tid, rid, col, hlc, site FROM rtsync_cells NOT INDEXED ORDER BY rowid")
                var seenCells = Set<String>()
                var cellNumber: Int64 = 0
                while try cells.step() {
                    let c = cells.row()
                    cellNumber += 1
                    total += 1
                    if total > limits.maxRows { throw DiffFormatError.limitExceeded(file: file, what: "number of rows and cells", limit: limits.maxRows) }
                    guard let tid = c[0].int64, let def = byID[tid], let rid = c[1].int64, let col = c[2].string, let ci = def.columnIndex(col),
                          let hlc = c[3].int64, c[4].isNull || c[4].string != nil else {
                        throw DiffFormatError.invalidRow(file: file, table: DiffFile.cellsTable, row: cellNumber, reason: "malformed cell clock")
                    }
                    guard seenCells.insert("\(tid)|\(rid)|\(ci)").inserted else {
                        throw DiffFormatError.invalidRow(file: file, table: DiffFile.cellsTable, row: cellNumber, reason: "two clocks for the same cell")
                    }
                    cellsHash.add(c)
                    cellClocks[tid, default: [:]][rid, default: [:]][col] = Clock(hlc: HLC(rawValue: hlc), site: c[4].string ?? metadata.authorSite)
                }
            }

            self.metadata = metadata
            self.tables = defs
            self.tableIDs = byID
            self.counts = counts
            self.hasCellClocks = !cellClocks.isEmpty
            self.cellClocks = cellClocks
            self.tablesHash = tablesHash
            self.cellsHash = cellsHash
            self.rowValidation = rowValidation
            // 8. Every row well formed and the digest matching the content: now, or while the caller reads.
            if rowValidation == .upfront { try scanRows({ _ in }, deliver: false) }
        } catch { throw corrupt(error) }
    }

    /// What kind of file `mode` says it is, for the error about a diff that is not a plain file.
    static func fileTypeName(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: return "a folder"
        case S_IFIFO: return "a FIFO"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFSOCK: return "a socket"
        default: return "unknown type"
        }
    }

    /// The author user a diff file's metadata names, read without any of the checks `init` makes; nil when it cannot
    /// be read so (not a plain file, not a database, no single metadata row). For routing a file only (a sync sends
    /// a diff of its own user straight to apply, which checks all of it): never act on anything else it says.
    package static func peekAuthorUser(of url: URL) -> String? {
        var info = stat()
        guard stat(url.path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
              let db = try? Connection(path: immutableURI(for: url.path), mode: .readOnly, uri: true),
              (try? db.hardenForUntrustedInput()) != nil,
              let rows = try? db.rows("SELECT author_user FROM rtsync_meta NOT INDEXED LIMIT 2"), rows.count == 1 else { return nil }
        return rows[0].first?.string
    }

    /// A read-only, immutable URI for `path` (no locks, no journal or WAL files are opened or created).
    package static func immutableURI(for path: String) -> String { fileURI(for: path, query: "mode=ro&immutable=1") }

    /// A `file:` URI for `path` with `query`, escaping the characters a URI path cannot hold as they are.
    package static func fileURI(for path: String, query: String) -> String {
        if !path.utf8.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) {
            return "file:" + path + "?" + query
        }
        var escaped = ""
        for ch in path.unicodeScalars {
            switch ch {
            case "%": escaped += "%25"
            case "?": escaped += "%3f"
            case "#": escaped += "%23"
            default: escaped.unicodeScalars.append(ch)
            }
        }
        return "file:" + escaped + "?" + query
    }

    /// Whether the diff is signed by one of `trustedKeys` (raw 32-byte Ed25519 public keys).
    public func isSigned(byOneOf trustedKeys: [[UInt8]]) -> Bool {
        guard let signature = metadata.signature, let signer = metadata.signerKey,
              trustedKeys.contains(signer), let key = try? Curve25519.Signing.PublicKey(rawRepresentation: signer),
              let digest = [UInt8](hexString: metadata.digest) else { return false }
        return key.isValidSignature(signature, for: digest)
    }

    /// Calls `body` with each row change in file order (the order the author made them).
    ///
    /// With `.whileReading` validation, rows are checked as they are read and the digest at the end: a
    /// malformed row or a digest mismatch throws after `body` has seen earlier rows, so the caller must
    /// be able to undo them (apply runs inside one transaction and rolls back).
    public func forEachChange(_ body: (RowChange) throws -> Void) throws {
        try scanRows({ row in try body(row.change) }, deliver: true)
    }

    /// `forEachChange` for callers that copy carried values into another database: each row's values stay
    /// in SQLite until asked for (`DiffRow.bind`, `DiffRow.values`). The row is valid only during the call.
    /// With `validated` (after an earlier `forEachRow` on this reader went through every row without an error)
    /// rows are not hashed and checked again.
    package func forEachRow(validated: Bool = false, _ body: (DiffRow) throws -> Void) throws {
        try scanRows(body, deliver: true, validate: !validated)
    }

    /// Reads `rtsync_rows` in order, validating every reference and hashing the content; checks that every
    /// cell clock names a row, and that the digest matches. Hands each row to `body` when `deliver` is set.
    private func scanRows(_ body: (DiffRow) throws -> Void, deliver: Bool, validate: Bool = true) throws {
        reading.lock()
        defer { reading.unlock() }
        let file = url.path
        var rowsHash = CanonicalHasher()
        var references: [Int64: ReferenceSet] = [:]
        let carried = try CarriedTables(db: db, tables: tableIDs)
        let rows = try db.prepare("SELECT rowid, tid, rid, op, born, born_site, hlc, site, changed FROM rtsync_rows NOT INDEXED ORDER BY rowid")
        let author = metadata.authorSite
        // Site ids repeat row after row: read into the previous string when the bytes are the same.
        var bornSite: String?, site: String?
        while try rows.step() {
            bornSite = rows.text(5, reusing: bornSite)
            site = rows.text(7, reusing: site)
            let (def, values, op, changed) = try carried.resolve(rows, file: file)
            let tid = rows.int64(1), rid = rows.int64(2)
            if validate {
                guard references[tid, default: ReferenceSet()].insert(rid) else {
                    throw DiffFormatError.invalidRow(file: file, table: def.name, row: rows.int64(0), reason: "carried row \(rid) is referenced twice")
                }
                // tid, rid, op, born, born_site, hlc, site, changed; then the carried values.
                for i in 1...8 where !rowsHash.add(column: i, of: rows) {
                    throw DiffFormatError.invalidRow(file: file, table: DiffFile.rowsTable, row: rows.int64(0), reason: "column \(rows.columnName(i)) is text that is not valid UTF-8")
                }
                for i in 0..<def.columns.count where !rowsHash.add(column: i, of: values) {
                    throw DiffFormatError.invalidRow(file: file, table: def.name, row: rows.int64(0), reason: "column '\(def.columns[i].name)' is text that is not valid UTF-8")
                }
            }
            guard deliver else { continue }
            let born = Clock(hlc: HLC(rawValue: rows.int64(4)), site: bornSite ?? author)
            let clock = Clock(hlc: HLC(rawValue: rows.int64(6)), site: site ?? author)
            let overrides = hasCellClocks ? cellClocks[tid]?[rid] ?? [:] : [:]
            try body(DiffRow(ordinal: rows.int64(0), table: def, tableID: tid, carried: values, operation: op, changedColumns: changed, clock: clock, born: born,
                             columnClocks: overrides))
        }
        guard validate else { return }
        for (tid, byRow) in cellClocks {
            for rid in byRow.keys where references[tid]?.contains(rid) != true {
                throw DiffFormatError.invalidRow(file: file, table: DiffFile.cellsTable, row: 0, reason: "cell refers to a row not in rtsync_rows")
            }
        }
        let actual = CanonicalHasher.digest(meta: metadata.digestInput, tables: tablesHash, rows: rowsHash, cells: cellsHash)
        guard actual == metadata.digest else { throw DiffFormatError.digestMismatch(file: file, expected: metadata.digest, actual: actual) }
    }

    /// All row changes in file order.
    public func changes() throws -> [RowChange] {
        var out: [RowChange] = []
        try forEachChange { out.append($0) }
        return out
    }
}

/// Table definitions whose text (`rtsync_tables` name, columns, constraints and schema hash) passed every check of
/// `DiffReader.init` but the column limit, by that text: a catch-up opens hundreds of diffs declaring the same
/// tables, and decoding the JSON and hashing the definition again was most of the Swift-side time of opening a
/// one-row diff. The checks are a function of the text alone, so a definition read from the same text passed them.
enum ValidatedDefinitions {
    struct Key: Hashable {
        var name: String
        var columns: String
        var constraints: String
        var hash: String
    }

    static let shared = Memo<Key, TableDefinition>(capacity: 256)
}

/// One row change of a diff while `DiffReader.forEachRow` reads it, its carried values still in SQLite.
package final class DiffRow {
    /// Its `rtsync_rows` rowid: the row's place in the file.
    package let ordinal: Int64
    /// The carried table's definition.
    package let table: TableDefinition
    /// The table's id in this diff (`rtsync_rows.tid`).
    package let tableID: Int64
    /// Upsert or delete.
    package let operation: RowOperation
    /// Names of the columns that changed; nil means every column.
    package let changedColumns: [String]?
    /// Clock of the last change to the row.
    package let clock: Clock
    /// Clock of the row's creation.
    package let born: Clock
    /// Per-column clocks that differ from `clock`.
    package let columnClocks: [String: Clock]
    /// The statement (the carried table's scan or lookup) positioned on this row's values.
    private let carried: Statement

    init(ordinal: Int64, table: TableDefinition, tableID: Int64, carried: Statement, operation: RowOperation, changedColumns: [String]?,
         clock: Clock, born: Clock, columnClocks: [String: Clock]) {
        self.ordinal = ordinal; self.table = table; self.tableID = tableID; self.carried = carried; self.operation = operation; self.changedColumns = changedColumns
        self.clock = clock; self.born = born; self.columnClocks = columnClocks
    }

    /// Binds carried column `column` to parameter `index` of `statement` as stored.
    package func bind(_ column: Int, to statement: Statement, at index: Int) throws {
        try statement.bind(columnOf: carried, column, at: index)
    }

    /// Whether carried column `column` is TEXT equal to `text`.
    package func isText(_ column: Int, equalTo text: String) -> Bool { carried.columnIsText(column, equalTo: text) }

    /// Whether carried column `column` is TEXT holding a NUL byte.
    package func isTextWithNUL(_ column: Int) -> Bool { carried.columnIsTextWithNUL(column) }

    /// Carried column `column` as a Swift value.
    package func value(_ column: Int) -> SQLValue { carried.column(column) }

    /// The carried values in the table definition's column order.
    package var values: [SQLValue] { (0..<table.columns.count).map { carried.column($0) } }

    /// The row as a `RowChange` (its values copied out of SQLite).
    package var change: RowChange {
        RowChange(table: table.name, operation: operation, values: values, changedColumns: changedColumns, clock: clock, born: born, columnClocks: columnClocks)
    }
}

/// The carried rows of one table referenced so far: a high-water mark while references only grow (as
/// written), and a set once they do not.
private struct ReferenceSet {
    private var last = Int64.min
    private var inOrder: [Int64] = []
    private var all: Set<Int64>?

    /// Records `rid`; false when it was already recorded.
    mutating func insert(_ rid: Int64) -> Bool {
        if all == nil {
            if rid > last { last = rid; inOrder.append(rid); return true }
            all = Set(inOrder)
            inOrder = []
        }
        return all!.insert(rid).inserted
    }

    func contains(_ rid: Int64) -> Bool {
        if let all { return all.contains(rid) }
        return rid <= last && binarySearch(rid)
    }

    private func binarySearch(_ rid: Int64) -> Bool {
        var lo = 0, hi = inOrder.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if inOrder[mid] < rid { lo = mid + 1 } else { hi = mid }
        }
        return lo < inOrder.count && inOrder[lo] == rid
    }
}

/// Looks up carried rows by the (tid, rid) references of `rtsync_rows`, checking each reference.
private struct CarriedTables {
    /// One carried table: a scan in rowid order, which `rtsync_rows` follows as written, and a lookup by
    /// rowid for references out of that order.
    final class Table {
        let definition: TableDefinition
        let keyIndexes: [Int]
        private let db: Connection
        private let lookupSQL: String
        /// Prepared at the first reference out of rowid order (few diffs have one).
        private var lookupStatement: Statement?
        /// The carried columns, then the rowid (column `definition.columns.count`).
        let scan: Statement
        /// The last `changed` text read for this table, and its column names.
        var lastChanged: (text: String, names: [String])?
        /// Rowid of the scan's current row; nil before the first step and once the scan is done.
        var scanRowid: Int64?
        var scanDone = false

        init(db: Connection, definition def: TableDefinition) throws {
            definition = def
            keyIndexes = def.primaryKeyIndexes
            self.db = db
            let alias = DiffFile.rowidAlias(for: def.columnNames)!
            let columns = def.columnNames.map(quoteIdentifier).joined(separator: ", ")
            lookupSQL = "SELECT " + columns + " FROM " + quoteIdentifier(def.name) + " NOT INDEXED WHERE " + alias + " = ?"
            scan = try db.prepare("SELECT " + columns + ", " + alias + " FROM " + quoteIdentifier(def.name) + " NOT INDEXED ORDER BY " + alias)
        }

        private func lookup() throws -> Statement {
            if let lookupStatement { return lookupStatement }
            let s = try db.prepare(lookupSQL)
            lookupStatement = s
            return s
        }

        /// A statement positioned on carried row `rid` (valid until the next call), or nil when there is none.
        func position(at rid: Int64) throws -> Statement? {
            // Move the scan forward to `rid`; rows it passes are only read again through the lookup.
            while !scanDone, scanRowid.map({ $0 < rid }) ?? true {
                if try scan.step() { scanRowid = scan.int64(definition.columns.count) } else { scanDone = true; scanRowid = nil }
            }
            if scanRowid == rid { return scan }
            let lookup = try lookup()
            try lookup.bind([.integer(rid)])
            return try lookup.step() ? lookup : nil
        }
    }

    let tables: [Int64: Table]

    init(db: Connection, tables: [Int64: TableDefinition]) throws {
        self.tables = try tables.mapValues { try Table(db: db, definition: $0) }
    }

    /// Validates the current `rtsync_rows` row of `rows` (rowid, tid, rid, op, born, born_site, hlc, site,
    /// changed); returns its table, a statement positioned on the carried values (until the next call), the
    /// operation and the changed columns.
    func resolve(_ rows: Statement, file: String) throws -> (TableDefinition, Statement, RowOperation, [String]?) {
        let rowNumber = rows.int64(0)
        guard rows.columnType(1) == .integer, let table = tables[rows.int64(1)] else {
            throw DiffFormatError.invalidRow(file: file, table: DiffFile.rowsTable, row: rowNumber, reason: "unknown table id \(rows.column(1))")
        }
        let def = table.definition
        func bad(_ why: String) -> DiffFormatError { .invalidRow(file: file, table: def.name, row: rowNumber, reason: why) }
        guard rows.columnType(2) == .integer else { throw bad("rid is not an integer") }
        let rid = rows.int64(2)
        let op: RowOperation
        if rows.columnIsText(3, equalTo: RowOperation.upsert.rawValue) { op = .upsert }
        else if rows.columnIsText(3, equalTo: RowOperation.delete.rawValue) { op = .delete }
        else { throw bad("op must be 'upsert' or 'delete'") }
        guard rows.columnType(4) == .integer, rows.columnType(6) == .integer else { throw bad("clocks must be integers") }
        guard [.null, .text].contains(rows.columnType(5)), [.null, .text].contains(rows.columnType(7)) else { throw bad("sites must be text or NULL") }
        var changed: [String]?
        switch rows.columnType(8) {
        case .null: changed = nil
        case .text:
            guard op == .upsert else { throw bad("changed must be a JSON array of the table's column names") }
            // Rows changed the same way repeat the same text: decode and check it once.
            if let last = table.lastChanged, rows.columnIsText(8, equalTo: last.text) {
                changed = last.names
            } else {
                guard let t = rows.column(8).string, let names = JSON.names(t) else {
                    throw bad("changed must be a JSON array of the table's column names")
                }
                let indexes = names.compactMap { def.columnIndex($0) }
                guard indexes.count == names.count else { throw bad("changed must be a JSON array of the table's column names") }
                // A column named twice (in any spelling) changed once: the set merge reads the list as a set, and
                // the per-row merge would otherwise set it twice (past 2,000 names, an UPDATE SQLite refuses).
                var taken = Set<Int>()
                let once = zip(names, indexes).filter { taken.insert($0.1).inserted }.map(\.0)
                table.lastChanged = (t, once)
                changed = once
            }
        default: throw bad("changed must be NULL or JSON text")
        }
        guard let carried = try table.position(at: rid) else { throw bad("references carried row \(rid), which does not exist") }
        for i in table.keyIndexes where carried.columnType(i) == .null { throw bad("primary key column '\(def.columns[i].name)' is NULL") }
        return (def, carried, op, changed)
    }
}
