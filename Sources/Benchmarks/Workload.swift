import SubscriptionLog
import Replay

/// The shape of a generated workload. Every figure derives from `seed`, so two
/// runs with the same spec produce byte-identical event streams.
public struct WorkloadSpec: Sendable, Hashable {
    public var devices: Int
    public var seed: UInt64
    public var project = "bench"
    /// Share of devices with an iOS token (the rest are Android).
    public var iosShare = 0.7
    /// Zipf-popular topics `t1`…`tN` (rank 1 most popular).
    public var topics: Int
    public var zipfExponent = 1.0
    /// Zipf topics per device, uniform in this range (mean 5); with `all`, the
    /// platform topic and the per-user topic that makes about 8 subscriptions.
    public var zipfTopicsPerDevice = 3...7
    /// Commands in the measured churn phase.
    public var churnCommands: Int
    /// Provider clock for rejections (ms since 1970): 2030-01-01, after any
    /// token time a store assigns today, so a rejection of the current token
    /// takes effect in every engine.
    public var rejectionClockBase: Int64 = 1_893_456_000_000

    public init(devices: Int, seed: UInt64 = 42) {
        precondition(devices > 0)
        self.devices = devices
        self.seed = seed
        topics = max(100, devices / 100)          // 10,000 at 1M devices
        churnCommands = max(1000, devices / 5)    // 200,000 at 1M devices
    }

    /// Mean subscriptions per device in the initial phase.
    public var meanSubscriptionsPerDevice: Double {
        3.0 + Double(zipfTopicsPerDevice.lowerBound + zipfTopicsPerDevice.upperBound) / 2.0
    }

    // MARK: Names the queries use

    public static let allTopic = "all"
    public static func zipfTopic(rank: Int) -> String { "t\(rank)" }
    public static func userTopic(_ device: Int) -> String { "user.\(device)" }
    public static func platformTopic(_ p: Platform) -> String { p == .ios ? "ios" : "android" }

    /// Three topics of middling popularity: ranks N/100, N/20 and N/10.
    public var midTopics: [String] {
        [topics / 100, topics / 20, topics / 10].map { Self.zipfTopic(rank: Swift.max(1, $0)) }
    }

    /// 20 different triples of topics of middling popularity (ranks N/300 to
    /// N/10, seeded), asked round-robin: a send service counts many different
    /// audiences, and one count repeated over and over lets the CPU learn its
    /// branches (a union of sparse topics at 1M devices took 63 µs repeated and
    /// 153–182 µs round-robin over such triples).
    public var midTopicTriples: [[String]] {
        var rng = Xoshiro256(seed: SplitMix64.mix(seed, 0x4D_49_44_33))
        let low = Swift.max(1, topics / 300), high = Swift.max(low + 2, topics / 10)
        var triples: [[String]] = []
        // Different from each other and from the fixed triple of `midTopics`.
        var seen: Set<[Int]> = [[topics / 100, topics / 20, topics / 10].map { Swift.max(1, $0) }.sorted()]
        var tries = 0  // a tiny workload may not have 20 different triples
        while triples.count < 20 && tries < 10_000 {
            tries += 1
            var ranks: [Int] = []
            while ranks.count < 3 {
                let r = low + rng.below(high - low + 1)
                if !ranks.contains(r) { ranks.append(r) }
            }
            if seen.insert(ranks.sorted()).inserted { triples.append(ranks.map(Self.zipfTopic(rank:))) }
        }
        return triples
    }

    /// 100 (or fewer on tiny workloads) per-user topics of devices spread over the workload.
    public var singleTopics: [String] {
        var rng = Xoshiro256(seed: SplitMix64.mix(seed, 0x51_4E_47_4C))
        var picked = Set<Int>()
        var result: [String] = []
        let want = Swift.min(100, devices)
        while result.count < want {
            let d = rng.below(devices)
            if picked.insert(d).inserted { result.append(Self.userTopic(d)) }
        }
        return result
    }

    /// `count` different lists of 100 (or fewer on tiny workloads) per-user
    /// topics, seeded, asked round-robin as one audience each: a send service
    /// sends to a list of users once, so the users of the next send were not
    /// asked lately and their entries are not in the CPU's cache, where the
    /// same 100 asked over and over (`singleTopics`) are.
    public func singleTopicLists(_ count: Int) -> [[String]] {
        var rng = Xoshiro256(seed: SplitMix64.mix(seed, 0x4C_49_53_54))
        let want = Swift.min(100, devices)
        return (0..<count).map { _ in
            var picked = Set<Int>()
            var list: [String] = []
            while list.count < want {
                let d = rng.below(devices)
                if picked.insert(d).inserted { list.append(Self.userTopic(d)) }
            }
            return list
        }
    }

    /// The boolean audience the benchmark asks for.
    public var expression: String { "(t1 OR t2) AND NOT \(Self.userTopic(5 % devices)) AND platform:ios" }
}

/// Derives each device's identity, platform, tokens and initial topics from
/// `(seed, device index)` alone, so nothing per device has to be kept.
public struct DeviceFactory: Sendable {
    public let spec: WorkloadSpec
    public let zipf: ZipfSampler

    public init(spec: WorkloadSpec) {
        self.spec = spec
        zipf = ZipfSampler(n: spec.topics, exponent: spec.zipfExponent)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
    private static let base64URL = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// A UUID-shaped device id (what the MPush SDKs generate), 36 characters.
    public func deviceID(_ i: Int) -> String {
        let a = SplitMix64.mix(spec.seed, UInt64(i), 0xD1), b = SplitMix64.mix(spec.seed, UInt64(i), 0xD2)
        var bytes = [UInt8](); bytes.reserveCapacity(36)
        for (n, v) in [(8, a >> 32), (4, (a >> 16) & 0xFFFF), (4, 0x4000 | (a & 0x0FFF)),
                       (4, 0x8000 | ((b >> 48) & 0x3FFF)), (12, b & 0xFFFF_FFFF_FFFF)] {
            if !bytes.isEmpty { bytes.append(0x2D) }
            for k in stride(from: n - 1, through: 0, by: -1) { bytes.append(Self.hexDigits[Int((v >> (UInt64(k) * 4)) & 0xF)]) }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    public func platform(_ i: Int) -> Platform {
        Double(SplitMix64.mix(spec.seed, UInt64(i), 0x9F) >> 11) * 0x1.0p-53 < spec.iosShare ? .ios : .android
    }

    /// The device's token of `generation` (0 at install, +1 per token change):
    /// 64 hex characters for APNs, an FCM-shaped `<22>:APA91b<134>` (163 characters) for Android.
    public func token(_ i: Int, generation: Int) -> String {
        var rng = Xoshiro256(seed: SplitMix64.mix(spec.seed, UInt64(i), 0x70_6B_00 &+ UInt64(generation)))
        var bytes = [UInt8]()
        if platform(i) == .ios {
            bytes.reserveCapacity(64)
            for _ in 0..<4 {
                let v = rng.next()
                for k in 0..<16 { bytes.append(Self.hexDigits[Int((v >> (UInt64(k) * 4)) & 0xF)]) }
            }
        } else {
            bytes.reserveCapacity(163)
            func base64(_ n: Int) {
                var v = rng.next(), left = 10
                for _ in 0..<n {
                    if left == 0 { v = rng.next(); left = 10 }
                    bytes.append(Self.base64URL[Int(v & 63)]); v >>= 6; left -= 1
                }
            }
            base64(22)
            bytes.append(contentsOf: Array(":APA91b".utf8))
            base64(134)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The Zipf ranks a device subscribes to at install (distinct, in draw order).
    public func zipfRanks(_ i: Int) -> [Int] {
        var rng = Xoshiro256(seed: SplitMix64.mix(spec.seed, UInt64(i), 0x70_1C))
        let range = spec.zipfTopicsPerDevice
        let want = Swift.min(range.lowerBound + rng.below(range.count), spec.topics)
        var ranks: [Int] = []
        ranks.reserveCapacity(want)
        while ranks.count < want {
            let r = zipf.sample(&rng)
            if !ranks.contains(r) { ranks.append(r) }
        }
        return ranks
    }

    /// The install-time commands of device `i`: its token, then one register of
    /// `all`, its platform topic, its per-user topic (single) and its Zipf topics.
    public func installEvents(_ i: Int, into events: inout [Event]) -> (commands: Int, subscriptionChanges: Int) {
        let project = spec.project
        let id = deviceID(i)
        let p = platform(i)
        events.append(Event(project: project, body: .token(deviceID: id, token: token(i, generation: 0), platform: p)))
        var topics = [TopicSpec(code: WorkloadSpec.allTopic),
                      TopicSpec(code: WorkloadSpec.platformTopic(p)),
                      TopicSpec(code: WorkloadSpec.userTopic(i), title: "User \(i)", single: true)]
        for r in zipfRanks(i) { topics.append(TopicSpec(code: WorkloadSpec.zipfTopic(rank: r))) }
        events.append(Event(project: project, body: .register(deviceID: id, topics: topics)))
        return (2, topics.count)
    }
}

/// What a batch of generated commands amounts to.
public struct BatchTally: Sendable, Hashable {
    public var commands = 0
    /// Topic subscriptions named by register and unregister commands (and, for
    /// unregister-all, the device's install-time subscriptions).
    public var subscriptionChanges = 0
    public init() {}
}

/// The install phase as a stream: devices `0..<n` in order, two commands each,
/// produced batch by batch so no more than one batch is ever in memory.
public struct InstallStream: Sendable {
    public let factory: DeviceFactory
    public private(set) var nextDevice = 0

    public init(spec: WorkloadSpec) { factory = DeviceFactory(spec: spec) }

    public var isFinished: Bool { nextDevice >= factory.spec.devices }

    /// Appends up to `commands` commands (whole devices only) to `events`.
    public mutating func next(commands: Int, into events: inout [Event]) -> BatchTally {
        var tally = BatchTally()
        while tally.commands + 2 <= Swift.max(commands, 2), nextDevice < factory.spec.devices {
            let t = factory.installEvents(nextDevice, into: &events)
            tally.commands += t.commands
            tally.subscriptionChanges += t.subscriptionChanges
            nextDevice += 1
        }
        return tally
    }
}

/// The churn phase as an endless stream after install: re-subscriptions,
/// unregisters, unregister-all, token changes and token rejections of
/// uniformly chosen devices. It remembers one byte per device (its token
/// generation) so that a rejection names the device's current token.
public struct ChurnStream: Sendable {
    public enum Kind: Int, CaseIterable, Sendable {
        case resubscribe, unregister, unregisterAll, tokenChange, tokenRejected
    }
    /// Percent of churn commands of each kind, in `Kind` order.
    public static let mix: [Int] = [40, 25, 5, 20, 10]

    public let factory: DeviceFactory
    private var rng: Xoshiro256
    private var generations: [UInt8]
    public private(set) var produced = 0

    public init(spec: WorkloadSpec) {
        factory = DeviceFactory(spec: spec)
        rng = Xoshiro256(seed: SplitMix64.mix(spec.seed, 0xC4_75_72_6E))
        generations = [UInt8](repeating: 0, count: spec.devices)
    }

    public mutating func nextKind() -> Kind {
        var roll = rng.below(100)
        for (i, share) in Self.mix.enumerated() {
            if roll < share { return Kind(rawValue: i)! }
            roll -= share
        }
        return .resubscribe
    }

    /// Moves past `count` churn commands without keeping them (as `next` makes
    /// them, so that rejections after them still name current tokens).
    public mutating func skip(commands count: Int) {
        var events: [Event] = []
        var left = count
        while left > 0 {
            events.removeAll(keepingCapacity: true)
            let n = Swift.min(left, 10_000)
            _ = next(commands: n, into: &events)
            left -= n
        }
    }

    /// Appends `count` churn commands to `events`.
    public mutating func next(commands count: Int, into events: inout [Event]) -> BatchTally {
        var tally = BatchTally()
        let spec = factory.spec
        for _ in 0..<count {
            let kind = nextKind()
            let i = rng.below(spec.devices)
            let id = factory.deviceID(i)
            switch kind {
            case .resubscribe:
                let n = 1 + rng.below(3)
                var topics: [TopicSpec] = []
                while topics.count < n {
                    let code = WorkloadSpec.zipfTopic(rank: factory.zipf.sample(&rng))
                    if !topics.contains(where: { $0.code == code }) { topics.append(TopicSpec(code: code)) }
                }
                events.append(Event(project: spec.project, body: .register(deviceID: id, topics: topics)))
                tally.subscriptionChanges += n
            case .unregister:
                let ranks = factory.zipfRanks(i)
                let n = Swift.min(ranks.count, 1 + rng.below(2))
                var codes: [String] = []
                while codes.count < n {
                    let code = WorkloadSpec.zipfTopic(rank: ranks[rng.below(ranks.count)])
                    if !codes.contains(code) { codes.append(code) }
                }
                events.append(Event(project: spec.project, body: .unregister(deviceID: id, codes: codes)))
                tally.subscriptionChanges += n
            case .unregisterAll:
                events.append(Event(project: spec.project, body: .unregisterAll(deviceID: id)))
                tally.subscriptionChanges += 3 + factory.zipfRanks(i).count
            case .tokenChange:
                generations[i] &+= 1
                events.append(Event(project: spec.project,
                                    body: .token(deviceID: id, token: factory.token(i, generation: Int(generations[i])),
                                                 platform: factory.platform(i))))
            case .tokenRejected:
                let p = factory.platform(i)
                events.append(Event(project: spec.project,
                                    body: .tokenRejected(token: factory.token(i, generation: Int(generations[i])),
                                                         rejectedAt: spec.rejectionClockBase + Int64(produced),
                                                         reason: p == .ios ? "Unregistered" : "UNREGISTERED")))
            }
            produced += 1
            tally.commands += 1
        }
        return tally
    }
}
