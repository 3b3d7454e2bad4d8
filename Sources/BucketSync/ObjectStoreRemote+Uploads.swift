import BucketClient
import Foundation
import SyncEngine

extension ObjectStoreRemote {
    /// Aborts the S3 multipart uploads of files in `folder` that a stopped run left open (each named by the resume
    /// file `.<name>.rtsync-upload.json` beside the file, even one written before the upload had an id) and removes
    /// their resume files; returns the keys given up. A failure leaves the resume file for the next run. Encrypted
    /// uploads too: their resume files also sit beside the plaintext file (and backup names are not encrypted).
    public func abandonInterruptedUploads(in folder: URL, keyPrefix: String) async -> [String] {
        guard let s3 = rawStore as? S3Store else { return [] }
        // Resume files being written when their process was killed.
        var given = LocalFolderStore.removeOrphanedTemporaryFiles(in: folder)
        let suffix = ".rtsync-upload.json"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [] where name.hasPrefix(".") && name.hasSuffix(suffix) {
            let file = String(name.dropFirst().dropLast(suffix.count))
            guard !file.isEmpty, !file.contains("/") else { continue }
            let key = keyPrefix + file
            if (try? await s3.abandonInterruptedUpload(key: key, fileURL: folder.appendingPathComponent(file))) != nil {
                given.append("unfinished upload of \(key)")
            }
        }
        return given
    }
}
