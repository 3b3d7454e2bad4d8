import ArgumentParser
import DiffFormat
import Foundation
import SyncEngine

/// Options naming the primary database: `--db PATH`, or a home's (`--home DIR`, else $RTSYNC_HOME or ~/.rtsync when
/// it exists), as the other commands name it.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("db"), help: "Path of the SQLite database (default: the --home's support/primary.sqlite).") var dbPath: String?
    @Option(help: "Home folder whose primary database to use (default: $RTSYNC_HOME, else ~/.rtsync, when it exists).") var home: String?

    func validate() throws {
        if dbPath != nil && home != nil { throw ValidationError("give either --db or --home, not both") }
        if dbPath == nil && home == nil && RTSync.existingDefaultHome() == nil {
            throw ValidationError("give --db PATH (a SQLite database) or --home DIR (no home at $RTSYNC_HOME or ~/.rtsync)")
        }
    }

    /// The database path: --db, else the home's primary database.
    var db: String {
        if let dbPath { return dbPath }
        return RTSyncHome.resolve(home ?? RTSync.existingDefaultHome()).database.path
    }

    /// Opens the database as a SyncDatabase, printing a clear error when it cannot.
    func open() throws -> SyncDatabase {
        do { return try SyncDatabase(path: db) } catch { throw report(error, subject: db) }
    }

    /// Runs `body` holding the lock of the home whose primary database `--db` is (waiting up to
    /// `RTSYNC_LOCK_WAIT` seconds), or without a lock for a database outside a home. With `signals`, Ctrl-C or
    /// SIGTERM during the wait ends it at once (exit 130 or 143; `command` names what did not start).
    func lockingHome<T>(stoppingOn signals: StopSignals? = nil, command: String = "", _ body: () throws -> T) throws -> T {
        guard let home = RTSyncHome.containing(database: URL(fileURLWithPath: db)) else { return try body() }
        announceWaitIfBusy(home)
        do {
            return try HomeLock.withLock(home, wait: HomeLock.environmentWait, shouldStop: { signals?.stopRequested ?? false }, body)
        } catch let e as LifecycleError { throw StopSignals.lockFailure(e, command: command, signals: signals, home: home) }
    }
}

/// Turns a library error into the CLI's `error:` / `hint:` output (see ``ErrorExplanation``); `subject` is the
/// database, folder or bucket the command was working on, named when the error itself does not say.
func report(_ error: Error, subject: String? = nil) -> ExitCode {
    if let e = error as? ExitCode { return e }
    let explained = ErrorExplanation(error, subject: subject)
    return fail(explained.what, hint: explained.hint)
}

extension RTSync {
    /// `rtsync track`.
    struct Track: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Start capturing changes to tables of the primary database.",
            discussion: """
            Installs rtsync's bookkeeping tables (rtsync_*) and plain-SQL triggers, so writes from any \
            connection, including the sqlite3 shell, are captured. Re-running is harmless. The database \
            gets a stable site id on first track. Tables without a primary key, or whose key column compares under \
            another collation than its PRIMARY KEY declares, are refused with the reason. \
            A table whose key is an INTEGER PRIMARY KEY gets a warning: each device numbers new rows itself, \
            so rows inserted on two devices between syncs can get the same key.
            """
        )
        @OptionGroup var database: DatabaseOptions
        @Flag(help: "Track every user table.") var all = false
        @Argument(help: "Tables to track.") var tables: [String] = []
        @Option(help: "Merge policy for these tables: \(MergePolicy.allCases.map(\.rawValue).joined(separator: ", ")).") var policy: String?
        @Option(help: "Owner column for the owner-only policy.") var ownerColumn: String?
        @Option(help: "JSON file with per-table policies ({\"tables\": {NAME: {\"policy\": ...}}}).") var config: String?
        @Flag(help: "Print JSON.") var json = false

        /// What tracking a table whose key SQLite numbers on each device risks
        /// (`SyncDatabase.tablesWithDeviceNumberedKeys`), and what to do about it.
        static func deviceNumberedKeyWarning(_ table: String) -> String {
            "\(table): its INTEGER PRIMARY KEY is numbered by each device (the largest key plus one), so rows inserted on two devices "
                + "between syncs get the same key and the later insert replaces the other row (its values are kept only in the conflict "
                + "log, `rtsync conflicts list`). Give new rows keys unique across devices (a KSUID or UUID in a TEXT key, or a random "
                + "64-bit integer), or insert into this table on one device only."
        }

        func validate() throws {
            if all == !tables.isEmpty { throw ValidationError("give either --all or one or more table names") }
            if let policy, MergePolicy(rawValue: policy) == nil { throw ValidationError(SyncEngineError.unknownPolicy(policy).description) }
        }

        func run() throws {
            try database.lockingHome {
                let db = try database.open()
                do {
                    let p = policy.flatMap(MergePolicy.init(rawValue:)).map { TablePolicy($0, ownerColumn: ownerColumn) }
                    let tracked = try db.track(tables: all ? nil : tables, policy: p)
                    if let config { try db.applyPolicies(try PolicyConfig.load(from: URL(fileURLWithPath: config))) }
                    let site = try db.siteID()
                    let final = try db.trackedTables().filter { t in tracked.contains { $0.name == t.name } }
                    let numbered = Set(try db.tablesWithDeviceNumberedKeys())
                    let warnings = final.filter { numbered.contains($0.name) }.map { Self.deviceNumberedKeyWarning($0.name) }
                    if json {
                        struct Out: Encodable { let siteId: String; let tables: [TrackedTable]; let warnings: [String] }
                        printJSON(Out(siteId: site, tables: final, warnings: warnings))
                    } else {
                        print("site \(site): tracking \(final.count) table(s)")
                        for t in final { print("  \(t.name) (\(t.columns.count) columns, \(t.policy.policy.rawValue))") }
                    }
                    for w in warnings { FileHandle.standardError.write(Data("warning: \(w)\n".utf8)) }
                } catch { throw report(error, subject: database.db) }
            }
        }
    }

    /// `rtsync migrate`.
    struct Migrate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a schema migration on a tracked database (DROP COLUMN, RENAME COLUMN, ADD COLUMN, new tables).",
            discussion: """
            SQLite refuses to drop a column that a trigger names, so `ALTER TABLE … DROP COLUMN` on a tracked table \
            fails in the sqlite3 shell. This command runs the SQL with rtsync's triggers out of the way, in one \
            transaction, then tracks the tables as they are now; changes captured before are kept. Rows the \
            migration itself writes are not captured: run the same migration on every device.
            """
        )
        @OptionGroup var database: DatabaseOptions
        @Argument(help: "The SQL to run, or '-' to read it from standard input.") var sql: String

        func run() throws {
            try database.lockingHome {
                let text = sql == "-" ? String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self) : sql
                let db = try database.open()
                do { try db.migrate(sql: text) } catch {
                    throw fail("migration failed, nothing was changed: \(error) (\(database.db))", hint: "fix the SQL and run the command again")
                }
                print("migrated \(database.db); tracking \(((try? db.trackedTables()) ?? []).count) table(s)")
            }
        }
    }

    /// `rtsync untrack`.
    struct Untrack: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove rtsync's triggers and bookkeeping tables; app data is left untouched."
        )
        @OptionGroup var database: DatabaseOptions

        func run() throws {
            try database.lockingHome {
                let db = try database.open()
                do { try db.untrack() } catch { throw report(error) }
                print("removed rtsync tracking from \(database.db)")
            }
        }
    }
}
