@testable import BucketClient
import Foundation
import Testing

/// The dates S3 answers with are read without a formatter, and must read as Foundation's formatters read them.
@Suite("HTTP and listing dates")
struct HTTPDatesTests {
    @Test func listingDates_readAsTheISOFormatterReadsThem() {
        var texts = ["2026-11-27T12:13:27.000Z", "2026-11-27T12:13:27Z", "2024-02-29T23:59:59.999Z", "1970-01-01T00:00:00.000Z",
                     "2000-03-01T00:00:00.5Z", "2026-01-31T08:09:10.123Z", "1999-12-31T23:59:59.001Z",
                     // Not the fast path's: the formatter decides.
                     "2026-11-27T12:13:27+01:00", "2026-11-27 12:13:27Z", "2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
                     "2026-11-27T24:00:00Z", "garbage", "", "2026-11-27T12:13:27.Z"]
        // Random instants of 1970–2100 at millisecond precision, as S3 writes them.
        var rng = SystemRandomNumberGenerator()
        let writer = ISO8601DateFormatter()
        writer.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for _ in 0..<2000 {
            texts.append(writer.string(from: Date(timeIntervalSince1970: Double(Int64.random(in: 0..<4_102_444_800_000, using: &rng)) / 1000)))
        }
        for text in texts {
            let ours = HTTPDates.parseISO(text), theirs = HTTPDates.formatterISO(text)
            #expect(ours.map { ($0.timeIntervalSince1970 * 1000).rounded() } == theirs.map { ($0.timeIntervalSince1970 * 1000).rounded() }, "\(text)")
        }
    }

    @Test func lastModifiedHeaders_readAsTheHTTPFormatterReadsThem() {
        var texts = ["Fri, 27 Nov 2026 12:13:27 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Thu, 29 Feb 2024 23:59:59 GMT",
                     // Not the fast path's (a wrong weekday, other zones, other spellings): the formatter decides.
                     "Mon, 27 Nov 2026 12:13:27 GMT", "Fri, 27 Nov 2026 12:13:27 UTC", "Friday, 27-Nov-26 12:13:27 GMT",
                     "Fri, 27 Nov 2026 12:13:27 +0000", "Fri, 31 Nov 2026 12:13:27 GMT", "", "nonsense"]
        let writer = DateFormatter()
        writer.locale = Locale(identifier: "en_US_POSIX")
        writer.timeZone = TimeZone(identifier: "GMT")
        writer.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2000 { texts.append(writer.string(from: Date(timeIntervalSince1970: Double(Int64.random(in: 0..<4_102_444_800, using: &rng))))) }
        for text in texts {
            #expect(HTTPDates.parseHTTP(text) == HTTPDates.formatterHTTP(text), "\(text)")
        }
    }
}
