/// A device's topics as one value: ascending big-endian u32 topic ids.
/// One value per device means one write per command, not one per topic.
enum DeviceTopics {
    /// Binary search: whether `tid` is present, and where it is or would go.
    @inline(__always)
    static func search(_ list: [UInt32], _ tid: UInt32) -> (found: Bool, index: Int) {
        var lo = 0, hi = list.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if list[mid] < tid { lo = mid + 1 } else { hi = mid }
        }
        return (lo < list.count && list[lo] == tid, lo)
    }

    /// The same search over a sorted list of slice numbers.
    @inline(__always)
    static func search16(_ list: [UInt16], _ value: UInt16) -> (found: Bool, index: Int) {
        var lo = 0, hi = list.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if list[mid] < value { lo = mid + 1 } else { hi = mid }
        }
        return (lo < list.count && list[lo] == value, lo)
    }

    static func encode(_ list: [UInt32], into buffer: UnsafeMutableRawBufferPointer) {
        for (i, tid) in list.enumerated() { buffer.storeBytes(of: tid.bigEndian, toByteOffset: i * 4, as: UInt32.self) }
    }

    /// Decodes a stored list; nil when its length or order is wrong.
    static func decode(_ bytes: UnsafeRawBufferPointer) -> [UInt32]? {
        guard bytes.count % 4 == 0, bytes.count > 0 else { return nil }
        var list: [UInt32] = []
        list.reserveCapacity(bytes.count / 4)
        for i in 0..<bytes.count / 4 {
            let tid = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
            if let last = list.last, last >= tid { return nil }
            list.append(tid)
        }
        return list
    }
}
