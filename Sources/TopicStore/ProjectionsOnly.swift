import LMDB
import Projections
import SubscriptionLog

extension TopicStore {
    /// The sequence this store's projections are as of when it holds them without a
    /// log — what `replay --projections-only` writes — and nil for every other store.
    /// Such a store has no log record and projections past any compaction horizon (a
    /// compacted store whose log is empty has its projections at its horizon).
    public func projectionsOnlySequence() throws -> UInt64? {
        try read { txn in try Self.projectionsOnlySequence(tables, log, txn) }
    }

    /// Throws `StoreError.projectionsOnly` for a projections-only store: for the
    /// commands that need its log (audit, history, export, replay) or write to it.
    public func requireLog() throws {
        if let sequence = try projectionsOnlySequence() { throw StoreError.projectionsOnly(path: directory, sequence: sequence) }
    }

    static func projectionsOnlySequence(_ tables: ProjectionTables, _ log: EventLog, _ txn: borrowing Transaction) throws -> UInt64? {
        guard try log.sequenceRange(txn) == nil else { return nil }
        let applied = try tables.appliedSequence(txn)
        return applied > (try tables.compactedChainHead(txn)?.sequence ?? 0) ? applied : nil
    }
}
