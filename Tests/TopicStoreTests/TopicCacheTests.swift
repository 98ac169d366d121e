import Foundation
import LMDB
@testable import Projections
import Roaring
import SubscriptionLog
import Testing
import TopicStore

/// The serving process's topic directory (`TopicCache`) and its small-audience
/// counts from the recipient cache: an audience read through them is exactly
/// its snapshot's, however the store moved on since, and a store another
/// process wrote is read from the map until this process's writer begins again.
@Suite struct TopicCacheTests {
    static let project = "app"

    /// Device n: a token, `all`, its per-user topic `user.n` (single) and one of five shared topics.
    static func install(_ n: Int) -> [Event] {
        [Event(project: project, body: .token(deviceID: "dev-\(n)", token: "tok-\(n)", platform: n % 2 == 0 ? .android : .ios)),
         Event(project: project, body: .register(deviceID: "dev-\(n)", topics: [
             TopicSpec(code: "all"), TopicSpec(code: "user.\(n)", single: true), TopicSpec(code: "t\(n % 5)")]))]
    }

    /// Round `round` of a writer moving devices between per-user topics, moving tokens, and
    /// emptying devices: `count` commands over devices dev-0…dev-319 (some not installed).
    static func moves(round: Int, count: Int) -> [Event] {
        (0..<count).map { i -> Event in
            let device = (round * 131 + i * 17) % 320
            switch i % 5 {
            case 0: return Event(project: project, body: .unregister(deviceID: "dev-\(device)", codes: ["user.\(device)"]))
            case 1: return Event(project: project, body: .register(deviceID: "dev-\(device)", topics: [TopicSpec(code: "user.\((device * 7) % 300)")]))
            case 2: return Event(project: project, body: .token(deviceID: "dev-\(device)", token: "tok-\(round)-\(i)", platform: .android))
            case 3: return Event(project: project, body: .unregisterAll(deviceID: "dev-\(device)"))
            default: return Event(project: project, body: .register(deviceID: "dev-\(device)", topics: [TopicSpec(code: "user.\(device)")]))
            }
        }
    }

    static func submit(_ store: TopicStore, _ events: [Event]) throws {
        for r in store.submitAndWait(events) { _ = try r.get() }
    }

    /// The audience of `codes` through `reader`: its members (ordinals) and counts.
    static func answer(_ reader: ProjectionReader, _ codes: [String], _ txn: borrowing Transaction) throws -> ([UInt32], AudienceCounts) {
        let audience = try reader.audience(project: project, try #require(AudienceExpression.anyOf(codes)), txn)
        return (audience.devices.toArray(), try reader.counts(of: audience, txn))
    }

    /// Every question asked: a list of per-user topics as one audience, each
    /// of a few of them alone, and a shared topic with a per-user one.
    static let questions: [[String]] = [(0..<100).map { "user.\($0 * 3)" }, ["user.7"], ["user.0"], ["user.299"],
                                        ["t1", "user.4"], ["user.1", "user.2", "user.3", "nope"], ["t3"],
                                        ["t1", "t2"], ["t0", "t3", "t4", "nope"], ["user.9", "user.12", "user.15"]]

    /// Asks every question through the serving reader and through a reader of
    /// the map alone, in one snapshot; they must agree.
    static func compare(_ store: TopicStore, _ txn: borrowing Transaction, _ note: String) throws -> [([UInt32], AudienceCounts)] {
        let map = ProjectionReader(tables: store.tables)
        var answers: [([UInt32], AudienceCounts)] = []
        for q in questions {
            let cached = try answer(store.reader, q, txn), mapped = try answer(map, q, txn)
            #expect(cached.0 == mapped.0, "\(note): members of \(q.prefix(3))")
            #expect(cached.1 == mapped.1, "\(note): counts of \(q.prefix(3))")
            // Counted alone, as a send service asks: an OR of shared topics from the
            // chunks the directory holds for the snapshot, once a count offered them.
            let e = try #require(AudienceExpression.anyOf(q))
            for _ in 0..<2 {
                let alone = try store.reader.counts(project: project, e, txn)
                #expect(alone == mapped.1, "\(note): \(q.prefix(3)) counted alone")
            }
            answers.append(cached)
        }
        return answers
    }

    @Test func aSnapshotKeepsItsTopicsWhileTheCacheMovesOn() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        let topics = try #require(store.reader.topicCache)
        try Self.submit(store, (0..<300).flatMap(Self.install))

        try store.read { txn in
            let asOf = try store.tables.appliedSequence(txn)
            #expect(topics.heldSequence == asOf, "the writer reported its commits")
            let before = try Self.compare(store, txn, "before")
            #expect(before[0].1.total == 100 && before[0].1.android == 50 && before[0].1.ios == 50)
            #expect(topics.count >= 100, "the per-user topics asked for are held")
            let again = try Self.compare(store, txn, "from the cache")
            #expect(again.map(\.1) == before.map(\.1))

            // While this snapshot is open: per-user topics lose and gain devices,
            // one is dropped and created again, tokens move and are rejected.
            var changes: [Event] = []
            changes.append(Event(project: Self.project, body: .unregister(deviceID: "dev-0", codes: ["user.0"])))
            changes.append(Event(project: Self.project, body: .register(deviceID: "dev-1", topics: [TopicSpec(code: "user.3")])))
            changes.append(Event(project: Self.project, body: .unregisterAll(deviceID: "dev-6")))
            changes.append(Event(project: Self.project, body: .dropTopic(code: "user.6")))
            changes.append(Event(project: Self.project, body: .register(deviceID: "dev-2", topics: [TopicSpec(code: "user.6", single: true)])))
            changes.append(Event(project: Self.project, body: .token(deviceID: "dev-9", token: "tok-12", platform: .ios)))
            changes.append(Event(project: Self.project, body: .tokenRejected(token: "tok-15", rejectedAt: Int64(Date().timeIntervalSince1970 * 1000) + 60_000, reason: "Unregistered")))
            changes += (300..<310).flatMap(Self.install)
            try Self.submit(store, changes)
            #expect(topics.heldSequence! > asOf)

            let during = try Self.compare(store, txn, "old snapshot")
            #expect(during.map(\.0) == before.map(\.0) && during.map(\.1) == before.map(\.1),
                    "the old snapshot answers as before, not with the cache's newer entries")
        }

        try store.read { txn in
            #expect(topics.heldSequence == (try store.tables.appliedSequence(txn)))
            let after = try Self.compare(store, txn, "after")
            // user.0 lost dev-0; user.3 gained dev-1; user.6 holds dev-2 now; dev-12 lost its token to dev-9; tok-15 was rejected.
            #expect(after[2].1.total == 0, "user.0 is empty")
            let list = after[0].1
            #expect(list.total == 100 + 1 - 1 + 1 - 1, "user.0 and user.6 lost theirs; user.3 and user.6 gained one")
            #expect(list.withoutToken == 2, "dev-12 and dev-15 are in the list and have no live token")
            let few = try #require(after.last).1
            #expect(few.total == 3 && few.withoutToken == 2, "counted from the recipient cache: dev-9 took tok-12, tok-15 was rejected")
        }
    }

    @Test func audiencesWhileTheWriterCommitsAreTheirSnapshots() async throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try Self.submit(store, (0..<300).flatMap(Self.install))

        // A writer moving devices between per-user topics and moving tokens, while three readers ask.
        let writer = Task.detached {
            for round in 1...40 { try Self.submit(store, Self.moves(round: round, count: 50)) }
        }
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    for _ in 0..<30 { try store.read { txn in _ = try Self.compare(store, txn, "under writes") } }
                    return 30
                }
            }
            for try await n in group { #expect(n == 30) }
        }
        try await writer.value
        try store.read { txn in
            #expect(store.reader.topicCache?.heldSequence == (try store.tables.appliedSequence(txn)))
            _ = try Self.compare(store, txn, "after the writer")
        }
    }

    /// Devices across three slices (65,536 ordinals each): every device on `all` and on
    /// one of three shared topics; a token on two of every three, iOS on odd devices.
    static func spread(_ n: Int) -> [Event] {
        var events = [Event(project: project, body: .register(deviceID: "dev-\(n)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(n % 3)")]))]
        if n % 3 != 2 {
            events.append(Event(project: project, body: .token(deviceID: "dev-\(n)", token: "tok-\(n)", platform: n % 2 == 1 ? .ios : .android)))
        }
        return events
    }

    @Test func topicsHeldSliceBySliceAnswerEachSnapshotWhileTheWriterChangesSomeSlices() async throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        let devices = 2 * 65_536 + 3_000
        for start in stride(from: 0, to: devices, by: 20_000) {
            try Self.submit(store, (start..<min(devices, start + 20_000)).flatMap(Self.spread))
        }
        let directory = try #require(store.reader.topicCache)
        let questions = try ["t0 OR t1", "(t0 OR t1) AND NOT t2 AND platform:ios", "t2 AND NOT t0", "all AND NOT t1", "t1"]
            .map { try AudienceExpression(parsing: $0) }
        let map = ProjectionReader(tables: store.tables)
        /// Each question counted by the serving reader (twice: from the snapshot, then
        /// from what the first count offered the directory) and by a reader of the map.
        func compare(_ note: String) throws {
            try store.read { txn in
                for q in questions {
                    let mapped = try map.counts(project: Self.project, q, txn)
                    for pass in 0..<2 {
                        #expect(try store.reader.counts(project: Self.project, q, txn) == mapped, "\(note): \(q), pass \(pass)")
                    }
                }
            }
        }
        try compare("before")
        let pid = try store.read { txn in try #require(try map.project(named: Self.project, txn)).id }
        try store.read { txn in
            let held = try #require(directory.chunks(pid, code: "t0", asOf: try store.tables.appliedSequence(txn)))
            #expect(held.count == 3 && (0..<3).allSatisfy { held[$0] != nil }, "t0 is held in its three slices")
        }

        // One commit moves devices of slice 1 alone between t0 and t1: t0's chunks of slices 0 and 2 stay held.
        let moved = (65_536..<65_600).filter { $0 % 3 == 0 }
        try Self.submit(store, moved.flatMap { n in
            [Event(project: Self.project, body: .unregister(deviceID: "dev-\(n)", codes: ["t0"])),
             Event(project: Self.project, body: .register(deviceID: "dev-\(n)", topics: [TopicSpec(code: "t1")]))]
        })
        try store.read { txn in
            let held = try #require(directory.chunks(pid, code: "t0", asOf: try store.tables.appliedSequence(txn)))
            #expect(held[0] != nil && held[1] == nil && held[2] != nil, "only the changed slice is read again")
        }
        try compare("after a change to one slice")

        // A writer changes some slices of the topics and tokens while readers count.
        let writer = Task.detached {
            for round in 1...30 {
                let base = (round % 3) * 65_536 + round * 37
                try Self.submit(store, (0..<40).flatMap { i -> [Event] in
                    let n = base + i * 11
                    switch i % 4 {
                    case 0: return [Event(project: Self.project, body: .unregister(deviceID: "dev-\(n)", codes: ["t\(n % 3)"]))]
                    case 1: return [Event(project: Self.project, body: .register(deviceID: "dev-\(n)", topics: [TopicSpec(code: "t\((n + 1) % 3)")]))]
                    case 2: return [Event(project: Self.project, body: .token(deviceID: "dev-\(n)", token: "tok-\(round)-\(i)", platform: .ios))]
                    default: return [Event(project: Self.project, body: .unregisterAll(deviceID: "dev-\(n)"))]
                    }
                })
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<2 { group.addTask { for _ in 0..<15 { try compare("under writes") } } }
            try await group.waitForAll()
        }
        try await writer.value
        try compare("after the writer")
    }

    @Test func anotherProcessWritingSendsReadersToTheMapUntilTheWriterBegins() throws {
        let binary = BuiltProducts.executable("topicstore")
        try #require(FileManager.default.isExecutableFile(atPath: binary), "topicstore is built beside the tests")
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        let topics = try #require(store.reader.topicCache)
        try Self.submit(store, (0..<300).flatMap(Self.install))
        let held = try #require(topics.heldSequence)
        try store.read { txn in _ = try Self.compare(store, txn, "filled") }

        // `topicstore load`, in another process, moves per-user topics the cache holds.
        let lines = (0..<10).map { #"{"project":"app","type":"unregister","device_id":"dev-\#($0 * 3)","topics":["user.\#($0 * 3)"]}"# }
        #expect(try RecipientCacheTests.loadInAnotherProcess(binary, dir.path, lines) == 0)

        try store.read { txn in
            #expect(try store.tables.appliedSequence(txn) == held + 10)
            #expect(topics.heldSequence == held, "this process's writer has not seen the other's commits")
            let got = try Self.compare(store, txn, "after the other process")
            #expect(got[0].1.total == 90 && got[2].1.total == 0)
        }
        // The next commit here starts the cache afresh; it is used again.
        try Self.submit(store, [Event(project: Self.project, body: .register(deviceID: "dev-0", topics: [TopicSpec(code: "user.0")]))])
        try store.read { txn in
            #expect(topics.heldSequence == (try store.tables.appliedSequence(txn)))
            let got = try Self.compare(store, txn, "after this writer")
            #expect(got[0].1.total == 91 && got[2].1.total == 1)
        }
    }

    @Test func aServingStoreOpenedAgainAnswersFromItsDirectoryBeforeItWrites() throws {
        let dir = TemporaryDirectory()
        do {
            let store = try TopicStore(directory: dir.path)
            defer { store.close() }
            try Self.submit(store, (0..<300).flatMap(Self.install))
        }
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        let topics = try #require(store.reader.topicCache)
        try store.read { txn in
            #expect(topics.heldSequence == (try store.tables.appliedSequence(txn)), "the prepared writer reports from its start")
            _ = try Self.compare(store, txn, "first")
            #expect(topics.count >= 100)
            let again = try Self.compare(store, txn, "from the directory")
            #expect(again[0].1.total == 100)
        }
    }

    // MARK: The cache's rules

    @Test func offersAreTakenOnlyAtTheReportedSequenceAndHeldUntilTheTopicChanges() {
        let cache = TopicCache()
        let news = TopicCache.Placement.slices(tid: 20, [0, 3])
        cache.offer(1, code: "news", news, readAt: 5)
        #expect(cache.count == 0, "nothing is taken before the writer reports a sequence")

        cache.beginWrite(at: 5)
        cache.offer(1, code: "news", news, readAt: 4)
        #expect(cache.count == 0, "an older snapshot's answer is not taken")
        cache.offer(1, code: "news", news, readAt: 5)
        cache.offer(1, code: "user.1", .members(tid: 1 << 31, [7]), readAt: 5)
        #expect(cache.placement(1, code: "news", asOf: 5) == news)
        #expect(cache.placement(2, code: "news", asOf: 5) == nil, "another project")
        #expect(cache.placement(1, code: "news", asOf: 4) == nil, "a snapshot before the entry")
        #expect(cache.placement(1, code: "news", asOf: 6) == nil, "a snapshot the writer has not reported")

        // A commit 5 → 8 that changed user.1 only.
        cache.didCommit(changing: [UInt64(1) << 32 | UInt64(1 << 31), UInt64(1) << 32 | 99], from: 5, through: 8)
        #expect(cache.placement(1, code: "news", asOf: 8) == news)
        #expect(cache.placement(1, code: "news", asOf: 6) == news, "unchanged from 5 through 8")
        #expect(cache.placement(1, code: "user.1", asOf: 8) == nil, "changed: dropped")
        #expect(cache.placement(1, code: "user.1", asOf: 5) == nil, "dropped for every snapshot")
        cache.offer(1, code: "user.1", .members(tid: 1 << 31, [7, 9]), readAt: 5)
        #expect(cache.placement(1, code: "user.1", asOf: 8) == nil, "a snapshot from before the change is not taken")
        cache.offer(1, code: "user.1", .members(tid: 1 << 31, [7, 9]), readAt: 8)
        #expect(cache.placement(1, code: "user.1", asOf: 8) == .members(tid: 1 << 31, [7, 9]))

        // Another writer committed 8 → 12: this writer begins at 12, and forgets everything.
        cache.beginWrite(at: 12)
        #expect(cache.placement(1, code: "news", asOf: 12) == nil && cache.count == 0)
        // A report that does not follow what the cache holds forgets everything too.
        cache.offer(1, code: "news", news, readAt: 12)
        cache.didCommit(changing: [], from: 13, through: 14)
        #expect(cache.placement(1, code: "news", asOf: 14) == nil && cache.heldSequence == nil)
    }

    /// The chunks `cache` holds of news (project 1) for a snapshot at `asOf`, by
    /// slice of its placement: nil where one is to be read from the snapshot.
    private func heldChunks(_ cache: TopicCache, _ code: String = "news", asOf: UInt64) -> [[UInt8]?]? {
        guard let held = cache.chunks(1, code: code, asOf: asOf) else { return nil }
        return (0..<held.count).map { held[$0].map { Array($0) } }
    }

    @Test func chunksAreHeldWithTheirTopicAndDroppedWhenItChanges() throws {
        let cache = TopicCache()
        let news = TopicCache.Placement.slices(tid: 20, [0, 3])
        let bytes: [[UInt8]] = [[1, 2, 3], [4, 5, 6, 7]]
        try bytes[0].withUnsafeBytes { a in
            try bytes[1].withUnsafeBytes { b in
                let both: [(index: Int, chunk: UnsafeRawBufferPointer)] = [(0, a), (1, b)]
                cache.beginWrite(at: 5)
                cache.offerChunks(1, code: "news", tid: 20, both, readAt: 5)
                #expect(heldChunks(cache, asOf: 5) == nil, "not held without the topic's placement")
                cache.offer(1, code: "news", news, readAt: 5)
                cache.offerChunks(1, code: "news", tid: 20, both, readAt: 4)
                #expect(heldChunks(cache, asOf: 5) == nil, "an older snapshot's chunks are not taken")
                cache.offerChunks(1, code: "news", tid: 21, both, readAt: 5)
                #expect(heldChunks(cache, asOf: 5) == nil, "another topic's chunks are not taken")
                cache.offerChunks(1, code: "news", tid: 20, [(2, a)], readAt: 5)
                #expect(heldChunks(cache, asOf: 5) == nil, "a slice the placement does not have is not taken")
                cache.offerChunks(1, code: "news", tid: 20, [(1, b)], readAt: 5)
                #expect(heldChunks(cache, asOf: 5) == [nil, [4, 5, 6, 7]], "held slice by slice")
                cache.offerChunks(1, code: "news", tid: 20, both, readAt: 5)
                #expect(heldChunks(cache, asOf: 5) == [[1, 2, 3], [4, 5, 6, 7]])
                let chunk = try #require(cache.chunks(1, code: "news", asOf: 5)?[1])
                #expect(Int(bitPattern: chunk.baseAddress) % 2 == 0, "each chunk at an even address")
                #expect(heldChunks(cache, asOf: 6) == nil, "a snapshot the writer has not reported")

                // A commit that changed another topic keeps them; one that rewrote news's chunk in
                // slice 3 drops that chunk alone, for every snapshot.
                let topic = UInt64(1) << 32 | 20
                cache.didCommit(changing: [UInt64(1) << 32 | 99], from: 5, through: 7)
                #expect(heldChunks(cache, asOf: 7) == [[1, 2, 3], [4, 5, 6, 7]])
                cache.didCommit(changing: [], topicSlices: [.init(topic: topic, high: 3)], from: 7, through: 8)
                #expect(heldChunks(cache, asOf: 8) == [[1, 2, 3], nil] && heldChunks(cache, asOf: 7) == [[1, 2, 3], nil])
                cache.offerChunks(1, code: "news", tid: 20, [(1, a)], readAt: 7)
                #expect(heldChunks(cache, asOf: 8) == [[1, 2, 3], nil], "a snapshot from before the change is not taken")
                cache.offerChunks(1, code: "news", tid: 20, [(1, a)], readAt: 8)
                #expect(heldChunks(cache, asOf: 8) == [[1, 2, 3], [1, 2, 3]])
                #expect(heldChunks(cache, asOf: 7) == [[1, 2, 3], nil], "held from the snapshot it was read in")
                cache.offerChunks(1, code: "news", tid: 20, [(1, b)], readAt: 8)
                #expect(heldChunks(cache, asOf: 8) == [[1, 2, 3], [1, 2, 3]], "a slice held is not replaced")

                // A chunk in a slice the placement does not list: the topic is placed anew.
                cache.didCommit(changing: [], topicSlices: [.init(topic: topic, high: 5)], from: 8, through: 9)
                #expect(heldChunks(cache, asOf: 9) == nil && cache.placement(1, code: "news", asOf: 9) == nil)
                cache.offer(1, code: "news", .slices(tid: 20, [0, 3, 5]), readAt: 9)
                #expect(heldChunks(cache, asOf: 9) == nil, "a new placement holds no chunks until they are offered")
                cache.offerChunks(1, code: "news", tid: 20, both, readAt: 9)
                #expect(heldChunks(cache, asOf: 9) == [[1, 2, 3], [4, 5, 6, 7], nil])
                // A change to the topic itself (its record, or a chunk it left) drops it whole.
                cache.didCommit(changing: [topic], from: 9, through: 10)
                #expect(heldChunks(cache, asOf: 10) == nil && heldChunks(cache, asOf: 9) == nil)
                // A topic held with its members is placed anew when one of its chunks changes.
                cache.offer(1, code: "user.1", .members(tid: 1 << 31 | 7, [3]), readAt: 10)
                cache.didCommit(changing: [], topicSlices: [.init(topic: UInt64(1) << 32 | (1 << 31 | 7), high: 0)], from: 10, through: 11)
                #expect(cache.placement(1, code: "user.1", asOf: 11) == nil)
            }
        }
        // A topic holds at most `mostChunkBytes` of chunks.
        cache.offer(1, code: "big", .slices(tid: 30, [2, 4]), readAt: 11)
        let large = [UInt8](repeating: 7, count: TopicCache.mostChunkBytes / 2 + 2)
        large.withUnsafeBytes { c in cache.offerChunks(1, code: "big", tid: 30, [(0, c), (1, c)], readAt: 11) }
        #expect(heldChunks(cache, "big", asOf: 11)?.map { $0 != nil } == [true, false])
    }

    @Test func aCountOffersAtMostItsBudgetOfChunksAndTheRestComeWithTheNext() {
        let cache = TopicCache()
        let slices = 80  // 80 chunks of 8 KiB: 640 KiB, more than one count copies
        cache.beginWrite(at: 5)
        cache.offer(1, code: "all", .slices(tid: 20, (0..<slices).map(UInt16.init)), readAt: 5)
        let chunk = [UInt8](repeating: 0xAB, count: 8 << 10)
        chunk.withUnsafeBytes { c in
            var first = HeldChunkOffers(cache, count: 1)
            for j in 0..<slices { first.note(0, slice: j, c) }
            first.offer(0, 1, code: "all", tid: 20, asOf: 5)
            let held = heldChunks(cache, "all", asOf: 5) ?? []
            let taken = held.filter { $0 != nil }.count
            #expect(taken == HeldChunkOffers.offeredPerCount / (8 << 10), "the first count copies its budget's worth")
            #expect(held.prefix(taken).allSatisfy { $0 == chunk }, "the slices it read first")
            var second = HeldChunkOffers(cache, count: 1)
            for j in 0..<slices where held[j] == nil { second.note(0, slice: j, c) }
            second.offer(0, 1, code: "all", tid: 20, asOf: 5)
            #expect(heldChunks(cache, "all", asOf: 5)?.allSatisfy { $0 == chunk } == true, "the next count copies the rest")
            // Without a directory nothing is noted (and nothing offered).
            var none = HeldChunkOffers(nil, count: 1)
            none.note(0, slice: 0, c)
            none.offer(0, 1, code: "all", tid: 20, asOf: 5)
        }
    }

    @Test func liveSetsChunksAreHeldPerSliceUntilACommitChangesThem() {
        let cache = TopicCache()
        let bytes: [[UInt8]] = [[1, 2, 3, 4], []]  // iOS's chunk; no Android devices in the slice
        let chunks = bytes[0].withUnsafeBytes { a in bytes[1].withUnsafeBytes { b in TopicChunks([a, b]) } }
        cache.offerLiveChunks(1, 3, chunks, readAt: 5)
        #expect(cache.liveChunks(1, 3, asOf: 5) == nil, "nothing is taken before the writer reports a sequence")
        cache.beginWrite(at: 5)
        cache.offerLiveChunks(1, 3, chunks, readAt: 4)
        #expect(cache.liveChunks(1, 3, asOf: 5) == nil, "an older snapshot's chunks are not taken")
        cache.offerLiveChunks(1, 3, chunks, readAt: 5)
        #expect(cache.liveChunks(1, 3, asOf: 5) === chunks)
        #expect(cache.liveChunks(1, 4, asOf: 5) == nil && cache.liveChunks(2, 3, asOf: 5) == nil, "another slice, another project")
        #expect(cache.liveChunks(1, 3, asOf: 4) == nil, "a snapshot before they were read")
        #expect(cache.liveChunks(1, 3, asOf: 6) == nil, "a snapshot the writer has not reported")
        let one = bytes[0].withUnsafeBytes { TopicChunks([$0]) }
        cache.offerLiveChunks(1, 4, one, readAt: 5)
        #expect(cache.liveChunks(1, 4, asOf: 5) == nil, "both platforms' chunks or none")

        // A commit 5 → 7 that changed the live sets of slice 9 only, then one that changed slice 3's.
        cache.didCommit(changing: [UInt64(1) << 32 | 20], liveSlices: [UInt64(1) << 32 | 9], from: 5, through: 7)
        #expect(cache.liveChunks(1, 3, asOf: 7) === chunks && cache.liveChunks(1, 3, asOf: 6) === chunks)
        cache.didCommit(changing: [], liveSlices: [UInt64(1) << 32 | 3, UInt64(1) << 32 | 3], from: 7, through: 8)
        #expect(cache.liveChunks(1, 3, asOf: 8) == nil && cache.liveChunks(1, 3, asOf: 7) == nil, "dropped for every snapshot")
        cache.offerLiveChunks(1, 3, chunks, readAt: 7)
        #expect(cache.liveChunks(1, 3, asOf: 8) == nil, "a snapshot from before the change is not taken")
        cache.offerLiveChunks(1, 3, chunks, readAt: 8)
        #expect(cache.liveChunks(1, 3, asOf: 8) === chunks)
        // Another writer committed: everything goes.
        cache.beginWrite(at: 12)
        #expect(cache.liveChunks(1, 3, asOf: 12) == nil)
    }

    @Test func anEntryRefilledInPlaceIsReadWholeByEveryReader() {
        // The part a count reads (from when, the members) sits apart from the placement,
        // at the same index: 32 bytes, two to a cache line.
        #expect(MemoryLayout<TopicCache.Validity>.stride == 32)
        let cache = TopicCache(capacity: 16)
        cache.beginWrite(at: 3)
        for n in 0..<6 { cache.offer(1, code: "user.\(n)", .members(tid: UInt32(100 + n), [UInt32(n)]), readAt: 3) }
        func gather(_ codes: [String], asOf: UInt64) -> (members: [UInt32], missed: [Int]) {
            var gathered = GatheredMembers(limit: 64)
            let missed = cache.gatherMembers(1, codes: codes, asOf: asOf, into: &gathered)
            return (gathered.withValues { Array($0) }, missed)
        }
        #expect(gather(["user.0", "user.3", "user.5"], asOf: 3) == ([0, 3, 5], []))
        // user.3 changes (dropped), user.4 moves to slices: both offered again at 4, in place.
        cache.didCommit(changing: [1 << 32 | 103, 1 << 32 | 104], from: 3, through: 4)
        #expect(gather(["user.0", "user.3", "user.4"], asOf: 4) == ([0], [1, 2]))
        #expect(cache.placement(1, code: "user.3", asOf: 4) == nil)
        cache.offer(1, code: "user.3", .members(tid: 103, [7, 9]), readAt: 4)
        cache.offer(1, code: "user.4", .slices(tid: 104, [0, 2]), readAt: 4)
        #expect(cache.count == 6, "refilled where they were")
        #expect(gather(["user.3", "user.0", "user.4", "user.5"], asOf: 4) == ([7, 9, 0, 5], [2]))
        #expect(gather(["user.3"], asOf: 3) == ([], [0]), "not held for the snapshot before the change")
        #expect(cache.placement(1, code: "user.3", asOf: 4) == .members(tid: 103, [7, 9]))
        #expect(cache.placement(1, code: "user.4", asOf: 4) == .slices(tid: 104, [0, 2]))
        #expect(cache.placement(1, code: "user.0", asOf: 3) == .members(tid: 100, [0]))
    }

    @Test func aFullCacheStartsAfreshAndKeepsWhatTheWriterReported() {
        let cache = TopicCache(capacity: 8)
        cache.beginWrite(at: 3)
        for n in 0..<8 { cache.offer(1, code: "user.\(n)", .members(tid: UInt32(100 + n), [UInt32(n)]), readAt: 3) }
        #expect(cache.count == 8)
        cache.offer(1, code: "user.8", .members(tid: 108, [8]), readAt: 3)
        #expect(cache.count == 1 && cache.placement(1, code: "user.0", asOf: 3) == nil)
        #expect(cache.placement(1, code: "user.8", asOf: 3) == .members(tid: 108, [8]))
        #expect(cache.heldSequence == 3)
    }

    /// A directory sharing a recipient cache holds a small topic's members with
    /// what each reaches for the snapshot offered, and drops the topic when a
    /// member's record changes, as it does when the topic changes.
    @Test func whatMembersReachIsHeldForTheirSnapshotAndDroppedWithTheirRecord() throws {
        let recipients = RecipientCache()
        let cache = TopicCache(capacity: 16, sharingLockWith: recipients)
        /// The records of project 1 that the commit `from` → `through` wrote (each at `through`).
        /// Topics of project 1 it changed are `topics`; with `reporting`, the directory hears of it.
        func commit(_ devices: [UInt32: DeviceRecord], topics: [UInt32] = [], from: UInt64, through: UInt64, reporting: Bool = true) {
            var changes = RecipientCache.Changes()
            for (ordinal, device) in devices.sorted(by: { $0.key < $1.key }) {
                var bytes = [UInt8](repeating: 0, count: device.maximumEncodedSize)
                let n = bytes.withUnsafeMutableBytes { device.encode(into: $0.baseAddress!) }
                bytes.withUnsafeBytes { changes.put(1, ordinal, sequence: through, record: UnsafeRawBufferPointer(rebasing: $0[..<n])) }
            }
            recipients.apply(changes, from: from, through: through)
            if reporting { cache.didCommit(changing: topics.map { 1 << 32 | UInt64($0) }, devices: devices.keys.map { 1 << 32 | UInt64($0) }, from: from, through: through) }
        }
        func live(_ id: String, _ platform: Platform) -> DeviceRecord {
            DeviceRecord(deviceID: id, token: "t-\(id)", platform: platform, tokenTime: 1)
        }
        func counts(_ codes: [String], asOf: UInt64) -> (members: [UInt32], ios: Int, android: Int, unknown: Int, missed: [Int]) {
            var gathered = GatheredMembers(limit: 64)
            let missed = cache.gatherMembers(1, codes: codes, asOf: asOf, into: &gathered)
            let members = gathered.withValues { Array($0) }
            let (_, ios, android, unknown) = gathered.distinctReaches()
            return (members, ios, android, unknown, missed)
        }

        // Not filled yet: the recipient cache cannot tell, and the topic is not held.
        cache.beginWrite(at: 3)
        cache.offer(1, code: "user.1", .members(tid: 101, [7]), readAt: 3)
        #expect(cache.count == 0)
        // Filled from an empty store, then its first commits.
        let dir = TemporaryDirectory()
        var options = Environment.Options()
        options.maxDatabases = 32
        let env = try Environment(path: dir.path, options: options)
        let tables = try ProjectionTables.open(in: env, create: true)
        try env.read { txn in try recipients.fill(from: tables, through: 0, txn) }
        commit([7: live("a", .ios), 8: DeviceRecord(deviceID: "b"), 9: live("c", .android)], from: 0, through: 3, reporting: false)
        cache.offer(1, code: "user.1", .members(tid: 101, [7]), readAt: 3)
        cache.offer(1, code: "pair", .members(tid: 102, [7, 8, 9]), readAt: 3)
        cache.offer(1, code: "user.2", .members(tid: 103, [9]), readAt: 3)
        cache.offer(1, code: "gone", .members(tid: 104, []), readAt: 3)
        #expect(cache.count == 4)
        let first = counts(["user.1", "pair", "user.2", "gone"], asOf: 3)
        #expect(first.members == [7, 7, 8, 9, 9] && first.missed.isEmpty)
        #expect(first.ios == 1 && first.android == 1 && first.unknown == 0, "8 has no token")

        // Commit 3 → 4 moves 7 to Android. Its cell is applied before the directory hears of it:
        // a reader of snapshot 3 offering then cannot be told what 7 reached at 3.
        commit([7: live("a", .android)], from: 3, through: 4, reporting: false)
        cache.offer(1, code: "user.3", .members(tid: 105, [7]), readAt: 3)
        #expect(cache.placement(1, code: "user.3", asOf: 3) == nil, "not held: 7 changed after 3")
        cache.offer(1, code: "user.4", .members(tid: 106, [8]), readAt: 3)
        #expect(cache.placement(1, code: "user.4", asOf: 3) == .members(tid: 106, [8]), "8 did not change")
        cache.didCommit(changing: [], devices: [1 << 32 | 7], from: 3, through: 4)
        // Both topics holding 7 were dropped; the others hold.
        let second = counts(["user.1", "pair", "user.2", "user.4"], asOf: 4)
        #expect(second.members == [9, 8] && second.missed == [0, 1])
        #expect(second.android == 1 && second.ios == 0)
        cache.offer(1, code: "user.1", .members(tid: 101, [7]), readAt: 4)
        cache.offer(1, code: "pair", .members(tid: 102, [7, 8, 9]), readAt: 4)
        let third = counts(["user.1", "pair"], asOf: 4)
        #expect(third.android == 2 && third.ios == 0 && third.missed.isEmpty)
        #expect(counts(["user.1"], asOf: 3).missed == [0], "not held for the snapshot before the change")

        // user.1 now holds 9 instead (refilled in place): a change of 7 no longer drops it.
        commit([:], topics: [101], from: 4, through: 5)
        cache.offer(1, code: "user.1", .members(tid: 101, [9]), readAt: 5)
        commit([7: DeviceRecord(deviceID: "a")], from: 5, through: 6)
        let fourth = counts(["user.1", "pair"], asOf: 6)
        #expect(fourth.members == [9] && fourth.missed == [1] && fourth.android == 1)

        // A directory of its own holds no reach: its members are counted from the cells.
        let alone = TopicCache(capacity: 4)
        alone.beginWrite(at: 6)
        alone.offer(1, code: "user.1", .members(tid: 101, [9]), readAt: 6)
        var gathered = GatheredMembers(limit: 4)
        #expect(alone.gatherMembers(1, codes: ["user.1"], asOf: 6, into: &gathered).isEmpty)
        #expect(gathered.distinctReaches() == (1, 0, 0, 1))
    }
}
