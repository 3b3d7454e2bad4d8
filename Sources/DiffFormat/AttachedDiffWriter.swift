import Crypto
import Foundation
import RTSQLite

/// Builds one diff file through a caller's own connection, for set-based writers (`INSERT … SELECT` from the
/// caller's tables): the file is attached to that connection as `schema`, the caller fills its tables inside its
/// transaction, and `seal` hashes what was stored and writes the metadata. The file is the same as `DiffWriter`
/// writes (same tables, digest and signature); only the way rows get into it differs.
///
/// Order of use: `init` (outside a transaction: SQLite cannot attach inside one), then in the caller's
/// transaction `begin`, `addTable` and the caller's inserts, `seal`; after the caller's COMMIT `detachAndSync`,
/// then `publish` (the rename into place). `cancel` at any point removes the file.
package final class AttachedDiffWriter {
    /// The schema name the file is attached under.
    package let schema = "rtsync_out"
    /// The diff's metadata (id, digest and signature are filled in by `begin` and `seal`).
    package private(set) var metadata: DiffMetadata
    /// Where the file is written until it is published.
    package let temporary: URL

    private let directory: URL
    private let db: Connection
    private var attached = false
    private var tablesHash = CanonicalHasher()
    private var tables: [(id: Int64, definition: TableDefinition)] = []

    /// Attaches a new, empty file in `directory` to `connection`. Must run outside a transaction. `smallPages`:
    /// 512-byte pages, as `DiffWriter` uses for diffs of up to 64 rows, so a small diff stays a few KB.
    /// - Throws: `DiffFormatError.writeFailed` when the folder is not writable.
    package init(connection: Connection, directory: URL, kind: DiffKind, smallPages: Bool) throws {
        self.db = connection
        self.directory = directory
        metadata = DiffMetadata(formatVersion: DiffFile.formatVersion, id: KSUID.generate(), kind: kind, authorUser: "",
                                authorSite: "", sequenceFirst: nil, sequenceLast: nil, createdAt: Date(), seen: [:],
                                digest: "", signature: nil, signerKey: nil)
        temporary = directory.appendingPathComponent(".export-" + UUID().uuidString.lowercased() + ".tmp", isDirectory: false)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            // An empty file is an empty database; the caller's connection may not be allowed to create files.
            guard FileManager.default.createFile(atPath: temporary.path, contents: nil) else {
                throw DiffFormatError.writeFailed(file: temporary.path, reason: "cannot create the file")
            }
            try connection.execute("ATTACH DATABASE ? AS " + schema, [.text(Self.uri(for: temporary.path))])
            attached = true
            // The file is renamed into place only after an explicit fsync, so SQLite's journal adds nothing.
            try connection.execute("PRAGMA \(schema).journal_mode = OFF; PRAGMA \(schema).synchronous = OFF; PRAGMA \(schema).auto_vacuum = NONE; PRAGMA \(schema).page_size = \(smallPages ? 512 : 4096)")
        } catch {
            cancel()
            throw DiffFormatError.writeFailed(file: temporary.path, reason: "\(error)")
        }
    }

    deinit { if attached { cancel() } }

    /// A read-write URI for `path`, an existing file (the caller's connection opens URIs).
    static func uri(for path: String) -> String { DiffReader.fileURI(for: path, query: "mode=rw") }

    /// Sets the metadata and creates the structure tables, inside the caller's transaction (before any row).
    package func begin(id: KSUID, authorUser: String, authorSite: String, sequence: ClosedRange<Int64>?, createdAt: Date = Date(),
                       seen: [String: Int64]) throws {
        metadata.id = id
        metadata.authorUser = authorUser
        metadata.authorSite = authorSite
        metadata.sequenceFirst = sequence?.lowerBound
        metadata.sequenceLast = sequence?.upperBound
        metadata.createdAt = createdAt
        metadata.seen = seen
        do {
            for statement in DiffFile.structureDDL.split(separator: ";") where !statement.allSatisfy(\.isWhitespace) {
                try db.execute(statement.replacingOccurrences(of: "CREATE TABLE ", with: "CREATE TABLE \(schema)."))
            }
        } catch {
            throw DiffFormatError.writeFailed(file: temporary.path, reason: "\(error)")
        }
    }

    /// The file name the diff gets when published: `<id>.sqlite`.
    package var destination: URL { directory.appendingPathComponent(DiffFile.fileName(for: metadata.id), isDirectory: false) }

    /// Declares a carried table (in the order of its first row) and returns its id in the file. The caller then
    /// inserts its rows into `schema.<name>` (rowid = the row's `rid`), `schema.rtsync_rows` and `schema.rtsync_cells`.
    /// - Throws: `DiffFormatError.invalidTableDefinition` for reserved names or unsound definitions.
    package func addTable(_ definition: TableDefinition) throws -> Int64 {
        let id = Int64(tables.count + 1)
        tablesHash.add(try DiffFile.declare(definition, id: id, in: db, schema: schema, file: temporary.path))
        tables.append((id, definition))
        return id
    }

    /// Hashes the rows and cells as stored (in rowid order, as a reader reads them), signs when a key is given and
    /// writes the metadata row, inside the caller's transaction.
    /// - Returns: false, having written nothing, when a stored TEXT value is not valid UTF-8 (`DiffWriter` would
    ///   have stored it with replacement characters): the caller then writes the diff the other way.
    package func seal(signingKey: Curve25519.Signing.PrivateKey?) throws -> Bool {
        var rowsHash = CanonicalHasher(), cellsHash = CanonicalHasher()
        let byID = Dictionary(uniqueKeysWithValues: tables.map { ($0.id, $0.definition) })
        var readers: [Int64: Statement] = [:]
        for (id, def) in tables {
            let rowid = DiffFile.rowidAlias(for: def.columnNames)!
            readers[id] = try db.prepare("SELECT \(rowid), " + def.columnNames.map(quoteIdentifier).joined(separator: ", ")
                                         + " FROM \(schema)." + quoteIdentifier(def.name) + " ORDER BY \(rowid)")
        }
        let rows = try db.prepare("SELECT tid, rid, op, born, born_site, hlc, site, changed FROM \(schema).rtsync_rows ORDER BY rowid")
        while try rows.step() {
            let tid = rows.int64(0), rid = rows.int64(1)
            guard let values = readers[tid], let def = byID[tid], try values.step(), values.int64(0) == rid else {
                throw DiffFormatError.writeFailed(file: temporary.path, reason: "row \(rid) of table \(tid) is not in the file in row order")
            }
            for i in 0..<8 where !rowsHash.add(column: i, of: rows) { return false }
            for i in 0..<def.columns.count where !rowsHash.add(column: i + 1, of: values) { return false }
        }
        for (_, values) in readers where try values.step() {
            throw DiffFormatError.writeFailed(file: temporary.path, reason: "a carried row has no entry in rtsync_rows")
        }
        let cells = try db.prepare("SELECT tid, rid, col, hlc, site FROM \(schema).rtsync_cells ORDER BY rowid")
        while try cells.step() {
            for i in 0..<5 where !cellsHash.add(column: i, of: cells) { return false }
        }
        let digest = CanonicalHasher.digest(meta: metadata.digestInput, tables: tablesHash, rows: rowsHash, cells: cellsHash)
        metadata.digest = digest
        if let key = signingKey {
            metadata.signature = Array(try key.signature(for: [UInt8](hexString: digest)!))
            metadata.signerKey = Array(key.publicKey.rawRepresentation)
        }
        var values: [SQLValue] = [.integer(metadata.formatVersion)]
        values += metadata.digestedValues
        values += [.text(digest), metadata.signature.map { .blob($0) } ?? .null, metadata.signerKey.map { .blob($0) } ?? .null]
        try db.execute("INSERT INTO \(schema).rtsync_meta(format_version, diff_id, kind, author_user, author_site, seq_first, seq_last, created_at, seen, digest, signature, signer_key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", values)
        return true
    }

    /// After the caller's COMMIT: detaches the file and syncs it to disk (still under its temporary name).
    package func detachAndSync() throws {
        do {
            if attached {
                try db.execute("DETACH DATABASE " + schema)
                attached = false
            }
            try Durable.sync(file: temporary)
        } catch {
            cancel()
            throw DiffFormatError.writeFailed(file: temporary.path, reason: "\(error)")
        }
    }

    /// Renames the synced file to `<id>.sqlite` and syncs the folder.
    /// - Returns: the published file.
    package func publish() throws -> URL {
        do {
            try Durable.rename(temporary, to: destination)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw DiffFormatError.writeFailed(file: destination.path, reason: "\(error)")
        }
        return destination
    }

    /// Abandons the diff: detaches it (outside a transaction) and removes its file.
    package func cancel() {
        if attached, db.isAutocommit {
            try? db.execute("DETACH DATABASE " + schema)
            attached = false
        }
        try? FileManager.default.removeItem(at: temporary)
    }
}
