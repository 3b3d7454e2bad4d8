import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A hybrid logical clock value: milliseconds of wall time in the high 48 bits, a counter in the low 16.
///
/// It follows wall time when clocks agree and still moves forward past any clock it has seen,
/// so an edit made after seeing a remote edit always carries a larger value.
public struct HLC: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The packed 64-bit value stored in diffs and databases.
    public let rawValue: Int64

    /// Wraps a packed value.
    public init(rawValue: Int64) { self.rawValue = rawValue }

    /// Packs wall milliseconds and a counter.
    public init(milliseconds: Int64, counter: Int) {
        rawValue = milliseconds << 16 | Int64(counter & 0xFFFF)
    }

    /// The zero clock: older than every real edit (used for rows that existed before tracking).
    public static let zero = HLC(rawValue: 0)

    /// Wall-clock milliseconds since the Unix epoch.
    public var milliseconds: Int64 { rawValue >> 16 }
    /// Counter within one millisecond.
    public var counter: Int { Int(rawValue & 0xFFFF) }

    /// Current wall time as milliseconds since the Unix epoch.
    public static func wallMilliseconds(_ date: Date = Date()) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// The next local clock value after `self`, given the current wall time.
    public func tick(wall: Int64 = HLC.wallMilliseconds()) -> HLC {
        wall > milliseconds ? HLC(milliseconds: wall, counter: 0) : HLC(rawValue: rawValue + 1)
    }

    public static func < (a: HLC, b: HLC) -> Bool { a.rawValue < b.rawValue }

    public var description: String {
        let date = Date(timeIntervalSince1970: TimeInterval(milliseconds) / 1000)
        return "\(ISO8601.format(date, fractional: true))#\(counter)"
    }

    public init(from decoder: Decoder) throws { rawValue = try decoder.singleValueContainer().decode(Int64.self) }
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}

/// A change's position in the merge order: hybrid logical clock, then site id as the tie-break.
public struct Clock: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// The hybrid logical clock value.
    public var hlc: HLC
    /// The site (device database) that made the change.
    public var site: String

    /// Makes a clock.
    public init(hlc: HLC, site: String) {
        self.hlc = hlc
        self.site = site
    }

    /// Older than any real change: rows that existed before tracking began.
    public static let zero = Clock(hlc: .zero, site: "")

    public static func < (a: Clock, b: Clock) -> Bool {
        a.hlc != b.hlc ? a.hlc < b.hlc : a.site.utf8.lexicographicallyPrecedes(b.site.utf8)
    }

    public var description: String { "\(hlc)@\(site)" }
}

/// ISO-8601 formatting in UTC, shared by the writer, inspect output and the CLI.
public enum ISO8601 {
    /// Formats a date as `2026-01-02T03:04:05Z`, or `2026-01-02T03:04:05.678Z` with milliseconds.
    public static func format(_ date: Date, fractional: Bool = false) -> String {
        // Nearest millisecond, so a parsed time formats back to the same text whatever the float error.
        let ms = Int64((date.timeIntervalSince1970 * 1000).rounded())
        var seconds = time_t(ms >= 0 ? ms / 1000 : (ms - 999) / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ v: Int32, _ n: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: Swift.max(0, n - s.count)) + s
        }
        var text = pad(parts.tm_year + 1900, 4) + "-" + pad(parts.tm_mon + 1, 2) + "-" + pad(parts.tm_mday, 2)
            + "T" + pad(parts.tm_hour, 2) + ":" + pad(parts.tm_min, 2) + ":" + pad(parts.tm_sec, 2)
        if fractional { text += "." + pad(Int32(((ms % 1000) + 1000) % 1000), 3) }
        return text + "Z"
    }

    /// Parses `YYYY-MM-DDTHH:MM:SSZ` or `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC only).
    public static func parse(_ text: String) -> Date? {
        let c = Array(text.utf8)
        guard c.count == 20 || c.count == 24, c.last == UInt8(ascii: "Z"),
              c[4] == UInt8(ascii: "-"), c[7] == UInt8(ascii: "-"), c[10] == UInt8(ascii: "T"),
              c[13] == UInt8(ascii: ":"), c[16] == UInt8(ascii: ":") else { return nil }
        func number(_ from: Int, _ length: Int) -> Int32? {
            var v: Int32 = 0
            for i in from..<(from + length) {
                guard c[i] >= 48, c[i] <= 57 else { return nil }
                v = v * 10 + Int32(c[i] - 48)
            }
            return v
        }
        guard let y = number(0, 4), let mo = number(5, 2), let d = number(8, 2), let h = number(11, 2),
              let mi = number(14, 2), let s = number(17, 2), (1...12).contains(mo), (1...31).contains(d),
              h < 24, mi < 60, s < 61 else { return nil }
        var ms: Int32 = 0
        if c.count == 24 {
            guard c[19] == UInt8(ascii: "."), let f = number(20, 3) else { return nil }
            ms = f
        }
        var parts = tm()
        parts.tm_year = y - 1900; parts.tm_mon = mo - 1; parts.tm_mday = d
        parts.tm_hour = h; parts.tm_min = mi; parts.tm_sec = s
        let seconds = timegm(&parts)
        return Date(timeIntervalSince1970: TimeInterval(seconds) + TimeInterval(ms) / 1000)
    }
}
