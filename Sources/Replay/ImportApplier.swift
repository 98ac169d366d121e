import Foundation
import LMDB
import Projections

/// Folds an import's chunks into its store on a thread of its own, while the
/// importing thread parses, validates and chains the next lines: on two cores
/// the two halves of an import overlap (the folding half was a third of it,
/// the rest one thread's, perf).
///
/// At most one chunk waits while another is folded, so memory stays bounded.
/// The builder is used by this thread alone until `finish` has returned; a
/// failure to fold is thrown at the next hand-off, or by `finish`.
final class ImportApplier: @unchecked Sendable {
    private let condition = NSCondition()
    private var waiting: RecordChunk?
    private var closed = false
    private var done = false
    private var failure: (any Error)?

    /// The thread's name in the kernel (at most 15 bytes).
    static let threadName = "import-fold"

    /// Touched by the folding thread only, until `finish` returns.
    private let builder: ProjectionBuilder

    init(_ builder: ProjectionBuilder) {
        self.builder = builder
        startThread(named: Self.threadName) { [self] in
            while let chunk = next() {
                do { try self.builder.apply(chunk) } catch {
                    fail(error)
                    break
                }
            }
            condition.changing { done = true }
        }
    }

    /// The next chunk to fold; nil once closed and drained.
    private func next() -> RecordChunk? {
        condition.waiting(while: { waiting == nil && !closed }) {
            let chunk = waiting
            waiting = nil
            condition.broadcast()
            return chunk
        }
    }

    private func fail(_ error: any Error) {
        condition.changing { failure = error }
    }

    /// Hands `chunk` over, once the one waiting before it is taken; throws a
    /// failure to fold an earlier chunk (nothing more is folded then).
    func hand(_ chunk: RecordChunk) throws {
        try condition.waiting(while: { waiting != nil && failure == nil }) {
            if let failure { throw failure }
            waiting = chunk
            condition.broadcast()
        }
    }

    /// Lets the thread end once it has folded what it holds, without waiting
    /// for it (an importer dropped without `finish`, after an error).
    func close() {
        condition.changing { closed = true }
    }

    /// Waits until every chunk handed over is folded and the thread has ended;
    /// throws a failure to fold one.
    func finish() throws {
        close()
        try condition.waiting(while: { !done }) {
            if let failure { throw failure }
        }
    }
}
