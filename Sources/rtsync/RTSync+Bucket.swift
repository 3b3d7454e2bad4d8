import ArgumentParser
import BucketClient
import Foundation

/// Options shared by commands that talk to a bucket.
struct BucketOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Bucket URL: s3://bucket/prefix or file:///path (default: $RTSYNC_BUCKET).",
                                            valueName: "url"))
    var bucket: String?

    /// The bucket URL from --bucket or RTSYNC_BUCKET.
    func bucketURL() throws -> String {
        if let bucket, !bucket.isEmpty { return bucket }
        if let env = ProcessInfo.processInfo.environment["RTSYNC_BUCKET"], !env.isEmpty { return env }
        throw ValidationError("no bucket given: pass --bucket s3://bucket/prefix or file:///path, or set RTSYNC_BUCKET")
    }

    /// The store; a command that only reads (`creating: false`) finds a missing local folder an error, as rclone's
    /// "directory not found", instead of creating it.
    func makeStore(creating: Bool = true) throws -> any ObjectStore {
        let text = try bucketURL()
        if !creating {
            let path: String? = text.hasPrefix("/") ? text : (URL(string: text).flatMap { $0.scheme?.lowercased() == "file" ? $0.path : nil })
            if let path, !path.isEmpty { return try LocalFolderStore(root: URL(fileURLWithPath: path, isDirectory: true), create: false) }
        }
        return try makeObjectStore(urlString: text)
    }
}

/// Runs `body`, turning a ``BucketError`` into `error: ... (key)` and `hint: ...` on standard error and exit code 1.
func reportingBucketErrors<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as BucketError {
        printError(error.description, hint: error.hint)
        throw ExitCode.failure
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
        @Argument(help: "Key prefix to list (default: everything).") var prefix: String = ""
        @Flag(help: "Print a JSON array of {key, size, etag, lastModified}.") var json = false

        func run() async throws {
            try await reportingBucketErrors {
                let objects = try await options.makeStore(creating: false).listAll(prefix: prefix)
                if json { return try printJSON(objects) }
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
        @Argument(help: "Object key.") var key: String
        @Argument(help: "Destination file, or '-' for standard output (default: the key's last segment).") var destination: String?
        @Flag(help: "Print the object's metadata as JSON.") var json = false

        func run() async throws {
            try await reportingBucketErrors {
                let store = try options.makeStore(creating: false)
                // The size the bucket gives beforehand: a download of another size is never written out.
                let listed = try await store.head(key: key)
                if destination == "-" {
                    FileHandle.standardOutput.write(try await store.get(key: key, expecting: listed))
                    return
                }
                let path = destination ?? String(key.split(separator: "/").last ?? Substring(key))
                let info = try await store.download(key: key, to: URL(fileURLWithPath: path), expecting: listed)
                if json { try printJSON(info) } else { print("downloaded \(info.size) bytes to \(path)") }
            }
        }
    }

    /// `rtsync bucket put FILE KEY`.
    struct Put: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "put", abstract: "Upload a file (multipart and resumable when large, on S3).")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Local file to upload.") var file: String
        @Argument(help: "Destination key (default: the file name).") var key: String?
        @Flag(name: .customLong("if-absent"), help: "Fail if the key already exists (If-None-Match: *).") var ifAbsent = false
        @Flag(help: "Print the stored object's metadata as JSON.") var json = false

        func validate() throws {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw ValidationError("cannot read \(file)")
            }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let store = try options.makeStore()
                let url = URL(fileURLWithPath: file)
                let target = key ?? url.lastPathComponent
                let info: ObjectInfo
                if ifAbsent {
                    let data: Data
                    do { data = try Data(contentsOf: url) } catch {
                        throw BucketError.localIO(path: file, description: error.localizedDescription)
                    }
                    info = try await store.put(key: target, data: data, ifNoneMatch: true)
                } else {
                    info = try await store.put(key: target, fileURL: url)
                }
                if json { try printJSON(info) } else { print("uploaded \(info.size) bytes to \(target) (etag \(info.etag))") }
            }
        }
    }

    /// `rtsync bucket rm KEY...`.
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rm", abstract: "Delete objects.")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Keys to delete.") var keys: [String]

        func validate() throws {
            if keys.isEmpty { throw ValidationError("give at least one key to delete") }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let store = try options.makeStore(creating: false)
                for key in keys { try await store.delete(key: key) }
            }
        }
    }

    /// `rtsync bucket presign KEY`.
    struct Presign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "presign", abstract: "Print a presigned URL for an object (s3:// buckets only).")

        @OptionGroup var options: BucketOptions
        @Argument(help: "Object key.") var key: String
        @Option(help: "Seconds the URL stays valid (1 to 604800).") var expires: Int = 3600
        @Option(help: "HTTP method the URL allows (GET or PUT).") var method: String = "GET"

        func validate() throws {
            guard (1...604_800).contains(expires) else { throw ValidationError("--expires must be between 1 and 604800 seconds") }
            guard ["GET", "PUT", "HEAD", "DELETE"].contains(method.uppercased()) else {
                throw ValidationError("--method must be GET, PUT, HEAD or DELETE")
            }
        }

        func run() async throws {
            try await reportingBucketErrors {
                let urlText = try options.bucketURL()
                guard let store = try options.makeStore() as? S3Store else {
                    throw BucketError.unsupportedURL(url: urlText, reason: "presigned URLs need an s3:// bucket")
                }
                print(try store.presignedURL(key: key, method: method.uppercased(), expires: expires).absoluteString)
            }
        }
    }
}
