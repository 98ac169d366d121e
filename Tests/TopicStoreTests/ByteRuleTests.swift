import Glibc
@testable import HTTPServer
@testable import MPushAPI
@testable import SubscriptionLog
import Testing

/// The byte-level work a count request goes through: a topic code's charset
/// from constant bit words, the usual Accept header decided without its
/// general parse, the client's IPv4 address spelled by hand. Each must answer
/// as what it stands for.
@Suite struct ByteRuleTests {
    /// Every byte, alone and inside a code, is allowed exactly when `Limits` allows it.
    @Test func topicCodeBitsAreTheCharsetOfLimits() {
        for b in 0...255 {
            let byte = UInt8(b)
            let expected = Validation.isAlphanumeric(byte) || Limits.topicCodePunctuation.contains(byte)
            for code in [[byte], [0x61, byte], [byte, 0x31, 0x32], Array("user.12".utf8) + [byte]] {
                #expect(code.withUnsafeBytes { ByteClass.areTopicCode($0) } == expected, "byte \(b) in \(code)")
            }
        }
    }

    /// `isValidTopicCode` answers as `check(topicCode:)`: length, charset, any byte outside it.
    @Test func validityIsTheChecksVerdict() {
        let codes = ["", "a", "news", "user.12", "~@/+=#._-", "a b", "café", "news,sport", "x\u{0}", "ÿ", "\u{7F}",
                     String(repeating: "a", count: Limits.topicCodeLength.upperBound),
                     String(repeating: "a", count: Limits.topicCodeLength.upperBound + 1), "(x)", "a:b", "\"q\""]
        for code in codes {
            var errors: [ValidationError] = []
            Validation.check(topicCode: code, field: "code", into: &errors)
            #expect(Validation.isValidTopicCode(code) == errors.isEmpty, "\(code)")
        }
    }

    /// A single Accept value that is `application/json` (any case) or `*/*` is taken
    /// without the parse, and the parse accepts it too at every route; anything
    /// else goes to the parse.
    @Test func thePlainAcceptValuesAreOnesTheParseAccepts() {
        let plain = ["application/json", "APPLICATION/JSON", "Application/Json", "*/*"]
        let other = ["application/jsonx", "application/jso", " application/json", "application/json ", "*/ *", "**/",
                     "text/html", "application/json;q=0", "application/*", "", "application/jsoN;charset=utf-8",
                     "applicationXjson", "application/json\u{0}"]
        for value in plain {
            #expect(MPushService.isPlainJSONOrAny(value), "\(value)")
            for route in Route.allCases { #expect(MPushService.acceptsJSON([value], route: route), "\(value) at \(route)") }
        }
        for value in other { #expect(!MPushService.isPlainJSONOrAny(value), "\(value)") }
    }

    /// Every IPv4 address is spelled as `inet_ntop` spells it: the edges of each
    /// byte's digit counts in every position, and random ones.
    @Test func anIPv4AddressIsSpelledAsInetNtopSpellsIt() {
        let edges: [UInt32] = [0, 1, 9, 10, 99, 100, 199, 200, 255]
        var addresses: [UInt32] = []
        for a in edges { for b in edges { addresses.append(a << 24 | b << 16 | a << 8 | b); addresses.append(b << 24 | a) } }
        var rng = SystemRandomNumberGenerator()
        addresses += (0..<2000).map { _ in UInt32.random(in: .min ... .max, using: &rng) }
        for address in addresses {
            var addr = in_addr(s_addr: address.bigEndian)
            var buffer = [CChar](repeating: 0, count: 16)
            #expect(inet_ntop(AF_INET, &addr, &buffer, 16) != nil)
            let expected = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            #expect(ServerCore.dottedQuad(address) == expected)
        }
    }

    /// `RequestBody.isJSONMediaType` says yes exactly where the general reading of
    /// Content-Type (split at `;`, trimmed, lowercased) finds `application/json`.
    @Test func theJSONMediaTypeIsToldAsTheGeneralParseTellsIt() {
        let values = ["application/json", "APPLICATION/JSON", "application/json; charset=utf-8", "Application/Json;charset=UTF-8",
                      " application/json ", "\tapplication/json\t;", "application/json;", ";application/json", "application/jsonx",
                      "application/json x", "text/json", "application/problem+json", "", ";", "application/jso", "applİcation/json",
                      "application/json\u{0}", "application /json", "application/json ;q=1", "\u{212A}"]
        for value in values {
            let media = value.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first
                .map { $0.trimmingHTTPSpace.lowercased() } ?? ""
            #expect(RequestBody.isJSONMediaType(value) == (media == "application/json"), "\(value)")
        }
    }

    /// Numbers spelled from a digit buffer: as `String(value)` spells them, zero-padded to the width.
    @Test func decimalsAreSpelledAsStringSpellsThem() {
        var values: [UInt64] = [0, .max, UInt64(Int64.max), UInt64(Int64.max) + 1]
        var p: UInt64 = 1
        for _ in 0..<19 { values += [p - 1, p, p + 1]; p *= 10 }
        for value in values {
            for width in [1, 2, 3, 4, 20, 25] {
                var out: [UInt8] = []
                DecimalText.append(value, width: width, to: &out)
                let digits = String(value)
                let expected = String(repeating: "0", count: max(0, min(width, 20) - digits.count)) + digits
                #expect(String(decoding: out, as: UTF8.self) == expected, "\(value) width \(width)")
            }
        }
        for value in [Int.min, -1, -10, 0, 7, Int.max] {
            var out: [UInt8] = []
            DecimalText.append(value, width: 1, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == String(value))
        }
    }

    /// The access log's timestamp, its date computed from the day number, is what
    /// `gmtime_r` gives: every edge of a day, month, leap year and century, and random times.
    @Test func theTimestampIsGmtimes() {
        func reference(_ seconds: Int64, _ ms: Int) -> String {
            var t = time_t(seconds)
            var parts = tm()
            gmtime_r(&t, &parts)
            func pad(_ n: Int32, _ w: Int) -> String { String(repeating: "0", count: max(0, w - String(n).count)) + String(n) }
            return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
                + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(ms), 3))Z"
        }
        var times: [Int64] = [0, -1, -86_400, -86_401, 59, 60, 3_599, 3_600, 86_399, 86_400,
                              951_782_400, 951_868_799, 951_868_800,        // 2000-02-29, 2000-03-01
                              4_107_456_000, 4_107_542_399, 4_107_542_400,  // 2100-02-28, 2100-03-01
                              1_709_164_800, 1_764_100_807, 253_402_300_799]  // 2024-02-29, …, 9999-12-31T23:59:59
        var rng = SystemRandomNumberGenerator()
        times += (0..<5_000).map { _ in Int64.random(in: -2_208_988_800...253_402_300_799, using: &rng) }
        for seconds in times {
            let ms = Int.random(in: 0...999, using: &rng)
            var out: [UInt8] = []
            AccessLog.appendTimestamp(seconds: seconds, milliseconds: ms, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == reference(seconds, ms), "\(seconds)")
        }
    }
}
