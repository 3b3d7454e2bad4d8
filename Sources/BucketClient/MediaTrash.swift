import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Deleted media kept recoverable: `<user>/trash/<UTC date>/<documents-relative path>` in the bucket.
///
/// Media sync with ``MediaSyncOptions/delete`` moves an object here instead of destroying it when its file was
/// deleted on this device, and prunes entries older than ``MediaSyncOptions/trashDays``. ``restore(path:)`` puts
/// the newest deleted version back, so the next sync of every device downloads it again.
public struct MediaTrash: Sendable {
    /// One deleted object.
    public struct Item: Sendable, Codable, Equatable {
        /// The bucket key of the kept copy.
        public var key: String
        /// Documents-relative path the object had (`images/a.jpg`).
        public var path: String
        /// When it was deleted (whole seconds, UTC).
        public var deletedAt: Date
        /// Size in bytes.
        public var size: Int64
    }

    /// The bucket.
    public let store: any ObjectStore
    /// The user id: the first segment of the bucket keys.
    public let user: String
    /// A local folder for the temporary copy made while moving an object (objects are copied by download and put).
    public let scratch: URL

    /// A trash for `user`'s media in `store`, using `scratch` for temporary files.
    public init(store: any ObjectStore, user: String, scratch: URL) {
        self.store = store
        self.user = user
        self.scratch = scratch
    }

    /// The trash folder, `<user>/trash/`.
    public var prefix: String { "\(user)/trash/" }

    /// The key a version of `path` deleted at `date` is kept under.
    public func key(for path: String, at date: Date) -> String {
        "\(prefix)\(MediaConflict.stamp(date))/\(path)"
    }

    /// Everything in the trash, newest first.
    /// - Throws: ``BucketError`` when the bucket cannot be listed.
    public func list() async throws -> [Item] {
        var items: [Item] = []
        for object in try await store.listAll(prefix: prefix) {
            let rest = String(decoding: object.key.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
            guard let slash = rest.firstIndex(of: "/"), let date = Self.date(fromStamp: String(rest[..<slash])) else { continue }
            items.append(Item(key: object.key, path: String(rest[rest.index(after: slash)...]), deletedAt: date, size: object.size))
        }
        return items.sorted { $0.deletedAt != $1.deletedAt ? $0.deletedAt > $1.deletedAt : $0.key < $1.key }
    }

    /// Moves the object of `path` (`<user>/<path>`) to the trash: copies it, then deletes the original.
    /// - Throws: ``BucketError`` naming the key when the copy or the delete fails (the original is kept then).
    @discardableResult
    public func move(path: String, at date: Date = Date()) async throws -> String {
        let target = key(for: path, at: date)
        try await copy(from: "\(user)/\(path)", to: target)
        try await store.delete(key: "\(user)/\(path)")
        return target
    }

    /// Puts the newest deleted version of `path` back at `<user>/<path>` and removes it from the trash.
    /// - Throws: ``BucketError/notFound(key:)`` (the trash key it looked for) when the trash holds no version of
    ///   `path`; ``BucketError/preconditionFailed(key:)`` when `<user>/<path>` exists (nothing is overwritten).
    @discardableResult
    public func restore(path: String) async throws -> Item {
        guard let item = try await list().first(where: { ExactPath($0.path) == ExactPath(path) }) else {
            throw BucketError.notFound(key: "\(prefix)<date>/\(path)")
        }
        let original = "\(user)/\(path)"
        if try await store.exists(key: original) { throw BucketError.preconditionFailed(key: original) }
        try await copy(from: item.key, to: original)
        try await store.delete(key: item.key)
        return item
    }

    /// Deletes trash entries deleted more than `days` days before `now`; returns their keys.
    /// - Throws: ``BucketError`` when the bucket cannot be listed or an entry cannot be deleted.
    @discardableResult
    public func prune(olderThan days: Int, now: Date = Date()) async throws -> [String] {
        guard days > 0 else { return [] }
        let cutoff = now.addingTimeInterval(-Double(days) * 86_400)
        var pruned: [String] = []
        for item in try await list() where item.deletedAt < cutoff {
            try await store.delete(key: item.key)
            pruned.append(item.key)
        }
        return pruned
    }

    /// Copies an object inside the bucket (``ObjectStore/serverSideCopy(from:to:)``), else by downloading it to
    /// `scratch` and putting it (every backend can; the download checks the bytes it got).
    func copy(from source: String, to target: String) async throws {
        if try await store.serverSideCopy(from: source, to: target) != nil { return }
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let tmp = LocalFiles.temporaryURL(beside: scratch.appendingPathComponent("trash"))
        defer { LocalFiles.removeDownload(at: tmp) }
        try await store.download(key: source, to: tmp)
        try await store.put(key: target, fileURL: tmp)
    }

    /// Parses `2026-11-24T071859Z`.
    static func date(fromStamp stamp: String) -> Date? {
        HTTPDates.posixFormatter("yyyy-MM-dd'T'HHmmss'Z'", timeZone: "UTC").date(from: stamp)
    }
}
