import Foundation
import LMDB
@testable import Projections
import SubscriptionLog
import Testing
import TopicStore

/// The facts a reader keeps for the newest snapshot (`SnapshotFacts`): the
/// applied sequence and the projects a query names are those of the reader's
/// own snapshot, whether the memo holds an older, the same or a newer one.
@Suite struct SnapshotFactsTests {
    static func token(_ project: String, _ device: Int) -> Event {
        Event(project: project, body: .token(deviceID: "dev-\(device)", token: "tok-\(project)-\(device)", platform: .ios))
    }

    @Test func everySnapshotReadsItsOwnFacts() throws {
        let dir = TemporaryDirectory()
        var options = TopicStore.Options()
        options.cachesRecipients = true  // as `topicstore serve` opens it
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        #expect(store.reader.snapshotFacts != nil)
        for r in store.submitAndWait((0..<10).map { Self.token("app", $0) }) { _ = try r.get() }
        let reader = store.reader

        try store.read { older in
            // The memo learns the older snapshot: its sequence, its project, no `late` project yet.
            let olderSequence = try reader.appliedSequence(older)
            #expect(olderSequence == 10)
            #expect(try reader.project(named: "app", older) != nil)
            #expect(try reader.project(named: "late", older) == nil)
            #expect(try reader.audience(project: "late", .allDevices, older).devices.isEmpty)

            // A commit meanwhile (another thread writes): a new project, more devices.
            for r in store.submitAndWait((0..<5).map { Self.token("late", $0) } + [Self.token("app", 99)]) { _ = try r.get() }

            try store.read { newer in
                // The newer snapshot is read, not the memo of the older one.
                #expect(try reader.appliedSequence(newer) == 16)
                let late = try #require(try reader.project(named: "late", newer))
                #expect(late.nextOrdinal == 5)
                #expect(try reader.project(named: "app", newer)?.nextOrdinal == 11)
                let audience = try reader.audience(project: "late", .allDevices, newer)
                #expect(audience.asOfSeq == 16)
                #expect(try reader.counts(of: audience, newer).ios == 5)
            }
            // The memo now holds the newer snapshot; the older one still reads its own facts.
            #expect(try reader.appliedSequence(older) == olderSequence)
            #expect(try reader.project(named: "late", older) == nil)
            #expect(try reader.project(named: "app", older)?.nextOrdinal == 10)
            let app = try reader.audience(project: "app", .allDevices, older)
            #expect(app.asOfSeq == olderSequence)
            #expect(try reader.counts(of: app, older).total == 10)
        }
        // A read after everything: the newest facts, asked twice (the second from the memo).
        for _ in 0..<2 {
            try store.read { txn throws in
                #expect(try reader.appliedSequence(txn) == 16)
                #expect(try reader.project(named: "app", txn)?.nextOrdinal == 11)
                #expect(try reader.counts(of: try reader.audience(project: "app", .allDevices, txn), txn).total == 11)
            }
        }
    }

    /// The memo only ever answers a read transaction of the snapshot it was filled
    /// in; a write transaction reads the tables (its own changes are not a snapshot).
    @Test func writeTransactionsAreNotAnswered() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        for r in store.submitAndWait((0..<3).map { Self.token("app", $0) }) { _ = try r.get() }
        let facts = SnapshotFacts()
        let reader = ProjectionReader(tables: store.tables, snapshotFacts: facts)
        let id = try store.read { txn throws -> Int in
            #expect(try reader.appliedSequence(txn) == 3)
            #expect(facts.appliedSequence(txn) == 3, "filled by the read")
            return txn.id
        }
        #expect(throws: CancellationError.self) {
            try store.environment.write { txn throws in
                #expect(txn.id == id + 1)
                #expect(facts.appliedSequence(txn) == nil)
                facts.setAppliedSequence(99, txn)  // ignored
                #expect(try reader.appliedSequence(txn) == 3)
                throw CancellationError()  // nothing is committed
            } as Void
        }
        let after = try store.read { txn in try reader.appliedSequence(txn) }
        #expect(after == 3)
    }
}
