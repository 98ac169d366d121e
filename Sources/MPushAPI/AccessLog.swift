import Foundation
import HTTPServer

/// One line per request:
/// `2025-11-30T02:10:11.123Z 127.0.0.1 "POST /api/register" 200 17 1.234ms route=/api/register key=3f2a…`
enum AccessLog {
    static func line(_ c: HTTPServer.Completion) -> String {
        var parts = [timestamp(), c.remoteAddress, "\"\(c.method) \(sanitize(c.path))\"",
                     c.completedNormally ? String(c.status) : "\(c.status)!",
                     String(c.responseBytes), String(format: "%.3fms", c.duration * 1000)]
        parts.append("route=\(c.route ?? "-")")
        parts.append("key=\(c.principal ?? "-")")
        return parts.joined(separator: " ")
    }

    /// Writes to standard error in one `write` so lines from threads never interleave.
    static func toStandardError(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(2, raw.baseAddress! + offset, raw.count - offset)
                if n <= 0 { if errno == EINTR { continue }; return }
                offset += n
            }
        }
    }

    static func sanitize(_ path: String) -> String {
        let limited = path.count > 200 ? String(path.prefix(200)) + "…" : path
        return String(limited.unicodeScalars.map { $0.value < 0x20 || $0 == "\"" || $0.value == 0x7F ? "?" : Character($0) })
    }

    static func timestamp() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        var t = time_t(tv.tv_sec)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, Int(tv.tv_usec / 1000))
    }
}
