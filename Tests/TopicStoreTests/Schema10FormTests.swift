import Foundation
import LMDB
@testable import Projections
import Replay
import Roaring
import SubscriptionLog
import Testing
import TopicStore

/// Since schema 10 posting chunks are stored in the compact format (a tag
/// byte and a zero byte before the container) and devices' topic lists in
/// the varint form; a store from before keeps its chunks in the portable
/// format and its lists as 4-byte ids until the writer rewrites them. Both
/// read alike, and the audit finds the old ones equal to the rebuild's.
@Suite struct Schema10FormTests: RunsTopicstore {
    /// Lists of every shape come back as written, in the size `encodedSize`
    /// says, and the 4-byte form of the same list decodes to it too.
    @Test func topicListsRoundTripInBothForms() {
        var rng = SeededRandom(seed: 31)
        for round in 0..<3_000 {
            var ids = Set<UInt32>()
            for _ in 0..<(1 + rng.int(round % 10 == 0 ? 300 : 12)) {
                switch rng.int(4) {
                case 0: ids.insert(ProjectionTables.singleTopicBit | UInt32(rng.int(Int(ProjectionTables.topicIDLimit))))
                case 1: ids.insert(UInt32(16 + rng.int(200)))
                case 2: ids.insert(UInt32.max - UInt32(rng.int(3)))
                default: ids.insert(UInt32(truncatingIfNeeded: rng.next()))
                }
            }
            let list = ids.sorted()
            let bytes = DeviceTopics.encoded(list)
            #expect(bytes.count == DeviceTopics.encodedSize(list) && bytes[0] == 0xFF)
            #expect(bytes.withUnsafeBytes { DeviceTopics.decode($0) } == list)
            let old = list.flatMap { withUnsafeBytes(of: $0.bigEndian, Array.init) }
            if list[0] < 0xFF00_0000 { #expect(old.withUnsafeBytes { DeviceTopics.decode($0) } == list) }
        }
        // Bench's shape: `all`, a platform topic, six Zipf topics and a per-user topic.
        let bench: [UInt32] = [16, 17, 19, 243, 1_345, 2_003, 7_000, 9_100, ProjectionTables.singleTopicBit | 10_018]
        // The marker, 16, 1, 2, then steps of 224 to 4,997 in 2 bytes each, and 5 for the per-user topic.
        #expect(DeviceTopics.encodedSize(bench) == 1 + 1 + 1 + 1 + 2 + 2 + 2 + 2 + 2 + 5)
    }

    /// Damaged lists are refused, not misread: cut short, a step of zero (an
    /// id twice), a varint longer than its shortest form, past 2^32 - 1, the
    /// marker alone; and 4-byte lists out of order or of a wrong length.
    @Test func damagedTopicListsDoNotDecode() {
        let list: [UInt32] = [16, 300, 70_000, ProjectionTables.singleTopicBit | 5]
        let bytes = DeviceTopics.encoded(list)
        for n in 0..<bytes.count {
            let cut = Array(bytes.prefix(n))
            let decoded = cut.withUnsafeBytes { DeviceTopics.decode($0) }
            // A cut between two varints is a shorter list, which only the audit can tell.
            #expect(decoded == nil || list.starts(with: decoded!), "cut to \(n) bytes")
        }
        #expect(([0xFF, 0x10, 0x01] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == [16, 17])
        #expect(([0, 0, 0, 16, 0, 0, 0, 17] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == [16, 17])
        #expect(([0xFF] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil)
        #expect(([0xFF, 0x10, 0x00] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil, "a step of zero")
        #expect(([0xFF, 0x90, 0x00] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil, "a trailing zero group")
        #expect(([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil, "past 2^32 - 1")
        #expect(([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == [UInt32.max])
        #expect(([0xFF, 0x80] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil, "a varint cut short")
        #expect(([0, 0, 0, 17, 0, 0, 0, 16] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil, "descending")
        #expect(([0, 0, 0, 17, 0, 0] as [UInt8]).withUnsafeBytes { DeviceTopics.decode($0) } == nil, "six bytes")
        #expect([UInt8]().withUnsafeBytes { DeviceTopics.decode($0) } == nil)
    }

    /// 66,000 devices (two slices): `all` (runs), `even` (a bitset in slice 0),
    /// `sparse` (arrays), and a per-user topic for every 500th device.
    static func fill(_ store: TopicStore) throws {
        var events: [Event] = []
        for i in 0..<66_000 {
            events.append(Event(project: "demo", body: .token(deviceID: "d\(i)", token: "tok\(i)", platform: i % 3 == 0 ? .android : .ios)))
            var topics = [TopicSpec(code: "all")]
            if i % 2 == 0 { topics.append(TopicSpec(code: "even")) }
            if i % 100 == 0 { topics.append(TopicSpec(code: "sparse")) }
            if i % 500 == 0 { topics.append(TopicSpec(code: "user.\(i)", single: true)) }
            events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: topics)))
        }
        for result in store.submitAndWait(events) { _ = try result.get() }
    }

    static func answers(_ store: TopicStore) throws -> [String] {
        try store.read { txn in
            var lines: [String] = []
            for e in ["all", "even", "sparse", "user.65500", "even AND NOT sparse", "sparse OR user.500 OR user.65000"] {
                let c = try store.reader.counts(project: "demo", try AudienceExpression(parsing: e), txn)
                lines.append("\(e): \(c.total) \(c.ios) \(c.android)")
            }
            let topics = try store.reader.topics(1, txn).map { "\($0.record.code) \($0.record.subscribers)" }
            return lines + topics.sorted()
        }
    }

    /// The formats of the stored chunks: how many compact, how many portable.
    static func formats(_ store: TopicStore) throws -> (compact: Int, portable: Int) {
        try store.read { txn in
            var compact = 0, portable = 0
            try txn.withCursor(store.tables.postings) { cursor in
                var entry = try cursor.first()
                while let (_, v) = entry {
                    if Bitmap.isCompactChunk(v) { compact += 1 } else { portable += 1 }
                    entry = try cursor.next()
                }
            }
            return (compact, portable)
        }
    }

    @Test func aSchema9StoreReadsWritesAndAuditsClean() throws {
        let dir = TemporaryDirectory("chunk-formats")
        let expected: [String]
        var bytes = (compact: 0, portable: 0, varints: 0, ids: 0)
        // Per slice (two): the three built-in sets, `all`, `even` and `sparse`; and 132 per-user topics.
        let chunks = 2 * (3 + 3) + 132
        do {
            let store = try TopicStore(directory: dir.path)
            try Self.fill(store)
            expected = try Self.answers(store)
            #expect(try Self.formats(store) == (compact: chunks, portable: 0))
            // As schema 9 wrote them: every chunk in the portable format (its slice in its
            // header, from the key), every topic list as 4-byte ids, and the stamp 9.
            let lists = try rewriteAsOlderSchema(store, store.tables.deviceTopics, schema: 9) { v in
                #expect(v[0] == 0xFF)
                let ids = try #require(DeviceTopics.decode(v))
                bytes.varints += v.count; bytes.ids += 4 * ids.count
                return ids.flatMap { withUnsafeBytes(of: $0.bigEndian, Array.init) }
            }
            #expect(lists == 66_000)
            let rewritten = try rewriteAsOlderSchema(store, store.tables.postings, schema: 9) { k, v in
                let portable = try Bitmap(chunk: v, high: k.loadBigEndian(at: 4, as: UInt16.self)).serialized()
                #expect(portable.count > v.count)
                bytes.compact += v.count; bytes.portable += portable.count
                return portable
            }
            #expect(rewritten == chunks)
            store.close()
        }
        // Most chunks of one value: the portable format spent 16 bytes of header on an array, 2 now.
        #expect(bytes.portable - bytes.compact >= chunks * 9, "\(bytes)")
        // 66,000 lists of 2 to 4 topics: `all` first (1 byte), then 1 to 5 bytes a topic.
        #expect(bytes.varints < bytes.ids * 3 / 4, "\(bytes)")
        do {
            var readOnly = TopicStore.Options()
            readOnly.readOnly = true
            let store = try TopicStore(directory: dir.path, options: readOnly)
            defer { store.close() }
            #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == 9)
            #expect(try Self.formats(store) == (compact: 0, portable: chunks))
            #expect(try Self.answers(store) == expected)
        }
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == ProjectionTables.schemaVersion)
        #expect(try Self.answers(store) == expected)
        // Changes rewrite the chunks they touch, in the compact format, beside the others.
        try store.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "d2", codes: ["even"])))
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "d65999", topics: [TopicSpec(code: "sparse")])))
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "d7", topics: [TopicSpec(code: "user.7", single: true)])))
        let formats = try Self.formats(store)
        #expect(formats.compact >= 3 && formats.portable >= chunks - 8 && formats.compact + formats.portable == chunks + 1, "\(formats)")
        let counts = try store.read { txn in
            try ["even", "sparse", "user.7", "all"].map { code in
                try store.reader.counts(project: "demo", try AudienceExpression(parsing: code), txn).total
            }
        }
        #expect(counts == [32_999, 661, 1, 66_000])
        // The rebuild writes compact chunks and varint lists: every portable chunk and
        // 4-byte list left is the same set (the three lists changed were written again).
        let report = try Audit.run(store)
        #expect(report.isClean, "\(report.differences)")
        #expect(report.equivalentEncodings == formats.portable + 66_000 - 3)
        // The command says so too, an operator's check after an upgrade.
        let text = try topicstore(["audit", "--data", dir.path])
        #expect(text.status == 0 && text.stdout.contains("\n  \(report.equivalentEncodings) of them in an older or another encoding"), "\(text.stdout)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(topicstore(["audit", "--data", dir.path, "--json"]).stdout.utf8)) as? [String: Any])
        #expect(json["ok"] as? Bool == true && json["equivalentEncodings"] as? Int == report.equivalentEncodings)
        // A list that differs is still found, and shown decoded.
        try store.environment.write { txn in
            try txn.put(store.tables.deviceTopics, Keys.pair(1, 4), DeviceTopics.encoded([16, 18]))
        }
        let damaged = try Audit.run(store)
        #expect(damaged.differences.count == 1 && damaged.differences.first?.table == "device_topics", "\(damaged.differences)")
        #expect(damaged.differences.first?.live == "all, sparse" && damaged.differences.first?.rebuilt == "all, even", "\(damaged.differences)")
    }
}
