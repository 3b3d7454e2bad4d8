import Foundation

extension ObjectStore {
    /// Lists every object in the given folders (key prefixes ending in `/`) in as few LIST pages as possible.
    ///
    /// One folder is a plain ``listAll(prefix:startAfter:)``. Several folders are listed as one listing of
    /// their common parent folder, starting just before the first wanted folder (`start-after`), so
    /// `<user>/images/` and `<user>/recordings/` cost one LIST page when together they hold up to 1,000
    /// objects and nothing lies between them. Pages are followed with their continuation token while the
    /// listing is inside a wanted folder; when a page ends on a key outside every wanted folder (say
    /// `<user>/inbound/...` between images and recordings), the next LIST jumps straight to the next wanted
    /// folder instead of paging through the unwanted keys. So the cost is at most the pages of wanted objects
    /// plus one LIST per gap (keys sorting between `<folder>` and `<folder>/`, such as `<user>/images-old/`,
    /// are paged through like wanted ones).
    ///
    /// Only keys inside a wanted folder are returned, in key order; keys from every other folder are
    /// dropped here, whatever the store returns.
    public func listFolders(_ folders: [String]) async throws -> [ObjectInfo] {
        let wanted = FolderSet(folders)
        guard let first = wanted.folders.first else { return [] }
        if wanted.folders.count == 1 { return try await listAll(prefix: first) }
        var result: [ObjectInfo] = []
        var startAfter: String? = FolderSet.justBefore(first)
        var token: String? = nil
        var previousLast: String? = nil
        while true {
            let page = try await list(prefix: wanted.parent, startAfter: token == nil ? startAfter : nil,
                                      maxKeys: nil, continuationToken: token)
            // Listings run in key order: a page that does not move past the previous one (a server ignoring
            // start-after or handing back the same token) would make this loop forever.
            if let last = page.objects.last?.key {
                if let previousLast, !previousLast.utf8.lexicographicallyPrecedes(last.utf8) {
                    throw BucketError.invalidResponse(request: "LIST \(wanted.parent)", reason: "listing did not advance past \(previousLast.debugDescription)")
                }
                previousLast = last
            }
            for object in page.objects where wanted.contains(object.key) { result.append(object) }
            guard let next = page.nextContinuationToken else { break }
            guard let last = page.objects.last?.key, !wanted.contains(last) else {
                token = next  // inside a wanted folder (or an empty truncated page): keep paging
                continue
            }
            // The page ended in a gap: jump to the next wanted folder, or stop when none is left.
            guard let folder = wanted.folders.first(where: { last.utf8.lexicographicallyPrecedes($0.utf8) }) else { break }
            let before = FolderSet.justBefore(folder)
            if last.utf8.lexicographicallyPrecedes(before.utf8) {
                startAfter = before
                token = nil
            } else {
                token = next
            }
        }
        return result
    }
}

/// A set of folder prefixes to list together, and the parent folder that holds them all.
struct FolderSet {
    /// The folders in UTF-8 order (the order of S3 listings), without duplicates or folders inside another one.
    let folders: [String]
    /// The longest common path prefix of the folders: empty or ending in `/`.
    let parent: String

    init(_ folders: [String]) {
        var sorted = Set(folders.map { $0.hasSuffix("/") || $0.isEmpty ? $0 : $0 + "/" })
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        // A folder inside another one is already listed with it (sorted order puts the outer one first).
        var kept: [String] = []
        for folder in sorted where !kept.contains(where: { Self.key(folder, isIn: $0) }) { kept.append(folder) }
        sorted = kept
        self.folders = sorted
        var parent = ""
        if let first = sorted.first {
            var common = Array(first.split(separator: "/", omittingEmptySubsequences: false).dropLast())
            for folder in sorted.dropFirst() {
                let parts = folder.split(separator: "/", omittingEmptySubsequences: false).dropLast()
                var n = 0
                while n < common.count && n < parts.count && common[n] == parts[parts.startIndex + n] { n += 1 }
                common.removeLast(common.count - n)
            }
            parent = common.map { $0 + "/" }.joined()
        }
        self.parent = parent
    }

    /// Whether `key` lies inside one of the folders.
    func contains(_ key: String) -> Bool {
        folders.contains { Self.key(key, isIn: $0) }
    }

    /// Byte-wise prefix test (`hasPrefix` compares characters, and a combining mark after the `/` would defeat it).
    static func key(_ key: String, isIn folder: String) -> Bool {
        key.utf8.starts(with: folder.utf8)
    }

    /// A `start-after` value just before every key of `folder`: the folder without its trailing `/`.
    static func justBefore(_ folder: String) -> String {
        String(folder.dropLast())
    }
}
