import Foundation

/// Checks that object keys map to paths inside a local folder.
///
/// Used by the local-folder backend, by downloads into a folder and by media pull: a listing entry
/// such as `../../etc/passwd`, `/etc/passwd`, `a//b` or one containing NUL is refused, never written.
public enum SafeKey {
    /// Returns the path segments of `key`, or throws ``BucketError/unsafeKey(key:reason:)``.
    public static func segments(of key: String) throws -> [String] {
        if key.isEmpty { throw BucketError.unsafeKey(key: key, reason: "empty key") }
        if key.utf8.contains(0) { throw BucketError.unsafeKey(key: key, reason: "contains NUL") }
        if key.hasPrefix("/") { throw BucketError.unsafeKey(key: key, reason: "absolute path") }
        if key.contains("\\") { throw BucketError.unsafeKey(key: key, reason: "contains a backslash") }
        let parts = key.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for part in parts {
            if part.isEmpty { throw BucketError.unsafeKey(key: key, reason: "empty path segment") }
            if part == "." || part == ".." { throw BucketError.unsafeKey(key: key, reason: "'\(part)' path segment") }
            if part.utf8.count > 255 { throw BucketError.unsafeKey(key: key, reason: "path segment longer than 255 bytes") }
        }
        return parts
    }

    /// Returns the file URL of `key` under `root`, or throws when the key could escape it.
    public static func fileURL(root: URL, key: String) throws -> URL {
        var url = root
        for part in try segments(of: key) {
            url.appendPathComponent(part, isDirectory: false)
        }
        return url
    }
}
