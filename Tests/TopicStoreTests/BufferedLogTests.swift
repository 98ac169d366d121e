import Foundation
@testable import MPushAPI
import Testing

/// The access log's background writer: nothing lost, each thread's lines in order.
@Suite struct BufferedLogTests {
    /// A new, empty file in `dir`, open for writing.
    static func logFile(in dir: TemporaryDirectory) throws -> (path: String, fd: Int32) {
        let path = dir.sub("access.log")
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        return (path, fd)
    }

    @Test func everyLineIsWrittenInOrderByClose() throws {
        let dir = TemporaryDirectory("buffered-log")
        let (path, fd) = try Self.logFile(in: dir)
        defer { close(fd) }
        let log = BufferedLog(fd: fd, interval: 0.02)
        let threads = 4, perThread = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            for i in 0..<perThread { log.append("thread \(t) line \(i)") }
        }
        log.close()
        log.append("after close")  // written at once
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == threads * perThread + 1)
        #expect(lines.last == "after close")
        for t in 0..<threads {
            let mine = lines.filter { $0.hasPrefix("thread \(t) ") }.map { Int($0.split(separator: " ").last!)! }
            #expect(mine == Array(0..<perThread), "thread \(t)'s lines in order")
        }
    }

    @Test func linesArriveWithinTheIntervalWithoutClose() throws {
        let dir = TemporaryDirectory("buffered-log-interval")
        let (path, fd) = try Self.logFile(in: dir)
        defer { close(fd) }
        let log = BufferedLog(fd: fd, interval: 0.05)
        defer { log.close() }
        log.append("one line")
        let deadline = Date().addingTimeInterval(5)
        var text = ""
        while Date() < deadline {
            text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if !text.isEmpty { break }
            usleep(10_000)
        }
        #expect(text == "one line\n")
    }
}
