import Foundation
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
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }

    private func put(_ batch: [LogRecord]) {
        guard !batch.isEmpty else { return }
        condition.lock()
        while chunks.count >= Self.depth, !cancelled { condition.wait() }
        chunks.append(batch)
        condition.broadcast()
        condition.unlock()
    }

    private func finish(extra: String?, failure: (any Error)?) {
        condition.lock()
        self.extra = extra
        self.failure = failure
        ended = true
        condition.broadcast()
        condition.unlock()
    }

    /// The next line's record; nil when the archive has no more lines (within
    /// the `count` expected). Throws what stopped the reading, at the line it stopped.
    package func next() throws -> LogRecord? {
        if index == current.count {
            condition.lock()
            defer { condition.unlock() }
            while chunks.isEmpty, !ended { condition.wait() }
            if chunks.isEmpty {
                if let failure { throw failure }
                return nil
            }
            current = chunks.removeFirst()
            index = 0
            condition.broadcast()
        }
        defer { index += 1 }
        return current[index]
    }

    /// After the `count` records: the line that follows them, if any.
    package func lineAfterTheLast() throws -> String? {
        condition.lock()
        defer { condition.unlock() }
        while !ended { condition.wait() }
        if let failure { throw failure }
        return extra
    }
}
