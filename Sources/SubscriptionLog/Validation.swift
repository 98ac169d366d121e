/// The limits every command is checked against before it reaches the log.
/// They are stated in the README; an error names the field and the rule.
public enum Limits {
    public static let projectNameLength = 1...64
    public static let deviceIDLength = 1...256          // bytes of UTF-8
    /// Tokens are keys of the token index, and LMDB keys hold at most 511 bytes
    /// (with the 4-byte project prefix). APNs tokens are 64 hex digits, FCM's about 163 characters.
    public static let tokenLength = 1...500             // bytes
    /// At most 128: a `topic_codes` key holds the length in one byte, 0x7F + the length (schema 11).
    public static let topicCodeLength = 1...128         // bytes
    /// Titles and reasons are counted in code points (Unicode scalars), as MPush counts them
    /// (Laravel `max:256` is `mb_strlen`); not in characters, which may carry any number of
    /// combining marks: 256 code points are at most 1,024 bytes, far inside a record's field.
    public static let titleLength = 0...256             // code points
    public static let topicsPerCommand = 1...100
    public static let reasonLength = 0...256            // code points
    /// Provider timestamps: from 2000-01-01 to 2200-01-01, in milliseconds.
    public static let rejectedAtRange: ClosedRange<Int64> = 946_684_800_000...7_258_118_400_000

    /// Characters allowed in a topic code besides ASCII letters and digits.
    /// Spaces, parentheses, quotes and `:` are excluded so that codes can be
    /// written bare in audience expressions (`:` names built-in sets like `platform:ios`).
    public static let topicCodePunctuation: Set<UInt8> = Set("._-~@/+=#".utf8)
    /// Characters allowed in a project name besides lowercase letters and digits.
    public static let projectNamePunctuation: Set<UInt8> = Set("_-.".utf8)
}

/// A field that broke a rule. `field` uses the API's names (`device_id`, `topics.2.code`).
public struct ValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var field: String
    public var message: String
    public init(field: String, message: String) {
        self.field = field
        self.message = message
    }
    public var description: String { "\(field): \(message)" }
}

/// All the rule violations of one command (never empty when thrown).
public struct InvalidCommand: Error, Sendable, CustomStringConvertible {
    public var errors: [ValidationError]
    public init(_ errors: [ValidationError]) { self.errors = errors }
    public var description: String { errors.map(\.description).joined(separator: "; ") }
}

public enum Validation {
    /// Which rules an event is held to.
    public enum Rules: Sendable {
        /// A new command (the HTTP API, `load`, the store's writers): every limit above,
        /// and a device id of nothing but whitespace is no device id.
        case command
        /// A record some log already holds (`import` of an export): the same rules, except
        /// that a title or reason need only fit the record (65,535 bytes) and a blank device
        /// id is what it is. Earlier versions counted those in characters and took blank ids;
        /// refusing what they logged would make an import of their export fail.
        case logged
    }

    public static func validate(_ event: Event, rules: Rules = .command) throws(InvalidCommand) {
        var errors: [ValidationError] = []
        check(projectName: event.project, into: &errors)
        // What the SDKs send must name a device; the garbage collector's forget-device may
        // name one an earlier version let in with a blank id.
        let sent = rules == .command
        switch event.body {
        case .token(let deviceID, let token, _):
            check(deviceID: deviceID, requiresContent: sent, into: &errors)
            check(token: token, field: "token", into: &errors)
        case .register(let deviceID, let topics):
            check(deviceID: deviceID, requiresContent: sent, into: &errors)
            checkCount(topics.count, into: &errors)
            for (i, topic) in topics.enumerated() {
                check(topicCode: topic.code, field: "topics.\(i).code", into: &errors)
                if let title = topic.title {
                    check(text: title, field: "topics.\(i).title", name: "title", limit: Limits.titleLength.upperBound, rules, into: &errors)
                }
            }
        case .unregister(let deviceID, let codes):
            check(deviceID: deviceID, requiresContent: sent, into: &errors)
            checkCount(codes.count, into: &errors)
            for (i, code) in codes.enumerated() { check(topicCode: code, field: "topics.\(i).code", into: &errors) }
        case .unregisterAll(let deviceID):
            check(deviceID: deviceID, requiresContent: sent, into: &errors)
        case .forgetDevice(let deviceID):
            check(deviceID: deviceID, into: &errors)
        case .dropTopic(let code):
            check(topicCode: code, field: "code", into: &errors)
        case .expireToken(let token):
            check(token: token, field: "token", into: &errors)
        case .tokenRejected(let token, let at, let reason):
            check(token: token, field: "token", into: &errors)
            if !Limits.rejectedAtRange.contains(at) {
                errors.append(ValidationError(field: "at",
                    message: "The at field must be a provider timestamp in milliseconds since 1970 (between years 2000 and 2200)."))
            }
            check(text: reason, field: "reason", name: "reason", limit: Limits.reasonLength.upperBound, rules, into: &errors)
        }
        if !errors.isEmpty { throw InvalidCommand(errors) }
    }

    /// Whether `code` passes `check(topicCode:)`, told from its bytes with no
    /// error made: that check's array of errors and field name were two
    /// thirds of the HTTP server's time validating a count of 100 users' topics.
    public static func isValidTopicCode(_ code: String) -> Bool {
        code.withUTF8Bytes { isValidTopicCode($0) }
    }

    /// `isValidTopicCode` of a code's UTF-8 bytes.
    @inline(__always)
    public static func isValidTopicCode(_ bytes: UnsafeRawBufferPointer) -> Bool {
        Limits.topicCodeLength.contains(bytes.count) && ByteClass.areTopicCode(bytes)
    }

    public static func check(projectName name: String, into errors: inout [ValidationError]) {
        let utf8 = name.utf8
        if !Limits.projectNameLength.contains(utf8.count) {
            errors.append(ValidationError(field: "project",
                message: "The project name must be 1 to \(Limits.projectNameLength.upperBound) characters."))
        } else if !name.withUTF8Bytes({ ByteClass.areProjectName($0) }) {
            errors.append(ValidationError(field: "project",
                message: "The project name may contain only lowercase letters, digits, '_', '-' and '.'."))
        }
    }

    /// `requiresContent`: a blank id (see `isBlank`) is as missing as an empty one. An id with
    /// content is never trimmed: that would make an existing device another one.
    static func check(deviceID: String, requiresContent: Bool = false, into errors: inout [ValidationError]) {
        let n = deviceID.utf8.count
        if n == 0 || (requiresContent && isBlank(deviceID)) {
            errors.append(ValidationError(field: "device_id", message: "The device id field is required."))
        } else if n > Limits.deviceIDLength.upperBound {
            errors.append(ValidationError(field: "device_id",
                message: "The device id may not be greater than \(Limits.deviceIDLength.upperBound) bytes."))
        } else if hasControlCharacter(deviceID) {
            errors.append(ValidationError(field: "device_id", message: "The device id may not contain control characters."))
        }
    }

    /// Whether `s` is empty or nothing but whitespace: Unicode's White_Space, and the invisible
    /// characters Laravel's TrimStrings (MPush's middleware) takes away with it: U+200B zero
    /// width space, U+200E left-to-right mark, U+FEFF byte order mark. Most strings answer
    /// at their first character.
    public static func isBlank(_ s: String) -> Bool {
        s.unicodeScalars.allSatisfy(isTrimmed)
    }

    /// `s` without the leading and trailing characters `isBlank` counts as blank, as
    /// TrimStrings leaves it; nil when nothing is left (ConvertEmptyStringsToNull).
    public static func trimmed(_ s: String) -> String? {
        let scalars = s.unicodeScalars
        guard let first = scalars.firstIndex(where: { !isTrimmed($0) }),
              let last = scalars.lastIndex(where: { !isTrimmed($0) }) else { return nil }
        if first == scalars.startIndex && last == scalars.index(before: scalars.endIndex) { return s }
        return String(scalars[first...last])
    }

    private static func isTrimmed(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x20, 0x09...0x0D, 0x200B, 0x200E, 0xFEFF: return true
        case 0x21...0x7E: return false
        default: return scalar.properties.isWhitespace
        }
    }

    /// Whether `s` holds a control character (C0, DEL, C1), checking bytes
    /// first: almost every device id is ASCII, and Unicode properties are slow.
    static func hasControlCharacter(_ s: String) -> Bool {
        let ascii = s.withUTF8Bytes { bytes -> Bool? in
            var ascii = true
            for b in bytes {
                if b < 0x20 || b == 0x7F { return nil }
                if b >= 0x80 { ascii = false }
            }
            return ascii
        }
        guard let ascii else { return true }
        if ascii { return false }
        return s.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// A free text (title, reason): at most `limit` code points in a command (the message says
    /// characters, as MPush's does), at most what a record's field holds in a logged record.
    static func check(text: String, field: @autoclosure () -> String, name: String, limit: Int, _ rules: Rules,
                      into errors: inout [ValidationError]) {
        let bytes = text.utf8.count
        switch rules {
        case .command:
            // Bytes bound code points: most texts are settled without counting them.
            if bytes > limit && text.unicodeScalars.count > limit {
                errors.append(ValidationError(field: field(), message: "The \(name) may not be greater than \(limit) characters."))
            }
        case .logged:
            if bytes > FieldTooLong.limit {
                errors.append(ValidationError(field: field(), message: "The \(name) may not be greater than \(FieldTooLong.limit) bytes."))
            }
        }
    }

    static func check(token: String, field: String, into errors: inout [ValidationError]) {
        let n = token.utf8.count
        if n == 0 {
            errors.append(ValidationError(field: field, message: "The token field is required."))
        } else if n > Limits.tokenLength.upperBound {
            errors.append(ValidationError(field: field,
                message: "The token may not be greater than \(Limits.tokenLength.upperBound) bytes."))
        } else if !token.withUTF8Bytes({ $0.allSatisfy { $0 > 0x20 && $0 < 0x7F } }) {
            errors.append(ValidationError(field: field,
                message: "The token may contain only printable ASCII characters without spaces."))
        }
    }

    /// `field` is built only for an error: a register names `topics.<i>.code` for each of its
    /// topics, and building those names was a fifth of validation's instructions.
    static func check(topicCode code: String, field: @autoclosure () -> String, into errors: inout [ValidationError]) {
        let utf8 = code.utf8
        if utf8.isEmpty {
            errors.append(ValidationError(field: field(), message: "The topic code is required."))
        } else if utf8.count > Limits.topicCodeLength.upperBound {
            errors.append(ValidationError(field: field(),
                message: "The topic code may not be greater than \(Limits.topicCodeLength.upperBound) characters."))
        } else if !code.withUTF8Bytes({ ByteClass.areTopicCode($0) }) {
            errors.append(ValidationError(field: field(),
                message: "The topic code may contain only ASCII letters (A-Z, a-z), digits (0-9) and . _ - ~ @ / + = #."))
        }
    }

    static func checkCount(_ n: Int, into errors: inout [ValidationError]) {
        if n < Limits.topicsPerCommand.lowerBound {
            errors.append(ValidationError(field: "topics", message: "The topics field is required."))
        } else if n > Limits.topicsPerCommand.upperBound {
            errors.append(ValidationError(field: "topics",
                message: "The topics may not have more than \(Limits.topicsPerCommand.upperBound) items."))
        }
    }

    @inline(__always)
    public static func isAlphanumeric(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
    }
}

/// Which bytes the charsets of topic codes and project names allow, as one table
/// lookup per byte (a `Set` lookup per punctuation byte before).
enum ByteClass {
    private static let projectName: UInt8 = 1
    private static let table: [UInt8] = (0..<256).map { b -> UInt8 in
        let c = UInt8(b)
        return (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || Limits.projectNamePunctuation.contains(c) ? projectName : 0
    }

    /// Whether every byte of `bytes` may stand in a topic code: ASCII, and
    /// its bit set in `topicCodeBits`, constants: through the table (a lazy
    /// global) and `allSatisfy`, checking a user's code took ~130
    /// instructions, and a count request checks each code twice.
    @inline(__always)
    static func areTopicCode(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let (low, high) = topicCodeBits
        for b in bytes {
            // (Without a branch per byte the loop was vectorized, with its shifts emulated: more work.)
            guard b < 128, ((b < 64 ? low : high) >> UInt64(b & 63)) & 1 != 0 else { return false }
        }
        return true
    }

    /// The bytes a topic code may hold, as two 64-bit words (bytes 0–63, 64–127):
    /// `A-Z a-z 0-9` and `Limits.topicCodePunctuation` (`._-~@/+=#`); a test
    /// checks them against `Limits`.
    @inline(__always)
    static var topicCodeBits: (low: UInt64, high: UInt64) { (0x23FF_E808_0000_0000, 0x47FF_FFFE_87FF_FFFF) }

    /// Whether every byte of `bytes` may stand in a project name.
    static func areProjectName(_ bytes: UnsafeRawBufferPointer) -> Bool { all(bytes, projectName) }

    /// The table is a lazily made global: fetched once per name, not once per
    /// byte (each fetch is a call to check it was made: 2% of the server's time
    /// for a count of a list of 100 users).
    @inline(__always)
    private static func all(_ bytes: UnsafeRawBufferPointer, _ bit: UInt8) -> Bool {
        table.withUnsafeBufferPointer { t in bytes.allSatisfy { t[Int($0)] & bit != 0 } }
    }
}
