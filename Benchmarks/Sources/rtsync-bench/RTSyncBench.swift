import ArgumentParser
import Foundation

@main
struct RTSyncBench: AsyncParsableCommand {
    static let suites = ["capture", "export-apply", "shapes", "backup", "media", "sync", "catchup", "encryption"]

    static let configuration = CommandConfiguration(
        commandName: "rtsync-bench",
        abstract: "rtsync's benchmark harness: each performance aim measured against a baseline in the same run.",
        discussion: "Suites: \(suites.joined(separator: ", ")) (default: all). Build and run in release mode:\n  cd Benchmarks && swift run -c release rtsync-bench [SUITE...] [--quick] [--json FILE]")

    @Argument(help: "Suites to run (default: all).")
    var suites: [String] = []

    @Flag(help: "Smaller data sets and fewer repetitions (all suites in under 5 minutes on 2 cores).")
    var quick = false

    @Option(help: "Write the result rows as JSON to this file.")
    var json: String?

    @Option(help: "Repetitions per case (default 5, or 3 with --quick).")
    var runs: Int?

    @Option(help: "Scratch folder for generated databases and files (default: a new folder in the system temp dir).")
    var scratch: String?

    func validate() throws {
        for s in suites where !Self.suites.contains(s) {
            throw ValidationError("unknown suite '\(s)'; suites are \(Self.suites.joined(separator: ", "))")
        }
        if let runs, runs < 1 { throw ValidationError("--runs must be at least 1") }
    }

    func run() async throws {
        setvbuf(stdout, nil, _IOLBF, 0)  // tables appear as they are printed, also when piped to a file
        let selected = suites.isEmpty ? Self.suites : Self.suites.filter { suites.contains($0) }
        let scratchURL = scratch.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("rtsync-bench-\(ProcessInfo.processInfo.processIdentifier)", isDirectory: true)
        try FileManager.default.createDirectory(at: scratchURL, withIntermediateDirectories: true)
        defer { if scratch == nil { try? FileManager.default.removeItem(at: scratchURL) } }
        let ctx = BenchContext(quick: quick, runs: runs, scratch: scratchURL, repoRoot: Self.repoRoot())
        let machine = Machine.read(scratch: scratchURL)
        let command = "swift run -c release rtsync-bench " + CommandLine.arguments.dropFirst().joined(separator: " ")
        print("rtsync-bench \(ISO8601DateFormatter().string(from: Date()))")
        print("machine: \(machine.summary)")
        print("command: \(command.trimmingCharacters(in: .whitespaces))")
        print("runs per case: \(ctx.runs)\(quick ? " (--quick)" : "")\n")

        var moto: MotoServer?, motoNote = ""
        if selected.contains("media") || selected.contains("sync") || selected.contains("catchup") || selected.contains("encryption") {
            (moto, motoNote) = await MotoServer.start(scratch: scratchURL)
            FileHandle.standardError.write(Data("  · \(motoNote)\n".utf8))
        }
        defer { moto?.stop() }

        var all: [Row] = []
        let started = benchClock.now
        for suite in selected {
            print("## \(suite)\n")
            FileHandle.standardError.write(Data("  · suite \(suite) …\n".utf8))
            let t0 = benchClock.now
            var rows: [Row]
            do {
                switch suite {
                case "capture": rows = try runCaptureSuite(ctx)
                case "export-apply": rows = try runExportApplySuite(ctx)
                case "shapes": rows = try runShapesSuite(ctx)
                case "backup": rows = try await runBackupSuite(ctx)
                case "media": rows = try await runMediaSuite(ctx, moto: moto, motoNote: motoNote)
                case "sync": rows = try await runSyncSuite(ctx, moto: moto, motoNote: motoNote)
                case "catchup": rows = try await runCatchUpSuite(ctx, moto: moto, motoNote: motoNote)
                case "encryption": rows = try await runEncryptionSuite(ctx, moto: moto, motoNote: motoNote)
                default: rows = []
                }
            } catch {
                rows = [Row(suite: suite, name: "suite failed", rtsyncNote: "error: \(error)")]
            }
            print(renderTable(rows))
            print("\n(\(suite): \(formatTime(seconds(benchClock.now - t0))))\n")
            all += rows
        }
        print("total: \(formatTime(seconds(benchClock.now - started)))")
        let met = all.filter { $0.aimMet == true }.count, missed = all.filter { $0.aimMet == false }.count
        print("aims: \(met) met, \(missed) not met, \(all.filter { $0.aim != nil && $0.aimMet == nil }.count) not measured")

        if let json {
            let report = Report(date: ISO8601DateFormatter().string(from: Date()), machine: machine, command: command, quick: quick, runs: ctx.runs, rows: all)
            let enc = JSONEncoder()
            enc.outputFormatting = [.prettyPrinted, .sortedKeys]
            try enc.encode(report).write(to: URL(fileURLWithPath: json))
            print("wrote \(json)")
        }
    }

    /// The repository root (the folder above Benchmarks/), found from this source file's location.
    static func repoRoot() -> URL {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<4 { url.deleteLastPathComponent() }
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).deletingLastPathComponent()
    }
}

struct Report: Codable {
    var date: String
    var machine: Machine
    var command: String
    var quick: Bool
    var runs: Int
    var rows: [Row]
}

struct Machine: Codable {
    var cores: Int
    var memoryGiB: Double
    var scratchFilesystem: String
    var os: String
    var sqlite: String

    var summary: String {
        "\(cores) cores, \(String(format: "%.0f", memoryGiB)) GiB memory, scratch on \(scratchFilesystem), \(os), SQLite \(sqlite)"
    }

    static func read(scratch: URL) -> Machine {
        let info = ProcessInfo.processInfo
        return Machine(cores: info.activeProcessorCount, memoryGiB: Double(info.physicalMemory) / 1_073_741_824,
                       scratchFilesystem: filesystemType(scratch), os: info.operatingSystemVersionString, sqlite: plainSQLiteVersion())
    }
}
