import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// A glance at a record (`RecordGlance`) reads its type and names in place:
/// it must agree with `RecordCodec.decode` on every record of every version,
/// and a history that decodes only what the glance picks must be the history
/// that decodes every record.
@Suite struct RecordGlanceTests {
    /// The names and codes a decoded record holds, by role.
    static func names(_ body: EventBody) -> (device: String?, token: String?, codes: [String]) {
        switch body {
        case .token(let d, let t, _): return (d, t, [])
        case .register(let d, let specs): return (d, nil, specs.map(\.code))
        case .unregister(let d, let codes): return (d, nil, codes)
        case .unregisterAll(let d), .forgetDevice(let d): return (d, nil, [])
        case .tokenRejected(let t, _, _), .expireToken(let t): return (nil, t, [])
        case .dropTopic(let c): return (nil, nil, [c])
        }
    }

    static func encodings(_ record: LogRecord) throws -> [(version: Int, bytes: [UInt8])] {
        [(1, try RecordCodec.encodeLegacyV1(record)), (2, try RecordCodec.encode(record, version: 2)),
         (3, try RecordCodec.encode(record, version: 3)), (4, try RecordCodec.encode(record, version: 4)),
         (5, try RecordCodec.encode(record, version: 5))]
    }

    /// Every event type and name shape, in versions 1 to 5: the glance's type,
    /// and its answer for each name of a pool (every record's names, and ones
    /// no record holds), are what the decoded record says; its token is the decoded one.
    @Test func aGlanceAgreesWithTheDecodedRecord() throws {
        var records = LogRecordVersionTests.randomRecords(600, seed: 17)
        // Lengths past a version 4 short length's escape, and text that is not ASCII.
        records.append(LogRecord(sequence: 601, timestamp: 1_764_100_000_601, event: Event(project: "demo", body:
            .register(deviceID: "dévice", topics: [TopicSpec(code: String(repeating: "c", count: 300), title: String(repeating: "t", count: 260)),
                                                    TopicSpec(code: "ñews", single: false)]))))
        records.append(LogRecord(sequence: 602, timestamp: 1_764_100_000_602, event: Event(project: "demo", body:
            .unregister(deviceID: "dévice", codes: (0..<300).map { "c\($0)" }))))
        var pool = Set<String>()
        for r in records {
            let n = Self.names(r.event.body)
            pool.formUnion([n.device, n.token].compactMap { $0 } + n.codes)
        }
        pool.formUnion(["", "dev", "news2", "dévice2", LogRecordVersionTests.uuidLower.uppercased(), LogRecordVersionTests.apns.uppercased()])
        let others = pool.sorted()
        var rng = ReplayRandom(seed: 19)
        var checked = 0
        for r in records {
            let held = Self.names(r.event.body)
            // The record's own names, and forty others.
            let probes = Set([held.device, held.token].compactMap { $0 } + held.codes + (0..<40).map { _ in rng.pick(others) })
            for (version, bytes) in try Self.encodings(r) {
                try bytes.withUnsafeBytes { b in
                    let glance = try #require(RecordGlance(b), "record \(r.sequence) v\(version)")
                    #expect(glance.kind.rawValue == b[1] && "\(glance.kind)" == Self.kindName(r.event.body), "record \(r.sequence) v\(version)")
                    #expect(glance.token == held.token, "record \(r.sequence) v\(version)")
                    for name in probes {
                        Array(name.utf8).withUnsafeBytes { t in
                            #expect(glance.mayName(deviceID: t) == (held.device == name), "record \(r.sequence) v\(version): device \(name)")
                            #expect(glance.mayName(token: t) == (held.token == name), "record \(r.sequence) v\(version): token \(name)")
                            #expect(glance.mayName(topic: t) == held.codes.contains(name), "record \(r.sequence) v\(version): topic \(name)")
                        }
                    }
                }
                checked += 1
            }
        }
        #expect(checked == 5 * records.count)
    }

    static func kindName(_ body: EventBody) -> String {
        switch body {
        case .token: "token"
        case .register: "register"
        case .unregister: "unregister"
        case .unregisterAll: "unregisterAll"
        case .tokenRejected: "tokenRejected"
        case .forgetDevice: "forgetDevice"
        case .dropTopic: "dropTopic"
        case .expireToken: "expireToken"
        }
    }

    /// A record whose fields do not parse — one byte short, one byte too many,
    /// an unknown type — gets no glance, and does not decode either.
    @Test func fieldsThatDoNotParseGetNoGlance() throws {
        for r in LogRecordVersionTests.randomRecords(200, seed: 23) {
            for (version, bytes) in try Self.encodings(r) {
                let trailer = version == 1 ? 4 : version == 5 ? 12 : 36
                let end = bytes.count - trailer
                for damaged in [Array(bytes[..<(end - 1)] + bytes[end...]), Array(bytes[..<end] + [0] + bytes[end...]),
                                [bytes[0], 9] + bytes[2...]] {
                    let resealed = Self.resealed(damaged, version: version, key: r.sequence)
                    #expect(resealed.withUnsafeBytes { RecordGlance($0) } == nil, "record \(r.sequence) v\(version)")
                    #expect(throws: RecordCorruption.self) { try resealed.withUnsafeBytes { try RecordCodec.decode($0, key: r.sequence) } }
                }
            }
        }
    }

    /// `bytes` with its CRC made right again (the link, if any, is left as it is).
    static func resealed(_ bytes: [UInt8], version: Int, key: UInt64) -> [UInt8] {
        HashChainTests.recomputedChecksum(bytes, key: key)
    }

    /// A name stored as text that is not valid UTF-8 (a forged record; `decode`
    /// repairs it): the glance cannot tell which name it stands for, so it says
    /// the record may name any, and the caller decodes it.
    @Test func textThatIsNotUTF8MayNameAnything() throws {
        let record = LogRecord(sequence: 1, timestamp: 1_764_100_000_000, event: Event(project: "demo", body:
            .register(deviceID: "dev-\u{e9}", topics: [TopicSpec(code: "n\u{e9}ws")])))
        for (version, bytes) in try Self.encodings(record) {
            var forged = bytes
            // "é" is C3 A9: its second byte made FF in both the device_id and the code.
            for i in forged.indices.dropLast() where forged[i] == 0xC3 && forged[i + 1] == 0xA9 { forged[i + 1] = 0xFF }
            forged = Self.resealed(forged, version: version, key: 1)
            let decoded = try forged.withUnsafeBytes { try RecordCodec.decode($0, key: 1) }
            guard case .register(let device, let specs) = decoded.event.body else { Issue.record("v\(version)"); continue }
            #expect(device != "dev-\u{e9}" && specs.first?.code != "n\u{e9}ws")
            try forged.withUnsafeBytes { b in
                let glance = try #require(RecordGlance(b))
                for name in [device, "dev-\u{e9}", "dev-x"] {
                    #expect(name.utf8.withContiguousStorageIfAvailable { glance.mayName(deviceID: UnsafeRawBufferPointer($0)) } == true)
                }
                for code in [specs[0].code, "n\u{e9}ws", "other"] {
                    #expect(code.utf8.withContiguousStorageIfAvailable { glance.mayName(topic: UnsafeRawBufferPointer($0)) } == true)
                }
            }
        }
    }

    // MARK: History

    /// Devices, tokens and topics of a small world, with names of each shape.
    struct World {
        var random: ReplayRandom
        let devices = ["dev-0", "dev-1", LogRecordVersionTests.uuidLower, LogRecordVersionTests.uuidLower.uppercased(),
                       "8d6f2c1e-0b7a-4c3d-9e8f-1a2b3c4d5e6f", "dévice"]
        let tokens = ["tok0", "tok1", LogRecordVersionTests.apns, String(repeating: "4f", count: 32),
                      LogRecordVersionTests.fcm(1), LogRecordVersionTests.fcm(2), "tok.2"]
        let topics = ["news", "sport", "all", "user.1", "news-2"]

        mutating func next(now: Int64) -> Event {
            let project = random.int(6) == 0 ? "beta" : "alpha"
            let device = random.pick(devices)
            let body: EventBody
            switch random.int(24) {
            case 0..<6: body = .token(deviceID: device, token: random.pick(tokens), platform: random.int(2) == 0 ? .ios : .android)
            case 6..<12: body = .register(deviceID: device, topics: (0...random.int(3)).map { _ in TopicSpec(code: random.pick(topics)) })
            case 12..<15: body = .unregister(deviceID: device, codes: [random.pick(topics), random.pick(topics)])
            case 15: body = .unregisterAll(deviceID: device)
            case 16..<19: body = .tokenRejected(token: random.pick(tokens), rejectedAt: now + Int64(random.int(4000)) - 2000, reason: "Unregistered")
            case 19, 20: body = .forgetDevice(deviceID: device)
            case 21: body = .dropTopic(code: random.pick(topics))
            default: body = .expireToken(token: random.pick(tokens))
            }
            return Event(project: project, body: body)
        }
    }

    /// Every device's timeline and every topic's flow, decoding only what the
    /// glance picks, equal those decoding every record: on a log written by the
    /// store, then on the same log with records rewritten in versions 1 to 3.
    @Test func historyDecodingWhatTheGlancePicksIsHistoryDecodingEverything() throws {
        let dir = ReplayTempDir("glance-history")
        let store = try TopicStore(directory: dir.sub("live"))
        defer { store.close() }
        var world = World(random: ReplayRandom(seed: 41))
        for _ in 0..<40 {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            for r in store.submitAndWait((0..<25).map { _ in world.next(now: now) }) { _ = try r.get() }
        }
        try compare(store, world, "as written")
        // The same events in older versions: 2 and 3 keep the chain (it covers the version 2
        // form); 1 carries no link, and the chain is taken up again after it.
        var rng = ReplayRandom(seed: 43)
        var previous = ChainHash.genesis
        for seq in UInt64(1)...1000 {
            let bytes = try HashChainTests.rawRecord(store, seq)
            let link = try bytes.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: seq, previous: previous) }
            defer { previous = link }
            guard rng.int(3) == 0 else { continue }
            let record = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: seq) }
            let version = 1 + rng.int(4)
            try HashChainTests.overwrite(store, seq, version == 1 ? try RecordCodec.encodeLegacyV1(record)
                                                                  : try RecordCodec.encode(record, previous: previous, version: UInt8(version)))
        }
        try compare(store, world, "in versions 1 to 5")
    }

    func compare(_ store: TopicStore, _ world: World, _ label: String) throws {
        var entries = 0, points = 0
        for project in ["alpha", "beta", "gamma"] {
            for device in world.devices + ["dev-9"] {
                let picked = try History.device(device, project: project, in: store, recordsPerReadTransaction: 37, decodingEveryRecord: false)
                let every = try History.device(device, project: project, in: store, recordsPerReadTransaction: 37, decodingEveryRecord: true)
                #expect(picked.entries == every.entries && picked.asOfSeq == every.asOfSeq, "\(label): \(project) \(device)")
                entries += every.entries.count
            }
            for code in world.topics + ["none"] {
                let picked = try History.topic(code, project: project, in: store, recordsPerReadTransaction: 37, decodingEveryRecord: false)
                let every = try History.topic(code, project: project, in: store, recordsPerReadTransaction: 37, decodingEveryRecord: true)
                #expect(picked.points == every.points && picked.lifecycle == every.lifecycle && picked.createdSeq == every.createdSeq
                        && picked.createdAt == every.createdAt && picked.asOfSeq == every.asOfSeq && picked.asOfTime == every.asOfTime,
                        "\(label): \(project) \(code)")
                points += every.points.count
            }
        }
        // The world is busy enough that every kind of entry is compared.
        let kinds = try Set(world.devices.flatMap { try History.device($0, project: "alpha", in: store).entries.map(\.kind) })
        #expect(kinds.isSuperset(of: [.token, .tokenTaken, .register, .unregister, .unregisterAll, .tokenRejected,
                                      .rejectionIgnored, .forgotten, .tokenExpired]), "\(label): \(kinds)")
        #expect(entries > 300 && points > 100, "\(label)")
    }
}
