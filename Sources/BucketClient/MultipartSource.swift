import Crypto
import Foundation

/// The bytes a resumable multipart upload sends, part by part: a file as it is (``FileParts``), or a file encrypted
/// as each part is read (`EncryptedParts`), so that an encrypted upload needs no staging copy.
protocol MultipartSource: Sendable {
    /// The local file the object is made from; the upload's resume file is named after it and the key.
    var fileURL: URL { get }
    /// Bytes of the object.
    var size: Int64 { get }
    /// The file's modification time when it was measured (nanoseconds), recorded in the resume file.
    var fileMtimeNanoseconds: Int64 { get }
    /// The part size recorded in the resume file: an upload saved with another one starts over.
    var partSize: Int { get }
    /// Number of parts (at least one).
    var partCount: Int { get }
    /// What a saved upload must name for its parts to be reused: nil to judge the file by its size and modification
    /// time (the object is the file's bytes), else an identity of the object's bytes that changes whenever they do.
    var contentID: String? { get }
    /// Bytes of part `number` (1-based).
    func length(ofPart number: Int) -> Int64
    /// The bytes of part `number` (1-based).
    /// - Throws: ``BucketError/localIO(path:description:)`` when the file cannot be read or no longer holds what was
    ///   measured.
    func read(part number: Int) throws -> Data
}

extension MultipartSource {
    /// The MD5 of the whole object (lowercase hex), read part by part.
    func md5Hex() throws -> String {
        var md5 = Insecure.MD5()
        for number in 1...partCount { md5.update(data: try read(part: number)) }
        return Hashing.hex(md5.finalize())
    }

    /// The ETag S3 gives this object uploaded in these parts: MD5 of the parts' MD5s, `-` and the part count.
    func multipartETag() throws -> String {
        var digests = Data()
        for number in 1...partCount { digests.append(contentsOf: Insecure.MD5.hash(data: try read(part: number))) }
        return Hashing.md5Hex(digests) + "-\(partCount)"
    }

    /// Whether a saved upload of the same key is an upload of exactly these bytes in these parts.
    func isResumable(from saved: MultipartState) -> Bool {
        guard saved.fileSize == size, saved.partSize == partSize else { return false }
        if let contentID { return saved.contentID == contentID }
        return saved.contentID == nil && saved.fileMtimeNanoseconds == fileMtimeNanoseconds
    }
}

/// A file uploaded as it is, in parts of one size (the last one shorter).
struct FileParts: MultipartSource {
    let fileURL: URL
    let size: Int64
    let fileMtimeNanoseconds: Int64
    let partSize: Int
    private let reader: PartReader

    /// The parts of the file at `fileURL` as `stat` measured it.
    init(fileURL: URL, stat st: FileStat, partSize: Int) throws {
        self.fileURL = fileURL
        size = st.size
        fileMtimeNanoseconds = st.mtimeNanoseconds
        self.partSize = partSize
        reader = try PartReader(fileURL: fileURL, fileSize: st.size, partSize: partSize)
    }

    var partCount: Int { max(1, Int((size + Int64(partSize) - 1) / Int64(partSize))) }
    var contentID: String? { nil }

    func length(ofPart number: Int) -> Int64 {
        number == partCount ? size - Int64(partSize) * Int64(partCount - 1) : Int64(partSize)
    }

    func read(part number: Int) throws -> Data { try reader.read(part: number) }
}
