import DiffFormat
import Foundation

extension RemoteStore {
    /// The prefix of a user's backups in the bucket (`<user>/backups/`), where init looks for the newest one.
    public static func backupsPrefix(user: String) -> String { user + "/backups/" }

    /// Rotates the user's backups in the bucket with the rule of local ones: the newest `keep` (at least one)
    /// `<KSUID>.sqlite` objects stay, older ones are deleted. The newest is what a new device's init downloads
    /// and what a compaction uploaded last (diffs it pruned are in it), so it always stays; keys that are not
    /// KSUID-named backups are never touched. Returns the keys deleted.
    /// - Throws: the store's errors (what was deleted before stays deleted; the next rotation does the rest).
    @discardableResult
    public func rotateBackups(user: String, keep: Int, retry: RetryPolicy = RetryPolicy()) async throws -> [String] {
        let prefix = Self.backupsPrefix(user: user)
        let backups = try await retry.run { try await list(prefix: prefix) }
            .map(\.key)
            .filter { key in
                let name = key.dropFirst(prefix.count)
                return name.hasSuffix(".sqlite") && !name.contains("/") && (try? KSUID(string: String(name.dropLast(7)))) != nil
            }
            .sorted(by: >)
        var deleted: [String] = []
        for key in backups.dropFirst(max(1, keep)) {
            try await retry.run { try await delete(key: key) }
            deleted.append(key)
        }
        return deleted
    }
}
