import Crypto
import Foundation

/// Media shared with a user who encrypts media names: the sender cannot write names in that user's media folders, so
/// the files travel as a parcel outside them, `<recipient>/shared-media/<share id>/<n>` (each file encrypted to the
/// recipient's share key) with an encrypted `manifest` naming their paths, sizes and SHA-256; the recipient takes the
/// parcel into its documents (its own media sync then uploads the files under its encrypted names) and deletes it.
///
/// The bucket sees a share id, file numbers and sizes; never a name or a byte of the files.
public struct SharedMediaParcel: Codable, Sendable, Equatable {
    /// One file of the parcel.
    public struct File: Codable, Sendable, Equatable {
        /// Its media path, as the shared rows refer to it (`images/a.jpg`).
        public var path: String
        /// Its size in bytes.
        public var size: Int64
        /// SHA-256 of its content, hex.
        public var sha256: String
    }

    /// Always "rtsync-shared-media-parcel".
    public var format = "rtsync-shared-media-parcel"
    /// Always 1.
    public var version = 1
    /// The sending user.
    public var from: String
    /// The id of the share diff the files belong to.
    public var share: String
    /// The files, object `<n>` holding `files[n]`.
    public var files: [File]

    /// Most files one parcel may list (a hostile manifest cannot make the recipient fetch without end).
    public static let maxFiles = 10_000

    /// The parcel's folder in the bucket.
    public static func folder(recipient: String, share: String) -> String { "\(recipient)/shared-media/\(share)/" }

    /// Whether `path` is a media path a parcel may install: under `recordings/` or `images/`, relative, no `..`.
    static func isMediaPath(_ path: String) -> Bool {
        guard path.hasPrefix("recordings/") || path.hasPrefix("images/"), (try? SafeKey.segments(of: path)) != nil else { return false }
        return true
    }

    // MARK: - Sending

    /// Puts `files` (media path and local file) for `recipient` into `store` (the bucket as it is, not encrypting):
    /// each file encrypted to `key`, then the manifest, so a parcel with a manifest is whole. Returns the keys written.
    /// - Throws: the store's errors, ``BucketError/localIO(path:description:)`` for an unreadable file.
    public static func send(_ files: [(path: String, url: URL)], from sender: String, to recipient: String,
                            key: Curve25519.KeyAgreement.PublicKey, share: String, store: any ObjectStore, staging: URL) async throws -> [String] {
        let folder = Self.folder(recipient: recipient, share: share)
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        var listed: [File] = []
        var written: [String] = []
        for file in files where isMediaPath(file.path) {
            let temp = LocalFiles.temporaryURL(beside: staging.appendingPathComponent("parcel"))
            defer { try? FileManager.default.removeItem(at: temp) }
            let sha = try EncryptionFormat.encryptFile(file.url, to: temp, recipient: key, flush: false)
            let size = Int64(FileStat.of(file.url.path)?.size ?? 0)
            try await store.put(key: folder + String(listed.count), fileURL: temp)
            written.append(folder + String(listed.count))
            listed.append(File(path: file.path, size: size, sha256: sha))
        }
        guard !listed.isEmpty else { return [] }
        let manifest = SharedMediaParcel(from: sender, share: share, files: listed)
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        try await store.put(key: folder + "manifest", data: EncryptionFormat.encrypt(try e.encode(manifest), to: key), ifNoneMatch: false)
        written.append(folder + "manifest")
        return written
    }

    // MARK: - Taking

    /// Opens an object of the parcel fetched into `cipher` (it must be encrypted to this user's share key) into `plain`.
    private static func open(_ cipher: URL, to plain: URL, keyring: ContentKeyring, object: String) throws {
        guard try EncryptionFormat.decryptFile(cipher, to: plain, keyring: keyring, object: object) else {
            throw EncryptionError.malformed(object: object, reason: "a shared-media parcel must be encrypted to the share key")
        }
    }

    /// Takes the parcel of `share` for `user` from `store` (the bucket as it is) into `documents`, checking every file
    /// against the manifest before anything is installed, then deletes the parcel; returns the paths installed, or nil
    /// when there is no parcel. A file already there with other content is kept; the shared one is installed as a
    /// conflict copy beside it (``MediaConflict/copyPath(of:device:at:attempt:)`` naming the sender).
    /// - Throws: ``EncryptionError`` naming the object when a part does not open or does not match, the store's
    ///   errors; nothing is installed then and the parcel stays.
    public static func take(share: String, user: String, keyring: ContentKeyring, store: any ObjectStore,
                            documents: URL, staging: URL) async throws -> [String]? {
        let folder = Self.folder(recipient: user, share: share)
        let manifestKey = folder + "manifest"
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        let work = staging.appendingPathComponent("parcel-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let cipherManifest = work.appendingPathComponent("manifest.enc")
        do { _ = try await store.download(key: manifestKey, to: cipherManifest) } catch BucketError.notFound { return nil }
        let plainManifest = work.appendingPathComponent("manifest.json")
        try open(cipherManifest, to: plainManifest, keyring: keyring, object: manifestKey)
        guard let manifest = try? JSONDecoder().decode(SharedMediaParcel.self, from: Data(contentsOf: plainManifest)),
              manifest.format == "rtsync-shared-media-parcel", manifest.version == 1, manifest.share == share,
              manifest.files.count <= maxFiles, manifest.files.allSatisfy({ isMediaPath($0.path) }) else {
            throw EncryptionError.malformed(object: manifestKey, reason: "not a shared-media manifest for this share")
        }
        // Every file is fetched and checked before any is installed.
        var ready: [(File, URL)] = []
        for (n, file) in manifest.files.enumerated() {
            let key = folder + String(n)
            let cipher = work.appendingPathComponent("\(n).enc"), plain = work.appendingPathComponent("\(n)")
            _ = try await store.download(key: key, to: cipher)
            try open(cipher, to: plain, keyring: keyring, object: key)
            try? FileManager.default.removeItem(at: cipher)
            guard Int64(FileStat.of(plain.path)?.size ?? -1) == file.size, try LocalFiles.sha256Hex(of: plain) == file.sha256 else {
                throw EncryptionError.malformed(object: key, reason: "its content is not the file the parcel's manifest lists")
            }
            ready.append((file, plain))
        }
        var installed: [String] = []
        for (file, plain) in ready {
            var path = file.path
            var target = try SafeKey.fileURL(root: documents, key: path)
            var attempt = 1
            while FileManager.default.fileExists(atPath: target.path) {
                if (try? LocalFiles.sha256Hex(of: target)) == file.sha256 { break }
                path = MediaConflict.copyPath(of: file.path, device: manifest.from, at: Date(), attempt: attempt)
                target = try SafeKey.fileURL(root: documents, key: path)
                attempt += 1
            }
            if !FileManager.default.fileExists(atPath: target.path) {
                // Through a temporary file beside the target: staging may be on another filesystem.
                try LocalFiles.createParent(of: target)
                let temp = LocalFiles.temporaryURL(beside: target)
                do { try FileManager.default.copyItem(at: plain, to: temp) } catch {
                    throw BucketError.localIO(path: temp.path, description: error.localizedDescription)
                }
                try LocalFiles.moveAtomically(temp, to: target)
            }
            installed.append(path)
        }
        for n in 0..<manifest.files.count { try await store.delete(key: folder + String(n)) }
        try await store.delete(key: manifestKey)
        return installed
    }
}
