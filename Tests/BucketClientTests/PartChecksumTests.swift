import CChecksum
import Foundation
import RTSyncTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
@testable import BucketClient

/// CRC-32 part checksums of multipart uploads: the checksum itself, and what the loopback moto server records.
@Suite struct PartChecksumTests {

    /// The composite CRC-32 S3 gives a multipart object: the CRC-32 of the parts' CRC-32s (big-endian), base64.
    static func compositeCRC32(of data: Data, partSize: Int) -> String {
        var joined = Data()
        for start in stride(from: 0, to: data.count, by: partSize) {
            let crc = Hashing.crc32(data.subdata(in: start..<min(start + partSize, data.count)))
            joined.append(contentsOf: [UInt8(crc >> 24), UInt8((crc >> 16) & 0xff), UInt8((crc >> 8) & 0xff), UInt8(crc & 0xff)])
        }
        return Hashing.crc32Base64(joined)
    }

    /// HEAD with `x-amz-checksum-mode: ENABLED`: the object's stored checksum headers.
    static func checksumHeaders(_ store: S3Store, key: String) async throws -> (crc32: String?, algorithm: String?) {
        var request = S3Store.Request(method: "HEAD", key: key, operation: "HeadObject")
        request.headers["x-amz-checksum-mode"] = "ENABLED"
        let response = try await store.send(request)
        return (response.header("x-amz-checksum-crc32"), response.header("x-amz-sdk-checksum-algorithm"))
    }

    @Test func crc32_matchesTheStandardCheckValue_andItsBase64IsBigEndian() {
        // The CRC-32/ISO-HDLC check value: CRC of the ASCII digits 1 to 9.
        #expect(Hashing.crc32(Data("123456789".utf8)) == 0xCBF4_3926)
        #expect(Hashing.crc32(Data()) == 0)
        #expect(Hashing.crc32Base64(Data("123456789".utf8)) == Data([0xCB, 0xF4, 0x39, 0x26]).base64EncodedString())
    }

    @Test func crc32_portableLoop_agreesWithZlib_atEveryLengthAndContinuation() {
        let data = randomBytes(4099)
        data.withUnsafeBytes { bytes in
            for length in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4099] {
                let fast = rtsync_crc32(0, bytes.baseAddress, length)
                #expect(rtsync_crc32_portable(0, bytes.baseAddress, length) == fast)
                // Continuing from a first half gives the CRC of the whole.
                let half = length / 2
                let first = rtsync_crc32_portable(0, bytes.baseAddress, half)
                #expect(rtsync_crc32(first, bytes.baseAddress! + half, length - half) == fast)
            }
        }
    }

    @Test func multipartUpload_declaresCRC32_soTheObjectGetsTheCompositeCRC32OfItsParts() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20 }
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("crc.bin")
        let data = randomBytes(12 << 20)
        try data.write(to: source)
        let info = try await store.put(key: "crc.bin", fileURL: source)
        #expect(info.etag.hasSuffix("-3"))
        let stored = try await Self.checksumHeaders(store, key: "crc.bin")
        #expect(stored.algorithm == "CRC32")
        // AWS appends "-<parts>" to a composite checksum; moto gives the bare value.
        let expected = Self.compositeCRC32(of: data, partSize: 5 << 20)
        #expect(stored.crc32 == expected || stored.crc32 == "\(expected)-3")
        #expect(try await store.get(key: "crc.bin") == data)
    }

    @Test func multipartUpload_withPartChecksumOff_declaresNoAlgorithm() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let store = moto.store { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.partChecksum = .off }
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("plain.bin")
        let data = randomBytes(11 << 20)
        try data.write(to: source)
        try await store.put(key: "plain.bin", fileURL: source)
        let stored = try await Self.checksumHeaders(store, key: "plain.bin")
        #expect(stored.algorithm == nil)
        #expect(stored.crc32 == nil)
        #expect(try await store.get(key: "plain.bin") == data)
    }

    @Test func resumedUpload_keepsTheAlgorithmItWasCreatedWith_evenWhenTheConfigurationChanged() async throws {
        guard let moto = try await MotoServer.authenticatedUnlessSkipped() else { return }
        let prefix = "t-\(UUID().uuidString.prefix(8))-"
        let folder = try makeTemporaryFolder()
        let source = folder.appendingPathComponent("resume.bin")
        let data = randomBytes(16 << 20)
        try data.write(to: source)
        let crashing = moto.store(prefix: prefix) {
            $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.maxConcurrency = 1; $0.stopAfterPartsForTesting = 2
        }
        await #expect(throws: BucketError.self) { try await crashing.put(key: "resume.bin", fileURL: source) }
        let saved = try JSONDecoder().decode(MultipartState.self,
                                             from: Data(contentsOf: crashing.multipartStateURL(fileURL: source, key: "resume.bin")))
        #expect(saved.checksumAlgorithm == "CRC32")
        // Resumed by a store that would not declare a checksum for a new upload: the parts still carry CRC-32s and
        // the completion lists one for every part, including the two uploaded before the interruption.
        let resumed = moto.store(prefix: prefix) { $0.multipartThreshold = 6 << 20; $0.partSize = 5 << 20; $0.partChecksum = .off }
        try await resumed.put(key: "resume.bin", fileURL: source)
        #expect(resumed.requestCounter.count("CreateMultipartUpload") == 0)
        #expect(resumed.requestCounter.count("UploadPart") == 2)
        let stored = try await Self.checksumHeaders(resumed, key: "resume.bin")
        #expect(stored.algorithm == "CRC32")
        let expected = Self.compositeCRC32(of: data, partSize: 5 << 20)
        #expect(stored.crc32 == expected || stored.crc32 == "\(expected)-4")
        #expect(try await resumed.get(key: "resume.bin") == data)
    }

    @Test func stateFileWrittenBeforePartChecksums_decodesWithoutAnAlgorithm() throws {
        let json = #"{"bucket":"b","key":"k","uploadId":"u","fileSize":10,"fileMtimeNanoseconds":1,"partSize":5242880,"parts":{}}"#
        let state = try JSONDecoder().decode(MultipartState.self, from: Data(json.utf8))
        #expect(state.checksumAlgorithm == nil)
        #expect(state.uploadId == "u")
    }
}
