import Foundation
import LMDB
import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

@Suite("Replay")
struct ReplayTests {
    /// Submits `count` random events in batches of `step`, recording after each
    /// batch every table of the live store and the model, keyed by sequence.
    static func runWorkload(_ store: TopicStore, seed: UInt64, count: Int, step: Int)
        throws -> (dumps: [UInt64: ReplayTableDump], models: [UInt64: ReplayModel], receipts: [Receipt]) {
        var workload = ReplayWorkload(seed: seed)
        var model = ReplayModel()
        var dumps: [UInt64: ReplayTableDump] = [:]
        var models: [UInt64: ReplayModel] = [:]
        var receipts: [Receipt] = []
        var submitted = 0
        while submitted < count {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let events = (0..<min(step, count - submitted)).map { _ in workload.next(now: now) }
            for (event, result) in zip(events, store.submitAndWait(events)) {
                let receipt = try result.get()
                model.apply(event, at: receipt.timestamp)
                receipts.append(receipt)
            }
            submitted += events.count
            let seq = receipts.last!.sequence
            dumps[seq] = try replayDumpTables(store)
            models[seq] = model
        }
        return (dumps, models, receipts)
    }

    @Test("replay as of many points equals the live store at those points, every table", arguments: [1, 2, 3] as [UInt64])
    func replayEqualsLive(seed: UInt64) throws {
        let dir = ReplayTempDir("equals-\(seed)")
        let store = try TopicStore(directory: dir.sub("live"))
        let (dumps, _, _) = try Self.runWorkload(store, seed: seed, count: 600, step: 37)
        #expect(dumps.count >= 16)
        for (seq, liveDump) in dumps.sorted(by: { $0.key < $1.key }) {
            let out = dir.sub("asof-\(seq)")
            var options = Replay.Options()
            options.recordsPerReadTransaction = 23   // many bounded transactions
            options.recordsPerCommit = 50
            let report = try Replay.rebuild(from: store, to: .sequence(seq), into: out, options: options)
            #expect(report.through == seq)
            #expect(report.events == seq)
            let replayed = try replayOpenReadOnly(out)
            let diff = replayDumpDifferences(liveDump, try replayDumpTables(replayed))
            #expect(diff.isEmpty, "seq \(seq): \(diff.prefix(5))")
            // Every table was really compared: none of the interesting ones is empty.
            for table in ["devices", "topics", "topic_codes", "postings", "device_topics", "log"] {
                #expect(!(liveDump[table] ?? [:]).isEmpty, "\(table) is empty at seq \(seq)")
            }
        }
    }

    @Test("as-of audiences match the in-memory model at each point")
    func asOfAudiencesMatchModel() throws {
        let dir = ReplayTempDir("model")
        let store = try TopicStore(directory: dir.sub("live"))
        let (_, models, _) = try Self.runWorkload(store, seed: 77, count: 500, step: 45)
        var checkedNonEmpty = 0
        for (seq, model) in models.sorted(by: { $0.key < $1.key }) {
            let out = dir.sub("asof-\(seq)")
            try Replay.rebuild(from: store, to: .sequence(seq), into: out)
            let replayed = try replayOpenReadOnly(out)
            let reader = replayed.reader
            try replayed.read { txn in
                for (projectName, project) in model.projects {
                    guard let p = try reader.project(named: projectName, txn) else {
                        Issue.record("project \(projectName) missing at \(seq)"); continue
                    }
                    for (code, members) in project.topics {
                        let audience = try reader.audience(project: projectName, .topic(code), txn)
                        #expect(audience.asOfSeq == seq)
                        var ids = Set<String>()
                        for o in audience.devices.toArray() {
                            ids.insert(try #require(try reader.deviceRecord(p.id, ordinal: o, txn)).deviceID)
                        }
                        #expect(ids == members, "seq \(seq) \(projectName)/\(code)")
                        let counts = try reader.counts(of: audience, txn)
                        #expect(counts.ios == members.filter { model.live(projectName, $0, .ios) }.count, "ios \(seq) \(code)")
                        #expect(counts.android == members.filter { model.live(projectName, $0, .android) }.count, "android \(seq) \(code)")
                        if !members.isEmpty { checkedNonEmpty += 1 }
                    }
                }
            }
        }
        #expect(checkedNonEmpty > 50)
    }

    @Test("--at TIME resolves to the last event at or before that time")
    func timeResolution() throws {
        let dir = ReplayTempDir("time")
        let store = try TopicStore(directory: dir.sub("live"))
        var receipts: [Receipt] = []
        for i in 0..<6 {
            receipts.append(try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "news")]))))
            Thread.sleep(forTimeInterval: 0.005)
        }
        for r in receipts {
            let expected = receipts.filter { $0.timestamp <= r.timestamp }.map(\.sequence).max()!
            #expect(try Replay.resolve(.time(r.timestamp), in: store) == expected)
        }
        #expect(try Replay.resolve(.time(receipts[0].timestamp - 1), in: store) == 0)
        let out = dir.sub("at")
        let report = try Replay.rebuild(from: store, to: .time(receipts[3].timestamp), into: out)
        #expect(report.through == receipts.filter { $0.timestamp <= receipts[3].timestamp }.map(\.sequence).max()!)
        let replayed = try replayOpenReadOnly(out)
        let count = try replayed.read { txn in
            try replayed.reader.audience(project: "alpha", .topic("news"), txn).devices.count
        }
        #expect(count == Int(report.through))
    }

    @Test("replay never writes into the live store or a non-empty directory, and refuses points past the log")
    func replayRefusals() throws {
        let dir = ReplayTempDir("refuse")
        let store = try TopicStore(directory: dir.sub("live"))
        try store.submitAndWait(Event(project: "alpha", body: .unregisterAll(deviceID: "x")))
        let before = try replayDumpTables(store)
        #expect(throws: ReplayError.self) { try Replay.rebuild(from: store, to: .end, into: dir.sub("live")) }
        #expect(throws: ReplayError.self) { try Replay.rebuild(from: store, to: .sequence(2), into: dir.sub("past")) }
        try FileManager.default.createDirectory(atPath: dir.sub("busy"), withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dir.sub("busy") + "/notes.txt", contents: Data("x".utf8))
        #expect(throws: ReplayError.self) { try Replay.rebuild(from: store, to: .end, into: dir.sub("busy")) }
        // Inside the store directory (compaction would remove it), by any path to it.
        try FileManager.default.createSymbolicLink(atPath: dir.sub("link"), withDestinationPath: dir.sub("live"))
        for inside in [dir.sub("live") + "/snapshots/1", dir.sub("live") + "/g000002", dir.sub("link") + "/as-of/deeper",
                       dir.sub("busy") + "/../live/x"] {
            do {
                try Replay.rebuild(from: store, to: .end, into: inside)
                Issue.record("replay wrote into \(inside)")
            } catch ReplayError.insideStore {
            }
            #expect(!FileManager.default.fileExists(atPath: inside), "\(inside)")
        }
        #expect(try Replay.rebuild(from: store, to: .end, into: dir.sub("livery")).through == 1, "a sibling whose name starts alike")
        #expect(replayDumpDifferences(before, try replayDumpTables(store)).isEmpty)
        // Before the first event: an empty store.
        let empty = try Replay.rebuild(from: store, to: .sequence(0), into: dir.sub("empty"))
        #expect(empty.through == 0)
        let e = try replayOpenReadOnly(dir.sub("empty"))
        #expect(try e.statistics().lastSequence == 0)
    }
}
