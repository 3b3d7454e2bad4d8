import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A folder cache for media fetched from HTTP(S) or `file://` URLs (CDN images and recordings).
///
/// Each fetch of a cached URL revalidates with `If-None-Match` / `If-Modified-Since` (a `304` costs
/// no body); when the network fails, the cached copy is served. Past ``maxBytes`` the least recently
/// used files are evicted. Files are written to a temporary name and renamed, so a failed or
/// truncated download never replaces a good cached copy. A body must have the size `Content-Length` (and any
/// `Content-Range`) declares and match any full-object checksum the server sends (`x-amz-checksum-*`); one that
/// does not is fetched again, then reported. Works the same in demo and normal mode.
public actor DownloadCache {
    /// How a fetch was satisfied.
    public enum Status: String, Codable, Sendable {
        /// Fetched (first time, or the resource changed).
        case downloaded
        /// The server confirmed the cached copy (HTTP 304, or same size and mtime for `file://`).
        case revalidated
        /// The server could not be reached; the cached copy was served.
        case offline
    }

    /// The result of one fetch.
    public struct Result: Codable, Sendable {
        /// The URL that was fetched.
        public var url: String
        /// Where the cached copy is.
        public var fileURL: URL
        /// How it was satisfied.
        public var status: Status
        /// Size in bytes.
        public var size: Int64
    }

    struct Entry: Codable {
        var fileName: String
        var etag: String?
        var lastModified: String?
        var size: Int64
        var lastAccess: Date
    }

    struct Index: Codable {
        var version = 1
        var entries: [String: Entry] = [:]
    }

    /// The cache folder.
    public let folder: URL
    /// Size cap in bytes; least recently used files are evicted past it.
    public let maxBytes: Int64
    /// Counts network requests (`GET`) and file copies (`COPY`).
    public nonisolated let requestCounter = RequestCounter()
    /// Counts fetched bodies checked against a full-object checksum the server sent (`x-amz-checksum-*`), by
    /// algorithm, and composite checksums that could not be checked (`COMPOSITE`).
    public nonisolated let checksumCounter = RequestCounter()
    private var index: Index
    private let session: URLSession
    private let retry: RetryPolicy

    /// Opens (or creates) a cache in `folder` holding at most `maxBytes`.
    /// - Throws: ``BucketError/localIO(path:description:)`` when the folder cannot be created.
    public init(folder: URL, maxBytes: Int64, retry: RetryPolicy = RetryPolicy()) throws {
        self.folder = folder
        self.maxBytes = maxBytes
        self.retry = retry
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        } catch {
            throw BucketError.localIO(path: folder.path, description: error.localizedDescription)
        }
        let indexURL = folder.appendingPathComponent("index.json")
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        index = (try? decoder.decode(Index.self, from: Data(contentsOf: indexURL))) ?? Index()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = 60
        session = URLSession(configuration: configuration)
    }

    /// Total bytes of cached files.
    public var totalBytes: Int64 { index.entries.values.reduce(0) { $0 + $1.size } }

    /// The cached file for `url`, if any, without any request.
    public func cachedFile(for url: URL) -> URL? {
        index.entries[url.absoluteString].map { folder.appendingPathComponent($0.fileName) }
    }

    /// The plaintext of `range` (nil: all) of an object encrypted with the user's content keys (``EncryptionFormat``)
    /// at `url`, opening only the header and the chunks that hold the range. A whole read, and any read of a URL
    /// already cached, goes through ``fetch(_:)`` (cached as it is, ciphertext, and revalidated); a ranged read of an
    /// http(s) URL not in the cache fetches just the header and those chunks (Range requests) and caches nothing. The
    /// cache keeps ciphertext only: plaintext exists in memory, never in the cache folder. `name` is the media path an
    /// object under an encrypted name is bound to.
    /// - Returns: the cache's result (nil for an uncached ranged read) and the plaintext.
    /// - Throws: ``BucketError`` as ``fetch(_:)``; ``EncryptionError`` naming the URL for a wrong key, a tampered,
    ///   truncated or plaintext object in the chunks read.
    public func decrypted(_ url: URL, range: ByteRange? = nil, keyring: ContentKeyring, name: String? = nil) async throws -> (result: Result?, plaintext: Data) {
        let object = url.absoluteString
        if let range, ["http", "https"].contains(url.scheme?.lowercased() ?? ""), cachedFile(for: url).map({ FileManager.default.fileExists(atPath: $0.path) }) != true {
            let (head, total) = try await getRange(url, ByteRange(start: 0, end: Int64(EncryptionFormat.headerSize) - 1))
            let header = try EncryptionFormat.Header(head, object: object)
            if header.algorithm == EncryptionFormat.algorithmShareX25519 { throw EncryptionError.notAShare(object: object) }
            let cipher = try EncryptionFormat.ChunkCipher(header: header, keyring: keyring, object: object, name: name)
            let span = EncryptionFormat.chunkSpan(plainStart: range.start, plainEnd: range.end)
            let body = try await getRange(url, span.range).data
            if body.isEmpty && span.first > 0 {
                // Past the end: empty when the object's last chunk is its final one, else it was cut short.
                guard let total, let plainSize = EncryptionFormat.plaintextSize(ciphertextSize: total) else {
                    throw EncryptionError.malformed(object: object, reason: "its size is not an encrypted object's")
                }
                let last = EncryptionFormat.chunkCount(plaintextSize: plainSize) - 1
                let tail = try await getRange(url, ByteRange(start: EncryptionFormat.chunkOffset(last))).data
                guard try cipher.openEither(tail, index: last).1 else { throw EncryptionError.truncated(object: object) }
                return (nil, Data())
            }
            return (nil, try EncryptionFormat.openSpan(body, span: span, range: range, cipher: cipher))
        }
        let result = try await fetch(url)
        let plain = try EncryptionFormat.decrypt(file: result.fileURL, range: range, keyring: keyring, object: object, name: name)
        return (result, plain)
    }

    /// Bytes `range` of `url` (a 206 answer, or the slice of a 200 from a server that ignores ranges; empty past the
    /// end) and the object's total size when the answer gives it; retried like ``fetch(_:)``.
    private func getRange(_ url: URL, _ range: ByteRange) async throws -> (data: Data, total: Int64?) {
        let key = url.absoluteString
        var request = URLRequest(url: url)
        request.setValue("bytes=\(range.start)-\(range.end.map(String.init) ?? "")", forHTTPHeaderField: "Range")
        return try await getWithRetries(request, key: key) { data, http in
            let contentRange = http.value(forHTTPHeaderField: "Content-Range")
            if http.statusCode == 416 {
                // "bytes */TOTAL": the range starts past the end.
                return (Data(), contentRange.flatMap { $0.split(separator: "/").last.flatMap { Int64($0) } })
            }
            if http.statusCode == 404 { throw BucketError.notFound(key: key) }
            if http.statusCode == 200 {
                let from = Int(min(range.start, Int64(data.count)))
                let to = range.end.map { Int(min($0 + 1, Int64(data.count))) } ?? data.count
                return (data.subdata(in: from..<max(from, to)), Int64(data.count))
            }
            guard http.statusCode == 206 else {
                throw BucketError.httpError(request: "GET \(key)", status: http.statusCode, code: nil, message: nil)
            }
            guard let part = S3Store.contentRange(contentRange), part.start == range.start, Int64(data.count) == part.end - part.start + 1 else {
                throw BucketError.truncated(key: key, expected: range.end.map { $0 - range.start + 1 } ?? -1, received: Int64(data.count))
            }
            return (data, part.total)
        }
    }

    /// Sends the GET `request` and hands the answer to `handle`: a retryable status is asked again, and what `handle`
    /// or the transport throws is retried as the policy allows (`RetryPolicy.allowsRetry`). A transport failure that
    /// is not retried ends as `offline()` when given, else as `BucketError.transport`.
    private func getWithRetries<T>(_ request: URLRequest, key: String, offline: (() -> T)? = nil,
                                   _ handle: (Data, HTTPURLResponse) throws -> T) async throws -> T {
        var attempt = 0
        while true {
            requestCounter.record("GET")
            do {
                let (data, response) = try await session.data(for: request)
                guard let http = response as? HTTPURLResponse else {
                    throw BucketError.invalidResponse(request: "GET \(key)", reason: "not an HTTP response")
                }
                if RetryPolicy.isRetryable(status: http.statusCode), attempt + 1 < retry.maxAttempts {
                    try await retry.wait(beforeRetry: attempt)
                    attempt += 1
                    continue
                }
                return try handle(data, http)
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                if retry.allowsRetry(after: error, attempt: attempt) {
                    try await retry.wait(beforeRetry: attempt)
                    attempt += 1
                    continue
                }
                if error is BucketError { throw error }
                if let offline { return offline() }
                throw BucketError.transport(request: "GET \(key)", description: error.localizedDescription)
            }
        }
    }

    /// Fetches `url` into the cache (revalidating a cached copy) and returns where it is.
    /// - Throws: ``BucketError`` when it cannot be fetched and nothing is cached.
    public func fetch(_ url: URL) async throws -> Result {
        let key = url.absoluteString
        let result: Result
        switch url.scheme?.lowercased() {
        case "http", "https": result = try await fetchHTTP(url, key: key)
        case "file": result = try fetchFile(url, key: key)
        default: throw BucketError.unsupportedURL(url: key, reason: "the download cache fetches http, https and file URLs")
        }
        evict(keeping: key)
        try saveIndex()
        return result
    }

    // MARK: - Fetching

    private func fileName(for key: String, url: URL) -> String {
        let ext = url.pathExtension.isEmpty || url.pathExtension.count > 8 ? "" : "." + url.pathExtension
        return String(Hashing.sha256Hex(Data(key.utf8)).prefix(32)) + ext
    }

    private func fetchHTTP(_ url: URL, key: String) async throws -> Result {
        let cached = index.entries[key].flatMap { entry in
            FileManager.default.fileExists(atPath: folder.appendingPathComponent(entry.fileName).path) ? entry : nil
        }
        var request = URLRequest(url: url)
        if let cached {
            if let etag = cached.etag { request.setValue(etag, forHTTPHeaderField: "If-None-Match") }
            if let lastModified = cached.lastModified { request.setValue(lastModified, forHTTPHeaderField: "If-Modified-Since") }
        }
        // Offline-first: when the server cannot be reached, serve what we have.
        let offline: (() -> Result)? = cached.map { cached in {
            self.index.entries[key]?.lastAccess = Date()
            return Result(url: key, fileURL: self.folder.appendingPathComponent(cached.fileName), status: .offline, size: cached.size)
        } }
        return try await getWithRetries(request, key: key, offline: offline) { data, http in
            if http.statusCode == 304, let cached {
                index.entries[key]?.lastAccess = Date()
                return Result(url: key, fileURL: folder.appendingPathComponent(cached.fileName), status: .revalidated, size: cached.size)
            }
            if http.statusCode == 404 { throw BucketError.notFound(key: key) }
            guard (200..<300).contains(http.statusCode) else {
                throw BucketError.httpError(request: "GET \(key)", status: http.statusCode, code: nil, message: nil)
            }
            if http.value(forHTTPHeaderField: "Content-Encoding") == nil,
               let length = http.value(forHTTPHeaderField: "Content-Length").flatMap({ Int64($0) }), length != Int64(data.count) {
                throw BucketError.truncated(key: key, expected: length, received: Int64(data.count))
            }
            if http.statusCode == 206 || http.value(forHTTPHeaderField: "Content-Range") != nil {
                // Nothing asked for a range: a part of the resource must never be cached as all of it.
                let part = S3Store.contentRange(http.value(forHTTPHeaderField: "Content-Range"))
                guard let part, part.start == 0, part.end == part.total - 1, Int64(data.count) == part.total else {
                    throw BucketError.truncated(key: key, expected: part?.total ?? -1, received: Int64(data.count))
                }
            }
            // A server that sends a full-object checksum (S3 and some CDNs in front of it) has it checked.
            let found = ObjectChecksum.fromHeaders { http.value(forHTTPHeaderField: $0) }
            if found.compositeSkipped { checksumCounter.record("COMPOSITE") }
            if let checksum = found.checksum {
                guard checksum.matches(checksum.digest(of: data)) else {
                    throw BucketError.checksumMismatch(key: key, algorithm: checksum.algorithm.rawValue)
                }
                checksumCounter.record(checksum.algorithm.rawValue)
            }
            let name = cached?.fileName ?? fileName(for: key, url: url)
            let destination = folder.appendingPathComponent(name)
            let tmp = try LocalFiles.writeTemporary(data, beside: destination)
            try LocalFiles.moveAtomically(tmp, to: destination)
            index.entries[key] = Entry(fileName: name, etag: http.value(forHTTPHeaderField: "ETag"),
                                       lastModified: http.value(forHTTPHeaderField: "Last-Modified"),
                                       size: Int64(data.count), lastAccess: Date())
            return Result(url: key, fileURL: destination, status: .downloaded, size: Int64(data.count))
        }
    }

    private func fetchFile(_ url: URL, key: String) throws -> Result {
        guard let st = FileStat.of(url.path), st.isRegularFile else { throw BucketError.notFound(key: key) }
        let validator = "\(st.size)-\(st.mtimeNanoseconds)"
        if let cached = index.entries[key], cached.etag == validator,
           FileManager.default.fileExists(atPath: folder.appendingPathComponent(cached.fileName).path) {
            index.entries[key]?.lastAccess = Date()
            return Result(url: key, fileURL: folder.appendingPathComponent(cached.fileName), status: .revalidated, size: cached.size)
        }
        requestCounter.record("COPY")
        let name = index.entries[key]?.fileName ?? fileName(for: key, url: url)
        let destination = folder.appendingPathComponent(name)
        let tmp = LocalFiles.temporaryURL(beside: destination)
        do {
            try FileManager.default.copyItem(at: url, to: tmp)
        } catch {
            try? FileManager.default.removeItem(at: tmp)
            throw BucketError.localIO(path: url.path, description: error.localizedDescription)
        }
        guard FileStat.of(tmp.path)?.size == st.size, FileStat.of(url.path).map({ "\($0.size)-\($0.mtimeNanoseconds)" }) == validator else {
            // The file changed (or was cut) while it was copied: keep the cached copy rather than a mixed one.
            try? FileManager.default.removeItem(at: tmp)
            throw BucketError.sizeMismatch(key: key, expected: st.size, received: FileStat.of(tmp.path)?.size ?? -1)
        }
        try LocalFiles.moveAtomically(tmp, to: destination)
        index.entries[key] = Entry(fileName: name, etag: validator, lastModified: nil, size: st.size, lastAccess: Date())
        return Result(url: key, fileURL: destination, status: .downloaded, size: st.size)
    }

    // MARK: - Eviction and index

    private func evict(keeping key: String) {
        var total = totalBytes
        guard total > maxBytes else { return }
        let victims = index.entries.filter { $0.key != key }.sorted { $0.value.lastAccess < $1.value.lastAccess }
        for (victimKey, entry) in victims where total > maxBytes {
            try? FileManager.default.removeItem(at: folder.appendingPathComponent(entry.fileName))
            index.entries[victimKey] = nil
            total -= entry.size
        }
    }

    private func saveIndex() throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        let url = folder.appendingPathComponent("index.json")
        let data: Data
        do { data = try encoder.encode(index) } catch {
            throw BucketError.localIO(path: url.path, description: error.localizedDescription)
        }
        let tmp = try LocalFiles.writeTemporary(data, beside: url)
        try LocalFiles.moveAtomically(tmp, to: url)
    }
}
