import BucketClient
import Foundation
import SyncEngine

extension RTSyncSettings {
    /// The media sync options settings.json describes: mode and `MediaSelection`, deletions, trash days, litter.
    ///
    /// In selective mode only the selection syncs (nothing when there is none); files outside it are neither
    /// transferred nor deleted nor conflict-copied.
    /// - Throws: `LifecycleError.invalidSettings` for an unknown mode or kind, naming it.
    public func mediaSyncOptions(file: String = "settings.json") throws -> MediaSyncOptions {
        var options = MediaSyncOptions()
        options.excludeLitter = !mediaIncludeLitter
        options.delete = mediaDeletes
        options.trashDays = max(0, mediaTrashDays)
        switch mediaMode {
        case "all":
            break
        case "selective":
            options.selective = true
            let selection = mediaSelection ?? MediaSelection()
            guard !selection.isEmpty else { return options }  // an empty selection matches no path
            var kinds: [MediaKind] = []
            for name in selection.kinds ?? [] {
                guard let kind = MediaKind(rawValue: name) else {
                    throw LifecycleError.invalidSettings(file: file, reason: "mediaSelection.kinds: unknown kind \(name.debugDescription) (use \"recordings\" or \"images\")")
                }
                kinds.append(kind)
            }
            if !kinds.isEmpty { options.kinds = Set(kinds) }
            let paths = selection.paths ?? []
            // Without paths, the selection is every file of its kinds, narrowed by the globs.
            options.select = paths.isEmpty ? MediaKind.allCases.filter { options.kinds.contains($0) }.map(\.rawValue) : paths
            options.include = (selection.include ?? []).map(Glob.init)
            options.exclude = (selection.exclude ?? []).map(Glob.init)
        default:
            throw LifecycleError.invalidSettings(file: file, reason: "mediaMode: unknown mode \(mediaMode.debugDescription) (use \"all\" or \"selective\")")
        }
        return options
    }
}
