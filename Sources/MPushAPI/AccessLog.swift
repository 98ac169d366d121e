import Foundation
import HTTPServer

/// One line per request:
/// `2025-11-30T02:10:11.123Z 127.0.0.1 "POST /api/register" 200 17 1.234ms route=/api/register key=3f2a…`
enum AccessLog {
    static func line(_ c: HTTPServer.Completion) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        appendTimestamp(to: &out)
        out.append(0x20)
        out.append(contentsOf: c.remoteAddress.utf8)
        out.append(literal: " \"")
        out.append(contentsOf: c.method.utf8)
        out.append(0x20)
        out.append(contentsOf: sanitize(c.path).utf8)
        out.append(literal: "\" ")
        DecimalText.append(c.status, width: 1, to: &out)
        if !c.completedNormally { out.append(0x21) }  // !
        out.append(0x20)
        DecimalText.append(c.responseBytes, width: 1, to: &out)
        out.append(0x20)
        DecimalText.append(c.duration * 1000, decimals: 3, to: &out)
        out.append(literal: "ms route=")
        out.append(contentsOf: (c.route ?? "-").utf8)
        out.append(literal: " key=")
        out.append(contentsOf: (c.principal ?? "-").utf8)
        return String(decoding: out, as: UTF8.self)
    }

    /// Writes to standard error in one `write` so lines from threads never interleave.
    static func toStandardError(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        writeAll(bytes, to: 2)
    }

    /// Writes all of `bytes` to `fd`, retrying short writes and EINTR; gives up on an error.
    static func writeAll(_ bytes: [UInt8], to fd: Int32) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n <= 0 { if errno == EINTR { continue }; return }
                offset += n
            }
        }
    }

    static func sanitize(_ path: String) -> String {
        if path.utf8.count <= 200, path.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 }) { return path }
        let limited = path.count > 200 ? String(path.prefix(200)) + "…" : path
        return String(limited.unicodeScalars.map { $0.value < 0x20 || $0 == "\"" || $0.value == 0x7F ? "?" : Character($0) })
    }

    /// ISO 8601 UTC with milliseconds: `2025-11-30T02:10:11.123Z`.
    static func appendTimestamp(to out: inout [UInt8]) {
        var tv = timeval()
        gettimeofday(&tv, nil)
        appendTimestamp(seconds: Int64(tv.tv_sec), milliseconds: Int(tv.tv_usec / 1000), to: &out)
    }

    /// The timestamp of `seconds` since 1970 (UTC) and `milliseconds`. The date is
    /// computed from the day number (the proleptic Gregorian calendar, as `gmtime_r`
    /// has it): `gmtime_r` and seven numbers made Strings were two fifths of an
    /// access-log line.
    static func appendTimestamp(seconds: Int64, milliseconds: Int, to out: inout [UInt8]) {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let second = Int(seconds - days * 86_400)
        // Days since 1970-01-01 to a civil date (H. Hinnant's `civil_from_days`).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        DecimalText.append(Int(year), width: 4, to: &out)
        out.append(0x2D)
        DecimalText.append(Int(month), width: 2, to: &out)
        out.append(0x2D)
        DecimalText.append(Int(day), width: 2, to: &out)
        out.append(0x54)  // T
        DecimalText.append(second / 3_600, width: 2, to: &out)
        out.append(0x3A)
        DecimalText.append(second / 60 % 60, width: 2, to: &out)
        out.append(0x3A)
        DecimalText.append(second % 60, width: 2, to: &out)
        out.append(0x2E)
        DecimalText.append(milliseconds, width: 3, to: &out)
        out.append(0x5A)  // Z
    }
}
