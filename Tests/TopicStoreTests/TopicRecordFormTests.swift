import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Topic records since schema 5 (form 2) store their sequences and lengths as
/// varints, no title when it is the code and no subscriber count in the
/// compact layout; a record of an older store (form 1) still reads, and audits
/// as the same record.
@Suite struct TopicRecordFormTests {
    /// Varints come back as written, in the size `size` says, and only their shortest form reads.
    @Test func varintsRoundTripAndRefuseOtherForms() {
        var values: [UInt64] = [0, 1, 127, 128, 255, 16_383, 16_384, 1 << 28 - 1, 1 << 28, UInt64(UInt32.max), 1 << 63, .max]
        var rng = SeededRandom(seed: 21)
        for _ in 0..<2_000 { values.append(rng.next() >> UInt64(rng.int(64))) }
        for v in values {
            var buffer = [UInt8](repeating: 0xEE, count: 12)
            var at = 1
            buffer.withUnsafeMutableBytes { Varint.write(v, at: $0.baseAddress!, &at) }
            #expect(at == 1 + Varint.size(v))
            var readAt = 1
            #expect(buffer.withUnsafeBytes { Varint.read($0, &readAt) } == v)
            #expect(readAt == at)
            // Cut short, it does not read.
            var cutAt = 1
            #expect(Array(buffer.prefix(at - 1)).withUnsafeBytes { Varint.read($0, &cutAt) } == nil && cutAt == 1)
        }
        #expect(Varint.size(0) == 1 && Varint.size(127) == 1 && Varint.size(128) == 2 && Varint.size(.max) == 10)
        for bad: [UInt8] in [[0x80, 0x00],                                                   // 0 in two bytes
                             [0xFF, 0x80, 0x00],                                             // a trailing zero group
                             [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02],   // 2^64: too big
                             [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x81, 0x01]] {  // 11 bytes
            var at = 0
            #expect(bad.withUnsafeBytes { Varint.read($0, &at) } == nil, "\(bad)")
        }
    }

    static func randomRecord(_ rng: inout SeededRandom) -> TopicRecord {
        let code = rng.int(3) == 0 ? "user.\(rng.int(10_000_000))" : String(repeating: "c", count: 1 + rng.int(200))
        let title: String
        switch rng.int(4) {
        case 0: title = code
        case 1: title = ""
        case 2: title = String(repeating: "é", count: rng.int(300))
        default: title = "Title \(rng.int(100))"
        }
        let created = rng.int(5) == 0 ? UInt64(rng.int(200)) : rng.next() >> UInt64(rng.int(64))
        let last = rng.int(2) == 0 ? created : created &+ UInt64(1 + rng.int(1_000_000))
        var record = TopicRecord(code: code, title: title, single: rng.int(2) == 0, subscribers: UInt32(truncatingIfNeeded: rng.next()),
                                 createdSeq: created, lastChangeSeq: last)
        let sliceCount = [0, 1, 2, 130, 300][rng.int(5)]
        record.slices = Array(Set((0..<sliceCount).map { _ in UInt16(rng.int(65_536)) })).sorted()
        return record
    }

    /// A record that leaves its last slice out (its project's newest) is encoded
    /// where it is held, as a copy without that slice encodes; its size is what
    /// `encodedSize` says, and never more than `encodedSizeBound`, the room
    /// the write-out makes for it.
    @Test func aRecordWithoutItsLastSliceEncodesAsACopyWithoutIt() {
        var rng = SeededRandom(seed: 9)
        for i in 0..<3_000 {
            let record = Self.randomRecord(&rng)
            let storingCount = i % 2 == 0
            var copy = record
            if !copy.slices.isEmpty { copy.slices.removeLast() }
            let expected = copy.encoded(storingCount: storingCount)
            #expect(record.encoded(storingCount: storingCount, omittingLastSlice: true) == expected)
            #expect(record.encodedSize(storingCount: storingCount, omittingLastSlice: true) == expected.count)
            let bound = record.encodedSizeBound()
            #expect(record.encodedSize(storingCount: storingCount) <= bound)
            let written = [UInt8](unsafeUninitializedCapacity: bound) { buffer, initialized in
                initialized = record.encode(into: buffer.baseAddress!, storingCount: storingCount, omittingLastSlice: true)
            }
            #expect(written == expected)
        }
    }

    /// Both forms decode to the same record (form 2 without a count decodes with 0 subscribers,
    /// as form 1 stores 0 in the compact layout), in place as in full, and form 2 takes the size it says.
    @Test func recordsOfBothFormsDecode() throws {
        var rng = SeededRandom(seed: 5)
        for i in 0..<3_000 {
            var record = Self.randomRecord(&rng)
            let storingCount = i % 2 == 0
            let new = record.encoded(storingCount: storingCount)
            #expect(new.count == record.encodedSize(storingCount: storingCount))
            if !storingCount { record.subscribers = 0 }
            let old = Self.form1Encoding(record)
            for bytes in [new, old] {
                let decoded = try bytes.withUnsafeBytes { try TopicRecord(decoding: $0, at: "test") }
                #expect(decoded == record)
                #expect(bytes.withUnsafeBytes { TopicRecord.storedSlices(of: $0).map(Array.init) } == record.slices)
            }
            // Smaller, unless a sequence is past 2^49 (a varint of 8 bytes or more).
            if record.createdSeq < 1 << 49 && record.lastChangeSeq < 1 << 49 { #expect(new.count < old.count) }
        }
        // A per-user topic as the SDKs create it: its title is its code, one device in one slice.
        var perUser = TopicRecord(code: "user.1234567", title: "user.1234567", single: true, subscribers: 1,
                                  createdSeq: 2_000_000, lastChangeSeq: 2_000_000)
        perUser.slices = [18]
        #expect(perUser.encoded(storingCount: false).count == 20 && Self.form1Encoding(perUser).count == 55)
    }

    /// Damaged records are refused, not misread: cut short at every length, padded, an unknown
    /// flag, a last change stored although flagged as the creation's, a length past the end.
    @Test func damagedRecordsDoNotDecode() {
        var record = TopicRecord(code: "news", title: "News", single: false, subscribers: 3, createdSeq: 300, lastChangeSeq: 90_000)
        record.slices = [0, 7]
        for storingCount in [false, true] {
            let bytes = record.encoded(storingCount: storingCount)
            for n in 0..<bytes.count {
                #expect(Array(bytes.prefix(n)).withUnsafeBytes { TopicRecord.fields(of: $0) } == nil, "cut to \(n) bytes")
            }
            #expect((bytes + [0]).withUnsafeBytes { TopicRecord.fields(of: $0) } == nil)
            for flag: UInt8 in [0x10, 0x20, 0x40] {
                var unknown = bytes
                unknown[0] |= flag
                #expect(unknown.withUnsafeBytes { TopicRecord.fields(of: $0) } == nil)
            }
        }
        // The last change equal to the creation is never stored: stored, the record is not one this code writes.
        var same = record
        same.lastChangeSeq = same.createdSeq
        var stored = record.encoded(storingCount: false)
        let createdAt = 1, lastAt = createdAt + Varint.size(300)
        stored.replaceSubrange(lastAt..<lastAt + Varint.size(90_000), with: Array(stored[createdAt..<lastAt]))
        #expect(stored.withUnsafeBytes { TopicRecord.fields(of: $0) } == nil)
        #expect(same.encoded(storingCount: false).count == stored.count - Varint.size(300))
        // A code length past the end.
        var long = record.encoded(storingCount: false)
        long[lastAt + Varint.size(90_000)] = 0x7F
        #expect(long.withUnsafeBytes { TopicRecord.fields(of: $0) } == nil)
        // Form 1 with a first byte it never wrote.
        var old = Self.form1Encoding(record)
        old[0] = 2
        #expect(old.withUnsafeBytes { TopicRecord.fields(of: $0) } == nil)
    }

    /// A schema 4 store, its topic records in form 1: read-only, it answers as
    /// before; opened for writing it is stamped 6, a topic the writer rewrites
    /// (here: for schema 6, then for a title) is in form 2 beside the untouched
    /// ones, and the audit finds the old records equal to the rebuild's.
    @Test func aSchema4StoreReadsAndAuditsClean() throws {
        let dir = TemporaryDirectory("topic-forms-v4")
        do {
            let store = try TopicStore(directory: dir.path)
            try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D1", token: "tok-1", platform: .ios)))
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D1", topics: [
                TopicSpec(code: "news", title: "News"), TopicSpec(code: "user.1", single: true), TopicSpec(code: "sport")])))
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D2", topics: [TopicSpec(code: "sport")])))
            // As schema 4 wrote them: every topic record in form 1, and the stamp 4.
            let rewritten = try rewriteAsOlderSchema(store, store.tables.topics, schema: 4) { v in
                Self.form1Encoding(try TopicRecord(decoding: v, at: "test"))
            }
            #expect(rewritten == 3)
            store.close()
        }
        func answers(_ store: TopicStore) throws -> [String] {
            try store.read { txn in
                let topics = try store.reader.topics(1, txn).map { "\($0.record.code) \($0.record.title) \($0.record.single)" }
                let d1 = try #require(try store.reader.device(1, deviceID: "D1", txn))
                let sport = try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("sport"), txn), txn)
                return topics + d1.topics + ["\(sport.total)"]
            }
        }
        let expected = ["news News false", "user.1 user.1 true", "sport sport false", "news", "sport", "user.1", "2"]
        do {
            var readOnly = TopicStore.Options()
            readOnly.readOnly = true
            let store = try TopicStore(directory: dir.path, options: readOnly)
            defer { store.close() }
            #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == 4)
            #expect(try answers(store).sorted() == expected.sorted())
        }
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == ProjectionTables.schemaVersion)
        #expect(try answers(store).sorted() == expected.sorted())
        // Schema 6 took the newest slice (0) out of news and sport, rewriting them (form 2);
        // a new title rewrites news again; user.1 keeps its form 1 record.
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D2", topics: [TopicSpec(code: "news", title: "World news")])))
        let forms = try store.read { txn in
            try store.reader.topics(1, txn).map { t -> String in
                let v = try #require(try txn.get(store.tables.topics, Keys.pair(1, t.id)))
                return "\(t.record.code) \(v[0] & TopicRecord.form2Flag == 0 ? 1 : 2)"
            }
        }
        #expect(forms.sorted() == ["news 2", "sport 2", "user.1 1"])
        let report = try Audit.run(store)
        #expect(report.isClean && report.equivalentEncodings == 1, "\(report.differences)")
    }

    /// The form before schema 5, as those versions wrote it.
    static func form1Encoding(_ r: TopicRecord) -> [UInt8] {
        var w = ByteWriter()
        w.u8(r.single ? 1 : 0); w.u32(r.subscribers); w.u64(r.createdSeq); w.u64(r.lastChangeSeq)
        for s in [r.code, r.title] {
            let u = Array(s.utf8)
            w.u16(UInt16(u.count)); w.raw(u)
        }
        w.u32(UInt32(r.slices.count))
        for s in r.slices { w.u16(s) }
        return w.bytes
    }
}
