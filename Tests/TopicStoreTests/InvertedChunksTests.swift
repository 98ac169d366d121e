import Foundation
@testable import Projections
import Testing

/// The build's topic chunks made on their own thread and taken by the writer
/// a slice at a time (`InvertedChunks`): every chunk in key order with the
/// bytes it stores, however little the maker may hold ahead, and a write
/// that stops early or a list naming a missing topic ends the thread.
@Suite struct InvertedChunksTests {
    struct Lists {
        var input: InvertedChunks.Input
        /// "pid/high/tid" → the members' low 16 bits, ascending.
        var expected: [(key: ProjectionWriter.ChunkKey, slot: Int32, lows: [UInt16])]
    }

    /// Random lists of two projects over several slices (topic slots shared
    /// between the projects' topic ids, as the writer's cache has them).
    static func lists(seed: UInt64, missingTopic: Bool = false) -> Lists {
        var rng = SeededRandom(seed: seed)
        var topicSlots = TopicColumns<Int32>(empty: 0)
        var slot: Int32 = 0
        var slots: [UInt32: [UInt32: Int32]] = [:]
        for pid in [UInt32(9), 4] {
            for tid in UInt32(16)..<40 {
                slot += 1
                _ = topicSlots.set(pid, tid, slot)
                slots[pid, default: [:]][tid] = slot - 1
            }
        }
        var lists = MembershipLists()
        var projects: [(pid: UInt32, memberSlots: [Int32])] = []
        var members: [String: (key: ProjectionWriter.ChunkKey, slot: Int32, lows: [UInt16])] = [:]
        for pid in [UInt32(4), 9] {
            let ordinals = pid == 4 ? 3 * 65_536 + 77 : 1_000
            var memberSlots = [Int32](repeating: 0, count: ordinals)
            for ordinal in 0..<ordinals where rng.int(3) != 0 {
                var list = Set((0..<rng.int(5)).map { _ in UInt32(16 + rng.int(24)) }).sorted()
                if missingTopic, ordinal == ordinals / 2 { list.append(99) }
                let slot = lists.appendUnindexed(ProjectionWriter.DeviceKey(pid: pid, ordinal: UInt32(ordinal)), list)
                memberSlots[ordinal] = Int32(slot + 1)
                for tid in list where tid != 99 {
                    let key = ProjectionWriter.ChunkKey(pid: pid, topic: tid, high: UInt16(ordinal >> 16))
                    members["\(pid)/\(ordinal >> 16)/\(tid)", default: (key, slots[pid]![tid]!, [])].lows
                        .append(UInt16(truncatingIfNeeded: ordinal))
                }
            }
            projects.append((pid, memberSlots))
        }
        let expected = members.values.sorted { ProjectionWriter.ascending($0.key, $1.key) }
        return Lists(input: InvertedChunks.Input(projects: projects, lists: lists.snapshot, topicSlots: topicSlots, topicCount: Int(slot)),
                     expected: expected)
    }

    @Test(arguments: [1, 4_000, 64 << 20])
    func everyChunkComesInKeyOrderWithItsBytes(bytesAhead: Int) throws {
        let lists = Self.lists(seed: UInt64(bytesAhead))
        let chunks = InvertedChunks(lists.input, bytesAhead: bytesAhead)
        defer { chunks.close() }
        var i = 0
        while let chunk = try chunks.next() {
            try #require(i < lists.expected.count, "more chunks than topics and slices listed")
            let want = lists.expected[i]
            #expect(chunk.key == want.key && chunk.slot == want.slot, "chunk \(i)")
            let stored = want.lows.withUnsafeBufferPointer { PostingSet(high: want.key.high, sortedLows: $0) }
            var optimized = stored
            optimized.optimize()
            #expect(Array(chunk.bytes) == optimized.chunk(), "chunk \(i): \(want.key)")
            i += 1
        }
        #expect(i == lists.expected.count)
        #expect(try chunks.next() == nil)
    }

    /// The writer stops after a few chunks (a full map) or before the first:
    /// `close` ends the maker, which is waiting for room.
    @Test func aWriteThatStopsEarlyEndsTheMaker() throws {
        let lists = Self.lists(seed: 7)
        for round in 0..<30 {
            let chunks = InvertedChunks(lists.input, bytesAhead: 1)
            for _ in 0..<(round % 3) * 5 { _ = try chunks.next() }
            if round == 0 {
                var seen = 0
                for _ in 0..<500 where seen == 0 {
                    seen = try BuildDevicesTests.threads(named: "build-chunks")
                    if seen == 0 { usleep(10_000) }
                }
                #expect(seen >= 1, "the maker waits for the writer: it should be there")
            }
            chunks.close()
        }
        let left = try BuildDevicesTests.threads(named: "build-chunks")
        #expect(left < 10, "\(left) of 30 makers left")
    }

    /// A list naming a topic the build does not hold: the writer gets the
    /// inversion's error after the chunks before it, never a partial chunk list silently.
    @Test func aMissingTopicReachesTheWriter() throws {
        let lists = Self.lists(seed: 3, missingTopic: true)
        let chunks = InvertedChunks(lists.input, bytesAhead: 1)
        defer { chunks.close() }
        #expect(throws: ProjectionCorruption.self) {
            while try chunks.next() != nil {}
        }
    }
}

extension InvertedChunks.Chunk: Equatable {
    public static func == (a: Self, b: Self) -> Bool { a.key == b.key && a.slot == b.slot && Array(a.bytes) == Array(b.bytes) }
}
