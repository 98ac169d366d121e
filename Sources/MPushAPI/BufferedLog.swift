import Foundation

/// Access-log lines gathered in memory and written to a file descriptor by a
/// background thread, in one `write` per interval (or per 64 KiB), instead of
/// one `write` per request on the server's threads: with the log on, that
/// write was a fifth of the durable-register throughput (`bench-http`:
/// 20k/s against 25k/s with `--quiet`).
///
/// A line reaches the file at most `interval` seconds after its request ended;
/// `close()` writes what is pending and stops the thread. A process killed with
/// SIGKILL loses at most that interval of log lines — never a command: the
/// store's durability does not depend on the log.
final class BufferedLog: @unchecked Sendable {
    private let fd: Int32
    private let interval: Double
    private let threshold = 64 << 10
    private let condition = NSCondition()
    private var pending: [UInt8] = []
    private var closed = false
    /// Held while bytes are written, so flushes from two threads keep the lines in order.
    private let writing = NSLock()
    private let finished = DispatchSemaphore(value: 0)

    init(fd: Int32 = 2, interval: Double = 0.1) {
        self.fd = fd
        self.interval = interval
        pending.reserveCapacity(threshold)
        let thread = Thread { [self] in run() }
        thread.name = "topicstore-access-log"
        thread.start()
    }

    /// Queues `line` (a newline is added).
    func append(_ line: String) {
        condition.lock()
        pending.append(contentsOf: line.utf8)
        pending.append(0x0A)
        let full = pending.count >= threshold
        let late = closed
        condition.unlock()
        if late { flush() } else if full { condition.signal() }
    }

    /// Writes everything queued so far.
    func flush() {
        writing.lock()
        defer { writing.unlock() }
        condition.lock()
        let bytes = pending
        pending.removeAll(keepingCapacity: true)
        condition.unlock()
        AccessLog.writeAll(bytes, to: fd)
    }

    /// Writes what is pending and stops the thread; later lines are written at once.
    func close() {
        condition.lock()
        let wasOpen = !closed
        closed = true
        condition.unlock()
        condition.signal()
        if wasOpen { finished.wait() }
    }

    private func run() {
        defer { finished.signal() }
        while true {
            condition.lock()
            let deadline = Date().addingTimeInterval(interval)
            while pending.count < threshold && !closed {
                if !condition.wait(until: deadline) { break }
            }
            let stop = closed
            condition.unlock()
            flush()
            if stop { return }
        }
    }
}
