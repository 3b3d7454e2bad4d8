/// What happened to one diff in `apply`.
public enum ApplyStatus: String, Sendable, Codable {
    /// Applied in one transaction.
    case applied
    /// Already applied before, or this device's own diff: nothing changed.
    case skipped
    /// Refused; the database is unchanged and the file was quarantined.
    case rejected
    /// Not applied yet: it refers to rows this device has not received (a foreign key to a row another diff
    /// brings), or the database was busy. The database is unchanged, the file stays where it is, and applying it
    /// again later is expected.
    case deferred
}

/// The outcome of applying one diff.
public struct ApplyReport: Sendable, Codable, Equatable {
    /// The diff file.
    public var file: String
    /// Diff id (nil when the file could not be read).
    public var diffID: String?
    /// Applied, skipped or rejected.
    public var status: ApplyStatus
    /// Why it was skipped or rejected.
    public var reason: String?
    /// Rows inserted.
    public var inserted = 0
    /// Rows updated.
    public var updated = 0
    /// Rows deleted.
    public var deleted = 0
    /// Conflict log entries written.
    public var conflicts = 0
    /// New rows held back: they lack a NOT NULL column this schema has without a default or a declared value
    /// (`SyncDatabase.heldRows()`); merged by `applyHeldRows()` once a value is declared.
    public var held = 0
    /// Tables created from the diff's definitions.
    public var tablesCreated: [String] = []
    /// Columns added from the diff's definitions (`table.column`).
    public var columnsAdded: [String] = []
    /// Columns declared with another type affinity in the diff than here (`table.column: TYPE in the diff, TYPE
    /// here`): values are stored as the local column's affinity makes them, and keys are matched as SQLite
    /// compares them here (11 and '11' are one key of a TEXT or an INTEGER column); a key that would change is
    /// refused.
    public var typeDifferences: [String] = []
    /// Where a rejected file was moved.
    public var quarantinedTo: String?

    /// Makes a report.
    public init(file: String, diffID: String?, status: ApplyStatus, reason: String? = nil) {
        self.file = file
        self.diffID = diffID
        self.status = status
        self.reason = reason
    }
}
