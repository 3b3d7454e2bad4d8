import Foundation

/// Where a long operation is, as values an app can draw its own progress bar from (the CLI renders the same values
/// on a terminal). Byte counts of bucket transfers come from BucketClient's `TransferProgress`, which the same
/// work reports into when the app sets one.
public struct SyncProgress: Sendable, Equatable, CustomStringConvertible {
    /// The step a long operation is in.
    public enum Phase: String, Sendable, Codable, CaseIterable {
        case initialize, cleanup, export, upload, download, apply, cursor, compact, media, backup, restore, catchUp
    }

    /// The step.
    public var phase: Phase
    /// Items of this step finished (diffs, files, rows: see `unit`).
    public var itemsDone: Int
    /// Items of this step in all, when known.
    public var itemsTotal: Int?
    /// What the items are ("diffs", "changes", "rows", "files").
    public var unit: String
    /// The item being worked on (a diff's file name, an object key), when there is one.
    public var item: String?

    /// Makes a progress value.
    public init(phase: Phase, itemsDone: Int = 0, itemsTotal: Int? = nil, unit: String = "diffs", item: String? = nil) {
        self.phase = phase
        self.itemsDone = itemsDone
        self.itemsTotal = itemsTotal
        self.unit = unit
        self.item = item
    }

    /// One line for people: `upload 2/5 diffs: 3Mb…sqlite`.
    public var description: String {
        var text = phase.rawValue
        if let itemsTotal { text += " \(itemsDone)/\(itemsTotal) \(unit)" } else if itemsDone > 0 { text += " \(itemsDone) \(unit)" }
        if let item { text += ": \(item)" }
        return text
    }
}
