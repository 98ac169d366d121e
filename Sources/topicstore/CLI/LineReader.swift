import Compaction
import Foundation

/// Reads lines from a file or standard input in large chunks; lines are
/// returned without their terminator (LF or CRLF). zstd-compressed input
/// (an archive written by `topicstore compact --archive`, or any `.jsonl.zst`)
/// is recognised by its frame magic and decompressed as it streams.
final class LineReader {
    private let input: MaybeCompressedInput
    private var buffer: [UInt8] = []
    private var start = 0
    private var eof = false
    /// Set when reading failed (a damaged or truncated zstd stream); the lines before it were returned.
    private(set) var failure: (any Error)?
    /// Asked while standard input has nothing to read: true ends the input
    /// there (`load` on SIGTERM; a blocked read() would never see the flag).
    var shouldStop: (() -> Bool)?
    private let isStandardInput: Bool

    init(path: String) throws {
        isStandardInput = path == "-"
        do {
            input = try MaybeCompressedInput(path: path)
        } catch {
            throw UsageError(description: "\(error)")
        }
    }

    /// Whether the input is zstd-compressed (known once the first line was read).
    var isCompressed: Bool { input.isCompressed }

    /// Bytes of the file read so far, and its size: nil for standard input or a pipe.
    var position: (read: UInt64, size: UInt64)? {
        guard !isStandardInput, let size = fileSize else { return nil }
        return (UInt64(min(input.bytesRead, size)), UInt64(size))
    }
    private lazy var fileSize: Int? = input.fileSize

    func next() -> [UInt8]? {
        while true {
            if let nl = buffer[start...].firstIndex(of: 0x0A) {
                var end = nl
                if end > start, buffer[end - 1] == 0x0D { end -= 1 }
                let line = Array(buffer[start..<end])
                start = nl + 1
                return line
            }
            if eof {
                guard start < buffer.count else { return nil }
                let line = Array(buffer[start...])
                start = buffer.count
                return line
            }
            if start > 0 { buffer.removeFirst(start); start = 0 }
            if isStandardInput, let shouldStop, !waitForInput(shouldStop) { return nil }
            do {
                if try !input.read(into: &buffer) { eof = true }
            } catch {
                failure = error
                eof = true
                start = buffer.count  // a line cut by the damage is not a line
                return nil
            }
        }
    }

    /// Waits until standard input can be read (or is at its end), asking
    /// `shouldStop` ten times a second; false when it said stop. A regular
    /// file is always readable, so this costs a file nothing.
    private func waitForInput(_ shouldStop: () -> Bool) -> Bool {
        var descriptor = pollfd(fd: 0, events: Int16(POLLIN), revents: 0)
        while true {
            if shouldStop() { return false }
            let ready = poll(&descriptor, 1, 100)
            if ready > 0 || (ready < 0 && errno != EINTR) { return true }
        }
    }
}
