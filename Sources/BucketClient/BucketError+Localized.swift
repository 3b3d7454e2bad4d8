import Foundation

extension BucketError {
    /// The hint for an app (`recoverySuggestion`): ``hint`` without the command-line tool's commands and flags,
    /// which the CLI prints.
    var appHint: String? {
        switch self {
        case .notFound: return "the object is not in the bucket; list the prefix again"
        case .bucketNotFound: return "check the bucket name in the bucket URL, or create the bucket"
        default: return hint
        }
    }
}
