import Crypto
import Foundation
import RTSQLite

/// Constants of the diff file format (see docs/diff-format.md).
public enum DiffFile {
    /// The format version this build writes and reads.
    public static let formatVersion: Int64 = 1
    /// File name extension of diff files.
    public static let fileExtension = "sqlite"

    static let metaTable = "rtsync_meta"
    static let tablesTable = "rtsync_tables"
    static let rowsTable = "rtsync_rows"
    static let cellsTable = "rtsync_cells"
    /// The diffs a roll-up stands in for (only in a `rollup`).
    static let coversTable = "rtsync_covers"
    static let structureTables: Set<String> = [metaTable, tablesTable, rowsTable, cellsTable, coversTable]
    /// The declaration of `rtsync_covers`, exactly as a reader expects it.
    static let coversDDL = "CREATE TABLE rtsync_covers(diff_id TEXT NOT NULL, seq INTEGER)"
    /// Most diffs one roll-up may cover.
    public static let maxCovered = 100_000

    // Plain tables with no indexes beyond the rowid: rows are only appended, then read in rowid order.
    static let structureDDL = """
    CREATE TABLE rtsync_meta(format_version INTEGER NOT NULL, diff_id TEXT NOT NULL, kind TEXT NOT NULL,
      author_user TEXT NOT NULL, author_site TEXT NOT NULL, seq_first INTEGER, seq_last INTEGER,
      created_at TEXT NOT NULL, seen TEXT NOT NULL, digest TEXT NOT NULL, signature BLOB, signer_key BLOB);
    CREATE TABLE rtsync_tables(id INTEGER PRIMARY KEY, name TEXT NOT NULL, columns TEXT NOT NULL,
      constraints TEXT NOT NULL, schema_hash TEXT NOT NULL);
    CREATE TABLE rtsync_rows(tid INTEGER NOT NULL, rid INTEGER NOT NULL, op TEXT NOT NULL,
      born INTEGER NOT NULL, born_site TEXT, hlc INTEGER NOT NULL, site TEXT, changed TEXT);
    CREATE TABLE rtsync_cells(tid INTEGER NOT NULL, rid INTEGER NOT NULL, col TEXT NOT NULL,
      hlc INTEGER NOT NULL, site TEXT);
    """

    /// The file name a diff with this id has: `<KSUID>.sqlite`.
    public static func fileName(for id: KSUID) -> String { id.string + "." + fileExtension }

    /// The diff id a file name carries, or nil when the name is not `<KSUID>.sqlite`.
    public static func diffID(fromFileName name: String) -> KSUID? {
        guard name.hasSuffix("." + fileExtension) else { return nil }
        return try? KSUID(string: String(name.dropLast(fileExtension.count + 1)))
    }

    /// The `CREATE TABLE` statement of a carried table: its columns quoted, with no declared type (BLOB affinity, so
    /// values keep their storage class) and nothing else. SQLite keeps this text, without `schemaPrefix`, in
    /// `sqlite_schema`, which is how a reader knows the file declares nothing more.
    package static func carriedTableSQL(name: String, columns: [String], schemaPrefix: String = "") -> String {
        "CREATE TABLE " + schemaPrefix + quoteIdentifier(name) + " (" + columns.map(quoteIdentifier).joined(separator: ", ") + ")"
    }

    /// Which of `rowid`, `_rowid_`, `oid` still names the rowid given these column names.
    package static func rowidAlias(for columns: [String]) -> String? {
        let names = Set(columns.map { $0.lowercased() })
        return ["rowid", "_rowid_", "oid"].first { !names.contains($0) }
    }
}

/// What a diff is for.
public enum DiffKind: String, Sendable, Codable, CaseIterable {
    /// A device's own changes.
    case changes
    /// Rows shared with another user.
    case share
    /// A request for rows from another user.
    case request
    /// The full state of the carried tables, for compaction.
    case snapshot
    /// The present state of the rows some of the author's earlier `changes` diffs touched, standing in for those
    /// diffs (``DiffMetadata/covers``): a device with many of them pending merges this one file instead.
    case rollup

    /// Whether the rows are states (each carries every column with its clock) rather than changes.
    public var carriesState: Bool { self == .snapshot || self == .rollup }
}

/// What a row change does.
public enum RowOperation: String, Sendable, Codable {
    /// Insert or update to the carried values.
    case upsert
    /// Delete the row with the carried key.
    case delete
}

/// The metadata row of a diff.
public struct DiffMetadata: Sendable, Hashable, Codable {
    /// Format version of the file.
    public var formatVersion: Int64
    /// The diff's id (also its file name).
    public var id: KSUID
    /// What the diff is for.
    public var kind: DiffKind
    /// User id of the author.
    public var authorUser: String
    /// Site id of the authoring device database.
    public var authorSite: String
    /// First sequence number of the author site this diff covers (nil when not a changes diff).
    public var sequenceFirst: Int64?
    /// Last sequence number covered.
    public var sequenceLast: Int64?
    /// When the diff was written.
    public var createdAt: Date
    /// The largest clock (raw HLC) the author had applied from each other site when it wrote the diff:
    /// a local value with a clock at or below this was seen by the author, so overwriting it is no conflict.
    public var seen: [String: Int64] = [:]
    /// SHA-256 (hex) over the content, see docs/diff-format.md.
    public var digest: String
    /// Ed25519 signature over the 32 digest bytes, if signed.
    public var signature: [UInt8]?
    /// The signer's Ed25519 public key (raw 32 bytes), if signed.
    public var signerKey: [UInt8]?
    /// The diffs a `rollup` stands in for, by ascending id (nil for every other kind); covered by the digest.
    public var covers: [CoveredDiff]? = nil
}

/// One diff a roll-up stands in for: its id and the author's sequence number it carried.
public struct CoveredDiff: Sendable, Hashable, Codable {
    /// The diff's id.
    public var id: String
    /// Its sequence number (nil when unknown).
    public var sequence: Int64?

    /// Makes an entry.
    public init(id: String, sequence: Int64?) {
        self.id = id
        self.sequence = sequence
    }
}

/// The row and column changes a diff carries for one row.
public struct RowChange: Sendable, Hashable {
    /// Table name.
    public var table: String
    /// Upsert or delete.
    public var operation: RowOperation
    /// The full row in the table definition's column order (for a delete, key columns set and the rest NULL).
    public var values: [SQLValue]
    /// Names of the columns that changed; nil means every column.
    public var changedColumns: [String]?
    /// Clock of the last change to the row (the deletion for a delete).
    public var clock: Clock
    /// Clock of the row's creation: two inserts of one key are told apart by it.
    public var born: Clock
    /// Per-column clocks that differ from `clock` (snapshots carry merged rows).
    public var columnClocks: [String: Clock]

    /// Makes a row change.
    public init(table: String, operation: RowOperation, values: [SQLValue], changedColumns: [String]? = nil,
                clock: Clock, born: Clock, columnClocks: [String: Clock] = [:]) {
        self.table = table
        self.operation = operation
        self.values = values
        self.changedColumns = changedColumns
        self.clock = clock
        self.born = born
        self.columnClocks = columnClocks
    }

    /// The clock of one changed column.
    public func clock(forColumn name: String) -> Clock { columnClocks[name] ?? clock }

    /// The newest clock in the change: its row clock or a later column clock.
    public var latestClock: Clock { columnClocks.values.reduce(clock) { Swift.max($0, $1) } }
}

/// Limits a reader enforces before any caller sees a row.
public struct DiffLimits: Sendable {
    /// Largest file accepted, in bytes.
    public var maxFileBytes: Int64
    /// Most carried tables.
    public var maxTables: Int
    /// Most columns in one carried table.
    public var maxColumns: Int
    /// Most rows in all.
    public var maxRows: Int64

    /// Makes limits.
    public init(maxFileBytes: Int64 = 4 << 30, maxTables: Int = 1000, maxColumns: Int = 2000, maxRows: Int64 = 50_000_000) {
        self.maxFileBytes = maxFileBytes
        self.maxTables = maxTables
        self.maxColumns = maxColumns
        self.maxRows = maxRows
    }

    /// The defaults: 4 GiB, 1,000 tables, 2,000 columns, 50 million rows.
    public static let `default` = DiffLimits()
}

// MARK: - Content digest

/// Feeds values into SHA-256 in the canonical encoding of docs/diff-format.md.
///
/// Small values are gathered in a buffer and hashed in blocks: one SHA-256 update per value would cost
/// more than the hashing itself.
struct CanonicalHasher {
    private var sha = SHA256()
    private var buffer: [UInt8] = []

    init() { buffer.reserveCapacity(Self.flushSize) }

    static let flushSize = 16 * 1024

    private mutating func append(tag: UInt8, _ v: UInt64) {
        buffer.append(tag)
        withUnsafeBytes(of: v.bigEndian) { buffer.append(contentsOf: $0) }
    }

    private mutating func flushIfNeeded() {
        if buffer.count >= Self.flushSize {
            sha.update(data: buffer)
            buffer.removeAll(keepingCapacity: true)
        }
    }

    mutating func add(_ value: SQLValue) {
        switch value {
        case .null: buffer.append(0)
        case .integer(let v): append(tag: 1, UInt64(bitPattern: v))
        case .real(let v): append(tag: 2, v.bitPattern)
        case .text(let s):
            append(tag: 3, UInt64(s.utf8.count))
            buffer.append(contentsOf: s.utf8)
        case .blob(let b):
            append(tag: 4, UInt64(b.count))
            buffer.append(contentsOf: b)
        }
        flushIfNeeded()
    }

    /// Adds column `index` of `statement`'s current row as `add(_:)` would add its `SQLValue`, from SQLite's
    /// own bytes (no Swift value is built). Returns false, having added nothing, for TEXT that is not valid
    /// UTF-8 (a `String` would have replaced those bytes, so they hash as neither form).
    mutating func add(column index: Int, of statement: Statement) -> Bool {
        let type = statement.columnType(index)
        switch type {
        case .null: buffer.append(0)
        case .integer: append(tag: 1, UInt64(bitPattern: statement.int64(index)))
        case .real: append(tag: 2, statement.double(index).bitPattern)
        case .text, .blob:
            let added = statement.withColumnBytes(index) { bytes -> Bool in
                if type == .text && !Self.isValidUTF8(bytes) { return false }
                append(tag: type == .text ? 3 : 4, UInt64(bytes.count))
                buffer.append(contentsOf: bytes)
                return true
            }
            guard added else { return false }
        }
        flushIfNeeded()
        return true
    }

    /// Whether `bytes` are valid UTF-8 (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF).
    /// ASCII, the usual case, is checked eight bytes at a time. (`String(validating:as:)` would do, but needs
    /// macOS 15 / iOS 18.)
    static func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let n = bytes.count
        var i = 0
        while i < n {
            if i + 8 <= n, bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 { i += 8; continue }
            let b = bytes[i]
            if b < 0x80 { i += 1; continue }
            let length: Int
            var low: UInt8 = 0x80, high: UInt8 = 0xBF  // allowed range of the second byte
            switch b {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; high = 0x9F
            case 0xF0: length = 4; low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; high = 0x8F
            default: return false
            }
            guard i + length <= n, (low...high).contains(bytes[i + 1]) else { return false }
            for k in 2..<length where bytes[i + k] & 0xC0 != 0x80 { return false }
            i += length
        }
        return true
    }

    mutating func add<C: Collection<SQLValue>>(_ values: C) { for v in values { add(v) } }
    mutating func addRaw(_ bytes: [UInt8]) {
        buffer.append(contentsOf: bytes)
        flushIfNeeded()
    }

    func finalize() -> [UInt8] {
        var copy = sha
        if !buffer.isEmpty { copy.update(data: buffer) }
        return Array(copy.finalize())
    }

    static func bigEndian(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: v >> (56 - 8 * $0)) } }

    /// digest = SHA-256("rtsync-diff-v1" ‖ meta values ‖ SHA-256(tables) ‖ SHA-256(rows) ‖ SHA-256(cells)).
    static func digest(meta: [SQLValue], tables: CanonicalHasher, rows: CanonicalHasher, cells: CanonicalHasher) -> String {
        var top = CanonicalHasher()
        top.addRaw(Array("rtsync-diff-v1".utf8))
        top.add(meta)
        top.addRaw(tables.finalize())
        top.addRaw(rows.finalize())
        top.addRaw(cells.finalize())
        return top.finalize().hexString
    }
}

extension DiffMetadata {
    /// The metadata values covered by the digest, in order.
    var digestedValues: [SQLValue] {
        [.text(id.string), .text(kind.rawValue), .text(authorUser), .text(authorSite),
         sequenceFirst.map { .integer($0) } ?? .null, sequenceLast.map { .integer($0) } ?? .null,
         .text(ISO8601.format(createdAt, fractional: true)), .text(CanonicalSeen.text(seen))]
    }

    /// What the digest covers of the metadata: `digestedValues`, and for a roll-up the diffs it covers (`id:seq`, comma-separated).
    var digestInput: [SQLValue] {
        kind == .rollup ? digestedValues + [.text((covers ?? []).map { $0.id + ":" + ($0.sequence.map { String($0) } ?? "") }.joined(separator: ","))] : digestedValues
    }
}

/// The JSON stored in `rtsync_tables.constraints`.
struct TableConstraints: Codable {
    var unique: [[String]]
    var foreignKeys: [ForeignKeyDefinition]
    var withoutRowID: Bool
}

/// A few values computed from keys that repeat from diff to diff, kept by key (at most `capacity`; all are
/// dropped when it is reached). A catch-up opens hundreds of one-row diffs of one author: they declare the same
/// tables, carry the same `seen` map until the author applies something new, and rows changed the same way the
/// same `changed` list; checking and decoding each again with Foundation's coders was most of the Swift-side time
/// of opening such a diff.
final class Memo<Key: Hashable, Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Key: Value] = [:]
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// The value kept for `key`, if any.
    func cached(_ key: Key) -> Value? {
        lock.lock(); defer { lock.unlock() }
        return values[key]
    }

    /// Keeps `value` for `key`.
    func remember(_ value: Value, for key: Key) {
        lock.lock(); defer { lock.unlock() }
        if values.count >= capacity { values.removeAll() }
        values[key] = value
    }

    /// The value kept for `key`, or what `make` gives for it (kept when it is not nil).
    func value(for key: Key, _ make: (Key) -> Value?) -> Value? {
        if let known = cached(key) { return known }
        guard let value = make(key) else { return nil }
        remember(value, for: key)
        return value
    }
}

/// A diff's `seen` map (site id to clock) and its canonical JSON text (`JSON.encode`), remembered both ways.
enum CanonicalSeen {
    private static let byText = Memo<String, [String: Int64]>(capacity: 64)
    private static let byValue = Memo<[String: Int64], String>(capacity: 64)

    /// The canonical text of `seen`.
    static func text(_ seen: [String: Int64]) -> String { byValue.value(for: seen) { JSON.encode($0) } ?? JSON.encode(seen) }

    /// The map `text` holds, or nil unless it is one written in the canonical form.
    static func decode(_ text: String) -> [String: Int64]? {
        byText.value(for: text) { t in
            guard let seen = JSON.decode([String: Int64].self, t), JSON.encode(seen) == t else { return nil }
            return seen
        }
    }
}

package enum JSON {
    /// The name lists decoded so far (a diff's `changed` lists, tracked tables' column lists), by text.
    private static let nameLists = Memo<String, [String]>(capacity: 256)

    /// A JSON array of strings, decoded once per distinct text.
    package static func names(_ text: String) -> [String]? { nameLists.value(for: text) { decode([String].self, $0) } }

    static func encode<T: Encodable>(_ value: T) -> String {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? e.encode(value)) ?? Data("null".utf8), as: UTF8.self)
    }
    static func decode<T: Decodable>(_ type: T.Type, _ text: String) -> T? {
        try? JSONDecoder().decode(type, from: Data(text.utf8))
    }
}
