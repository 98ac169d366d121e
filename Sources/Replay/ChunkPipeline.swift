import Foundation
import LMDB
import Projections
import TopicStore

/// Reads and checks the log on a second thread while the caller folds: on two
/// cores, decoding (and, for an audit, CRC and SHA-256) overlaps the fold.
/// At most `depth` chunks wait in between, so memory stays bounded.
final class ChunkPipeline: @unchecked Sendable {
    private let condition = NSCondition()
    private var queue: [RecordChunk] = []
    private var finished = false
    private var cancelled = false
    private var failure: (any Error)?
    private var verifierResult: LogVerifier?
    private let depth: Int
    /// Folded chunks handed back to be freed on the reader thread: their
    /// strings were allocated there, and freeing millions of them took the
    /// folding thread's time.
    private var folded: [RecordChunk] = []
    /// Set by `close()`: the fold hands back nothing more.
    private var closed = false

    /// The reader thread's name in the kernel (at most 15 bytes).
    static let threadName = "replay-reader"

    /// Starts reading `from...through` with `verifier` on a new thread.
    /// With `stopAtFault`, reading stops at the first record that cannot be
    /// folded; otherwise it goes on to the end (checking every record).
    init(store: TopicStore, from: UInt64, through: UInt64, recordsPerTransaction: Int, keepRaw: Bool,
         verifier: LogVerifier, stopAtFault: Bool, depth: Int = 3) {
        self.depth = depth
        let reader = LogReader(store: store, recordsPerTransaction: recordsPerTransaction)
        startThread(named: Self.threadName) { [self] in
            var verifier = verifier
            var next = from
            var folding = true
            do {
                while next <= through {
                    if isCancelled { break }
                    var chunk = try reader.read(from: next, through: through, keepRaw: keepRaw && folding, verifier: &verifier)
                    if chunk.lastRead == 0 { break }
                    if !folding { chunk.records = []; chunk.raw = []; chunk.ends = []; chunk.links = []; chunk.hints = []; chunk.hintEnds = [] }
                    let stopped = chunk.stop != nil
                    next = chunk.lastRead + 1
                    put(&chunk)
                    if stopped { folding = false; if stopAtFault { break } }
                }
                finish(verifier: verifier, error: nil)
            } catch {
                finish(verifier: verifier, error: error)
            }
            freeFoldedUntilClosed()
        }
    }

    private var isCancelled: Bool {
        condition.lock(); defer { condition.unlock() }
        return cancelled
    }

    /// Queues `chunk`, leaving it empty: handed over whole, since the fold moves
    /// the records in place, which copies them all if this thread still holds them.
    private func put(_ chunk: inout RecordChunk) {
        condition.lock()
        while queue.count >= depth && !cancelled { condition.wait() }
        queue.append(chunk)
        chunk = RecordChunk()
        let done = folded
        folded = []
        condition.broadcast()
        condition.unlock()
        _ = done  // released here, on the reader thread
    }

    /// Hands folded chunks back to be freed by the reader thread, leaving
    /// `chunks` empty: emptied under the lock, so the caller's reference is
    /// gone before the reader can take them (or the caller's last release
    /// would free them on its thread after all).
    func discard(_ chunks: inout [RecordChunk]) {
        condition.lock()
        folded.append(contentsOf: chunks)
        chunks = []
        condition.broadcast()
        condition.unlock()
    }

    /// Ends the pipeline: the fold discards nothing more, and the reader
    /// thread, done with reading, frees what is left and ends (without
    /// waiting for it).
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// After reading, the reader thread frees the chunks the fold hands back
    /// until `close()` or `cancel()`. The reader reads ahead of the fold by
    /// up to `depth` chunks of 50,000 records, so they are the last few:
    /// freed by the folding thread (their strings too, since the build keeps
    /// its device records as bytes), they took ~200 instructions an event of
    /// a 100k-device rebuild's folding thread (callgrind).
    private func freeFoldedUntilClosed() {
        while true {
            condition.lock()
            while folded.isEmpty && !closed && !cancelled { condition.wait() }
            var done = folded
            folded = []
            let over = closed || cancelled
            condition.unlock()
            done.removeAll()  // here, outside the lock
            if over { return }
        }
    }

    private func finish(verifier: LogVerifier, error: (any Error)?) {
        condition.lock()
        verifierResult = verifier
        failure = error
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    /// The next chunk, or nil when reading is over (then `result()` has the verifier).
    func next() throws -> RecordChunk? {
        condition.lock()
        defer { condition.unlock() }
        while queue.isEmpty && !finished { condition.wait() }
        if !queue.isEmpty {
            let chunk = queue.removeFirst()
            condition.broadcast()
            return chunk
        }
        if let failure { throw failure }
        return nil
    }

    /// Stops the reader early (after an error while folding) and waits for it.
    func cancel() {
        condition.lock()
        cancelled = true
        queue = []
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
    }

    /// The verifier after the last chunk (call after `next()` returned nil).
    func result() -> LogVerifier {
        condition.lock(); defer { condition.unlock() }
        while !finished { condition.wait() }
        return verifierResult!
    }
}
