/// A span of time given on the command line: a number and a unit, or several
/// (`30d`, `12h`, `90m`, `45s`, `2w`, `1d12h`, `500ms`; a bare `0` is zero).
public struct RetentionDuration: Sendable, Hashable, CustomStringConvertible {
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    static let units: [(String, Int64)] = [("ms", 1), ("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000),
                                          ("m", 60_000), ("s", 1_000)]

    /// Parses `text`; nil when it is not a duration.
    public init?(parsing text: String) {
        let chars = Array(text.lowercased())
        if chars == ["0"] { self.init(milliseconds: 0); return }
        var i = 0
        var total: Int64 = 0
        var sawPart = false
        while i < chars.count {
            var digits = ""
            while i < chars.count, chars[i].isASCII, chars[i].isNumber { digits.append(chars[i]); i += 1 }
            guard !digits.isEmpty, let n = Int64(digits) else { return nil }
            var unitText = ""
            while i < chars.count, chars[i].isLetter { unitText.append(chars[i]); i += 1 }
            guard let unit = Self.units.first(where: { $0.0 == unitText })?.1 else { return nil }
            let (product, o1) = n.multipliedReportingOverflow(by: unit)
            let (sum, o2) = total.addingReportingOverflow(product)
            guard !o1, !o2 else { return nil }
            total = sum
            sawPart = true
        }
        guard sawPart else { return nil }
        self.init(milliseconds: total)
    }

    /// The shortest exact form (`30d`, `1d12h`, `0`).
    public var description: String {
        if milliseconds == 0 { return "0" }
        var rest = milliseconds
        var out = ""
        for (name, size) in Self.units.dropFirst() + [Self.units[0]] where rest >= size {
            out += "\(rest / size)\(name)"
            rest %= size
        }
        return out
    }
}
