import ArgumentParser
import DiffFormat
import BucketSync
import Foundation
import RTSQLite
import SyncEngine

extension RTSync {
    /// Shared checks and upload for share/request.
    static func sendToUser(_ options: HomeOptions, recipient: String, file: URL, media: [String] = []) async throws -> [String] {
        let settings = try options.loadSettings()
        if settings.demo { throw LifecycleError.demoMode(action: "sharing") }
        var remote = try options.openRemote(settings)
        try settings.tier.require(.syncDatabase(cloud: !remote.isLocal))
        // With encryption on, or media to send, the recipient's published share key is looked up (and recorded on
        // first use) first.
        let home = options.resolvedHome
        let trusted = try DeviceKeys(home: home).trustedIdentities(ownUser: settings.userID)
        let found = try await home.shareRecipient(recipient, through: remote, trusted: trusted, withMedia: !media.isEmpty)
        if let found, found.source != .recorded {
            let how = found.source == .verified ? "signed by the device key you trust for \(recipient)" : "trust on first use: compare it with `rtsync keys share-key --json` on their device"
            FileHandle.standardError.write(Data("note: recorded \(recipient)'s share key \(found.fingerprint) from the bucket (\(how))\n".utf8))
            remote = try options.openRemote(settings)
        }
        let key = Syncer.inboundPrefix(user: recipient) + file.lastPathComponent
        // A recipient that encrypts media names gets the media as a parcel, put before the diff so that the recipient
        // applying the share finds it whole.
        var parcel: [String] = []
        if let found, found.encryptsNames, !media.isEmpty {
            let share = file.deletingPathExtension().lastPathComponent
            parcel = try await remote.sendSharedMedia(media, home: home, from: settings.userID, to: found, share: share)
        }
        var sent = [key]
        do {
            try await RemoteRetryPolicy().run { try await remote.upload(file: file, key: key, ifAbsent: true) }
        } catch RemoteStoreError.alreadyExists {
            // A try whose answer was lost stored it. (A share encrypted to the recipient cannot be read back here: its
            // name, a new diff id of this device, is taken as the proof.)
            let same = try? await remote.holdsTheSameDiff(key: key, as: file, scratch: home.support, retry: RemoteRetryPolicy())
            if same == false { throw RemoteStoreError.failed(key: key, reason: "the bucket already holds a different diff under this name; the share was not sent") }
        }
        sent += parcel
        for path in media where parcel.isEmpty {
            let local = options.resolvedHome.documents.appendingPathComponent(path)
            guard FileManager.default.fileExists(atPath: local.path) else { continue }
            try await RemoteRetryPolicy().run { try await remote.upload(file: local, key: recipient + "/" + path, ifAbsent: false) }
            sent.append(recipient + "/" + path)
        }
        try? FileManager.default.removeItem(at: file)
        return sent
    }

    /// `rtsync share`.
    struct Share: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send rows (and optionally their media) to another user's inbound folder.",
            discussion: "The recipient's next sync applies them. With read-only permission, changes the recipient later sends back for these rows are refused here and logged as conflicts. With encryption on, the share is encrypted to the recipient's share key: the one recorded with `rtsync keys add-recipient`, else the one the recipient publishes in the bucket (recorded on first use, its fingerprint printed); a published key that differs from the recorded one is refused."
        )
        @OptionGroup var options: HomeOptions
        @Option(help: "The recipient's user id.") var to: String
        @Option(help: "The table to share from.") var table: String
        @Option(help: "SQL condition over the table's columns selecting the rows.") var `where`: String?
        @Option(help: "Primary key value of a row to share (repeatable; single-column keys).") var key: [String] = []
        @Flag(help: "Also upload the images/recordings the rows refer to (to a recipient that encrypts media names: as a parcel its sync takes into its documents).") var withMedia = false
        @Option(help: "read-only or read-write.") var permission = SharePermission.readOnly.rawValue
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            if SharePermission(rawValue: permission) == nil { throw ValidationError("--permission must be read-only or read-write") }
            if `where` == nil && key.isEmpty { throw ValidationError("select rows with --where SQL or --key VALUE") }
        }

        func run() async throws {
            do {
                let home = options.resolvedHome
                let db = try SyncDatabase(path: home.database.path)
                var filter = `where`
                var args: [SQLValue] = []
                if !key.isEmpty {
                    let keys = try db.trackedTables().contains(where: { $0.name == table })
                        ? try TableDefinition.read(table: table, from: Connection(path: home.database.path, mode: .readOnly))?.primaryKeyColumns ?? []
                        : []
                    guard keys.count == 1, let keyColumn = keys.first else {
                        throw fail("--key needs a tracked table with a single-column primary key (\(table))", hint: "use --where instead")
                    }
                    let inList = quoteIdentifier(keyColumn) + " IN (" + key.map { _ in "?" }.joined(separator: ", ") + ")"
                    filter = filter.map { "(\($0)) AND \(inList)" } ?? inList
                    args = key.map { Int64($0).map(SQLValue.integer) ?? .text($0) }
                }
                guard let share = try db.writeShare(table: table, filter: filter, arguments: args, to: to, permission: SharePermission(rawValue: permission)!,
                                                    directory: home.support.appendingPathComponent("shares"),
                                                    signingKey: try DeviceKeys(home: home).signingKey()) else {
                    throw fail("no rows matched (\(table))", hint: "check --where / --key")
                }
                let sent = try await RTSync.sendToUser(options, recipient: to, file: URL(fileURLWithPath: share.file), media: withMedia ? share.media : [])
                if json {
                    struct Out: Encodable { let diffId: String; let file: String; let rows: Int; let sent: [String] }
                    printJSON(Out(diffId: share.diffID, file: share.file, rows: share.rows, sent: sent))
                    return
                }
                print("shared \(share.rows) row(s) of \(table) with \(to) (\(permission)) as \(share.diffID)")
                let files = sent.dropFirst().filter { !$0.hasSuffix("/manifest") }.count
                if sent.contains(where: { $0.hasSuffix("/manifest") }) {
                    print("and \(files) media file(s) as a parcel (\(to) encrypts media names; their sync takes it into their documents)")
                } else if files > 0 { print("and \(files) media file(s)") }
            } catch { throw report(error) }
        }
    }

    /// `rtsync request`.
    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Ask another user to share rows with you.")
        @OptionGroup var options: HomeOptions
        @Option(help: "The user asked.") var to: String
        @Option(help: "The table whose rows are asked for.") var table: String
        @Option(help: "SQL condition describing the rows.") var `where`: String?
        @Option(help: "A message for the recipient.") var message: String?

        func run() async throws {
            do {
                let home = options.resolvedHome
                let db = try SyncDatabase(path: home.database.path)
                let file = try ShareRequest.write(from: try db.userID(), site: try db.siteID(), table: table, filter: `where`, message: message,
                                                  directory: home.support.appendingPathComponent("shares"),
                                                  signingKey: try DeviceKeys(home: home).signingKey())
                _ = try await RTSync.sendToUser(options, recipient: to, file: file)
                print("request sent to \(to): \(file.lastPathComponent)")
            } catch { throw report(error) }
        }
    }

    /// `rtsync inbound list`.
    struct Inbound: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Shares and requests received from other users.", subcommands: [List.self])

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List shares and requests received, newest first, with their sender.")
            @OptionGroup var options: HomeOptions
            @Flag(help: "Print JSON.") var json = false

            func run() throws {
                do {
                    let items = try SyncDatabase(path: options.resolvedHome.database.path).inbound()
                    if json { printJSON(items); return }
                    if items.isEmpty { print("nothing received from other users"); return }
                    for i in items { print("\(i.diffID)  \(i.kind)  from \(i.fromUser)  \(i.receivedAt)  \(i.summary)") }
                } catch { throw report(error) }
            }
        }
    }
}
