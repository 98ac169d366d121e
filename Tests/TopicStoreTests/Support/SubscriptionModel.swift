import Projections
import SubscriptionLog

/// The subscription rules written plainly, with dictionaries and sets, to
/// check the store's fold against. It shares no code with `Fold`.
struct SubscriptionModel {
    struct Device: Equatable {
        var token: String?
        var platform: Platform?
        var tokenTime: Int64 = 0
        var rejectedAt: Int64?
        var topics: Set<String> = []
        var isLive: Bool { token != nil && rejectedAt == nil }
    }
    struct Topic: Equatable {
        var title: String
        var single: Bool
    }
    struct Project {
        var devices: [String: Device] = [:]
        var topics: [String: Topic] = [:]
        /// token → device_id holding it now
        var tokenHolder: [String: String] = [:]

        func subscribers(_ code: String) -> Int { devices.values.filter { $0.topics.contains(code) }.count }
    }

    var projects: [String: Project] = [:]
    var lastSequence: UInt64 = 0

    mutating func apply(_ record: LogRecord) {
        precondition(record.sequence == lastSequence + 1)
        lastSequence = record.sequence
        var p = projects[record.event.project] ?? Project()
        switch record.event.body {
        case .token(let id, let token, let platform):
            var d = p.devices[id] ?? Device()
            if let holder = p.tokenHolder[token], holder != id {
                p.devices[holder]!.token = nil
                p.devices[holder]!.rejectedAt = nil
            }
            if let old = d.token, old != token { p.tokenHolder[old] = nil }
            d.token = token
            d.platform = platform
            d.tokenTime = record.timestamp
            d.rejectedAt = nil
            p.tokenHolder[token] = id
            p.devices[id] = d
        case .register(let id, let specs):
            var d = p.devices[id] ?? Device()
            for s in specs {
                var t = p.topics[s.code] ?? Topic(title: s.code, single: false)
                if let title = s.title { t.title = title }
                if let single = s.single { t.single = single }
                p.topics[s.code] = t
                d.topics.insert(s.code)
            }
            p.devices[id] = d
        case .unregister(let id, let codes):
            if p.devices[id] != nil { for c in codes { p.devices[id]!.topics.remove(c) } }
        case .unregisterAll(let id):
            if p.devices[id] != nil { p.devices[id]!.topics = [] }
        case .forgetDevice(let id):
            if let d = p.devices[id], !d.isLive, d.topics.isEmpty {
                if let t = d.token, p.tokenHolder[t] == id { p.tokenHolder[t] = nil }
                p.devices[id] = nil
            }
        case .dropTopic(let code):
            if p.topics[code] != nil, p.subscribers(code) == 0 { p.topics[code] = nil }
        case .expireToken(let token):
            if let holder = p.tokenHolder[token], var d = p.devices[holder], d.rejectedAt != nil {
                d.token = nil
                d.rejectedAt = nil
                p.devices[holder] = d
                p.tokenHolder[token] = nil
            }
        case .tokenRejected(let token, let providerTime, _):
            let at = min(providerTime, record.timestamp)  // never later than the store's clock
            if let holder = p.tokenHolder[token], var d = p.devices[holder], d.rejectedAt == nil, d.tokenTime <= at {
                d.rejectedAt = at
                p.devices[holder] = d
            }
        }
        projects[record.event.project] = p
    }

    /// Device ids matching `expression` in `project`.
    func audience(_ project: String, _ expression: AudienceExpression) -> Set<String> {
        guard let p = projects[project] else { return [] }
        func eval(_ e: AudienceExpression) -> Set<String> {
            switch e {
            case .topic(let code): return Set(p.devices.filter { $0.value.topics.contains(code) }.keys)
            case .platform(let platform): return Set(p.devices.filter { $0.value.isLive && $0.value.platform == platform }.keys)
            case .allDevices: return Set(p.devices.keys)
            case .and(let a, let b): return eval(a).intersection(eval(b))
            case .or(let a, let b): return eval(a).union(eval(b))
            case .not(let a): return Set(p.devices.keys).subtracting(eval(a))
            }
        }
        return eval(expression)
    }
}
