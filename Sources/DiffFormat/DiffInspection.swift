import Foundation

/// A summary of a diff file for people and scripts (`rtsync diff inspect`).
public struct DiffInspection: Sendable, Codable {
    /// One carried table.
    public struct Table: Sendable, Codable {
        /// Table name.
        public var name: String
        /// Column names.
        public var columns: [String]
        /// Primary key columns.
        public var primaryKey: [String]
        /// Schema hash (see `TableDefinition.schemaHash`).
        public var schemaHash: String
        /// Upserted rows.
        public var upserts: Int
        /// Deleted rows.
        public var deletes: Int
    }

    /// The file.
    public var file: String
    /// File size in bytes.
    public var bytes: Int64
    /// Whether every check passed (always true for a built inspection; invalid files throw).
    public var valid: Bool
    /// Format version.
    public var formatVersion: Int64
    /// Diff id.
    public var id: String
    /// Time the id encodes (UTC, ISO-8601).
    public var idTime: String
    /// Kind of diff.
    public var kind: DiffKind
    /// Author user id.
    public var authorUser: String
    /// Author site id.
    public var authorSite: String
    /// Sequence range of the author site, if any.
    public var sequence: [Int64]?
    /// Creation time (UTC, ISO-8601).
    public var createdAt: String
    /// Content digest.
    public var digest: String
    /// Whether a signature is present (checked against trusted keys by the sync engine).
    public var signed: Bool
    /// Carried tables.
    public var tables: [Table]

    /// Builds the inspection of an already validated diff.
    public init(reader: DiffReader) {
        let m = reader.metadata
        file = reader.url.path
        bytes = ((try? FileManager.default.attributesOfItem(atPath: reader.url.path)[.size]) as? NSNumber)?.int64Value ?? 0
        valid = true
        formatVersion = m.formatVersion
        id = m.id.string
        idTime = ISO8601.format(m.id.date)
        kind = m.kind
        authorUser = m.authorUser
        authorSite = m.authorSite
        sequence = m.sequenceFirst.flatMap { a in m.sequenceLast.map { [a, $0] } }
        createdAt = ISO8601.format(m.createdAt, fractional: true)
        digest = m.digest
        signed = m.signature != nil
        tables = reader.tables.map { t in
            let c = reader.counts[t.name] ?? OperationCounts()
            return Table(name: t.name, columns: t.columnNames, primaryKey: t.primaryKeyColumns, schemaHash: t.schemaHash, upserts: c.upserts, deletes: c.deletes)
        }
    }

    /// Opens, validates and summarizes a diff file.
    /// - Throws: `DiffFormatError` when the file is invalid.
    public static func inspect(_ url: URL) throws -> DiffInspection { DiffInspection(reader: try DiffReader(url: url)) }

    /// Human-readable text.
    public var text: String {
        var lines = [
            "file:        \(file) (\(bytes) bytes)",
            "valid:       yes (structure, limits and digest checked)",
            "format:      version \(formatVersion)",
            "id:          \(id) (\(idTime))",
            "kind:        \(kind.rawValue)",
            "author:      user \(authorUser.isEmpty ? "-" : authorUser), site \(authorSite)",
            "sequence:    \(sequence.map { "\($0[0])...\($0[1])" } ?? "-")",
            "created:     \(createdAt)",
            "digest:      \(digest)",
            "signed:      \(signed ? "yes" : "no")",
            "tables:      \(tables.count)",
        ]
        for t in tables {
            lines.append("  \(t.name): \(t.upserts) upserts, \(t.deletes) deletes; key (\(t.primaryKey.joined(separator: ", "))); schema \(t.schemaHash.prefix(16))")
        }
        return lines.joined(separator: "\n")
    }
}
