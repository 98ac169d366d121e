import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// `history` and `export` follow the hash chain on a thread of their own
/// (`ChainFollower`) while they read the records they answer from: history
/// must still refuse to answer from a log with a forged record anywhere
/// (another project's, the last one), export must hand over exactly the lines
/// before it, and both must report the first fault in the log's order,
/// whichever thread met it.
@Suite struct ChainFollowerTests {
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

    // MARK: export

    /// The lines `export` hands over (in read transactions of 7 records) and how it stops: nil
    /// when it exports everything, else the sequence of the fault and "record" or the issue's kind.
    static func export(_ store: TopicStore, from: UInt64 = 1, through: UInt64 = .max) -> (lines: [String], fault: (UInt64, String)?) {
        var lines: [String] = []
        do {
            try Export.lines(from: store, from: from, through: through, recordsPerReadTransaction: 7) { lines.append($0) }
            return (lines, nil)
        } catch ReplayError.damagedRecord(let e, _, _) {
            return (lines, (e.sequence, "record"))
        } catch ReplayError.damagedLog(let issue, _, _) {
            return (lines, (issue.sequence, issue.kind.rawValue))
        } catch {
            return (lines, (0, "\(error)"))
        }
    }

    @Test func exportHandsOverExactlyTheLinesBeforeAForgedRecord() throws {
        let dir = ReplayTempDir("export-chain")
        for seq: UInt64 in [1, 7, 8, 28, 29, 113, 199, 200] {
            let store = try Self.store(dir, "f\(seq)")
            defer { store.close() }
            let whole = Self.export(store)
            #expect(whole.fault == nil && whole.lines.count == 200)
            try Self.forge(store, seq)
            let run = Self.export(store)
            #expect(run.fault?.0 == seq && run.fault?.1 == "record", "forged \(seq): \(String(describing: run.fault))")
            #expect(run.lines == Array(whole.lines.prefix(Int(seq) - 1)), "forged \(seq): \(run.lines.count) lines")
            // A range after it is exported in full (the chain is taken up at the link before the range);
            // a range around it stops at it.
            if seq < 150 {
                let after = Self.export(store, from: 150, through: 180)
                // (Its last line carries the link there, as an export's last line does.)
                #expect(after.fault == nil && after.lines.count == 31 && Array(after.lines.dropLast()) == Array(whole.lines[149..<179])
                        && after.lines.last?.hasPrefix(String(whole.lines[179].dropLast()) + ",\"link\":") == true, "forged \(seq)")
            }
            if seq > 20 {
                let around = Self.export(store, from: 20, through: 200)
                #expect(around.fault?.0 == seq && around.lines == Array(whole.lines[19..<(Int(seq) - 1)]), "forged \(seq)")
            }
        }
    }

    @Test func exportReportsTheFirstFaultAfterTheLinesBeforeIt() throws {
        let dir = ReplayTempDir("export-chain-order")
        for (forged, deleted) in [(30 as UInt64, 120 as UInt64), (120, 30), (57, 58), (58, 57), (190, 3), (3, 190)] {
            let store = try Self.store(dir, "f\(forged)-d\(deleted)")
            defer { store.close() }
            let whole = Self.export(store)
            try Self.forge(store, forged)
            try Self.delete(store, deleted)
            let run = Self.export(store)
            let expected: (UInt64, String) = forged < deleted ? (forged, "record") : (deleted, "gap")
            #expect(run.fault?.0 == expected.0 && run.fault?.1 == expected.1, "forged \(forged), deleted \(deleted): \(String(describing: run.fault))")
            #expect(run.lines == Array(whole.lines.prefix(Int(min(forged, deleted)) - 1)), "forged \(forged), deleted \(deleted)")
        }
    }
}
