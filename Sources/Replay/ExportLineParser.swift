import SubscriptionLog

/// Reads an exported line in exactly the form `EventJSON.line` writes it — its keys in
/// that order, no white space, integers, strings escaped as `JSONText.quoted` escapes
/// them — without building a JSON object tree. Import spent two thirds of its time in
/// `JSONSerialization` and the object-to-event decoding (perf, 500k lines).
///
/// Anything else — another key order, white space, a fraction, an escape it does not
/// know, a record that fails validation — is nil, and the caller reads the line the
/// general way, which also gives the errors. So the result, where there is one, is what
/// the general reading gives (a property test compares the two).
enum ExportLineParser {
    static func parse(_ line: String) -> (record: LogRecord, link: ChainHash?, unchained: Bool)? {
        var line = line
        return line.withUTF8 { bytes in
            var reader = Reader(bytes: bytes)
            return reader.line()
        }
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var at = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        mutating func line() -> (record: LogRecord, link: ChainHash?, unchained: Bool)? {
            guard literal("{\"seq\":"), let seq = integer(), seq > 0,
                  literal(",\"ts\":"), let ts = integer(),
                  literal(",\"project\":"), let project = string(),
                  literal(",\"type\":"), let type = string() else { return nil }
            let body: EventBody
            switch type {
            case "token":
                guard let device = field(",\"device_id\":"), let token = field(",\"token\":"), let name = field(",\"platform\":"),
                      name == "ios" || name == "android", let platform = Platform(name: name) else { return nil }
                body = .token(deviceID: device, token: token, platform: platform)
            case "register":
                guard let device = field(",\"device_id\":"), literal(",\"topics\":["), let specs = topicObjects() else { return nil }
                body = .register(deviceID: device, topics: specs)
            case "unregister":
                guard let device = field(",\"device_id\":"), literal(",\"topics\":["), let codes = codeStrings() else { return nil }
                body = .unregister(deviceID: device, codes: codes)
            case "unregister-all":
                guard let device = field(",\"device_id\":") else { return nil }
                body = .unregisterAll(deviceID: device)
            case "token-rejected":
                guard let token = field(",\"token\":"), literal(",\"at\":"), let at = integer(), let reason = field(",\"reason\":") else { return nil }
                body = .tokenRejected(token: token, rejectedAt: at, reason: reason)
            case "forget-device":
                guard let device = field(",\"device_id\":") else { return nil }
                body = .forgetDevice(deviceID: device)
            case "drop-topic":
                guard let code = field(",\"code\":") else { return nil }
                body = .dropTopic(code: code)
            case "expire-token":
                guard let token = field(",\"token\":") else { return nil }
                body = .expireToken(token: token)
            default:
                return nil
            }
            var link: ChainHash?
            if literal(",\"link\":") {
                guard let hex = string(), let hash = ChainHash(hex: hex) else { return nil }
                link = hash
            }
            let unchained = literal(",\"unchained\":true")
            guard literal("}"), at == bytes.count else { return nil }
            let event = Event(project: project, body: body)
            do { try Validation.validate(event, rules: .logged) } catch { return nil }
            return (LogRecord(sequence: UInt64(seq), timestamp: ts, event: event), link, unchained)
        }

        /// `prefix` (`,"name":`) and a string.
        mutating func field(_ prefix: StaticString) -> String? {
            guard literal(prefix) else { return nil }
            return string()
        }

        /// `{"code":…[,"title":…][,"single":true|false]}` objects up to `]`.
        mutating func topicObjects() -> [TopicSpec]? {
            var specs: [TopicSpec] = []
            if literal("]") { return specs }
            repeat {
                guard literal("{\"code\":"), let code = string() else { return nil }
                var spec = TopicSpec(code: code)
                if literal(",\"title\":") {
                    guard let title = string() else { return nil }
                    spec.title = title
                }
                if literal(",\"single\":") {
                    if literal("true") { spec.single = true } else if literal("false") { spec.single = false } else { return nil }
                }
                guard literal("}") else { return nil }
                specs.append(spec)
            } while literal(",")
            return literal("]") ? specs : nil
        }

        /// Strings up to `]`.
        mutating func codeStrings() -> [String]? {
            var codes: [String] = []
            if literal("]") { return codes }
            repeat {
                guard let code = string() else { return nil }
                codes.append(code)
            } while literal(",")
            return literal("]") ? codes : nil
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let n = text.utf8CodeUnitCount
            guard at + n <= bytes.count else { return false }
            let p = text.utf8Start
            for i in 0..<n where bytes[at + i] != p[i] { return false }
            at += n
            return true
        }

        /// An optionally negative integer of at most 18 digits (no overflow to think about).
        mutating func integer() -> Int64? {
            var negative = false
            if at < bytes.count, bytes[at] == UInt8(ascii: "-") { negative = true; at += 1 }
            let start = at
            var value: Int64 = 0
            while at < bytes.count, bytes[at] >= 0x30, bytes[at] <= 0x39, at - start < 18 {
                value = value * 10 + Int64(bytes[at] - 0x30)
                at += 1
            }
            // No digits, a leading zero before more digits, more than 18 digits, or a fraction or exponent.
            guard at > start, !(bytes[start] == 0x30 && at - start > 1) else { return nil }
            if at < bytes.count, bytes[at] >= 0x30 && bytes[at] <= 0x39 || bytes[at] == UInt8(ascii: ".")
                || bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") { return nil }
            return negative ? -value : value
        }

        /// A quoted string with the escapes `JSONText.quoted` writes: `\"`, `\\`, `\n`, `\r`,
        /// `\t` and `\u00XX` below 0x20 (anything else: nil). Raw control characters are not JSON.
        mutating func string() -> String? {
            guard at < bytes.count, bytes[at] == 0x22 else { return nil }
            at += 1
            let start = at
            var escaped = false
            while at < bytes.count {
                let b = bytes[at]
                if b == 0x22 { break }
                if b < 0x20 { return nil }
                if b == 0x5C { escaped = true; at += 2; continue }
                at += 1
            }
            guard at < bytes.count else { return nil }
            let raw = UnsafeBufferPointer(rebasing: bytes[start..<at])
            at += 1
            guard escaped else { return String(decoding: raw, as: UTF8.self) }
            var out: [UInt8] = []
            out.reserveCapacity(raw.count)
            var i = 0
            while i < raw.count {
                guard raw[i] == 0x5C else { out.append(raw[i]); i += 1; continue }
                guard i + 1 < raw.count else { return nil }
                switch raw[i + 1] {
                case 0x22: out.append(0x22)
                case 0x5C: out.append(0x5C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    // \u00XX for a control character, as JSONText.quoted writes it.
                    guard i + 5 < raw.count, raw[i + 2] == 0x30, raw[i + 3] == 0x30,
                          let high = hexDigit(raw[i + 4]), let low = hexDigit(raw[i + 5]) else { return nil }
                    let value = high << 4 | low
                    guard value < 0x20 else { return nil }
                    out.append(value)
                    i += 6
                    continue
                default: return nil
                }
                i += 2
            }
            return String(decoding: out, as: UTF8.self)
        }

        func hexDigit(_ b: UInt8) -> UInt8? {
            switch b {
            case 0x30...0x39: return b - 0x30
            case 0x61...0x66: return b - 0x61 + 10
            case 0x41...0x46: return b - 0x41 + 10
            default: return nil
            }
        }
    }
}
