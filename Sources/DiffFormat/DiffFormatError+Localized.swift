import Foundation

// `LocalizedError` for apps: the one-line description and the hint.
extension DiffFormatError: LocalizedError {
    /// The one-line description (`description`).
    public var errorDescription: String? { description }
    /// What the app or its user can do (`hint`).
    public var recoverySuggestion: String? { hint }
}
