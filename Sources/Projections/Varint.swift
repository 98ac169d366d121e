/// Unsigned LEB128 integers: seven bits a byte, low bits first, the high bit
/// set on every byte but the last. Topic records (form 2) store their
/// sequences and lengths this way: a sequence below 2^28 takes 4 bytes, not 8.
enum Varint {
    /// The number of bytes `write` takes for `v` (1...10).
    @inline(__always)
    static func size(_ v: UInt64) -> Int {
        // 64 bits in groups of 7, at least one group.
        (64 - (v | 1).leadingZeroBitCount + 6) / 7
    }

    /// Writes `v` at `p + at` (which has room for `size(v)` bytes) and moves `at` past it.
    @inline(__always)
    static func write(_ v: UInt64, at p: UnsafeMutableRawPointer, _ at: inout Int) {
        var v = v
        while v >= 0x80 {
            p.storeBytes(of: UInt8(truncatingIfNeeded: v) | 0x80, toByteOffset: at, as: UInt8.self)
            v >>= 7
            at += 1
        }
        p.storeBytes(of: UInt8(v), toByteOffset: at, as: UInt8.self)
        at += 1
    }

    /// Reads the integer at `at` and moves `at` past it; nil when the bytes end
    /// first, or it is longer than its shortest form, or it does not fit in 64 bits
    /// (so each value has exactly one encoding, and a damaged one is refused).
    @inline(__always)
    static func read(_ b: UnsafeRawBufferPointer, _ at: inout Int) -> UInt64? {
        var v: UInt64 = 0
        var shift: UInt64 = 0
        var i = at
        while i < b.count {
            let byte = b[i]
            i += 1
            let bits = UInt64(byte & 0x7F)
            if shift == 63 && bits > 1 { return nil }
            v |= bits << shift
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 { return nil }  // a trailing zero group: not the shortest form
                at = i
                return v
            }
            shift += 7
            if shift > 63 { return nil }
        }
        return nil
    }
}
