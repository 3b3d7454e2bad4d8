import ArgumentParser
import BucketClient
import DiffFormat
import Foundation
import SyncEngine

extension RTSync {
    /// `rtsync conflicts list|show|restore`.
    struct Conflicts: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List, show and restore values that lost a merge or were refused by policy; list media conflict copies.",
            subcommands: [List.self, Show.self, Restore.self, Media.self]
        )

        struct Media: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "List media files edited on two devices, and where the losing version was kept.",
                discussion: """
                Media sync never overwrites a version a user made: when a recording or image changed on this device \
                and in the bucket since they last synced, the newer one keeps the name and the other is kept beside \
                it as 'name (conflict <device> <UTC date>).ext', here and in the bucket. Reads the media manifest of \
                the home's documents folder (shared by rtsync sync --media and rtsync media sync), of the folder \
                given with --documents, or the file given with --manifest.
                """
            )
            @Option(help: "Folder holding support/, documents/ and settings.json (default: $RTSYNC_HOME, else ~/.rtsync).") var home: String?
            @Option(help: ArgumentHelp("Documents folder of `rtsync media sync` (its manifest is <documents>/.rtsync-media-manifest.json).", valueName: "dir"))
            var documents: String?
            @Option(help: ArgumentHelp("Media manifest file.", valueName: "file")) var manifest: String?
            @Flag(help: "Print JSON.") var json = false

            func validate() throws {
                if [home, documents, manifest].compactMap({ $0 }).count > 1 {
                    throw ValidationError("give at most one of --home, --documents, --manifest")
                }
            }

            func run() throws {
                let url = manifest.map { URL(fileURLWithPath: $0) }
                    ?? MediaManifest.defaultURL(documents: documents.map { URL(fileURLWithPath: $0) } ?? RTSyncHome.resolve(home).documents)
                let list: [MediaConflict]
                do { list = try MediaManifest.load(from: url).conflicts } catch let e as BucketError {
                    throw fail(e.description, hint: "the media manifest is rewritten by the next media sync; move this one aside if it is damaged")
                }
                if json { printJSON(list); return }
                if list.isEmpty { print("no media conflicts"); return }
                for c in list {
                    let place = [c.keptLocally ? "here" : nil, c.keptInBucket ? "in the bucket" : nil].compactMap { $0 }.joined(separator: " and ")
                    print("\(ISO8601DateFormatter().string(from: c.at)) \(c.path): the \(c.loser == .local ? "local" : "bucket's") version lost; kept as \(c.copy.debugDescription) (\(place)), found by \(c.device)")
                }
                print("\(list.count) media conflict(s)")
            }
        }

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List conflict log entries, oldest first.")
            @OptionGroup var database: DatabaseOptions
            @Option(help: "Only this table.") var table: String?
            @Flag(help: "Hide entries already restored.") var open = false
            @Flag(help: "Print JSON.") var json = false

            func run() throws {
                let db = try database.open()
                do {
                    let list = try db.conflicts(includeRestored: !open, table: table)
                    if json { printJSON(list); return }
                    if list.isEmpty { print("no conflicts"); return }
                    for c in list {
                        print("#\(c.id) \(c.table) [\(c.key)] \(c.column.isEmpty ? "(row delete)" : c.column): \(c.winner) won; lost \(c.losingValue.sqlLiteral)\(c.restored ? " (restored)" : "") — \(c.reason)")
                    }
                    print("\(list.count) conflict(s)")
                } catch { throw report(error) }
            }
        }

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Show one conflict log entry in full.")
            @OptionGroup var database: DatabaseOptions
            @Argument(help: "Conflict id.") var id: Int64
            @Flag(help: "Print JSON.") var json = false

            func run() throws {
                let db = try database.open()
                do {
                    let c = try db.conflict(id: id)
                    if json { printJSON(c); return }
                    print("""
                    id:           \(c.id)
                    at:           \(c.at)
                    diff:         \(c.diffID ?? "-")
                    table:        \(c.table)
                    key:          \(c.key)
                    column:       \(c.column.isEmpty ? "(whole row: delete)" : c.column)
                    local value:  \(c.localValue.sqlLiteral)  clock \(c.localClock.map { "\($0)" } ?? "unexported local change")
                    remote value: \(c.remoteValue.sqlLiteral)  clock \(c.remoteClock.map { "\($0)" } ?? "-")
                    winner:       \(c.winner)
                    reason:       \(c.reason)
                    restored:     \(c.restored ? "yes" : "no")
                    """)
                } catch { throw report(error) }
            }
        }

        struct Restore: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Re-apply a conflict's losing value as a new local change (exported with the next diff)."
            )
            @OptionGroup var database: DatabaseOptions
            @Argument(help: "Conflict id.") var id: Int64
            @Flag(help: "Print JSON: {conflict, alreadyRestored}.") var json = false

            struct Output: Encodable { let conflict: ConflictRecord; let alreadyRestored: Bool }

            func run() throws {
                try database.lockingHome {
                    let db = try database.open()
                    do {
                        let before = try db.conflict(id: id)
                        if before.restored {
                            if json { printJSON(Output(conflict: before, alreadyRestored: true)); return }
                            print("conflict #\(id) was already restored; nothing to do")
                            return
                        }
                        try db.restoreConflict(id: id)
                        let c = try db.conflict(id: id)
                        if json { printJSON(Output(conflict: c, alreadyRestored: false)); return }
                        print("restored conflict #\(id): \(c.table) [\(c.key)] \(c.column.isEmpty ? "row deleted" : "\(c.column) = \(c.losingValue.sqlLiteral)")")
                    } catch { throw report(error, subject: database.db) }
                }
            }
        }
    }
}
