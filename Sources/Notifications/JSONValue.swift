/// A JSON value that keeps the order of object members and the exact text of
/// numbers, so a payload is rendered byte for byte as its sender wrote it.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The number's text as written (validated JSON number syntax).
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([JSONMember])

    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var isNull: Bool { if case .null = self { return true }; return false }

    /// An integer from a number without fraction or exponent (or a string of digits when `lenient`).
    public func integer(lenient: Bool = false) -> Int64? {
        switch self {
        case .number(let t): return Int64(t)
        case .string(let s) where lenient: return Int64(s)
        default: return nil
        }
    }

    /// `true`/`false`, `1`/`0` (numbers), and when `lenient` the strings "true"/"false"/"1"/"0".
    public func boolean(lenient: Bool = true) -> Bool? {
        switch self {
        case .bool(let b): return b
        case .number(let t): return t == "1" ? true : t == "0" ? false : nil
        case .string(let s) where lenient:
            switch s.lowercased() { case "true", "1": return true; case "false", "0": return false; default: return nil }
        default: return nil
        }
    }

    /// Compact JSON: members in order, `/` and non-ASCII unescaped.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        JSONWriter.append(self, to: &out)
        return out
    }

    public var text: String { String(decoding: bytes, as: UTF8.self) }
}

public struct JSONMember: Sendable, Equatable {
    public var key: String
    public var value: JSONValue
    public init(_ key: String, _ value: JSONValue) {
        self.key = key
        self.value = value
    }
}

public struct JSONSyntaxError: Error, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    /// How deep arrays and objects may nest.
    public static let maxDepth = 64
    /// Valid JSON, nested deeper than `maxDepth`.
    public var isTooDeep: Bool { reason == Self.tooDeep }
    static let tooDeep = "nested more than \(maxDepth) levels deep"
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

/// Writes compact JSON bytes.
public enum JSONWriter {
    public static func append(_ value: JSONValue, to out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
        case .bool(let b): out.append(contentsOf: b ? Array("true".utf8) : Array("false".utf8))
        case .number(let t): out.append(contentsOf: t.utf8)
        case .string(let s): appendString(s, to: &out)
        case .array(let items):
            out.append(0x5B)
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(0x2C) }
                append(item, to: &out)
            }
            out.append(0x5D)
        case .object(let members):
            out.append(0x7B)
            for (i, m) in members.enumerated() {
                if i > 0 { out.append(0x2C) }
                appendString(m.key, to: &out)
                out.append(0x3A)
                append(m.value, to: &out)
            }
            out.append(0x7D)
        }
    }

    /// A quoted JSON string: `"` `\` and control characters escaped, nothing else.
    public static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(0x22)
        appendStringContents(s, to: &out)
        out.append(0x22)
    }

    /// What goes between the quotes of a JSON string.
    public static func appendStringContents(_ s: String, to out: inout [UInt8]) {
        for b in s.utf8 {
            switch b {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, 0x6E])
            case 0x0D: out.append(contentsOf: [0x5C, 0x72])
            case 0x09: out.append(contentsOf: [0x5C, 0x74])
            case 0x08: out.append(contentsOf: [0x5C, 0x62])
            case 0x0C: out.append(contentsOf: [0x5C, 0x66])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [0x5C, 0x75, 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 15)]])
            default: out.append(b)
            }
        }
    }
}

/// A strict RFC 8259 parser (UTF-8 input, nesting at most 64 deep).
public struct JSONParser {
    private let bytes: [UInt8]
    private var i = 0
    private var depth = 0

    public static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONValue {
        var p = JSONParser(bytes: bytes)
        p.skipSpace()
        let v = try p.value()
        p.skipSpace()
        guard p.i == bytes.count else { throw JSONSyntaxError(offset: p.i, reason: "trailing characters") }
        return v
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private func fail(_ reason: String) -> JSONSyntaxError { JSONSyntaxError(offset: i, reason: reason) }

    private mutating func value() throws(JSONSyntaxError) -> JSONValue {
        guard i < bytes.count else { throw fail("unexpected end") }
        switch bytes[i] {
        case 0x7B: return try object()
        case 0x5B: return try array()
        case 0x22: return .string(try string())
        case 0x74: try literal("true"); return .bool(true)
        case 0x66: try literal("false"); return .bool(false)
        case 0x6E: try literal("null"); return .null
        case 0x2D, 0x30...0x39: return .number(try number())
        default: throw fail("unexpected character")
        }
    }

    private mutating func literal(_ word: String) throws(JSONSyntaxError) {
        for b in word.utf8 {
            guard i < bytes.count, bytes[i] == b else { throw fail("expected \(word)") }
            i += 1
        }
    }

    private mutating func number() throws(JSONSyntaxError) -> String {
        let start = i
        if bytes[i] == 0x2D { i += 1 }
        func digits(_ p: inout JSONParser) -> Int {
            let s = p.i
            while p.i < p.bytes.count, (0x30...0x39).contains(p.bytes[p.i]) { p.i += 1 }
            return p.i - s
        }
        guard i < bytes.count else { throw fail("bad number") }
        if bytes[i] == 0x30 { i += 1 } else if digits(&self) == 0 { throw fail("bad number") }
        if i < bytes.count, bytes[i] == 0x2E {
            i += 1
            if digits(&self) == 0 { throw fail("bad fraction") }
        }
        if i < bytes.count, bytes[i] == 0x65 || bytes[i] == 0x45 {
            i += 1
            if i < bytes.count, bytes[i] == 0x2B || bytes[i] == 0x2D { i += 1 }
            if digits(&self) == 0 { throw fail("bad exponent") }
        }
        return String(decoding: bytes[start..<i], as: UTF8.self)
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("bad \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[i]
            let d: UInt32
            switch c {
            case 0x30...0x39: d = UInt32(c - 0x30)
            case 0x61...0x66: d = UInt32(c - 0x61 + 10)
            case 0x41...0x46: d = UInt32(c - 0x41 + 10)
            default: throw fail("bad \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        i += 1
        var out: [UInt8] = []
        while true {
            guard i < bytes.count else { throw fail("unterminated string") }
            let b = bytes[i]
            if b == 0x22 { i += 1; break }
            if b < 0x20 { throw fail("control character in string") }
            if b != 0x5C { out.append(b); i += 1; continue }
            i += 1
            guard i < bytes.count else { throw fail("unterminated escape") }
            let e = bytes[i]
            i += 1
            switch e {
            case 0x22: out.append(0x22)
            case 0x5C: out.append(0x5C)
            case 0x2F: out.append(0x2F)
            case 0x62: out.append(0x08)
            case 0x66: out.append(0x0C)
            case 0x6E: out.append(0x0A)
            case 0x72: out.append(0x0D)
            case 0x74: out.append(0x09)
            case 0x75:
                var scalar = try hex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard i + 2 <= bytes.count, bytes[i] == 0x5C, bytes[i + 1] == 0x75 else { throw fail("lone surrogate") }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw fail("bad surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw fail("lone surrogate")
                }
                guard let u = Unicode.Scalar(scalar) else { throw fail("bad scalar") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default: throw fail("bad escape")
            }
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("string is not UTF-8") }
        return s
    }

    private mutating func array() throws(JSONSyntaxError) -> JSONValue {
        depth += 1
        guard depth <= JSONSyntaxError.maxDepth else { throw fail(JSONSyntaxError.tooDeep) }
        defer { depth -= 1 }
        i += 1
        var items: [JSONValue] = []
        skipSpace()
        if i < bytes.count, bytes[i] == 0x5D { i += 1; return .array(items) }
        while true {
            skipSpace()
            items.append(try value())
            skipSpace()
            guard i < bytes.count else { throw fail("unterminated array") }
            if bytes[i] == 0x2C { i += 1; continue }
            if bytes[i] == 0x5D { i += 1; return .array(items) }
            throw fail("expected , or ]")
        }
    }

    private mutating func object() throws(JSONSyntaxError) -> JSONValue {
        depth += 1
        guard depth <= JSONSyntaxError.maxDepth else { throw fail(JSONSyntaxError.tooDeep) }
        defer { depth -= 1 }
        i += 1
        var members: [JSONMember] = []
        skipSpace()
        if i < bytes.count, bytes[i] == 0x7D { i += 1; return .object(members) }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == 0x22 else { throw fail("expected a member name") }
            let key = try string()
            skipSpace()
            guard i < bytes.count, bytes[i] == 0x3A else { throw fail("expected :") }
            i += 1
            skipSpace()
            let v = try value()
            // A repeated name: the last one wins, in the first one's place.
            if let k = members.firstIndex(where: { $0.key == key }) { members[k].value = v } else { members.append(JSONMember(key, v)) }
            skipSpace()
            guard i < bytes.count else { throw fail("unterminated object") }
            if bytes[i] == 0x2C { i += 1; continue }
            if bytes[i] == 0x7D { i += 1; return .object(members) }
            throw fail("expected , or }")
        }
    }
}
