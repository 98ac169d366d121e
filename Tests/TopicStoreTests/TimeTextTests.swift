import Foundation
import SubscriptionLog
import Testing

/// `TimeText`: the strict reading of times given on the command line.
@Suite struct TimeTextTests {
    func ms(_ text: String) -> Int64? { try? TimeText.milliseconds(text) }
    func reason(_ text: String) -> String {
        do { _ = try TimeText.milliseconds(text); return "accepted" } catch { return error.reason }
    }

    @Test func acceptedForms() {
        // Milliseconds, inside 2000…2200.
        #expect(ms("1796064534837") == 1_796_064_534_837)
        #expect(ms("946684800000") == 946_684_800_000)       // 2000-01-01, the lower bound
        #expect(ms("7258118400000") == 7_258_118_400_000)     // 2200-01-01, the upper bound
        #expect(ms("0001796064534837") == 1_796_064_534_837)  // leading zeros are digits
        // A date: midnight UTC.
        #expect(ms("2026-11-30") == 1_795_996_800_000)
        #expect(ms("2000-01-01") == 946_684_800_000)         // the range bare numbers have
        #expect(ms("2200-01-01T00:00:00Z") == 7_258_118_400_000)
        #expect(ms("2200-01-01T01:00:00+01:00") == 7_258_118_400_000)
        #expect(ms("2000-02-29") == 951_782_400_000)          // a leap day
        #expect(ms("2026-03-01") == 1_772_323_200_000)
        // Date and time with seconds and a zone.
        #expect(ms("2026-03-01T12:00:00Z") == 1_772_366_400_000)
        #expect(ms("2026-03-01t12:00:00z") == 1_772_366_400_000)
        #expect(ms("2026-03-01T12:00:00.250Z") == 1_772_366_400_250)
        #expect(ms("2026-03-01T12:00:00,250Z") == 1_772_366_400_250)
        #expect(ms("2026-03-01T12:00:00.2Z") == 1_772_366_400_200)
        #expect(ms("2026-03-01T12:00:00.123456789Z") == 1_772_366_400_123)  // cut to the millisecond
        #expect(ms("2026-03-01T13:00:00+01:00") == 1_772_366_400_000)
        #expect(ms("2026-03-01T13:00:00+0100") == 1_772_366_400_000)
        #expect(ms("2026-03-01T10:30:00-01:30") == 1_772_366_400_000)
        #expect(ms("2026-03-01T00:30:00+01:00") == ms("2026-02-28T23:30:00Z"))
        #expect(ms("2024-02-29T23:59:59.999Z") == 1_709_251_199_999)
    }

    @Test func agreesWithFoundationOnManyTimes() {
        var random = SeededRandom(seed: 7)
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for _ in 0..<2000 {
            let t = Int64(random.int(200 * 365)) * 86_400_000 + Int64(random.int(86_400_000)) + 946_684_800_000
            let text = f.string(from: Date(timeIntervalSince1970: Double(t) / 1000))
            #expect(ms(text) == t, "\(text)")
            #expect(TimeText.iso(t) == text)
        }
        #expect(TimeText.iso(0) == "1970-01-01T00:00:00.000Z")
    }

    @Test func refusedForms() {
        let cases: [(String, String)] = [
            ("", "empty"),
            ("2026-11-30 23:59:59", "T, not a space"),
            ("2026-11-30T23:59", "give the seconds too"),
            ("2026-11-30T23", "expected ':' after the hour"),
            ("2026-11-30T", "expected 2 digits of the hour"),
            ("2026-11-30garbage", "unexpected 'garbage' after the date"),
            ("2026-11-30T23:59:59", "give a zone"),
            ("2026-11-30T23:59:59.5", "give a zone"),
            ("2026-11-30T23:59:59Zjunk", "unexpected 'junk' after the time"),
            ("2026-11-30T23:59:59+01:00x", "unexpected 'x' after the time"),
            ("2026-11-30T23:59:59 Z", "unexpected ' Z' where the zone"),
            ("2026-11-30T23:59:59+1", "expected 2 digits of the zone's hours"),
            ("2026-11-30T23:59:59+01", "expected 2 digits of the zone's minutes"),
            ("2026-11-30T23:59:59+24:00", "not a valid offset"),
            ("2026-11-30T23:59:59.Z", "fraction"),
            ("2026-11-30T23:59:59.1234567890Z", "fraction"),
            ("2026-02-29", "day 29 does not exist in 2026-02"),
            ("2026-04-31", "day 31 does not exist"),
            ("2026-00-10", "month 0 is not"),
            ("2026-13-01", "month 13 is not"),
            ("2026-11-00", "day 0 does not exist"),
            ("2026-11-30T24:00:00Z", "hour 24"),
            ("2026-11-30T23:60:00Z", "minute 60"),
            ("2026-11-30T23:59:60Z", "second 60"),
            ("26-11-30", "expected 4 digits of the year"),
            ("2026-1-30", "expected 2 digits of the month"),
            ("2026/11/30", "expected '-' after the year"),
            ("20261130", "between 2000-01-01"),          // a basic-format date is a number
            ("1796064534", "looks like seconds since 1970 (2026-11-30T"),
            ("0", "between 2000-01-01"),
            ("946684799999", "between 2000-01-01"),
            ("7258118400001", "between 2000-01-01"),
            ("99999999999999999999", "too large"),
            ("-5", "signed number"),
            ("+1796064534837", "signed number"),
            ("1796064534837ms", "unexpected 'ms' after the number 1796064534837"),
            ("1772366400000x", "unexpected 'x' after the number 1772366400000"),
            ("2026-11-30T23:59:59+25:00", "the zone offset +25:00 is not a valid offset"),
            ("2026-11-30T23:59:59-07:60", "the zone offset -07:60 is not a valid offset"),
            // Dates and times are held to the range bare numbers are.
            ("1970-01-01", "not between 2000-01-01 and 2200-01-01"),
            ("1999-12-31T23:59:59.999Z", "not between 2000-01-01 and 2200-01-01"),
            ("2200-01-01T00:00:00.001Z", "not between 2000-01-01 and 2200-01-01"),
            ("9999-12-31", "not between 2000-01-01 and 2200-01-01"),
            (" 1796064534837", "expected 4 digits of the year"),
            ("yesterday", "expected 4 digits of the year"),
            ("２０２６-11-30", "expected 4 digits of the year"),
        ]
        for (text, expected) in cases {
            let why = reason(text)
            #expect(why.contains(expected), "'\(text)': \(why)")
        }
        #expect(reason("1796064534").contains("give 1796064534000"))
    }
}
