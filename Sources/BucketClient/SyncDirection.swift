import Foundation

/// Which way media sync copies files.
public enum SyncDirection: String, CaseIterable, Codable, Sendable {
    /// Local to bucket only.
    case push
    /// Bucket to local only.
    case pull
    /// Both ways.
    case both
}
