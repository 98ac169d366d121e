import SubscriptionLog

/// Reads a command line of the common shape — a JSON object of the keys
/// `EventJSON` knows, in any order, with string values without escapes,
/// integers without fraction or exponent, `topics` as an array of codes or of
/// `{code, title, single}` objects — in one pass over its bytes, without
/// building a JSON object tree. `load` spent about 70% of its parsing thread in
/// `JSONSerialization` and in casting its values (callgrind, 261,100 lines),
/// and that thread, not the writer, set its pace.
///
/// Anything else — an escape, `null` where a string is due, a number with a
/// fraction, an unknown or repeated key, a missing field, a command that fails
/// validation — is nil, and the caller reads the line the general way, which
/// also gives the errors. So the result, where there is one, is what the general
/// reading gives (a property test compares the two, as for `ExportLineParser`).
enum CommandLineScanner {
    typealias Result = (event: Event, timestamp: Int64?, sequence: UInt64?)

    static func scan(_ line: some StringProtocol, defaultProject: String?) -> Result? {
        var text = String(line)
        return text.withUTF8 { bytes in
            var scanner = Scanner(bytes: bytes)
            return scanner.command(defaultProject: defaultProject)
        }
    }

    /// A membership request's JSON body (`/api/tokens`, `/api/register`,
    /// `/api/unregister`, `/api/unregister-all`) of the common shape, read as a
    /// line is: its keys only `device_id`, `token`, `platform` and `topics`, its
    /// project and type given (the API key's project, the route's command). nil
    /// for any other body, which the caller reads the general way. `body` must
    /// be valid UTF-8.
    static func scanRequest(_ body: UnsafeBufferPointer<UInt8>, project: String, type: String) -> Event? {
        var scanner = Scanner(bytes: body)
        return scanner.command(defaultProject: nil, given: (project, type))?.event
    }

    /// A posted audience's body of the plainest shape, `{"topics":["user.1",…]}`:
    /// one key, its array of strings without escapes or control characters,
    /// JSON white space anywhere. Hands `code` each string's bytes as a range of
    /// `body`'s, in order, and says whether the body is of that shape (when it
    /// is not, some ranges may have been handed over already).
    static func scanCodeList(_ body: UnsafeBufferPointer<UInt8>, _ code: (Range<Int>) -> Void) -> Bool {
        var scanner = Scanner(bytes: body)
        var listed = false
        scanner.skipSpace()
        let read = scanner.object(keys: Scanner.codeListKeys) { s, _ in
            listed = true
            guard s.take(UInt8(ascii: "[")) else { return false }
            s.skipSpace()
            if s.take(UInt8(ascii: "]")) { return true }
            while true {
                guard let r = s.rawRange() else { return false }
                code(r)
                s.skipSpace()
                if s.take(UInt8(ascii: "]")) { return true }
                guard s.take(UInt8(ascii: ",")) else { return false }
                s.skipSpace()
            }
        }
        guard read, listed else { return false }
        scanner.skipSpace()
        return scanner.at == body.count
    }

    /// A topic as a command gives it: a plain code, or an object.
    private struct Topic {
        var code: String
        var title: String? = nil
        var single: Bool? = nil
    }

    private struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        var at = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        /// The command of the object at `at`. With `given`, the object names
        /// neither its project nor its type, nor a rejection's or an export's fields
        /// (`requestKeys`): a request body's keys.
        mutating func command(defaultProject: String?, given: (project: String, type: String)? = nil) -> Result? {
            let allowed: UInt32 = given == nil ? ~0 : Self.requestKeys
            var project: String?, type: String?, deviceID: String?, token: String?, platform: String?
            var reason: String?, code: String?, topics: [Topic]?
            var rejectedAt: Int64?, sequence: Int64?, timestamp: Int64?
            skipSpace()
            let read = object(keys: Self.keys) { scanner, index in
                guard allowed & (1 << index) != 0 else { return false }
                switch index {
                case 0: project = scanner.string(); return project != nil
                case 1: type = scanner.string(); return type != nil
                case 2: deviceID = scanner.string(); return deviceID != nil
                case 3: token = scanner.string(); return token != nil
                case 4: platform = scanner.string(); return platform != nil
                case 5: reason = scanner.string(); return reason != nil
                case 6: code = scanner.string(); return code != nil
                case 7: topics = scanner.topicList(); return topics != nil
                case 8: rejectedAt = scanner.integer(); return rejectedAt != nil
                case 9: sequence = scanner.integer(); return sequence != nil
                default: timestamp = scanner.integer(); return timestamp != nil
                }
            }
            guard read else { return nil }
            skipSpace()
            guard at == bytes.count else { return nil }

            if let timestamp, !Limits.rejectedAtRange.contains(timestamp) { return nil }
            guard let project = given?.project ?? project ?? defaultProject, let type = given?.type ?? type else { return nil }
            let body: EventBody
            switch type {
            case "token":
                guard let deviceID, let token, let name = platform, let platform = Platform(name: name) else { return nil }
                body = .token(deviceID: deviceID, token: token, platform: platform)
            case "register":
                guard let deviceID, let topics else { return nil }
                body = .register(deviceID: deviceID, topics: topics.map {
                    TopicSpec(code: $0.code, title: $0.title.flatMap(Validation.trimmed), single: $0.single)
                })
            case "unregister":
                guard let deviceID, let topics else { return nil }
                body = .unregister(deviceID: deviceID, codes: topics.map(\.code))
            case "unregister-all":
                guard let deviceID else { return nil }
                body = .unregisterAll(deviceID: deviceID)
            case "token-rejected":
                guard let token, let rejectedAt else { return nil }
                body = .tokenRejected(token: token, rejectedAt: rejectedAt, reason: reason ?? "")
            case "forget-device":
                guard let deviceID else { return nil }
                body = .forgetDevice(deviceID: deviceID)
            case "drop-topic":
                guard let code else { return nil }
                body = .dropTopic(code: code)
            case "expire-token":
                guard let token else { return nil }
                body = .expireToken(token: token)
            default:
                return nil
            }
            let event = Event(project: project, body: body)
            do { try Validation.validate(event, rules: .command) } catch { return nil }
            return (event, timestamp, sequence.flatMap { $0 > 0 ? UInt64($0) : nil })
        }

        /// The keys of a command, by their index in `seen`.
        static let keys: [[UInt8]] = ["project", "type", "device_id", "token", "platform", "reason", "code",
                                      "topics", "at", "seq", "ts"].map { Array($0.utf8) }
        /// Of `keys`, those a membership request's body may give: `device_id`, `token`, `platform`, `topics`.
        static let requestKeys: UInt32 = 1 << 2 | 1 << 3 | 1 << 4 | 1 << 7
        /// The one key of a posted list of codes (`scanCodeList`).
        static let codeListKeys: [[UInt8]] = [Array("topics".utf8)]
        static let topicKeys: [[UInt8]] = ["code", "title", "single"].map { Array($0.utf8) }

        /// `[` codes or topic objects `]`.
        mutating func topicList() -> [Topic]? {
            guard take(UInt8(ascii: "[")) else { return nil }
            var topics: [Topic] = []
            skipSpace()
            if take(UInt8(ascii: "]")) { return topics }
            while true {
                if peek() == UInt8(ascii: "\"") {
                    guard let code = string() else { return nil }
                    topics.append(Topic(code: code))
                } else {
                    guard let topic = topicObject() else { return nil }
                    topics.append(topic)
                }
                skipSpace()
                if take(UInt8(ascii: "]")) { return topics }
                guard take(UInt8(ascii: ",")) else { return nil }
                skipSpace()
            }
        }

        /// `{"code":…, "title":…|null, "single":true|false|null}`, the code required.
        mutating func topicObject() -> Topic? {
            var code: String?, title: String?, single: Bool?
            let read = object(keys: Self.topicKeys) { scanner, index in
                switch index {
                case 0:
                    code = scanner.string()
                    return code != nil
                case 1:
                    if scanner.takeWord("null") { return true }
                    title = scanner.string()
                    return title != nil
                default:
                    if scanner.takeWord("true") { single = true } else if scanner.takeWord("false") { single = false } else { return scanner.takeWord("null") }
                    return true
                }
            }
            guard read, let code else { return nil }
            return Topic(code: code, title: title, single: single)
        }

        /// `{ "key": value, … }` with keys from `keys`, each at most once (which of two
        /// a reader keeps is not ours to guess); `value` reads the value of the key at
        /// its index in `keys` and says whether it could. False at anything else.
        mutating func object(keys: [[UInt8]], _ value: (inout Scanner, Int) -> Bool) -> Bool {
            guard take(UInt8(ascii: "{")) else { return false }
            var seen: UInt32 = 0
            skipSpace()
            if take(UInt8(ascii: "}")) { return true }
            while true {
                guard let key = rawString() else { return false }
                skipSpace()
                guard take(UInt8(ascii: ":")) else { return false }
                skipSpace()
                guard let index = keys.firstIndex(where: { $0.elementsEqual(key) }), seen & (1 << index) == 0 else { return false }
                seen |= 1 << index
                guard value(&self, index) else { return false }
                skipSpace()
                if take(UInt8(ascii: "}")) { return true }
                guard take(UInt8(ascii: ",")) else { return false }
                skipSpace()
            }
        }

        /// A string's bytes between its quotes: nil at an escape or a control
        /// character (the general reading handles the one, refuses the other).
        mutating func rawString() -> UnsafeBufferPointer<UInt8>? {
            rawRange().map { UnsafeBufferPointer(rebasing: bytes[$0]) }
        }

        /// `rawString`'s bytes as a range of the line's.
        mutating func rawRange() -> Range<Int>? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = at
            while at < bytes.count {
                let b = bytes[at]
                if b == UInt8(ascii: "\"") {
                    at += 1
                    return start..<at - 1
                }
                if b == UInt8(ascii: "\\") || b < 0x20 { return nil }
                at += 1
            }
            return nil
        }

        /// The line is valid UTF-8 and the quotes are ASCII, so the bytes between are text as they are.
        mutating func string() -> String? {
            rawString().map { String(decoding: $0, as: UTF8.self) }
        }

        /// An integer of at most 15 digits (exact in a double, as the general reading
        /// takes numbers), no leading zero; nil for a fraction or an exponent.
        mutating func integer() -> Int64? {
            let negative = take(UInt8(ascii: "-"))
            let start = at
            var value: Int64 = 0
            while at < bytes.count, bytes[at] >= UInt8(ascii: "0"), bytes[at] <= UInt8(ascii: "9") {
                value = value * 10 + Int64(bytes[at] - UInt8(ascii: "0"))
                at += 1
            }
            let digits = at - start
            guard digits > 0, digits <= 15, digits == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
            if let next = peek(), next == UInt8(ascii: ".") || next == UInt8(ascii: "e") || next == UInt8(ascii: "E") { return nil }
            return negative ? -value : value
        }

        mutating func takeWord(_ word: StaticString) -> Bool {
            let n = word.utf8CodeUnitCount
            guard bytes.count - at >= n else { return false }
            for i in 0..<n where bytes[at + i] != word.utf8Start[i] { return false }
            at += n
            return true
        }

        func peek() -> UInt8? { at < bytes.count ? bytes[at] : nil }

        mutating func take(_ byte: UInt8) -> Bool {
            guard at < bytes.count, bytes[at] == byte else { return false }
            at += 1
            return true
        }

        mutating func skipSpace() {
            while at < bytes.count {
                switch bytes[at] {
                case 0x20, 0x09, 0x0A, 0x0D: at += 1
                default: return
                }
            }
        }
    }
}
