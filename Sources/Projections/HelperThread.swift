import Foundation
import LMDB

/// One piece of work on a thread of its own (not the Swift cooperative pool:
/// it may hold an LMDB read transaction), whose result the starter waits for.
final class HelperThread<Value>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    /// Written by the thread before it signals `done`, read after `join` waited.
    private var result: Result<Value, any Error>?

    /// Starts `work` at once.
    init(name: String, _ work: @escaping @Sendable () throws -> Value) {
        startThread(named: name) { [self] in
            result = Result { try work() }
            done.signal()
        }
    }

    /// Waits for the work to finish; returns what it returned or throws what it threw.
    /// Call it once.
    func join() throws -> Value {
        done.wait()
        return try result!.get()
    }
}

/// The two moves of a hand-off between a helper thread and the one that
/// takes its work (`EncodedDevices`, `InvertedChunks`, and in Replay and
/// Compaction the chain follower, the import's folding thread and the
/// archive's parser).
extension NSCondition {
    /// Runs `body` holding the lock, then wakes every waiter: `body` changed
    /// what they wait on.
    package func changing<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { broadcast(); unlock() }
        return try body()
    }

    /// Waits while `waits()` is true, then runs `body`, holding the lock for both.
    package func waiting<R>(while waits: () -> Bool, then body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        while waits() { wait() }
        return try body()
    }
}
