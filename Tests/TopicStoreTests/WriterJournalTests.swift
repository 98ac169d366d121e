import Compaction
import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
import Synchronization
import Testing
import TopicStore

/// A serving store beside a compaction in another process: the server's writer
/// must not read the whole device table again (1–2 s per million devices, every
/// writer of the store waiting) because the compaction committed garbage events
/// or switched the store to a new file generation. It follows what the other
/// writer changed (its journal in `writer_state`) and hands its indexes and
/// recipient cache over to the new generation, and stays exactly right.
@Suite(.serialized) struct WriterJournalTests {
    static let project = RecipientCacheTests.project

    /// A serving store (recipient cache on) with devices, tokens and topics, some
    /// of them garbage for compaction: devices with no token and no topic, empty topics.
    func servingStore(_ dir: TemporaryDirectory) throws -> TopicStore {
        let store = try RecipientCacheTests.servingStore(dir.sub("data"))
        var events: [Event] = []
        for d in 0..<400 {
            events.append(RecipientCacheTests.token(d, 0))
            events.append(Event(project: Self.project, body: .register(deviceID: "dev-\(d)", topics: [
                TopicSpec(code: "all"), TopicSpec(code: "t\(d % 7)"), TopicSpec(code: "user.\(d)", single: true)])))
        }
        for d in 0..<60 {  // garbage: a device with no token and no topic, and an empty topic
            events.append(Event(project: Self.project, body: .register(deviceID: "gone-\(d)", topics: [TopicSpec(code: "empty-\(d)")])))
            events.append(Event(project: Self.project, body: .unregisterAll(deviceID: "gone-\(d)")))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        return store
    }

    /// The store's recipients through its cache equal those read from the map, and audit is clean.
    func expectConsistent(_ store: TopicStore, _ round: String) throws {
        try store.read { txn in
            let cached = try RecipientCacheTests.recipients(store.reader, txn)
            let mapped = try RecipientCacheTests.recipients(ProjectionReader(tables: store.tables), txn)
            #expect(RecipientCacheTests.differences(cached, mapped) == [], "\(round)")
            #expect(store.reader.recipientCache?.heldSequence == (try store.tables.appliedSequence(txn)), "\(round): the cache is not in use")
        }
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(round): \(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }

    /// The recipient cache streams what the map holds for `project`, and the store is a fold of its log.
    func expectCacheMatchesTheMapAndAuditIsClean(_ store: TopicStore, project: String) throws {
        try store.read { txn in
            let cached = try RecipientCacheTests.recipients(store.reader, txn, project: project)
            let mapped = try RecipientCacheTests.recipients(ProjectionReader(tables: store.tables), txn, project: project)
            #expect(!mapped.isEmpty && RecipientCacheTests.differences(cached, mapped) == [])
        }
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }

    /// Commands that need the writer's indexes to be right after the other writer:
    /// a forgotten device_id registers as a new device, a token moves, a new device.
    func writeAfter(_ store: TopicStore, _ tag: String) throws {
        let events = [
            Event(project: Self.project, body: .register(deviceID: "gone-3", topics: [TopicSpec(code: "back")])),
            Event(project: Self.project, body: .token(deviceID: "gone-3", token: "tok-5-0", platform: .ios)),  // dev-5's token moves
            Event(project: Self.project, body: .token(deviceID: "new-\(tag)", token: "tok-new-\(tag)", platform: .android)),
            Event(project: Self.project, body: .register(deviceID: "dev-9", topics: [TopicSpec(code: "t1")])),
        ]
        for r in store.submitAndWait(events) { _ = try r.get() }
        try store.read { txn in
            let got = try RecipientCacheTests.recipients(store.reader, txn)
            #expect(got["gone-3"] == "tok-5-0" && got["dev-5"] == nil, "\(tag)")
            #expect(got["new-\(tag)"] == "tok-new-\(tag)", "\(tag)")
        }
    }

    @Test func garbageCommittedByAnotherProcessIsFollowedNotReread() throws {
        let dir = TemporaryDirectory("journal-gc")
        let store = try servingStore(dir)
        defer { store.close() }
        let before = store.writerTableReads

        // The compaction, in its own process, commits the garbage in several small transactions.
        let gc = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--no-file", "--json"])
        #expect(gc.status == 0, "\(gc.error)")
        #expect(gc.output.contains("\"devicesForgotten\":60") && gc.output.contains("\"topicsDropped\":60"), "\(gc.output)")

        try writeAfter(store, "a")
        let after = store.writerTableReads
        #expect(after.deviceIndexes == before.deviceIndexes, "the writer read its device indexes again")
        #expect(after.recipientCache == before.recipientCache, "the writer filled its recipient cache again")
        try expectConsistent(store, "after the garbage")
    }

    @Test func theServerKeepsItsIndexesAcrossAGenerationSwitch() throws {
        let dir = TemporaryDirectory("journal-switch")
        let store = try servingStore(dir)
        defer { store.close() }
        let generation = store.generation
        let before = store.writerTableReads

        let run = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--json"])
        #expect(run.status == 0, "\(run.error)")
        try writeAfter(store, "b")
        #expect(store.generation != generation, "the store did not move to the new generation")
        let after = store.writerTableReads
        #expect(after.deviceIndexes == before.deviceIndexes, "the writer read its device indexes again after the switch")
        #expect(after.recipientCache == before.recipientCache, "the writer filled its recipient cache again after the switch")
        try expectConsistent(store, "after the switch")

        // And once more, with this process's writer idle through the whole compaction.
        let second = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--json"])
        #expect(second.status == 0, "\(second.error)")
        try writeAfter(store, "c")
        #expect(store.writerTableReads.deviceIndexes == before.deviceIndexes)
        try expectConsistent(store, "after the second switch")
    }

    /// A bulk `load` beside a server: its batches of 4,096 commands (new devices,
    /// moved tokens) are listed in the journal, so the server follows each of them
    /// instead of reading the device table again (with a 48 KB limit they were
    /// not, and a server's registers fell from 3,100 to 700 a second beside a load).
    @Test func aBulkLoadsBatchesAreFollowed() throws {
        let dir = TemporaryDirectory("journal-load")
        let store = try servingStore(dir)
        defer { store.close() }
        let before = store.writerTableReads
        var lines: [String] = []
        for d in 0..<3_000 {  // 6,000 commands: a full batch of 4,096 and a partial one
            let token = d % 10 == 0 ? "tok-\(d / 10)-0" : "load-tok-\(d)"  // every tenth takes a served device's token
            lines.append(#"{"project":"\#(Self.project)","type":"token","device_id":"load-\#(d)","token":"\#(token)","platform":"android"}"#)
            lines.append(#"{"project":"\#(Self.project)","type":"register","device_id":"load-\#(d)","topics":["all",{"code":"user.load-\#(d)","single":true}]}"#)
        }
        let input = dir.sub("load.jsonl")
        try (lines.joined(separator: "\n") + "\n").write(toFile: input, atomically: true, encoding: .utf8)
        let load = try compactCLI(["load", "--data", dir.sub("data"), input])
        #expect(load.status == 0, "\(load.error)")

        try writeAfter(store, "d")
        #expect(store.writerTableReads.deviceIndexes == before.deviceIndexes, "the writer read its device indexes again")
        #expect(store.writerTableReads.recipientCache == before.recipientCache, "the writer filled its recipient cache again")
        try store.read { txn in
            let got = try RecipientCacheTests.recipients(store.reader, txn)
            #expect(got["load-20"] == "tok-2-0" && got["dev-2"] == nil, "a token the load moved")
            #expect(got["load-2999"] == "load-tok-2999")
        }
        try expectConsistent(store, "after the load")
    }

    /// The writer takes a code whose key sorts after the greatest key of
    /// `topic_codes` for one no topic has, with no lookup, and keeps that key
    /// while its transaction is open: a code another process added after it
    /// between two of its transactions must be found, not made a second topic.
    @Test func aCodeAnotherProcessAddedLastIsFoundNotMadeAgain() throws {
        let dir = TemporaryDirectory("journal-last-code")
        let store = try servingStore(dir)
        defer { store.close() }
        // Longer than any code before, so each sorts last (codes are ordered by length first).
        let register = { (device: String, code: String) in
            Event(project: Self.project, body: .register(deviceID: device, topics: [TopicSpec(code: code)]))
        }
        for r in store.submitAndWait([register("dev-1", "zz-last-code-1")]) { _ = try r.get() }
        let input = dir.sub("load.jsonl")
        try #"{"project":"\#(Self.project)","type":"register","device_id":"dev-2","topics":["zz-last-code-2"]}"#
            .appending("\n").write(toFile: input, atomically: true, encoding: .utf8)
        let load = try compactCLI(["load", "--data", dir.sub("data"), input])
        #expect(load.status == 0, "\(load.error)")
        for r in store.submitAndWait([register("dev-3", "zz-last-code-2"), register("dev-4", "zz-last-code-3")]) { _ = try r.get() }
        #expect(try store.counts(project: Self.project, anyOf: ["zz-last-code-2"]).total == 2, "one topic with both devices")
        #expect(try store.counts(project: Self.project, anyOf: ["zz-last-code-3"]).total == 1)
        try expectConsistent(store, "after codes added last by two processes")
    }

    /// The compaction's own writer, with another process committing between its
    /// garbage transactions, follows that process's journal too: it reads the
    /// device table once, when it opens the store, not inside each transaction
    /// (where every writer of the store would wait for it).
    @Test func theCompactorFollowsAWriterInAnotherProcess() throws {
        let dir = TemporaryDirectory("journal-compactor")
        let data = dir.sub("data")
        let seed = try servingStore(dir)
        seed.close()
        let writer = try CompactionCrashTests.StressWriter(directory: data, prefix: "j")
        defer { _ = writer.kill() }
        usleep(300_000)
        let store = try TopicStore(directory: data)
        defer { store.close() }
        var options = Compactor.Options(retain: RetentionDuration(milliseconds: 0))
        options.compactFile = false
        options.garbageBatchSize = 4
        let report = try Compactor.run(directory: data, options: options, store: store)
        #expect(report.topicsDropped == 60 && report.devicesForgotten == 60)
        #expect(report.garbageTransactions == 30)
        #expect(store.writerTableReads.deviceIndexes == 1, "read \(store.writerTableReads.deviceIndexes) times")
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }

    /// Commands of the server that use what the stress writer (`topicstore-stress`, another
    /// process) did last: its newest tokens move to a device of the server, its newest devices
    /// are registered to a topic, devices it is about to make are made first, and one of its
    /// devices gets a token of the server's. Each is wrong if the server's indexes are stale.
    static func crossEvents(_ store: TopicStore, _ tag: String) throws -> [Event] {
        let log = store.log
        let recent = try store.read { txn -> [(String, String)] in
            guard let last = try log.bounds(txn)?.last else { return [] }
            var out: [(String, String)] = []
            try log.forEach(from: last > 24 ? last - 24 : 1, txn) { r in
                if case .token(let d, let t, _) = r.event.body, !d.hasPrefix("srv") { out.append((d, t)) }
                return true
            }
            return out
        }
        var events = [Event(project: "crash", body: .token(deviceID: "srv-\(tag)", token: "tok-srv-\(tag)", platform: .ios))]
        for (device, token) in recent.suffix(2) {
            events.append(Event(project: "crash", body: .token(deviceID: "srv-\(tag)-\(device)", token: token, platform: .ios)))
            events.append(Event(project: "crash", body: .register(deviceID: device, topics: [TopicSpec(code: "srv")])))
            // "P-W-I": the stress writer's W-th task makes I+1 and I+2 next.
            let parts = device.split(separator: "-")
            if parts.count == 3, let i = Int(parts[2]) {
                events.append(Event(project: "crash", body: .register(deviceID: "\(parts[0])-\(parts[1])-\(i + 2)", topics: [TopicSpec(code: "srv")])))
            }
        }
        if let (device, _) = recent.first {
            events.append(Event(project: "crash", body: .token(deviceID: device, token: "tok-srv-\(tag)", platform: .android)))
        }
        return events
    }

    /// A server writing at the same time as another process (not while it is idle),
    /// each creating devices the other then takes tokens from or registers again, the
    /// other process killed (SIGKILL) at random moments, also inside a commit: what it
    /// had not committed is not in the store, and neither writer's indexes go stale
    /// (a device_id given a second ordinal, a token left with two devices shows in the audit).
    @Test func aServerBesideAWriterKilledMidCommitStaysExact() throws {
        let dir = TemporaryDirectory("journal-kill")
        let data = dir.sub("data")
        let store = try RecipientCacheTests.servingStore(data)
        defer { store.close() }
        var rng = SeededRandom(seed: UInt64(Date().timeIntervalSince1970))
        var acks: [CompactionCrashTests.Ack] = []
        for round in 0..<4 {
            let prefix = "r\(round)"
            let writer = try CompactionCrashTests.StressWriter(directory: data, prefix: prefix)
            let until = Date().addingTimeInterval(0.4 + Double(rng.int(400)) / 1000)
            var i = 0
            while Date() < until {
                // Devices the other process makes later (it must find them), and tokens it gave
                // (or will give) its devices, taken by devices of this one.
                for r in store.submitAndWait(try Self.crossEvents(store, "\(round)-\(i)")) { _ = try r.get() }
                i += 1
            }
            acks += writer.kill()
            try CompactionCrashTests().checkAcknowledged(acks, store: store, archive: nil, round: "round \(round)")
        }
        #expect(store.writerTableReads.deviceIndexes == 1, "the server read its indexes \(store.writerTableReads.deviceIndexes) times")
        try store.read { txn in
            let project = try #require(try store.reader.project(named: "crash", txn))
            let ids = Set(try allRecords(store).compactMap(\.event.body.deviceID))
            #expect(project.nextOrdinal == UInt32(ids.count), "one ordinal per device_id")
            let cached = try RecipientCacheTests.recipients(store.reader, txn, project: "crash")
            let mapped = try RecipientCacheTests.recipients(ProjectionReader(tables: store.tables), txn, project: "crash")
            #expect(!mapped.isEmpty && RecipientCacheTests.differences(cached, mapped) == [])
        }
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }
}

extension WriterJournalTests {
    /// A transaction that changes too many names to list (over `maxListedBytes`: a
    /// `load` with a large `--batch`, 30,000 new devices here): its entry is written unlisted, and the server reads its indexes again, once, instead of
    /// following it; then it follows small transactions again.
    @Test func aBulkLoadIsReadAgainNotFollowed() throws {
        let dir = TemporaryDirectory("journal-bulk")
        let data = dir.sub("data")
        let store = try servingStore(dir)
        defer { store.close() }
        let before = store.writerTableReads.deviceIndexes
        // 30,000 new devices with tokens in one transaction: 60,000 index entries, about 1.2 MB to list.
        let lines = (0..<30_000).map { i in
            #"{"project":"\#(Self.project)","type":"token","device_id":"bulk-\#(i)","token":"tok-bulk-\#(i)","platform":"ios"}"#
        }
        let input = dir.sub("bulk.jsonl")
        try (lines.joined(separator: "\n") + "\n").write(toFile: input, atomically: true, encoding: .utf8)
        let load = try compactCLI(["load", "--data", data, "--batch", "30000", input])
        #expect(load.status == 0, "\(load.error)")
        let unlisted = try store.read { txn -> Bool in
            let applied = try store.tables.appliedSequence(txn)
            let bytes = try #require(try txn.get(store.tables.writerState!, WriterJournal.key(applied - 30_000)))
            return try #require(try WriterJournal.decode(bytes, at: "test")).listed == false
        }
        #expect(unlisted, "the load's entry was listed")
        try writeAfter(store, "bulk")
        for r in store.submitAndWait([Event(project: Self.project, body: .token(deviceID: "dev-1", token: "tok-bulk-7", platform: .ios))]) { _ = try r.get() }
        #expect(store.writerTableReads.deviceIndexes == before + 1)
        // A small transaction of another process is followed again.
        let small = dir.sub("small.jsonl")
        try (#"{"project":"\#(Self.project)","type":"token","device_id":"bulk-9","token":"tok-small","platform":"ios"}"# + "\n")
            .write(toFile: small, atomically: true, encoding: .utf8)
        #expect(try compactCLI(["load", "--data", data, small]).status == 0)
        for r in store.submitAndWait([Event(project: Self.project, body: .token(deviceID: "dev-2", token: "tok-small", platform: .ios))]) { _ = try r.get() }
        #expect(store.writerTableReads.deviceIndexes == before + 1)
        try store.read { txn in
            let got = try RecipientCacheTests.recipients(store.reader, txn)
            #expect(got["dev-1"] == "tok-bulk-7" && got["bulk-7"] == nil)
            #expect(got["dev-2"] == "tok-small" && got["bulk-9"] == nil)
        }
        try expectConsistent(store, "after the bulk load")
    }

    /// Both writers start with a small map, so each commit may fill it (the batch is
    /// aborted after the fold changed the indexes, the map doubled, the batch redone,
    /// and the other process may commit in between) or find that the other grew it
    /// (`MDB_MAP_RESIZED`): the server still follows every commit of the other.
    @Test func fullAndGrownMapsBesideAnotherWriter() throws {
        let dir = TemporaryDirectory("journal-map")
        let data = dir.sub("data")
        var options = TopicStore.Options()
        options.cachesRecipients = true
        options.initialMapSize = 256 << 10
        let store = try TopicStore(directory: data, options: options)
        defer { store.close() }
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore-stress"))
        writer.arguments = [data, "3", "m", "\(256 << 10)"]
        writer.standardOutput = FileHandle.nullDevice
        try writer.run()
        let until = Date().addingTimeInterval(1.5)
        var i = 0
        while Date() < until {
            var events = try Self.crossEvents(store, "\(i)")
            // Enough to fill the map now and then.
            events += (0..<40).map { k in Event(project: "crash", body: .register(deviceID: "bulk-\(i)-\(k)", topics: [TopicSpec(code: "b\(i)-\(k)")])) }
            for r in store.submitAndWait(events) { _ = try r.get() }
            i += 1
        }
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()
        #expect(store.environment.info().mapSize > 256 << 10, "the map never grew")
        #expect(store.writerTableReads.deviceIndexes == 1, "the server read its indexes \(store.writerTableReads.deviceIndexes) times")
        try expectCacheMatchesTheMapAndAuditIsClean(store, project: "crash")
    }

    /// Two writers started at once on a directory that does not exist yet, making the
    /// same device_ids and tokens: each follows the other from the empty store on
    /// (no stamp), and no device_id gets two ordinals.
    @Test func twoWritersStartingTogetherOnAFreshStore() throws {
        for round in 0..<3 {
            let dir = TemporaryDirectory("journal-fresh")
            let data = dir.sub("data")
            let writers = try (0..<2).map { _ in try CompactionCrashTests.StressWriter(directory: data, prefix: "x") }
            // Both write side by side for a while (each has acknowledged something: on a busy
            // machine a fixed sleep could end before a writer's first commit).
            let started = writers.map { $0.waitForAcknowledgement() }
            #expect(started == [true, true], "round \(round): a writer exited before acknowledging anything")
            usleep(300_000)
            let perWriter = writers.map { $0.kill() }
            #expect(perWriter.allSatisfy { !$0.isEmpty }, "round \(round): a writer acknowledged nothing")
            let acks = perWriter.flatMap { $0 }
            let store = try TopicStore(directory: data)
            defer { store.close() }
            try CompactionCrashTests().checkAcknowledged(acks, store: store, archive: nil, round: "round \(round)")
            try store.read { txn in
                let project = try #require(try store.reader.project(named: "crash", txn))
                let ids = Set(try allRecords(store).compactMap(\.event.body.deviceID))
                #expect(project.nextOrdinal == UInt32(ids.count), "round \(round): one ordinal per device_id")
            }
            let audit = try Audit.run(store)
            #expect(audit.isClean, "round \(round): \(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
        }
    }

    /// A file compaction (its own process) switches generations while this server and
    /// another process both keep writing, each taking the other's tokens and registering
    /// the other's devices: whether the server's indexes were handed over at the switch or
    /// read again, the store stays a fold of its log.
    @Test func aSwitchWhileTwoOtherWritersWrite() throws {
        let dir = TemporaryDirectory("journal-switch-busy")
        let data = dir.sub("data")
        let store = try RecipientCacheTests.servingStore(data)
        defer { store.close() }
        let writer = try CompactionCrashTests.StressWriter(directory: data, prefix: "s")
        let stop = Mutex(false)
        let failures = Mutex<[String]>([])
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            var i = 0
            while !stop.withLock({ $0 }) {
                let events = (try? Self.crossEvents(store, "\(i)")) ?? []
                for r in store.submitAndWait(events) {
                    if case .failure(let e) = r { failures.withLock { $0.append("\(e)") } }
                }
                i += 1
            }
            done.signal()
        }
        usleep(300_000)
        let generation = store.generation
        for _ in 0..<3 {
            let run = try compactCLI(["compact", "--data", data, "--retain", "0", "--json"])
            #expect(run.status == 0, "\(run.error)")
            usleep(100_000)
        }
        stop.withLock { $0 = true }
        done.wait()
        _ = writer.kill()
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(3))")
        #expect(store.generation != generation, "the store did not move to a new generation")
        try expectCacheMatchesTheMapAndAuditIsClean(store, project: "crash")
    }
}

/// Random commands from this process and from others (`load`, and compaction's
/// garbage: forgotten devices, expired tokens, dropped topics), interleaved:
/// the serving writer follows every other writer's journal, never reads the
/// device table again, and its store stays equal to a replay of its log.
@Suite(.serialized) struct WriterJournalInterleavingTests {
    static let project = RecipientCacheTests.project

    static func event(_ rng: inout SeededRandom, now: Int64) -> (Event, String) {
        let d = Int(rng.next() % 60)
        let token = "tk-\(rng.next() % 90)"
        let code = rng.next() % 3 == 0 ? "u\(d)" : "c\(rng.next() % 12)"  // a device's own topics empty out
        switch rng.next() % 10 {
        case 0, 1, 2:
            return (Event(project: project, body: .token(deviceID: "dev-\(d)", token: token, platform: d % 2 == 0 ? .ios : .android)),
                    #"{"project":"\#(project)","type":"token","device_id":"dev-\#(d)","token":"\#(token)","platform":"\#(d % 2 == 0 ? "ios" : "android")"}"#)
        case 3, 4, 5:
            return (Event(project: project, body: .register(deviceID: "dev-\(d)", topics: [TopicSpec(code: code)])),
                    #"{"project":"\#(project)","type":"register","device_id":"dev-\#(d)","topics":["\#(code)"]}"#)
        case 6:
            return (Event(project: project, body: .unregister(deviceID: "dev-\(d)", codes: [code])),
                    #"{"project":"\#(project)","type":"unregister","device_id":"dev-\#(d)","topics":["\#(code)"]}"#)
        case 7, 8:
            return (Event(project: project, body: .unregisterAll(deviceID: "dev-\(d)")),
                    #"{"project":"\#(project)","type":"unregister-all","device_id":"dev-\#(d)"}"#)
        default:
            return (Event(project: project, body: .tokenRejected(token: token, rejectedAt: now, reason: "Unregistered")),
                    #"{"project":"\#(project)","type":"token-rejected","token":"\#(token)","at":\#(now),"reason":"Unregistered"}"#)
        }
    }

    @Test func otherWritersAreFollowedExactly() throws {
        let dir = TemporaryDirectory("journal-random")
        let data = dir.sub("data")
        let store = try RecipientCacheTests.servingStore(data)
        defer { store.close() }
        var rng = SeededRandom(seed: 0x5eed_0f_1)
        for round in 0..<8 {
            let now = nowMilliseconds()
            let mine = (0..<40).map { _ in Self.event(&rng, now: now).0 }
            for r in store.submitAndWait(mine) { _ = try? r.get() }

            // `topicstore load` in another process, in one transaction or a few.
            let lines = (0..<30).map { _ in Self.event(&rng, now: now).1 }
            let input = dir.sub("round-\(round).jsonl")
            try (lines.joined(separator: "\n") + "\n").write(toFile: input, atomically: true, encoding: .utf8)
            let load = try compactCLI(["load", "--data", data, input])
            #expect(load.status == 0 || load.status == 5, "round \(round): \(load.error)")

            if round % 2 == 1 {
                let gc = try compactCLI(["compact", "--data", data, "--retain", "0", "--no-file", "--rejected-grace", "0", "--json"])
                #expect(gc.status == 0, "round \(round): \(gc.error)")
            }
            try store.read { txn in
                let cached = try RecipientCacheTests.recipients(store.reader, txn)
                let mapped = try RecipientCacheTests.recipients(ProjectionReader(tables: store.tables), txn)
                #expect(RecipientCacheTests.differences(cached, mapped) == [], "round \(round)")
            }
        }
        for r in store.submitAndWait((0..<40).map { _ in Self.event(&rng, now: nowMilliseconds()).0 }) { _ = try? r.get() }
        #expect(store.writerTableReads.deviceIndexes == 1 && store.writerTableReads.recipientCache == 1,
                "\(store.writerTableReads)")
        let types = Set(try allRecords(store).map(\.event.body.typeName))
        #expect(types.isSuperset(of: ["forget-device", "expire-token", "drop-topic"]), "\(types.sorted())")
        try store.read { txn in
            let cached = try RecipientCacheTests.recipients(store.reader, txn)
            let mapped = try RecipientCacheTests.recipients(ProjectionReader(tables: store.tables), txn)
            #expect(RecipientCacheTests.differences(cached, mapped) == [])
            #expect(store.reader.recipientCache?.heldSequence == (try store.tables.appliedSequence(txn)))
        }
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }
}

/// The journal's own format: entries round-trip, a transaction too large to
/// list is written unlisted (followers read the table), and old entries go.
@Suite struct WriterJournalFormatTests {
    @Test func entriesRoundTripAndTooLargeOnesAreUnlisted() throws {
        let entry = WriterJournal.Entry(previousStamp: 7, stamp: 8, from: 100, through: 164, listed: true,
                                        names: [.init(name: .token, insert: false, pid: 1, hash: 0xDEAD_BEEF, ordinal: 9),
                                                .init(name: .deviceID, insert: true, pid: 1, hash: 42, ordinal: 10)],
                                        devices: [1 << 32 | 9, 1 << 32 | 10])
        let bytes = WriterJournal.encode(entry)
        #expect(try bytes.withUnsafeBytes { try WriterJournal.decode($0, at: "test") } == entry)
        var first = entry
        first.previousStamp = nil
        #expect(try WriterJournal.encode(first).withUnsafeBytes { try WriterJournal.decode($0, at: "test") } == first)

        var big = entry
        big.names = Array(repeating: entry.names[0], count: WriterJournal.maxListedBytes / 17 + 1)
        let decoded = try WriterJournal.encode(big).withUnsafeBytes { try WriterJournal.decode($0, at: "test") }
        #expect(decoded?.listed == false && decoded?.names.isEmpty == true)
        // A cut entry is corruption, not a gap; another hash version is a gap.
        #expect(throws: ProjectionCorruption.self) { try Array(bytes.dropLast(3)).withUnsafeBytes { try WriterJournal.decode($0, at: "test") } }
        var other = bytes
        other[1] = WriterJournal.hashVersion &+ 1
        #expect(try other.withUnsafeBytes { try WriterJournal.decode($0, at: "test") } == nil)
    }

    /// Entries name index entries by hash, so the hash is part of their format: another
    /// process (another binary) must file a name under the same hash, or follow nothing.
    /// Changing `OrdinalIndex.hash` means changing `WriterJournal.hashVersion` with it
    /// (and these values).
    @Test func theHashOfANameIsFixedByTheHashVersion() {
        #expect(WriterJournal.hashVersion == 1)
        let pinned: [(UInt32, String, UInt64)] = [
            (1, "D1", 0x36C1_20CE_E1A2_DE30), (1, "a-device-id-longer-than-a-word", 0xCE8D_6824_CE37_8088),
            (7, "D1", 0xF831_7588_F680_0DB9), (2, "tok-0f1e2d3c4b5a69788796a5b4c3d2e1f0", 0x5B60_17C9_7DA0_AD5D),
        ]
        for (pid, name, hash) in pinned {
            #expect(OrdinalIndex.hash(pid, name) == hash, "\(pid) \(name)")
        }
    }

    @Test func entriesOutsideTheKeptWindowAreRemoved() throws {
        let dir = TemporaryDirectory("journal-prune")
        var options = Environment.Options()
        options.maxDatabases = 32
        let env = try Environment(path: dir.path, options: options)
        let tables = try ProjectionTables.open(in: env, create: true)
        func entry(_ from: UInt64) -> WriterJournal.Entry {
            .init(previousStamp: from, stamp: from + 1, from: from, through: from + 1, listed: true, names: [], devices: [])
        }
        try env.write { txn in for i in 0..<10 { try WriterJournal.write(entry(UInt64(i) * 1000), tables, txn) } }
        let window = WriterJournal.keptSequences
        for round in 0..<3 {
            try env.write { txn in try WriterJournal.write(entry(window + 20_000 + UInt64(round)), tables, txn) }
        }
        let kept = try env.read { txn -> [UInt64] in
            var out: [UInt64] = []
            try txn.withCursor(tables.writerState!) { cursor in
                var e = try cursor.first()
                while let (k, _) = e {
                    if k.count == 9, k[0] == UInt8(ascii: "j") { out.append(k.loadBigEndian(at: 1, as: UInt64.self)) }
                    e = try cursor.next()
                }
            }
            return out
        }
        // Up to four per write: the ten older than the window are gone after three writes.
        #expect(kept == [window + 20_000, window + 20_001, window + 20_002], "\(kept)")
        // A chain through a removed entry is a gap.
        #expect(try env.read { txn in
            try WriterJournal.chain(from: 0, at: 0, to: window + 20_003, appliedSequence: window + 20_003, tables, txn)
        } == nil)
    }
}

/// Several writers of one store, as several processes would be, but driven
/// step by step in one environment so that every way their transactions can
/// end is reached on purpose: a commit, an abort after the flush (a full map,
/// a failed commit) or before it, a commit that leaves no journal entry (an
/// older binary), one too large to list, one of another hash version, entries
/// pruned while a writer was idle. After each step some writer is asked, inside
/// a transaction of its own, for the device of every device_id and token the
/// store holds: a stale index answers nil (a second ordinal for a device_id, a
/// token not taken from its holder). The recipient caches are compared with
/// the table, and the store with a replay of its log at the end.
@Suite struct WriterJournalModelTests {
    struct Abort: Error {}
    enum Ending: CaseIterable { case commit, abortAfterFlush, abortBeforeFlush, noJournal, unlisted, otherHashVersion, damaged }

    static let projects = ["alpha", "beta"]

    static func event(_ rng: inout SeededRandom, now: Int64) -> Event {
        let project = rng.pick(projects)
        let d = "dev-\(rng.int(40))", token = "tk-\(rng.int(50))", code = rng.int(3) == 0 ? "u\(rng.int(40))" : "c\(rng.int(8))"
        switch rng.int(14) {
        case 0, 1, 2: return Event(project: project, body: .token(deviceID: d, token: token, platform: rng.int(2) == 0 ? .ios : .android))
        case 3, 4, 5: return Event(project: project, body: .register(deviceID: d, topics: [TopicSpec(code: code)]))
        case 6: return Event(project: project, body: .unregister(deviceID: d, codes: [code]))
        case 7, 8: return Event(project: project, body: .unregisterAll(deviceID: d))
        case 9: return Event(project: project, body: .tokenRejected(token: token, rejectedAt: now, reason: "Unregistered"))
        case 10, 11: return Event(project: project, body: .forgetDevice(deviceID: d))
        case 12: return Event(project: project, body: .expireToken(token: token))
        default: return Event(project: project, body: .dropTopic(code: code))
        }
    }

    /// One write transaction of `writer`, ended as `ending` says; true when it committed.
    static func write(_ writer: ProjectionWriter, _ events: [Event], ending: Ending, time: inout Int64,
                      _ env: Environment, _ log: EventLog, _ tables: ProjectionTables) throws -> Bool {
        var id = 0
        do {
            try env.write { txn in
                id = txn.id
                try writer.begin(txn)
                let start = try tables.appliedSequence(txn)
                var sequence = try log.bounds(txn)?.last ?? start
                var chain = try log.head(txn, start: { _ in nil })?.hash ?? .genesis
                for event in events {
                    sequence += 1
                    time += 1
                    let record = LogRecord(sequence: sequence, timestamp: time, event: event)
                    try log.append(encoded: RecordCodec.encode(record, chainingFrom: &chain), sequence: sequence, txn)
                    try Fold.apply(record, to: writer, txn)
                }
                if ending == .abortBeforeFlush { throw Abort() }
                try writer.flush(txn)
                let state = tables.writerState!, key = WriterJournal.key(start)
                switch ending {
                case .abortAfterFlush: throw Abort()
                case .noJournal: _ = try txn.delete(state, key)
                case .unlisted, .otherHashVersion, .damaged:
                    let stored = try #require(try txn.get(state, key))
                    var entry = try #require(try WriterJournal.decode(stored, at: "test"))
                    var bytes: [UInt8]
                    switch ending {
                    case .unlisted:
                        entry.listed = false
                        bytes = WriterJournal.encode(entry)
                    case .otherHashVersion:
                        bytes = WriterJournal.encode(entry)
                        bytes[1] = WriterJournal.hashVersion &+ 1
                    default:  // cut short: it does not decode, a gap for its followers (it stopped every writer)
                        bytes = Array(WriterJournal.encode(entry).dropLast())
                    }
                    try txn.put(state, key, bytes)
                default: break
                }
            }
        } catch is Abort {
            return false
        }
        writer.didCommit(transactionID: id)
        return true
    }

    /// Asks `writer`, in a transaction that does not commit, for the holder of every
    /// device_id and token the store holds, and compares its recipient cache with the table.
    static func check(_ writer: ProjectionWriter, _ name: String, step: Int,
                      _ env: Environment, _ tables: ProjectionTables) throws {
        do {
          try env.write { txn in
            try writer.begin(txn)
            var records: [(UInt32, UInt32, [UInt8])] = []
            try txn.withCursor(tables.devices) { cursor in
                var e = try cursor.first()
                while let (k, v) = e {
                    records.append((k.loadBigEndian(at: 0, as: UInt32.self), k.loadBigEndian(at: 4, as: UInt32.self), Array(v)))
                    e = try cursor.next()
                }
            }
            for (pid, ordinal, bytes) in records {
                let device = try bytes.withUnsafeBytes { try DeviceRecord(decoding: $0, at: "test") }
                let byID = try writer.ordinal(pid, deviceID: device.deviceID, txn)
                #expect(byID == ordinal, "step \(step), \(name): device_id \(device.deviceID) of \(pid)/\(ordinal) → \(String(describing: byID))")
                if let token = device.token {
                    let byToken = try writer.ordinal(pid, token: token, txn)
                    #expect(byToken == ordinal, "step \(step), \(name): token \(token) of \(pid)/\(ordinal) → \(String(describing: byToken))")
                }
            }
            if let cache = writer.recipientCache {
                let applied = try tables.appliedSequence(txn)
                #expect(cache.heldSequence == applied, "step \(step), \(name): cache at \(String(describing: cache.heldSequence)), store at \(applied)")
                for pid in Set(records.map(\.0)) {
                    let held = records.filter { $0.0 == pid }
                    let top = (held.map(\.1).max() ?? 0) + 2
                    let ordinals = Array(0..<top)
                    var batch = RecipientCache.Batch()
                    let answered = ordinals.withUnsafeBufferPointer { cache.copy(pid, $0, asOf: applied, into: &batch) }
                    #expect(answered, "step \(step), \(name): the cache cannot answer")
                    guard answered else { continue }
                    batch.bytes.withUnsafeBytes { all in
                        for (i, ordinal) in ordinals.enumerated() {
                            // The cache holds records with their names as text (`DeviceRecord.writeTextForm`): compared as records.
                            func decoded(_ b: [UInt8]) -> DeviceRecord? { try? b.withUnsafeBytes { try DeviceRecord(decoding: $0, at: "") } }
                            let cached = batch.record(i, in: all).map(Array.init)
                            let stored = held.first { $0.1 == ordinal }?.2
                            #expect((cached == nil) == (stored == nil), "step \(step), \(name): cached record \(pid)/\(ordinal)")
                            if let cached, let stored {
                                #expect(decoded(cached) != nil && decoded(cached) == decoded(stored), "step \(step), \(name): cached record \(pid)/\(ordinal)")
                            }
                        }
                    }
                }
            }
            throw Abort()
          }
        } catch is Abort {}
    }

    @Test(arguments: [11, 12, 13] as [UInt64])
    func writersFollowEachOtherThroughEveryEnding(seed: UInt64) throws {
        let dir = TemporaryDirectory("journal-model")
        var rng = SeededRandom(seed: seed)
        var loads = 0, commits = 0
        do {
            var options = Environment.Options()
            options.maxDatabases = 32
            options.noSync = true
            let env = try Environment(path: dir.path, options: options)
            let log = try EventLog.open(in: env, create: true)
            let tables = try ProjectionTables.open(in: env, create: true)
            let writers = (0..<3).map { i in ProjectionWriter(tables: tables, recipientCache: i == 0 ? RecipientCache() : nil) }
            for w in writers { try env.read { txn in try w.prepare(txn) } }
            var time = nowMilliseconds()
            for step in 0..<600 {
                let w = rng.int(writers.count)
                let roll = rng.int(100)
                let ending: Ending = roll < 60 ? .commit : roll < 70 ? .abortAfterFlush : roll < 76 ? .abortBeforeFlush
                    : roll < 84 ? .noJournal : roll < 90 ? .unlisted : roll < 95 ? .otherHashVersion : .damaged
                if rng.int(40) == 0 {
                    // Entries pruned while a writer was idle: a gap.
                    try env.write { txn in
                        var keys: [[UInt8]] = []
                        try txn.withCursor(tables.writerState!) { cursor in
                            var e = try cursor.first()
                            while let (k, _) = e {
                                if k.count == 9, k[0] == WriterJournal.prefix { keys.append(Array(k)) }
                                e = try cursor.next()
                            }
                        }
                        for k in keys.prefix(keys.count / 2) { _ = try txn.delete(tables.writerState!, k) }
                    }
                }
                let events = (0..<(1 + rng.int(6))).map { _ in Self.event(&rng, now: time + 1_000_000) }
                if try Self.write(writers[w], events, ending: ending, time: &time, env, log, tables) { commits += 1 }
                if rng.int(4) == 0 {
                    let c = rng.int(writers.count)
                    try Self.check(writers[c], "writer \(c)", step: step, env, tables)
                }
            }
            for (i, w) in writers.enumerated() { try Self.check(w, "writer \(i)", step: -1, env, tables) }
            loads = writers.reduce(0) { $0 + $1.deviceIndexLoads }
        }
        // Most changes were followed, not read again (one load per writer at the start).
        #expect(commits > 300 && loads < commits / 2, "\(loads) loads for \(commits) commits")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }
}
