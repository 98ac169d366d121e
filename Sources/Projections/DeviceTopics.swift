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

    /// Inserts `tid` at `index` of a sorted list (where `search` said it goes).
    /// `Array.insert(_:at:)` went through the generic `replaceSubrange` with a
    /// `CollectionOfOne`: ~160 instructions per subscription of the fold (callgrind).
    @inline(__always)
    static func insert(_ tid: UInt32, at index: Int, into list: inout [UInt32]) {
        let count = list.count
        guard index < count else { list.append(tid); return }
        list.append(list[count - 1])
        list.withUnsafeMutableBufferPointer { b in
            var i = count - 1
            while i > index { b[i] = b[i - 1]; i -= 1 }
            b[index] = tid
        }
    }

    /// Removes the value at `index` of a list (as `insert`, without `replaceSubrange`).
    @inline(__always)
    static func remove(at index: Int, from list: inout [UInt32]) {
        let last = list.count - 1
        if index < last {
            list.withUnsafeMutableBufferPointer { b in
                for i in index..<last { b[i] = b[i + 1] }
            }
        }
        list.removeLast()
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
