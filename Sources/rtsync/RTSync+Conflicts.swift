import ArgumentParser
import DiffFormat
import Foundation
import SyncEngine

extension RTSync {
    /// `rtsync conflicts list|show|restore`.
    struct Conflicts: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List, show and restore values that lost a merge or were refused by policy.",
            subcommands: [List.self, Show.self, Restore.self]
        )

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

            func run() throws {
                try database.lockingHome {
                    let db = try database.open()
                    do {
                        try db.restoreConflict(id: id)
                        let c = try db.conflict(id: id)
                        print("restored conflict #\(id): \(c.table) [\(c.key)] \(c.column.isEmpty ? "row deleted" : "\(c.column) = \(c.losingValue.sqlLiteral)")")
                    } catch { throw report(error) }
                }
            }
        }
    }
}
