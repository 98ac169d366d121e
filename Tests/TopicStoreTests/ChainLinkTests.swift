import Compaction
import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// A version 5 record keeps 8 bytes of its chain link; the whole link of any
/// record is computed from the last record before it that keeps its whole link
/// (every 64th), or from the head a compaction kept (`TopicStore.chainLink(at:)`).
@Suite struct ChainLinkTests: RunsTopicstore {
    /// Every record's whole link, computed here from genesis over the stored records.
    static func links(_ store: TopicStore, through last: UInt64) throws -> [ChainHash] {
        var link = ChainHash.genesis
        return try (1...last).map { seq in
            link = try HashChainTests.rawRecord(store, seq).withUnsafeBytes {
                try RecordCodec.verifyLink(of: $0, key: seq, previous: link)
            }
            return link
        }
    }

    /// A store at `path` filled with 100 records, given to `alter` before it is closed; the
    /// records' whole links, computed here.
    static func hundredRecords(at path: String, alter: (TopicStore) throws -> Void = { _ in }) throws -> [ChainHash] {
        let store = try TopicStore(directory: path)
        defer { store.close() }
        try HashChainTests.fill(store, count: 100)
        let links = try Self.links(store, through: 100)
        try alter(store)
        return links
    }

    /// After a compaction the log may start with records that keep 8 bytes of their link and
    /// hold none that keeps all of it: the writer chains on from the head the compaction kept.
    @Test func linksAfterACompactionStartFromItsHead() throws {
        let dir = ReplayTempDir("links-compacted")
        let data = dir.sub("data")
        let expected = try Self.hundredRecords(at: data)
        let report = try Compactor.run(directory: data, options: compactionOptions(keepingFrom: nowMilliseconds() + 60_000))
        #expect(report.horizon == 99)
        let store = try TopicStore(directory: data)
        defer { store.close() }
        // The log starts after the horizon (the compaction appended what it collected after it).
        let range = try #require(try store.read { txn in try store.log.sequenceRange(txn) })
        #expect(range.lowerBound == 100 && range.upperBound < 128, "\(range)")
        #expect(try HashChainTests.rawRecord(store, 100)[0] == 5)
        #expect(try store.read { txn in try store.chainLink(at: 99, txn) } == expected[98], "the compaction's head")
        #expect(try store.read { txn in try store.chainLink(at: 100, txn) } == expected[99])
        // Without the compaction's head the link before the log cannot be known: said, not guessed.
        #expect { try store.read { txn in try store.log.link(at: 100, txn, start: { _ in nil }) } } throws: { error in
            (error as? RecordCorruption)?.sequence == 100
        }
        // New records chain on from it, and the audit (from the snapshot) finds the chain whole.
        try HashChainTests.fill(store, count: 40, seed: 4)
        var link = expected[99]
        for seq in UInt64(101)...(range.upperBound + 40) {
            link = try HashChainTests.rawRecord(store, seq).withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: seq, previous: link) }
            #expect(try store.read { txn in try store.chainLink(at: seq, txn) } == link, "seq \(seq)")
        }
        #expect(try HashChainTests.rawRecord(store, 128)[0] == 4)
        #expect(try store.read { txn in try store.chainHead(txn) } == ChainHead(sequence: range.upperBound + 40, hash: link))
        let audit = try Audit.run(store)
        #expect(audit.isClean && audit.head == ChainHead(sequence: range.upperBound + 40, hash: link), "\(audit.logIssues)")
    }

    /// The next record's link is computed through the records after the last whole link: one
    /// of them damaged stops writes (named), as a damaged last record always did; one damaged
    /// before that whole link does not. (A writer that committed the last record itself
    /// extends the link it committed, checking the last record only, as before.)
    @Test func aDamagedRecordAfterTheLastWholeLinkStopsWritesNamingIt() throws {
        let dir = ReplayTempDir("links-damaged")
        for (damaged, stopsWrites) in [(UInt64(80), true), (50, false)] {
            let path = dir.sub("data-\(damaged)")
            let links = try Self.hundredRecords(at: path) { store in
                var bytes = try HashChainTests.rawRecord(store, damaged)
                bytes[12] ^= 0x20
                try HashChainTests.overwrite(store, damaged, bytes)
            }
            let store = try TopicStore(directory: path)
            defer { store.close() }
            #expect(try store.read { txn in try store.chainLink(at: 64, txn) } == links[63])
            let result = store.submitAndWait([Event(project: "alpha", body: .unregisterAll(deviceID: "dev-1"))])[0]
            if stopsWrites {
                #expect { try store.read { txn in try store.chainLink(at: 100, txn) } } throws: { error in
                    (error as? RecordCorruption)?.sequence == damaged
                }
                #expect { try result.get() } throws: { error in
                    guard case StoreError.corruptHead(_, let sequence, _) = error else { return false }
                    return sequence == damaged
                }
                #expect(try store.read { txn in try store.log.sequenceRange(txn) } == 1...100, "nothing was appended")
            } else {
                _ = try result.get()
                #expect(try store.read { txn in try store.chainLink(at: 100, txn) } == links[99])
                let link = try HashChainTests.rawRecord(store, 101).withUnsafeBytes {
                    try RecordCodec.verifyLink(of: $0, key: 101, previous: links[99])
                }
                #expect(try store.read { txn in try store.chainHead(txn) } == ChainHead(sequence: 101, hash: link))
            }
        }
    }

    /// The writer extends the link it committed last; when another process appended since
    /// (`load` beside a server), it computes the head from the log again.
    @Test func theWriterChainsOnFromTheLogWhenAnotherProcessWroteItsEnd() throws {
        let dir = ReplayTempDir("links-other-writer")
        let path = dir.sub("data")
        let store = try TopicStore(directory: path)
        defer { store.close() }
        try HashChainTests.fill(store, count: 70)
        let lines = #"{"project":"alpha","type":"unregister-all","device_id":"dev-71"}"# + "\n"
            + #"{"project":"alpha","type":"unregister-all","device_id":"dev-72"}"# + "\n"
        let run = try topicstore(["load", "--data", path, "-"], stdin: lines)
        #expect(run.status == 0, "\(run.stderr)")
        try HashChainTests.fill(store, count: 5, seed: 3)
        let last = try #require(try store.read { txn in try store.log.sequenceRange(txn) }?.upperBound)
        #expect(last == 77)
        let links = try Self.links(store, through: last)  // throws at a broken link
        #expect(try store.read { txn in try store.chainHead(txn) } == ChainHead(sequence: last, hash: links[Int(last) - 1]))
        #expect(try Audit.run(store).isClean)
    }
}
