import Foundation
import LMDB
import Projections
import SubscriptionLog
import Synchronization
import Testing
import TopicStore

/// File compaction's switch between generations: a compact copy takes over
/// while writers keep writing, and nothing acknowledged is lost or applied twice.
@Suite struct GenerationTests {
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

    @Test func writersMoveToTheNewGenerationWithoutLosingAnything() throws {
        let dir = TemporaryDirectory("generations")
        let store = try TopicStore(directory: dir.path)
        let other = try TopicStore(directory: dir.path)  // a second store on the same directory, like a server
        defer { store.close(); other.close() }
        let acks = Mutex<[UInt64: String]>([:])
        let stop = Mutex(false)
        let writer = Thread {
            var i = 0
            while !stop.withLock({ $0 }) {
                let id = "d\(i)"
                if let r = try? other.submitAndWait(Event(project: "p", body: .register(deviceID: id, topics: [TopicSpec(code: "all")]))) {
                    acks.withLock { $0[r.sequence] = id }
                }
                i += 1
            }
        }
        writer.start()
        usleep(100_000)
        try Self.switchGeneration(store, to: "g000001")
        _ = try store.statistics()  // the next transaction moves this store over
        #expect(store.generation == "g000001")
        usleep(100_000)
        try Self.switchGeneration(store, to: "g000002")
        usleep(100_000)
        stop.withLock { $0 = true }
        while !writer.isFinished { usleep(1000) }

        #expect(try TopicStore.activeGeneration(in: dir.path) == "g000002")
        #expect(other.generation == "g000002", "the second store followed the switches")
        let reopened = try TopicStore(directory: dir.path)
        defer { reopened.close() }
        let all = acks.withLock { $0 }
        #expect(all.count > 10)
        let log = reopened.log
        try reopened.read { txn in
            var expected: UInt64 = 1
            try log.forEach(txn) { r in
                #expect(r.sequence == expected)
                expected += 1
                return true
            }
            #expect(expected - 1 == UInt64(all.count), "every acknowledged command once, nothing else")
            for (seq, id) in all {
                #expect(try log.record(at: seq, txn)?.event.body.deviceID == id)
            }
            let counts = try reopened.reader.counts(of: try reopened.reader.audience(project: "p", .topic("all"), txn), txn)
            #expect(counts.total == all.count)
        }
        // The projections of the last generation are the fold of its log.
        let live = try ProjectionDump.of(reopened)
        #expect(live == (try foldLog(of: reopened, into: dir.sub("fold"))))
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
