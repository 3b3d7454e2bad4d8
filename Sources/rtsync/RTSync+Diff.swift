import ArgumentParser
import DiffFormat
import Foundation

extension RTSync {
    /// `rtsync diff ...`: work with diff files.
    struct Diff: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create, apply and inspect diff files.",
            subcommands: [Create.self, Apply.self, Inspect.self]
        )

        struct Inspect: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Validate a diff file and show its metadata and carried tables.",
                discussion: "The file is opened read-only as untrusted input; exit status 1 when it is invalid."
            )
            @Argument(help: "Diff files (<KSUID>.sqlite).") var files: [String]
            @Flag(help: "Print JSON.") var json = false

            struct Invalid: Encodable { let file: String, valid: Bool, error: String, hint: String }

            func run() throws {
                var failed = false
                var results: [Any] = []
                for path in files {
                    do {
                        let inspection = try DiffInspection.inspect(URL(fileURLWithPath: path))
                        if json { results.append(inspection) } else { print(inspection.text) }
                    } catch let error as DiffFormatError {
                        failed = true
                        if json {
                            results.append(Invalid(file: path, valid: false, error: error.reason, hint: error.hint))
                        } else {
                            _ = fail("\(error.reason) (\(path))", hint: error.hint)
                        }
                    }
                }
                if json {
                    let encodables = results.map { AnyEncodable($0 as! Encodable) }
                    // Always an array, whatever the number of files, so scripts parse one shape.
                    printJSON(encodables)
                }
                if failed { throw ExitCode(1) }
            }
        }
    }
}

/// Type-erased Encodable for mixed JSON output.
struct AnyEncodable: Encodable {
    let value: Encodable
    init(_ value: Encodable) { self.value = value }
    func encode(to encoder: Encoder) throws { try value.encode(to: encoder) }
}
