import ArgumentParser
import BucketClient
import Foundation

extension RTSync {
    /// `rtsync media`: selective media sync and the download cache.
    struct Media: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "media",
            abstract: "Sync recordings and images with the bucket, or fetch media URLs into a cache.",
            subcommands: [Sync.self, Fetch.self]
        )
    }
}

extension RTSync.Media {
    /// `rtsync media sync`.
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sync",
            abstract: "Sync <documents>/recordings and <documents>/images with <user>/recordings and <user>/images.",
            discussion: """
            Without --recordings or --images both folders sync. Deletions are propagated only with \
            --delete, and never after an I/O error in the same run. A file changed here and in the bucket \
            since the last sync keeps the newer version under its name and the other beside it as \
            'name (conflict <device> <UTC date>).ext', here and in the bucket; `rtsync conflicts media` lists them. An unchanged tree costs one \
            LIST per 1,000 objects for both folders together (one more for each other folder between \
            them, such as inbound/) and no uploads or hashing.
            """
        )

        @OptionGroup var bucketOptions: BucketOptions
        @Option(help: ArgumentHelp("Local documents folder.", valueName: "dir")) var documents: String
        @Option(help: ArgumentHelp("User id: the first segment of the bucket keys.", valueName: "id")) var user: String
        @Option(help: ArgumentHelp("Manifest file (default: <documents>/.rtsync-media-manifest.json, shared with rtsync sync --media).", valueName: "file"))
        var manifest: String?
        @Option(help: ArgumentHelp("JSON media sync settings (mode all|selective, kinds, direction, include, exclude, select, delete, includeLitter); flags override it.",
                                   valueName: "file"))
        var config: String?
        @Flag(help: "Sync recordings/.") var recordings = false
        @Flag(help: "Sync images/.") var images = false
        @Flag(help: "Copy local changes to the bucket only.") var push = false
        @Flag(help: "Copy bucket changes to the local folder only.") var pull = false
        @Flag(help: "Copy both ways (the default).") var both = false
        @Option(help: ArgumentHelp("Only sync paths matching this glob (repeatable).", valueName: "glob")) var include: [String] = []
        @Option(help: ArgumentHelp("Never sync paths matching this glob (repeatable).", valueName: "glob")) var exclude: [String] = []
        @Option(help: ArgumentHelp("Only sync this documents-relative file or folder (repeatable).", valueName: "path"))
        var select: [String] = []
        @Flag(name: .customLong("dry-run"), help: "Show what would change; change nothing.") var dryRun = false
        @Flag(help: "Propagate deletions.") var delete = false
        @Flag(name: .customLong("include-litter"), help: "Also sync .DS_Store, ._*, Thumbs.db, desktop.ini and .*.swp files (left out by default).")
        var includeLitter = false
        @Option(help: ArgumentHelp("Name of this device in conflict copies (default: the host name).", valueName: "name"))
        var device: String?
        @Flag(help: "Print the report as JSON.") var json = false

        func validate() throws {
            if [push, pull, both].filter({ $0 }).count > 1 {
                throw ValidationError("give at most one of --push, --pull, --both")
            }
            var isDirectory: ObjCBool = false
            if !FileManager.default.fileExists(atPath: documents, isDirectory: &isDirectory) || !isDirectory.boolValue {
                throw ValidationError("the documents folder does not exist (\(documents))")
            }
        }

        func run() async throws {
            var options = try await reportingBucketErrors {
                try config.map { try MediaSyncSettings.load(from: URL(fileURLWithPath: $0)).options() } ?? MediaSyncOptions()
            }
            if recordings || images {
                options.kinds = Set((recordings ? [MediaKind.recordings] : []) + (images ? [MediaKind.images] : []))
            }
            if push || pull || both { options.direction = push ? .push : pull ? .pull : .both }
            if !include.isEmpty { options.include = include.map(Glob.init) }
            if !exclude.isEmpty { options.exclude = exclude.map(Glob.init) }
            if !select.isEmpty { options.select = select }
            options.dryRun = dryRun
            if let device { options.device = device }
            if includeLitter { options.excludeLitter = false }
            options.delete = options.delete || delete
            options.showProgress = !json
            let documentsURL = URL(fileURLWithPath: documents, isDirectory: true)
            let manifestURL = manifest.map { URL(fileURLWithPath: $0) } ?? MediaManifest.defaultURL(documents: documentsURL)
            let report = try await reportingBucketErrors {
                let sync = try MediaSync(store: try bucketOptions.makeStore(), documents: documentsURL, user: user,
                                         manifestURL: manifestURL)
                return try await sync.run(options)
            }
            for refused in report.refused {
                printError("refused bucket key: \(refused.reason) (\(refused.path))",
                           hint: nil)
            }
            for failure in report.errors {
                printError("\(failure.reason) (\(failure.path))", hint: nil)
            }
            if report.deletionsSkipped {
                FileHandle.standardError.write(Data("hint: deletions were skipped because of the errors above; fix them and run again\n".utf8))
            }
            for c in report.conflictCopies {
                FileHandle.standardError.write(Data("conflict: \(c.path) changed on both sides; the \(c.loser == .local ? "local" : "bucket's") version is kept as \(c.copy.debugDescription)\n".utf8))
            }
            if json {
                FileHandle.standardOutput.write(try report.jsonData())
                FileHandle.standardOutput.write(Data("\n".utf8))
            } else {
                print(report.summary)
            }
            if !report.succeeded { throw ExitCode.failure }
        }
    }

    /// `rtsync media fetch URL...`.
    struct Fetch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "fetch",
            abstract: "Fetch media URLs (http, https, file) into a cache folder, revalidating cached copies.")

        @Argument(help: "URLs to fetch.") var urls: [String]
        @Option(help: ArgumentHelp("Cache folder.", valueName: "dir")) var cache: String
        @Option(name: .customLong("max-bytes"), help: "Evict least recently used files past this size.")
        var maxBytes: Int64 = 512 << 20
        @Flag(help: "Print results as JSON.") var json = false

        func validate() throws {
            if urls.isEmpty { throw ValidationError("give at least one URL") }
            if maxBytes <= 0 { throw ValidationError("--max-bytes must be positive") }
            for text in urls {
                guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                      ["http", "https", "file"].contains(scheme) else {
                    throw ValidationError("not an http, https or file URL (\(text))")
                }
            }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let downloadCache = try DownloadCache(folder: URL(fileURLWithPath: cache, isDirectory: true), maxBytes: maxBytes)
                var results: [DownloadCache.Result] = []
                for text in urls {
                    let result = try await downloadCache.fetch(URL(string: text)!)
                    results.append(result)
                    if !json { print("\(result.status.rawValue)\t\(result.fileURL.path)\t\(result.url)") }
                }
                if json { try printJSON(results) }
            }
        }
    }
}
