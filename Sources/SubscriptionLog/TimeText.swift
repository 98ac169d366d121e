/// Times written by people (command-line options), read strictly into
/// milliseconds since 1970 — the unit of every log timestamp.
///
/// Accepted, and nothing else (no partial parse, no trailing text):
///
/// - milliseconds since 1970 as a bare integer, between 2000-01-01 and
///   2200-01-01 (`Limits.rejectedAtRange`, the rule the `token-rejected` `at`
///   field follows). Seconds since 1970 (10 digits today) would read as a time
///   in January 1970; they are refused with the milliseconds they probably meant;
/// - a date, `2026-03-01`: midnight UTC;
/// - a date and time with seconds and a zone (RFC 3339):
///   `2026-03-01T12:00:00Z`, `2026-03-01T12:00:00.250Z`,
///   `2026-03-01T13:00:00+01:00` (or `+0100`). Fractions finer than a
///   millisecond are cut to the millisecond (a log time is never finer).
///
/// A time without a zone, without seconds, or with a space for the `T` is
/// refused rather than guessed at (local time or UTC?). Dates and times are held
/// to 2000…2200 as bare numbers are, so every form means the same range.
public enum TimeText {
    /// The accepted forms, for error messages and help.
    public static let forms = "milliseconds since 1970, within 2000…2200 (1764547200000), a date (2026-03-01, midnight UTC) "
        + "or a date and time with seconds and a zone (2026-03-01T12:00:00Z, 2026-03-01T12:00:00.250+01:00)"

    /// Bare integers must fall in this range to count as milliseconds.
    public static let millisecondRange = Limits.rejectedAtRange

    /// `text` in milliseconds since 1970, or why it is not one of the accepted forms.
    public static func milliseconds(_ text: String) throws(TimeTextError) -> Int64 {
        let b = Array(text.utf8)
        guard !b.isEmpty else { throw TimeTextError("it is empty") }
        if b.allSatisfy(isDigit) { return try integer(text) }
        if b[0] == UInt8(ascii: "-") || b[0] == UInt8(ascii: "+"), b.count > 1, b.dropFirst().allSatisfy(isDigit) {
            throw TimeTextError("a signed number is not a time")
        }
        // More digits than a year has, then something else: a number with trailing text.
        let digits = b.prefix(while: isDigit)
        if digits.count > 4 {
            throw TimeTextError("unexpected '\(String(decoding: b[digits.count...], as: UTF8.self))' after the number "
                + String(decoding: digits, as: UTF8.self))
        }
        let ms = try iso(b)
        // The range bare numbers are held to: a date or time is no less a time.
        guard millisecondRange.contains(ms) else {
            throw TimeTextError("\(iso(ms)) is not between 2000-01-01 and 2200-01-01, the range every time given here is held to")
        }
        return ms
    }

    static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }

    private static func integer(_ text: String) throws(TimeTextError) -> Int64 {
        guard let n = Int64(text) else { throw TimeTextError("the number is too large for milliseconds since 1970") }
        if millisecondRange.contains(n) { return n }
        let (asMilliseconds, overflow) = n.multipliedReportingOverflow(by: 1000)
        if !overflow, millisecondRange.contains(asMilliseconds) {
            throw TimeTextError("\(n) looks like seconds since 1970 (\(iso(asMilliseconds))); a bare number is read as "
                + "milliseconds, so give \(asMilliseconds)")
        }
        throw TimeTextError("a bare number is milliseconds since 1970 and must lie between 2000-01-01 (\(millisecondRange.lowerBound)) "
            + "and 2200-01-01 (\(millisecondRange.upperBound))")
    }

    /// Reads ISO-8601 / RFC 3339 (see the type's note).
    private static func iso(_ b: [UInt8]) throws(TimeTextError) -> Int64 {
        var i = 0
        func number(_ digits: Int, _ what: String) throws(TimeTextError) -> Int {
            guard i + digits <= b.count, b[i..<i + digits].allSatisfy(isDigit) else {
                throw TimeTextError("expected \(digits) digits of the \(what) at character \(i + 1)")
            }
            var n = 0
            for c in b[i..<i + digits] { n = n * 10 + Int(c - 0x30) }
            i += digits
            return n
        }
        func expect(_ c: Character, after what: String) throws(TimeTextError) {
            guard i < b.count, b[i] == c.asciiValue! else {
                throw TimeTextError("expected '\(c)' after the \(what) at character \(i + 1)")
            }
            i += 1
        }
        func rest() -> String { String(decoding: b[i...], as: UTF8.self) }

        let year = try number(4, "year")
        try expect("-", after: "year")
        let month = try number(2, "month")
        try expect("-", after: "month")
        let day = try number(2, "day")
        guard (1...12).contains(month) else { throw TimeTextError("month \(month) is not 01…12") }
        guard (1...daysIn(month, of: year)).contains(day) else {
            throw TimeTextError("day \(day) does not exist in \(padded(4, year))-\(padded(2, month))")
        }
        let days = daysSince1970(year: year, month: month, day: day)
        if i == b.count { return Int64(days) * 86_400_000 }

        guard b[i] == UInt8(ascii: "T") || b[i] == UInt8(ascii: "t") else {
            if b[i] == UInt8(ascii: " ") {
                throw TimeTextError("separate the date and the time with T, not a space (2026-03-01T12:00:00Z)")
            }
            throw TimeTextError("unexpected '\(rest())' after the date")
        }
        i += 1
        let hour = try number(2, "hour")
        try expect(":", after: "hour")
        let minute = try number(2, "minute")
        guard i < b.count, b[i] == UInt8(ascii: ":") else {
            throw TimeTextError("give the seconds too (HH:MM:SS) at character \(i + 1)")
        }
        i += 1
        let second = try number(2, "second")
        guard hour < 24 else { throw TimeTextError("hour \(hour) is not 00…23") }
        guard minute < 60 else { throw TimeTextError("minute \(minute) is not 00…59") }
        guard second < 60 else { throw TimeTextError("second \(second) is not 00…59") }
        var millisecond = 0
        if i < b.count, b[i] == UInt8(ascii: ".") || b[i] == UInt8(ascii: ",") {
            i += 1
            let start = i
            while i < b.count, isDigit(b[i]) { i += 1 }
            let digits = b[start..<i]
            guard (1...9).contains(digits.count) else { throw TimeTextError("expected 1 to 9 digits of a fraction of a second at character \(start + 1)") }
            for (k, c) in digits.prefix(3).enumerated() { millisecond += Int(c - 0x30) * [100, 10, 1][k] }
        }
        guard i < b.count else {
            throw TimeTextError("give a zone: Z for UTC or an offset like +01:00 (a time without one could be local or UTC)")
        }
        var offsetMinutes = 0
        switch b[i] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            i += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            let h = try number(2, "zone's hours")
            if i < b.count, b[i] == UInt8(ascii: ":") { i += 1 }
            let m = try number(2, "zone's minutes")
            guard h < 24, m < 60 else {
                throw TimeTextError("the zone offset \(sign < 0 ? "-" : "+")\(padded(2, h)):\(padded(2, m)) is not a valid offset "
                    + "(hours 00…23, minutes 00…59)")
            }
            offsetMinutes = sign * (h * 60 + m)
        default:
            throw TimeTextError("unexpected '\(rest())' where the zone (Z or an offset like +01:00) belongs")
        }
        guard i == b.count else { throw TimeTextError("unexpected '\(rest())' after the time") }
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        return seconds * 1000 + Int64(millisecond)
    }

    static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    static func daysIn(_ month: Int, of year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days from 1970-01-01 to the date (proleptic Gregorian; H. Hinnant's `days_from_civil`).
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// `ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
    public static func iso(_ ms: Int64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        appendISO(ms, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends `ms` as `iso` spells it, without building a `String`: the
    /// listings of `history` write a time on each of millions of lines. The
    /// digits are the milliseconds' own (no floating point, so nothing rounds).
    public static func appendISO(_ ms: Int64, to bytes: inout [UInt8]) {
        var days = ms >= 0 ? ms / 86_400_000 : (ms - 86_399_999) / 86_400_000
        let inDay = Int(ms - days * 86_400_000)
        // H. Hinnant's `civil_from_days`.
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let doe = days - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = Int(doy - (153 * mp + 2) / 5 + 1)
        let m = Int(mp < 10 ? mp + 3 : mp - 9)
        let y = Int(yoe + era * 400) + (m <= 2 ? 1 : 0)
        let s = inDay / 1000
        if (0...9999).contains(y) { digits(y, 4, &bytes) } else { bytes.append(contentsOf: "\(y)".utf8) }
        bytes.append(UInt8(ascii: "-")); digits(m, 2, &bytes)
        bytes.append(UInt8(ascii: "-")); digits(d, 2, &bytes)
        bytes.append(UInt8(ascii: "T")); digits(s / 3600, 2, &bytes)
        bytes.append(UInt8(ascii: ":")); digits(s / 60 % 60, 2, &bytes)
        bytes.append(UInt8(ascii: ":")); digits(s % 60, 2, &bytes)
        bytes.append(UInt8(ascii: ".")); digits(inDay % 1000, 3, &bytes)
        bytes.append(UInt8(ascii: "Z"))
    }

    /// The last `width` decimal digits of `n` (non-negative), leading zeros included.
    private static func digits(_ n: Int, _ width: Int, _ bytes: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        var n = n
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(n / divisor % 10))
            n %= divisor
            divisor /= 10
        }
    }
}

/// Why a text is not a time (see `TimeText`).
public struct TimeTextError: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// `n` in decimal, with leading zeros to `width` digits.
private func padded(_ width: Int, _ n: Int) -> String {
    let digits = "\(n)"
    return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
}
