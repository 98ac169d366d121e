import Foundation
import LMDB
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// File compaction's switch between generations: a compact copy takes over
/// while writers keep writing, and nothing acknowledged is lost or applied twice.
@Suite struct GenerationTests: RunsTopicstore {
    /// Copies the store compactly into `generation`, then hands it to `retire`,
    /// carrying over (inside the old write transaction) the records appended since the copy.
    static func switchGeneration(_ store: TopicStore, to generation: String) throws {
        let target = TopicStore.generationDirectory(store.directory, generation)
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try store.environment.copy(to: target, compact: true)
        let env = try Environment(path: target)
        let log = try EventLog.open(in: env, create: false)
        let tables = try ProjectionTables.open(in: env, create: false)
        let oldLog = store.log
        try store.retire(to: generation) { oldTxn in
            let copied = try env.read { txn in try log.bounds(txn)?.last ?? 0 }
            var records: [(UInt64, [UInt8])] = []
            try oldLog.forEachEncoded(from: copied + 1, oldTxn) { seq, bytes in records.append((seq, Array(bytes))); return true }
            let writer = ProjectionWriter(tables: tables)
            try env.write { txn in
                try writer.begin(txn)
                for (seq, bytes) in records {
                    try log.append(encoded: bytes, sequence: seq, txn)
                    try Fold.apply(try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: seq) }, to: writer, txn)
                }
                try writer.flush(txn)
            }
        }
    }

    /// A writer in another process (the stress tool, like a running server)
    /// keeps writing while this process switches generations twice under it.
    @Test func writersMoveToTheNewGenerationWithoutLosingAnything() throws {
        let dir = TemporaryDirectory("generations")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore-stress"))
        writer.arguments = [dir.path, "2", "gen"]
        let pipe = Pipe()
        writer.standardOutput = pipe
        try writer.run()
        usleep(200_000)
        try Self.switchGeneration(store, to: "g000001")
        _ = try store.statistics()  // the next transaction moves this store over
        #expect(store.generation == "g000001")
        usleep(200_000)
        try Self.switchGeneration(store, to: "g000002")
        usleep(200_000)
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()
        let acks: [(UInt64, String)] = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").compactMap { line in
                let parts = line.split(separator: " ")
                guard parts.count == 3, parts[0] == "ack", let seq = UInt64(parts[1]) else { return nil }
                return (seq, String(parts[2]))
            }
        #expect(try TopicStore.activeGeneration(in: dir.path) == "g000002")
        #expect(acks.count > 20, "the writer kept writing across the switches")
        let log = store.log
        try store.read { txn in
            var expected: UInt64 = 1
            try log.forEach(txn) { r in
                #expect(r.sequence == expected)
                expected += 1
                return true
            }
            for (seq, id) in acks {
                #expect(try log.record(at: seq, txn)?.event.body.deviceID == id, "acknowledged seq \(seq) lost or changed")
            }
        }
        #expect(store.generation == "g000002")
        // The projections of the last generation are the fold of its log.
        let live = try ProjectionDump.of(store)
        #expect(live == (try foldLog(of: store, into: dir.sub("fold"))))
    }

    /// A server idle while two compactions ran (a quiet night and a manual run, say):
    /// its generation was retired to one that the second compaction retired and removed
    /// in turn. The review found every request then answered 500 until a restart
    /// ("retired to 'g000002', which is missing"): the store goes to the generation
    /// CURRENT names, as a restart would.
    @Test func anIdleStoreFollowsTwoCompactionsThatRanWithoutIt() throws {
        let dir = TemporaryDirectory("generations")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        func register(_ device: String) throws {
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: device, topics: [TopicSpec(code: "news")])))
        }
        try register("d1")
        var compact = try topicstore(["compact", "--data", dir.path, "--retain", "0"])
        #expect(compact.status == 0, "\(compact.stderr)")
        try register("d2")
        #expect(store.generation == "g000001")
        for _ in 0..<2 {
            compact = try topicstore(["compact", "--data", dir.path, "--retain", "0"])
            #expect(compact.status == 0, "\(compact.stderr)")
        }
        #expect(try TopicStore.activeGeneration(in: dir.path) == "g000003")
        try register("d3")
        #expect(store.generation == "g000003")
        let devices = try store.read { txn in try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("news"), txn), txn).total }
        #expect(devices == 3)
    }

    @Test func aStoreCannotBeOpenedTwiceInOneProcess() throws {
        let dir = TemporaryDirectory("twice")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        #expect(throws: StoreError.self) { try TopicStore(directory: dir.path) }
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        #expect(throws: StoreError.self) { try TopicStore(directory: dir.path + "/", options: readOnly) }
    }

    @Test func aSwitchKilledBeforeCURRENTMovedIsFinishedByTheNextOpen() throws {
        let dir = TemporaryDirectory("half-switch")
        do {
            let store = try TopicStore(directory: dir.path)
            defer { store.close() }
            try store.submitAndWait(Event(project: "p", body: .register(deviceID: "a", topics: [TopicSpec(code: "t")])))
            try store.environment.copy(to: { let p = dir.sub("g000001"); try? FileManager.default.createDirectory(atPath: p, withIntermediateDirectories: true); return p }(), compact: true)
            // Retire the old generation the way retire(to:) does, but stop before CURRENT moves.
            let tables = store.tables
            try store.environment.write { txn in try txn.put(tables.meta, Array("retiredTo".utf8), Array("g000001".utf8)) }
        }
        #expect(try TopicStore.activeGeneration(in: dir.path) == "")
        let reopened = try TopicStore(directory: dir.path)
        defer { reopened.close() }
        #expect(reopened.generation == "g000001")
        #expect(try TopicStore.activeGeneration(in: dir.path) == "g000001")
        try reopened.submitAndWait(Event(project: "p", body: .register(deviceID: "b", topics: [TopicSpec(code: "t")])))
        let stats = try reopened.statistics()
        #expect(stats.lastSequence == 2)
    }

    /// A compaction in another process retires the generation, then moves
    /// CURRENT: a server that notices the retirement in between must move to
    /// the generation it was retired to, not open the retired one a second time
    /// (which failed as "already open in this process": 500s at every switch).
    @Test func aStoreMovesOverWhenItSeesTheRetirementBeforeCURRENTMoves() throws {
        let dir = TemporaryDirectory("mid-switch")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        try store.submitAndWait(Event(project: "p", body: .register(deviceID: "a", topics: [TopicSpec(code: "t")])))
        let next = dir.sub("g000001")
        try FileManager.default.createDirectory(atPath: next, withIntermediateDirectories: true)
        try store.environment.copy(to: next, compact: true)
        let tables = store.tables
        try store.environment.write { txn in try txn.put(tables.meta, Array("retiredTo".utf8), Array("g000001".utf8)) }
        #expect(try TopicStore.activeGeneration(in: dir.path) == "")
        // A read and a write, as a server's next requests: both move over.
        #expect(try store.statistics().lastSequence == 1)
        #expect(store.generation == "g000001")
        try store.submitAndWait(Event(project: "p", body: .register(deviceID: "b", topics: [TopicSpec(code: "t")])))
        #expect(try store.statistics().lastSequence == 2)
        #expect(try TopicStore.activeGeneration(in: dir.path) == "g000001", "the switch is finished, as after a killed compaction")
    }

    @Test func auxiliaryTablesFollowTheSwitch() throws {
        let dir = TemporaryDirectory("aux")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        try store.openAuxiliary(["extra"])
        try store.writeAuxiliary { txn, t in try txn.put(t["extra"]!, Array("k".utf8), Array("v1".utf8)) }
        try Self.switchGeneration(store, to: "g000001")
        let v = try store.readAuxiliary { txn, t in try txn.get(t["extra"]!, Array("k".utf8)).map { Array($0) } }
        #expect(v == Array("v1".utf8))
        try store.writeAuxiliary { txn, t in try txn.put(t["extra"]!, Array("k".utf8), Array("v2".utf8)) }
        #expect(store.generation == "g000001")
        store.close()
        let reopened = try TopicStore(directory: dir.path)
        defer { reopened.close() }
        try reopened.openAuxiliary(["extra"])
        #expect(reopened.generation == "g000001")
        #expect(try reopened.readAuxiliary { txn, t in try txn.get(t["extra"]!, Array("k".utf8)).map { Array($0) } } == Array("v2".utf8))
    }
}
