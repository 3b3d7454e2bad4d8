import ArgumentParser
import DiffFormat
import Foundation
import RTSQLite

extension RTSync {
    /// `rtsync snapshot`: write every row of a database's tables into one snapshot diff.
    struct Snapshot: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write the rows of a database's tables as one snapshot diff.",
            discussion: "Tables without a primary key are skipped with a note. The database is opened read-only."
        )
        @Option(help: "The SQLite database to read.") var db: String
        @Option(help: "Folder to write <KSUID>.sqlite into (created if missing).") var out: String
        @Option(help: "Only these tables (repeatable); default: all user tables.") var table: [String] = []
        @Option(help: "Author user id recorded in the diff.") var user = ""
        @Flag(help: "Print JSON.") var json = false

        func run() throws {
            guard FileManager.default.fileExists(atPath: db) else { throw fail("database not found (\(db))", hint: "pass an existing SQLite file with --db") }
            let source: Connection
            do {
                // A read-only connection to a WAL database leaves -wal and -shm files behind (it may not checkpoint
                // on close). Where the file is writable, a connection that only reads (query_only) closes like the
                // app's own last connection would, leaving the folder as it was.
                let writable = FileManager.default.isWritableFile(atPath: db)
                    && FileManager.default.isWritableFile(atPath: URL(fileURLWithPath: db).deletingLastPathComponent().path)
                source = try Connection(path: db, mode: writable ? .readWrite : .readOnly)
                if writable { try source.execute("PRAGMA query_only = 1") }
            } catch { throw report(error, subject: db) }
            let outURL = URL(fileURLWithPath: out)
            do { try FileManager.default.createDirectory(at: outURL, withIntermediateDirectories: true) } catch {
                throw fail("cannot create output folder: \(error.localizedDescription) (\(out))", hint: "check permissions")
            }
            do {
                let names = try table.isEmpty
                    ? source.rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'rtsync\\_%' ESCAPE '\\' ORDER BY name").compactMap { $0[0].string }
                    : table
                let site = "snapshot"
                let total = try names.reduce(0) { $0 + Int(try source.scalar("SELECT count(*) FROM " + quoteIdentifier($1))?.int64 ?? 0) }
                let writer = try DiffWriter(directory: outURL, kind: .snapshot, authorUser: user, authorSite: site, expectedRows: total)
                var skipped: [String] = []
                var rows = 0
                for name in names {
                    guard let def = try TableDefinition.read(table: name, from: source) else { throw fail("no such table (\(name))") }
                    if def.primaryKeyColumns.isEmpty { skipped.append(name); continue }
                    rows += try writer.appendRows(from: source, table: def, clock: Clock(hlc: .zero, site: site))
                    progress("snapshot: \(name) done, \(rows) rows")
                }
                let url = try writer.finish()
                if json {
                    struct Out: Encodable { let file: String; let rows: Int; let skipped: [String] }
                    printJSON(Out(file: url.path, rows: rows, skipped: skipped))
                } else {
                    for s in skipped { print("note: skipped table without a primary key: \(s)") }
                    print(url.path)
                }
            } catch let e as ExitCode { throw e } catch let e as DiffFormatError {
                throw fail(e.description, hint: e.hint)
            } catch {
                throw fail("\(error) (\(db))")
            }
        }
    }
}
