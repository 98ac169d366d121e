import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// `history` follows the hash chain on a thread of its own (`ChainFollower`)
/// while it reads the records it answers from: it must still refuse to answer
/// from a log with a forged record anywhere (another project's, the last one),
/// and report the first fault in the log's order, whichever thread met it.
@Suite struct HistoryChainTests {
    /// A store of 200 records (two projects), in read transactions of 7 records
    /// for the scan and 28 for the follower, so that faults fall inside and at
    /// the ends of both.
    static func store(_ dir: ReplayTempDir, _ name: String) throws -> TopicStore {
        let store = try TopicStore(directory: dir.sub(name))
        try HashChainTests.fill(store, count: 200, seed: 51)
        return store
    }

    /// Record `seq` with one byte of its fields changed and its CRC recomputed:
    /// it still decodes; only the chain tells.
    static func forge(_ store: TopicStore, _ seq: UInt64) throws {
        var bytes = try HashChainTests.rawRecord(store, seq)
        // The last byte before the link: a platform, a flag, a name or a reason's last byte.
        bytes[bytes.count - 37] ^= 0x01
        try HashChainTests.overwrite(store, seq, HashChainTests.recomputedChecksum(bytes, key: seq))
    }

    static func delete(_ store: TopicStore, _ seq: UInt64) throws {
        try store.environment.write { txn in _ = try txn.delete(store.log.database, EventLog.key(seq)) }
    }

    /// The first fault `history` reports, as (sequence, what).
    static func fault(_ store: TopicStore, topic: Bool) -> (UInt64, String)? {
        do {
            if topic { _ = try History.topic("news", project: "alpha", in: store, recordsPerReadTransaction: 7) }
            else { _ = try History.device("dev-3", project: "alpha", in: store, recordsPerReadTransaction: 7) }
            return nil
        } catch let e as RecordCorruption {
            return (e.sequence, "record")
        } catch ReplayError.damagedLog(let issue, _, _) {
            return (issue.sequence, issue.kind.rawValue)
        } catch {
            return (0, "\(error)")
        }
    }

    @Test(arguments: [false, true])
    func aForgedRecordAnywhereStopsTheHistory(topic: Bool) throws {
        let dir = ReplayTempDir("history-chain")
        for seq: UInt64 in [1, 7, 28, 29, 113, 199, 200] {
            let store = try Self.store(dir, "f\(seq)")
            defer { store.close() }
            #expect(Self.fault(store, topic: topic) == nil)
            try Self.forge(store, seq)
            let fault = Self.fault(store, topic: topic)
            #expect(fault?.0 == seq && fault?.1 == "record", "forged \(seq): \(String(describing: fault))")
        }
    }

    @Test(arguments: [false, true])
    func theFirstFaultInTheLogIsTheOneReported(topic: Bool) throws {
        let dir = ReplayTempDir("history-chain-order")
        for (forged, deleted) in [(30 as UInt64, 120 as UInt64), (120, 30), (57, 58), (58, 57), (190, 3), (3, 190)] {
            let store = try Self.store(dir, "f\(forged)-d\(deleted)")
            defer { store.close() }
            try Self.forge(store, forged)
            try Self.delete(store, deleted)
            let fault = Self.fault(store, topic: topic)
            let expected: (UInt64, String) = forged < deleted ? (forged, "record") : (deleted, "gap")
            #expect(fault?.0 == expected.0 && fault?.1 == expected.1, "forged \(forged), deleted \(deleted): \(String(describing: fault))")
        }
    }
}
