import Foundation

/// Reads lines from a file descriptor in large chunks; lines are returned
/// without their terminator (LF or CRLF).
final class LineReader {
    private let fd: Int32
    private let ownsFD: Bool
    private var buffer: [UInt8] = []
    private var start = 0
    private var eof = false

    init(path: String) throws {
        if path == "-" {
            fd = 0
            ownsFD = false
        } else {
            fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw UsageError(description: "cannot open \(path): \(String(cString: strerror(errno)))") }
            ownsFD = true
        }
    }

    deinit { if ownsFD { close(fd) } }

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
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { if n < 0 && errno == EINTR { continue }; eof = true } else { buffer.append(contentsOf: chunk[0..<n]) }
        }
    }
}
