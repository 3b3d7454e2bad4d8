import Foundation
import Testing
@testable import BucketClient

/// `S3Configuration.fromEnvironment` reads the transport switch operators can use to avoid the direct path.
@Suite struct TransportEnvironmentTests {
    @Test func transportVariable_urlsessionTurnsTheDirectPathOff_andBadValuesAreRefused() throws {
        let base = ["AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"]
        #expect(try S3Configuration.fromEnvironment(bucket: "b", environment: base).directTransportMinimumBody == 0)
        var off = base
        off["RTSYNC_S3_TRANSPORT"] = "URLSession"
        #expect(try S3Configuration.fromEnvironment(bucket: "b", environment: off).directTransportMinimumBody == nil)
        var bad = base
        bad["RTSYNC_S3_TRANSPORT"] = "carrier-pigeon"
        #expect(throws: BucketError.self) { _ = try S3Configuration.fromEnvironment(bucket: "b", environment: bad) }
    }

    @Test func partChecksumVariable_defaultsToCRC32_noneTurnsItOff_andBadValuesAreRefused() throws {
        let base = ["AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"]
        #expect(try S3Configuration.fromEnvironment(bucket: "b", environment: base).partChecksum == .crc32)
        var off = base
        off["RTSYNC_S3_PART_CHECKSUM"] = "None"
        #expect(try S3Configuration.fromEnvironment(bucket: "b", environment: off).partChecksum == .off)
        var bad = base
        bad["RTSYNC_S3_PART_CHECKSUM"] = "md4"
        #expect(throws: BucketError.self) { _ = try S3Configuration.fromEnvironment(bucket: "b", environment: bad) }
    }
}
