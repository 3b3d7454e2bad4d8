import ArgumentParser
import BucketClient
import DiffFormat
import Foundation
import RTSQLite
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
                    var keys = KeyNames(db: db)
                    for c in list {
                        let what = c.column.isEmpty ? "row delete" : c.column
                        let here = c.column.isEmpty && c.winner == "remote" ? "kept" : shortValue(c.localValue)
                        let remote = c.column.isEmpty && c.winner == "local" ? "deleted" : shortValue(c.remoteValue)
                        print("#\(c.id) \(keys.readable(c)) \(what): here \(here) | remote \(remote) -> \(c.winner) won\(c.restored ? " (restored)" : "") — \(terminalSafe(c.reason))")
                    }
                    let open = list.filter { !$0.restored }.count
                    print("\(list.count) conflict(s), \(open) not restored; `rtsync conflicts show ID` for one, `rtsync conflicts restore ID` to bring the losing value back")
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
                    var keys = KeyNames(db: db)
                    func when(_ clock: Clock?) -> String {
                        guard let clock else { return "edited here, not exported yet" }
                        let date = Date(timeIntervalSince1970: Double(clock.hlc.milliseconds) / 1000)
                        return "\(ISO8601.format(date, fractional: true)) by site \(clock.site)"
                    }
                    let mine = (try? db.siteID()).map { site in { (c: Clock?) in c?.site == site ? " (this device)" : "" } } ?? { _ in "" }
                    print("""
                    conflict #\(c.id) in \(keys.readable(c)), \(c.column.isEmpty ? "the whole row (a delete)" : "column \(c.column)")
                                  value                               changed
                      here:       \(pad(terminalSafe(c.localValue.sqlLiteral, limit: 200), 35)) \(when(c.localClock))\(mine(c.localClock))
                      remote:     \(pad(terminalSafe(c.remoteValue.sqlLiteral, limit: 200), 35)) \(when(c.remoteClock))\(mine(c.remoteClock))
                    winner:       \(c.winner) (\(terminalSafe(c.reason)))
                    lost:         \(terminalSafe(c.losingValue.sqlLiteral, limit: 200))\(c.restored ? " — restored" : " — `rtsync conflicts restore \(c.id)` brings it back")
                    logged:       \(c.at) while applying diff \(c.diffID ?? "-")
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

/// A logged value cut for a one-line listing.
func shortValue(_ value: SQLValue) -> String { terminalSafe(value.sqlLiteral, limit: 40) }

/// `text` padded with spaces to `width` characters (longer text is left as it is).
func pad(_ text: String, _ width: Int) -> String { text.count >= width ? text : text + String(repeating: " ", count: width - text.count) }

/// Conflict keys as people read them: `things(account_id='a', id='2si…')`, from the table's primary-key columns.
struct KeyNames {
    let db: SyncDatabase
    private var columns: [String: [String]] = [:]

    init(db: SyncDatabase) { self.db = db }

    /// The table and its key columns with their values; the raw key when the table or key cannot be read.
    mutating func readable(_ c: ConflictRecord) -> String {
        if columns[c.table] == nil {
            columns[c.table] = ((try? db.query("SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", [.text(c.table)])) ?? [])
                .compactMap { $0.first?.string }
        }
        let table = terminalSafe(c.table, limit: 60)
        guard let names = columns[c.table], let values = c.keyValues, names.count == values.count, !names.isEmpty else {
            return "\(table) [\(terminalSafe(c.key, limit: 80))]"
        }
        let pairs = zip(names, values).map { "\(terminalSafe($0, limit: 40))=\(terminalSafe($1.sqlLiteral, limit: 40))" }
        return "\(table)(\(pairs.joined(separator: ", ")))"
    }
}
