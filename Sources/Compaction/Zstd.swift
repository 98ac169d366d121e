internal import CZstd
import Foundation

/// A zstd error, with libzstd's own description.
public struct ZstdError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ what: String) { description = what }
    init(code: Int, _ what: String) {
        description = "\(what): \(String(cString: ZSTD_getErrorName(code)))"
    }
}

/// zstd frames start with these four bytes (0xFD2FB528, little-endian).
public enum ZstdFormat {
    public static let magic: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]

    public static func hasMagic(_ bytes: some Collection<UInt8>) -> Bool {
        bytes.count >= 4 && bytes.prefix(4).elementsEqual(magic)
    }
}

/// Streaming compression into a file descriptor (libzstd's `ZSTD_compressStream2`).
/// Bytes are buffered and compressed in large steps; `finish()` ends the frame.
public final class ZstdCompressor {
    private let context: OpaquePointer
    private let fd: Int32
    private var input: [UInt8] = []
    private var output: [UInt8]
    private let inputStep: Int
    public private(set) var bytesIn: Int = 0
    public private(set) var bytesOut: Int = 0

    /// Compresses into `fd` (not closed here) at `level` (1…19; 3 is zstd's default).
    /// With `workers` > 0, libzstd compresses on that many threads of its own.
    public init(fd: Int32, level: Int32 = 3, workers: Int32 = 0) throws {
        guard let cctx = ZSTD_createCCtx() else { throw ZstdError("cannot create a compression context") }
        context = cctx
        self.fd = fd
        var rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)
        if ZSTD_isError(rc) != 0 { ZSTD_freeCCtx(cctx); throw ZstdError(code: rc, "compression level \(level)") }
        if workers > 0 {
            // A libzstd built without threads refuses this; then compress on this thread.
            rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, workers)
        }
        inputStep = max(Int(ZSTD_CStreamInSize()), 1 << 20)
        output = [UInt8](repeating: 0, count: max(Int(ZSTD_CStreamOutSize()), 1 << 17))
        input.reserveCapacity(inputStep)
    }

    deinit { ZSTD_freeCCtx(context) }

    public func write(_ bytes: some Sequence<UInt8>) throws {
        input.append(contentsOf: bytes)
        if input.count >= inputStep { try compress(end: false) }
    }

    public func write(_ text: String) throws {
        input.append(contentsOf: text.utf8)
        if input.count >= inputStep { try compress(end: false) }
    }

    /// Compresses what is buffered, ends the frame and writes everything out.
    public func finish() throws { try compress(end: true) }

    private func compress(end: Bool) throws {
        bytesIn += input.count
        try input.withUnsafeBytes { src in
            var inBuf = ZSTD_inBuffer(src: src.baseAddress, size: src.count, pos: 0)
            while true {
                let (remaining, produced): (Int, Int) = try output.withUnsafeMutableBytes { dst in
                    var outBuf = ZSTD_outBuffer(dst: dst.baseAddress, size: dst.count, pos: 0)
                    let r = ZSTD_compressStream2(context, &outBuf, &inBuf, end ? ZSTD_e_end : ZSTD_e_continue)
                    if ZSTD_isError(r) != 0 { throw ZstdError(code: r, "compression failed") }
                    return (r, outBuf.pos)
                }
                try writeAll(produced)
                if end ? remaining == 0 : inBuf.pos == inBuf.size { break }
            }
        }
        input.removeAll(keepingCapacity: true)
    }

    private func writeAll(_ count: Int) throws {
        var offset = 0
        while offset < count {
            let n = output.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + offset, count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ZstdError("write failed: \(String(cString: strerror(errno)))")
            }
            offset += n
        }
        bytesOut += count
    }
}

/// Streaming decompression (libzstd's `ZSTD_decompressStream`) of compressed
/// bytes handed in as they are read; concatenated frames decode as one stream.
public final class ZstdDecompressor {
    private let context: OpaquePointer
    private var output: [UInt8]
    /// Whether the last frame fed in was complete (false in the middle of a frame).
    public private(set) var atFrameEnd = true

    public init() throws {
        guard let dctx = ZSTD_createDCtx() else { throw ZstdError("cannot create a decompression context") }
        context = dctx
        output = [UInt8](repeating: 0, count: max(Int(ZSTD_DStreamOutSize()), 1 << 17))
    }

    deinit { ZSTD_freeDCtx(context) }

    /// Decompresses `compressed` and appends what it yields to `into`.
    public func decompress(_ compressed: UnsafeRawBufferPointer, into: inout [UInt8]) throws {
        guard compressed.count > 0 else { return }
        var inBuf = ZSTD_inBuffer(src: compressed.baseAddress, size: compressed.count, pos: 0)
        while true {
            let (hint, produced): (Int, Int) = try output.withUnsafeMutableBytes { dst in
                var outBuf = ZSTD_outBuffer(dst: dst.baseAddress, size: dst.count, pos: 0)
                let r = ZSTD_decompressStream(context, &outBuf, &inBuf)
                if ZSTD_isError(r) != 0 { throw ZstdError(code: r, "the zstd stream is damaged") }
                return (r, outBuf.pos)
            }
            into.append(contentsOf: output[0..<produced])
            atFrameEnd = hint == 0
            // Done with this input once it is consumed and the output buffer was not filled.
            if inBuf.pos == inBuf.size && produced < output.count { break }
        }
    }

    /// Decompresses a whole buffer (for tests and small files).
    public static func decompress(_ bytes: [UInt8]) throws -> [UInt8] {
        let d = try ZstdDecompressor()
        var out: [UInt8] = []
        try bytes.withUnsafeBytes { try d.decompress($0, into: &out) }
        guard d.atFrameEnd else { throw ZstdError("the zstd stream ends in the middle of a frame") }
        return out
    }
}

/// Reads a file (or standard input) and hands back its bytes, decompressed when
/// they are zstd (recognised by the frame magic, whatever the file is called).
public final class MaybeCompressedInput {
    private let fd: Int32
    private let ownsFD: Bool
    private var decompressor: ZstdDecompressor?
    private var sniffed = false
    private var chunk = [UInt8](repeating: 0, count: 1 << 20)
    public private(set) var isCompressed = false
    /// Bytes read from the file so far (compressed bytes for compressed input).
    public private(set) var bytesRead = 0
    /// The file's size when it is a regular file (not standard input or a pipe).
    public var fileSize: Int? {
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int(st.st_size)
    }

    /// Opens `path`, or standard input for "-".
    public init(path: String) throws {
        if path == "-" {
            fd = 0; ownsFD = false
        } else {
            fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw ZstdError("cannot open \(path): \(String(cString: strerror(errno)))") }
            ownsFD = true
        }
    }

    deinit { if ownsFD { close(fd) } }

    /// Appends the next bytes to `buffer`; returns false at the end of the input.
    public func read(into buffer: inout [UInt8]) throws -> Bool {
        while true {
            var n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ZstdError("read failed: \(String(cString: strerror(errno)))")
            }
            if sniffed, n > 0 { bytesRead += n }
            if !sniffed {
                // Make sure at least the four magic bytes are seen before deciding.
                while n > 0 && n < 4 {
                    let m = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress! + n, $0.count - n) }
                    if m < 0 && errno == EINTR { continue }
                    if m <= 0 { break }
                    n += m
                }
                sniffed = true
                if n > 0 { bytesRead += n }
                if n >= 4 && ZstdFormat.hasMagic(chunk[0..<4]) {
                    decompressor = try ZstdDecompressor()
                    isCompressed = true
                }
            }
            if n == 0 {
                if let decompressor, !decompressor.atFrameEnd {
                    throw ZstdError("the zstd stream ends in the middle of a frame (truncated file?)")
                }
                return false
            }
            if let decompressor {
                let before = buffer.count
                try chunk.withUnsafeBytes { try decompressor.decompress(UnsafeRawBufferPointer(rebasing: $0[0..<n]), into: &buffer) }
                if buffer.count == before { continue }  // a frame header alone yields nothing yet
            } else {
                buffer.append(contentsOf: chunk[0..<n])
            }
            return true
        }
    }
}
