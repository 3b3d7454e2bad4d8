import Crypto
import Foundation
import RTSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The device's Ed25519 signing key and the public keys it trusts, kept in `<home>/keys/` outside the
/// database: the private key file is readable only by the user (0600, folder 0700).
public struct DeviceKeys: Sendable {
    /// The keys folder.
    public let folder: URL

    /// Uses `home.keys`.
    public init(home: RTSyncHome) { folder = home.keys }

    /// The device's private key file (`<home>/keys/device.ed25519`, mode 0600).
    public var privateKeyFile: URL { folder.appendingPathComponent("device.ed25519") }
    var trustedFolder: URL { folder.appendingPathComponent("trusted") }

    /// The device key, created on first use.
    ///
    /// The new key is written to a private temp file (0600) and renamed into place, so a run killed meanwhile
    /// leaves no empty or partial key file (which would fail every later run); an empty key file, which only an
    /// interrupted creation by an older version leaves, is replaced the same way.
    public func signingKey() throws -> Curve25519.Signing.PrivateKey {
        let fm = FileManager.default
        if let data = try? Data(contentsOf: privateKeyFile), !data.isEmpty {
            return try Curve25519.Signing.PrivateKey(rawRepresentation: data)
        }
        try fm.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder.path)
        let key = Curve25519.Signing.PrivateKey()
        let temp = folder.appendingPathComponent(Self.tempPrefix + "\(getpid())-\(UUID().uuidString)")
        // Created with owner-only permissions before the secret is written into it.
        let fd = open(temp.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: temp.path]) }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: key.rawRepresentation)
            try handle.synchronize()
            try handle.close()
            guard rename(temp.path, privateKeyFile.path) == 0 else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: privateKeyFile.path])
            }
        } catch {
            unlink(temp.path)
            throw error
        }
        return key
    }

    /// The name start of a key being written (`HomeDebris` removes those a killed run left).
    static let tempPrefix = ".device.ed25519.tmp-"

    /// This device's public key as lower-case hex (safe to share).
    public func publicKeyHex() throws -> String { Array(try signingKey().publicKey.rawRepresentation).hexString }

    /// Public keys trusted for incoming diffs: this device's own plus every `trusted/*.pub` (hex text).
    public func trustedKeys() throws -> [[UInt8]] {
        try trustedIdentities(ownUser: "").keys.compactMap { [UInt8](hexString: $0) }
    }

    /// Trusted keys (lower-case hex) with the user each one speaks for: this device's key speaks for
    /// `ownUser`; a key trusted with `trust(publicKeyHex:label:)` speaks for the user id given as its label.
    public func trustedIdentities(ownUser: String) throws -> [String: String] {
        var out = [Array(try signingKey().publicKey.rawRepresentation).hexString: ownUser]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: trustedFolder.path)) ?? [] where name.hasSuffix(".pub") {
            let text = (try? String(contentsOf: trustedFolder.appendingPathComponent(name), encoding: .utf8)) ?? ""
            if let bytes = Self.parse(text) { out[bytes.hexString] = String(name.dropLast(4)) }
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
        try Data((bytes.hexString + "\n").utf8).write(to: trustedFolder.appendingPathComponent((safe.isEmpty ? "key" : safe) + ".pub"), options: .atomic)
    }

    /// 32 key bytes from 64 hex characters (surrounding whitespace ignored), or nil.
    static func parse(_ hex: String) -> [UInt8]? {
        guard let bytes = [UInt8](hexString: hex.trimmingCharacters(in: .whitespacesAndNewlines)), bytes.count == 32 else { return nil }
        return bytes
    }
}
