import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Ranged, resumable download

extension S3Store {
    /// Downloads `key` into `fileURL` without a size known beforehand; see ``download(key:to:expecting:)``.
    @discardableResult
    public func download(key: String, to fileURL: URL) async throws -> ObjectInfo {
        try await download(key: key, to: fileURL, expecting: nil)
    }

    /// Downloads into `fileURL.partial`, checks the bytes, then renames it over `fileURL`.
    ///
    /// An object whose size is known (`listed`) and of which nothing is here yet is fetched with one plain GET: one
    /// no larger than one chunk in memory; a larger one only when the answer can be written into the file as it
    /// arrives (libcurl, see ``S3Configuration/directTransportMinimumBody``), conditional on the listed ETag, which
    /// is recorded first. Others are fetched in ranged chunks. The ETag of the object is kept in
    /// `fileURL.partial.etag`; a later call resumes from the partial file with `If-Match`, and starts over when the
    /// object changed.
    ///
    /// Before anything is installed the download must have exactly the size every answer declared
    /// (`Content-Length`, `Content-Range`), the size `listed` gives (unless the object was replaced since: its
    /// ETag changed and a HEAD confirms the new size), and the object's full-object checksum when the server gives
    /// one (`x-amz-checksum-*` with `x-amz-checksum-mode: ENABLED`; a composite multipart checksum is skipped).
    /// A download failing a check is dropped and retried from scratch; after ``S3Configuration/retry`` attempts it
    /// fails with ``BucketError/sizeMismatch(key:expected:received:)`` or
    /// ``BucketError/checksumMismatch(key:algorithm:)``, and `fileURL` is left as it was.
    @discardableResult
    public func download(key: String, to fileURL: URL, expecting listed: ObjectInfo?) async throws -> ObjectInfo {
        try await download(key: key, to: fileURL, expecting: listed, hashing: false, flushing: true).info
    }

    /// Downloads like ``download(key:to:expecting:)`` and returns the SHA-256 of the installed bytes, computed as
    /// they arrive (a download resumed from an earlier partial file is read back instead). With `flushing` false
    /// the bytes are not fsynced before the file is installed: the caller makes them durable before it records
    /// the file anywhere a crash leaves behind (media sync: before each manifest save).
    public func downloadReturningSHA256(key: String, to fileURL: URL, expecting listed: ObjectInfo?,
                                        flushing: Bool) async throws -> (info: ObjectInfo, sha256: String) {
        let (info, sha256) = try await download(key: key, to: fileURL, expecting: listed, hashing: true, flushing: flushing)
        return (info, try sha256 ?? LocalFiles.sha256Hex(of: fileURL))
    }

    /// The download behind both: the SHA-256 when `hashing` and every byte was written in order by this call.
    func download(key: String, to fileURL: URL, expecting listed: ObjectInfo?, hashing: Bool,
                  flushing: Bool) async throws -> (info: ObjectInfo, sha256: String?) {
        let partial = URL(fileURLWithPath: fileURL.path + ".partial")
        let etagFile = URL(fileURLWithPath: fileURL.path + ".partial.etag")
        var expected = listed
        var attempt = 0
        while true {
            do {
                let done = try await downloadToPartial(key: key, fileURL: fileURL, expected: expected, hashing: hashing,
                                                       flushing: flushing)
                try LocalFiles.moveAtomically(partial, to: fileURL)
                unlink(etagFile.path)
                return done
            } catch let failure as IntegrityFailure {
                // These bytes cannot be trusted: a resumed download must not build on them.
                unlink(partial.path)
                unlink(etagFile.path)
                attempt += 1
                if attempt >= configuration.retry.maxAttempts { throw failure.error }
                if case .sizeMismatch = failure.error, let known = expected,
                   known.etag.isEmpty || (!failure.etag.isEmpty && failure.etag != known.etag) {
                    // The object may have been replaced since it was listed: take the size the server has now,
                    // rather than failing forever on the listing's.
                    expected = try await head(key: key)
                }
                try await configuration.retry.wait(beforeRetry: attempt - 1)
            }
        }
    }

    /// A downloaded file that failed a check, with the ETag the server gave it.
    struct IntegrityFailure: Error {
        var error: BucketError
        var etag: String
    }

    /// One attempt of ``download(key:to:expecting:)``: fills (or resumes) `fileURL.partial` and checks it; with
    /// `hashing`, also returns the SHA-256 of the bytes when they all went into the file in order here.
    /// - Throws: ``IntegrityFailure`` when the bytes fail a check; ``BucketError`` for anything else.
    func downloadToPartial(key: String, fileURL: URL, expected: ObjectInfo?, hashing: Bool = false,
                           flushing: Bool = true) async throws -> (info: ObjectInfo, sha256: String?) {
        let partial = URL(fileURLWithPath: fileURL.path + ".partial")
        let etagFile = URL(fileURLWithPath: fileURL.path + ".partial.etag")
        try LocalFiles.createParent(of: fileURL)
        var etag: String? = try? String(contentsOf: etagFile, encoding: .utf8)
        var offset: Int64 = 0
        if etag != nil, let st = FileStat.of(partial.path), st.isRegularFile {
            offset = st.size
        } else {
            etag = nil
            unlink(partial.path)
        }
        let fd = open(partial.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw BucketError.localIO(path: partial.path, description: "cannot open for writing: \(LocalFiles.errnoText())")
        }
        defer { close(fd) }
        // Hashed as the bytes reach the file, so the manifest's SHA-256 needs no second read of it.
        let hasher = hashing ? Hashing.WrittenBytes() : nil
        hasher?.truncated(to: offset)
        func truncate(to length: Int64) {
            _ = ftruncate(fd, off_t(length))
            hasher?.truncated(to: length)
        }
        var total: Int64? = nil
        var lastModified: Date? = nil
        let chunk = Int64(max(1 << 16, configuration.downloadChunkSize))
        // Bodies written into the file as they arrive (libcurl): no size limit on one answer held in memory.
        let streaming = useDirectTransport(method: "GET", bodySize: 0, preferred: false)
        // S3 returns checksums only for answers that carry the whole object, never for a range: an object of known
        // size is fetched with one plain GET so that its checksum comes with it (and one request does it all).
        var whole = etag == nil && (expected.map { $0.size <= chunk || (streaming && !$0.etag.isEmpty && !configuration.rangedDownloads) } ?? false)
        // The total is known before the first byte: a progress display shows it while one GET streams the object.
        if let expected { TransferProgress.current?.expect(bytes: expected.size, key: key) }
        if whole, let expected, expected.size > chunk {
            // Cut off midway, the file resumes from what reached it: record the version it is of first (the GET is
            // conditional on it, so its bytes are of that version).
            etag = expected.etag
            do { try Data(expected.etag.utf8).write(to: etagFile) } catch {
                throw BucketError.localIO(path: etagFile.path, description: error.localizedDescription)
            }
        }
        // The object's full-object checksum, from an answer that carried the whole object.
        var checksum: ObjectChecksum? = nil
        // The digest of the whole object when one answer carried all of it in memory (no second read of the file).
        var wholeBodyDigest: String? = nil
        var sawWholeObject = false
        var first = true
        while total == nil || offset < total! {
            var request = Request(method: "GET", key: key, operation: "GetObject")
            if !whole { request.headers["range"] = ByteRange(start: offset, end: offset + chunk - 1).headerValue }
            if let etag { request.headers["if-match"] = "\"\(etag)\"" }
            if first { request.headers["x-amz-checksum-mode"] = "ENABLED" }
            if streaming { request.into = CurlTransport.FileTarget(fd: fd, offset: offset, written: hasher) }
            let response: Response
            do {
                response = try await send(request, acceptStatuses: [416])
            } catch BucketError.preconditionFailed where etag != nil && total == nil {
                // The object changed since the partial download began (or since it was listed): start over.
                etag = nil
                offset = 0
                truncate(to: 0)
                unlink(etagFile.path)
                continue
            }
            first = false
            let wasWhole = whole
            whole = false
            if response.status == 416 {
                // Empty object (a range of nothing), or a stale partial longer than the object.
                if offset == 0 { total = 0; etag = Self.unquote(response.header("ETag")); sawWholeObject = true; break }
                etag = nil
                offset = 0
                first = true
                truncate(to: 0)
                continue
            }
            let received = response.received
            let responseETag = Self.unquote(response.header("ETag"))
            lastModified = response.header("Last-Modified").flatMap(HTTPDates.parseHTTP)
            let coversWholeObject: Bool
            if response.status == 206 || response.header("Content-Range") != nil {
                // A part of the object, whatever the status: some servers (rclone serve s3) answer a ranged GET with
                // 200 and a Content-Range for only part of what was asked. Take it as the part it says it is.
                guard let part = Self.contentRange(response.header("Content-Range")) else {
                    truncate(to: offset)
                    throw BucketError.invalidResponse(request: describe(request), reason: "\(response.status) without a usable Content-Range")
                }
                guard part.start == offset, received == part.end - part.start + 1 else {
                    truncate(to: offset)
                    throw BucketError.invalidResponse(request: describe(request),
                                                      reason: "asked for bytes from \(offset), got \(received) byte(s) said to be \(response.header("Content-Range") ?? "")")
                }
                total = part.total
                coversWholeObject = part.start == 0 && part.end == part.total - 1
            } else if offset > 0 && response.streamed != nil {
                // A 200 for a range (a server ignoring Range): its bytes went in after the partial ones. Start the
                // file over with one plain GET.
                truncate(to: 0)
                offset = 0
                first = true
                whole = true
                continue
            } else {
                // A 200 carries the whole object: the file is (re)started with it.
                offset = 0
                total = received
                coversWholeObject = true
            }
            if etag == nil && !(coversWholeObject && wasWhole) {
                // More answers follow (ranges): record the version, so a cut-off download resumes on it.
                etag = responseETag
                try? Data(responseETag.utf8).write(to: etagFile)
            } else if etag == nil {
                etag = responseETag
            }
            if let expected, total! != expected.size {
                // Fewer (or more) bytes than the listing said, each answer consistent in itself: a server or proxy
                // cutting objects short, or the object replaced since it was listed (the caller tells which).
                throw IntegrityFailure(error: .sizeMismatch(key: key, expected: expected.size, received: total!), etag: responseETag)
            }
            if coversWholeObject {
                sawWholeObject = true
                let found = ObjectChecksum.fromHeaders { response.header($0) }
                checksum = found.checksum
                if found.compositeSkipped { checksumCounter.record("COMPOSITE") }
                if let checksum, response.streamed == nil, Int64(response.body.count) == total! { wholeBodyDigest = checksum.digest(of: response.body) }
            }
            if received == 0 && offset < total! {
                throw BucketError.truncated(key: key, expected: total!, received: offset)
            }
            if response.streamed == nil {
                if coversWholeObject { truncate(to: 0) }
                try Self.write(response.body, to: CurlTransport.FileTarget(fd: fd, offset: offset, written: hasher))
            }
            offset += received
            if let size = total, let knownETag = etag, size - offset > chunk, configuration.maxConcurrency > 1 {
                // Size and ETag are known: fetch the rest concurrently, appending in order so the
                // partial file stays a prefix of the object and remains resumable.
                offset = try await fetchRemainder(key: key, etag: knownETag, from: offset, total: size, chunk: chunk,
                                                  fd: fd, partial: partial, written: hasher)
            }
        }
        // Durable before it is installed and recorded (a power cut must not leave a recorded file empty), unless
        // the caller makes it durable later, before recording it (media sync: one flush per manifest save). Off
        // the cooperative pool: with many small files at a time, fsyncs would otherwise hold up other transfers.
        if flushing {
            _ = try await LocalFiles.offPool { fsync(fd) }
            LocalFiles.flushes.record("fsync \(fileURL.path)")
        }
        let written = FileStat.of(partial.path)?.size ?? -1
        guard written == total else {
            throw IntegrityFailure(error: .truncated(key: key, expected: total ?? 0, received: written), etag: etag ?? "")
        }
        if !sawWholeObject, let etag, !etag.isEmpty {
            // Assembled from ranges, which carry no checksum: ask for the object's own, and use it only when it is
            // of this version and says it covers the whole object.
            var request = Request(method: "HEAD", key: key, operation: "HeadObject")
            request.headers["x-amz-checksum-mode"] = "ENABLED"
            let response = try await send(request)
            if Self.unquote(response.header("ETag")) == etag {
                let found = ObjectChecksum.fromHeaders({ response.header($0) }, requireFullObjectType: true)
                checksum = found.checksum
                if found.compositeSkipped { checksumCounter.record("COMPOSITE") }
            }
        }
        if let checksum {
            guard checksum.matches(try wholeBodyDigest ?? checksum.digest(ofFile: partial)) else {
                throw IntegrityFailure(error: .checksumMismatch(key: key, algorithm: checksum.algorithm.rawValue), etag: etag ?? "")
            }
            checksumCounter.record(checksum.algorithm.rawValue)
        }
        return (ObjectInfo(key: key, size: total ?? 0, etag: etag ?? "", lastModified: lastModified),
                hasher?.digestHex(ofLength: total ?? 0))
    }
}

extension S3Store {
    /// `bytes START-END/TOTAL` parsed; nil when it is not of that form (a `*` total included).
    static func contentRange(_ header: String?) -> (start: Int64, end: Int64, total: Int64)? {
        guard let header, header.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = header.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let halves = spec.split(separator: "/", maxSplits: 1)
        guard halves.count == 2, let total = Int64(halves[1]) else { return nil }
        let bounds = halves[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let start = Int64(bounds[0]), let end = Int64(bounds[1]), start <= end, end < total else { return nil }
        return (start, end, total)
    }

    /// GETs `start...end` of an unchanged object (If-Match) and checks the answer is exactly that range.
    func fetchRange(key: String, etag: String, start: Int64, end: Int64) async throws -> Data {
        var request = Request(method: "GET", key: key, operation: "GetObject")
        request.headers["range"] = ByteRange(start: start, end: end).headerValue
        request.headers["if-match"] = "\"\(etag)\""
        let response = try await send(request)
        let range = response.header("Content-Range") ?? ""
        let part = Self.contentRange(range)
        guard response.status == 206 || response.status == 200, part?.start == start, part?.end == end, Int64(response.body.count) == end - start + 1 else {
            throw BucketError.invalidResponse(request: describe(request),
                                              reason: "expected bytes \(start)-\(end), got status \(response.status) \(range)")
        }
        return response.body
    }

    /// Downloads `from..<total` in chunks, at most `maxConcurrency` in flight, writing them in order.
    func fetchRemainder(key: String, etag: String, from start: Int64, total: Int64, chunk: Int64,
                        fd: Int32, partial: URL, written observer: Hashing.WrittenBytes? = nil) async throws -> Int64 {
        var ranges: [(Int64, Int64)] = []
        var position = start
        while position < total {
            ranges.append((position, min(position + chunk, total) - 1))
            position += chunk
        }
        // Each chunk in flight is held in memory until written: at most 4 per file (64 MiB with the default chunk).
        let window = max(1, min(configuration.maxConcurrency, 4))
        var written = start
        try await withThrowingTaskGroup(of: (Int, Data).self) { group in
            var next = 0
            var pending: [Int: Data] = [:]
            var expected = 0
            func addNext() {
                let index = next
                let (a, b) = ranges[index]
                next += 1
                group.addTask { (index, try await fetchRange(key: key, etag: etag, start: a, end: b)) }
            }
            while next < ranges.count && next < window { addNext() }
            while let (index, data) = try await group.next() {
                pending[index] = data
                while let ready = pending.removeValue(forKey: expected) {
                    do {
                        try Self.write(ready, to: CurlTransport.FileTarget(fd: fd, offset: written, written: observer))
                    } catch {
                        throw BucketError.localIO(path: partial.path, description: LocalFiles.errnoText())
                    }
                    written += Int64(ready.count)
                    expected += 1
                }
                // Keep memory bounded: never run more than `window` chunks ahead of the file.
                while next < ranges.count && next < expected + window { addNext() }
            }
        }
        return written
    }
}

// MARK: - Multipart upload with resume

/// What is recorded about an interrupted multipart upload, so a later process can resume it.
struct MultipartState: Codable, Sendable, Equatable {
    var bucket: String
    var key: String
    var uploadId: String
    var fileSize: Int64
    var fileMtimeNanoseconds: Int64
    var partSize: Int
    /// Part number -> ETag of parts known to be uploaded.
    var parts: [Int: String]
    /// The checksum algorithm the upload was created with (`CRC32`), which every part and the completion must then
    /// carry; nil for none (and in state files written before rtsync sent part checksums).
    var checksumAlgorithm: String? = nil
    /// The identity of the object's bytes when they are not the file's as it is (`MultipartSource.contentID`: the
    /// header of an encrypted upload, which its content-derived salt makes change with the plaintext); nil for a file
    /// judged by size and modification time.
    var contentID: String? = nil
}

/// Serializes updates of the state file while parts finish concurrently.
actor MultipartStateFile {
    let url: URL
    var state: MultipartState

    init(url: URL, state: MultipartState) {
        self.url = url
        self.state = state
    }

    func record(part: Int, etag: String) {
        state.parts[part] = etag
        save()
    }

    func save() {
        if let data = try? JSONEncoder().encode(state) { Self.write(data, to: url) }
    }

    /// Writes a resume file through a temp file named with this machine and process (`.rtsync-tmp-…`), renamed into
    /// place: a process killed meanwhile leaves a temp file the next run removes, never a half-written resume file
    /// (nor Foundation's `.dat.nosync*`, which nothing could tie to its owner, and which media sync would upload).
    static func write(_ data: Data, to url: URL) {
        let temp = LocalFiles.temporaryURL(beside: url)
        do { try data.write(to: temp); try LocalFiles.moveAtomically(temp, to: url) } catch { try? FileManager.default.removeItem(at: temp) }
    }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

extension S3Store {
    /// Where the resume state of an upload of `fileURL` to `key` is kept.
    func multipartStateURL(fileURL: URL, key: String) -> URL {
        if let folder = configuration.stateDirectory {
            let id = Hashing.sha256Hex(Data("\(configuration.bucket)/\(fullKey(key))\n\(fileURL.path)".utf8)).prefix(24)
            return folder.appendingPathComponent("upload-\(id).json")
        }
        return fileURL.deletingLastPathComponent().appendingPathComponent(".\(fileURL.lastPathComponent).rtsync-upload.json")
    }

    /// PutObject for small files; a resumable multipart upload above ``S3Configuration/multipartThreshold``.
    @discardableResult
    public func put(key: String, fileURL: URL) async throws -> ObjectInfo {
        try await putFile(key: key, fileURL: fileURL, hashFile: false).info
    }

    /// Uploads a file and returns the SHA-256 of its bytes, computed from the same reads that feed the upload
    /// (for a small file it is the signed payload hash itself).
    public func putReturningSHA256(key: String, fileURL: URL) async throws -> (info: ObjectInfo, sha256: String) {
        let (info, sha256) = try await putFile(key: key, fileURL: fileURL, hashFile: true)
        return (info, sha256!)
    }

    func putFile(key: String, fileURL: URL, hashFile: Bool) async throws -> (info: ObjectInfo, sha256: String?) {
        guard let st = FileStat.of(fileURL.path), st.isRegularFile else {
            throw BucketError.localIO(path: fileURL.path, description: "not a readable file")
        }
        if st.size <= Int64(configuration.multipartThreshold) {
            let data: Data
            do { data = try Data(contentsOf: fileURL) } catch {
                throw BucketError.localIO(path: fileURL.path, description: error.localizedDescription)
            }
            let sha256 = Hashing.sha256Hex(data)
            return (try await put(key: key, data: data, ifNoneMatch: false, sha256: sha256), sha256)
        }
        return try await multipartUpload(key: key, source: try FileParts(fileURL: fileURL, stat: st, partSize: multipartPartSize), hashFile: hashFile)
    }

    /// The part size of multipart uploads: the configured one, at least S3's minimum of 5 MiB.
    var multipartPartSize: Int { max(5 << 20, configuration.partSize) }

    /// A resumable multipart upload of what `source` reads (see ``put(key:fileURL:)``): a resume file beside the
    /// source file (or in ``S3Configuration/stateDirectory``) records the upload and its parts, and a later call
    /// with the same bytes (`MultipartSource.isResumable(from:)`) sends only the parts the server lacks; with other
    /// bytes the saved upload is aborted and a new one begins. With `hashFile`, also returns the SHA-256 of the bytes.
    func multipartUpload(key: String, source: some MultipartSource, hashFile: Bool) async throws -> (info: ObjectInfo, sha256: String?) {
        TransferProgress.current?.expect(bytes: source.size, key: key)
        let partCount = source.partCount
        let stateURL = multipartStateURL(fileURL: source.fileURL, key: key)
        var state: MultipartState? = nil
        // Whether this upload was created here by a server answering as the S3 API reference documents (see the
        // end: then Complete's ETag is the object's, and no HEAD is needed to learn the one listings show).
        var createdByConformingServer = false
        let saved = (try? Data(contentsOf: stateURL)).flatMap { try? JSONDecoder().decode(MultipartState.self, from: $0) }
        if let saved, saved.bucket == configuration.bucket, saved.key == fullKey(key), !saved.uploadId.isEmpty, !source.isResumable(from: saved) {
            // The file changed since the interrupted upload: drop its parts on the server.
            try? await abortMultipartUpload(key: key, uploadId: saved.uploadId)
        }
        if let saved, saved.bucket == configuration.bucket, saved.key == fullKey(key), !saved.uploadId.isEmpty, source.isResumable(from: saved) {
            // Trust only what the server still has.
            let uploaded: [Int: (etag: String, size: Int64)]?
            do {
                uploaded = try await listParts(key: key, uploadId: saved.uploadId)
            } catch BucketError.notFound {
                // The upload was completed or aborted meanwhile. Completed (a crash lost Complete's answer, or came
                // before the resume file was removed): the object already holds this file, so finish here.
                if let info = try await assembledObject(key: key, source: source, stateWritten: FileStat.of(stateURL.path)?.modificationDate) {
                    try? FileManager.default.removeItem(at: stateURL)
                    return (info, hashFile ? try LocalFiles.sha256Hex(of: source.fileURL) : nil)
                }
                uploaded = nil  // Aborted, or another object now: start a new upload.
            }
            if let uploaded {
                var resumed = saved
                resumed.parts = [:]
                for (number, part) in uploaded where number <= partCount && part.size == source.length(ofPart: number) {
                    resumed.parts[number] = part.etag
                }
                state = resumed
            }
        }
        if state == nil, let saved, saved.bucket == configuration.bucket, saved.key == fullKey(key), saved.uploadId.isEmpty {
            // An earlier process was killed between CreateMultipartUpload and saving its id: the upload it may have
            // opened can only be found by its key. Every open upload of exactly this key is given up (another
            // writer's upload of the same key at the same moment fails once and is retried by its next run).
            for upload in (try? await unfinishedUploads(prefix: key)) ?? [] where upload.key == key {
                try? await abortMultipartUpload(key: key, uploadId: upload.uploadId)
            }
        }
        if state == nil {
            // Recorded before the upload exists (no id yet): a process killed before the id below is saved leaves
            // this, so a later clean-up knows an upload of this key may be open (`abandonInterruptedUpload`).
            let intent = MultipartState(bucket: configuration.bucket, key: fullKey(key), uploadId: "", fileSize: source.size,
                                        fileMtimeNanoseconds: source.fileMtimeNanoseconds, partSize: source.partSize, parts: [:],
                                        contentID: source.contentID)
            if let data = try? JSONEncoder().encode(intent) { MultipartStateFile.write(data, to: stateURL) }
            var request = Request(method: "POST", key: key, operation: "CreateMultipartUpload")
            request.query = ["uploads": ""]
            request.headers["content-type"] = "application/octet-stream"
            let checksumAlgorithm: String? = configuration.partChecksum == .crc32 ? "CRC32" : nil
            if let checksumAlgorithm { request.headers["x-amz-checksum-algorithm"] = checksumAlgorithm }
            let response = try await send(request)
            let xml = try parseXML(response, result: "InitiateMultipartUploadResult", fields: ["UploadId"], request: request)
            guard let uploadId = xml.string("UploadId"), !uploadId.isEmpty else {
                throw BucketError.invalidResponse(request: describe(request), reason: "no UploadId")
            }
            createdByConformingServer = xml.name == "InitiateMultipartUploadResult"
            state = MultipartState(bucket: configuration.bucket, key: fullKey(key), uploadId: uploadId, fileSize: source.size,
                                   fileMtimeNanoseconds: source.fileMtimeNanoseconds, partSize: source.partSize, parts: [:],
                                   checksumAlgorithm: checksumAlgorithm, contentID: source.contentID)
        }
        let stateFile = MultipartStateFile(url: stateURL, state: state!)
        await stateFile.save()
        let uploadId = state!.uploadId
        let done = state!.parts
        let stopAfter = configuration.stopAfterPartsForTesting
        let window = max(1, configuration.maxConcurrency)
        var fileHasher = hashFile ? Hashing.SHA256Stream() : nil
        // A resumed upload keeps the algorithm it was created with, whatever the configuration says now.
        let partCRC32 = state!.checksumAlgorithm == "CRC32"
        var partChecksums: [Int: String] = [:]
        // Parts are read (and the file hashed) in order here and sent by child tasks: at most `window` parts of
        // this file at once, and at most `partLimiter`'s limit across all files, each holding one part in memory.
        try await withThrowingTaskGroup(of: (Int, String).self) { group in
            var running = 0
            var finished = 0
            func collect() async throws {
                guard let (number, etag) = try await group.next() else { return }
                running -= 1
                await stateFile.record(part: number, etag: etag)
                finished += 1
                if let stopAfter, finished >= stopAfter {
                    group.cancelAll()
                    throw BucketError.transport(request: "UploadPart (test interruption)", description: "stopped after \(finished) parts")
                }
            }
            for number in 1...partCount {
                if done[number] != nil {
                    // Uploaded before an interruption: only hashed (when asked, and for the completion's part
                    // checksum), not sent again.
                    if fileHasher != nil || partCRC32 {
                        let data = try source.read(part: number)
                        if fileHasher != nil { fileHasher!.update(data) }
                        if partCRC32 { partChecksums[number] = Hashing.crc32Base64(data) }
                    }
                    continue
                }
                while running >= window { try await collect() }
                await partLimiter.acquire()
                let data: Data
                do { data = try source.read(part: number) } catch {
                    await partLimiter.release()
                    throw error
                }
                if fileHasher != nil { fileHasher!.update(data) }
                var request = Request(method: "PUT", key: key, operation: "UploadPart")
                request.query = ["partNumber": String(number), "uploadId": uploadId]
                request.body = data
                // No Content-MD5 on parts: the signed x-amz-content-sha256 of the body already lets S3 verify
                // every byte. The CRC-32 (signed too) is the part checksum the upload was created with.
                request.payloadHash = Hashing.sha256Hex(data)
                if partCRC32 {
                    let crc = Hashing.crc32Base64(data)
                    partChecksums[number] = crc
                    request.headers["x-amz-checksum-crc32"] = crc
                }
                request.preferDirect = true
                group.addTask {
                    do {
                        let response = try await send(request)
                        await partLimiter.release()
                        return (number, Self.unquote(response.header("ETag")))
                    } catch {
                        await partLimiter.release()
                        throw error
                    }
                }
                running += 1
            }
            while running > 0 { try await collect() }
        }
        let parts = await stateFile.state.parts
        var body = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for number in 1...partCount {
            guard let etag = parts[number] else {
                throw BucketError.invalidResponse(request: "UploadPart", reason: "part \(number) missing after upload")
            }
            // S3 requires each part's checksum here when the upload was created with an algorithm.
            let checksum = partChecksums[number].map { "<ChecksumCRC32>\($0)</ChecksumCRC32>" } ?? ""
            body += "<Part><PartNumber>\(number)</PartNumber><ETag>\"\(etag)\"</ETag>\(checksum)</Part>"
        }
        body += "</CompleteMultipartUpload>"
        let sha256 = fileHasher?.finalizeHex()
        var request = Request(method: "POST", key: key, operation: "CompleteMultipartUpload")
        request.query = ["uploadId": uploadId]
        request.body = Data(body.utf8)
        request.headers["content-type"] = "application/xml"
        request.preferDirect = true  // the server may take seconds to assemble the parts
        let response: Response
        let completeStarted = Date()
        do {
            response = try await send(request)
        } catch BucketError.notFound {
            // A retried Complete whose first attempt succeeded finds the upload gone: accept the object if it is
            // there and is this upload's (a multipart ETag of as many parts, or written since this Complete began;
            // some servers, rclone serve s3, give an assembled object a plain MD5 ETag).
            let info = try await head(key: key)
            let recent = (info.lastModified ?? .distantPast) >= completeStarted.addingTimeInterval(-Self.clockSkewAllowance)
            guard info.size == source.size, info.etag.hasSuffix("-\(partCount)") || recent else { throw BucketError.notFound(key: key) }
            await stateFile.remove()
            return (info, sha256)
        }
        // S3 may answer 200 with an <Error> body: parseXML turns that into an error.
        let xml = try parseXML(response, result: "CompleteMultipartUploadResult", fields: ["ETag", "Key", "Location"], request: request)
        await stateFile.remove()
        let completedETag = Self.unquote(xml.string("ETag"))
        if createdByConformingServer, completedETag.hasSuffix("-\(partCount)") {
            // S3 (and moto, MinIO, Ceph) lists and HEADs an object with the ETag Complete gave it.
            return (ObjectInfo(key: key, size: source.size, etag: completedETag, lastModified: Date()), sha256)
        }
        // The ETag that HEAD and listings will report can differ from Complete's (rclone serve s3, which names the
        // root of CreateMultipartUpload's answer <InitiateMultipartUpload>, answers "<md5 of part md5s>-N", then
        // lists the MD5 of the whole object). Record the one listings show, so the next sync does not take the
        // object for changed; keep Complete's when HEAD cannot confirm the upload. Resumed uploads ask too.
        if let listed = try? await head(key: key), listed.size == source.size, !listed.etag.isEmpty {
            return (ObjectInfo(key: key, size: source.size, etag: listed.etag, lastModified: listed.lastModified ?? Date()), sha256)
        }
        return (ObjectInfo(key: key, size: source.size, etag: completedETag, lastModified: Date()), sha256)
    }

    /// The object an interrupted multipart upload of `fileURL` to `key` completed on the server before the process
    /// stopped, when its resume file is still there and the object holds exactly that file; the resume file is then
    /// removed. Nil when there is no such resume file, the upload is still open (resume it with a put), or the object
    /// is not this file.
    /// - Throws: ``BucketError`` when the server cannot be asked.
    public func finishedUpload(key: String, fileURL: URL) async throws -> ObjectInfo? {
        guard let st = FileStat.of(fileURL.path), st.isRegularFile, st.size > Int64(configuration.multipartThreshold),
              hasResumeFile(key: key, fileURL: fileURL) else { return nil }
        return try await finishedUpload(key: key, source: try FileParts(fileURL: fileURL, stat: st, partSize: multipartPartSize))
    }

    /// Whether an upload of `fileURL` to `key` left a resume file (cheap: nothing is read or asked).
    func hasResumeFile(key: String, fileURL: URL) -> Bool {
        FileStat.of(multipartStateURL(fileURL: fileURL, key: key).path) != nil
    }

    /// ``finishedUpload(key:fileURL:)`` for the bytes `source` reads.
    func finishedUpload(key: String, source: some MultipartSource) async throws -> ObjectInfo? {
        let stateURL = multipartStateURL(fileURL: source.fileURL, key: key)
        guard let stateStat = FileStat.of(stateURL.path),
              let saved = (try? Data(contentsOf: stateURL)).flatMap({ try? JSONDecoder().decode(MultipartState.self, from: $0) }),
              saved.bucket == configuration.bucket, saved.key == fullKey(key), !saved.uploadId.isEmpty,
              source.isResumable(from: saved) else { return nil }
        do {
            _ = try await listParts(key: key, uploadId: saved.uploadId)
            return nil  // Still open: the object, if any, is an older one.
        } catch BucketError.notFound {}
        guard let info = try await assembledObject(key: key, source: source, stateWritten: stateStat.modificationDate) else { return nil }
        try? FileManager.default.removeItem(at: stateURL)
        return info
    }

    /// HEADs `key` and returns it when it holds what `source` reads, as uploaded in its parts: the size matches and
    /// the ETag is the bytes' MD5 (rclone serve s3), or the MD5 of its parts' MD5s with their count (AWS, moto), or
    /// (another ETag scheme) the object was written after the resume file was last written (the Complete came last).
    func assembledObject(key: String, source: some MultipartSource, stateWritten: Date?) async throws -> ObjectInfo? {
        let info: ObjectInfo
        do { info = try await head(key: key) } catch BucketError.notFound { return nil }
        guard info.size == source.size else { return nil }
        let etag = info.etag.lowercased()
        let isHex = { (text: Substring) in text.count == 32 && text.allSatisfy(\.isHexDigit) }
        if isHex(Substring(etag)) {
            return try source.md5Hex() == etag ? info : nil
        }
        if let dash = etag.lastIndex(of: "-"), isHex(etag[..<dash]), let count = Int(etag[etag.index(after: dash)...]) {
            guard count == source.partCount else { return nil }
            return try source.multipartETag() == etag ? info : nil
        }
        guard let stateWritten, let written = info.lastModified else { return nil }
        return written >= stateWritten.addingTimeInterval(-Self.clockSkewAllowance) ? info : nil
    }

    /// How far a server's clock may be behind ours when judging whether an object was written by this upload.
    static let clockSkewAllowance: TimeInterval = 300

    /// ListParts, all pages: part number -> (ETag, size).
    func listParts(key: String, uploadId: String) async throws -> [Int: (etag: String, size: Int64)] {
        var result: [Int: (etag: String, size: Int64)] = [:]
        var marker: String? = nil
        repeat {
            var request = Request(method: "GET", key: key, operation: "ListParts")
            request.query = ["uploadId": uploadId]
            if let marker { request.query["part-number-marker"] = marker }
            let response = try await send(request)
            let xml = try parseXML(response, result: "ListPartsResult", fields: ["Part", "IsTruncated", "UploadId"], request: request)
            for part in xml.all("Part") {
                guard let number = part.string("PartNumber").flatMap({ Int($0) }),
                      let size = part.string("Size").flatMap({ Int64($0) }) else { continue }
                result[number] = (Self.unquote(part.string("ETag")), size)
            }
            marker = xml.string("IsTruncated") == "true" ? xml.string("NextPartNumberMarker") : nil
        } while marker != nil
        return result
    }

    /// Aborts a multipart upload (used to clean up abandoned uploads).
    public func abortMultipartUpload(key: String, uploadId: String) async throws {
        var request = Request(method: "DELETE", key: key, operation: "AbortMultipartUpload")
        request.query = ["uploadId": uploadId]
        _ = try await send(request, acceptStatuses: [404])
    }
}

/// Reads the parts of a file for a multipart upload: one `pread` per part into a buffer of exactly its size.
final class PartReader: Sendable {
    let path: String
    let fd: Int32
    let fileSize: Int64
    let partSize: Int

    init(fileURL: URL, fileSize: Int64, partSize: Int) throws {
        path = fileURL.path
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw BucketError.localIO(path: path, description: LocalFiles.errnoText()) }
        self.fileSize = fileSize
        self.partSize = partSize
    }

    deinit { close(fd) }

    /// Part `number` (1-based); a file cut shorter since it was measured is an error, never a short part.
    func read(part number: Int) throws -> Data {
        let offset = Int64(number - 1) * Int64(partSize)
        let length = Int(min(Int64(partSize), fileSize - offset))
        var data = Data(count: length)
        let got = data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) -> Int in
            var done = 0
            while done < length {
                let n = pread(fd, buffer.baseAddress! + done, length - done, off_t(offset) + off_t(done))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return n < 0 ? -1 : done }
                done += n
            }
            return done
        }
        if got < 0 { throw BucketError.localIO(path: path, description: LocalFiles.errnoText()) }
        if got < length {
            throw BucketError.localIO(path: path, description: "file shrank while uploading (part \(number): \(got) of \(length) bytes)")
        }
        return data
    }
}
