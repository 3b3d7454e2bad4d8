import ArgumentParser
import BucketClient
import BucketSync
import DiffFormat
import Foundation
import SyncEngine

/// Options naming the home folder and the bucket.
struct HomeOptions: ParsableArguments {
    @Option(help: "Folder holding support/, documents/ and settings.json (default: $RTSYNC_HOME, else ~/.rtsync).") var home: String?
    @Option(help: "Bucket URL: s3://bucket/prefix or file:///path (default: the one in settings, else a local folder <home>/bucket).") var bucket: String?

    var resolvedHome: RTSyncHome { RTSyncHome.resolve(home) }

    /// The bucket URL to use: --bucket, else settings, else the embedded local-folder default.
    func bucketURL(_ settings: RTSyncSettings) -> String {
        bucket.map(RTSync.Init.absoluteBucket) ?? Self.bucketURL(of: resolvedHome, settings: settings)
    }

    /// A home's bucket: the one in its settings, else the embedded local-folder default `<home>/bucket`.
    static func bucketURL(of home: RTSyncHome, settings: RTSyncSettings?) -> String {
        settings?.bucket ?? home.root.appendingPathComponent("bucket").path
    }

    /// Opens the bucket as SyncEngine's remote store.
    func openRemote(_ settings: RTSyncSettings, initializing: Bool = false) throws -> ObjectStoreRemote {
        let url = bucketURL(settings)
        do { return try ObjectStoreRemote.open(url, home: resolvedHome, settings: settings, initializing: initializing) } catch {
            if let e = error as? EncryptionError { throw fail(e.description, hint: e.hint) }
            let explained = ErrorExplanation(error, subject: url)
            throw fail("cannot open bucket: " + explained.what, hint: explained.hint ?? "use s3://bucket/prefix or file:///absolute/path")
        }
    }

    /// Runs `body` holding the home's lock, waiting up to `RTSYNC_LOCK_WAIT` seconds (default 30) for another run;
    /// a busy home is reported (`error:` and `hint:`) and ends the command with exit 1. With `signals`, Ctrl-C or
    /// SIGTERM during the wait ends it at once (exit 130 or 143; `command` names what did not start).
    func locked<T>(stoppingOn signals: StopSignals? = nil, command: String = "", _ body: () async throws -> T) async throws -> T {
        announceWaitIfBusy(resolvedHome)
        do {
            return try await HomeLock.withLock(resolvedHome, wait: HomeLock.environmentWait, shouldStop: { signals?.stopRequested ?? false }, body)
        } catch let e as LifecycleError { throw StopSignals.lockFailure(e, command: command, signals: signals, home: resolvedHome) }
    }

    /// Runs `body` holding the home's lock, waiting up to `RTSYNC_LOCK_WAIT` seconds (default 30) for another run;
    /// a busy home is reported (`error:` and `hint:`) and ends the command with exit 1. With `signals`, Ctrl-C or
    /// SIGTERM during the wait ends it at once (exit 130 or 143; `command` names what did not start).
    func locked<T>(stoppingOn signals: StopSignals? = nil, command: String = "", _ body: () throws -> T) throws -> T {
        announceWaitIfBusy(resolvedHome)
        do {
            return try HomeLock.withLock(resolvedHome, wait: HomeLock.environmentWait, shouldStop: { signals?.stopRequested ?? false }, body)
        } catch let e as LifecycleError { throw StopSignals.lockFailure(e, command: command, signals: signals, home: resolvedHome) }
    }

    /// The home's settings; a home path that names a file (not a folder) is reported as such.
    func loadSettings() throws -> RTSyncSettings {
        let root = resolvedHome.root.path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw fail("the home is a file, not a folder (\(root))",
                       hint: "--home (or RTSYNC_HOME) names a folder holding support/, documents/ and settings.json; give a folder path")
        }
        do { return try resolvedHome.loadSettings() } catch { throw report(error, subject: root) }
    }
}

/// Says on standard error that the command waits for another run holding `home`'s lock (and for how long at most),
/// so a waiting command is not taken for a hung one.
func announceWaitIfBusy(_ home: RTSyncHome) {
    guard !HomeLock.isHeld(home), FileManager.default.fileExists(atPath: HomeLock.lockFile(home)) else { return }
    do { _ = try HomeLock.acquire(home, wait: 0) } catch LifecycleError.homeBusy(_, let pid) {
        let wait = HomeLock.environmentWait
        FileHandle.standardError.write(Data("waiting up to \(Int(wait)) s for another rtsync run on \(home.root.path)\(pid.map { " (pid \($0))" } ?? "") to finish\n".utf8))
    } catch {}
}

extension RTSync {
    /// `rtsync init`.
    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Find or build the primary database (the same chain an app runs at launch).",
            discussion: """
            Uses the existing database if it passes quick_check; otherwise tries, in order, the newest good \
            backup in the documents folder, the user's newest database in the bucket (<user>/backups/), the \
            demo database in the bucket (demo/), and the demo database bundled with rtsync. Damaged candidates \
            are reported and skipped. A database from demo data gets a new user id; a copied database gets a new site id.
            """
        )
        @OptionGroup var options: HomeOptions
        @Option(help: "Join an existing user on this device (its database is fetched from the bucket).") var user: String?
        @Option(help: "Tier to record in settings: free or premium.") var tier: String?
        @Flag(help: "Give the database (a copy of another device's, made with cp) its own site id; changes it holds that the old site had not exported are put in the outbox first, as the old site's.")
        var newSite = false
        @OptionGroup var keyOptions: ContentKeyOptions
        @Flag(help: "Print JSON.") var json = false
        @OptionGroup var progressOptions: ProgressOptions

        func validate() throws {
            if let tier, Tier(rawValue: tier) == nil { throw ValidationError("--tier must be free or premium") }
            if newSite && (user != nil || tier != nil || options.bucket != nil) { throw ValidationError("--new-site takes no --user, --tier or --bucket") }
        }

        func run() async throws {
            if newSite {
                do { try options.locked { try giveNewSite() } } catch { throw report(error) }
                return
            }
            do { try await options.locked { try await initialize() } } catch { throw report(error) }
        }

        /// `--new-site`: a new identity for the existing database.
        private func giveNewSite() throws {
            let home = options.resolvedHome
            let db = try SyncDatabase(path: home.database.path)
            let old = try db.siteID()
            let pending = try db.pendingChangeCount()
            let site = try db.becomeNewSite(outbox: home.outbox, signingKey: try? DeviceKeys(home: home).signingKey())
            if json { printJSON(["database": home.database.path, "oldSite": old, "site": site]); return }
            if pending > 0 { print("exported \(pending) change(s) of site \(old) to the outbox (they upload with the next sync)") }
            print("new site \(site) (was \(old)) for \(home.database.path)")
        }

        private func initialize() async throws {
            let home = options.resolvedHome
            var settings = try options.loadSettings()
            // A local bucket path is stored absolute: a relative one would mean another folder from elsewhere.
            if let bucket = options.bucket { settings.bucket = Self.absoluteBucket(bucket) }
            if let tier { settings.tier = Tier(rawValue: tier)! }
            // A joining device imports the user's content key first, so what it fetches decrypts; its keys must open
            // the user's newest encrypted backups and diffs, else nothing is saved or installed (a wrong key would
            // otherwise leave the bucket unreadable and the chain fall back to demo data as a new user).
            let check: ((ContentKeyring, RTSyncSettings) async throws -> Void)? = user.map { joinID in
                { ring, merged in
                    guard !merged.encryption.isEmpty, merged.tier == .premium else { return }
                    var store = EncryptingStore(inner: try makeObjectStore(urlString: options.bucketURL(merged)), keyring: ring,
                                                prefixes: RTSyncHome.encryptedPrefixes(user: joinID, kinds: merged.encryption),
                                                staging: home.encryptionStaging)
                    // A key file older than a rotation still joins: the newer keys are taken from their sealed copies
                    // (kept aside here; the init chain and sync take them for good).
                    let aside = home.encryptionStaging.appendingPathComponent("init-check-\(UUID().uuidString)")
                    defer { try? FileManager.default.removeItem(at: aside) }
                    store.keyDirectory = BucketKeyDirectory(user: joinID, keyring: ring, keyringFile: aside.appendingPathComponent("keys.json"),
                                                            publishedFile: aside.appendingPathComponent("published"))
                    do {
                        try await store.checkKeysOpen(prefixes: [joinID + "/backups/", joinID + "/inbound/"])
                    } catch let e as EncryptionError {
                        throw fail(e.description, hint: "this key file is not the one user \(joinID)'s devices encrypt with; nothing was changed. Export the key on one of them (`rtsync keys export F`) and give that file")
                    } catch {
                        // An unreachable bucket is the init chain's to report, as without encryption.
                    }
                }
            }
            // `--user U --passphrase-file P` without a key file: the keys come from the user's passphrase-sealed backup
            // in the bucket (`rtsync keys export --to-bucket`).
            var backup: (ring: ContentKeyring, source: String)?
            if let user, keyOptions.keyFile == nil, keyOptions.passphraseFile != nil {
                let pass = try keyOptions.passphrase() ?? ""
                let object = ObjectStoreRemote.keyBackupKey(user: user)
                let found: ContentKeyring?
                do { found = try await ObjectStoreRemote.open(options.bucketURL(settings)).downloadKeyBackup(user: user, passphrase: pass) } catch {
                    if let e = error as? EncryptionError, case .wrongPassphrase = e {
                        throw fail(e.description, hint: "give the passphrase `rtsync keys export --to-bucket` was run with; nothing was changed")
                    }
                    throw report(error)
                }
                guard let found else {
                    throw fail("user \(user) has no key backup in the bucket (\(object))",
                               hint: "on a device of the user run `rtsync keys export --to-bucket --passphrase-file P`, or join with --key-file F")
                }
                backup = (found, object)
            }
            let importedKey = try await keyOptions.importKey(into: home, settings: &settings, backup: backup, check: check)
            if options.bucket != nil || tier != nil || importedKey {
                do { try home.saveSettings(settings) } catch { throw report(error) }
            }
            var joining = settings
            if let user, joining.userID.isEmpty { joining.userID = user }
            let remote = try options.openRemote(joining, initializing: true)
            let chain = InitChain(home: home, remote: remote, joinUser: user)
            do {
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                let result = try await display.run { try await chain.run(progress: { display.set("init: \($0)") }) }
                if json { printJSON(result); return }
                for a in result.attempts { print("  \(a.source.rawValue): \(a.outcome) — \(a.detail)") }
                print("database ready from \(result.source.rawValue): \(result.database)")
                print("user \(result.userId)\(result.newUser ? " (new)" : ""), site \(result.siteId)")
            } catch { throw report(error) }
        }
    }

    /// `rtsync status`.
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the database, user, site, tier, pending work, backups and conflicts.")
        @OptionGroup var options: HomeOptions
        @Flag(help: "Print JSON (keys documented in the README).") var json = false

        func run() throws {
            do {
                var s = try DeviceStatus.gather(home: options.resolvedHome)
                if s.bucket == nil { s.bucket = options.bucketURL(try options.loadSettings()) }
                if json {
                    printJSON(s)
                    if s.damaged != nil { throw ExitCode(1) }
                    return
                }
                if let damaged = s.damaged {
                    throw fail("the database is damaged: \(damaged) (\(s.database))", hint: "restore the last-known-good backup: rtsync backup restore\(options.home.map { " --home \($0)" } ?? "") (rtsync backup list shows them)")
                }
                print("""
                database:        \(s.database) (\(s.exists ? "\(s.bytes) bytes" : "missing: run rtsync init"))
                user:            \(s.userId.isEmpty ? "-" : s.userId)
                site:            \(s.siteId ?? "-")
                tier:            \(s.tier.rawValue)\(s.demo ? ", demo mode ON" : "")
                bucket:          \(s.bucket ?? "-")
                tracked tables:  \(s.trackedTables.count) \(s.trackedTables.isEmpty ? "" : "(\(s.trackedTables.joined(separator: ", ")))")\(s.deviceNumberedKeys.isEmpty ? "" : "\nkey warning:     \(s.deviceNumberedKeys.joined(separator: ", ")) (INTEGER PRIMARY KEY numbered by each device: rows inserted on two devices between syncs can get the same key; see rtsync track --help)")\(s.nullKeyRows.isEmpty ? "" : "\nnot synced:      rows with a NULL key, which no device can find: \(s.nullKeyRows.joined(separator: ", ")) (give them a key and declare the key columns NOT NULL)")
                pending changes: \(s.pendingChanges); outbox: \(s.outbox) diff(s); last export: \(s.lastExport ?? "never")
                last backup:     \(s.lastBackup ?? "never"); last known good: \(s.lastKnownGood ?? "-")
                quarantined:     \(s.quarantined); unresolved conflicts: \(s.unresolvedConflicts)
                missing diffs:   \(s.gaps.isEmpty ? "none" : s.gaps.map { "\($0.key): \($0.value.map(String.init).joined(separator: ","))" }.joined(separator: "; "))\(s.catchUpPending ? "\nrestored:        from a backup; may be behind until the next sync catches up from the bucket" : "")\(s.heldRows.isEmpty ? "" : "\nheld back:       \(s.heldRows.count) row(s)\n" + s.heldRows.prefix(20).map { "  " + $0 }.joined(separator: "\n"))
                """)
            } catch { throw report(error) }
        }
    }

    /// `rtsync backup create|list|verify|restore`.
    struct BackupCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "backup",
            abstract: "Make, list, verify and restore copies of the primary database.",
            subcommands: [Create.self, List.self, Verify.self, Restore.self]
        )

        static func manager(_ options: HomeOptions) throws -> BackupManager {
            let home = options.resolvedHome
            let settings = try options.loadSettings()
            var manager = BackupManager(home: home, keep: settings.keepBackups)
            manager.lockWait = HomeLock.environmentWait
            return manager
        }

        struct Create: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Copy the database (copy-on-write clone where possible), verify it, rotate old backups.",
                discussion: "Consistent while other processes write (WAL included). Cheap enough to run whenever an app goes to the background. Ctrl-C or SIGTERM stops at the next safe point (the copy is made whole or not at all; then before the upload, then before the bucket's rotation), says what is left and exits 130 or 143."
            )
            @OptionGroup var options: HomeOptions
            @Flag(help: "Also upload it to <user>/backups/ in the bucket (premium, or a local-folder bucket).") var upload = false
            @Flag(help: ArgumentHelp("Return once the copy is made; sync and check it later with `rtsync backup verify --pending`.",
                                     discussion: "Until then it is listed as not verified, is not last-known-good, and restore does not pick it by default."))
            var verifyLater = false
            @Flag(help: "Print JSON.") var json = false
            @OptionGroup var progressOptions: ProgressOptions

            func run() async throws {
                // Caught from the start, so a signal while waiting for the home's lock stops before anything is made.
                let signals = StopSignals()
                do { try await options.locked(stoppingOn: signals, command: "backup create") { try await createBackup(signals) } } catch { throw report(error) }
            }

            private func createBackup(_ signals: StopSignals) async throws {
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                defer { display.finish() }
                do {
                    let backups = options.resolvedHome.backups.path
                    if let sig = signals.receivedSignal {
                        throw StopSignals.stopped("backup create", by: sig, done: "nothing made", left: "the backup", path: backups)
                    }
                    let manager = try BackupCommand.manager(options)
                    display.set(verifyLater ? "backup: copying" : "backup: copying and verifying (quick_check)")
                    // The copy is written to a temp file and renamed and listed only when whole: a signal meanwhile
                    // waits for it.
                    var info: BackupInfo
                    var uploadable = true
                    if upload {
                        // Devices join from it: this database's pending changes are exported first (they upload with
                        // the next sync), and a copy that still holds some is not uploaded.
                        let home = options.resolvedHome
                        (info, uploadable) = try manager.createForUpload(exportingFrom: try SyncDatabase(path: home.database.path), outbox: home.outbox,
                                                                         signingKey: try? DeviceKeys(home: home).signingKey(),
                                                                         verification: verifyLater ? .deferred : .immediate)
                    } else {
                        info = try manager.create(verification: verifyLater ? .deferred : .immediate)
                    }
                    var uploaded: String?
                    var rotated: [String] = []
                    if upload {
                        guard uploadable else {
                            throw fail("backup \(info.id) made but not uploaded: the database changed while each of three copies was made, and a copy in the bucket must hold no unexported change",
                                       hint: "run rtsync backup create --upload again when the app's writes pause")
                        }
                        if let sig = signals.receivedSignal {
                            throw StopSignals.stopped("backup create", by: sig, done: "backup \(info.id) made", left: "its upload to the bucket",
                                                      path: backups, hint: "nothing was lost; run rtsync backup create --upload again to upload a new backup")
                        }
                        // Only a checked copy leaves the device.
                        if !info.verified { display.set("backup: verifying (quick_check)"); info = try manager.verify(id: info.id) }
                        guard info.verified else {
                            throw fail("backup \(info.id) failed verification; not uploaded", hint: "run `rtsync backup list` and `rtsync backup verify`")
                        }
                        let settings = try options.loadSettings()
                        let remote = try options.openRemote(settings)
                        try settings.tier.require(.uploadBackup(cloud: !remote.isLocal))
                        let key = settings.userID + "/backups/" + info.file
                        display.set("backup: uploading \(key)")
                        display.transfers.expect(bytes: info.bytes, key: key)
                        try await TransferProgress.$current.withValue(display.transfers) {
                            try await remote.upload(file: options.resolvedHome.backups.appendingPathComponent(info.file), key: key, ifAbsent: false)
                        }
                        uploaded = key
                        if let sig = signals.receivedSignal {
                            throw StopSignals.stopped("backup create", by: sig, done: "backup \(info.id) made and uploaded to \(key)",
                                                      left: "removing older bucket backups beyond keepBackups (the next upload does it)",
                                                      path: options.bucketURL(settings), hint: "nothing was lost; the next backup create --upload or sync rotates the bucket's backups")
                        }
                        // Bucket backups rotate with the local rule (keepBackups), keeping the newest.
                        display.set("backup: rotating old bucket backups")
                        rotated = try await remote.rotateBackups(user: settings.userID, keep: settings.keepBackups)
                    }
                    display.finish()
                    if let sig = signals.receivedSignal {
                        throw StopSignals.stopped("backup create", by: sig, done: "backup \(info.id) made\(uploaded.map { " and uploaded to \($0)" } ?? "")",
                                                  left: "nothing", path: backups, hint: "nothing was lost; the backup is complete")
                    }
                    if json { printJSON(info); return }
                    let copied = String(format: "%.0f ms", info.copyMilliseconds ?? 0)
                    if info.verified {
                        print("backup \(info.id): \(info.bytes) bytes by \(info.method) in \(copied), verified in \(String(format: "%.0f ms", info.verifyMilliseconds ?? 0)), last known good")
                    } else {
                        print("backup \(info.id): \(info.bytes) bytes by \(info.method) in \(copied), not verified yet (run `rtsync backup verify --pending`)")
                    }
                    if let uploaded { print("uploaded to \(uploaded)\(rotated.isEmpty ? "" : "; \(rotated.count) older bucket backup(s) rotated away")") }
                } catch { throw report(error) }
            }
        }

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List backups, newest first.")
            @OptionGroup var options: HomeOptions
            @Flag(help: "Print JSON.") var json = false

            func run() throws {
                do {
                    let m = try BackupCommand.manager(options)
                    let list = m.list()
                    if json { printJSON(list); return }
                    if list.isEmpty { print("no backups"); return }
                    let good = m.lastKnownGood()?.id
                    for b in list {
                        let state = b.awaitingVerification == true ? "not verified yet" : b.verified ? "verified" : "DAMAGED"
                        print("\(b.id)  \(b.createdAt)  \(b.bytes) bytes  \(b.method)  \(state)\(b.id == good ? "  last-known-good" : "")")
                    }
                } catch { throw report(error) }
            }
        }

        struct Verify: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Re-check backups with quick_check (all, the ids given, or those not verified yet).")
            @OptionGroup var options: HomeOptions
            @Flag(help: "Only backups made with --verify-later and not checked yet.") var pending = false
            @Argument(help: "Backup ids (default: all).") var ids: [String] = []
            @Flag(help: "Print a JSON array of the checked backups (as backup list prints them).") var json = false
            @OptionGroup var progressOptions: ProgressOptions

            func run() throws {
                let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                do {
                    let m = try BackupCommand.manager(options)
                    var done = 0
                    func show(_ b: BackupInfo) -> BackupInfo {
                        done += 1
                        display.finish()
                        if !json { print("\(b.id): \(b.verified ? "ok" : "DAMAGED")") }
                        return b
                    }
                    let pendingIDs = pending ? [] : (ids.isEmpty ? m.list().map(\.id) : ids)
                    if !pending { display.set("backup verify: \(pendingIDs.count) backup(s), quick_check") }
                    let checked: [BackupInfo]
                    if pending {
                        checked = try m.verifyPending().map(show)
                        if checked.isEmpty && !json { print("no backups waiting for verification") }
                    } else {
                        checked = try pendingIDs.map { show(try m.verify(id: $0)) }
                    }
                    if json { printJSON(checked) }
                    let bad = checked.filter { !$0.verified }.count
                    if bad > 0 { throw fail("\(bad) backup(s) failed verification (\(options.resolvedHome.backups.path))", hint: "restore picks the newest verified backup") }
                } catch { throw report(error) }
            }
        }

        struct Restore: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Replace the database with a backup (default: last-known-good).",
                discussion: "The replaced database is kept beside it as primary.sqlite.replaced-<id>. Changes in the backup that were never exported go to the outbox with the clocks of when they were made (later edits elsewhere still win). The restored copy gets a new site id, and its next sync catches up from the user's newest database in the bucket on diffs compaction has pruned since the backup. Close apps using the database first."
            )
            @OptionGroup var options: HomeOptions
            @Argument(help: "Backup id (default: last-known-good).") var id: String?
            @Flag(help: "Print JSON: {backup, database, previous, catchUpPending}.") var json = false
            @OptionGroup var progressOptions: ProgressOptions

            struct Output: Encodable {
                var backup: BackupInfo
                var database: String
                var previous: String?
                var catchUpPending: Bool
            }

            func run() throws {
                // A restore is one step (prepared in a private copy, then swapped in): a signal waits for it to end.
                let signals = StopSignals()
                do {
                    try options.locked(stoppingOn: signals, command: "backup restore") {
                        let home = options.resolvedHome
                        if let sig = signals.receivedSignal {
                            throw StopSignals.stopped("backup restore", by: sig, done: "nothing restored", left: "the restore", path: home.database.path)
                        }
                        let display = ProgressDisplay(enabled: progressOptions.enabled(json: json))
                        display.set("restore: copying the backup, exporting its unexported changes, new site id")
                        defer { display.finish() }
                        let (b, aside) = try BackupCommand.manager(options).restore(id: id, outbox: home.outbox, signingKey: try? DeviceKeys(home: home).signingKey())
                        let catchUp = (try? SyncDatabase(path: home.database.path).needsCatchUp()) == true
                        display.finish()
                        if json {
                            printJSON(Output(backup: b, database: home.database.path, previous: aside?.path, catchUpPending: catchUp))
                            return
                        }
                        print("restored backup \(b.id) to \(home.database.path)")
                        if let aside { print("previous database kept at \(aside.path)") }
                        if catchUp {
                            print("the restored database is a new site; its next sync catches up on what the bucket has that the backup lacks")
                        }
                        if let sig = signals.receivedSignal {
                            throw StopSignals.stopped("backup restore", by: sig, done: "backup \(b.id) restored", left: "nothing", path: home.database.path,
                                                      hint: "nothing was lost; the restore is complete")
                        }
                    }
                } catch { throw report(error) }
            }
        }
    }

    /// `rtsync demo on|off|reset`.
    struct Demo: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Demo mode: protect demo data, block cloud sync, reset to the original demo database.",
            subcommands: [On.self, Off.self, Reset.self]
        )

        struct On: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Make app tables read-only (except scratch tables) and stop all syncing.")
            @OptionGroup var options: HomeOptions
            @Option(help: "Tables that stay writable (repeatable; saved in settings).") var scratch: [String] = []

            func run() throws {
                try options.locked {
                    do {
                        let home = options.resolvedHome
                        var settings = try options.loadSettings()
                        if !scratch.isEmpty { settings.scratchTables = scratch }
                        settings.demo = true
                        try SyncDatabase(path: home.database.path).setDemoProtection(true, scratchTables: settings.scratchTables)
                        try home.saveSettings(settings)
                        print("demo mode on: app tables are read-only\(settings.scratchTables.isEmpty ? "" : " except \(settings.scratchTables.joined(separator: ", "))"); sync is disabled")
                    } catch { throw report(error) }
                }
            }
        }

        struct Off: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Leave demo mode: tables writable, sync allowed again.")
            @OptionGroup var options: HomeOptions

            func run() throws {
                try options.locked {
                    do {
                        let home = options.resolvedHome
                        var settings = try options.loadSettings()
                        settings.demo = false
                        try SyncDatabase(path: home.database.path).setDemoProtection(false)
                        try home.saveSettings(settings)
                        print("demo mode off")
                    } catch { throw report(error) }
                }
            }
        }

        struct Reset: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Replace the database with the original demo database (bucket demo/, else the bundled one)."
            )
            @OptionGroup var options: HomeOptions

            func run() async throws {
                do {
                    let home = options.resolvedHome
                    let settings = try options.loadSettings()
                    let remote = try? options.openRemote(settings)
                    var reset = DemoReset(home: home, remote: remote)
                    reset.lockWait = HomeLock.environmentWait
                    let source = try await reset.run(scratchTables: settings.scratchTables, protect: settings.demo)
                    print("demo data reset from \(source)")
                } catch { throw report(error) }
            }
        }
    }
}

extension RTSync.Init {
    /// A bucket as given, with a local path (plain or `file://`) made absolute against the current folder.
    static func absoluteBucket(_ bucket: String) -> String {
        if bucket.hasPrefix("s3://") || bucket.hasPrefix("http://") || bucket.hasPrefix("https://") { return bucket }
        if bucket.hasPrefix("file://") {
            let path = String(bucket.dropFirst("file://".count))
            return path.hasPrefix("/") ? bucket : "file://" + URL(fileURLWithPath: path).standardizedFileURL.path
        }
        return URL(fileURLWithPath: bucket).standardizedFileURL.path
    }
}
