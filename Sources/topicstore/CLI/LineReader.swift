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

    init(path: String) throws {
        do {
            input = try MaybeCompressedInput(path: path)
        } catch {
            throw UsageError(description: "\(error)")
        }
    }

    /// Whether the input is zstd-compressed (known once the first line was read).
    var isCompressed: Bool { input.isCompressed }

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
}
