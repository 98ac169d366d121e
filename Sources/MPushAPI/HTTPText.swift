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
        let digits = String(value.magnitude).utf8
        if value < 0 { out.append(0x2D) }
        for _ in digits.count..<max(digits.count, width) { out.append(0x30) }
        out.append(contentsOf: digits)
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
