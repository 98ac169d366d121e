import Foundation
import LMDB
import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// How topics are laid out (`ProjectionTables.TopicLayout`): a new store puts
/// single topics apart and keeps no count in the records; a store from before
/// keeps both as it had them; a rebuild lays out as the store it rebuilds.
@Suite struct TopicIDTests {
    static let bit: UInt32 = 1 << 31

    static func fill(_ store: TopicStore) throws {
        let events: [EventBody] = [
            .register(deviceID: "D1", topics: [TopicSpec(code: "news"), TopicSpec(code: "user.1", single: true), TopicSpec(code: "sport")]),
            .register(deviceID: "D2", topics: [TopicSpec(code: "user.2", single: true), TopicSpec(code: "news")]),
            .token(deviceID: "D2", token: "tok-2", platform: .android),
            // `single` changed later: the id stays what it was at creation.
            .register(deviceID: "D1", topics: [TopicSpec(code: "sport", single: true), TopicSpec(code: "user.2")]),
            .unregister(deviceID: "D2", codes: ["user.2"]),
        ]
        for body in events { try store.submitAndWait(Event(project: "demo", body: body)) }
    }

    @Test func aNewStoreNumbersSingleTopicsApart() throws {
        let dir = TemporaryDirectory("topic-ids-new")
        let store = try TopicStore(directory: dir.path + "/live")
        try Self.fill(store)
        #expect(try Audit.run(store).isClean)
        // A rebuild, in memory and written through, lays out the same way and holds the same tables.
        for budget in [1 << 30, nil] as [Int?] {
            var options = Replay.Options()
            options.memoryBudget = budget
            let out = dir.path + "/rebuilt-\(budget ?? 0)"
            try Replay.rebuild(from: store, to: .sequence(5), into: out, options: options)
            let rebuilt = try replayOpenReadOnly(out)
            #expect(replayDumpDifferences(try replayDumpTables(store), try replayDumpTables(rebuilt)).isEmpty)
            rebuilt.close()
        }
        try store.read { txn in
            #expect(try store.tables.topicLayout(txn) == .compact)
            let pid = try #require(try store.reader.project(named: "demo", txn)).id
            let ids = try ["news", "user.1", "sport", "user.2"].map { try store.reader.topicID(pid, code: $0, txn) }
            #expect(ids == [16, 17 | Self.bit, 18, 19 | Self.bit])
            #expect(try store.reader.device(pid, deviceID: "D1", txn)?.topics.sorted() == ["news", "sport", "user.1", "user.2"])
            #expect(try store.reader.device(pid, deviceID: "D2", txn)?.topics == ["news"])
            let topics = try store.reader.topics(pid, txn)
            #expect(topics.map(\.id) == [16, 18, 17 | Self.bit, 19 | Self.bit], "key order: shared topics, then single ones")
            #expect(topics.first { $0.record.code == "user.2" }?.record.subscribers == 1)
            let counts = try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("user.2"), txn), txn)
            #expect(counts.total == 1)
            // Stored without a count, and rewritten only when the topic gains its first or loses its
            // last subscriber: `news` got D1 at seq 1 and D2 at seq 2; `user.2` was created for D2 at
            // seq 2, and D1 joining (seq 4) and D2 leaving (seq 5) did not rewrite it.
            let news = try #require(try store.reader.storedTopic(pid, 16, txn))
            #expect(news.subscribers == 0 && news.lastChangeSeq == 1)
            #expect(try store.reader.topic(pid, 16, txn)?.subscribers == 2)
            let user2 = try #require(try store.reader.storedTopic(pid, 19 | Self.bit, txn))
            #expect(user2.subscribers == 0 && user2.lastChangeSeq == 2)
        }
        // Reopened, the writer counts a topic from its chunks: D1 leaves `news`, which keeps D2.
        store.close()
        let reopened = try TopicStore(directory: dir.path + "/live")
        try reopened.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "D1", codes: ["news"])))
        try reopened.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "D2", codes: ["news"])))
        try reopened.read { txn in
            let t = try #require(try reopened.reader.topic(1, 16, txn))
            #expect(t.subscribers == 0 && t.lastChangeSeq == 7, "emptied by seq 7")
        }
        #expect(try Audit.run(reopened).isClean)
        reopened.close()
    }

    @Test func aStoreWithOneSequenceKeepsItInRebuilds() throws {
        let dir = TemporaryDirectory("topic-ids-old")
        let store = try TopicStore(directory: dir.path + "/live")
        defer { store.close() }
        // As a store created before schema 3: no numbering in `meta`.
        try store.environment.write { txn in try store.tables.setTopicLayout(.legacy, txn) }
        try Self.fill(store)
        try store.read { txn in
            #expect(try store.tables.topicLayout(txn) == .legacy)
            let pid = try #require(try store.reader.project(named: "demo", txn)).id
            let ids = try ["news", "user.1", "sport", "user.2"].map { try store.reader.topicID(pid, code: $0, txn) }
            #expect(ids == [16, 17, 18, 19])
            // Counts in the records, each change rewriting it.
            let news = try #require(try store.reader.storedTopic(pid, 16, txn))
            #expect(news.subscribers == 2 && news.lastChangeSeq == 2)
        }
        #expect(try Audit.run(store).isClean)
        try Replay.rebuild(from: store, to: .sequence(5), into: dir.path + "/rebuilt")
        let rebuilt = try replayOpenReadOnly(dir.path + "/rebuilt")
        defer { rebuilt.close() }
        #expect(try rebuilt.read { txn in try rebuilt.tables.topicLayout(txn) } == .legacy)
        #expect(replayDumpDifferences(try replayDumpTables(store), try replayDumpTables(rebuilt)).isEmpty)
    }

    /// The compact layout's counts live in the writer's cache; when the cache
    /// is bounded, the counts of topics over several slices are kept apart
    /// until their record is loaded again. A topic over two slices, emptied
    /// batch by batch through many such bounds, must reach exactly 0 (its
    /// record then rewritten, so the rebuild agrees) and can then be dropped.
    /// With room for 8 entries the writer keeps the records of its 2 most
    /// subscribed shared topics across each bound (`news` among them), with
    /// room for 3 none: `news` is then loaded again with its kept count.
    @Test(arguments: [3, 8]) func countsSurviveTheWritersCacheBound(cacheEntries: Int) throws {
        let dir = TemporaryDirectory("topic-counts-bound")
        var options = TopicStore.Options()
        options.writerCacheEntries = cacheEntries  // bounded at (almost) every flush
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        let devices = 65_536 + 100  // `news` reaches into a second slice
        let join = (0..<devices).map { Event(project: "demo", body: .register(deviceID: "d\($0)", topics: [TopicSpec(code: "news")])) }
        for result in store.submitAndWait(join) { _ = try result.get() }
        // Leave one at a time from the second slice (each its own batch, with other topics
        // touched so that the caches are bounded after it), then all the others in large batches.
        for i in stride(from: devices - 1, through: 65_536, by: -1) {
            try store.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "d\(i)", codes: ["news"])))
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: (0..<4).map { TopicSpec(code: "other.\($0)") })))
        }
        try store.read { txn in
            let t = try #require(try store.reader.topic(1, 16, txn))
            #expect(t.code == "news" && t.subscribers == 65_536 && t.slices == [0])
        }
        let leave = (0..<65_536).map { Event(project: "demo", body: .unregister(deviceID: "d\($0)", codes: ["news"])) }
        for result in store.submitAndWait(leave) { _ = try result.get() }
        let last = try store.read { txn in try store.tables.appliedSequence(txn) }
        try store.read { txn in
            let t = try #require(try store.reader.storedTopic(1, 16, txn))
            #expect(t.lastChangeSeq == last, "rewritten when it lost its last subscriber")
        }
        // Only a topic without subscribers is dropped: the writer's count must be 0.
        try store.submitAndWait(Event(project: "demo", body: .dropTopic(code: "news")))
        #expect(try store.read { txn in try store.reader.topicID(1, code: "news", txn) } == nil)
        #expect(try Audit.run(store).isClean)
    }
}
