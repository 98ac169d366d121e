internal import CCrypto

/// SHA-256 from libcrypto (OpenSSL), over raw buffers. The C types stay inside
/// this target; callers see buffers only.
public enum SHA256 {
    public static let byteCount = 32

    /// SHA-256 of `body` into `out` (at least 32 bytes).
    @inline(__always)
    public static func hash(_ body: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= byteCount, "SHA-256 needs a 32-byte output")
        topicstore_sha256(body.baseAddress, body.count, out.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }

    /// SHA-256(`prefix` ‖ `body`) into `out`, where `prefix` is exactly 32 bytes
    /// (the previous link of a hash chain).
    @inline(__always)
    public static func chain(_ prefix: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer,
                             into out: UnsafeMutableRawBufferPointer) {
        precondition(prefix.count == byteCount && out.count >= byteCount, "a chain link is 32 bytes")
        topicstore_sha256_chain(prefix.baseAddress, body.baseAddress, body.count,
                                out.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }

    /// SHA-256(`prefix` ‖ `head` ‖ `body`) into `out`, where `prefix` is exactly 32 bytes.
    @inline(__always)
    public static func chain(_ prefix: UnsafeRawBufferPointer, _ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer,
                             into out: UnsafeMutableRawBufferPointer) {
        precondition(prefix.count == byteCount && out.count >= byteCount, "a chain link is 32 bytes")
        topicstore_sha256_chain2(prefix.baseAddress, head.baseAddress, head.count, body.baseAddress, body.count,
                                 out.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }

    /// The bytes a message of `count` bytes takes padded (`hash(paddingInPlace:count:into:)`).
    @inline(__always)
    public static func paddedSize(_ count: Int) -> Int { topicstore_sha256_padded_size(count) }

    /// SHA-256 of the first `count` bytes of `message`, padded where they
    /// are: `message` holds at least `paddedSize(count)` bytes, and those past
    /// `count` are overwritten. For many short messages built in a scratch
    /// buffer (a chain link over a record read back), where the incremental
    /// calls' copies and final cleansing cost a third of the hashing.
    @inline(__always)
    public static func hash(paddingInPlace message: UnsafeMutableRawBufferPointer, count: Int,
                            into out: UnsafeMutableRawBufferPointer) {
        precondition(message.count >= paddedSize(count) && out.count >= byteCount, "no room to pad the message")
        topicstore_sha256_padded(message.baseAddress!.assumingMemoryBound(to: UInt8.self), count,
                                 out.baseAddress!.assumingMemoryBound(to: UInt8.self))
    }

    /// SHA-256 of `bytes`.
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: byteCount)
        bytes.withUnsafeBytes { b in out.withUnsafeMutableBytes { hash(b, into: $0) } }
        return out
    }
}
