import Foundation
import Notifications
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// The queue hands out a project's notifications oldest first, in the order of
/// its keys: creation time, then id. Two sends queued in the same millisecond
/// sorted by their random ids, so a project's second send could go out before
/// its first (`SendLanesTests.oneProjectsRateLimitDoesNotPaceAnother` failed
/// so about once in a few runs: the second send completed while the first was
/// still processing).
@Suite struct SendQueueOrderTests {
    @Test func sendsQueuedWithinOneMillisecondKeepTheirOrder() throws {
        let dir = TemporaryDirectory("queue-order")
        // Without syncs, hundreds of sends are queued within a few milliseconds.
        var options = TopicStore.Options()
        options.durability = .noSync
        let store = try TopicStore(directory: dir.sub("data"), options: options)
        defer { store.close() }
        for e in [Event(project: "demo", body: .token(deviceID: "d1", token: "tok-1", platform: .ios)),
                  Event(project: "demo", body: .register(deviceID: "d1", topics: [TopicSpec(code: "t")]))] {
            try store.submitAndWait(e)
        }
        let queue = try SendQueue(store: store)
        let payload = try JSONParser.parse(Array(#"{"body":"hi"}"#.utf8))
        let expression = try #require(AudienceExpression.anyOf(["t"]))
        var ids: [String] = []
        var times: [Int64] = []
        for _ in 0..<300 {
            let record = try queue.enqueue(project: "demo", topics: ["t"], expression: expression, exprText: nil, payload: payload).record
            ids.append(record.id)
            times.append(record.createdAt)
        }
        #expect(try queue.pending() == ids)
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 < $1 }, "creation times strictly increase")
        // Each record says the time it was queued under.
        for (id, time) in zip(ids, times) { #expect(try queue.record(id: id)?.createdAt == time) }
        // Times are moved only as far as the order needs: 300 sends span about 300 ms at most
        // more than the wall clock did.
        #expect(times.last! - times.first! < 300 + 10_000)
    }
}
