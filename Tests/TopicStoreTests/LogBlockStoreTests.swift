import Compaction
import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// A compaction writes the log it keeps in compressed blocks (`LogBlock`):
/// every reader of the log answers as before (records, bounds, times, chain
/// links, export, history, replay, audit), the writer appends after the
/// blocks, a later compaction cuts through a block, and a damaged or forged
/// block is found and located.
@Suite struct LogBlockStoreTests {
    static var noGarbage: GarbageRules {
        var rules = GarbageRules()
        rules.devices = false
        rules.topics = false
        rules.tokens = false
        return rules
    }

    /// The log's entries: (key, whether it is a block).
    static func entries(_ store: TopicStore) throws -> [(key: UInt64, isBlock: Bool)] {
        try store.read { txn in
            var out: [(UInt64, Bool)] = []
            try txn.withCursor(store.log.database) { cursor in
                var entry = try cursor.first()
                while let (k, v) = entry {
                    out.append((k.loadBigEndian(at: 0, as: UInt64.self), LogBlock.isBlock(v)))
                    entry = try cursor.next()
                }
            }
            return out
        }
    }

    static func exportLines(_ store: TopicStore, from: UInt64 = 1) throws -> [String] {
        var lines: [String] = []
        try Export.lines(from: store, from: from) { lines.append($0) }
        return lines
    }

    /// What every reader says of the log, record by record.
    struct Answers: Equatable {
        var records: [LogRecord]
        var bounds: EventLog.Bounds?
        var times: [UInt64?]
        var links: [ChainHash]
        var head: ChainHead?
    }

    static func answers(_ store: TopicStore, through last: UInt64) throws -> Answers {
        try store.read { txn in
            let log = store.log
            let records = try (1...last).map { try #require(try log.record(at: $0, txn)) }
            let probes = records.map(\.timestamp)
            return Answers(records: records, bounds: try log.bounds(txn),
                           times: try probes.map { try log.firstSequence(atOrAfter: $0, txn) },
                           links: try (1...last).map { try store.chainLink(at: $0, txn) },
                           head: try Audit.run(store).head)
        }
    }

    @Test func everyReaderAnswersAsBeforeAndTheWriterAppendsAfterTheBlocks() throws {
        let dir = TemporaryDirectory("log-blocks")
        let (store, _) = try storeWithCut(dir, before: 1_500, after: 1_500, seed: 5)
        let last = try #require(try store.read { txn in try store.log.bounds(txn) }).last
        let before = try Self.answers(store, through: last)
        let lines = try Self.exportLines(store)
        let device = try #require(before.records.lazy.compactMap(\.event.body.deviceID).first)
        let history = "\(try History.device(device, project: before.records[0].event.project, in: store))"
        store.close()

        // Everything kept (the cut is before the first event), garbage left alone.
        var options = compactionOptions(keepingFrom: before.records[0].timestamp - 1)
        options.garbage = Self.noGarbage
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(report.eventsRemoved == 0)

        let store2 = try TopicStore(directory: dir.sub("data"))
        defer { store2.close() }
        let entries = try Self.entries(store2)
        #expect(entries.allSatisfy(\.isBlock) && entries.last?.key == last)
        #expect(entries.count * 40 < Int(last), "\(entries.count) blocks for \(last) records")
        #expect(try Self.answers(store2, through: last) == before)
        #expect(try Self.exportLines(store2) == lines)
        #expect("\(try History.device(device, project: before.records[0].event.project, in: store2))" == history)

        // The writer chains on after the last block.
        try submitWorkload(store2, count: 300, seed: 77)
        let entriesAfter = try Self.entries(store2)
        #expect(entriesAfter.filter { !$0.isBlock }.count == 300)
        let audit = try Audit.run(store2)
        #expect(audit.isClean, "\(audit.logIssues)")
        #expect(audit.head?.sequence == last + 300)
        // (The export's last line carries its link: the old last line is now an ordinary one.)
        #expect(Array(try Self.exportLines(store2).prefix(lines.count - 1)) == lines.dropLast())
        let rebuilt = dir.sub("rebuilt")
        try Replay.rebuild(from: store2, to: .sequence(last + 150), into: rebuilt)
        let asOf = try TopicStore(directory: rebuilt, options: .longRead)
        #expect(try asOf.read { txn in try asOf.tables.appliedSequence(txn) } == last + 150)
        asOf.close()
    }

    /// A second compaction whose horizon falls inside a block keeps the records after it, in
    /// blocks again, and the log from there reads as it did.
    @Test func aLaterCompactionCutsThroughABlock() throws {
        let dir = TemporaryDirectory("log-blocks-cut")
        var (store2, blocks, cut) = try Self.compactedStore(dir, eventsEachSide: 1_200, seed: 6)
        let horizon = try #require(try store2.read { txn in try store2.log.lastSequence(atOrBefore: cut, txn) })
        let straddled = try #require(blocks.first { $0 > horizon })
        let previousKey = blocks.last { $0 <= horizon } ?? 0
        #expect(previousKey < horizon, "the horizon \(horizon) is inside the block ending at \(straddled)")
        let kept = try Self.exportLines(store2, from: horizon + 1)
        store2.close()

        var cutOptions = compactionOptions(keepingFrom: cut)
        cutOptions.garbage = Self.noGarbage
        let report = try Compactor.run(directory: dir.sub("data"), options: cutOptions)
        #expect(report.horizon == horizon)

        store2 = try TopicStore(directory: dir.sub("data"))
        defer { store2.close() }
        #expect(try store2.read { txn in try store2.log.sequenceRange(txn) }?.lowerBound == horizon + 1)
        #expect(try store2.read { txn in try store2.log.record(at: horizon, txn) } == nil)
        #expect(try Self.entries(store2).allSatisfy(\.isBlock))
        #expect(try Self.exportLines(store2, from: horizon + 1) == kept)
        let audit = try Audit.run(store2)
        #expect(audit.isClean, "\(audit.logIssues)")
    }

    /// A store of `eventsEachSide` events, a cut time, and as many again (`storeWithCut`),
    /// compacted keeping every event and garbage: reopened, with its log's keys and the cut.
    static func compactedStore(_ dir: TemporaryDirectory, eventsEachSide: Int = 800,
                               seed: UInt64) throws -> (TopicStore, [UInt64], Int64) {
        let (store, cut) = try storeWithCut(dir, before: eventsEachSide, after: eventsEachSide, seed: seed)
        let first = try #require(try store.read { txn in try store.log.record(at: 1, txn) })
        store.close()
        var options = compactionOptions(keepingFrom: first.timestamp - 1)
        options.garbage = Self.noGarbage
        _ = try Compactor.run(directory: dir.sub("data"), options: options)
        let reopened = try TopicStore(directory: dir.sub("data"))
        return (reopened, try entries(reopened).map(\.key), cut)
    }

    /// A store of schema 12 (its blocks keep their records' CRCs, its device records hold
    /// their times in 8 bytes), opened by this build: it reads as it did, is stamped 13,
    /// audits clean, and its next compaction packs its blocks again in the form of schema 13,
    /// each record as it was.
    @Test func aSchema12StoreIsStampedAndItsBlocksPackedAgain() throws {
        let dir = TemporaryDirectory("log-blocks-schema12")
        var (store, keys, _) = try Self.compactedStore(dir, eventsEachSide: 1_200, seed: 9)
        let before = try Self.exportLines(store)
        let packer = LogBlock.Packer(keepsChecksums: true)
        var devicesRewritten = 0
        try store.environment.write { txn in
            for key in keys {
                let expanded = try #require(try txn.get(store.log.database, EventLog.key(key)).map { try LogBlock.expand($0, key: key) })
                var records: [[UInt8]] = []
                expanded.forEach { _, bytes in records.append(Array(bytes)); return true }
                let old = LogBlockTests.withPointers(records) { packer.block($0, last: key) }
                try txn.put(store.log.database, EventLog.key(key), old)
            }
            var devices: [([UInt8], [UInt8])] = []
            try txn.withCursor(store.tables.devices) { cursor in
                var entry = try cursor.first()
                while let (k, v) = entry {
                    devices.append((Array(k), Array(v)))
                    entry = try cursor.next()
                }
            }
            for (k, v) in devices where v[0] & 8 != 0 {
                // Flag 8 off, each time in 8 bytes.
                let rejected = v[0] & 2 != 0
                var old: [UInt8] = [v[0] & ~8, v[1]]
                for at in rejected ? [2, 8] : [2] {
                    let time = UInt64(v[at]) << 40 | UInt64(v[at + 1]) << 32 | UInt64(v[at + 2]) << 24
                        | UInt64(v[at + 3]) << 16 | UInt64(v[at + 4]) << 8 | UInt64(v[at + 5])
                    withUnsafeBytes(of: time.bigEndian) { old += $0 }
                }
                old += v[(rejected ? 14 : 8)...]
                try txn.put(store.tables.devices, k, old)
                devicesRewritten += 1
            }
            try txn.put(store.tables.meta, Array("schemaVersion".utf8), [0, 0, 0, 12])
        }
        #expect(devicesRewritten > 20)
        store.close()

        store = try TopicStore(directory: dir.sub("data"))
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == 13)
        #expect(try Self.exportLines(store) == before)
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues)")
        #expect(audit.equivalentEncodings >= devicesRewritten)
        let first = try #require(try store.read { txn in try store.log.record(at: 1, txn) })
        store.close()

        var options = compactionOptions(keepingFrom: first.timestamp - 1)
        options.garbage = Self.noGarbage
        _ = try Compactor.run(directory: dir.sub("data"), options: options)
        store = try TopicStore(directory: dir.sub("data"))
        defer { store.close() }
        let blocks = try store.read { txn in
            try Self.entries(store).map { entry in
                try #require(try txn.get(store.log.database, EventLog.key(entry.key)).map(LogBlock.leavesChecksumsOut))
            }
        }
        #expect(!blocks.isEmpty && blocks.allSatisfy { $0 })
        #expect(try Self.exportLines(store) == before)
        #expect(try Audit.run(store).isClean)
    }

    static func block(_ store: TopicStore, _ key: UInt64) throws -> [UInt8] {
        try store.read { txn in Array(try #require(try txn.get(store.log.database, EventLog.key(key)))) }
    }

    static func overwrite(_ store: TopicStore, _ key: UInt64, _ bytes: [UInt8]) throws {
        try store.environment.write { txn in try txn.put(store.log.database, EventLog.key(key), bytes) }
    }

    @Test func aDamagedBlockIsFoundAndLocatedByItsRange() throws {
        let dir = TemporaryDirectory("log-blocks-damage")
        let (store, keys, _) = try Self.compactedStore(dir, eventsEachSide: 1_500, seed: 7)
        defer { store.close() }
        #expect(keys.count >= 3)
        let (low, high) = (keys[0] + 1, keys[1])
        var bytes = try Self.block(store, high)
        bytes[bytes.count / 2] ^= 0x20
        try Self.overwrite(store, high, bytes)

        let audit = try Audit.run(store)
        #expect(!audit.isClean)
        #expect(audit.logIssues.map(\.sequence) == [low], "\(audit.logIssues)")
        #expect(audit.logIssues.first?.kind == .checksum)
        #expect(audit.logIssues.first?.message.contains("records \(low)…\(high) are in a damaged block") == true, "\(audit.logIssues)")

        // Each reader stops there, naming the block's first record.
        #expect { try Replay.rebuild(from: store, to: .end, into: dir.sub("out")) } throws: { error in
            if case ReplayError.cannotFold(let issue) = error { return issue.sequence == low }
            return false
        }
        var exported = 0
        #expect(throws: (any Error).self) { try Export.lines(from: store) { _ in exported += 1 } }
        #expect(exported == Int(low) - 1)
        #expect { try store.read { txn in try store.log.record(at: low + 1, txn) } } throws: { error in
            (error as? RecordCorruption).map { $0.sequence == low && $0.reason.contains("\(low)…\(high)") } ?? false
        }
        // Records outside it read as before.
        #expect(try store.read { txn in try store.log.record(at: high + 1, txn) } != nil)
    }

    /// A record altered inside a block, its checksum recomputed and the block sealed again (a
    /// forger who knows the format): the chain breaks at that record, and the audit says so.
    @Test func aRecordForgedInsideABlockBreaksTheChainThere() throws {
        let dir = TemporaryDirectory("log-blocks-forged")
        let (store, keys, _) = try Self.compactedStore(dir, seed: 8)
        defer { store.close() }
        let key = keys[1]
        let block = try Self.block(store, key).withUnsafeBytes { try LogBlock.expand($0, key: key) }
        // The first record of the block whose type names a token: its last byte before the trailer changed.
        let target = block.first + 5
        var records: [[UInt8]] = []
        block.forEach { seq, bytes in
            var record = Array(bytes)
            if seq == target {
                let version = record[0]
                let trailer = version == 5 ? 12 : 36
                record[record.count - trailer - 1] ^= 0x01
                record = HashChainTests.recomputedChecksum(record, key: seq)
            }
            records.append(record)
            return true
        }
        let forged = LogBlockTests.withPointers(records) { LogBlock.Packer().block($0, last: key) }
        try Self.overwrite(store, key, forged)
        #expect(try store.read { txn in try store.log.withRecordBytes(at: target, txn) { Array($0) } } == records[Int(target - block.first)])

        let audit = try Audit.run(store)
        #expect(!audit.isClean)
        #expect(audit.logIssues.first?.sequence == target, "\(audit.logIssues)")
        #expect(audit.logIssues.first?.kind == .chain || audit.logIssues.first?.kind == .undecodable, "\(audit.logIssues)")
    }
}
