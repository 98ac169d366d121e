import Foundation
import LMDB
import Projections
import Replay
import SubscriptionLog

/// An archive's lines read, decompressed and parsed into records on a thread
/// of its own, in order, while the verification re-encodes the records before
/// them and compares them with the log: on two cores the two halves of the
/// check overlap.
///
/// It parses `count` lines at most, then looks for one more (an archive that
/// holds more records than it should). A line that does not parse ends the
/// records: the error is thrown where that line's record would have come, so
/// a mismatch on an earlier line is still the one reported first.
package final class ParsedArchiveLines: @unchecked Sendable {
    private let condition = NSCondition()
    private var chunks: [[LogRecord]] = []
    private var ended = false
    private var cancelled = false
    private var failure: (any Error)?
    /// The line after the `count` expected, if the archive has one.
    private var extra: String?
    private var current: [LogRecord] = []
    private var index = 0

    /// Chunks parsed ahead of the caller, at most.
    static let depth = 2

    /// The thread's name in the kernel (at most 15 bytes).
    static let threadName = "archive-parse"

    /// Read by the thread alone.
    private let lines: ArchiveLines

    /// `chunkSize`: lines parsed before they are handed over.
    package init(path: String, count: UInt64, chunkSize: Int = 50_000) throws {
        lines = try ArchiveLines(path: path)
        startThread(named: Self.threadName) { [self] in
            var lineNumber = 0
            var batch: [LogRecord] = []
            batch.reserveCapacity(chunkSize)
            do {
                while UInt64(lineNumber) < count, !isCancelled, let line = try self.lines.next() {
                    lineNumber += 1
                    do { batch.append(try Importer.record(fromLine: line, lineNumber: lineNumber)) } catch {
                        throw Archive.Failure.verification(path, "\(error)")
                    }
                    if batch.count == chunkSize {
                        put(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                put(batch)
                let extra = UInt64(lineNumber) == count ? try self.lines.next() : nil
                finish(extra: extra, failure: nil)
            } catch {
                put(batch)
                finish(extra: nil, failure: error)
            }
        }
    }

    private var isCancelled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return cancelled
    }

    /// Stops the reading (the caller gave up): the thread ends at its next chunk.
    package func cancel() {
        condition.changing { cancelled = true }
    }

    private func put(_ batch: [LogRecord]) {
        guard !batch.isEmpty else { return }
        condition.waiting(while: { chunks.count >= Self.depth && !cancelled }) {
            chunks.append(batch)
            condition.broadcast()
        }
    }

    private func finish(extra: String?, failure: (any Error)?) {
        condition.changing {
            self.extra = extra
            self.failure = failure
            ended = true
        }
    }

    /// The next line's record; nil when the archive has no more lines (within
    /// the `count` expected). Throws what stopped the reading, at the line it stopped.
    package func next() throws -> LogRecord? {
        if index == current.count {
            let taken = try condition.waiting(while: { chunks.isEmpty && !ended }) { () throws -> Bool in
                // A failure comes only after every chunk parsed before it.
                guard !chunks.isEmpty else {
                    if let failure { throw failure }
                    return false
                }
                current = chunks.removeFirst()
                index = 0
                condition.broadcast()
                return true
            }
            guard taken else { return nil }
        }
        defer { index += 1 }
        return current[index]
    }

    /// After the `count` records: the line that follows them, if any.
    package func lineAfterTheLast() throws -> String? {
        try condition.waiting(while: { !ended }) {
            if let failure { throw failure }
            return extra
        }
    }
}
