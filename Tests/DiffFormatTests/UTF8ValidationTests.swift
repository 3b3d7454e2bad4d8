@testable import DiffFormat
import Foundation
import Testing

/// The reader rejects diff text that is not valid UTF-8 with its own validator (the standard library's needs
/// macOS 15 / iOS 18). It must agree with the standard library's decoder on every input.
@Suite("UTF-8 validation of diff text")
struct UTF8ValidationTests {
    func valid(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { CanonicalHasher.isValidUTF8($0) } }

    @Test func knownCases() {
        let good: [[UInt8]] = [[], [0], Array("plain ascii text, longer than eight bytes".utf8), Array("naïve ☃ 𝄞 é".utf8),
                               [0xEF, 0xBF, 0xBF], [0xF4, 0x8F, 0xBF, 0xBF], [0xED, 0x9F, 0xBF], [0xE0, 0xA0, 0x80]]
        let bad: [[UInt8]] = [[0xFF], [0x80], [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x9F, 0xBF], [0xED, 0xA0, 0x80],
                              [0xF0, 0x8F, 0xBF, 0xBF], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xE2, 0x82],
                              Array("abcdefgh".utf8) + [0xC3], [0x61, 0xC3, 0x28, 0x61, 0x61, 0x61, 0x61, 0x61, 0x61]]
        for g in good { #expect(valid(g), "\(g)") }
        for b in bad { #expect(!valid(b), "\(b)") }
    }

    @Test func agreesWithTheStandardLibrary() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        var rng = SystemRandomNumberGenerator()
        // Bytes drawn mostly from the ranges that matter for UTF-8 boundaries.
        let pool: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1,
                             0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...12, using: &rng)
            let bytes = (0..<count).map { _ in pool.randomElement(using: &rng)! }
            #expect(valid(bytes) == (String(validating: bytes, as: UTF8.self) != nil), "\(bytes.map { String($0, radix: 16) })")
        }
    }
}
