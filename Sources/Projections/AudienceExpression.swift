import SubscriptionLog

/// A boolean audience over topics, e.g. `news AND NOT user.12` or
/// `(sport OR news) AND platform:ios`.
///
/// Grammar (keywords case-insensitive, `&` `|` `!` accepted as well):
/// ```
/// expr    := and ( OR and )*
/// and     := unary ( AND unary )*
/// unary   := NOT unary | primary
/// primary := '(' expr ')' | topic-code | "quoted code" | platform:ios | platform:android | devices:all
/// ```
public indirect enum AudienceExpression: Sendable, Hashable, CustomStringConvertible {
    case topic(String)
    /// Devices whose token on this platform is live.
    case platform(Platform)
    /// Every device the project knows.
    case allDevices
    case and(AudienceExpression, AudienceExpression)
    case or(AudienceExpression, AudienceExpression)
    case not(AudienceExpression)

    /// The union of `codes` (what MPush's `topics` array means).
    public static func anyOf(_ codes: [String]) -> AudienceExpression? {
        guard var result = codes.first.map(AudienceExpression.topic) else { return nil }
        for code in codes.dropFirst() { result = .or(result, .topic(code)) }
        return result
    }

    /// Topic codes named anywhere in the expression.
    public var topicCodes: [String] {
        switch self {
        case .topic(let c): return [c]
        case .platform, .allDevices: return []
        case .and(let a, let b), .or(let a, let b): return a.topicCodes + b.topicCodes
        case .not(let a): return a.topicCodes
        }
    }

    public var description: String {
        switch self {
        case .topic(let c): return Self.text(ofTopic: c)
        case .platform(let p): return "platform:\(p)"
        case .allDevices: return "devices:all"
        // A chain of one operator is one pair of parentheses, so the text reads back
        // (within `maxDepth`) however many topics it joins.
        case .and: return "(" + operands(joinedBy: .and).map(\.description).joined(separator: " AND ") + ")"
        case .or: return "(" + operands(joinedBy: .or).map(\.description).joined(separator: " OR ") + ")"
        case .not(let a): return "NOT \(a)"
        }
    }

    /// `anyOf(codes)?.description` (nil without codes), written from the codes
    /// as they are: what the HTTP count answers as `expr` for MPush's `topics`
    /// array. (Built and described as a chain of 199 ORs, a list of 100 was a
    /// sixth of the server's time for its count.) With `allValid`, the caller
    /// has checked every code with `Validation.isValidTopicCode` (as the HTTP
    /// count has, to answer 422 otherwise): only keywords are quoted then, and the
    /// charset is not checked a second time.
    public static func description(ofAnyOf codes: [String], allValid: Bool = false) -> String? {
        codes.withUnsafeBufferPointer { description(ofAnyOf: StringNames(strings: $0), allValid: allValid) }
    }

    /// `description(ofAnyOf:allValid:)` of codes given as bytes.
    public static func description(ofAnyOf codes: TopicCodeList, allValid: Bool = false) -> String? {
        codes.withNames { description(ofAnyOf: $0, allValid: allValid) }
    }

    private static func description<Names: NameList>(ofAnyOf codes: Names, allValid: Bool) -> String? {
        guard codes.count > 0 else { return nil }
        // One code alone is its own text, in no parentheses.
        let listed = codes.count > 1
        // Written straight into the String's storage, each code's bytes read once in place:
        // appended to an array (as a `String.UTF8View`, then as bytes) and checked as a
        // String, they were a fifth of the server's instructions for such a count.
        var capacity = 2
        for i in 0..<codes.count { capacity += codes.withName(i) { $0.count } + 6 }
        return String(unsafeUninitializedCapacity: capacity) { out in
            let base = UnsafeMutableRawPointer(out.baseAddress!)
            var at = 0
            func put(_ byte: UInt8) { base.storeBytes(of: byte, toByteOffset: at, as: UInt8.self); at += 1 }
            if listed { put(UInt8(ascii: "(")) }
            for i in 0..<codes.count {
                if i > 0 { for b in " OR ".utf8 { put(b) } }
                codes.withName(i) { bytes in
                    let quoted = allValid ? Parser.isKeyword(bytes) : isQuoted(bytes)
                    if quoted { put(UInt8(ascii: "\"")) }
                    if let source = bytes.baseAddress { (base + at).copyMemory(from: source, byteCount: bytes.count) }
                    at += bytes.count
                    if quoted { put(UInt8(ascii: "\"")) }
                }
            }
            if listed { put(UInt8(ascii: ")")) }
            return at
        }
    }

    /// A topic as an expression's text names it: bare when it reads back as
    /// that topic, quoted otherwise.
    private static func text(ofTopic code: String) -> String {
        isQuoted(code) ? "\"\(code)\"" : code
    }

    /// Whether a topic's text is quoted: a keyword, or a code outside the charset.
    private static func isQuoted(_ code: String) -> Bool {
        code.withUTF8Bytes { isQuoted($0) }
    }

    /// `isQuoted` of a code's UTF-8 bytes.
    @inline(__always)
    private static func isQuoted(_ bytes: UnsafeRawBufferPointer) -> Bool {
        Parser.isKeyword(bytes) || !Validation.isValidTopicCode(bytes)
    }

    private enum Join { case and, or }

    /// The operands of a chain of `join` (both sides, at any depth), in order.
    private func operands(joinedBy join: Join) -> [AudienceExpression] {
        var operands: [AudienceExpression] = []
        collectOperands(joinedBy: join, into: &operands)
        return operands
    }

    /// Appends to `operands` (joining each side's arrays copied a chain of n
    /// operands n²/2 times: a list of 1,000 topics half a million copies).
    private func collectOperands(joinedBy join: Join, into operands: inout [AudienceExpression]) {
        switch (self, join) {
        case (.and(let a, let b), .and), (.or(let a, let b), .or):
            a.collectOperands(joinedBy: join, into: &operands)
            b.collectOperands(joinedBy: join, into: &operands)
        default:
            operands.append(self)
        }
    }

    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public let position: Int
        public let message: String
        public var description: String { "audience expression, at character \(position + 1): \(message)" }
    }

    public static let maxLength = 4096
    /// Levels of nesting allowed: each `(` and each `NOT` is one level, so `a` is at level 0
    /// and 64 parentheses around it (or 64 NOTs before it) are allowed, 65 are not.
    public static let maxDepth = 64

    public init(parsing text: String) throws(ParseError) {
        guard text.utf8.count <= Self.maxLength else {
            throw ParseError(position: 0, message: "longer than \(Self.maxLength) characters")
        }
        var parser = Parser(Array(text.utf8))
        self = try parser.parseExpression(depth: 0)
        parser.skipSpace()
        guard parser.at == parser.bytes.count else {
            throw ParseError(position: parser.at, message: "unexpected \(parser.peekDescription)")
        }
    }

    struct Parser {
        let bytes: [UInt8]
        var at = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }

        /// `and`, `or` or `not` in any case (ASCII letters folded; no String lowercased per topic).
        static func isKeyword(_ s: String) -> Bool {
            guard (2...3).contains(s.utf8.count) else { return false }  // O(1) for a native String
            return s.withUTF8Bytes { isKeyword($0) }
        }

        /// `isKeyword` of a word's UTF-8 bytes.
        @inline(__always)
        static func isKeyword(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard (2...3).contains(bytes.count) else { return false }
            // A byte of 0x80 or more stays one, and matches no keyword's.
            let word = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1 >= 0x41 && $1 <= 0x5A ? $1 | 0x20 : $1) }
            return word == 0x616E64 || word == 0x6F72 || word == 0x6E6F74  // "and", "or", "not"
        }

        var peekDescription: String {
            at < bytes.count ? "'\(String(decoding: bytes[at...].prefix(16), as: UTF8.self))'" : "end of expression"
        }

        mutating func skipSpace() {
            while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x09 || bytes[at] == 0x0A || bytes[at] == 0x0D { at += 1 }
        }

        static func isWordByte(_ c: UInt8) -> Bool {
            Validation.isAlphanumeric(c) || Limits.topicCodePunctuation.contains(c) || c == 0x3A  // ':'
        }

        /// The next bare word without consuming it.
        func peekWord() -> String? {
            var end = at
            while end < bytes.count, Self.isWordByte(bytes[end]) { end += 1 }
            return end > at ? String(decoding: bytes[at..<end], as: UTF8.self) : nil
        }

        mutating func acceptOperator(_ keyword: String, symbol: UInt8) -> Bool {
            skipSpace()
            guard at < bytes.count else { return false }
            if bytes[at] == symbol {
                at += 1
                // && and || are one operator; !! is two NOTs.
                if symbol != 0x21, at < bytes.count, bytes[at] == symbol { at += 1 }
                return true
            }
            if let w = peekWord(), w.lowercased() == keyword { at += w.utf8.count; return true }
            return false
        }

        /// Refuses a level past `maxDepth` (before recursing further: the limit bounds the stack).
        func checkDepth(_ depth: Int) throws(ParseError) {
            guard depth <= AudienceExpression.maxDepth else {
                throw ParseError(position: at, message: "nested more than \(AudienceExpression.maxDepth) levels deep")
            }
        }

        mutating func parseExpression(depth: Int) throws(ParseError) -> AudienceExpression {
            try checkDepth(depth)
            var left = try parseAnd(depth: depth)
            while acceptOperator("or", symbol: 0x7C) { left = .or(left, try parseAnd(depth: depth)) }
            return left
        }

        mutating func parseAnd(depth: Int) throws(ParseError) -> AudienceExpression {
            var left = try parseUnary(depth: depth)
            while acceptOperator("and", symbol: 0x26) { left = .and(left, try parseUnary(depth: depth)) }
            return left
        }

        mutating func parseUnary(depth: Int) throws(ParseError) -> AudienceExpression {
            try checkDepth(depth)
            if acceptOperator("not", symbol: 0x21) { return .not(try parseUnary(depth: depth + 1)) }
            return try parsePrimary(depth: depth)
        }

        mutating func parsePrimary(depth: Int) throws(ParseError) -> AudienceExpression {
            skipSpace()
            guard at < bytes.count else { throw ParseError(position: at, message: "expected a topic, found the end") }
            let start = at
            switch bytes[at] {
            case 0x28:  // (
                at += 1
                let inner = try parseExpression(depth: depth + 1)
                skipSpace()
                guard at < bytes.count, bytes[at] == 0x29 else { throw ParseError(position: at, message: "expected ')'") }
                at += 1
                return inner
            case 0x22:  // "quoted code"
                at += 1
                let begin = at
                while at < bytes.count, bytes[at] != 0x22 { at += 1 }
                guard at < bytes.count else { throw ParseError(position: start, message: "unterminated quoted topic code") }
                let code = String(decoding: bytes[begin..<at], as: UTF8.self)
                at += 1
                guard Validation.isValidTopicCode(code) else { throw ParseError(position: start, message: "invalid topic code \"\(code)\"") }
                return .topic(code)
            default:
                guard let word = peekWord() else { throw ParseError(position: at, message: "unexpected \(peekDescription)") }
                if Self.isKeyword(word) { throw ParseError(position: at, message: "expected a topic, found '\(word)'") }
                at += word.utf8.count
                if word.contains(":") {
                    switch word.lowercased() {
                    case "platform:ios": return .platform(.ios)
                    case "platform:android", "platform:and": return .platform(.android)
                    case "devices:all": return .allDevices
                    default: throw ParseError(position: start, message: "unknown built-in set '\(word)' (platform:ios, platform:android, devices:all)")
                    }
                }
                guard Validation.isValidTopicCode(word) else { throw ParseError(position: start, message: "invalid topic code '\(word)'") }
                return .topic(word)
            }
        }
    }
}
