import Foundation
@testable import Projections
import Roaring
import SubscriptionLog
import Testing
import TopicStore

/// Stored posting chunks read without decoding them, and the counts built on that.
@Suite struct PostingChunkTests {
    /// The header's cardinality equals the decoded bitmap's, for array, bitset
    /// and run containers, optimized or not; a chunk of another slice is refused.
    @Test func headerCardinalityMatchesTheDecodedCount() {
        var rng = SeededRandom(seed: 3)
        for round in 0..<400 {
            let high = UInt16(rng.next() % 40)
            let base = UInt32(high) << 16
            var bitmap = Bitmap()
            switch round % 4 {
            case 0:  // sparse: an array container
                for _ in 0..<(1 + rng.next() % 4000) { bitmap.insert(base + UInt32(rng.next() % 65_536)) }
            case 1:  // dense: a bitset
                for _ in 0..<(5000 + rng.next() % 50_000) { bitmap.insert(base + UInt32(rng.next() % 65_536)) }
            case 2:  // runs
                var at = UInt32(rng.next() % 1000)
                while at < 65_000 {
                    let length = UInt32(1 + rng.next() % 3000)
                    for v in at..<min(at + length, 65_536) { bitmap.insert(base + v) }
                    at += length + UInt32(1 + rng.next() % 2000)
                }
            default:  // the whole slice
                for v in 0..<UInt32(65_536) { bitmap.insert(base + v) }
            }
            if rng.next() % 2 == 0 { bitmap.optimize() }
            let bytes = bitmap.serialized()
            bytes.withUnsafeBytes { b in
                #expect(PostingChunk.cardinality(of: b, high: high) == bitmap.count, "round \(round)")
                #expect(PostingChunk.cardinality(of: b, high: high &+ 1) == nil, "another slice's chunk")
                #expect(PostingChunk.cardinality(of: UnsafeRawBufferPointer(rebasing: b[0..<3]), high: high) == nil)
            }
        }
    }

    /// Counts of audiences that cover whole 65,536-device slices (read from the
    /// live sets' headers) and of audiences that cover part of one (intersected),
    /// against what the store was told.
    @Test func countsOfAudiencesThatCoverWholeSlices() throws {
        let dir = TemporaryDirectory("full-slices")
        var options = TopicStore.Options()
        options.durability = .noSync
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        let devices = 65_536 + 3_000
        var events: [Event] = []
        for i in 0..<devices {
            // Every 7th device has no token; every 5th of the rest is on Android.
            if i % 7 != 0 {
                events.append(Event(project: "p", body: .token(deviceID: "d\(i)", token: "tok\(i)", platform: i % 5 == 0 ? .android : .ios)))
            }
            events.append(Event(project: "p", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "all")] + (i % 2 == 0 ? [TopicSpec(code: "even")] : []))))
            if events.count >= 4000 { for r in store.submitAndWait(events) { _ = try r.get() }; events = [] }
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        // Reject a few tokens in the full slice: they must leave the counts.
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        for i in [1, 2, 3, 10] { try store.submitAndWait(Event(project: "p", body: .tokenRejected(token: "tok\(i)", rejectedAt: later, reason: "Unregistered"))) }

        func expected(_ member: (Int) -> Bool) -> (total: Int, ios: Int, android: Int) {
            var total = 0, ios = 0, android = 0
            for i in 0..<devices where member(i) {
                total += 1
                guard i % 7 != 0, ![1, 2, 3, 10].contains(i) else { continue }
                if i % 5 == 0 { android += 1 } else { ios += 1 }
            }
            return (total, ios, android)
        }
        let reader = store.reader
        for (expression, member) in [(AudienceExpression.topic("all"), { (_: Int) in true }),
                                     (.topic("even"), { (i: Int) in i % 2 == 0 })] {
            let counts = try store.read { txn in try reader.counts(of: try reader.audience(project: "p", expression, txn), txn) }
            let want = expected(member)
            #expect(counts.total == want.total && counts.ios == want.ios && counts.android == want.android,
                    "\(expression): \(counts) against \(want)")
            #expect(counts.withoutToken == want.total - want.ios - want.android)
        }
    }
}
