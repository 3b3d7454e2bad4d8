import DiffFormat
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension RemoteStore {
    /// The prefix of a user's backups in the bucket (`<user>/backups/`), where init looks for the newest one.
    public static func backupsPrefix(user: String) -> String { user + "/backups/" }

    /// Rotates the user's backups in the bucket with the rule of local ones: the newest `keep` (at least one)
    /// `<KSUID>.sqlite` objects stay, older ones are deleted. The newest is what a new device's init downloads
    /// and what a compaction uploaded last (diffs it pruned are in it), so it always stays; keys that are not
    /// KSUID-named backups are never touched. Returns the keys deleted.
    /// - Throws: the store's errors (what was deleted before stays deleted; the next rotation does the rest).
    @discardableResult
    public func rotateBackups(user: String, keep: Int, retry: RemoteRetryPolicy = RemoteRetryPolicy()) async throws -> [String] {
        let prefix = Self.backupsPrefix(user: user)
        // The last compaction's snapshot stays whatever its name sorts as: it holds the diffs compaction pruned.
        let snapshot = try await latestSnapshotKey(user: user, retry: retry)
        let backups = try await retry.run { try await list(prefix: prefix) }
            .map(\.key)
            .filter { key in
                let name = key.dropFirst(prefix.count)
                return name.hasSuffix(".sqlite") && !name.contains("/") && (try? KSUID(string: String(name.dropLast(7)))) != nil
            }
            .sorted(by: >)
        var deleted: [String] = []
        for key in backups.dropFirst(max(1, keep)) where key != snapshot {
            try await retry.run { try await delete(key: key) }
            deleted.append(key)
        }
        return deleted
    }

    /// A private temp file for the snapshot pointer in the system temp folder, named with this process's id
    /// (`rtsync-snapshot-<pid>-<KSUID>.json`) so `HomeDebris` removes what a killed process left.
    static func snapshotPointerTemp() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent(HomeDebris.snapshotTempPrefix + "\(getpid())-\(KSUID.generate().string).json")
    }

    /// Where compaction records the key of its snapshot (`<user>/snapshot.json`).
    public static func snapshotPointerKey(user: String) -> String { user + "/snapshot.json" }

    /// The key of the last compaction's snapshot, which holds every diff compaction has pruned; nil when no
    /// compaction has recorded one (or the record cannot be read).
    public func latestSnapshotKey(user: String, retry: RemoteRetryPolicy = RemoteRetryPolicy()) async throws -> String? {
        let key = Self.snapshotPointerKey(user: user)
        guard let object = try await retry.run({ try await list(prefix: key) }).first(where: { $0.key == key }) else { return nil }
        let file = Self.snapshotPointerTemp()
        defer { try? FileManager.default.removeItem(at: file) }
        try await retry.run { try await download(object, to: file) }
        guard let data = try? Data(contentsOf: file), let pointer = try? JSONDecoder().decode([String: String].self, from: data),
              let target = pointer["key"], target.hasPrefix(Self.backupsPrefix(user: user)), !target.contains("..") else { return nil }
        return target
    }

    /// Records `key` as the last compaction's snapshot.
    public func recordSnapshot(user: String, key: String, retry: RemoteRetryPolicy = RemoteRetryPolicy()) async throws {
        let file = Self.snapshotPointerTemp()
        defer { try? FileManager.default.removeItem(at: file) }
        // A private temp file, written plainly (an atomic write would leave a second temp if killed).
        try JSONEncoder().encode(["key": key, "at": ISO8601.format(Date(), fractional: true)]).write(to: file)
        try await retry.run { try await upload(file: file, key: Self.snapshotPointerKey(user: user), ifAbsent: false) }
    }
}
