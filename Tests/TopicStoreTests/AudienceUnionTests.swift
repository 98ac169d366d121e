import Foundation
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// An OR of topics gathers small topics' members from their chunks and reads
/// the rest as bitmaps; when the gathered list fills up, the remaining topics
/// go the bitmap way. Whatever mix of paths a query takes, its counts are the
/// set union's.
@Suite struct AudienceUnionTests {
    @Test("an OR of many small and some large topics counts the set union, whichever path each topic takes")
    func manyTopicUnionsCountTheSetUnion() throws {
        let dir = TemporaryDirectory("audience-union")
        let store = try TopicStore(directory: dir.sub("data"))
        defer { store.close() }
        var members: [String: Set<Int>] = [:]
        var rng = SeededRandom(seed: 0xA0D1)
        var events: [Event] = []
        for d in 0..<1_500 {
            let device = "d\(d)"
            events.append(Event(project: "p", body: .token(deviceID: device, token: String(format: "%064x", d), platform: d % 3 == 0 ? .android : .ios)))
            // Its own topic, a few of 40 group topics of ~100 members, and one of 3 large ones.
            var codes = ["user.\(d)", "big\(d % 3)"]
            for _ in 0..<3 { codes.append("group\(rng.int(40))") }
            for c in codes { members[c, default: []].insert(d) }
            events.append(Event(project: "p", body: .register(deviceID: device, topics: codes.map { TopicSpec(code: $0) })))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }

        func check(_ codes: [String], _ label: String) throws {
            let expected = codes.reduce(into: Set<Int>()) { $0.formUnion(members[$1] ?? []) }
            let reader = store.reader
            let counts = try store.read { txn in
                try reader.counts(of: try reader.audience(project: "p", try #require(AudienceExpression.anyOf(codes)), txn), txn)
            }
            #expect(counts.total == expected.count, "\(label)")
            #expect(counts.android == expected.filter { $0 % 3 == 0 }.count, "\(label)")
            #expect(counts.ios == expected.filter { $0 % 3 != 0 }.count, "\(label)")
        }
        let users = (0..<1_500).map { "user.\($0)" }
        try check(Array(users.prefix(100)), "100 per-user topics")
        try check(users, "1,500 per-user topics")
        try check(Array(users.prefix(50)) + (0..<40).map { "group\($0)" }, "groups overflow the gathered list")
        try check((0..<40).map { "group\($0)" } + Array(users.prefix(200)), "groups first, then per-user topics")
        try check(["big0", "user.7", "group3", "big2", "user.8", "nosuch"], "large topics among small ones")
        try check(users.shuffled(using: &rng) + ["big1"], "everything")
    }
}
