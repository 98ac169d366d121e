import Compaction
import Foundation
import Notifications
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// Sent notifications (records, pinned audiences, opens) were kept for ever, so a store that sends
/// grew without bound however often it was compacted (a tenant review). Compaction removes those
/// completed before the retention window; one still being delivered is never removed.
@Suite struct CompactionNotificationsTests {
    @Test func notificationsCompletedBeforeTheWindowAreRemoved() throws {
        let dir = TemporaryDirectory("compact-notifications")
        let data = dir.sub("data")
        let store = try TopicStore(directory: data)
        for e in [Event(project: "demo", body: .token(deviceID: "d1", token: "tok-1", platform: .ios)),
                  Event(project: "demo", body: .register(deviceID: "d1", topics: [TopicSpec(code: "t")]))] {
            try store.submitAndWait(e)
        }
        let queue = try SendQueue(store: store)
        let payload = try JSONParser.parse(Array(#"{"body":"hi"}"#.utf8))
        func send(_ topic: String) throws -> String {
            try queue.enqueue(project: "demo", topics: [topic], expression: try #require(AudienceExpression.anyOf([topic])),
                              exprText: nil, payload: payload).record.id
        }
        // One delivered and opened, one to nobody (completed at once), one still queued.
        let delivered = try send("t")
        try queue.update(id: delivered) { $0.sentCount = 1; $0.cursor = nil; $0.status = .completed }
        #expect(try queue.recordOpen(id: delivered, project: "demo", deviceID: "d1", button: nil) == .counted)
        let empty = try send("nobody")
        let pending = try send("t")
        #expect(try queue.record(id: empty)?.status == .completed && queue.record(id: pending)?.status == .queued)
        store.close()

        // Inside the window: nothing goes.
        var keep = Compactor.Options(retain: RetentionDuration(milliseconds: 3_600_000))
        keep.compactFile = false
        #expect(try Compactor.run(directory: data, options: keep).notificationsRemoved == 0)

        usleep(5_000)
        var options = Compactor.Options(retain: RetentionDuration(milliseconds: 0))
        options.dryRun = true
        #expect(try Compactor.run(directory: data, options: options).notificationsRemoved == 2)
        options.dryRun = false
        let report = try Compactor.run(directory: data, options: options)
        #expect(report.notificationsRemoved == 2)
        #expect(CompactionReportFormat.text(report).contains("notifications: remove 2 sent before the retention window"),
                "\(CompactionReportFormat.text(report))")

        let after = try TopicStore(directory: data)
        defer { after.close() }
        let q = try SendQueue(store: after)
        #expect(try q.record(id: delivered) == nil && q.record(id: empty) == nil && q.audience(id: delivered) == nil)
        #expect(try q.record(id: pending)?.status == .queued && q.audience(id: pending) != nil)
        #expect(try q.pending() == [pending])
        let opens = try after.readAuxiliary { txn, tables in try txn.statistics(try #require(tables[SendQueue.opensTable])).entries }
        #expect(opens == 0)
    }
}
