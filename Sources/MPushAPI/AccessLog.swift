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
        out.append(contentsOf: " \"".utf8)
        out.append(contentsOf: c.method.utf8)
        out.append(0x20)
        out.append(contentsOf: sanitize(c.path).utf8)
        out.append(contentsOf: "\" ".utf8)
        DecimalText.append(c.status, width: 1, to: &out)
        if !c.completedNormally { out.append(0x21) }  // !
        out.append(0x20)
        DecimalText.append(c.responseBytes, width: 1, to: &out)
        out.append(0x20)
        DecimalText.append(c.duration * 1000, decimals: 3, to: &out)
        out.append(contentsOf: "ms route=".utf8)
        out.append(contentsOf: (c.route ?? "-").utf8)
        out.append(contentsOf: " key=".utf8)
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
        var t = time_t(tv.tv_sec)
        var parts = tm()
        gmtime_r(&t, &parts)
        DecimalText.append(Int(parts.tm_year) + 1900, width: 4, to: &out)
        out.append(0x2D)
        DecimalText.append(Int(parts.tm_mon) + 1, width: 2, to: &out)
        out.append(0x2D)
        DecimalText.append(Int(parts.tm_mday), width: 2, to: &out)
        out.append(0x54)  // T
        DecimalText.append(Int(parts.tm_hour), width: 2, to: &out)
        out.append(0x3A)
        DecimalText.append(Int(parts.tm_min), width: 2, to: &out)
        out.append(0x3A)
        DecimalText.append(Int(parts.tm_sec), width: 2, to: &out)
        out.append(0x2E)
        DecimalText.append(Int(tv.tv_usec / 1000), width: 3, to: &out)
        out.append(0x5A)  // Z
    }
}
