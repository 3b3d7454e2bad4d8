import CChecksum
import Crypto
import Foundation

/// Hash helpers over swift-crypto, returning lowercase hex.
enum Hashing {
    static func sha256Hex(_ data: some DataProtocol) -> String {
        hex(SHA256.hash(data: data))
    }

    static func md5Base64(_ data: some DataProtocol) -> String {
        Data(Insecure.MD5.hash(data: data)).base64EncodedString()
    }

    static func md5Hex(_ data: some DataProtocol) -> String {
        hex(Insecure.MD5.hash(data: data))
    }

    /// CRC-32 of `data` (zlib's polynomial, as S3's `x-amz-checksum-crc32` uses).
    static func crc32(_ data: Data) -> UInt32 {
        data.withUnsafeBytes { rtsync_crc32(0, $0.baseAddress, $0.count) }
    }

    /// The `x-amz-checksum-crc32` value of `data`: its CRC-32 as 4 big-endian bytes, base64-encoded.
    static func crc32Base64(_ data: Data) -> String {
        let crc = crc32(data)
        return Data([UInt8(crc >> 24), UInt8((crc >> 16) & 0xff), UInt8((crc >> 8) & 0xff), UInt8(crc & 0xff)]).base64EncodedString()
    }

    static func hmac(key: some ContiguousBytes, _ message: String) -> [UInt8] {
        let code = HMAC<SHA256>.authenticationCode(for: Data(message.utf8), using: SymmetricKey(data: key))
        return Array(code)
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Incremental SHA-256 for files.
    struct SHA256Stream {
        private var hasher = SHA256()
        mutating func update(_ data: Data) { hasher.update(data: data) }
        func finalizeHex() -> String { Hashing.hex(hasher.finalize()) }
    }
}
