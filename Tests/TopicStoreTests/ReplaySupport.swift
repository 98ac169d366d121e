import Foundation
import LMDB
import Projections
import Replay
import Roaring
import SubscriptionLog
import TopicStore

typealias ReplayTempDir = TemporaryDirectory
typealias ReplayRandom = SeededRandom

/// Random commands over a few projects, devices, tokens and topics, with
/// every event type, token moves and rejections before and after token changes.
struct ReplayWorkload {
    var random: ReplayRandom
    let projects = ["alpha", "beta"]
    let devices = (0..<14).map { "dev-\($0)" }
    let tokens = (0..<18).map { "tok\($0)" }
    let topics = ["news", "sport", "all", "user.1", "promo", "weather"]

    init(seed: UInt64) { random = ReplayRandom(seed: seed) }

    mutating func next(now: Int64) -> Event {
        let project = random.int(5) == 0 ? projects[1] : projects[0]
        let device = random.pick(devices)
        switch random.int(20) {
        case 0..<5:
            return Event(project: project, body: .token(deviceID: device, token: random.pick(tokens),
                                                        platform: random.int(2) == 0 ? .ios : .android))
        case 5..<12:
            let n = 1 + random.int(3)
            let specs = (0..<n).map { _ -> TopicSpec in
                let code = random.pick(topics)
                switch random.int(4) {
                case 0: return TopicSpec(code: code, title: "T \(code) \(random.int(3))", single: random.int(2) == 0)
                case 1: return TopicSpec(code: code, title: nil, single: true)
                default: return TopicSpec(code: code)
                }
            }
            return Event(project: project, body: .register(deviceID: device, topics: specs))
        case 12..<16:
            return Event(project: project, body: .unregister(deviceID: device, codes: [random.pick(topics), random.pick(topics)]))
        case 16:
            return Event(project: project, body: .unregisterAll(deviceID: device))
        default:
            // Around the store's clock: some rejections predate the token, some follow it.
            let at = now + Int64(random.int(4000)) - 2000
            return Event(project: project, body: .tokenRejected(token: random.pick(tokens), rejectedAt: at, reason: "Unregistered"))
        }
    }
}

/// Every entry of every table of a store (log included), as bytes.
typealias ReplayTableDump = [String: [[UInt8]: [UInt8]]]

func replayDumpTables(_ store: TopicStore, includeLog: Bool = true) throws -> ReplayTableDump {
    try replayDumpTables(store.environment, tables: store.tables, log: includeLog ? store.log : nil)
}

func replayDumpTables(_ env: Environment, tables: ProjectionTables, log: EventLog?) throws -> ReplayTableDump {
    var dump: ReplayTableDump = [:]
    try env.read { txn in
        var dbs = tables.all
        if let log { dbs.append(log.database) }
        for db in dbs {
            var entries: [[UInt8]: [UInt8]] = [:]
            try txn.withCursor(db) { c in
                var e = try c.first()
                while let (k, v) = e {
                    if db.name == "postings" {
                        // A posting chunk's bytes depend on the history of its roaring
                        // containers (run vs array on a size tie) and on its format (compact,
                        // or portable before schema 10); its content is the set.
                        entries[Array(k)] = try Bitmap(chunk: v, high: k.loadBigEndian(at: 4, as: UInt16.self)).toArray().flatMap { withUnsafeBytes(of: $0.bigEndian) { Array($0) } }
                    } else {
                        entries[Array(k)] = Array(v)
                    }
                    e = try c.next()
                }
            }
            dump[db.name] = entries
        }
    }
    return dump
}

/// Differences between two dumps, named by table (empty when equal).
func replayDumpDifferences(_ a: ReplayTableDump, _ b: ReplayTableDump) -> [String] {
    var out: [String] = []
    for name in Set(a.keys).union(b.keys).sorted() {
        let x = a[name] ?? [:], y = b[name] ?? [:]
        for k in Set(x.keys).union(y.keys) where x[k] != y[k] {
            out.append("\(name) key \(k): \(x[k].map { "\($0)" } ?? "absent") vs \(y[k].map { "\($0)" } ?? "absent")")
        }
    }
    return out
}

func replayOpenReadOnly(_ directory: String) throws -> TopicStore {
    var options = TopicStore.Options()
    options.readOnly = true
    return try TopicStore(directory: directory, options: options)
}

/// The plain in-memory model of what the projections should say.
struct ReplayModel {
    struct Device { var token: String?; var platform: Platform?; var tokenTime: Int64 = 0; var rejected = false }
    struct Project { var devices: [String: Device] = [:]; var topics: [String: Set<String>] = [:] }
    var projects: [String: Project] = [:]

    mutating func apply(_ e: Event, at time: Int64) {
        var p = projects[e.project] ?? Project()
        switch e.body {
        case .token(let d, let t, let platform):
            for (id, var other) in p.devices where id != d && other.token == t {
                other.token = nil; other.rejected = false; p.devices[id] = other
            }
            p.devices[d] = Device(token: t, platform: platform, tokenTime: time, rejected: false)
        case .register(let d, let specs):
            if p.devices[d] == nil { p.devices[d] = Device() }
            for s in specs { p.topics[s.code, default: []].insert(d) }
        case .unregister(let d, let codes):
            for c in codes { p.topics[c]?.remove(d) }
        case .unregisterAll(let d):
            for c in p.topics.keys { p.topics[c]?.remove(d) }
        case .forgetDevice(let d):
            if let dev = p.devices[d], dev.token == nil || dev.rejected, !p.topics.values.contains(where: { $0.contains(d) }) { p.devices[d] = nil }
        case .dropTopic(let code):
            if p.topics[code]?.isEmpty ?? false { p.topics[code] = nil }
        case .expireToken(let t):
            if let (id, dev) = p.devices.first(where: { $0.value.token == t }), dev.rejected {
                p.devices[id]!.token = nil
                p.devices[id]!.rejected = false
            }
        case .tokenRejected(let t, let at, _):
            if let (id, dev) = p.devices.first(where: { $0.value.token == t }), !dev.rejected, dev.tokenTime <= at {
                p.devices[id]!.rejected = true
            }
        }
        projects[e.project] = p
    }

    func live(_ project: String, _ device: String, _ platform: Platform) -> Bool {
        guard let d = projects[project]?.devices[device] else { return false }
        return d.token != nil && !d.rejected && d.platform == platform
    }
}
