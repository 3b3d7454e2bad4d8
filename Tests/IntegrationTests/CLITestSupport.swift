import Foundation
import Testing

/// The result of running the `rtsync` binary.
struct CommandResult {
    let status: Int32
    let stdout: String
    let stderr: String
}

/// A fresh folder under the system temp directory, removed when the value is released.
final class TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("IntegrationTests-" + UUID().uuidString, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
}

enum RTSyncBinary {
    /// The package root: this file is `<root>/Tests/IntegrationTests/CLITestSupport.swift`.
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The built `rtsync`: `$RTSYNC_BIN`, else the one next to the test bundle, else the newest under `<root>/.build*/`.
    static let url: URL? = {
        let fm = FileManager.default
        if let env = ProcessInfo.processInfo.environment["RTSYNC_BIN"], !env.isEmpty {
            return URL(fileURLWithPath: env)
        }
        // The test bundle lives in the build products folder (`.../debug/<Package>PackageTests.xctest`).
        var starts = [Bundle.main.bundleURL, URL(fileURLWithPath: CommandLine.arguments[0])]
        starts += Bundle.allBundles.map(\.bundleURL)
        for start in starts {
            var dir = start
            for _ in 0..<4 {
                let candidate = dir.appendingPathComponent("rtsync")
                var isDir: ObjCBool = false
                if fm.fileExists(atPath: candidate.path, isDirectory: &isDir), !isDir.boolValue, fm.isExecutableFile(atPath: candidate.path) {
                    return candidate
                }
                dir = dir.deletingLastPathComponent()
            }
        }
        let builds = ((try? fm.contentsOfDirectory(atPath: packageRoot.path)) ?? []).filter { $0.hasPrefix(".build") }
        let found = builds.map { packageRoot.appendingPathComponent($0).appendingPathComponent("debug/rtsync") }
            .filter { fm.isExecutableFile(atPath: $0.path) }
        return found.max { a, b in
            let da = (try? fm.attributesOfItem(atPath: a.path)[.modificationDate] as? Date) ?? .distantPast
            let db = (try? fm.attributesOfItem(atPath: b.path)[.modificationDate] as? Date) ?? .distantPast
            return da < db
        }
    }()

    /// Runs `rtsync` with `arguments`, capturing both output streams (through files, so a full pipe cannot stall it).
    static func run(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
        let binary = try #require(url, "rtsync binary not found; build it or set RTSYNC_BIN", sourceLocation: sourceLocation)
        let dir = try TemporaryDirectory()
        let outURL = dir.file("stdout"), errURL = dir.file("stderr")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try out.close(); try err.close()
        return CommandResult(status: process.terminationStatus,
                             stdout: String(decoding: try Data(contentsOf: outURL), as: UTF8.self),
                             stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }
}

/// Parses JSON text into a dictionary.
func jsonObject(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
    let value = try JSONSerialization.jsonObject(with: Data(text.utf8))
    return try #require(value as? [String: Any], "not a JSON object: \(text)", sourceLocation: sourceLocation)
}
