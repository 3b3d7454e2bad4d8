import Foundation

/// A multipart upload the server holds open: started, and neither completed nor aborted.
public struct UnfinishedUpload: Sendable, Equatable {
    /// The key, relative to the store's prefix.
    public var key: String
    /// The server's id of the upload.
    public var uploadId: String
}

extension S3Store {
    /// The multipart uploads open under `prefix` (ListMultipartUploads, every page).
    /// - Throws: ``BucketError`` when the server cannot be asked.
    public func unfinishedUploads(prefix: String) async throws -> [UnfinishedUpload] {
        var found: [UnfinishedUpload] = []
        var keyMarker: String?, idMarker: String?
        repeat {
            var request = Request(method: "GET", key: nil, operation: "ListMultipartUploads")
            request.query = ["uploads": "", "prefix": fullKey(prefix)]
            if let keyMarker { request.query["key-marker"] = keyMarker }
            if let idMarker { request.query["upload-id-marker"] = idMarker }
            let response = try await send(request)
            let xml = try parseXML(response, result: "ListMultipartUploadsResult", fields: ["IsTruncated"], request: request)
            for upload in xml.all("Upload") {
                guard let key = upload.string("Key"), key.hasPrefix(configuration.prefix), let id = upload.string("UploadId") else { continue }
                found.append(UnfinishedUpload(key: String(key.dropFirst(configuration.prefix.count)), uploadId: id))
            }
            let truncated = xml.string("IsTruncated") == "true"
            keyMarker = truncated ? xml.string("NextKeyMarker") : nil
            idMarker = truncated ? xml.string("NextUploadIdMarker") : nil
        } while keyMarker != nil
        return found
    }

    /// Gives up an upload of `fileURL` to `key` that a stopped process left: aborts the upload its resume file
    /// names and every other upload open for exactly `key` (one killed before its id was saved), then removes the
    /// resume file. Only for keys no other writer uses (a backup's or a diff's: their names are unique ids).
    /// Returns the upload ids aborted.
    /// - Throws: ``BucketError`` when the server cannot be asked (the resume file is then kept for a later try).
    @discardableResult
    public func abandonInterruptedUpload(key: String, fileURL: URL) async throws -> [String] {
        let stateURL = multipartStateURL(fileURL: fileURL, key: key)
        var ids: Set<String> = []
        if let saved = (try? Data(contentsOf: stateURL)).flatMap({ try? JSONDecoder().decode(MultipartState.self, from: $0) }),
           saved.bucket == configuration.bucket, !saved.uploadId.isEmpty {
            ids.insert(saved.uploadId)
        }
        for upload in try await unfinishedUploads(prefix: key) where upload.key == key { ids.insert(upload.uploadId) }
        for id in ids.sorted() { try await abortMultipartUpload(key: key, uploadId: id) }
        try? FileManager.default.removeItem(at: stateURL)
        return ids.sorted()
    }
}

extension LocalFolderStore {
    /// Removes the temp files (`.rtsync-tmp-<host>~<pid>-…`) that processes of this machine which are gone left
    /// directly in `folder` (resume files being written, for example); returns the paths removed.
    @discardableResult
    public static func removeOrphanedTemporaryFiles(in folder: URL) -> [String] {
        var removed: [String] = []
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        where TemporaryOwner.isOrphan(name, prefix: temporaryPrefix) {
            let url = folder.appendingPathComponent(name)
            if unlink(url.path) == 0 { removed.append(url.path) }
        }
        return removed
    }
}
