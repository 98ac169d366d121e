import Foundation
import LMDB
@testable import Projections
import Roaring
import SubscriptionLog
import Testing

/// A build's topic chunks made from the devices' final topic lists
/// (`PostingInversion`): each chunk must hold exactly the devices whose lists
/// name its topic in its slice, and store the bytes the chunk the live path
/// grows one member at a time stores, or an audit would find a rebuild unequal.
@Suite struct PostingInversionTests {
    /// Lists of random devices over four slices (some ordinals with no device,
    /// some with an empty list; shared and single topic ids), inverted and
    /// compared with the inversion by a dictionary.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func chunksHoldExactlyTheDevicesListingTheirTopic(seed: UInt64) throws {
        var rng = SeededRandom(seed: seed)
        let ordinalCount = 3 * 65_536 + 1_000
        let topicIDs: [UInt32] = (16..<80).map { UInt32($0) } + (0..<40).map { ProjectionTables.singleTopicBit | UInt32($0) }
        let index = Dictionary(uniqueKeysWithValues: topicIDs.enumerated().map { ($1, $0) })
        var lists: [Int: [UInt32]] = [:]
        for _ in 0..<6_000 {
            // Dense near the slices' edges, where an off-by-one would show.
            let edge = [0, 65_535, 65_536, 131_071, 131_072, ordinalCount - 1][rng.int(6)]
            let ordinal = rng.int(2) == 0 ? rng.int(ordinalCount) : min(ordinalCount - 1, max(0, edge + rng.int(9) - 4))
            lists[ordinal] = Set((0..<rng.int(6)).map { _ in rng.pick(topicIDs) }).sorted()
        }
        var expected: [String: [UInt16]] = [:]
        for (ordinal, tids) in lists {
            for tid in tids { expected["\(tid)/\(ordinal >> 16)", default: []].append(UInt16(truncatingIfNeeded: ordinal)) }
        }
        var inversion = PostingInversion(topicCount: topicIDs.count)
        var got: [String: [UInt16]] = [:]
        var lastHigh: UInt16 = 0
        try inversion.invert(ordinalCount: ordinalCount, list: { ordinal, body in
            if let tids = lists[Int(ordinal)] { try tids.withUnsafeBufferPointer(body) }
        }, index: { tid in
            try #require(index[tid])
        }, emit: { tid, t, high, lows in
            #expect(topicIDs[t] == tid)
            #expect(high >= lastHigh, "slices come ascending")
            lastHigh = high
            let key = "\(tid)/\(high)"
            #expect(got[key] == nil, "chunk \(key) made twice")
            got[key] = Array(lows)
        })
        #expect(got.count == expected.count)
        for (key, lows) in expected { #expect(got[key] == lows.sorted(), "chunk \(key)") }
        #expect(lastHigh == 3)
    }

    /// A topic id the index does not know stops the inversion with its error.
    @Test func anUnknownTopicIsAnError() {
        struct Unknown: Error {}
        var inversion = PostingInversion(topicCount: 1)
        #expect(throws: Unknown.self) {
            try inversion.invert(ordinalCount: 3, list: { ordinal, body in
                if ordinal == 1 { try [16, 17].withUnsafeBufferPointer(body) }
            }, index: { tid in
                guard tid == 16 else { throw Unknown() }
                return 0
            }, emit: { _, _, _, _ in })
        }
    }

    /// A chunk made whole stores what a chunk grown one member at a time
    /// stores: inline sets, arrays up to 4,096 members, bitsets beyond, runs.
    @Test(arguments: [1, 2, 3, 4, 5, 100, 4_095, 4_096, 4_097, 30_000, 65_536])
    func aWholeChunkStoresTheBytesOfOneGrownByMembers(count: Int) {
        var rng = SeededRandom(seed: UInt64(count))
        let high: UInt16 = 7
        var lows: [UInt16]
        switch count {
        case 65_536: lows = (0...65_535).map { UInt16($0) }
        case 3: lows = [9, 10, 11]  // three in a row store as a run
        default: lows = Array(Set((0..<(count * 3)).map { _ in UInt16(rng.int(65_536)) })).sorted()
            lows = Array(lows.prefix(count))
        }
        var grown = PostingSet()
        for low in lows.shuffled(using: &rng) { grown.insert(UInt32(high) << 16 | UInt32(low)) }
        var whole = lows.withUnsafeBufferPointer { PostingSet(high: high, sortedLows: $0) }
        #expect(whole.toArray() == grown.toArray())
        grown.optimize()
        whole.optimize()
        #expect(whole.chunk() == grown.chunk())
    }

    /// The bitmap's slice is appended only when its values are strictly
    /// ascending and lie beyond every slice the bitmap has.
    @Test func aSliceIsAppendedOnlyInOrder() {
        let first: UInt32 = 5 << 16 | 1
        var bitmap = Bitmap([first])
        func append(_ high: UInt16, _ lows: [UInt16]) -> Bool {
            lows.withUnsafeBufferPointer { bitmap.appendSlice(high, sortedLows: $0) }
        }
        #expect(!append(6, []))
        #expect(!append(6, [3, 2]))
        #expect(!append(6, [2, 2]))
        #expect(!append(5, [7]))
        #expect(!append(4, [7]))
        #expect(bitmap.toArray() == [first])
        #expect(append(6, [2, 3, 65_535]))
        let six: UInt32 = 6 << 16
        #expect(bitmap.toArray() == [first, six | 2, six | 3, six | 65_535])
    }

    /// A build whose write fills the map is written again into the grown map
    /// (what `ProjectionBuilder` does): the chunks made from the lists are
    /// written again, and each topic's slices are listed once, as in a build
    /// written at the first try. Also against a chunk per device and topic
    /// read back from the lists themselves.
    @Test func aBuildWrittenAgainAfterTheMapFilledEqualsOneWrittenOnce() throws {
        let dir = TemporaryDirectory()
        var rng = SeededRandom(seed: 11)
        var records: [LogRecord] = []
        func add(_ body: EventBody, project: String = "p") {
            records.append(LogRecord(sequence: UInt64(records.count + 1), timestamp: 1_767_225_600_000 + Int64(records.count),
                                     event: Event(project: project, body: body)))
        }
        for i in 0..<3_000 {
            add(.token(deviceID: "device-\(i)", token: "token-\(i)-0123456789abcdef", platform: i % 3 == 0 ? .android : .ios))
            add(.register(deviceID: "device-\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(rng.int(40))"),
                                                              TopicSpec(code: "user.\(i)", title: "User \(i)", single: true)]),
                project: i % 7 == 0 ? "q" : "p")
            if rng.int(4) == 0 { add(.unregister(deviceID: "device-\(rng.int(i + 1))", codes: ["all"])) }
        }
        func build(_ path: String, mapSize: Int) throws -> (dump: [String: [[UInt8]: [UInt8]]], grown: Int) {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            var options = Environment.Options()
            options.mapSize = mapSize
            options.maxDatabases = 32
            options.noSync = true
            let env = try Environment(path: path, options: options)
            let tables = try ProjectionTables.open(in: env, create: true)
            try env.write { txn in try tables.setTopicLayout(.compact, txn) }
            let writer = ProjectionWriter(tables: tables, buildingWithEmptyTarget: true, memoryBudget: 1 << 30)
            try env.read { txn in
                try writer.begin(txn)
                for record in records { try Fold.apply(record, to: writer, txn) }
            }
            var grown = 0
            while true {
                do {
                    try env.write { txn in try writer.writeBuild(txn) }
                    writer.didWriteBuild()
                    break
                } catch LMDBError.mapFull {
                    // Grown a little at a time, so the writes fill it at every table in turn,
                    // the topics written after their slices were listed among them.
                    try env.setMapSize(env.info().mapSize + (16 << 10))
                    grown += 1
                }
            }
            return (try replayDumpTables(env, tables: tables, log: nil), grown)
        }
        let once = try build(dir.sub("once"), mapSize: 64 << 20)
        let again = try build(dir.sub("again"), mapSize: 256 << 10)
        #expect(once.grown == 0)
        #expect(again.grown > 8, "the small map did not fill often: the redo was not tested")
        #expect(replayDumpDifferences(once.dump, again.dump) == [])
        // Every device's topic list is in its topics' chunks, and nothing else is.
        func be32(_ bytes: [UInt8], _ at: Int) -> UInt32 { bytes[at..<(at + 4)].reduce(0) { $0 << 8 | UInt32($1) } }
        let lists = once.dump["device_topics"] ?? [:], chunks = once.dump["postings"] ?? [:]
        var members = 0
        for (key, value) in lists {
            let pid = be32(key, 0), ordinal = be32(key, 4)
            for tid in try #require(value.withUnsafeBytes { DeviceTopics.decode($0) }) {
                var chunkKey = [UInt8](repeating: 0, count: 10)
                chunkKey.withUnsafeMutableBytes { k in
                    k.storeBytes(of: pid.bigEndian, toByteOffset: 0, as: UInt32.self)
                    k.storeBytes(of: UInt16(ordinal >> 16).bigEndian, toByteOffset: 4, as: UInt16.self)
                    k.storeBytes(of: tid.bigEndian, toByteOffset: 6, as: UInt32.self)
                }
                let held = chunks[chunkKey] ?? []
                let ordinals = stride(from: 0, to: held.count, by: 4).map { be32(held, $0) }
                #expect(ordinals.contains(ordinal))
                members += 1
            }
        }
        let held = chunks.filter { be32($0.key, 6) >= 16 }.values.reduce(0) { $0 + $1.count / 4 }
        #expect(held == members && members > 6_000)
    }
}

