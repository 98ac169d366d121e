import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// Follows the hash chain (`ChainCheck`) over `from...through` on a thread of
/// its own, in bounded read transactions, while the caller reads the same
/// records for what it answers: on two cores, the checksums and SHA-256 of
/// every record overlap the caller's reading. The caller answers from a
/// record only after `waitUntilVerified(through:)` has passed it.
///
/// The follower stops quietly at a record missing or out of place (the
/// caller's own walk meets it and says what it is) and at its first broken
/// link or checksum, which it keeps for the caller.
final class ChainFollower: @unchecked Sendable {
    private let condition = NSCondition()
    /// Every record up to this one is verified.
    private var verifiedThrough: UInt64
    /// The fault at `verifiedThrough + 1`, if the follower stopped at one.
    private var fault: (any Error)?
    private var ended = false
    private var cancelled = false
    /// The record missing or out of place the follower stopped at, if any.
    private var metDamage: LogIssue?

    /// The thread's name in the kernel (at most 15 bytes).
    static let threadName = "chain-follower"

    /// Starts following from `from` (whose previous link is `link`: see `ChainCheck`).
    init(store: TopicStore, from: UInt64, through: UInt64, after link: ChainHash?, recordsPerTransaction: Int) {
        verifiedThrough = from &- 1
        startThread(named: Self.threadName) { [self] in
            var chain = ChainCheck(after: link)
            var next = from
            do {
                while next <= through, !isCancelled {
                    var visited = 0
                    var damage: LogIssue?
                    defer { publish(through: next &- 1, damage: damage) }
                    try store.read { txn in
                        try store.log.walk(from: next, through: through, txn) { entry in
                            guard entry.kind == .inOrder else { damage = LogIssue(entry); return false }
                            try chain.check(entry.bytes, key: entry.sequence)
                            next = entry.sequence + 1
                            visited += 1
                            return visited < recordsPerTransaction
                        }
                    }
                    if damage != nil || visited == 0 { break }
                }
                finish(nil)
            } catch {
                finish(error)
            }
        }
    }

    private var isCancelled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    private func publish(through sequence: UInt64, damage: LogIssue?) {
        condition.changing {
            verifiedThrough = max(verifiedThrough, sequence)
            if let damage { metDamage = damage }
        }
    }

    private func finish(_ error: (any Error)?) {
        condition.changing {
            fault = error
            ended = true
        }
    }

    /// Waits until every record through `sequence` is verified (nil). Throws
    /// the follower's fault when it is at or before `sequence`. When the
    /// follower stopped before `sequence` without a fault, returns the record
    /// missing or out of place it stopped at.
    func waitUntilVerified(through sequence: UInt64) throws -> LogIssue? {
        try condition.waiting(while: { verifiedThrough < sequence && !ended }) {
            if verifiedThrough >= sequence { return nil }
            if let fault { throw fault }
            return metDamage ?? LogIssue(sequence: verifiedThrough &+ 1, kind: .gap, message: "the chain was not followed past record \(verifiedThrough)")
        }
    }

    /// Stops the follower at its next read transaction (the caller gave up).
    func cancel() {
        condition.lock()
        cancelled = true
        condition.unlock()
    }
}
