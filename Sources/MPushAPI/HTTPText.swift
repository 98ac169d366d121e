/// Small text helpers for request handling that avoid Foundation's general
/// (and, per request, costly) `trimmingCharacters` and `String(format:)`.
extension StringProtocol {
    /// Without leading and trailing spaces and tabs (HTTP's optional whitespace).
    var trimmingHTTPSpace: String {
        let bytes = Array(utf8)
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }),
              let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 }) else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}

enum DecimalText {
    /// `value` in decimal, left-padded with zeros to `width` digits.
    static func append(_ value: Int, width: Int, to out: inout [UInt8]) {
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var v = value.magnitude
        var n = 0
        withUnsafeMutableBytes(of: &digits) { d in
            repeat {
                d[n] = UInt8(truncatingIfNeeded: v % 10) + 0x30
                v /= 10
                n += 1
            } while v > 0 && n < d.count
            if value < 0 { out.append(0x2D) }
            for _ in n..<max(n, width) { out.append(0x30) }
            for i in stride(from: n - 1, through: 0, by: -1) { out.append(d[i]) }
        }
    }

    /// `value` with exactly `decimals` digits after the point, rounded.
    static func append(_ value: Double, decimals: Int, to out: inout [UInt8]) {
        guard value.isFinite else { out.append(contentsOf: Array("\(value)".utf8)); return }
        var scale = 1
        for _ in 0..<decimals { scale *= 10 }
        let scaled = Int((abs(value) * Double(scale)).rounded())
        if value < 0 && scaled > 0 { out.append(0x2D) }
        append(scaled / scale, width: 1, to: &out)
        if decimals > 0 {
            out.append(0x2E)
            append(scaled % scale, width: decimals, to: &out)
        }
    }
}
