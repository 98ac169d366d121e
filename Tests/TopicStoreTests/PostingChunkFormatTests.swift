import Foundation
import LMDB
@testable import Projections
import Replay
import Roaring
import SubscriptionLog
import Testing
import TopicStore

/// Posting chunks since schema 10 are stored in the compact format (a tag
/// byte and a zero byte before the container); a store from before keeps its
/// chunks in the portable format until the writer rewrites them. Both read
/// alike, and the audit finds the old chunks equal to the rebuild's.
@Suite struct PostingChunkFormatTests {
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
        var bytes = (compact: 0, portable: 0)
        // Per slice (two): the three built-in sets, `all`, `even` and `sparse`; and 132 per-user topics.
        let chunks = 2 * (3 + 3) + 132
        do {
            let store = try TopicStore(directory: dir.path)
            try Self.fill(store)
            expected = try Self.answers(store)
            #expect(try Self.formats(store) == (compact: chunks, portable: 0))
            // As schema 9 wrote them: every chunk in the portable format (its slice in its
            // header, from the key), and the stamp 9.
            try store.environment.write { txn in
                var rewritten: [([UInt8], [UInt8])] = []
                try txn.withCursor(store.tables.postings) { cursor in
                    var entry = try cursor.first()
                    while let (k, v) = entry {
                        let high = k.loadBigEndian(at: 4, as: UInt16.self)
                        let portable = try Bitmap(chunk: v, high: high).serialized()
                        #expect(portable.count > v.count)
                        bytes.compact += v.count; bytes.portable += portable.count
                        rewritten.append((Array(k), portable))
                        entry = try cursor.next()
                    }
                }
                for (k, v) in rewritten { try txn.put(store.tables.postings, k, v) }
                try txn.put(store.tables.meta, Array("schemaVersion".utf8), [0, 0, 0, 9])
            }
            store.close()
        }
        // Most chunks of one value: the portable format spent 16 bytes of header on an array, 2 now.
        #expect(bytes.portable - bytes.compact >= chunks * 9, "\(bytes)")
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
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == 10)
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
        // The rebuild writes compact chunks: every portable one left is the same set.
        let report = try Audit.run(store)
        #expect(report.isClean, "\(report.differences)")
        #expect(report.equivalentEncodings == formats.portable)
    }
}
