/// Writes JSON text by hand where speed matters (token streams, exports).
public enum JSONText {
    /// `s` as a quoted JSON string, escaping what RFC 8259 requires; `forTextLines` also
    /// escapes DEL, the C1 controls and U+2028/U+2029, so the value stays on one line of
    /// text output whatever shows it.
    /// `lineSeparators` escapes U+2028/U+2029 alone (what NDJSON streams need: they are valid
    /// JSON raw, but line splitters such as Python's `str.splitlines()` cut lines at them).
    public static func quoted(_ s: String, forTextLines: Bool = false, lineSeparators: Bool = false) -> String {
        // Most strings (device ids, tokens, codes) need no escape: copied whole, not scalar by
        // scalar (that was half of `export`'s time, perf). `needsEscaping` also flags 0xE2, the
        // lead byte of U+2028/U+2029; DEL and the C1 controls matter only `forTextLines`.
        if !forTextLines {
            var s = s
            let plain = s.withUTF8 { !needsEscaping(UnsafeRawBufferPointer($0)) }
            if plain { return "\"" + s + "\"" }
        }
        var out = "\""
        out.reserveCapacity(s.utf8.count + 2)
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20
                || (forTextLines && (0x7F...0x9F).contains(scalar.value))
                || ((forTextLines || lineSeparators) && (scalar.value == 0x2028 || scalar.value == 0x2029)):
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
        return out
    }

    /// Appends `bytes` (UTF-8) as a quoted JSON string to `out`, U+2028/U+2029 escaped (one
    /// JSON value per line of NDJSON, however the reader splits lines) unless `lineSeparators`
    /// is false (`quoted`'s default, which an export's lines keep).
    public static func appendQuoted(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8], lineSeparators: Bool = true) {
        out.append(0x22)
        if !needsEscaping(bytes) {
            out.append(contentsOf: bytes)
        } else {
            out.append(contentsOf: Array(quoted(String(decoding: bytes, as: UTF8.self), lineSeparators: lineSeparators).utf8.dropFirst().dropLast()))
        }
        out.append(0x22)
    }

    /// Appends `v` in decimal, as `String(v)` spells it.
    public static func appendDecimal<T: BinaryInteger>(_ v: T, to out: inout [UInt8]) {
        var magnitude = UInt64(v.magnitude)
        if v < 0 { out.append(0x2D) }
        // At most 20 digits; written from the end of a small buffer.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var at = 20
            repeat {
                at -= 1
                digits[at] = 0x30 + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[at..<20]))
        }
    }

    /// Appends `s` as a quoted JSON string to `out` (`appendQuoted` of its UTF-8 bytes).
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { appendQuoted(UnsafeRawBufferPointer($0), to: &out) }
    }

    /// Whether `bytes` hold a control character, `"`, `\` or 0xE2 (the lead byte of
    /// U+2028/U+2029, and of other punctuation, which then takes the slow path): eight
    /// bytes at a time (a token stream quotes ~130 bytes per recipient; byte by byte,
    /// this scan was a fifth of `audience --tokens`).
    @inline(__always)
    static func needsEscaping(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        // A byte of `w` is zero / below n (n <= 0x80) exactly when some byte of the result is set.
        @inline(__always) func zeroByte(_ w: UInt64) -> UInt64 { (w &- ones) & ~w & highs }
        @inline(__always) func below(_ w: UInt64, _ n: UInt64) -> UInt64 { (w &- ones &* n) & ~w & highs }
        var i = 0
        while i + 8 <= bytes.count {
            let w = bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            if below(w, 0x20) | zeroByte(w ^ (ones &* 0x22)) | zeroByte(w ^ (ones &* 0x5C)) | zeroByte(w ^ (ones &* 0xE2)) != 0 { return true }
            i += 8
        }
        while i < bytes.count {
            let b = bytes[i]
            if b < 0x20 || b == 0x22 || b == 0x5C || b == 0xE2 { return true }
            i += 1
        }
        return false
    }
}
