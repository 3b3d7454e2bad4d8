import ArgumentParser

/// The rtsync command-line tool.
@main
struct RTSync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtsync",
        abstract: "Offline-first SQLite sync through an S3-style bucket.",
        version: "0.1.0",
        subcommands: [Bucket.self, Media.self]
    )
}
