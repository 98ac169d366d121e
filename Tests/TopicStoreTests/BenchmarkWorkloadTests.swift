import Benchmarks
import SubscriptionLog
import Testing

/// The benchmark's workload generator: deterministic, and shaped as documented.
@Suite struct BenchmarkWorkloadTests {
    func install(_ spec: WorkloadSpec, batch: Int = 500) -> [Event] {
        var stream = InstallStream(spec: spec)
        var all: [Event] = []
        var events: [Event] = []
        while !stream.isFinished {
            events.removeAll(keepingCapacity: true)
            _ = stream.next(commands: batch, into: &events)
            #expect(events.count <= batch, "a batch never holds more than asked for")
            all += events
        }
        return all
    }

    func churn(_ spec: WorkloadSpec, _ n: Int) -> [Event] {
        var stream = ChurnStream(spec: spec)
        var events: [Event] = []
        _ = stream.next(commands: n, into: &events)
        return events
    }

    @Test func sameSeedSameEventsDifferentSeedDifferent() throws {
        let a = WorkloadSpec(devices: 2_000, seed: 7), b = WorkloadSpec(devices: 2_000, seed: 7), c = WorkloadSpec(devices: 2_000, seed: 8)
        #expect(install(a) == install(b))
        #expect(churn(a, 3_000) == churn(b, 3_000))
        // Batch boundaries do not change the stream.
        #expect(install(a, batch: 2) == install(a, batch: 777))
        let ia = install(a), ic = install(c)
        #expect(ia.count == ic.count)
        #expect(zip(ia, ic).filter { $0 != $1 }.count > ia.count * 9 / 10, "another seed gives other events")
        #expect(churn(a, 3_000) != churn(c, 3_000))
        // Encoded bytes are identical too (what the raw LMDB limit appends).
        let ra = try ia.prefix(50).enumerated().map { try RecordCodec.encode(LogRecord(sequence: UInt64($0.offset + 1), timestamp: 1, event: $0.element)) }
        let rb = try install(b).prefix(50).enumerated().map { try RecordCodec.encode(LogRecord(sequence: UInt64($0.offset + 1), timestamp: 1, event: $0.element)) }
        #expect(ra == rb)
    }

    @Test func installPhaseHasTheStatedShape() throws {
        let spec = WorkloadSpec(devices: 20_000, seed: 42)
        #expect(spec.topics == 200)
        #expect(WorkloadSpec(devices: 1_000_000).topics == 10_000)
        let events = install(spec)
        #expect(events.count == 2 * spec.devices)
        var ios = 0, subscriptions = 0
        var deviceIDs = Set<String>(), tokens = Set<String>()
        var topicCounts: [String: Int] = [:]
        for i in 0..<spec.devices {
            guard case .token(let id, let token, let platform) = events[2 * i].body,
                  case .register(let rid, let topics) = events[2 * i + 1].body else {
                Issue.record("device \(i) is not token then register"); return
            }
            #expect(id == rid)
            #expect(id.utf8.count == 36 && id.split(separator: "-").map(\.count) == [8, 4, 4, 4, 12])
            deviceIDs.insert(id)
            tokens.insert(token)
            if platform == .ios {
                ios += 1
                #expect(token.utf8.count == 64 && token.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
            } else {
                #expect(token.utf8.count == 163 && token.contains(":APA91b"))
                #expect(token.utf8.allSatisfy { c in c == 0x3A || c == 0x2D || c == 0x5F || (0x30...0x39).contains(c)
                    || (0x41...0x5A).contains(c) || (0x61...0x7A).contains(c) })
            }
            let codes = topics.map(\.code)
            #expect(codes.prefix(3) == ["all", platform == .ios ? "ios" : "android", "user.\(i)"])
            #expect(topics[2].single == true)
            #expect(Set(codes).count == codes.count, "no topic twice in one register")
            #expect((6...10).contains(codes.count))
            subscriptions += codes.count
            for c in codes.dropFirst(3) { topicCounts[c, default: 0] += 1 }
            try Validation.validate(events[2 * i])
            try Validation.validate(events[2 * i + 1])
        }
        #expect(deviceIDs.count == spec.devices && tokens.count == spec.devices, "ids and tokens are unique")
        let iosShare = Double(ios) / Double(spec.devices)
        #expect(abs(iosShare - 0.7) < 0.015, "iOS share \(iosShare)")
        let mean = Double(subscriptions) / Double(spec.devices)
        #expect(abs(mean - 8.0) < 0.05, "subscriptions per device \(mean)")
        // Zipf popularity: rank 1 leads, and popularity falls with rank.
        let c1 = topicCounts["t1"] ?? 0, c10 = topicCounts["t10"] ?? 0, c100 = topicCounts["t100"] ?? 0
        #expect(c1 > c10 && c10 > c100 && c100 > 0, "t1 \(c1), t10 \(c10), t100 \(c100)")
        let top = topicCounts.max { $0.value < $1.value }!.key
        #expect(top == "t1")
    }

    @Test func zipfSamplerMatchesItsDistribution() {
        let zipf = ZipfSampler(n: 1_000, exponent: 1.0)
        var rng = Xoshiro256(seed: 3)
        let n = 400_000
        var counts = [Int](repeating: 0, count: 1_001)
        for _ in 0..<n { counts[zipf.sample(&rng)] += 1 }
        #expect(counts[0] == 0)
        for rank in [1, 2, 3, 10, 50] {
            let expected = zipf.probability(ofRank: rank) * Double(n)
            let observed = Double(counts[rank])
            #expect(abs(observed - expected) < 5 * expected.squareRoot() + 1, "rank \(rank): \(observed) vs \(expected)")
        }
        // Harmonic: P(1) / P(10) is 10 for exponent 1.
        #expect(abs(zipf.probability(ofRank: 1) / zipf.probability(ofRank: 10) - 10) < 1e-9)
        // The tail over ranks 501…1000 carries its share (≈ ln 2 / H(1000) ≈ 9.3%).
        let tail = Double(counts[501...].reduce(0, +)) / Double(n)
        let expectedTail = (501...1000).map { zipf.probability(ofRank: $0) }.reduce(0, +)
        #expect(abs(tail - expectedTail) < 0.003)
    }

    @Test func churnPhaseHasTheStatedMixAndRejectsCurrentTokens() throws {
        let spec = WorkloadSpec(devices: 5_000, seed: 11)
        var current: [String: String] = [:]  // device_id → its latest token
        var holder: [String: String] = [:]   // token → device_id
        for e in install(spec) { if case .token(let id, let t, _) = e.body { current[id] = t; holder[t] = id } }
        let events = churn(spec, 40_000)
        var kinds: [String: Int] = [:]
        var rejectedAtLast: Int64 = 0
        for e in events {
            try Validation.validate(e)
            kinds[e.body.typeName, default: 0] += 1
            switch e.body {
            case .token(let id, let t, _):
                #expect(current[id] != nil && current[id] != t, "a token change gives a known device a new token")
                current[id] = t
                holder[t] = id
            case .tokenRejected(let token, let at, _):
                #expect(holder[token].flatMap { current[$0] } == token, "a rejection names some device's current token")
                #expect(at > rejectedAtLast)
                rejectedAtLast = at
            case .register(let id, _), .unregister(let id, _), .unregisterAll(let id):
                #expect(current[id] != nil, "churn is about installed devices")
            case .forgetDevice, .dropTopic, .expireToken:
                Issue.record("the churn workload does not collect garbage: \(e.body.typeName)")
            }
        }
        let n = Double(events.count)
        for (name, share) in [("register", 0.40), ("unregister", 0.25), ("unregister-all", 0.05), ("token", 0.20), ("token-rejected", 0.10)] {
            let observed = Double(kinds[name] ?? 0) / n
            #expect(abs(observed - share) < 0.012, "\(name): \(observed) vs \(share)")
        }
    }

    @Test func churnSkippedIsTheChurnMadeAndLeftOut() {
        let spec = WorkloadSpec(devices: 2_000, seed: 5)
        let whole = churn(spec, 25_300)
        var stream = ChurnStream(spec: spec)
        stream.skip(commands: 25_000)  // more than one round of its batches
        var rest: [Event] = []
        _ = stream.next(commands: 300, into: &rest)
        #expect(stream.produced == 25_300)
        #expect(rest == Array(whole.suffix(300)), "the same commands after the skip, rejections naming the same tokens")
    }

    @Test func queriesNameTopicsTheWorkloadHas() {
        let spec = WorkloadSpec(devices: 1_000_000)
        #expect(spec.midTopics == ["t100", "t500", "t1000"])
        let triples = spec.midTopicTriples
        #expect(triples.count == 20 && Set(triples).count == 20, "20 different triples")
        #expect(triples.allSatisfy { t in Set(t).count == 3 && t.allSatisfy { (33...1000).contains(Int($0.dropFirst())!) } })
        #expect(triples == WorkloadSpec(devices: 1_000_000).midTopicTriples, "seeded")
        #expect(spec.singleTopics.count == 100 && Set(spec.singleTopics).count == 100)
        #expect(spec.singleTopics.allSatisfy { $0.hasPrefix("user.") && Int($0.dropFirst(5))! < spec.devices })
        let lists = spec.singleTopicLists(50)
        #expect(lists.count == 50 && Set(lists).count == 50, "different lists")
        #expect(lists.allSatisfy { l in Set(l).count == 100 && l.allSatisfy { $0.hasPrefix("user.") && Int($0.dropFirst(5))! < spec.devices } })
        #expect(lists == spec.singleTopicLists(50), "seeded")
        #expect(spec.expression == "(t1 OR t2) AND NOT user.5 AND platform:ios")
    }
}
