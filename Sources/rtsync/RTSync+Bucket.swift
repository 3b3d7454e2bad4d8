import ArgumentParser
import BucketClient
import Foundation
import SyncEngine

/// Options shared by commands that talk to a bucket.
struct BucketOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Bucket URL: s3://bucket/prefix or file:///path (default: the --home's bucket, else $RTSYNC_BUCKET, else the default home's).",
                                            valueName: "url"))
    var bucket: String?
    @Option(help: "Home folder whose bucket to use (its settings.json, else <home>/bucket), as other commands take it.") var home: String?

    /// The bucket URL: --bucket, else --home's, else RTSYNC_BUCKET, else the default home's when it exists.
    func bucketURL() throws -> String {
        // As for the other commands: a relative local path (plain or file://relative) is taken from the current folder.
        if let bucket, !bucket.isEmpty { return RTSync.Init.absoluteBucket(bucket) }
        if let home, !home.isEmpty { return try Self.homeBucket(RTSyncHome.resolve(home)) }
        if let env = ProcessInfo.processInfo.environment["RTSYNC_BUCKET"], !env.isEmpty { return env }
        let defaultHome = RTSyncHome.resolve(nil)
        if FileManager.default.fileExists(atPath: defaultHome.settingsFile.path) { return try Self.homeBucket(defaultHome) }
        throw ValidationError("no bucket given: pass --bucket s3://bucket/prefix or file:///path, --home HOME, a full s3://bucket/key, or set RTSYNC_BUCKET")
    }

    /// The bucket a home syncs with: its settings' bucket, else the embedded local-folder default.
    static func homeBucket(_ home: RTSyncHome) throws -> String {
        let settings: RTSyncSettings
        do { settings = try home.loadSettings() } catch { throw report(error, subject: home.root.path) }
        return HomeOptions.bucketURL(of: home, settings: settings)
    }

    /// Splits a full object URL typed as a key (`s3://bucket/some/key`, as `aws s3 cp` takes it) into the bucket URL
    /// and the key; a plain key is returned as it is, for the bucket of the options.
    func split(_ keyOrURL: String) throws -> (bucket: String?, key: String) {
        guard keyOrURL.lowercased().hasPrefix("s3://") else { return (nil, keyOrURL) }
        if bucket != nil { throw ValidationError("give either --bucket and a key, or a full s3://bucket/key URL, not both") }
        let rest = keyOrURL.dropFirst("s3://".count)
        guard let slash = rest.firstIndex(of: "/"), slash != rest.startIndex else {
            return ("s3://" + rest, "")
        }
        return ("s3://" + rest[..<slash], String(rest[rest.index(after: slash)...]))
    }

    /// The store; a command that only reads (`creating: false`) finds a missing local folder an error, as rclone's
    /// "directory not found", instead of creating it. `url` overrides the options' bucket (a full object URL).
    func makeStore(creating: Bool = true, url: String? = nil) throws -> any ObjectStore {
        let text = try url ?? bucketURL()
        if let u = URL(string: text), u.scheme?.lowercased() == "file", let host = u.host, !host.isEmpty, host != "localhost" {
            // Checked before the read-only path below, which would take file://relative/path for the folder /path.
            throw BucketError.unsupportedURL(url: text, reason: "a file URL has no host: file:///absolute/path (three slashes), or give a plain path")
        }
        if !creating {
            let path: String? = text.hasPrefix("/") ? text : (URL(string: text).flatMap { $0.scheme?.lowercased() == "file" ? $0.path : nil })
            if let path, !path.isEmpty { return try LocalFolderStore(root: URL(fileURLWithPath: path, isDirectory: true), create: false) }
        }
        return try makeObjectStore(urlString: text)
    }

    /// The store and key for a key argument that may be a full `s3://bucket/key` URL.
    func store(for keyOrURL: String, creating: Bool = true) throws -> (store: any ObjectStore, key: String) {
        let (url, key) = try split(keyOrURL)
        return (try makeStore(creating: creating, url: url), key)
    }
}

/// Runs `body`, turning a ``BucketError`` into `error: ... (key)` and `hint: ...` on standard error and exit code 1.
func reportingBucketErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as BucketError {
        printError(error.description, hint: error.hint)
        throw ExitCode.failure
    } catch let error as ValidationError {
        throw error
    } catch {
        throw report(error)
    }
}

extension RTSync {
    /// `rtsync bucket`: low-level object commands for users and scripts.
    struct Bucket: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "bucket",
            abstract: "List, download, upload, delete and presign objects in a bucket.",
            discussion: """
            The bucket is s3://bucket/prefix (AWS_REGION, AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, \
            AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN apply, else the AWS_PROFILE profile of ~/.aws/credentials \
            and ~/.aws/config, or its credential_process) or file:///path (a local folder). \
            Keys are relative to the prefix.
            """,
            subcommands: [List.self, Get.self, Put.self, Remove.self, Presign.self]
        )
    }
}

extension RTSync.Bucket {
    /// `rtsync bucket ls [PREFIX]`.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List objects under a prefix.")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Key prefix to list (default: everything), or a full s3://bucket/prefix URL.") var prefix: String = ""
        @Flag(help: "Print a JSON array of {key, size, etag, lastModified}.") var json = false

        func run() async throws {
            try await reportingBucketErrors {
                let (store, prefix) = try options.store(for: prefix, creating: false)
                let objects = try await store.listAll(prefix: prefix)
                if json { return printJSON(objects) }
                let formatter = ISO8601DateFormatter()
                for object in objects {
                    let date = object.lastModified.map { formatter.string(from: $0) } ?? "-"
                    let size = String(object.size)
                    print("\(String(repeating: " ", count: max(0, 12 - size.count)))\(size)  \(date)  \(object.key)")
                }
            }
        }
    }

    /// `rtsync bucket get KEY [FILE]`.
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "get", abstract: "Download an object to a file (resumable), or to standard output with '-'.")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Object key, or a full s3://bucket/key URL.") var key: String
        @Argument(help: "Destination file, or '-' for standard output (default: the key's last segment).") var destination: String?
        @Flag(help: "Print the object's metadata as JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        func run() async throws {
            try await reportingBucketErrors {
                let (store, key) = try options.store(for: key, creating: false)
                // The size the bucket gives beforehand: a download of another size is never written out.
                let listed = try await store.head(key: key)
                if destination == "-" {
                    FileHandle.standardOutput.write(try await store.get(key: key, expecting: listed))
                    return
                }
                let path = destination ?? String(key.split(separator: "/").last ?? Substring(key))
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                display.set("download \(key)")
                let info = try await display.run { try await store.download(key: key, to: URL(fileURLWithPath: path), expecting: listed) }
                if json { printJSON(info) } else { print("downloaded \(info.size) bytes to \(path)") }
            }
        }
    }

    /// `rtsync bucket put FILE KEY`.
    struct Put: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "put", abstract: "Upload a file (multipart and resumable when large, on S3).")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Local file to upload.") var file: String
        @Argument(help: "Destination key (default: the file name), or a full s3://bucket/key URL.") var key: String?
        @Flag(name: .customLong("if-absent"), help: "Fail if the key already exists (If-None-Match: *).") var ifAbsent = false
        @Flag(help: "Print the stored object's metadata as JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        func validate() throws {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw ValidationError("cannot read \(file)")
            }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let url = URL(fileURLWithPath: file)
                var (store, target) = try options.store(for: key ?? url.lastPathComponent)
                // `s3://bucket/` or `s3://bucket/folder/` names where the file goes, as with `aws s3 cp`.
                if target.isEmpty || target.hasSuffix("/") { target += url.lastPathComponent }
                let info: ObjectInfo
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                display.set("upload \(target)")
                display.transfers.expect(bytes: ((try? FileManager.default.attributesOfItem(atPath: url.path)[.size]) as? NSNumber)?.int64Value ?? 0, key: target)
                defer { display.finish() }
                if ifAbsent {
                    let data: Data
                    do { data = try Data(contentsOf: url) } catch {
                        throw BucketError.localIO(path: file, description: error.localizedDescription)
                    }
                    info = try await display.run { try await store.put(key: target, data: data, ifNoneMatch: true) }
                } else {
                    info = try await display.run { try await store.put(key: target, fileURL: url) }
                }
                if json { printJSON(info) } else { print("uploaded \(info.size) bytes to \(target) (etag \(info.etag))") }
            }
        }
    }

    /// `rtsync bucket rm KEY...`.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rm", abstract: "Delete objects.")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Keys to delete (or full s3://bucket/key URLs).") var keys: [String]

        func validate() throws {
            if keys.isEmpty { throw ValidationError("give at least one key to delete") }
        }

        func run() async throws {
            try await reportingBucketErrors {
                for keyOrURL in keys {
                    let (store, key) = try options.store(for: keyOrURL, creating: false)
                    try await store.delete(key: key)
                }
            }
        }
    }

    /// `rtsync bucket presign KEY`.
    struct Presign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "presign", abstract: "Print a presigned URL for an object (s3:// buckets only).")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Object key, or a full s3://bucket/key URL.") var key: String
        @Option(help: "Seconds the URL stays valid (1 to 604800).") var expires: Int = 3600
        @Option(help: "HTTP method the URL allows (GET or PUT).") var method: String = "GET"
        @Flag(help: "Print JSON: {url, key, method, expiresAt}.") var json = false

        func validate() throws {
            guard (1...604_800).contains(expires) else { throw ValidationError("--expires must be between 1 and 604800 seconds") }
            guard ["GET", "PUT", "HEAD", "DELETE"].contains(method.uppercased()) else {
                throw ValidationError("--method must be GET, PUT, HEAD or DELETE")
            }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let (url, key) = try options.split(key)
                let urlText = try url ?? options.bucketURL()
                guard let store = try options.makeStore(url: urlText) as? S3Store else {
                    throw fail("presigned URLs are for s3:// buckets; this bucket is a local folder (\(urlText))",
                               hint: "a local folder's objects are plain files: share or open the file itself")
                }
                let presigned = try store.presignedURL(key: key, method: method.uppercased(), expires: expires).absoluteString
                if json {
                    struct Out: Encodable { let url: String; let key: String; let method: String; let expiresAt: Date }
                    printJSON(Out(url: presigned, key: key, method: method.uppercased(), expiresAt: Date().addingTimeInterval(Double(expires))))
                    return
                }
                print(presigned)
            }
        }
    }
}
