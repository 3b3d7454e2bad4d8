/// Why a diff file was rejected or could not be written; every case names the file.
public enum DiffFormatError: Error, Sendable, Equatable, CustomStringConvertible {
    case fileNotFound(file: String)
    case notSQLite(file: String)
    case corrupt(file: String, detail: String)
    case unsupportedVersion(file: String, found: Int64)
    case missingTable(file: String, table: String)
    case reservedTableName(file: String, table: String)
    case invalidName(file: String, name: String, reason: String)
    case containsTrigger(file: String, name: String)
    case containsView(file: String, name: String)
    case unexpectedObject(file: String, type: String, name: String)
    case invalidMetadata(file: String, field: String, reason: String)
    case invalidTableDefinition(file: String, table: String, reason: String)
    case schemaHashMismatch(file: String, table: String)
    case invalidRow(file: String, table: String, row: Int64, reason: String)
    case digestMismatch(file: String, expected: String, actual: String)
    case limitExceeded(file: String, what: String, limit: Int64)
    case fileNameMismatch(file: String, diffID: String)
    case writeFailed(file: String, reason: String)
    /// A diff compressed for transport (`DiffTransport`) that does not expand, or would expand past its limit.
    case badCompression(file: String, reason: String)

    /// The file the error is about.
    public var file: String {
        switch self {
        case .fileNotFound(let f), .notSQLite(let f), .corrupt(let f, _), .unsupportedVersion(let f, _),
             .missingTable(let f, _), .reservedTableName(let f, _), .invalidName(let f, _, _),
             .containsTrigger(let f, _), .containsView(let f, _), .unexpectedObject(let f, _, _),
             .invalidMetadata(let f, _, _), .invalidTableDefinition(let f, _, _), .schemaHashMismatch(let f, _),
             .invalidRow(let f, _, _, _), .digestMismatch(let f, _, _), .limitExceeded(let f, _, _),
             .fileNameMismatch(let f, _), .writeFailed(let f, _), .badCompression(let f, _):
            return f
        }
    }

    /// What went wrong, without the file name.
    public var reason: String {
        switch self {
        case .fileNotFound: return "no such file"
        case .notSQLite: return "not a SQLite database (bad header)"
        case .corrupt(_, let d): return "damaged or truncated database: \(d)"
        case .unsupportedVersion(_, let v): return "unsupported diff format version \(v) (this rtsync reads version \(DiffFile.formatVersion))"
        case .missingTable(_, let t): return "required table \(t) is missing"
        case .reservedTableName(_, let t): return "carries reserved table '\(t)' (names starting with sqlite_ or rtsync_ may not be carried)"
        case .invalidName(_, let n, let r): return "invalid name '\(n)': \(r)"
        case .containsTrigger(_, let n): return "contains trigger '\(n)' (diffs may not carry triggers)"
        case .containsView(_, let n): return "contains view '\(n)' (diffs may not carry views)"
        case .unexpectedObject(_, let t, let n): return "contains unexpected \(t) '\(n)'"
        case .invalidMetadata(_, let f, let r): return "invalid metadata field \(f): \(r)"
        case .invalidTableDefinition(_, let t, let r): return "invalid definition of table '\(t)': \(r)"
        case .schemaHashMismatch(_, let t): return "schema hash of table '\(t)' does not match its definition"
        case .invalidRow(_, let t, let r, let why): return "invalid row \(r) of table '\(t)': \(why)"
        case .digestMismatch(_, let e, let a): return "content digest mismatch (metadata says \(e), content hashes to \(a)): the file was altered or damaged"
        case .limitExceeded(_, let w, let l): return "\(w) exceeds the limit of \(l)"
        case .fileNameMismatch(_, let id): return "file name does not match its diff id \(id)"
        case .writeFailed(_, let r): return "could not write diff: \(r)"
        case .badCompression(_, let r): return "compressed diff (rtsync's zlib transport encoding) refused: \(r)"
        }
    }

    /// What the user can do about it.
    public var hint: String {
        switch self {
        case .unsupportedVersion: return "upgrade rtsync on this device to read newer diffs"
        case .digestMismatch, .corrupt, .notSQLite, .badCompression: return "fetch the diff again from the bucket; if it stays bad, ask its author to re-export"
        case .writeFailed: return "check the output folder exists, is writable and has free space"
        case .fileNotFound: return "check the path"
        default: return "this file was not written by a compatible rtsync; it has been left unapplied"
        }
    }

    public var description: String { "\(reason) (\(file))" }
}
