import Foundation
import LMDB
@testable import Projections
import Roaring
import SubscriptionLog
import Synchronization
import Testing
@testable import TopicStore

/// Counts a serving process answers from its caches with no read transaction
/// (`TopicStore.counts(project:_:)`, `ProjectionReader.heldCounts`): they are
/// the newest committed snapshot's exactly, are asked only for the LMDB
/// transaction the writer reported last, and a commit anyone else makes sends
/// readers back to a snapshot.
@Suite struct HeldCountTests {
    static let project = TopicCacheTests.project

    /// Per-user topics alone and as lists (the held path), an unknown code,
    /// shared topics (always read from a snapshot).
    static let questions: [String] = ["user.7", "user.0", "user.299", "user.3",
                                      (0..<100).map { "user.\($0 * 3)" }.joined(separator: " OR "),
                                      "user.1 OR user.2 OR user.6", "user.1 OR nope", "t1", "t1 OR user.4", "nope"]

    /// Every question's counts read from the map alone, in one snapshot.
    static func mapped(_ store: TopicStore) throws -> [AudienceCounts] {
        let map = ProjectionReader(tables: store.tables)
        return try store.read { txn in
            try questions.map { try map.counts(project: project, try AudienceExpression(parsing: $0), txn) }
        }
    }

    /// Every question's counts as a send service asks them.
    static func asked(_ store: TopicStore) throws -> [AudienceCounts] {
        try questions.map { try store.counts(project: project, try AudienceExpression(parsing: $0)) }
    }

    /// Every question's counts asked as a list of topics (MPush's `topics`
    /// array, `counts(project:anyOf:)`): each question is one code or an OR of codes.
    static func askedAsLists(_ store: TopicStore) throws -> [AudienceCounts] {
        try questions.map { try store.counts(project: project, anyOf: $0.components(separatedBy: " OR ")) }
    }

    /// Whether the question was answered without a transaction for LMDB's newest one.
    static func heldAnswer(_ store: TopicStore, _ question: String, tip: Int? = nil) throws -> AudienceCounts? {
        store.reader.heldCounts(project: project, try AudienceExpression(parsing: question),
                                tip: tip ?? store.environment.lastTransactionID)
    }

    @Test func countsAreTheNewestSnapshotsAfterEveryCommit() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try TopicCacheTests.submit(store, (0..<300).flatMap(TopicCacheTests.install))

        let rounds: [[Event]] = [
            [Event(project: Self.project, body: .unregister(deviceID: "dev-0", codes: ["user.0"])),
             Event(project: Self.project, body: .register(deviceID: "dev-1", topics: [TopicSpec(code: "user.3")]))],
            [Event(project: Self.project, body: .token(deviceID: "dev-9", token: "tok-7", platform: .ios)),
             Event(project: Self.project, body: .tokenRejected(token: "tok-3", rejectedAt: Int64(Date().timeIntervalSince1970 * 1000) + 60_000,
                                                                 reason: "Unregistered"))],
            [Event(project: Self.project, body: .unregisterAll(deviceID: "dev-6")),
             Event(project: Self.project, body: .dropTopic(code: "user.6"))],
            [Event(project: Self.project, body: .register(deviceID: "dev-2", topics: [TopicSpec(code: "user.6", single: true)])),
             Event(project: Self.project, body: .register(deviceID: "dev-8", topics: [TopicSpec(code: "user.new", single: true)]))],
            (300..<310).flatMap(TopicCacheTests.install),
        ]
        var previous = try Self.mapped(store)
        for (n, round) in ([[]] + rounds).enumerated() {
            if !round.isEmpty { try TopicCacheTests.submit(store, round) }
            let expected = try Self.mapped(store)
            #expect(try Self.asked(store) == expected, "round \(n): as a send service asks (first ask)")
            #expect(try Self.asked(store) == expected, "round \(n): asked again, from the caches")
            #expect(try Self.askedAsLists(store) == expected, "round \(n): asked as lists of topics")
            if n > 0 { #expect(expected.map(\.asOfSeq) != previous.map(\.asOfSeq), "round \(n) committed") }
            previous = expected
            // Answered from the caches, for the newest transaction only.
            let tip = store.environment.lastTransactionID
            #expect(try Self.heldAnswer(store, "user.7") == expected[0], "round \(n)")
            // (A list naming a code no topic has, user.6 once dropped, is read from a snapshot.)
            #expect(try Self.heldAnswer(store, Self.questions[4]) == (expected[4].unknownTopics.isEmpty ? expected[4] : nil),
                    "round \(n): a list of 100")
            #expect(try Self.heldAnswer(store, "user.7", tip: tip - 1) == nil, "an older transaction")
            #expect(try Self.heldAnswer(store, "user.7", tip: tip + 1) == nil, "a newer transaction")
            #expect(try Self.heldAnswer(store, "t1") == nil && Self.heldAnswer(store, "t1 OR user.4") == nil,
                    "a shared topic is read from a snapshot")
            #expect(try Self.heldAnswer(store, "user.1 OR nope") == nil, "an unknown code is read from a snapshot")
            // The same from a list as it is, with no expression.
            let list = Self.questions[4].components(separatedBy: " OR ")
            #expect(store.reader.heldCounts(project: Self.project, anyOf: list, tip: tip) == (expected[4].unknownTopics.isEmpty ? expected[4] : nil),
                    "round \(n): a list of 100 as it is")
            #expect(store.reader.heldCounts(project: Self.project, anyOf: list, tip: tip - 1) == nil, "an older transaction")
            #expect(store.reader.heldCounts(project: Self.project, anyOf: ["user.7"], tip: tip) == expected[0])
            #expect(store.reader.heldCounts(project: Self.project, anyOf: ["user.1", "t1"], tip: tip) == nil, "a shared topic")
            // The same list as bytes (as a query carries it): the same answer, held or not.
            #expect(store.reader.heldCounts(project: Self.project, anyOf: TopicCodeList(list), tip: tip)
                    == store.reader.heldCounts(project: Self.project, anyOf: list, tip: tip), "round \(n): a list of 100 as bytes")
            #expect(store.reader.heldCounts(project: Self.project, anyOf: TopicCodeList(list), tip: tip - 1) == nil)
            #expect(store.reader.heldCounts(project: Self.project, anyOf: TopicCodeList(["user.7"]), tip: tip) == expected[0])
            #expect(try store.counts(project: Self.project, anyOf: TopicCodeList(list)) == expected[4], "round \(n)")
            #expect(try store.counts(project: Self.project, anyOf: TopicCodeList(["user.1", "t1"]))
                    == (try store.counts(project: Self.project, anyOf: ["user.1", "t1"])), "round \(n): a shared topic, as bytes")
        }
        let final = try Self.mapped(store)
        #expect(final[1].total == 0 && final[3].total == 2, "user.0 lost dev-0; user.3 gained dev-1")
        #expect(final[3].withoutToken == 1, "tok-3 was rejected")
        #expect(final[0].total == 1 && final[0].withoutToken == 1, "dev-9 took tok-7 from dev-7")
    }

    @Test func anotherProcessCommittingSendsCountsToTheSnapshot() throws {
        let binary = BuiltProducts.executable("topicstore")
        try #require(FileManager.default.isExecutableFile(atPath: binary), "topicstore is built beside the tests")
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try TopicCacheTests.submit(store, (0..<300).flatMap(TopicCacheTests.install))
        let before = try Self.asked(store)
        #expect(try Self.heldAnswer(store, "user.3")?.total == 1)

        // `topicstore load`, in another process, empties user.3 and user.7.
        let lines = [3, 7].map { #"{"project":"app","type":"unregister","device_id":"dev-\#($0)","topics":["user.\#($0)"]}"# }
        #expect(try RecipientCacheTests.loadInAnotherProcess(binary, dir.path, lines) == 0)

        #expect(try Self.heldAnswer(store, "user.3") == nil, "LMDB's newest transaction is not the one the writer reported")
        let after = try Self.asked(store)
        #expect(after == (try Self.mapped(store)))
        #expect(after[0].total == 0 && after[3].total == 0 && after[0].asOfSeq == before[0].asOfSeq + 2)
        // This process's next commit brings the caches to the newest snapshot again.
        try TopicCacheTests.submit(store, [Event(project: Self.project, body: .register(deviceID: "dev-3", topics: [TopicSpec(code: "user.3")]))])
        _ = try Self.asked(store)
        let held = try #require(try Self.heldAnswer(store, "user.3"))
        #expect(held.total == 1 && held.asOfSeq == before[0].asOfSeq + 3)
    }

    @Test func aWriteOfTheAuxiliaryTablesKeepsCountsHeld() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try store.openAuxiliary(["extra"])
        try TopicCacheTests.submit(store, (0..<30).flatMap(TopicCacheTests.install))
        let before = try Self.asked(store)
        let tip = store.environment.lastTransactionID
        #expect(try Self.heldAnswer(store, "user.7") == before[0])
        try store.writeAuxiliary { txn, t in try txn.put(t["extra"]!, Array("k".utf8), Array("v".utf8)) }
        #expect(store.environment.lastTransactionID == tip + 1)
        #expect(try Self.heldAnswer(store, "user.7") == before[0], "nothing the caches hold changed")
        #expect(try Self.heldAnswer(store, "user.7", tip: tip) == nil)

        // A write of the auxiliary tables that writes nothing commits no transaction:
        // the caches go on answering for the one before (a server's start runs one).
        try store.writeAuxiliary { txn, t in _ = try txn.get(t["extra"]!, Array("k".utf8)) }
        #expect(store.environment.lastTransactionID == tip + 1)
        #expect(try Self.heldAnswer(store, "user.7") == before[0], "an empty write")
        try store.writeAuxiliary { txn, t in try txn.put(t["extra"]!, Array("k".utf8), Array("w".utf8)) }
        #expect(store.environment.lastTransactionID == tip + 2)
        #expect(try Self.heldAnswer(store, "user.7") == before[0], "a write after it")
    }

    /// `Transaction.hasChanges`, which decides whether an auxiliary write is
    /// reported to the caches: set by every kind of change, by no read.
    @Test func aWriteTransactionKnowsWhetherItChangedAnything() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try store.openAuxiliary(["extra"])
        let k = Array("k".utf8), v = Array("v".utf8), absent = Array("absent".utf8)
        /// Whether the write changed anything: (before the body, after it).
        func changes(_ body: (borrowing Transaction, Database) throws -> Void) throws -> (Bool, Bool) {
            try store.writeAuxiliary { txn, t in
                let before = txn.hasChanges
                try body(txn, t["extra"]!)
                return (before, txn.hasChanges)
            }
        }
        var found: [Bool] = []
        let reads = try changes { txn, db in
            _ = try txn.get(db, k)
            found.append(try txn.delete(db, absent))
            try txn.withCursor(db) { c in
                _ = try c.first()
                found.append(try absent.withUnsafeBytes { try c.delete($0) })
            }
        }
        #expect(reads == (false, false) && found == [false, false], "reads, and deletes of what is not there")
        #expect(try changes { txn, db in try txn.put(db, k, v) } == (false, true), "a put")
        #expect(try changes { txn, db in try txn.put(db, Array("r".utf8), reserving: 1) { $0[0] = 1 } } == (false, true),
                "a reserved put")
        #expect(try changes { txn, db in
            try txn.withCursor(db) { c in try k.withUnsafeBytes { kb in try v.withUnsafeBytes { try c.put(kb, $0) } } }
        } == (false, true), "a cursor's put")
        #expect(try changes { txn, db in try txn.withCursor(db) { c in _ = try c.first(); try c.deleteCurrent() } } == (false, true),
                "a cursor's delete")
        found = []
        #expect(try changes { txn, db in found.append(try txn.delete(db, Array("r".utf8))) } == (false, true) && found == [true],
                "a delete")
        #expect(try changes { txn, db in try txn.clear(db) } == (false, true), "a clear")
    }

    @Test func countsWhileTheWriterCommitsAreExactSnapshots() async throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try TopicCacheTests.submit(store, (0..<300).flatMap(TopicCacheTests.install))

        // The writer records what the map holds after each of its commits; it is the only writer.
        let expected = Mutex<[UInt64: [AudienceCounts]]>([:])
        let first = try Self.mapped(store)
        expected.withLock { $0[first[0].asOfSeq] = first }
        let writer = Task.detached {
            for round in 1...40 {
                try TopicCacheTests.submit(store, TopicCacheTests.moves(round: round, count: 20))
                let now = try Self.mapped(store)
                expected.withLock { $0[now[0].asOfSeq] = now }
            }
        }
        let answers = try await withThrowingTaskGroup(of: [AudienceCounts].self) { group in
            for _ in 0..<2 {
                group.addTask {
                    var got: [AudienceCounts] = []
                    for _ in 0..<100 { got += try Self.asked(store) }
                    return got
                }
            }
            var all: [AudienceCounts] = []
            for try await got in group { all += got }
            return all
        }
        try await writer.value
        let byCommit = expected.withLock { $0 }
        #expect(byCommit.count == 41)
        for (i, answer) in answers.enumerated() {
            let q = i % Self.questions.count
            let wanted = try #require(byCommit[answer.asOfSeq], "answer \(i) is of a committed snapshot (\(answer.asOfSeq))")
            #expect(answer == wanted[q], "\(Self.questions[q].prefix(20)) as of \(answer.asOfSeq)")
        }
    }

    /// A file compaction (its own process) moves the serving store to a new
    /// generation: counts from the caches are the new generation's (the
    /// serving view they read moves with it), not the retired one's, whose
    /// caches are emptied at the switch and whose meta pages are let go.
    @Test func countsFollowTheStoreToANewGeneration() throws {
        let dir = TemporaryDirectory()
        let data = dir.sub("data")
        let store = try RecipientCacheTests.servingStore(data)
        defer { store.close() }
        try TopicCacheTests.submit(store, (0..<300).flatMap(TopicCacheTests.install))
        _ = try Self.asked(store)
        #expect(try Self.heldAnswer(store, "user.7")?.total == 1)
        let generation = store.generation

        let run = try compactCLI(["compact", "--data", data, "--retain", "0", "--json"])
        #expect(run.status == 0, "\(run.error)")
        // The next commit is the new generation's: dev-8 joins user.7, dev-7 leaves the list's user.0.
        try TopicCacheTests.submit(store, [
            Event(project: Self.project, body: .register(deviceID: "dev-8", topics: [TopicSpec(code: "user.7")])),
            Event(project: Self.project, body: .unregister(deviceID: "dev-0", codes: ["user.0"])),
        ])
        #expect(store.generation != generation, "the store moved to the compaction's generation")
        #expect(store.servingViews.withCurrent { $0.generation } == ObjectIdentifier(store.current),
                "counts read the new generation's view")
        // The old generation's view is retired: its caches emptied, its meta pages let go.
        let retired = store.servingViews.retiredViews
        #expect(retired.count == 1)
        #expect(retired.allSatisfy { $0.metaPages.lastTransactionID == nil && $0.reader.topicCache?.count == 0
                && $0.reader.recipientCache?.heldSequence == nil })
        let expected = try Self.mapped(store)
        for round in ["first ask", "asked again, from the caches"] {
            #expect(try Self.asked(store) == expected, "\(round)")
        }
        #expect(expected[0].total == 2 && expected[1].total == 0 && expected[4].total == 99)
        #expect(try Self.heldAnswer(store, "user.7") == expected[0], "held by the new generation's caches")
    }

    /// Counts from the serving caches read no lock that a generation switch or
    /// `close()` waits for: two threads counting all the while a compaction (its
    /// own process) switches the store, the writer commits on the new
    /// generation, and the store closes, get the one answer user.7 has in
    /// every snapshot, or, after the close, `StoreError.closed`; nothing read
    /// after its view was retired (caches emptied, meta pages let go) crashes
    /// or answers otherwise.
    @Test func countsRaceACompactionsSwitchAndTheClose() throws {
        let dir = TemporaryDirectory()
        let data = dir.sub("data")
        let store = try RecipientCacheTests.servingStore(data)
        try TopicCacheTests.submit(store, (0..<300).flatMap(TopicCacheTests.install))
        let wanted = try Self.mapped(store)[0]
        #expect(wanted.total == 1 && wanted.ios == 1 && wanted.withoutToken == 0)
        final class Outcomes: @unchecked Sendable {
            let lock = NSLock()
            var rows: [(answers: Int, wrong: [String], refused: Int)] = []
        }
        let outcomes = Outcomes(), done = DispatchGroup(), counting = DispatchSemaphore(value: 0)
        for _ in 0..<2 {
            // Threads of their own, not the test's task pool: the compaction below blocks its caller.
            DispatchQueue.global().async(group: done) {
                var answers = 0, wrong: [String] = [], refused = 0
                while refused == 0 && wrong.isEmpty {
                    do {
                        let one = try store.counts(project: Self.project, anyOf: ["user.7"])
                        let list = try store.counts(project: Self.project, anyOf: ["user.7", "user.9", "user.7"])
                        if [one.total, one.ios, one.withoutToken] != [1, 1, 0] { wrong.append("\(one)") }
                        if [list.total, list.ios, list.withoutToken] != [2, 2, 0] { wrong.append("\(list)") }
                        answers += 2
                        if answers == 2 { counting.signal() }
                        // A pause now and then: on two cores, counting without one starved the
                        // compaction and the writer (7–28 s for this test).
                        if answers % 64 == 0 { usleep(20) }
                    } catch StoreError.closed {
                        refused += 1
                    } catch {
                        wrong.append("\(error)")
                    }
                }
                if answers == 0 { counting.signal() }
                outcomes.lock.withLock { outcomes.rows.append((answers, wrong, refused)) }
            }
        }
        for _ in 0..<2 { counting.wait() }
        let run = try compactCLI(["compact", "--data", data, "--retain", "0", "--json"])
        #expect(run.status == 0, "\(run.error)")
        for round in 1...5 {
            // Devices other than dev-7 and dev-9 join; the writer's first commit finds the switch.
            try TopicCacheTests.submit(store, (300 + 10 * round..<310 + 10 * round).flatMap(TopicCacheTests.install))
        }
        #expect(store.servingViews.retiredViews.count == 1, "the switch retired the first view")
        store.close()
        done.wait()
        let rows = outcomes.lock.withLock { outcomes.rows }
        #expect(rows.count == 2)
        for row in rows {
            #expect(row.answers > 0 && row.refused == 1, "answers \(row.answers), refused \(row.refused)")
            #expect(row.wrong.isEmpty, "\(row.wrong.prefix(3))")
        }
    }

    /// A commit that grows the recipient cache's column of a project moves its
    /// memory: a device's token rejected, or given back, in the same commit is
    /// counted from the caches as it is now, not as the column's old memory
    /// held it. (A memo of the column read last, tried and dropped, failed
    /// this test when it was not kept up to date.)
    @Test func aColumnThatGrewIsReadWhereItIsNow() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try TopicCacheTests.submit(store, (0..<8).flatMap(TopicCacheTests.install))
        _ = try Self.asked(store)  // the directory takes the topics asked
        #expect(try Self.heldAnswer(store, "user.7").map { [$0.total, $0.ios, $0.withoutToken] } == [1, 1, 0])
        for round in 0..<3 {
            // Far more devices than the column holds, and dev-7's token taken from it and back.
            let first = 8 + round * 400
            var events = (first..<first + 400).flatMap(TopicCacheTests.install)
            let token = round == 0 ? "tok-7" : "tok-7-1"
            events.append(round % 2 == 0
                ? Event(project: Self.project, body: .tokenRejected(token: token, rejectedAt: Int64(Date().timeIntervalSince1970 * 1000) + 60_000,
                                                                   reason: "Unregistered"))
                : Event(project: Self.project, body: .token(deviceID: "dev-7", token: "tok-7-\(round)", platform: .ios)))
            try TopicCacheTests.submit(store, events)
            _ = try Self.asked(store)
            let expected = try Self.mapped(store)[0]
            #expect(expected.withoutToken == (round % 2 == 0 ? 1 : 0), "round \(round)")
            #expect(try Self.heldAnswer(store, "user.7") == expected, "round \(round): held, as the snapshot has it")
        }
    }

    @Test func aClosedStoreAnswersNoCount() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        try TopicCacheTests.submit(store, (0..<30).flatMap(TopicCacheTests.install))
        _ = try Self.asked(store)
        #expect(try Self.heldAnswer(store, "user.7") != nil, "held before the close")
        store.close()
        #expect(store.servingViews.withCurrent { $0.generation } == nil, "no view to read")
        #expect(store.servingViews.retiredViews.map { $0.metaPages.lastTransactionID } == [nil], "the view retired")
        for question in ["user.7", "user.1 OR user.2", "t1"] {
            #expect(throws: StoreError.self, "\(question)") {
                try store.counts(project: Self.project, try AudienceExpression(parsing: question))
            }
        }
    }

    /// `close(waitingAtMost:)` is bounded: a read holding the map lock (a
    /// stream, an export) does not hold it up, and no count is answered after it.
    @Test func aBoundedCloseDoesNotWaitForAReader() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        try TopicCacheTests.submit(store, (0..<30).flatMap(TopicCacheTests.install))
        _ = try Self.asked(store)
        let inside = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? store.read { _ in
                inside.signal()
                _ = release.wait(timeout: .now() + 20)
            }
            done.signal()
        }
        inside.wait()
        let start = ContinuousClock.now
        #expect(store.close(waitingAtMost: 5), "the writer had nothing to commit")
        let took = ContinuousClock.now - start
        release.signal()
        done.wait()
        #expect(took < .seconds(10), "close waited \(took) for the reader")
        #expect(throws: StoreError.self) { try store.counts(project: Self.project, try AudienceExpression(parsing: "user.7")) }
    }

    // MARK: The directory's rules

    @Test func theDirectoryAnswersWithNoTransactionOnlyForTheOneReported() throws {
        let cache = TopicCache()
        func members(_ code: String, tip: Int) -> [UInt32]? {
            cache.heldMembers(project: "app", code: code, tip: tip)?.withMembers { Array($0) }
        }
        cache.beginWrite(at: 5, snapshot: 40)
        cache.offer(1, code: "user.1", .members(tid: 1 << 31, [7]), readAt: 5)
        cache.offer(1, code: "news", .slices(tid: 20, [0, 3]), readAt: 5)
        #expect(members("user.1", tip: 40) == nil, "the project's id is not known yet")
        cache.noteProject("app", id: 1)
        let held = try #require(cache.heldMembers(project: "app", code: "user.1", tip: 40))
        #expect(held.pid == 1 && held.asOf == 5 && held.withMembers { Array($0) } == [7])
        #expect(members("user.1", tip: 41) == nil && members("user.1", tip: 39) == nil, "another transaction")
        #expect(members("news", tip: 40) == nil, "a topic held by its slices")
        #expect(cache.heldMembers(project: "other", code: "user.1", tip: 40) == nil, "another project")
        // Two projects with the same code, asked in turn: each answers with its own id and members.
        cache.offer(2, code: "user.1", .members(tid: 1 << 31, [4, 5]), readAt: 5)
        cache.noteProject("second", id: 2)
        for _ in 0..<2 {
            let second = try #require(cache.heldMembers(project: "second", code: "user.1", tip: 40))
            #expect(second.pid == 2 && second.withMembers { Array($0) } == [4, 5])
            let first = try #require(cache.heldMembers(project: "app", code: "user.1", tip: 40))
            #expect(first.pid == 1 && first.withMembers { Array($0) } == [7])
        }

        // Transaction 41 took 5 → 8 and changed user.1.
        cache.didCommit(changing: [UInt64(1) << 32 | UInt64(1 << 31)], from: 5, through: 8, transaction: 41)
        #expect(members("user.1", tip: 41) == nil, "dropped")
        cache.offer(1, code: "user.1", .members(tid: 1 << 31, [7, 9]), readAt: 8)
        #expect(members("user.1", tip: 41) == [7, 9] && members("user.1", tip: 40) == nil)
        cache.offer(1, code: "user.2", .members(tid: 1 << 31 | 2, [3]), readAt: 8)
        cache.offer(1, code: "user.3", .members(tid: 1 << 31 | 3, []), readAt: 8)
        var gathered = GatheredMembers(limit: 16)
        let list = try #require(cache.gatherHeldMembers(project: "app", codes: ["user.1", "user.2", "user.3"], tip: 41, into: &gathered))
        #expect(list.pid == 1 && list.asOf == 8 && gathered.withValues { Array($0) } == [7, 9, 3])
        var partial = GatheredMembers(limit: 16)
        #expect(cache.gatherHeldMembers(project: "app", codes: ["user.1", "news"], tip: 41, into: &partial) == nil)
        #expect(cache.gatherHeldMembers(project: "app", codes: ["user.1", "user.9"], tip: 41, into: &partial) == nil)
        #expect(cache.gatherHeldMembers(project: "app", codes: ["user.1"], tip: 42, into: &partial) == nil)

        // A commit reported without its transaction: answered for none.
        cache.didCommit(changing: [], from: 8, through: 9)
        #expect(members("user.1", tip: 41) == nil && members("user.1", tip: 42) == nil)
        // The writer begins on snapshot 42 at that sequence: answered for it.
        cache.beginWrite(at: 9, snapshot: 42)
        #expect(members("user.1", tip: 42) == [7, 9])
        // Another process wrote (the writer begins at another sequence): everything goes, ids too.
        cache.beginWrite(at: 12, snapshot: 50)
        cache.offer(1, code: "user.1", .members(tid: 1 << 31, [7]), readAt: 12)
        #expect(members("user.1", tip: 50) == nil, "the project's id is noted again first")
        cache.noteProject("app", id: 1)
        #expect(members("user.1", tip: 50) == [7])
    }

    /// A list asked as it is: repeats counted once, no topic is no device, and a
    /// list longer than the caches take is counted from a snapshot, the same.
    @Test func listsOfTopicsAskedAsTheyAre() throws {
        let dir = TemporaryDirectory()
        let store = try RecipientCacheTests.servingStore(dir.path)
        defer { store.close() }
        try TopicCacheTests.submit(store, (0..<300).flatMap(TopicCacheTests.install))
        let map = ProjectionReader(tables: store.tables)
        func mapped(_ codes: [String]) throws -> AudienceCounts {
            try store.read { txn in try map.counts(project: Self.project, AudienceExpression.anyOf(codes)!, txn) }
        }
        let asOf = try mapped(["user.1"]).asOfSeq

        let repeated = ["user.3", "user.5", "user.3", "user.5", "user.5"]
        #expect(try store.counts(project: Self.project, anyOf: repeated) == (try mapped(repeated)))
        #expect(try store.counts(project: Self.project, anyOf: repeated).total == 2)
        #expect(try store.counts(project: Self.project, anyOf: TopicCodeList(repeated)) == (try mapped(repeated)))

        let none = try store.counts(project: Self.project, anyOf: [])
        #expect(none == AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0, unknownTopics: []))
        #expect(store.reader.heldCounts(project: Self.project, anyOf: [], tip: store.environment.lastTransactionID) == nil)
        #expect(try store.counts(project: Self.project, anyOf: TopicCodeList()) == none)

        // Past `mostListedTopics` codes: every per-user topic, then codes no topic has.
        let long = (0..<(ProjectionReader.mostListedTopics + 5)).map { "user.\($0)" }
        #expect(store.reader.heldCounts(project: Self.project, anyOf: long, tip: store.environment.lastTransactionID) == nil)
        let counted = try store.counts(project: Self.project, anyOf: long)
        #expect(counted == (try mapped(long)))
        #expect(counted.total == 300 && counted.unknownTopics.count == long.count - 300)
        #expect(try store.counts(project: Self.project, anyOf: TopicCodeList(long)) == counted)

        #expect(try store.counts(project: "no-such-project", anyOf: ["user.1", "user.2"]) == (try store.read { txn in
            try map.counts(project: "no-such-project", AudienceExpression.anyOf(["user.1", "user.2"])!, txn)
        }))
    }

    /// A held topic's live counts are its members' reach bytes counted, whatever the bytes
    /// past its members hold, for every mix of reaches of up to four members.
    @Test func aHeldTopicsLiveCountsAreWhatItsMembersReach() {
        let kinds: [UInt8] = [RecipientCache.Reach.unreachable.rawValue, RecipientCache.Reach.ios.rawValue,
                              RecipientCache.Reach.android.rawValue]
        var rng = SystemRandomNumberGenerator()
        for n in 0...4 {
            for _ in 0..<500 {
                let bytes = (0..<n).map { _ in kinds.randomElement(using: &rng)! }
                var reaches = bytes.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * $1.offset) }
                if n < 4, Bool.random(using: &rng) { reaches |= UInt32.random(in: 1...UInt32.max, using: &rng) << (8 * n) }
                let held = InlineMembers(Array(UInt32(0)..<UInt32(n)), reaches: reaches)
                let counts = held.liveCounts
                #expect(counts?.ios == bytes.filter { $0 == RecipientCache.Reach.ios.rawValue }.count, "\(bytes) \(reaches)")
                #expect(counts?.android == bytes.filter { $0 == RecipientCache.Reach.android.rawValue }.count, "\(bytes) \(reaches)")
            }
        }
        #expect(InlineMembers([7], reaches: 0).liveCounts == nil, "not known")
    }

    @Test func aListsMembersAreCountedOnceEach() {
        var rng = SystemRandomNumberGenerator()
        for n in [0, 1, 2, 3, 17, 100, 1000, 5000] {
            for spread in [UInt32(4), 1_000, UInt32.max] {
                var values = (0..<n).map { _ in UInt32.random(in: 0...spread, using: &rng) }
                if n > 2 { values[n / 2] = UInt32.max; values[n - 1] = 0; values[0] = UInt32.max }
                let want = Set(values)
                // In topics of up to four, each held with what its members reach or not.
                func reach(_ v: UInt32) -> RecipientCache.Reach { [.unreachable, .ios, .android][Int(v % 3)] }
                var gathered = GatheredMembers(limit: n)
                var firstKnown: [UInt32: Bool] = [:]
                var at = 0
                while at < n {
                    let topic = Array(values[at..<min(n, at + Int.random(in: 1...4, using: &rng))])
                    let known = Bool.random(using: &rng)
                    for v in topic where firstKnown[v] == nil { firstKnown[v] = known }
                    let reaches = topic.enumerated().reduce(UInt32(0)) { $0 | UInt32(reach($1.element).rawValue) << (8 * $1.offset) }
                    let held = InlineMembers(topic, reaches: known ? reaches : 0)
                    #expect(gathered.withAppender { $0.append(held) })
                    at += topic.count
                }
                #expect(!gathered.withAppender { $0.append(InlineMembers([1])) }, "past the limit")
                // Counted once each, by what each was first gathered with; those not
                // known moved to the front, each once.
                let (unique, ios, android, unknown) = gathered.distinctReaches()
                #expect(unique == want.count, "\(n) values up to \(spread)")
                let knownOnes = want.filter { firstKnown[$0]! }
                #expect(ios == knownOnes.filter { reach($0) == .ios }.count)
                #expect(android == knownOnes.filter { reach($0) == .android }.count)
                #expect(Set(gathered.withValues { Array($0[..<unknown]) }) == want.subtracting(knownOnes))
                #expect(unknown == want.count - knownOnes.count)
            }
        }
    }
}
