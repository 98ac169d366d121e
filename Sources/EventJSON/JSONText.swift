/// Writes JSON text by hand where speed matters (token streams, exports).
public enum JSONText {
    /// `s` as a quoted JSON string, escaping what RFC 8259 requires.
    public static func quoted(_ s: String) -> String {
        var out = "\""
        out.reserveCapacity(s.utf8.count + 2)
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
        return out
    }

    /// Appends `bytes` (UTF-8) as a quoted JSON string to `out`.
    public static func appendQuoted(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        out.append(0x22)
        var plain = true
        for b in bytes where b < 0x20 || b == 0x22 || b == 0x5C { plain = false; break }
        if plain {
            out.append(contentsOf: bytes)
        } else {
            out.append(contentsOf: Array(quoted(String(decoding: bytes, as: UTF8.self)).utf8.dropFirst().dropLast()))
        }
        out.append(0x22)
    }
}
