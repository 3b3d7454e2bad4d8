import Foundation

/// A media folder that syncs between `<documents>/<kind>/` and `<user>/<kind>/` in the bucket.
public enum MediaKind: String, CaseIterable, Codable, Sendable {
    /// Original recording files.
    case recordings
    /// Downscaled images.
    case images
}
