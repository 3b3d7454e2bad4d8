import Crypto
import Foundation

/// The device's Ed25519 signing key and the public keys it trusts, kept in `<home>/keys/` outside the
/// database: the private key file is readable only by the user (0600, folder 0700).
public struct DeviceKeys: Sendable {
    /// The keys folder.
    public let folder: URL

    /// Uses `home.keys`.
    public init(home: RTSyncHome) { folder = home.keys }

    var privateKeyFile: URL { folder.appendingPathComponent("device.ed25519") }
    var trustedFolder: URL { folder.appendingPathComponent("trusted") }

    /// The device key, created on first use.
    public func signingKey() throws -> Curve25519.Signing.PrivateKey {
        let fm = FileManager.default
        if let data = try? Data(contentsOf: privateKeyFile) {
            return try Curve25519.Signing.PrivateKey(rawRepresentation: data)
        }
        try fm.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder.path)
        let key = Curve25519.Signing.PrivateKey()
        // Create the file with owner-only permissions before writing the secret into it.
        guard fm.createFile(atPath: privateKeyFile.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: privateKeyFile.path])
        }
        let handle = try FileHandle(forWritingTo: privateKeyFile)
        try handle.write(contentsOf: key.rawRepresentation)
        try handle.synchronize()
        try handle.close()
        return key
    }

    /// This device's public key as lower-case hex (safe to share).
    public func publicKeyHex() throws -> String { Array(try signingKey().publicKey.rawRepresentation).map { String(format: "%02x", $0) }.joined() }

    /// Public keys trusted for incoming diffs: this device's own plus every `trusted/*.pub` (hex text).
    public func trustedKeys() throws -> [[UInt8]] {
        var keys = [Array(try signingKey().publicKey.rawRepresentation)]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: trustedFolder.path)) ?? [] where name.hasSuffix(".pub") {
            let text = (try? String(contentsOf: trustedFolder.appendingPathComponent(name), encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            if let bytes = Self.parse(text) { keys.append(bytes) }
        }
        return keys
    }

    /// Trusted keys with the user each one speaks for: this device's key speaks for `ownUser`; a key trusted
    /// with `trust(publicKeyHex:label:)` speaks for the user id given as its label.
    public func trustedIdentities(ownUser: String) throws -> [String: String] {
        var out = [Array(try signingKey().publicKey.rawRepresentation).map { String(format: "%02x", $0) }.joined(): ownUser]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: trustedFolder.path)) ?? [] where name.hasSuffix(".pub") {
            let text = (try? String(contentsOf: trustedFolder.appendingPathComponent(name), encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            if let bytes = Self.parse(text) { out[bytes.map { String(format: "%02x", $0) }.joined()] = String(name.dropLast(4)) }
        }
        return out
    }

    /// Trusts a public key (64 hex characters) as speaking for a user (the label is that user's id).
    /// - Throws: `LifecycleError.invalidSettings` when the key is not 32 bytes of hex.
    public func trust(publicKeyHex: String, label: String) throws {
        guard let bytes = Self.parse(publicKeyHex) else {
            throw LifecycleError.invalidSettings(file: publicKeyHex, reason: "a public key is 64 hex characters (32 bytes)")
        }
        try FileManager.default.createDirectory(at: trustedFolder, withIntermediateDirectories: true)
        let safe = String(label.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" ? Character($0) : "_" })
        try Data((bytes.map { String(format: "%02x", $0) }.joined() + "\n").utf8).write(to: trustedFolder.appendingPathComponent((safe.isEmpty ? "key" : safe) + ".pub"), options: .atomic)
    }

    static func parse(_ hex: String) -> [UInt8]? {
        let h = hex.trimmingCharacters(in: .whitespacesAndNewlines)
        guard h.count == 64 else { return nil }
        var out: [UInt8] = []
        var i = h.startIndex
        while i < h.endIndex {
            let j = h.index(i, offsetBy: 2)
            guard let b = UInt8(h[i..<j], radix: 16) else { return nil }
            out.append(b)
            i = j
        }
        return out
    }
}
