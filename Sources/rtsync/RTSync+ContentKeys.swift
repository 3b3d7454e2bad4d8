import ArgumentParser
import BucketClient
import BucketSync
import DiffFormat
import Foundation
import SyncEngine

/// Options that bring the user's content key onto a device (`rtsync init`, `rtsync keys import`).
struct ContentKeyOptions: ParsableArguments {
    @Option(help: "A content key file written by `rtsync keys export` on another device of the user.") var keyFile: String?
    @Option(help: "A file holding the passphrase of a passphrase-protected key file (else $RTSYNC_KEY_PASSPHRASE); with `init --user U` and no --key-file, the passphrase of the user's key backup in the bucket (`rtsync keys export --to-bucket`).") var passphraseFile: String?

    /// The passphrase from --passphrase-file or RTSYNC_KEY_PASSPHRASE, or nil.
    func passphrase() throws -> String? { try Self.passphrase(file: passphraseFile) }

    /// The passphrase from `file` (its first line) or RTSYNC_KEY_PASSPHRASE, or nil.
    static func passphrase(file passphraseFile: String?) throws -> String? {
        if let passphraseFile {
            guard let text = try? String(contentsOfFile: passphraseFile, encoding: .utf8) else {
                throw fail("cannot read the passphrase file (\(passphraseFile))", hint: "give a readable file holding the passphrase on its first line")
            }
            return String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        }
        if let env = ProcessInfo.processInfo.environment["RTSYNC_KEY_PASSPHRASE"], !env.isEmpty { return env }
        return nil
    }

    /// Merges --key-file (or `backup`, keys taken from the bucket) into the home's content keys and takes the kinds
    /// it encrypts into `settings` when these have none; false when neither was given. With `check`, the merged keys
    /// must first open what `check` names (see ``RTSync/Init``); nothing is saved when they do not.
    func importKey(into home: RTSyncHome, settings: inout RTSyncSettings, backup: (ring: ContentKeyring, source: String)? = nil,
                   check: ((ContentKeyring, RTSyncSettings) async throws -> Void)? = nil) async throws -> Bool {
        let ring: ContentKeyring, merged: RTSyncSettings
        if let backup {
            (ring, merged) = try Self.merged(backup.ring, source: backup.source, into: home, settings: settings)
        } else if let keyFile {
            (ring, merged) = try Self.merged(keyFile, passphraseFile: passphraseFile, into: home, settings: settings)
        } else {
            if let check, !settings.encryption.isEmpty, let ring = try? home.contentKeyring() { try await check(ring, settings) }
            return false
        }
        if let check { try await check(ring, merged) }
        do { try ring.save(to: home.contentKeysFile) } catch { throw report(error) }
        settings = merged
        return true
    }

    /// The home's keys with `keyFile`'s merged in, and `settings` with the file's kinds when they had none.
    static func merged(_ keyFile: String, passphraseFile: String?, into home: RTSyncHome, settings: RTSyncSettings) throws -> (ContentKeyring, RTSyncSettings) {
        let incoming: ContentKeyring
        do {
            guard let loaded = try ContentKeyring.load(file: URL(fileURLWithPath: keyFile), passphrase: try passphrase(file: passphraseFile)) else {
                throw fail("no such key file (\(keyFile))", hint: "give the file `rtsync keys export` wrote")
            }
            incoming = loaded
        } catch { throw report(error) }
        return try merged(incoming, source: keyFile, into: home, settings: settings)
    }

    /// The home's keys with `incoming` (from `source`, named in errors) merged in, and `settings` with its kinds when
    /// they had none.
    static func merged(_ incoming: ContentKeyring, source: String, into home: RTSyncHome, settings: RTSyncSettings) throws -> (ContentKeyring, RTSyncSettings) {
        do {
            var ring = try home.contentKeyring() ?? incoming
            try ring.merge(incoming, source: source)
            var out = settings
            if out.encryption.isEmpty { out.encryption = incoming.kinds }
            return (ring, out)
        } catch { throw report(error) }
    }

    /// Merges `keyFile` into the home's content keys (see ``importKey(into:settings:)``).
    static func importKey(_ keyFile: String, passphraseFile: String?, into home: RTSyncHome, settings: inout RTSyncSettings) throws {
        let (ring, merged) = try Self.merged(keyFile, passphraseFile: passphraseFile, into: home, settings: settings)
        do { try ring.save(to: home.contentKeysFile) } catch { throw report(error) }
        settings = merged
    }
}

extension RTSync.Keys {
    /// The home's keyring, or a clear failure when it has none.
    static func requireKeyring(_ home: RTSyncHome) throws -> ContentKeyring {
        do {
            guard let ring = try home.contentKeyring() else { throw EncryptionError.noContentKey(file: home.contentKeysFile.path) }
            return ring
        } catch { throw report(error) }
    }

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make the user's content key for client-side encryption (once per user; other devices import it).",
            discussion: "The key is kept in <home>/keys/content-keys.json (mode 0600) and never uploaded. Losing every copy of it loses the encrypted data: back it up with `rtsync keys export`.")
        @OptionGroup var options: HomeOptions
        func run() throws {
            let home = options.resolvedHome
            do {
                if try home.contentKeyring() != nil {
                    throw fail("this home already has a content key (\(home.contentKeysFile.path))", hint: "use `rtsync keys rotate` for a new one")
                }
                let ring = ContentKeyring.generate()
                try ring.save(to: home.contentKeysFile)
                print("content key \(ring.currentID) created (\(home.contentKeysFile.path)); back it up: rtsync keys export FILE")
            } catch { throw report(error) }
        }
    }

    struct Encrypt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Turn client-side encryption on for some kinds of objects, or off (premium).",
            discussion: "Kinds: inbound (diffs), backups (backups and snapshots), recordings, images, or all (those four); add names (e.g. all,names) to encrypt the file names of encrypted media too. Objects already in the bucket stay as they are; new ones are encrypted. Makes a content key when the home has none.")
        @OptionGroup var options: HomeOptions
        @Argument(help: "Comma-separated kinds (inbound,backups,recordings,images,names), all, or off.") var kinds: String
        func run() async throws {
            let home = options.resolvedHome
            do {
                var settings = try options.loadSettings()
                if kinds == "off" {
                    settings.encryption = []
                    try home.saveSettings(settings)
                    print("encryption off: new objects are uploaded as plaintext; objects encrypted before stay encrypted in the bucket and this device no longer decrypts them")
                    return
                }
                let parsed = try EncryptedKind.parse(kinds).map(\.rawValue)
                guard settings.tier == .premium else { throw EncryptionError.premiumRequired }
                var ring = try home.contentKeyring() ?? ContentKeyring.generate()
                ring.kinds = parsed
                try ring.save(to: home.contentKeysFile)
                settings.encryption = parsed
                try home.saveSettings(settings)
                print("encryption on for \(parsed.joined(separator: ", ")) with content key \(ring.currentID)")
                print("back the key up (losing every copy loses the data): rtsync keys export FILE")
            } catch { throw report(error) }
            // Other users find the share key in the bucket from now on; offline, it goes up with the first upload.
            if (try? options.loadSettings().userID.isEmpty) == false, let problem = await RTSync.Keys.publishKeys(options) {
                print("share key not published yet (\(terminalSafe(problem, limit: 500))): it goes up with this device's next encrypted upload")
            }
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write the user's content keys to a file (mode 0600), plain or passphrase-protected (scrypt), or sealed with a passphrase into the bucket.",
            discussion: "Give the file to the user's other devices (`rtsync init --user U --key-file F` or `rtsync keys import F`) and keep a copy offline: losing every copy of the key loses the encrypted data. With --to-bucket the keys go to <user>/keys/content-keys.passphrase sealed under the passphrase (scrypt N=2^17, r=8, p=1; AES-256-GCM; at least 12 characters), and a new device joins with the passphrase alone: `rtsync init --user U --passphrase-file P`. Anyone who can read the bucket can try passphrases against that copy offline: choose a long one. Run it again after `keys rotate --no-publish`, which the copy does not hold.")
        @OptionGroup var options: HomeOptions
        @Argument(help: "The file to write (not with --to-bucket).") var file: String?
        @Option(help: "Protect the file with the passphrase in this file (scrypt N=2^15, r=8, p=1; AES-256-GCM).") var passphraseFile: String?
        @Flag(help: "Put the keys into the bucket sealed with the passphrase of --passphrase-file (or $RTSYNC_KEY_PASSPHRASE), for `init --user U --passphrase-file P`.")
        var toBucket = false

        func validate() throws {
            if toBucket && file != nil { throw ValidationError("give a FILE or --to-bucket, not both") }
            if !toBucket && file == nil { throw ValidationError("give the FILE to write, or --to-bucket") }
        }

        func run() async throws {
            let ring = try requireKeyring(options.resolvedHome)
            if toBucket {
                do {
                    guard let pass = try ContentKeyOptions.passphrase(file: passphraseFile), !pass.isEmpty else {
                        throw fail("--to-bucket needs a passphrase", hint: "give --passphrase-file P (its first line) or set RTSYNC_KEY_PASSPHRASE")
                    }
                    let settings = try options.loadSettings()
                    guard !settings.userID.isEmpty else { throw EncryptionError.noUserYet(settings: options.resolvedHome.settingsFile.path) }
                    let key = try await options.openRemote(settings).uploadKeyBackup(ring, user: settings.userID, passphrase: pass)
                    print("put \(ring.keys.count) content key(s) sealed with the passphrase at \(key); a new device joins with: rtsync init --user \(settings.userID) --passphrase-file P")
                } catch { throw report(error) }
                return
            }
            guard let file else { return }
            do {
                var data = ring.encoded()
                if passphraseFile != nil {
                    guard let pass = try ContentKeyOptions.passphrase(file: passphraseFile), !pass.isEmpty else {
                        throw fail("the passphrase is empty (\(passphraseFile!))", hint: "put the passphrase on the file's first line")
                    }
                    data = try ring.wrapped(passphrase: pass)
                }
                try ContentKeyring.writeSecret(data, to: URL(fileURLWithPath: file))
                print("exported \(ring.keys.count) content key(s) to \(file)\(passphraseFile == nil ? " (plain: keep it like a password)" : " (passphrase-protected)")")
            } catch { throw report(error) }
        }
    }

    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add the content keys of a file `rtsync keys export` wrote (also after a rotation on another device).")
        @OptionGroup var options: HomeOptions
        @Argument(help: "The key file.") var file: String
        @Option(help: "A file holding the passphrase of a passphrase-protected key file (else $RTSYNC_KEY_PASSPHRASE).") var passphraseFile: String?
        func run() throws {
            let home = options.resolvedHome
            var settings = try options.loadSettings()
            try ContentKeyOptions.importKey(file, passphraseFile: passphraseFile, into: home, settings: &settings)
            do { try home.saveSettings(settings) } catch { throw report(error) }
            let ring = try requireKeyring(home)
            print("content keys: \(ring.keys.map(\.id).joined(separator: ", ")); current \(ring.currentID)")
        }
    }

    /// Publishes what the home has not yet put into `<user>/keys/` (a rotated key sealed under the one before it, the
    /// share key); nil when done (or encryption is off), else why not.
    static func publishKeys(_ options: HomeOptions) async -> String? {
        do {
            let settings = try options.loadSettings()
            guard !settings.encryption.isEmpty else { return nil }
            // Under the home's lock, as sync writes what it has published.
            try await options.locked { _ = try await options.openRemote(settings).publishKeys() }
            return nil
        } catch { return ErrorExplanation(error, subject: "keys").what }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a new content key for new objects; objects encrypted with older keys stay readable.",
            discussion: "With encryption on, the new key goes into the bucket sealed under the previous key (<user>/keys/<id>.sealed; never in the clear), now or else before the first object encrypted with it is uploaded; the user's other devices take it from there when they first meet such an object. Export/import still works (and is needed by a device whose keys are older than every sealed copy). If the current key may have leaked (a lost device, a copied key file), rotate with --no-publish: anyone holding the old key could open a copy sealed under it, so the new key then reaches your other devices only by export and import. Rotation protects what is encrypted from then on; what the old key encrypted stays readable to whoever holds it.")
        @OptionGroup var options: HomeOptions
        @Flag(help: "Never put the new key into the bucket sealed under the previous one (the previous key may have leaked); hand it over with keys export/import.")
        var noPublish = false
        func run() async throws {
            let home = options.resolvedHome
            var ring = try requireKeyring(home)
            let key = ring.rotate(publishable: !noPublish)
            do { try ring.save(to: home.contentKeysFile) } catch { throw report(error) }
            print("new content key \(key.id) is current; \(ring.keys.count - 1) older key(s) kept for reading")
            guard !noPublish, (try? options.loadSettings().encryption.isEmpty) == false else {
                print("give it to your other devices: rtsync keys export FILE here, rtsync keys import FILE there")
                return
            }
            if let problem = await RTSync.Keys.publishKeys(options) {
                print("not published yet (\(terminalSafe(problem, limit: 500))): it goes up sealed before this device uploads anything encrypted with it")
            } else {
                print("published sealed under the previous key: your other devices take it from the bucket when they need it")
            }
        }
    }

    struct Decrypt: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Decrypt an encrypted object fetched raw from the bucket (e.g. with `rtsync bucket get`), with this home's keys.")
        @OptionGroup var options: HomeOptions
        @Argument(help: "The encrypted file.") var input: String
        @Argument(help: "Where to write the plaintext.") var output: String
        @Option(help: ArgumentHelp("The media path an object under an encrypted name is bound to (e.g. images/a.jpg).", valueName: "path"))
        var name: String?
        func run() throws {
            let ring = try requireKeyring(options.resolvedHome)
            let target = URL(fileURLWithPath: output)
            let temp = target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).\(UUID().uuidString).tmp")
            do {
                try EncryptionFormat.decryptFile(URL(fileURLWithPath: input), to: temp, keyring: ring, object: input, name: name)
                if FileManager.default.fileExists(atPath: target.path) { try FileManager.default.removeItem(at: target) }
                // A diff travels compressed under the encryption: the plaintext written is the expanded diff file.
                let compressed = DiffTransport.isCompressed(file: temp)
                if let problem = try DiffTransport.install(temp, as: target, name: input) {
                    try? FileManager.default.removeItem(at: target)
                    throw DiffFormatError.badCompression(file: input, reason: problem)
                }
                print("decrypted \(input) -> \(output)" + (compressed ? " (expanded from the diff's transport compression)" : ""))
            } catch {
                try? FileManager.default.removeItem(at: temp)
                throw report(error)
            }
        }
    }

    struct ShareKey: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print this user's share key: other users record it (`rtsync keys add-recipient`) to encrypt what they share with you.",
            discussion: "An X25519 public key kept with the content keys (exported and imported with them). A share encrypted to it is readable by your devices only; it is accepted as a share or request from another user, never as one of your own diffs.")
        @OptionGroup var options: HomeOptions
        @Flag(help: "Print JSON: {shareKey, fingerprint}.") var json = false
        func run() throws {
            do {
                let key = try options.resolvedHome.shareKeyHex()
                if json {
                    printJSON(["shareKey": key, "fingerprint": PublishedShareKey.fingerprint(hex: key) ?? ""])
                } else { print(key) }
            } catch { throw report(error) }
        }
    }

    struct AddRecipient: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Encrypt what this home shares with USER to USER's share key (as `rtsync keys share-key` prints it there).",
            discussion: "Applies to share and request diffs sent with `rtsync share` / `rtsync request` while this home has encryption on; media sent with --with-media is encrypted to the same key.")
        @OptionGroup var options: HomeOptions
        @Argument(help: "The recipient's user id.") var user: String
        @Argument(help: "The recipient's share key: 64 hex characters.") var publicKey: String
        func run() throws {
            do {
                try options.resolvedHome.addShareRecipient(user: user, publicKeyHex: publicKey)
                print("shares to \(user) will be encrypted to their share key")
            } catch { throw report(error) }
        }
    }
}
