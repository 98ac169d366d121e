import Digest

/// One link of the log's hash chain: SHA-256(previous link ‖ the record's bytes
/// before its link). The chain starts from `genesis` (32 zero bytes), so the
/// link of the last record commits to every record before it; publishing it
/// with its sequence anchors the whole log outside the machine.
public struct ChainHash: Hashable, Sendable, CustomStringConvertible {
    // 32 bytes in memory order (not integers: only their bytes matter).
    private var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0

    public static let byteCount = 32
    /// The link before the first record.
    public static let genesis = ChainHash()

    public init() {}

    /// The link stored in `bytes` (exactly 32 of them).
    public init?(bytes: UnsafeRawBufferPointer) {
        guard bytes.count == Self.byteCount else { return nil }
        withUnsafeMutableBytes(of: &self) { $0.copyMemory(from: bytes) }
    }

    public init?(bytes: [UInt8]) {
        guard let h = bytes.withUnsafeBytes({ ChainHash(bytes: $0) }) else { return nil }
        self = h
    }

    /// Parses 64 hexadecimal digits.
    public init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count == 64 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 32)
        for i in 0..<32 {
            guard let hi = Self.nibble(digits[2 * i]), let lo = Self.nibble(digits[2 * i + 1]) else { return nil }
            bytes[i] = hi << 4 | lo
        }
        self.init(bytes: bytes)
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        case 0x41...0x46: return c - 0x41 + 10
        default: return nil
        }
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: self) { try body($0) }
    }

    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Lowercase hexadecimal, 64 digits.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(64)
        withUnsafeBytes { b in
            for byte in b { out.append(digits[Int(byte >> 4)]); out.append(digits[Int(byte & 0xF)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    public var description: String { hex }

    /// The link's first 8 bytes, as a big-endian integer: what a version 5 record keeps of it.
    public var prefix: UInt64 { UInt64(bigEndian: w0) }

    /// The next link: SHA-256(self ‖ `body`).
    @inline(__always)
    public func next(over body: UnsafeRawBufferPointer) -> ChainHash {
        var result = ChainHash()
        withUnsafeBytes { prefix in
            Swift.withUnsafeMutableBytes(of: &result) { out in SHA256.chain(prefix, body, into: out) }
        }
        return result
    }
}

extension ChainHash {
    /// `next(over:)` of the `count` bytes at offset 32 of `buffer`, hashed
    /// where they are: this link is written into the 32 bytes before them,
    /// and SHA-256's padding after them (`buffer` holds at least
    /// `SHA256.paddedSize(32 + count)` bytes).
    @inline(__always)
    public func next(overBodyAfterRoomIn buffer: UnsafeMutableRawBufferPointer, count: Int) -> ChainHash {
        withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: ChainHash.byteCount) }
        var result = ChainHash()
        Swift.withUnsafeMutableBytes(of: &result) { out in
            SHA256.hash(paddingInPlace: buffer, count: ChainHash.byteCount + count, into: out)
        }
        return result
    }

    /// The next link over a body held in two parts: SHA-256(self ‖ `head` ‖ `rest`).
    @inline(__always)
    public func next(over head: UnsafeRawBufferPointer, _ rest: UnsafeRawBufferPointer) -> ChainHash {
        var result = ChainHash()
        withUnsafeBytes { prefix in
            Swift.withUnsafeMutableBytes(of: &result) { out in SHA256.chain(prefix, head, rest, into: out) }
        }
        return result
    }
}

/// The end of the log as an auditor anchors it: the last sequence and its link.
public struct ChainHead: Hashable, Sendable, CustomStringConvertible {
    public var sequence: UInt64
    public var hash: ChainHash
    public init(sequence: UInt64, hash: ChainHash) {
        self.sequence = sequence
        self.hash = hash
    }
    /// `SEQ:HEX`, the form `topicstore audit --expect-head` accepts.
    public var description: String { "\(sequence):\(hash.hex)" }

    public init?(parsing text: String) {
        let parts = text.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let seq = UInt64(parts[0]), let hash = ChainHash(hex: String(parts[1])) else { return nil }
        self.init(sequence: seq, hash: hash)
    }
}
