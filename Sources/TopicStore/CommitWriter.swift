import Foundation
import SubscriptionLog

/// The single writer: a dedicated thread (never the cooperative pool, since an
/// LMDB write transaction belongs to one thread) that takes every queued
/// command, commits them in one transaction (group commit), then acknowledges
/// each caller.
final class CommitWriter: @unchecked Sendable {
    struct Pending {
        let event: Event
        /// Its log record, encoded by the caller; the writer seals it with a sequence, a time and a link.
        let prepared: PreparedRecord
        /// The time the caller asks the record to carry (an exported record
        /// loaded again); nil: the commit's time.
        var time: Int64? = nil
        let done: @Sendable (Result<Receipt, any Error>) -> Void
    }

    private let maxBatch: Int
    private let condition = NSCondition()
    private var queue: [Pending] = []
    private var stopping = false
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)
    /// Batch sizes committed so far (for metrics).
    private(set) var batches = 0
    private(set) var committed = 0
    /// Committed batches by size: bucket i counts batches of at most 2^i commands.
    private var sizeBuckets = [Int](repeating: 0, count: 14)

    /// Committed batches not freed yet. Freeing a batch (its commands' strings, records
    /// and completions) took ~7% of this thread's instructions in a `load`, where this
    /// thread sets the pace: the next caller of `enqueue(_ items:)` frees them on its own
    /// thread, and this thread frees them when it has nothing else to do, or when more
    /// than `retiredLimit` batches wait (callers that enqueue one command at a time).
    private var retired: [[Pending]] = []
    private static let retiredLimit = 2

    private var failedBatches = 0
    private var durationBuckets = [Int](repeating: 0, count: CommitCounters.durationBounds.count + 1)
    private var durationSeconds = 0.0

    /// Batches and commands committed so far, batch counts by size and by duration, and
    /// failed batches (for metrics).
    var counters: CommitCounters {
        condition.lock(); defer { condition.unlock() }
        var c = CommitCounters(batches: batches, commands: committed, batchesBySize: sizeBuckets)
        c.failedBatches = failedBatches
        c.batchesByDuration = durationBuckets
        c.durationSeconds = durationSeconds
        return c
    }

    init(maxBatch: Int) { self.maxBatch = maxBatch }

    /// The store this writer commits to; weak, so that releasing the store stops the writer.
    private weak var store: TopicStore?

    func start(store: TopicStore) {
        self.store = store
        let thread = Thread { [self] in self.run() }
        thread.name = "topicstore-writer"
        thread.stackSize = 8 << 20
        self.thread = thread
        thread.start()
    }

    func enqueue(_ pending: Pending) {
        condition.lock()
        if stopping {
            condition.unlock()
            pending.done(.failure(StoreError.closed))
            return
        }
        queue.append(pending)
        condition.signal()
        condition.unlock()
    }

    /// Enqueues several commands at once, so a caller's batch reaches the writer whole;
    /// frees the batches committed since the last call (see `retired`) on this thread.
    func enqueue(_ items: [Pending]) {
        condition.lock()
        if stopping {
            condition.unlock()
            for p in items { p.done(.failure(StoreError.closed)) }
            return
        }
        queue.append(contentsOf: items)
        let garbage = retired
        retired = []
        condition.signal()
        condition.unlock()
        withExtendedLifetime(garbage) {}  // the last references, released here, outside the lock
    }

    /// Takes no more commands, lets the thread commit what is queued, and waits for
    /// it — at most `timeout` seconds when given. Returns false when the thread was
    /// still committing then (a transaction that does not end: another process holds
    /// LMDB's write lock); it goes on, and answers its callers when it ends.
    @discardableResult
    func stop(timeout: Double? = nil) -> Bool {
        condition.lock()
        let running = stopping ? nil : thread
        stopping = true
        condition.signal()
        condition.unlock()
        guard let running, Thread.current !== running else { return true }
        guard let timeout else { finished.wait(); return true }
        return finished.wait(timeout: .now() + timeout) == .success
    }

    private func run() {
        defer {
            // The thread's closure holds this writer and the writer held the
            // thread: let go of it, or both outlive the store (AddressSanitizer's
            // leak check found one per store opened and closed).
            condition.lock()
            thread = nil
            condition.unlock()
            finished.signal()
        }
        while true {
            condition.lock()
            while queue.isEmpty && !stopping {
                if !retired.isEmpty {
                    // Nothing to commit: free what no caller took.
                    let garbage = retired
                    retired = []
                    condition.unlock()
                    withExtendedLifetime(garbage) {}
                    condition.lock()
                    continue
                }
                condition.wait()
            }
            if queue.isEmpty && stopping {
                let garbage = retired
                retired = []
                condition.unlock()
                withExtendedLifetime(garbage) {}
                return
            }
            // Taking the whole queue moves it: copying commands out and removing them
            // retained and released every string of every command on this thread.
            var batch: [Pending] = []
            if queue.count <= maxBatch {
                swap(&batch, &queue)
            } else {
                batch = Array(queue.prefix(maxBatch))
                queue.removeFirst(maxBatch)
            }
            condition.unlock()

            guard let store = self.store else {
                for p in batch { p.done(.failure(StoreError.closed)) }
                continue
            }
            let started = DispatchTime.now().uptimeNanoseconds
            let result = store.commit(batch)
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
            switch result {
            case .success(let results):
                condition.lock()
                durationBuckets[CommitCounters.durationBounds.firstIndex { seconds <= $0 } ?? CommitCounters.durationBounds.count] += 1
                durationSeconds += seconds
                batches += 1
                committed += results.count(where: { if case .success = $0 { true } else { false } })
                sizeBuckets[min(sizeBuckets.count - 1, Int.bitWidth - (batch.count - 1).leadingZeroBitCount)] += 1
                condition.unlock()
                for i in batch.indices { batch[i].done(results[i]) }
            case .failure(let error):
                condition.lock()
                failedBatches += 1
                condition.unlock()
                for p in batch { p.done(.failure(error)) }
            }
            condition.lock()
            retired.append(batch)
            var garbage: [[Pending]] = []
            if retired.count > Self.retiredLimit { swap(&garbage, &retired) }
            condition.unlock()
            withExtendedLifetime(garbage) {}
        }
    }
}
