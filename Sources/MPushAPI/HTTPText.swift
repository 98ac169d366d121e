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
        if value < 0 { out.append(0x2D) }
        append(UInt64(value.magnitude), width: width, to: &out)
    }

    /// `value` in decimal, left-padded with zeros to `width` digits (at most 20), its digits
    /// written from the right into a buffer on the stack: through `String(value)`, each
    /// number of an access-log line or a count's answer was a String made and appended.
    static func append(_ value: UInt64, width: Int, to out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var v = value, at = 20
            repeat {
                at -= 1
                digits[at] = 0x30 + UInt8(v % 10)
                v /= 10
            } while v > 0
            while 20 - at < width && at > 0 { at -= 1; digits[at] = 0x30 }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[at..<20]))
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

extension Array where Element == UInt8 {
    /// Appends the bytes of a literal (a `String.UTF8View` appended was a generic copy, ~150
    /// instructions for a few bytes).
    mutating func append(literal: StaticString) {
        append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }
}

enum ASCIIText {
    /// Whether `bytes` spell `word` (lowercase ASCII) with its letters in any case.
    static func equalsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ word: StaticString) -> Bool {
        guard bytes.count == word.utf8CodeUnitCount else { return false }
        for i in 0..<bytes.count {
            let a = bytes[i]
            guard (a >= 0x41 && a <= 0x5A ? a | 0x20 : a) == word.utf8Start[i] else { return false }
        }
        return true
    }
}
