import Compaction
import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
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
