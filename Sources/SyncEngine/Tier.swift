/// Something a tier may allow or refuse.
public enum TierAction: Sendable, Equatable {
    /// Syncing the database through a bucket (`cloud`: not a local folder).
    case syncDatabase(cloud: Bool)
    /// Uploading database backups to a bucket.
    case uploadBackup(cloud: Bool)
    /// Uploading media: to the user's own prefix or the shared community prefix; private recordings flagged.
    case uploadMedia(cloud: Bool, community: Bool, privateRecording: Bool)

    var description: String {
        switch self {
        case .syncDatabase: return "syncing the database through a cloud bucket"
        case .uploadBackup: return "uploading backups to a cloud bucket"
        case .uploadMedia(_, _, true): return "uploading a private recording"
        case .uploadMedia: return "uploading media to your own cloud prefix"
        }
    }
}

extension Tier {
    /// Checks an action against the tier: free = local backups only, media only to the community
    /// prefix and never private recordings; premium = everything. A local-folder bucket is local storage
    /// and allowed on every tier.
    /// - Throws: `LifecycleError.tierRefused` naming the tier and the action.
    public func require(_ action: TierAction) throws {
        guard self == .free else { return }
        switch action {
        case .syncDatabase(let cloud), .uploadBackup(let cloud):
            if cloud { throw LifecycleError.tierRefused(tier: self, action: action.description) }
        case .uploadMedia(let cloud, let community, let privateRecording):
            if privateRecording || (cloud && !community) { throw LifecycleError.tierRefused(tier: self, action: action.description) }
        }
    }
}
