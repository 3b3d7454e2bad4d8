@testable import DiffFormat
import Foundation
import RTSQLite
import Testing

/// Reference vectors published with segmentio/ksuid (README and ksuid_test.go).
struct KSUIDVector: Sendable, CustomTestStringConvertible {
    let string: String
    let rawHex: String
    let timestamp: UInt32
    let payloadHex: String
    let time: String
    var testDescription: String { string }
}

let segmentioVectors = [
    KSUIDVector(string: "0ujtsYcgvSTl8PAuAdqWYSMnLOv", rawHex: "0669F7EFB5A1CD34B5F99D1154FB6853345C9735",
                timestamp: 107_608_047, payloadHex: "B5A1CD34B5F99D1154FB6853345C9735", time: "2017-10-10T04:00:47Z"),
    KSUIDVector(string: "0ujzPyRiIAffKhBux4PvQdDqMHY", rawHex: "066A029C73FC1AA3B2446246D6E89FCD909E8FE8",
                timestamp: 107_610_780, payloadHex: "73FC1AA3B2446246D6E89FCD909E8FE8", time: "2017-10-10T04:46:20Z"),
]

@Suite("KSUID")
struct KSUIDTests {
    // MARK: - Reference vectors

    @Test(arguments: segmentioVectors)
    func parse_segmentioReferenceID_givesPublishedBytesTimestampPayloadAndTime(_ v: KSUIDVector) throws {
        let id = try KSUID(string: v.string)
        #expect(id.bytes.hexString.uppercased() == v.rawHex)
        #expect(id.timestamp == v.timestamp)
        #expect(id.payload.hexString.uppercased() == v.payloadHex)
        #expect(ISO8601.format(id.date) == v.time)
        #expect(id.unixTime == Int64(v.timestamp) + 1_400_000_000)
    }

    @Test(arguments: segmentioVectors)
    func format_segmentioReferenceBytes_givesPublishedString(_ v: KSUIDVector) throws {
        let id = try KSUID(bytes: try #require([UInt8](hexString: v.rawHex)))
        #expect(id.string == v.string)
        let fromParts = try KSUID(timestamp: v.timestamp, payload: try #require([UInt8](hexString: v.payloadHex)))
        #expect(fromParts.string == v.string)
    }

    @Test func parse_minimumString_givesAllZeroBytes() throws {
        let id = try KSUID(string: "000000000000000000000000000")
        #expect(id.bytes == [UInt8](repeating: 0, count: 20))
        #expect(id == KSUID.min)
        #expect(KSUID.min.string == "000000000000000000000000000")
    }

    @Test func parse_maximumString_givesAllFFBytes() throws {
        let id = try KSUID(string: "aWgEPTl1tmebfsQzFP4bxwgy80V")
        #expect(id.bytes == [UInt8](repeating: 0xFF, count: 20))
        #expect(id == KSUID.max)
        #expect(KSUID.max.string == "aWgEPTl1tmebfsQzFP4bxwgy80V")
    }

    @Test func roundTrip_randomBytesThroughString_givesSameBytes() throws {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<1_000 {
            let bytes = (0..<20).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let text = try KSUID(bytes: bytes).string
            #expect(text.utf8.count == 27)
            #expect(try KSUID(string: text).bytes == bytes)
        }
    }

    @Test func roundTrip_stringThroughBytes_givesSameString() throws {
        for text in segmentioVectors.map(\.string) + ["000000000000000000000000000", "aWgEPTl1tmebfsQzFP4bxwgy80V", "000000000000000000000000001"] {
            let id = try KSUID(string: text)
            #expect(try KSUID(bytes: id.bytes).string == text)
            #expect(KSUID(text)?.string == text)
        }
    }

    @Test func codable_encodesAsStringAndDecodesBack() throws {
        let id = try KSUID(string: "0ujtsYcgvSTl8PAuAdqWYSMnLOv")
        let data = try JSONEncoder().encode([id])
        #expect(String(decoding: data, as: UTF8.self) == "[\"0ujtsYcgvSTl8PAuAdqWYSMnLOv\"]")
        #expect(try JSONDecoder().decode([KSUID].self, from: data) == [id])
    }

    // MARK: - Rejections

    @Test(arguments: [
        ("0ujtsYcgvSTl8PAuAdqWYSMnLO", 26),
        ("0ujtsYcgvSTl8PAuAdqWYSMnLOvv", 28),
        ("", 0),
    ])
    func parse_wrongLength_throwsInvalidLength(_ text: String, _ length: Int) {
        #expect(throws: KSUIDError.invalidLength(text, found: length)) { try KSUID(string: text) }
        #expect(KSUID(text) == nil)
    }

    @Test(arguments: [
        ("0ujtsYcgvSTl8PAuAdqWYSMnL-v", "-", 25),
        ("_ujtsYcgvSTl8PAuAdqWYSMnLOv", "_", 0),
        ("0ujtsYcgvSTl8 AuAdqWYSMnLOv", " ", 13),
    ])
    func parse_asciiCharacterOutsideAlphabet_throwsInvalidCharacter(_ text: String, _ character: String, _ position: Int) {
        #expect(throws: KSUIDError.invalidCharacter(text, character: character, position: position)) { try KSUID(string: text) }
    }

    @Test func parse_nonASCIICharacterFillingTwentySevenBytes_throwsInvalidCharacter() {
        // 25 ASCII characters plus "é" (2 UTF-8 bytes) = 27 bytes, 26 characters.
        let text = "0ujtsYcgvSTl8PAuAdqWYSMnL" + "é"
        #expect(throws: KSUIDError.invalidCharacter(text, character: "é", position: 25)) { try KSUID(string: text) }
    }

    @Test func parse_twentySevenCharactersWithNonASCII_throwsInvalidCharacter() {
        // 27 characters (28 UTF-8 bytes): the length is right, the character is what is wrong.
        let text = "0ujtsYcgvSTl8PAuAdqWYSMnLOé"
        #expect(text.count == 27)
        #expect(throws: KSUIDError.invalidCharacter(text, character: "é", position: 26)) { try KSUID(string: text) }
    }

    @Test(arguments: ["aWgEPTl1tmebfsQzFP4bxwgy80W", "zzzzzzzzzzzzzzzzzzzzzzzzzzz", "b00000000000000000000000000"])
    func parse_valueAboveMaximum_throwsValueTooLarge(_ text: String) {
        #expect(throws: KSUIDError.valueTooLarge(text)) { try KSUID(string: text) }
    }

    @Test(arguments: [0, 19, 21])
    func initBytes_wrongCount_throwsInvalidByteCount(_ count: Int) {
        #expect(throws: KSUIDError.invalidByteCount(count)) { try KSUID(bytes: [UInt8](repeating: 1, count: count)) }
    }

    @Test func initTimestampPayload_payloadNotSixteenBytes_throwsInvalidPayloadLength() {
        #expect(throws: KSUIDError.invalidPayloadLength(15)) { try KSUID(timestamp: 1, payload: [UInt8](repeating: 0, count: 15)) }
    }

    @Test func errorDescription_namesTheRejectedText() {
        let error = KSUIDError.invalidCharacter("0ujtsYcgvSTl8PAuAdqWYSMnL-v", character: "-", position: 25)
        #expect(error.description.contains("0ujtsYcgvSTl8PAuAdqWYSMnL-v"))
        #expect(KSUIDError.valueTooLarge("zzz").description.contains("above the maximum"))
    }

    // MARK: - Ordering and generation

    @Test func compare_ordersByBytes_matchingStringOrder() throws {
        let a = try KSUID(string: "0ujtsYcgvSTl8PAuAdqWYSMnLOv")
        let b = try KSUID(string: "0ujzPyRiIAffKhBux4PvQdDqMHY")
        #expect(a < b)
        #expect(KSUID.min < a)
        #expect(b < KSUID.max)
    }

    @Test func generate_tenThousandAtSameDate_strictlyIncreasingAndStringsSortTheSame() {
        let date = Date(timeIntervalSince1970: 1_600_000_000.5)
        let ids = (0..<10_000).map { _ in KSUID.generate(at: date) }
        var increasing = true
        for (a, b) in zip(ids, ids.dropFirst()) where !(a < b) { increasing = false }
        #expect(increasing)
        #expect(Set(ids).count == ids.count)
        let strings = ids.map(\.string)
        #expect(strings.sorted() == strings)
    }

    @Test func generateForATimeAhead_doesNotPushLaterIdsForNowIntoTheFuture() {
        // Found by a full test run: a test's id for an hour ahead made every later id of the process an hour ahead,
        // so another test's "backup from a clock an hour fast" no longer sorted last.
        _ = KSUID.generate(at: Date().addingTimeInterval(3_600))
        let now = KSUID.generate()
        #expect(abs(now.date.timeIntervalSinceNow) < 120, "\(now.date)")
    }

    @Test func generator_tenThousandAtSameDate_allCarryThatSecondAndIncrease() {
        // A private generator, so ids other tests make concurrently cannot interleave.
        let generator = KSUIDGenerator()
        let date = Date(timeIntervalSince1970: 1_700_000_000.9)
        let ids = (0..<10_000).map { _ in generator.next(at: date) }
        #expect(ids.allSatisfy { $0.unixTime == 1_700_000_000 })
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0.string < $1.string })
    }

    @Test func randomSuccessor_isLargerAndDiffersBetweenCopies() throws {
        let last = KSUID.generate()
        let next = (0..<1000).map { _ in last.randomSuccessor()! }
        #expect(next.allSatisfy { $0 > last })
        #expect(Set(next.map(\.string)).count == 1000)
        #expect(try KSUID(string: "aWgEPTl1tmebfsQzFP4bxwgy80V").randomSuccessor() == nil)
    }
}
