import ArgumentParser
import DiffFormat
import Foundation
import RTSQLite

extension RTSync {
    /// `rtsync ksuid new|inspect`.
    struct KSUIDCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ksuid",
            abstract: "Make and inspect KSUIDs (segmentio/ksuid compatible).",
            subcommands: [New.self, Inspect.self]
        )

        struct New: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Print new KSUIDs, one per line, in creation order.")
            @Option(name: .shortAndLong, help: "How many ids to make.") var count = 1
            @Flag(help: "Print a JSON array of the ids.") var json = false

            func validate() throws {
                guard (1...1_000_000).contains(count) else { throw ValidationError("--count must be between 1 and 1000000") }
            }

            func run() {
                if json { printJSON((0..<count).map { _ in KSUID.generate().string }); return }
                var out = ""
                for _ in 0..<count { out += KSUID.generate().string + "\n" }
                print(out, terminator: "")
            }
        }

        struct Inspect: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Show the time, timestamp and payload of KSUIDs.")
            @Argument(help: "One or more 27-character KSUIDs.") var ids: [String]
            @Flag(help: "Print JSON.") var json = false

            struct Info: Encodable {
                let id: String, time: String, timestamp: UInt32, unixTime: Int64, payload: String, raw: String
            }

            func run() throws {
                var infos: [Info] = []
                for text in ids {
                    do {
                        let id = try KSUID(string: text)
                        infos.append(Info(id: id.string, time: ISO8601.format(id.date), timestamp: id.timestamp, unixTime: id.unixTime,
                                          payload: id.payload.hexString.uppercased(), raw: id.bytes.hexString.uppercased()))
                    } catch let error as KSUIDError {
                        throw fail("\(error)", hint: "a KSUID is 27 characters from 0-9, A-Z, a-z, at most aWgEPTl1tmebfsQzFP4bxwgy80V")
                    }
                }
                // Always an array, whatever the number of ids, so scripts parse one shape.
                if json { printJSON(infos); return }
                for i in infos {
                    print("""
                    id:        \(i.id)
                    time:      \(i.time)
                    timestamp: \(i.timestamp) (unix \(i.unixTime))
                    payload:   \(i.payload)
                    raw:       \(i.raw)
                    """)
                }
            }
        }
    }
}
