import Foundation
import SubscriptionLog

/// The JSON form of commands and log records: what `topicstore load` reads,
/// what `topicstore export` writes, and what the HTTP edge decodes.
///
/// ```
/// {"project":"demo","type":"token","device_id":"D1","token":"…","platform":"ios"}
/// {"project":"demo","type":"register","device_id":"D1","topics":[{"code":"news","title":"News","single":false}]}
/// {"project":"demo","type":"unregister","device_id":"D1","topics":["news"]}
/// {"project":"demo","type":"unregister-all","device_id":"D1"}
/// {"project":"demo","type":"token-rejected","token":"…","at":1764100807728,"reason":"Unregistered"}
/// ```
/// Exported records add `"seq"` and `"ts"` (ms since 1970).
public enum EventJSON {
    /// Decodes one command object. Every problem is reported with the field it is in.
    /// `rules`: `.logged` for a record an export holds (`import`), read as it was logged.
    public static func event(from object: [String: Any], defaultProject: String? = nil,
                             rules: Validation.Rules = .command) throws(InvalidCommand) -> Event {
        var errors: [ValidationError] = []
        let project = string(object, "project", required: defaultProject == nil, into: &errors) ?? defaultProject ?? ""
        let type = string(object, "type", required: true, into: &errors) ?? ""
        var body: EventBody?
        switch type {
        case "token":
            let deviceID = string(object, "device_id", required: true, into: &errors)
            let token = string(object, "token", required: true, into: &errors)
            let platformName = string(object, "platform", required: true, into: &errors)
            var platform: Platform?
            if let name = platformName {
                platform = Platform(name: name)
                if platform == nil {
                    errors.append(ValidationError(field: "platform", message: "The selected platform is invalid (ios or android)."))
                }
            }
            if let deviceID, let token, let platform { body = .token(deviceID: deviceID, token: token, platform: platform) }
        case "register":
            let deviceID = string(object, "device_id", required: true, into: &errors)
            let topics = topicSpecs(object["topics"], rules: rules, into: &errors)
            if let deviceID, let topics { body = .register(deviceID: deviceID, topics: topics) }
        case "unregister":
            let deviceID = string(object, "device_id", required: true, into: &errors)
            let topics = topicSpecs(object["topics"], into: &errors)
            if let deviceID, let topics { body = .unregister(deviceID: deviceID, codes: topics.map(\.code)) }
        case "unregister-all":
            if let deviceID = string(object, "device_id", required: true, into: &errors) { body = .unregisterAll(deviceID: deviceID) }
        case "token-rejected":
            let token = string(object, "token", required: true, into: &errors)
            let at = int64(object["at"])
            if at == nil { errors.append(ValidationError(field: "at", message: "The at field is required (ms since 1970).")) }
            let reason = string(object, "reason", required: false, into: &errors) ?? ""
            if let token, let at { body = .tokenRejected(token: token, rejectedAt: at, reason: reason) }
        case "forget-device":
            if let deviceID = string(object, "device_id", required: true, into: &errors) { body = .forgetDevice(deviceID: deviceID) }
        case "drop-topic":
            if let code = string(object, "code", required: true, into: &errors) { body = .dropTopic(code: code) }
        case "expire-token":
            if let token = string(object, "token", required: true, into: &errors) { body = .expireToken(token: token) }
        case "":
            break
        default:
            errors.append(ValidationError(field: "type",
                message: "The selected type is invalid (token, register, unregister, unregister-all, token-rejected, forget-device, drop-topic, expire-token)."))
        }
        guard errors.isEmpty, let body else { throw InvalidCommand(errors) }
        let event = Event(project: project, body: body)
        try Validation.validate(event, rules: rules)
        return event
    }

    /// The command a membership request's JSON body gives (`/api/register` and
    /// the like; `project` from its API key, `type` from its route), when the body
    /// is of the common shape: `device_id`, `token`, `platform` and `topics` as
    /// `load` reads them in one pass (`CommandLineScanner`), and a valid command.
    /// nil otherwise: the body is to be read as an object with `event(from:)`,
    /// which reads what this reads the same way and gives the errors. `body`
    /// must be valid UTF-8.
    public static func plainRequestEvent(_ body: UnsafeBufferPointer<UInt8>, project: String, type: String) -> Event? {
        CommandLineScanner.scanRequest(body, project: project, type: type)
    }

    /// Reads a posted audience's body of the plainest shape, `{"topics":["user.1",…]}`
    /// (one key, strings without escapes, JSON white space), in one pass: `code` is
    /// handed each code's bytes as a range of `body`'s. False when the body is of
    /// another shape, to be read as an object (some ranges may have been handed
    /// over by then). `body` must be valid UTF-8.
    public static func plainCodeList(_ body: UnsafeBufferPointer<UInt8>, _ code: (Range<Int>) -> Void) -> Bool {
        CommandLineScanner.scanCodeList(body, code)
    }

    /// Decodes one JSON text line into a command.
    public static func event(fromLine line: some StringProtocol, defaultProject: String? = nil) throws(InvalidCommand) -> Event {
        if let scanned = CommandLineScanner.scan(line, defaultProject: defaultProject) { return scanned.event }
        return try event(from: try object(fromLine: line), defaultProject: defaultProject)
    }

    /// A line with the time it carries: an exported record's `ts` (ms since
    /// 1970, within the years 2000…2200 like a rejection's `at`, so a time in
    /// seconds is refused rather than read as January 1970), nil when the line has none.
    public static func timedEvent(fromLine line: some StringProtocol, defaultProject: String? = nil)
        throws(InvalidCommand) -> (event: Event, timestamp: Int64?) {
        let (event, timestamp, _) = try exportedEvent(fromLine: line, defaultProject: defaultProject)
        return (event, timestamp)
    }

    /// `timedEvent` and the line's `seq`, when it has one (a line of `topicstore export`).
    public static func exportedEvent(fromLine line: some StringProtocol, defaultProject: String? = nil)
        throws(InvalidCommand) -> (event: Event, timestamp: Int64?, sequence: UInt64?) {
        if let scanned = CommandLineScanner.scan(line, defaultProject: defaultProject) { return scanned }
        return try generalExportedEvent(fromLine: line, defaultProject: defaultProject)
    }

    /// `exportedEvent` through a JSON object tree: any line JSON allows, and the errors.
    static func generalExportedEvent(fromLine line: some StringProtocol, defaultProject: String? = nil)
        throws(InvalidCommand) -> (event: Event, timestamp: Int64?, sequence: UInt64?) {
        let dict = try object(fromLine: line)
        let sequence = dict["seq"].flatMap(int64).flatMap { $0 > 0 ? UInt64($0) : nil }
        var timestamp: Int64?
        if let value = dict["ts"] {
            guard let ts = int64(value), Limits.rejectedAtRange.contains(ts) else {
                throw InvalidCommand([ValidationError(field: "ts", message:
                    "The ts must be a time in milliseconds since 1970, between the years 2000 and 2200 (a time in seconds is refused).")])
            }
            timestamp = ts
        }
        return (try event(from: dict, defaultProject: defaultProject), timestamp, sequence)
    }

    private static func object(fromLine line: some StringProtocol) throws(InvalidCommand) -> [String: Any] {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(line.utf8), options: [.fragmentsAllowed])
        } catch {
            throw InvalidCommand([ValidationError(field: "line", message: "The line is not valid JSON.")])
        }
        guard let dict = object as? [String: Any] else {
            throw InvalidCommand([ValidationError(field: "line", message: "The line must be a JSON object.")])
        }
        return dict
    }

    /// `topics` as the SDKs send it: an array of objects `{code, title?, single?}`
    /// or of plain codes, or a string that contains such a JSON array. In a command a
    /// title is trimmed and an empty or blank one is no title, as MPush reads it (Laravel's
    /// TrimStrings and ConvertEmptyStringsToNull): a new topic is titled with its code, an
    /// existing one keeps its title. A logged record keeps the title it holds.
    public static func topicSpecs(_ value: Any?, rules: Validation.Rules = .command, into errors: inout [ValidationError]) -> [TopicSpec]? {
        var value = value
        if let text = value as? String {
            guard let parsed = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) else {
                errors.append(ValidationError(field: "topics", message: "The topics must be an array."))
                return nil
            }
            value = parsed
        }
        guard let value else {
            errors.append(ValidationError(field: "topics", message: "The topics field is required."))
            return nil
        }
        // Plain codes, as a list of users is sent: one cast of the array, not one per code.
        if let codes = value as? [String] { return codes.map { TopicSpec(code: $0) } }
        guard let array = value as? [Any] else {
            errors.append(ValidationError(field: "topics", message: "The topics must be an array."))
            return nil
        }
        var specs: [TopicSpec] = []
        let before = errors.count
        for (i, item) in array.enumerated() {
            if let code = item as? String {
                specs.append(TopicSpec(code: code))
            } else if let object = item as? [String: Any] {
                guard let code = object["code"] as? String else {
                    errors.append(ValidationError(field: "topics.\(i).code", message: "The topic code is required."))
                    continue
                }
                var title: String? = nil
                if let t = object["title"], !(t is NSNull) {
                    if let t = t as? String { title = rules == .command ? Validation.trimmed(t) : t } else {
                        errors.append(ValidationError(field: "topics.\(i).title", message: "The title must be a string."))
                    }
                }
                var single: Bool? = nil
                if let s = object["single"], !(s is NSNull) {
                    single = lenientBool(s)
                    if single == nil {
                        errors.append(ValidationError(field: "topics.\(i).single", message: "The single field must be true or false."))
                    }
                }
                specs.append(TopicSpec(code: code, title: title, single: single))
            } else {
                errors.append(ValidationError(field: "topics.\(i)", message: "A topic must be a code or an object with a code."))
            }
        }
        return errors.count == before ? specs : nil
    }

    /// true/false, 1/0 and "true"/"false"/"1"/"0", as SDKs send them; any other number is
    /// refused (0.5 truncated to 0 and was read as false).
    public static func lenientBool(_ value: Any) -> Bool? {
        if let n = value as? NSNumber {
            // NSNumber bridges JSON true/false, integers and fractions alike.
            if isBoolean(n) { return n.boolValue }
            switch n.doubleValue { case 0: return false; case 1: return true; default: return nil }
        }
        if let s = value as? String {
            switch s.lowercased() {
            case "true", "1": return true
            case "false", "0": return false
            default: return nil
            }
        }
        return nil
    }

    /// JSON true/false decode as a boolean NSNumber (objCType "c"), integers do not.
    public static func isBoolean(_ n: NSNumber) -> Bool {
        String(cString: n.objCType) == "c"
    }

    static func string(_ object: [String: Any], _ key: String, required: Bool, into errors: inout [ValidationError]) -> String? {
        guard let value = object[key], !(value is NSNull) else {
            if required { errors.append(ValidationError(field: key, message: "The \(key.replacingOccurrences(of: "_", with: " ")) field is required.")) }
            return nil
        }
        if let s = value as? String { return s }
        errors.append(ValidationError(field: key, message: "The \(key.replacingOccurrences(of: "_", with: " ")) must be a string."))
        return nil
    }

    static func int64(_ value: Any?) -> Int64? {
        if let n = value as? NSNumber, !isBoolean(n) {
            let d = n.doubleValue
            guard d == d.rounded(), abs(d) < 9e15 else { return nil }
            return n.int64Value
        }
        if let s = value as? String { return Int64(s) }
        return nil
    }

    // MARK: Encoding

    /// One log record as a JSON line (no newline), in the schema `event(from:)` reads, plus `seq` and `ts`,
    /// `link` (the record's chain link, 64 hex digits) when given: an export's checkpoints, and
    /// `"unchained":true` for a record of the version before the hash chain.
    public static func line(_ record: LogRecord, link: ChainHash? = nil, unchained: Bool = false) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        appendLine(record, link: link, unchained: unchained, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `line`, appended to `out` as UTF-8. Written as bytes: appended to a String piece by
    /// piece, the line was half of `export`'s time (perf: `_StringGuts.append` and the
    /// growth checks before each piece).
    public static func appendLine(_ record: LogRecord, link: ChainHash? = nil, unchained: Bool = false, to out: inout [UInt8]) {
        func raw(_ s: StaticString) { s.withUTF8Buffer { out.append(contentsOf: $0) } }
        func quoted(_ s: String) { s.withUTF8Bytes { JSONText.appendQuoted($0, to: &out, lineSeparators: false) } }
        func field(_ name: StaticString, _ value: String) {
            raw(",\"")
            raw(name)
            raw("\":")
            quoted(value)
        }
        raw("{\"seq\":")
        JSONText.appendDecimal(record.sequence, to: &out)
        raw(",\"ts\":")
        JSONText.appendDecimal(record.timestamp, to: &out)
        raw(",\"project\":")
        quoted(record.event.project)
        raw(",\"type\":\"")
        out.append(contentsOf: record.event.body.typeName.utf8)
        raw("\"")
        switch record.event.body {
        case .token(let d, let t, let p):
            field("device_id", d)
            field("token", t)
            raw(",\"platform\":\"")
            out.append(contentsOf: p.description.utf8)
            raw("\"")
        case .register(let d, let topics):
            field("device_id", d)
            raw(",\"topics\":[")
            for i in topics.indices {
                if i > 0 { raw(",") }
                raw("{\"code\":")
                quoted(topics[i].code)
                if let title = topics[i].title {
                    raw(",\"title\":")
                    quoted(title)
                }
                if let single = topics[i].single { single ? raw(",\"single\":true") : raw(",\"single\":false") }
                raw("}")
            }
            raw("]")
        case .unregister(let d, let codes):
            field("device_id", d)
            raw(",\"topics\":[")
            for i in codes.indices {
                if i > 0 { raw(",") }
                quoted(codes[i])
            }
            raw("]")
        case .unregisterAll(let d):
            field("device_id", d)
        case .tokenRejected(let t, let at, let reason):
            field("token", t)
            raw(",\"at\":")
            JSONText.appendDecimal(at, to: &out)
            field("reason", reason)
        case .forgetDevice(let d):
            field("device_id", d)
        case .dropTopic(let code):
            field("code", code)
        case .expireToken(let t):
            field("token", t)
        }
        if let link {
            raw(",\"link\":\"")
            out.append(contentsOf: link.hex.utf8)
            raw("\"")
        }
        if unchained { raw(",\"unchained\":true") }
        raw("}")
    }
}
