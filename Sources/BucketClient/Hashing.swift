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

    /// SHA-256 of a download's bytes as they are written into its file, which must happen in order from the file's
    /// start. A write anywhere else (a resumed download, a retried answer written over the same bytes) makes
    /// ``digestHex(ofLength:)`` nil, and the caller reads the file back instead. Fed from libcurl's transfer thread
    /// or from the downloading task, never from two at once; the lock orders those hand-overs.
    final class WrittenBytes: @unchecked Sendable {
        private let lock = NSLock()
        private var hasher = SHA256()
        private var length: Int64 = 0
        private var outOfOrder = false

        /// `bytes` were written at `offset`.
        func wrote(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
            lock.lock()
            defer { lock.unlock() }
            guard !outOfOrder else { return }
            guard offset == length else { outOfOrder = true; return }
            hasher.update(bufferPointer: bytes)
            length += Int64(bytes.count)
        }

        /// The file was cut to `size` bytes (or, for a resume, found holding that many): only a restart from
        /// nothing keeps the running digest usable.
        func truncated(to size: Int64) {
            lock.lock()
            defer { lock.unlock() }
            if size == 0 {
                hasher = SHA256()
                length = 0
                outOfOrder = false
            } else if size != length {
                outOfOrder = true
            }
        }

        /// The hex digest when exactly `total` bytes were written, in order; else nil.
        func digestHex(ofLength total: Int64) -> String? {
            lock.lock()
            defer { lock.unlock() }
            guard !outOfOrder, length == total else { return nil }
            return Hashing.hex(hasher.finalize())
        }
    }

    /// Incremental SHA-256 for files.
    struct SHA256Stream {
        private var hasher = SHA256()
        mutating func update(_ data: Data) { hasher.update(data: data) }
        func finalizeHex() -> String { Hashing.hex(hasher.finalize()) }
    }
}
