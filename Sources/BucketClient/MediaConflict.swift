import Foundation

/// A media file changed on both sides since it was last synced: which version won, and where the other was kept.
///
/// The losing version is never overwritten: it is kept beside the winner as
/// `name (conflict <device> <UTC date>).ext`, locally and in the bucket (unless the run copies one way only).
public struct MediaConflict: Codable, Sendable, Hashable {
    /// Which copy of the file lost.
    public enum Side: String, Codable, Sendable {
        /// The version in the local documents folder.
        case local
        /// The version in the bucket.
        case remote
    }

    /// Documents-relative path of the file, which now holds the winning version.
    public var path: String
    /// Documents-relative path of the kept losing version.
    public var copy: String
    /// The side whose version lost.
    public var loser: Side
    /// The device that found the conflict and kept the copy (the name's `<device>`).
    public var device: String
    /// When the conflict was resolved.
    public var at: Date
    /// Whether the copy is in the local documents folder.
    public var keptLocally: Bool
    /// Whether the copy was uploaded to the bucket (so other devices get it too).
    public var keptInBucket: Bool

    /// Creates a record.
    public init(path: String, copy: String, loser: Side, device: String, at: Date, keptLocally: Bool, keptInBucket: Bool) {
        self.path = path
        self.copy = copy
        self.loser = loser
        self.device = device
        self.at = at
        self.keptLocally = keptLocally
        self.keptInBucket = keptInBucket
    }

    /// The path of the conflict copy of `path`: `images/a.jpg` -> `images/a (conflict d1 2026-11-24T071859Z).jpg`.
    ///
    /// `device` is reduced to letters, digits, `-` and `_` (at most 16), so the name stays portable.
    public static func copyPath(of path: String, device: String, at date: Date, attempt: Int = 1) -> String {
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { String(path[...$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        // The extension is what follows the last dot, unless the dot starts the name (".hidden").
        var base = name, ext = ""
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            base = String(name[..<dot])
            ext = String(name[dot...])
        }
        let tag = " (conflict \(safeDevice(device)) \(stamp(date))\(attempt > 1 ? " \(attempt)" : ""))"
        // A file name may hold 255 bytes: shorten the base, never the tag or the extension.
        while !base.isEmpty && (base + tag + ext).utf8.count > 255 { base.removeLast() }
        return "\(folder)\(base)\(tag)\(ext)"
    }

    /// The device text used in copy names.
    static func safeDevice(_ device: String) -> String {
        let kept = device.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) && $0.isASCII || $0 == "-" || $0 == "_" }
        let text = String(String.UnicodeScalarView(kept.prefix(16)))
        return text.isEmpty ? "device" : text
    }

    /// `2026-11-24T071859Z`: UTC, no colons (which some filesystems refuse).
    static func stamp(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(format: "%04d-%02d-%02dT%02d%02d%02dZ", c.year ?? 0, c.month ?? 0, c.day ?? 0, c.hour ?? 0, c.minute ?? 0, c.second ?? 0)
    }
}
