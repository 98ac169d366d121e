import SubscriptionLog

/// Key builders for the projection tables. Fixed-width big-endian integers
/// come first, so byte order is numeric order and a prefix selects a project,
/// a topic or a device.
enum Keys {
    @inline(__always)
    static func append(_ v: UInt32, to bytes: inout [UInt8]) {
        bytes.append(UInt8(v >> 24)); bytes.append(UInt8((v >> 16) & 0xFF))
        bytes.append(UInt8((v >> 8) & 0xFF)); bytes.append(UInt8(v & 0xFF))
    }

    static func project(_ pid: UInt32) -> [UInt8] {
        var k: [UInt8] = []; k.reserveCapacity(4); append(pid, to: &k); return k
    }

    /// `pid ‖ a`
    static func pair(_ pid: UInt32, _ a: UInt32) -> [UInt8] {
        var k: [UInt8] = []; k.reserveCapacity(8); append(pid, to: &k); append(a, to: &k); return k
    }

    /// `pid ‖ a ‖ b` (device → topic membership)
    static func triple(_ pid: UInt32, _ a: UInt32, _ b: UInt32) -> [UInt8] {
        var k: [UInt8] = []; k.reserveCapacity(12)
        append(pid, to: &k); append(a, to: &k); append(b, to: &k); return k
    }

    /// The key of topic code `code` in `topic_codes`, in the form `order`
    /// says (`ProjectionTables.TopicCodeOrder`): `pid ‖ (0x7F + length) ‖ code`
    /// or, in a store from before schema 11, `pid ‖ code`. Nil when the code
    /// has no key of that form (empty, or longer than `maxCodeKeyLength`):
    /// no entry holds it.
    static func code(_ pid: UInt32, _ code: String, _ order: ProjectionTables.TopicCodeOrder) -> [UInt8]? {
        withCode(pid, code, order) { Array($0) }
    }

    /// The longest code a key of the length-first form holds: its length byte
    /// (0x7F + length) is at most 0xFF. Codes are 1…128 bytes (`Limits.topicCodeLength`).
    static let maxCodeKeyLength = 128
    /// The length byte of a length-first code key: 0x80…0xFF, never the first
    /// byte of a code (codes are ASCII), so a key says which form it is in.
    @inline(__always)
    static func codeLengthByte(_ length: Int) -> UInt8 { UInt8(0x7F + length) }

    /// The code a `topic_codes` key holds, in either form (see `code`), and
    /// the form; nil when the key is shorter than a project id.
    static func codeBytes(ofKey key: UnsafeRawBufferPointer) -> (code: UnsafeRawBufferPointer, order: ProjectionTables.TopicCodeOrder)? {
        guard key.count >= 4 else { return nil }
        if key.count >= 5, key[4] >= 0x80, key.count - 5 == Int(key[4]) - 0x7F {
            return (UnsafeRawBufferPointer(rebasing: key[5...]), .byLength)
        }
        return (UnsafeRawBufferPointer(rebasing: key[4...]), .bytewise)
    }

    /// `pid ‖ high16 ‖ topic` → one roaring container of device ordinals.
    static func chunk(_ pid: UInt32, _ topic: UInt32, _ high: UInt16) -> [UInt8] {
        var k: [UInt8] = []; k.reserveCapacity(10)
        append(pid, to: &k)
        k.append(UInt8(high >> 8)); k.append(UInt8(high & 0xFF))
        append(topic, to: &k); return k
    }

    /// `pid ‖ a`, as `pair` builds it, in a value on the stack: the writer's
    /// hot paths (a device or topic record read or written, a chunk read, every
    /// key of a flush) built an array per key, a malloc and a free per LMDB call.
    @inline(__always)
    static func withPair<R>(_ pid: UInt32, _ a: UInt32, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let key = (pid.bigEndian, a.bigEndian)
        return try withUnsafeBytes(of: key) { try body($0) }
    }

    /// `pid ‖ high16 ‖ topic`, as `chunk` builds it, in a value on the stack.
    @inline(__always)
    static func withChunk<R>(_ pid: UInt32, _ topic: UInt32, _ high: UInt16,
                             _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var key: (UInt64, UInt64) = (0, 0)
        return try withUnsafeMutableBytes(of: &key) { k in
            k.storeBytes(of: pid.bigEndian, toByteOffset: 0, as: UInt32.self)
            k.storeBytes(of: high.bigEndian, toByteOffset: 4, as: UInt16.self)
            k.storeBytes(of: topic.bigEndian, toByteOffset: 6, as: UInt32.self)
            return try body(UnsafeRawBufferPointer(rebasing: k[0..<10]))
        }
    }

    /// The key `code` builds, in a buffer on the stack (nil where `code` gives
    /// nil): an audience of 100 per-user topics built an array per topic code
    /// it looked up, and the writer one per topic it created.
    @inline(__always)
    static func withCode<R>(_ pid: UInt32, _ code: String, _ order: ProjectionTables.TopicCodeOrder,
                            _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R? {
        try code.withUTF8Bytes { n -> R? in
            let lengthFirst = order == .byLength
            if lengthFirst && (n.count == 0 || n.count > maxCodeKeyLength) { return nil }
            let head = lengthFirst ? 5 : 4
            return try withUnsafeTemporaryAllocation(byteCount: head + n.count, alignment: 4) { k in
                k.storeBytes(of: pid.bigEndian, as: UInt32.self)
                if lengthFirst { k[4] = codeLengthByte(n.count) }
                if n.count > 0 { (k.baseAddress! + head).copyMemory(from: n.baseAddress!, byteCount: n.count) }
                return try body(UnsafeRawBufferPointer(k))
            }
        }
    }

    @inline(__always)
    static func hasPrefix(_ key: UnsafeRawBufferPointer, _ prefix: [UInt8]) -> Bool {
        guard key.count >= prefix.count else { return false }
        for i in 0..<prefix.count where key[i] != prefix[i] { return false }
        return true
    }
}
