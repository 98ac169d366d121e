import Foundation

/// A queued notification and its progress, as kept in the `notifications` table (JSON, members in a fixed order).
public struct NotificationRecord: Sendable, Equatable {
    public enum Status: String, Sendable { case queued, processing, completed }

    public var id: String
    public var project: String
    public var projectID: UInt32
    public var status: Status
    public var createdAt: Int64
    public var updatedAt: Int64
    public var completedAt: Int64?
    public var priority: String
    public var topics: [String]
    public var expr: String?
    /// The request's `payload` as sent (it is rendered again from this after a restart).
    public var payload: JSONValue
    /// The log sequence of the audience snapshot the send is pinned to.
    public var asOfSeq: UInt64
    /// Reachable devices at `asOfSeq`, split by platform.
    public var totalDevices: Int
    public var iosCount: Int
    public var androidCount: Int
    public var sentCount = 0
    public var failedCount = 0
    /// The next device ordinal to deliver to (durable progress); nil once every device is done.
    public var cursor: UInt32?
    public var failures: [String: Int] = [:]
    public var rejectedTokens = 0
    /// The rejections of the batch in flight, recorded before their token-rejected events are
    /// submitted and cleared with the cursor that ends the batch: after a crash between the two,
    /// the batch read again counts these devices (no longer live) as the rejections they were.
    public var batchRejections: [BatchRejection] = []
    /// Devices past the cursor that a stopped worker had finished (pushed, or failed for good),
    /// already counted: the batch read again after the restart skips them instead of pushing
    /// them again. Cleared as the cursor passes them.
    public var finishedAhead: [UInt32] = []
    public var opens = 0
    public var buttonOpens: [String: Int] = [:]

    public init(id: String, project: String, projectID: UInt32, createdAt: Int64, priority: String, topics: [String], expr: String?,
                payload: JSONValue, asOfSeq: UInt64, totalDevices: Int, iosCount: Int, androidCount: Int) {
        self.id = id
        self.project = project
        self.projectID = projectID
        self.status = .queued
        self.createdAt = createdAt
        self.updatedAt = createdAt
        self.priority = priority
        self.topics = topics
        self.expr = expr
        self.payload = payload
        self.asOfSeq = asOfSeq
        self.totalDevices = totalDevices
        self.iosCount = iosCount
        self.androidCount = androidCount
        self.cursor = totalDevices > 0 ? 0 : nil
    }

    static func num<I: BinaryInteger>(_ n: I) -> JSONValue { .number(String(n)) }
    static func counts(_ d: [String: Int]) -> JSONValue {
        .object(d.keys.sorted().map { JSONMember($0, num(d[$0]!)) })
    }

    /// The stored form.
    var json: JSONValue {
        var m: [JSONMember] = [
            JSONMember("id", .string(id)), JSONMember("project", .string(project)), JSONMember("projectID", Self.num(projectID)),
            JSONMember("status", .string(status.rawValue)), JSONMember("createdAt", Self.num(createdAt)),
            JSONMember("updatedAt", Self.num(updatedAt)), JSONMember("completedAt", completedAt.map(Self.num) ?? .null),
            JSONMember("priority", .string(priority)), JSONMember("topics", .array(topics.map { .string($0) })),
            JSONMember("expr", expr.map { .string($0) } ?? .null), JSONMember("payload", payload),
            JSONMember("asOfSeq", Self.num(asOfSeq)), JSONMember("totalDevices", Self.num(totalDevices)),
            JSONMember("iosCount", Self.num(iosCount)), JSONMember("androidCount", Self.num(androidCount)),
            JSONMember("sentCount", Self.num(sentCount)), JSONMember("failedCount", Self.num(failedCount)),
            JSONMember("cursor", cursor.map(Self.num) ?? .null), JSONMember("failures", Self.counts(failures)),
            JSONMember("rejectedTokens", Self.num(rejectedTokens)),
            JSONMember("opens", Self.num(opens)), JSONMember("buttonOpens", Self.counts(buttonOpens)),
        ]
        if !batchRejections.isEmpty {
            m.append(JSONMember("batchRejections", .array(batchRejections.map {
                .object([JSONMember("ordinal", Self.num($0.ordinal)), JSONMember("token", .string($0.token)),
                         JSONMember("reason", .string($0.reason))])
            })))
        }
        if !finishedAhead.isEmpty {
            m.append(JSONMember("finishedAhead", .array(finishedAhead.map(Self.num))))
        }
        m.append(JSONMember("version", .number("1")))
        return .object(m)
    }

    init(decoding bytes: [UInt8], at place: String) throws(NotificationCorruption) {
        guard let v = try? JSONParser.parse(bytes), case .object = v else { throw NotificationCorruption(place: place, reason: "not a JSON object") }
        func str(_ k: String) throws(NotificationCorruption) -> String {
            guard let s = v[k]?.stringValue else { throw NotificationCorruption(place: place, reason: "\(k) missing") }
            return s
        }
        func int(_ k: String) throws(NotificationCorruption) -> Int64 {
            guard let n = v[k]?.integer() else { throw NotificationCorruption(place: place, reason: "\(k) missing") }
            return n
        }
        func countMap(_ k: String) -> [String: Int] {
            guard case .object(let members)? = v[k] else { return [:] }
            var d: [String: Int] = [:]
            for m in members { d[m.key] = Int(m.value.integer() ?? 0) }
            return d
        }
        id = try str("id")
        project = try str("project")
        projectID = UInt32(truncatingIfNeeded: try int("projectID"))
        guard let s = Status(rawValue: try str("status")) else { throw NotificationCorruption(place: place, reason: "bad status") }
        status = s
        createdAt = try int("createdAt")
        updatedAt = try int("updatedAt")
        completedAt = v["completedAt"]?.integer()
        priority = try str("priority")
        guard case .array(let t)? = v["topics"] else { throw NotificationCorruption(place: place, reason: "topics missing") }
        topics = t.compactMap(\.stringValue)
        expr = v["expr"]?.stringValue
        guard let p = v["payload"] else { throw NotificationCorruption(place: place, reason: "payload missing") }
        payload = p
        asOfSeq = UInt64(try int("asOfSeq"))
        totalDevices = Int(try int("totalDevices"))
        iosCount = Int(try int("iosCount"))
        androidCount = Int(try int("androidCount"))
        sentCount = Int(try int("sentCount"))
        failedCount = Int(try int("failedCount"))
        cursor = v["cursor"]?.integer().map { UInt32(truncatingIfNeeded: $0) }
        failures = countMap("failures")
        rejectedTokens = Int(v["rejectedTokens"]?.integer() ?? 0)
        if case .array(let items)? = v["batchRejections"] {
            for item in items {
                guard let o = item["ordinal"]?.integer(), let t = item["token"]?.stringValue, let r = item["reason"]?.stringValue else {
                    throw NotificationCorruption(place: place, reason: "batchRejections entry incomplete")
                }
                batchRejections.append(BatchRejection(ordinal: UInt32(truncatingIfNeeded: o), token: t, reason: r))
            }
        }
        if case .array(let items)? = v["finishedAhead"] {
            for item in items {
                guard let o = item.integer() else { throw NotificationCorruption(place: place, reason: "finishedAhead entry not an ordinal") }
                finishedAhead.append(UInt32(truncatingIfNeeded: o))
            }
        }
        opens = Int(v["opens"]?.integer() ?? 0)
        buttonOpens = countMap("buttonOpens")
    }

    /// The status document of `GET /api/notifications/{id}` (the seed's keys, plus our extensions).
    public var statusDocument: JSONValue {
        var notification = payload
        if case .object(let m) = payload { notification = .object(m) }
        let projectNumber: JSONValue = Self.num(projectID)
        var m: [JSONMember] = [
            JSONMember("id", .string(id)), JSONMember("projectId", projectNumber), JSONMember("project", .string(project)),
            JSONMember("status", .string(status.rawValue)), JSONMember("createdAt", Self.num(createdAt)),
            JSONMember("updatedAt", Self.num(updatedAt)),
        ]
        if let c = completedAt { m.append(JSONMember("completedAt", Self.num(c))) }
        m += [
            JSONMember("priority", .string(priority)), JSONMember("topics", .array(topics.map { .string($0) })),
        ]
        if let e = expr { m.append(JSONMember("expr", .string(e))) }
        m += [
            JSONMember("notification", notification), JSONMember("asOfSeq", Self.num(asOfSeq)),
            JSONMember("totalDevices", Self.num(totalDevices)), JSONMember("sentCount", Self.num(sentCount)),
            JSONMember("failedCount", Self.num(failedCount)), JSONMember("iosCount", Self.num(iosCount)),
            JSONMember("androidCount", Self.num(androidCount)), JSONMember("failures", Self.counts(failures)),
            JSONMember("rejectedTokens", Self.num(rejectedTokens)),
            JSONMember("opens", Self.num(opens)), JSONMember("buttonOpens", Self.counts(buttonOpens)),
        ]
        return .object(m)
    }
}

/// A device of the batch in flight whose token the provider rejected.
public struct BatchRejection: Sendable, Equatable {
    public var ordinal: UInt32
    public var token: String
    public var reason: String
    public init(ordinal: UInt32, token: String, reason: String) {
        self.ordinal = ordinal
        self.token = token
        self.reason = reason
    }
}

public struct NotificationCorruption: Error, Sendable, CustomStringConvertible {
    public var place: String
    public var reason: String
    public init(place: String, reason: String) {
        self.place = place
        self.reason = reason
    }
    public var description: String { "corrupt notification record at \(place): \(reason)" }
}
