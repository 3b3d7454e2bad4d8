import ArgumentParser
import Foundation
import SyncEngine

extension RTSync {
    /// `rtsync keys show|trust|require`.
    struct Keys: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "This device's diff-signing key, the keys it trusts, and the user's content keys for encryption.",
            discussion: "Every diff this device exports is signed with its Ed25519 key (kept in <home>/keys, readable only by you). With signatures required, diffs that are unsigned or signed by an untrusted key are rejected.",
            subcommands: [Show.self, Trust.self, Require.self, Create.self, Encrypt.self, Export.self, Import.self, Rotate.self, Decrypt.self, ShareKey.self, AddRecipient.self]
        )

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Print this device's public key (give it to the devices and users that should trust it).")
            @OptionGroup var options: HomeOptions
            @Flag(help: "Print JSON: {publicKey, trusted: [{publicKey, user}]}.") var json = false
            func run() throws {
                do {
                    // Showing reads: a home without a key yet gets none made here.
                    let keys = DeviceKeys(home: options.resolvedHome)
                    guard FileManager.default.fileExists(atPath: keys.privateKeyFile.path) else {
                        throw fail("this device has no key yet (\(keys.privateKeyFile.path))", hint: "its first `rtsync sync` makes one; check --home if you expected one")
                    }
                    if json {
                        struct Trusted: Encodable { let publicKey: String; let user: String }
                        struct Out: Encodable { let publicKey: String; let trusted: [Trusted] }
                        let own = try keys.publicKeyHex()
                        let trusted = try keys.trustedIdentities(ownUser: "").filter { $0.key != own }.sorted { $0.key < $1.key }
                            .map { Trusted(publicKey: $0.key, user: $0.value) }
                        printJSON(Out(publicKey: own, trusted: trusted))
                        return
                    }
                    print(try keys.publicKeyHex())
                } catch { throw report(error) }
            }
        }

        struct Trust: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Trust another device's or user's public key.")
            @OptionGroup var options: HomeOptions
            @Argument(help: "The public key: 64 hex characters, as printed by `rtsync keys show`.") var publicKey: String
            @Option(name: [.customLong("user"), .customLong("label")], help: "The user id this key speaks for (diffs it signs must name this user as author).") var label: String
            func run() throws {
                let hex = publicKey.trimmingCharacters(in: .whitespaces)
                guard hex.count == 64, hex.allSatisfy(\.isHexDigit) else {
                    throw fail("not a public key: expected 64 hex characters, got \(hex.count) (\(terminalSafe(hex, limit: 80)))",
                               hint: "copy the whole line that `rtsync keys show` prints on the other device")
                }
                do {
                    // Under the home's lock, like every other write in the home (a sync's clean-up may then treat a
                    // half-written key file as a killed run's leftover).
                    try options.locked { try DeviceKeys(home: options.resolvedHome).trust(publicKeyHex: hex, label: label) }
                    print("trusted \(label)")
                } catch { throw report(error) }
            }
        }

        struct Require: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Require valid signatures from trusted keys on incoming diffs (on|off).")
            @OptionGroup var options: HomeOptions
            @Argument(help: "on or off") var state: String
            func validate() throws { if !["on", "off"].contains(state) { throw ValidationError("say on or off") } }
            func run() throws {
                do {
                    var s = try options.loadSettings()
                    s.requireSignatures = state == "on"
                    try options.resolvedHome.saveSettings(s)
                    print("signatures \(s.requireSignatures ? "required" : "not required")")
                } catch { throw report(error) }
            }
        }
    }
}
