import LMDB
import Synchronization

/// What nearly every query reads before its answer — the sequence the
/// projections reflect and the record of the project it names — kept for the
/// newest snapshot a reader has seen. A snapshot is one committed state of one
/// file, named by its LMDB transaction id: every read transaction with that id
/// reads the same bytes, so facts read in one hold for all of them. One memo
/// belongs to one file (a store generation); a newer id starts it afresh.
///
/// At 1M devices these reads (the sequence, the project, the next project id
/// that checks the project's, and the generation's retired mark, which
/// `Generation` keeps the same way) were four B-tree lookups of a ~570 ns count
/// of a per-user topic in the serving process; it takes ~410 ns with them kept.
public final class SnapshotFacts: Sendable {
    private struct Facts {
        var transactionID = -1
        var appliedSequence: UInt64?
        /// Projects found in the snapshot, by name (a name the snapshot lacks is not kept).
        var projects: [String: ProjectRecord] = [:]
    }

    private let facts = Mutex(Facts())

    public init() {}

    /// The applied sequence of `txn`'s snapshot, if this memo holds that snapshot.
    func appliedSequence(_ txn: borrowing Transaction) -> UInt64? {
        guard txn.isReadOnly else { return nil }
        let id = txn.id
        return facts.withLock { $0.transactionID == id ? $0.appliedSequence : nil }
    }

    func setAppliedSequence(_ sequence: UInt64, _ txn: borrowing Transaction) {
        guard txn.isReadOnly else { return }
        let id = txn.id
        facts.withLock { f in
            guard Self.holds(&f, id) else { return }
            f.appliedSequence = sequence
        }
    }

    /// The record of project `name` in `txn`'s snapshot, if this memo holds it.
    func project(_ name: String, _ txn: borrowing Transaction) -> ProjectRecord? {
        guard txn.isReadOnly else { return nil }
        let id = txn.id
        return facts.withLock { $0.transactionID == id ? $0.projects[name] : nil }
    }

    func setProject(_ name: String, _ record: ProjectRecord, _ txn: borrowing Transaction) {
        guard txn.isReadOnly else { return }
        let id = txn.id
        facts.withLock { f in
            guard Self.holds(&f, id) else { return }
            f.projects[name] = record
        }
    }

    /// Whether `f` is (now) the memo of snapshot `id`: a newer snapshot replaces
    /// an older one; an older one is not kept.
    private static func holds(_ f: inout Facts, _ id: Int) -> Bool {
        if id > f.transactionID { f = Facts(transactionID: id) }
        return id == f.transactionID
    }
}
