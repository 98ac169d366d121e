/// The platform a push token belongs to.
public enum Platform: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case ios = 1
    case android = 2

    /// Accepts the names the MPush SDKs send: `ios`, `android`, and `and`.
    public init?(name: String) {
        switch name.lowercased() {
        case "ios": self = .ios
        case "android", "and": self = .android
        default: return nil
        }
    }

    public var description: String { self == .ios ? "ios" : "android" }
}

/// A topic as named in a register command. `title` and `single` are what the
/// client sent; nil means "not sent" (a new topic then gets the code as title
/// and single = false; an existing topic keeps what it has).
public struct TopicSpec: Sendable, Hashable {
    public var code: String
    public var title: String?
    public var single: Bool?
    public init(code: String, title: String? = nil, single: Bool? = nil) {
        self.code = code
        self.title = title
        self.single = single
    }
}

/// What happened, self-describing: it names the project, device_id and topic
/// codes, never a local ordinal, so any node can fold it into its own projections.
public typealias EventBody = EventBodyOf<String>

/// An event's body with its device_ids and tokens as `Name`: `String` in an
/// `EventBody`, or `NameText` (the text held in a `NameArena`) in the
/// `FoldBody` a rebuild's log reader hands to the fold, which made a heap
/// string of every device_id and token and freed it after.
public enum EventBodyOf<Name> {
    /// A device_id gets a push token and platform (an upsert keyed by device_id).
    case token(deviceID: Name, token: Name, platform: Platform)
    /// Subscribe a device to topics, creating unknown topics.
    case register(deviceID: Name, topics: [TopicSpec])
    /// Remove a device from topics; unknown codes are ignored.
    case unregister(deviceID: Name, codes: [String])
    /// Remove a device from every topic.
    case unregisterAll(deviceID: Name)
    /// A provider refused a token at `rejectedAt` (milliseconds since 1970, the provider's clock).
    case tokenRejected(token: Name, rejectedAt: Int64, reason: String)
    /// Garbage collection: forget a device that has no topic and no live token
    /// (its ordinal, device_id and rejected token); any other device is left alone.
    case forgetDevice(deviceID: Name)
    /// Garbage collection: remove a topic without subscribers (its id and code).
    case dropTopic(code: String)
    /// Garbage collection: clear a token that a provider rejected (a live token is never cleared).
    case expireToken(token: Name)

    public var typeName: String {
        switch self {
        case .token: return "token"
        case .register: return "register"
        case .unregister: return "unregister"
        case .unregisterAll: return "unregister-all"
        case .tokenRejected: return "token-rejected"
        case .forgetDevice: return "forget-device"
        case .dropTopic: return "drop-topic"
        case .expireToken: return "expire-token"
        }
    }

    /// The device the event is about, when it names one.
    public var deviceID: Name? {
        switch self {
        case .token(let d, _, _), .register(let d, _), .unregister(let d, _), .unregisterAll(let d), .forgetDevice(let d): return d
        case .tokenRejected, .dropTopic, .expireToken: return nil
        }
    }

    /// The same event with each device_id and token given by `convert`.
    @inlinable
    public func mapNames<Other>(_ convert: (Name) throws -> Other) rethrows -> EventBodyOf<Other> {
        switch self {
        case .token(let d, let t, let p): return .token(deviceID: try convert(d), token: try convert(t), platform: p)
        case .register(let d, let topics): return .register(deviceID: try convert(d), topics: topics)
        case .unregister(let d, let codes): return .unregister(deviceID: try convert(d), codes: codes)
        case .unregisterAll(let d): return .unregisterAll(deviceID: try convert(d))
        case .tokenRejected(let t, let at, let reason): return .tokenRejected(token: try convert(t), rejectedAt: at, reason: reason)
        case .forgetDevice(let d): return .forgetDevice(deviceID: try convert(d))
        case .dropTopic(let code): return .dropTopic(code: code)
        case .expireToken(let t): return .expireToken(token: try convert(t))
        }
    }
}

extension EventBodyOf: Equatable where Name: Equatable {}
extension EventBodyOf: Hashable where Name: Hashable {}
extension EventBodyOf: Sendable where Name: Sendable {}

extension EventBodyOf where Name == String {
    /// Calls `body` with the event's `FoldBody`: its names' text where the strings hold it.
    /// `throws`, not `rethrows`: declared `rethrows`, an error thrown by `body` through
    /// `withUTF8Bytes` crashed the debug build releasing a register's topic list
    /// (Swift 6.x; `NameArenaTests.anErrorOfTheFoldPassesThroughEveryEventType`).
    public func withTexts(_ body: (FoldBody) throws -> Void) throws {
        switch self {
        case .token(let d, let t, let p):
            return try d.withUTF8Bytes { d in try t.withUTF8Bytes { t in
                try body(.token(deviceID: NameText(d), token: NameText(t), platform: p)) } }
        case .register(let d, let topics):
            return try d.withUTF8Bytes { try body(.register(deviceID: NameText($0), topics: topics)) }
        case .unregister(let d, let codes):
            return try d.withUTF8Bytes { try body(.unregister(deviceID: NameText($0), codes: codes)) }
        case .unregisterAll(let d):
            return try d.withUTF8Bytes { try body(.unregisterAll(deviceID: NameText($0))) }
        case .tokenRejected(let t, let at, let reason):
            return try t.withUTF8Bytes { try body(.tokenRejected(token: NameText($0), rejectedAt: at, reason: reason)) }
        case .forgetDevice(let d):
            return try d.withUTF8Bytes { try body(.forgetDevice(deviceID: NameText($0))) }
        case .dropTopic(let code):
            return try body(.dropTopic(code: code))
        case .expireToken(let t):
            return try t.withUTF8Bytes { try body(.expireToken(token: NameText($0))) }
        }
    }
}

/// One accepted command for one project.
public struct Event: Sendable, Hashable {
    public var project: String
    public var body: EventBody
    public init(project: String, body: EventBody) {
        self.project = project
        self.body = body
    }
}

/// An event as stored in the log: its gap-free sequence number and the time
/// (milliseconds since 1970, never decreasing along the log) it was appended.
public struct LogRecord: Sendable, Hashable {
    public var sequence: UInt64
    public var timestamp: Int64
    public var event: Event
    public init(sequence: UInt64, timestamp: Int64, event: Event) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.event = event
    }
}
