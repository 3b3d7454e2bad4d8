import BucketClient
import Foundation
import SyncEngine

extension RTSyncHome {
    /// The shares received whose shared-media parcel this home has looked for (one diff id a line), so each costs one
    /// request once and an idle sync none.
    public var sharedMediaCheckedFile: URL { support.appendingPathComponent("shared-media-checked") }
}

extension ObjectStoreRemote {
    /// Sends the media of a share to a recipient who encrypts media names (`recipient.encryptsNames`): the files named
    /// by `paths` (under `home.documents`) go up as a `SharedMediaParcel` encrypted to the recipient's share key,
    /// outside the recipient's media folders. Call it before uploading the share diff, so the recipient that applies
    /// the share finds the parcel whole. Returns the keys written.
    /// - Throws: the bucket's errors.
    public func sendSharedMedia(_ paths: [String], home: RTSyncHome, from sender: String, to recipient: ShareRecipient,
                                share: String) async throws -> [String] {
        let files = paths.map { (path: $0, url: home.documents.appendingPathComponent($0)) }
            .filter { FileManager.default.fileExists(atPath: $0.url.path) }
        return try await SharedMediaParcel.send(files, from: sender, to: recipient.user, key: recipient.publicKey, share: share,
                                                store: rawStore, staging: home.encryptionStaging)
    }

    /// Takes the shared-media parcels of the shares this home has received (`rtsync inbound list`) and not looked at
    /// yet: each share costs one GET once; the files of a parcel are checked, installed into `home.documents` (where the
    /// next media sync uploads them under this user's encrypted names) and the parcel is deleted. Returns the paths
    /// installed. Does nothing without encryption (parcels are encrypted to the share key) or received shares.
    /// - Throws: `EncryptionError` naming the parcel object that does not open or match (that parcel stays, and is
    ///   tried again next time), or the bucket's errors.
    public func takeSharedMedia(home: RTSyncHome) async throws -> [String] {
        guard let encrypting = store as? EncryptingStore, let user = encrypting.keyDirectory?.user,
              FileManager.default.fileExists(atPath: home.database.path) else { return [] }
        let checkedFile = home.sharedMediaCheckedFile
        var checked = LineSetFile.load(checkedFile)
        let shares = try SyncDatabase(path: home.database.path).inbound()
            .filter { $0.kind == "share" && !checked.contains($0.diffID) && !$0.diffID.isEmpty && $0.diffID.allSatisfy { $0.isLetter || $0.isNumber } }
            .map(\.diffID).sorted()
        var installed: [String] = []
        for share in shares {
            if let paths = try await SharedMediaParcel.take(share: share, user: user, keyring: encrypting.keyring, store: encrypting.inner,
                                                            documents: home.documents, staging: home.encryptionStaging) {
                installed += paths
            }
            checked.insert(share)
            try LineSetFile.save(checked, to: checkedFile)
        }
        return installed
    }
}
