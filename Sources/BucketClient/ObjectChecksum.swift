import CChecksum
import Crypto
import Foundation

/// A full-object checksum a server announced for an object (`x-amz-checksum-<algorithm>`), to verify downloaded
/// bytes against. See <https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html>.
struct ObjectChecksum: Sendable, Equatable {
    /// The algorithms S3 offers for additional checksums (MD5 is left out: S3 does not return it on GET).
    enum Algorithm: String, Sendable, CaseIterable {
        // Cheapest first: the first one a response carries is the one checked.
        case crc64nvme = "CRC64NVME", crc32 = "CRC32", crc32c = "CRC32C", sha1 = "SHA1", sha256 = "SHA256"

        /// The response header carrying it.
        var header: String { "x-amz-checksum-\(rawValue.lowercased())" }
        /// Bytes of the digest.
        var length: Int {
            switch self {
            case .crc32, .crc32c: return 4
            case .crc64nvme: return 8
            case .sha1: return 20
            case .sha256: return 32
            }
        }
    }

    /// The algorithm.
    var algorithm: Algorithm
    /// The digest as the server sent it (base64).
    var base64: String

    /// The full-object checksum in a response's headers; nil when there is none that covers the whole object.
    ///
    /// A value of type `COMPOSITE` (S3's `x-amz-checksum-type`), or of the form `<base64>-<parts>` that older
    /// servers send for multipart uploads, is a checksum of the parts' checksums: it cannot be checked against the
    /// whole body without knowing every part's boundaries, so it is skipped (and counted as skipped by the caller).
    /// With `requireFullObjectType`, a value is taken only when `x-amz-checksum-type: FULL_OBJECT` says what it is
    /// (HEAD answers: moto's HEAD drops the `-<parts>` suffix of a composite value and sends no type).
    static func fromHeaders(_ header: (String) -> String?, requireFullObjectType: Bool = false) -> (checksum: ObjectChecksum?, compositeSkipped: Bool) {
        let type = header("x-amz-checksum-type")?.uppercased()
        for algorithm in Algorithm.allCases {
            guard let value = header(algorithm.header)?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { continue }
            if type == "COMPOSITE" || value.contains("-") { return (nil, true) }
            if requireFullObjectType && type != "FULL_OBJECT" { return (nil, false) }
            // A value that is not a digest of this algorithm cannot be checked: not an error of the download.
            guard let digest = Data(base64Encoded: value), digest.count == algorithm.length else { continue }
            return (ObjectChecksum(algorithm: algorithm, base64: value), false)
        }
        return (nil, false)
    }

    /// Incremental digest of one algorithm.
    struct Hasher {
        let algorithm: Algorithm
        private var crc32: UInt32 = 0
        private var crc64: UInt64 = 0
        private var sha1 = Insecure.SHA1()
        private var sha256 = SHA256()

        init(_ algorithm: Algorithm) { self.algorithm = algorithm }

        mutating func update(_ data: Data) {
            switch algorithm {
            case .crc32: crc32 = data.withUnsafeBytes { rtsync_crc32(crc32, $0.baseAddress, $0.count) }
            case .crc32c: crc32 = data.withUnsafeBytes { rtsync_crc32c(crc32, $0.baseAddress, $0.count) }
            case .crc64nvme: crc64 = data.withUnsafeBytes { rtsync_crc64nvme(crc64, $0.baseAddress, $0.count) }
            case .sha1: sha1.update(data: data)
            case .sha256: sha256.update(data: data)
            }
        }

        /// The digest, base64 as S3 sends it (CRCs as big-endian bytes).
        func finalizeBase64() -> String {
            switch algorithm {
            case .crc32, .crc32c: return Data((0..<4).map { UInt8(truncatingIfNeeded: crc32 >> (24 - 8 * $0)) }).base64EncodedString()
            case .crc64nvme: return Data((0..<8).map { UInt8(truncatingIfNeeded: crc64 >> (56 - 8 * $0)) }).base64EncodedString()
            case .sha1: return Data(sha1.finalize()).base64EncodedString()
            case .sha256: return Data(sha256.finalize()).base64EncodedString()
            }
        }
    }

    /// The digest of `data` in this checksum's algorithm (base64).
    func digest(of data: Data) -> String {
        var hasher = Hasher(algorithm)
        hasher.update(data)
        return hasher.finalizeBase64()
    }

    /// The digest of a file in this checksum's algorithm (base64), read in 8 MiB pieces.
    func digest(ofFile url: URL) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: url.path) else {
            throw BucketError.localIO(path: url.path, description: "cannot open for reading")
        }
        defer { try? handle.close() }
        var hasher = Hasher(algorithm)
        do {
            while let piece = try handle.read(upToCount: 8 << 20), !piece.isEmpty { hasher.update(piece) }
        } catch {
            throw BucketError.localIO(path: url.path, description: error.localizedDescription)
        }
        return hasher.finalizeBase64()
    }

    /// Whether `digest` (base64) is this checksum; compared as bytes, so padding variants cannot differ.
    func matches(_ digest: String) -> Bool {
        Data(base64Encoded: digest) == Data(base64Encoded: base64)
    }
}
