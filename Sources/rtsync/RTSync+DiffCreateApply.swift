import ArgumentParser
import DiffFormat
import Foundation
import SyncEngine

extension RTSync.Diff {
    /// `rtsync diff create`.
    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Export every change not yet exported as one diff file.",
            discussion: "Prints the path of the new <KSUID>.sqlite. With nothing to export it says so, writes no file and exits 0. Ctrl-C or SIGTERM during the export rolls it back (no file, every change still pending) and exits 130 or 143."
        )
        @OptionGroup var database: DatabaseOptions
        @Option(help: "Folder to write the diff into (created if missing).") var out: String
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            let signals = StopSignals()
            try database.lockingHome(stoppingOn: signals, command: "diff create") { try export(signals) }
        }

        private func export(_ signals: StopSignals) throws {
            let db = try database.open()
            do {
                let result: ExportResult?
                do {
                    if signals.stopRequested { throw SyncEngineError.interrupted(operation: "export", path: out) }
                    result = try db.exportChanges(to: URL(fileURLWithPath: out), shouldStop: { signals.stopRequested })
                } catch SyncEngineError.interrupted {
                    throw StopSignals.stopped("diff create", by: signals.receivedSignal ?? SIGINT, done: "nothing exported (rolled back, no file written)",
                                              left: "every change, still pending", path: database.db)
                }
                if let sig = signals.receivedSignal {
                    // The signal came after the last check: the diff is whole and recorded.
                    if let result { print(result.file) }
                    throw StopSignals.stopped("diff create", by: sig, done: result.map { "diff \($0.file) written" } ?? "nothing to export", left: "nothing",
                                              path: database.db, hint: "nothing was lost; the export is complete")
                }
                if json {
                    if let result { printJSON(result) } else { print(#"{"file": null, "rows": 0}"#) }
                } else if let result {
                    print(result.file)
                } else {
                    FileHandle.standardError.write(Data("nothing to export: no changes since the last diff\n".utf8))
                }
                // Changes the export dropped (rows with a NULL in their key, which no device can find): say so.
                let dropped = db.lastExportDroppedNullKeys
                if !dropped.isEmpty { warnNullKeys(dropped) }
            } catch { throw report(error) }
        }
    }

    /// `rtsync diff apply`.
    struct Apply: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply diff files (or folders of them) in KSUID order.",
            discussion: "Each diff is one transaction and is applied at most once (re-applying reports 'skipped'). A rejected diff changes nothing; the file stays where it is and a copy goes to the quarantine folder. An untracked database is refused before any diff is read. Exit status 1 when any diff was rejected. Ctrl-C or SIGTERM lets the diff being applied finish, applies no more, says how many are left and exits 130 or 143."
        )
        @OptionGroup var database: DatabaseOptions
        @Argument(help: "Diff files or folders containing <KSUID>.sqlite files.") var paths: [String]
        @Option(help: "Where copies of rejected diffs go (default: 'quarantine' beside the database).") var quarantine: String?
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        func run() throws {
            let signals = StopSignals()
            try database.lockingHome(stoppingOn: signals, command: "diff apply") { try applyAll(signals) }
        }

        private func applyAll(_ signals: StopSignals) throws {
            let db = try database.open()
            // Refused before any diff is touched: an untracked database would reject every diff.
            guard db.isTracked else {
                throw fail("database is not tracked (\(database.db))", hint: "rtsync track --db \(database.db) --all")
            }
            var files: [URL] = []
            let fm = FileManager.default
            for p in paths {
                var isDir: ObjCBool = false
                guard fm.fileExists(atPath: p, isDirectory: &isDir) else { throw fail("no such file or folder (\(p))", hint: "pass diff files or folders that hold them") }
                if isDir.boolValue {
                    let names = (try? fm.contentsOfDirectory(atPath: p)) ?? []
                    files += names.filter { DiffFile.diffID(fromFileName: $0) != nil }.map { URL(fileURLWithPath: p).appendingPathComponent($0) }
                } else {
                    files.append(URL(fileURLWithPath: p))
                }
            }
            let q = URL(fileURLWithPath: quarantine ?? URL(fileURLWithPath: database.db).deletingLastPathComponent().appendingPathComponent("quarantine").path)
            // The files are the user's: a rejected one is copied into quarantine, never moved.
            let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
            // Each diff is one transaction: a signal lets the current one finish and starts no other.
            var reports = display.run {
                db.apply(diffs: files, quarantine: nil, shouldStop: { signals.stopRequested }, onDiff: { done, total, next in
                    display.set("apply \(done + 1)/\(total) diffs: \(next.lastPathComponent)")
                })
            }
            for i in reports.indices where reports[i].status == .rejected {
                reports[i].quarantinedTo = SyncDatabase.quarantine(URL(fileURLWithPath: reports[i].file), folder: q, reason: reports[i].reason ?? "", keepingOriginal: true)
            }
            if json {
                printJSON(reports)
            } else {
                for r in reports {
                    let name = terminalSafe(URL(fileURLWithPath: r.file).lastPathComponent)
                    switch r.status {
                    case .applied:
                        var line = "applied  \(name): \(r.inserted) inserted, \(r.updated) updated, \(r.deleted) deleted, \(r.conflicts) conflicts"
                        if !r.tablesCreated.isEmpty { line += "; created \(r.tablesCreated.joined(separator: ", "))" }
                        if !r.columnsAdded.isEmpty { line += "; added \(r.columnsAdded.joined(separator: ", "))" }
                        if !r.columnsKeptAside.isEmpty { line += "; kept aside (columns of a newer app version) \(r.columnsKeptAside.joined(separator: ", "))" }
                        if r.held > 0 { line += "; \(r.held) new row(s) held back (see rtsync status)" }
                        if !r.typeDifferences.isEmpty { line += "; declared types differ (values stored as declared here): \(r.typeDifferences.joined(separator: "; "))" }
                        print(terminalSafe(line, limit: 4_000))
                    case .skipped:
                        print("skipped  \(name): \(terminalSafe(r.reason ?? ""))")
                    case .deferred:
                        print("deferred \(name): \(terminalSafe(r.reason ?? ""))")
                        _ = fail("diff not applied yet: \(r.reason ?? "") (\(r.file))", hint: "apply the diffs it depends on first, or run the same command again with them; the file was left in place")
                    case .rejected:
                        print("rejected \(name): \(terminalSafe(r.reason ?? ""))")
                        _ = fail("diff rejected: \(r.reason ?? "") (\(r.file))", hint: "nothing was changed; the file stays where it is, a copy is in \(r.quarantinedTo ?? "(could not copy it)")")
                    }
                }
                let c = Dictionary(grouping: reports, by: \.status).mapValues(\.count)
                print("\(reports.count) diff(s): \(c[.applied] ?? 0) applied, \(c[.skipped] ?? 0) skipped, \(c[.rejected] ?? 0) rejected" + (c[.deferred].map { ", \($0) deferred" } ?? ""))
            }
            if let sig = signals.receivedSignal {
                let handled = Set(reports.map(\.file)), left = files.filter { !handled.contains($0.path) }.count
                throw StopSignals.stopped("diff apply", by: sig, done: "\(reports.count) of \(files.count) diff(s) handled (\(reports.filter { $0.status == .applied }.count) applied)",
                                          left: left == 0 ? "nothing" : "\(left) diff(s) not started, files untouched", path: database.db)
            }
            if reports.contains(where: { $0.status == .rejected || $0.status == .deferred }) { throw ExitCode(1) }
        }
    }
}

