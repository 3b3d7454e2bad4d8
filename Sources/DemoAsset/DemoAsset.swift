import Foundation

/// The demo database bundled with the package: the last step of the init chain and the fallback of `demo reset`.
public enum DemoAsset {
    /// File name of the bundled demo database.
    public static let fileName = "record-thing-demo.sqlite"

    /// Where the bundled demo database is, or nil when the resource bundle is missing (e.g. a binary copied alone).
    public static var url: URL? {
        Bundle.module.url(forResource: "record-thing-demo", withExtension: "sqlite")
    }
}
