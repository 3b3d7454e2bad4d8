import Foundation

/// The two date forms S3 answers with, read without a formatter in the common case: a listing's `LastModified`
/// (ISO 8601, `2026-11-27T12:13:27.000Z`) and a `Last-Modified` header (RFC 7231, `Fri, 27 Nov 2026 12:13:27 GMT`).
/// Foundation's formatters build an ICU formatter on every call: reading the dates of a 1,000-object listing, or
/// of each GET of a catch-up, was most of the client's CPU time. Any other spelling goes to the formatters.
enum HTTPDates {
    /// A listing's `LastModified`: `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, else what `ISO8601DateFormatter` reads.
    static func parseISO(_ text: String) -> Date? { fastISO(Array(text.utf8)) ?? formatterISO(text) }

    /// A `Last-Modified` header: `EEE, dd MMM yyyy HH:mm:ss GMT`, else what a `DateFormatter` of that pattern reads.
    static func parseHTTP(_ text: String) -> Date? { fastHTTP(Array(text.utf8)) ?? formatterHTTP(text) }

    /// What `ISO8601DateFormatter` reads in `text`, with fractional seconds or without (the fallback, and what
    /// the fast path must agree with).
    static func formatterISO(_ text: String) -> Date? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: text)
    }

    /// What a `DateFormatter` of the HTTP-date pattern reads in `text` (the fallback, and what the fast path must
    /// agree with).
    static func formatterHTTP(_ text: String) -> Date? {
        posixFormatter("EEE, dd MMM yyyy HH:mm:ss zzz", timeZone: "GMT").date(from: text)
    }

    /// A `DateFormatter` of a fixed pattern in `en_US_POSIX` (month and weekday names in English whatever the
    /// device's locale) and the time zone `timeZone`.
    static func posixFormatter(_ pattern: String, timeZone: String) -> DateFormatter {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: timeZone)
        f.dateFormat = pattern
        return f
    }

    private static func fastISO(_ b: [UInt8]) -> Date? {
        guard b.count >= 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"), b.last == UInt8(ascii: "Z"),
              let year = digits(b, 0, 4), let month = digits(b, 5, 2), let day = digits(b, 8, 2),
              let hour = digits(b, 11, 2), let minute = digits(b, 14, 2), let second = digits(b, 17, 2) else { return nil }
        var fraction = 0.0
        if b.count > 20 {
            // `.` and 1 to 9 digits before the `Z`.
            guard b[19] == UInt8(ascii: "."), b.count - 21 >= 1, b.count - 21 <= 9, let f = digits(b, 20, b.count - 21) else { return nil }
            fraction = Double(f) / pow(10, Double(b.count - 21))
        }
        return date(year: year, month: month, day: day, hour: hour, minute: minute, second: second, fraction: fraction)
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map { Array($0.utf8) }
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].map { Array($0.utf8) }

    private static func fastHTTP(_ b: [UInt8]) -> Date? {
        // "Fri, 27 Nov 2026 12:13:27 GMT": 29 bytes, fixed positions.
        guard b.count == 29, b[3] == UInt8(ascii: ","), b[4] == 0x20, b[7] == 0x20, b[11] == 0x20, b[16] == 0x20,
              b[19] == UInt8(ascii: ":"), b[22] == UInt8(ascii: ":"), b[25] == 0x20, Array(b[26...]) == Array("GMT".utf8),
              let weekday = weekdays.firstIndex(of: Array(b[0..<3])), let monthIndex = months.firstIndex(of: Array(b[8..<11])),
              let day = digits(b, 5, 2), let year = digits(b, 12, 4), let hour = digits(b, 17, 2), let minute = digits(b, 20, 2),
              let second = digits(b, 23, 2),
              let result = date(year: year, month: monthIndex + 1, day: day, hour: hour, minute: minute, second: second, fraction: 0) else { return nil }
        // The weekday must be the date's (1970-01-01 was a Thursday); a wrong one goes to the formatter.
        let days = Int((result.timeIntervalSince1970 / 86_400).rounded(.down))
        guard ((days % 7 + 7 + 4) % 7) == weekday else { return nil }
        return result
    }

    private static func digits(_ b: [UInt8], _ start: Int, _ count: Int) -> Int? {
        var value = 0
        for i in start..<(start + count) {
            let c = b[i]
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(c - UInt8(ascii: "0"))
        }
        return value
    }

    /// The instant of a UTC civil date and time, or nil when a field is out of range (the formatters decide those).
    private static func date(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, fraction: Double) -> Date? {
        guard (1...9999).contains(year), (1...12).contains(month), (0...23).contains(hour), (0...59).contains(minute),
              (0...59).contains(second) else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
        guard (1...monthDays).contains(day) else { return nil }
        // Days from 1970-01-01 to the civil date (the proleptic Gregorian calendar).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = Double(days * 86_400 + hour * 3600 + minute * 60 + second)
        return Date(timeIntervalSince1970: seconds + fraction)
    }
}
