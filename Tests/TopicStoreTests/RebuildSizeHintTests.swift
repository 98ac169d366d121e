import Foundation
@testable import Replay
import SubscriptionLog
import Testing
import TopicStore

/// A rebuild sizes its name indexes and topic records from what the store's
/// projections hold, for the share of the log it folds (`Replay.sizeHint`),
/// so a large build does not grow them by rehashing.
@Suite struct RebuildSizeHintTests {
    @Test func theHintIsWhatTheStoreHoldsForTheShareOfTheLogFolded() throws {
        let dir = ReplayTempDir("size-hint")
        let store = try TopicStore(directory: dir.sub("live"))
        // 300 devices, each with a token and a register of a shared topic and its own: 600 events, 301 topics.
        var events: [Event] = []
        for i in 0..<300 {
            events.append(Event(project: i % 3 == 0 ? "q" : "p", body: .token(deviceID: "d\(i)", token: "t\(i)", platform: .ios)))
            events.append(Event(project: i % 3 == 0 ? "q" : "p",
                                body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "user.\(i)")])))
        }
        for result in store.submitAndWait(events) { _ = try result.get() }
        let sizes = try store.tableSizes()
        // "all" in each of the two projects, and each device's own topic.
        #expect(sizes.devices == 300 && sizes.topics == 302)
        #expect(sizes.firstSequence == 1 && sizes.lastSequence == 600)
        #expect(Replay.sizeHint(store, events: 600) == (300, 302))
        // More events than the log holds as installs: at most a sixteenth above what the store holds (a
        // build of the log's earlier part may hold what garbage collection dropped since).
        #expect(Replay.sizeHint(store, events: 5_000) == (318, 320), "never more than a sixteenth above what the store holds")
        // A quarter and a tenth of a log of installs: both rules agree.
        #expect(Replay.sizeHint(store, events: 150) == (75, 75))
        #expect(Replay.sizeHint(store, events: 60) == (30, 30))
        // 600 more events that add no device or topic: the installs are the first half of the log.
        var churn: [Event] = []
        for i in 0..<600 { churn.append(Event(project: "p", body: .unregister(deviceID: "d\(i % 300)", codes: ["all"]))) }
        for result in store.submitAndWait(churn) { _ = try result.get() }
        // Its first half: in proportion, 150 devices and 151 topics; as installs, 300 devices, and
        // topics as the store holds them per device, 302: what that half holds (a topic for every two
        // events would be 300, and a build of a larger log grew its name index in the middle of the fold).
        #expect(Replay.sizeHint(store, events: 600) == (300, 302))
        // Its first tenth (120 events): in proportion 30 and 30, as installs 60 and 60.
        #expect(Replay.sizeHint(store, events: 120) == (60, 60))
        // And the rebuild that takes the hint equals the live store.
        let out = dir.sub("rebuilt")
        try Replay.rebuild(from: store, to: .sequence(1_200), into: out, options: Replay.Options())
        #expect(replayDumpDifferences(try replayDumpTables(store), try replayDumpTables(try replayOpenReadOnly(out))).isEmpty)
    }

    /// A store whose projections hold nothing (its log only read so far, or
    /// empty) falls back to a device for every two events, at most 8M.
    @Test func withoutHeldDevicesTheHintComesFromTheEvents() throws {
        let dir = ReplayTempDir("size-hint-empty")
        let store = try TopicStore(directory: dir.sub("live"))
        #expect(Replay.sizeHint(store, events: 1_000) == (500, 0))
        #expect(Replay.sizeHint(store, events: 100_000_000) == (8_000_000, 0))
    }
}
