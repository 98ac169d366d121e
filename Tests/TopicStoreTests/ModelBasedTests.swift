import Foundation
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// Random command sequences over several projects, checked against the plain
/// in-memory model: devices, topics, subscriber counts, audiences, expressions
/// and recipient streams.
@Suite struct ModelBasedTests {
    static let projects = ["alpha", "beta", "gamma"]
    static let topicCodes = (0..<14).map { "t\($0)" } + ["all", "news", "user.1", "user.2", "sport"]

    /// Device `n`'s id, in each of the shapes a device record stores
    /// differently (see `StoredName`): text, a lowercase or an uppercase UUID.
    static func deviceID(_ n: UInt64) -> String {
        let hex = String(format: "%08llx-%04llx-4%03llx-8%03llx-%012llx", n &* 2_654_435_761 & 0xFFFF_FFFF, n & 0xFFFF, n & 0xFFF, n & 0xFFF,
                         n &* 0x9E37_79B9_7F4A & 0xFFFF_FFFF_FFFF)
        switch n % 3 {
        case 0: return "dev-\(n)"
        case 1: return hex
        default: return hex.uppercased()
        }
    }

    /// Token `n`, in each of the shapes a device record stores differently:
    /// text, lowercase or uppercase hex (APNs-like), hex of digits only, an odd number of hex digits, mixed case.
    static func token(_ n: UInt64) -> String {
        let hex = (0..<4).map { String(format: "%016llx", (n &+ UInt64($0)) &* 0x9E37_79B9_7F4A_7C15) }.joined()
        switch n % 6 {
        case 0: return "tok\(n)"
        case 1: return hex
        case 2: return hex.uppercased()
        case 3: return String(format: "%032llu", n)
        case 4: return String(hex.dropLast())
        default: return String(hex.prefix(32)).uppercased() + String(hex.suffix(32))
        }
    }

    /// Device `n`'s own topic.
    static func userTopic(_ n: UInt64) -> String { "u.\(n)" }

    struct Generator {
        var rng: SeededRandom
        var now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)
        var projects = ModelBasedTests.projects
        /// How many device ids and tokens each project draws from.
        var devices: UInt64 = 40
        var tokens: UInt64 = 60

        mutating func pick<T>(_ items: [T]) -> T { items[Int(rng.next() % UInt64(items.count))] }
        mutating func chance(_ percent: UInt64) -> Bool { rng.next() % 100 < percent }

        mutating func event() -> Event {
            let project = pick(projects)
            let number = rng.next() % devices
            let device = ModelBasedTests.deviceID(number)
            let token = ModelBasedTests.token(rng.next() % tokens)
            let body: EventBody
            switch rng.next() % 100 {
            case 0..<22:
                body = .token(deviceID: device, token: token, platform: chance(70) ? .ios : .android)
            case 22..<62:
                let n = 1 + Int(rng.next() % 4)
                var specs: [TopicSpec] = []
                for _ in 0..<n {
                    let code = pick(ModelBasedTests.topicCodes)
                    specs.append(TopicSpec(code: code, title: chance(30) ? "Title \(rng.next() % 5)" : nil,
                                           single: chance(20) ? chance(50) : nil))
                }
                // The device's own topic, as apps subscribe a user: a single topic of one
                // device, which a serving process holds with what its device reaches.
                if chance(25) { specs.append(TopicSpec(code: ModelBasedTests.userTopic(number), title: nil, single: true)) }
                body = .register(deviceID: device, topics: specs)
            case 62..<82:
                let n = 1 + Int(rng.next() % 3)
                body = .unregister(deviceID: device, codes: (0..<n).map { _ in chance(90) ? pick(ModelBasedTests.topicCodes) : "unknown.\(rng.next() % 3)" })
            case 82..<88:
                body = .unregisterAll(deviceID: device)
            case 88..<90:
                switch rng.next() % 3 {
                case 0: body = .forgetDevice(deviceID: device)
                case 1: body = .dropTopic(code: pick(ModelBasedTests.topicCodes))
                default: body = .expireToken(token: token)
                }
            default:
                // Half before now (may reject), half far ahead or behind.
                let offset = Int64(rng.next() % 7_200_000) - 3_600_000
                body = .tokenRejected(token: token, rejectedAt: now + offset, reason: "Unregistered")
            }
            return Event(project: project, body: body)
        }

        mutating func expression(depth: Int = 0) -> AudienceExpression {
            let r = rng.next() % 100
            if depth >= 3 || r < 35 {
                switch rng.next() % 10 {
                case 0: return .platform(chance(50) ? .ios : .android)
                case 1: return .allDevices
                case 2: return .topic("missing.topic")
                default: return .topic(pick(ModelBasedTests.topicCodes))
                }
            }
            switch r % 3 {
            case 0: return .and(expression(depth: depth + 1), expression(depth: depth + 1))
            case 1: return .or(expression(depth: depth + 1), expression(depth: depth + 1))
            default: return .not(expression(depth: depth + 1))
            }
        }
    }

    /// 32 independent random sequences of 600 commands each, checked after every 100.
    /// Odd seeds run as a server does, with the recipient cache, so recipient
    /// streams are checked against the model through both paths. Seeds that
    /// are multiples of 4 give the writer room for 12 cached entries: it
    /// bounds its caches after almost every commit, keeping the records of
    /// its 3 most subscribed shared topics across each bound.
    @Test(arguments: (1...32).map { UInt64($0) })
    func randomWorkloadMatchesModel(seed: UInt64) async throws {
        let dir = TemporaryDirectory()
        var options = TopicStore.Options()
        options.cachesRecipients = seed % 2 == 1
        if seed % 4 == 0 { options.writerCacheEntries = 12 }
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        var gen = Generator(rng: SeededRandom(seed: seed))
        var model = SubscriptionModel()
        let log = store.log

        for round in 0..<6 {
            // Submit a batch from concurrent tasks so group commit interleaves them.
            let events = (0..<100).map { _ in gen.event() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for chunk in stride(from: 0, to: events.count, by: 25) {
                    let slice = Array(events[chunk..<min(chunk + 25, events.count)])
                    group.addTask { for e in slice { try await store.submit(e) } }
                }
                try await group.waitForAll()
            }
            // The model folds the same records, read back from the log.
            let from = model.lastSequence + 1
            try store.read { txn in
                try log.forEach(from: from, txn) { model.apply($0); return true }
            }
            try check(store, against: model, gen: &gen, round: round)
        }
        #expect(model.lastSequence == 600)
    }

    /// Thousands of short random sequences (4 × 500 of 30 commands), each over
    /// its own three projects in one store, each checked against the model when
    /// it ends: many small histories, where the long ones above explore deep ones.
    @Test(arguments: 0..<4)
    func thousandsOfShortSequencesMatchTheModel(part: Int) async throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        var model = SubscriptionModel()
        let log = store.log
        for sequence in 0..<500 {
            var gen = Generator(rng: SeededRandom(seed: UInt64(1000 + part * 500 + sequence)))
            gen.projects = ["s\(sequence)-a", "s\(sequence)-b", "s\(sequence)-c"]
            gen.devices = 6
            gen.tokens = 8
            let events = (0..<30).map { _ in gen.event() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for chunk in stride(from: 0, to: events.count, by: 10) {
                    let slice = Array(events[chunk..<min(chunk + 10, events.count)])
                    group.addTask { for e in slice { try await store.submit(e) } }
                }
                try await group.waitForAll()
            }
            let from = model.lastSequence + 1
            try store.read { txn in
                try log.forEach(from: from, txn) { model.apply($0); return true }
            }
            try check(store, against: model, gen: &gen, round: sequence, projects: gen.projects, expressions: 4)
        }
        #expect(model.lastSequence == 500 * 30)
    }

    func check(_ store: TopicStore, against model: SubscriptionModel, gen: inout Generator, round: Int,
               projects: [String] = ModelBasedTests.projects, expressions count: Int = 20) throws {
        let reader = store.reader
        let expressions = (0..<count).map { _ in gen.expression() }
        try store.read { txn in
            #expect(try store.tables.appliedSequence(txn) == model.lastSequence)
            for name in projects {
                let p = model.projects[name] ?? SubscriptionModel.Project()
                guard let record = try reader.project(named: name, txn) else {
                    #expect(p.devices.isEmpty && p.topics.isEmpty, "project \(name) missing")
                    continue
                }
                // Topics with titles, single flags and subscriber counts.
                let topics = try reader.topics(record.id, txn)
                #expect(Set(topics.map(\.record.code)) == Set(p.topics.keys), "round \(round) \(name) topic set")
                for t in topics {
                    let m = p.topics[t.record.code]
                    #expect(t.record.title == m?.title && t.record.single == m?.single,
                            "round \(round) \(name) topic \(t.record.code)")
                    #expect(Int(t.record.subscribers) == p.subscribers(t.record.code),
                            "round \(round) \(name) subscribers of \(t.record.code)")
                }
                // Every device: token, platform, state, topics.
                for (id, d) in p.devices {
                    let info = try reader.device(record.id, deviceID: id, txn)
                    #expect(info?.record.token == d.token, "round \(round) \(name) \(id) token")
                    #expect(info?.record.rejectedAt == d.rejectedAt, "round \(round) \(name) \(id) rejectedAt")
                    if d.token != nil { #expect(info?.record.platform == d.platform) }
                    #expect(Set(info?.topics ?? []) == d.topics, "round \(round) \(name) \(id) topics")
                }
                #expect(try reader.knownDevices(record.id, txn).count == p.devices.count)
                // Audiences: topic lists and random expressions, parsed from their text.
                var audiences: [AudienceExpression] = expressions
                if let any = AudienceExpression.anyOf(["t1", "news", "all", "nope"]) { audiences.append(any) }
                // A send to a list of users (their own topics, some not created): counted from the
                // serving caches in odd seeds, as tokens change between the rounds.
                if let users = AudienceExpression.anyOf((0..<gen.devices).map(Self.userTopic)) { audiences.append(users) }
                for e in audiences {
                    let parsed = try AudienceExpression(parsing: e.description)
                    #expect(parsed == e || parsed.description == e.description, "reparse of \(e)")
                    let expected = model.audience(name, e)
                    let audience = try reader.audience(project: name, parsed, txn)
                    let counts = try reader.counts(of: audience, txn)
                    let live = expected.filter { p.devices[$0]!.isLive }
                    let ios = live.filter { p.devices[$0]!.platform == .ios }.count
                    #expect(counts.total == expected.count, "round \(round) \(name) \(e) total")
                    #expect(counts.ios == ios, "round \(round) \(name) \(e) ios")
                    #expect(counts.android == live.count - ios, "round \(round) \(name) \(e) android")
                    #expect(counts.withoutToken == expected.count - live.count, "round \(round) \(name) \(e) withoutToken")
                    #expect(counts.asOfSeq == model.lastSequence)
                    // As a send service asks for counts alone (by windows of slices where the audience is large).
                    let alone = try reader.counts(project: name, parsed, txn, windowSlices: 1)
                    #expect(alone == counts, "round \(round) \(name) \(e) counted alone")
                    // Recipients, fetched in small pages with the resumable cursor.
                    let reachable = try reader.reachable(audience, txn)
                    var got: [String: String] = [:]
                    var cursor: UInt32? = 0
                    while let from = cursor {
                        let (page, next) = try reader.recipients(projectID: record.id, in: reachable, from: from, limit: 7, txn)
                        for r in page { got[r.deviceID] = r.token }
                        cursor = next
                    }
                    let want = Dictionary(uniqueKeysWithValues: live.map { ($0, p.devices[$0]!.token!) })
                    #expect(got == want, "round \(round) \(name) \(e) recipients")
                }
            }
        }
    }

    @Test func foldOfTheLogEqualsLiveProjections() async throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.sub("live"))
        defer { store.close() }
        var gen = Generator(rng: SeededRandom(seed: 99))
        let results = store.submitAndWait((0..<2000).map { _ in gen.event() })
        #expect(results.allSatisfy { if case .success = $0 { true } else { false } })
        let live = try ProjectionDump.of(store)
        let rebuilt = try foldLog(of: store, into: dir.sub("rebuilt"))
        #expect(live == rebuilt, "\(live.differences(from: rebuilt))")
    }
}
