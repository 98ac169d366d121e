/// A device's topics as one value, its topic ids ascending. One value per
/// device means one write per command, not one per topic.
///
/// Since schema 10 a list is written in the varint form: the byte 0xFF, then
/// the first id and each id's distance from the one before as varints (a
/// device's shared topics are close together, its per-user topic is one
/// 5-byte step: bench's lists take 16 bytes instead of 32). Lists an older
/// store holds are 4-byte big-endian ids, and read as before: none starts
/// with 0xFF, since topic ids stay below `ProjectionTables.topicIDLimit`.
package enum DeviceTopics {
    /// The first byte of a list in the varint form.
    static let varintForm: UInt8 = 0xFF

    /// Binary search of an ascending list: whether `tid` is present, and where it is or would go.
    @inline(__always)
    static func search(_ list: UnsafeBufferPointer<UInt32>, _ tid: UInt32) -> (found: Bool, index: Int) {
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

    /// The bytes `encode` writes for `list` (ascending, not empty).
    static func encodedSize(_ list: [UInt32]) -> Int { list.withUnsafeBufferPointer { encodedSize($0) } }

    /// `encodedSize` of a list where it is held.
    static func encodedSize(_ list: UnsafeBufferPointer<UInt32>) -> Int {
        var size = 1, previous: UInt32 = 0
        for tid in list {
            size += Varint.size(UInt64(tid &- previous))
            previous = tid
        }
        return size
    }

    /// Writes `list` (ascending, not empty) in the varint form into `buffer`,
    /// which holds exactly `encodedSize(list)` bytes.
    static func encode(_ list: [UInt32], into buffer: UnsafeMutableRawBufferPointer) {
        list.withUnsafeBufferPointer { encode($0, into: buffer) }
    }

    /// `encode` of a list where it is held.
    static func encode(_ list: UnsafeBufferPointer<UInt32>, into buffer: UnsafeMutableRawBufferPointer) {
        let p = buffer.baseAddress!
        p.storeBytes(of: varintForm, as: UInt8.self)
        var at = 1, previous: UInt32 = 0
        for tid in list {
            Varint.write(UInt64(tid &- previous), at: p, &at)
            previous = tid
        }
        precondition(at == buffer.count, "a topic list took other than its encoded size")
    }

    static func encoded(_ list: [UInt32]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: encodedSize(list)) { buffer, initialized in
            encode(list, into: UnsafeMutableRawBufferPointer(buffer))
            initialized = buffer.count
        }
    }

    /// Decodes a stored list, in either form; nil when its length or order is
    /// wrong, or a varint is not in its shortest form (each list has one encoding).
    package static func decode(_ bytes: UnsafeRawBufferPointer) -> [UInt32]? {
        guard let first = bytes.first else { return nil }
        var list: [UInt32] = []
        if first == varintForm {
            list.reserveCapacity(bytes.count - 1)  // at least a byte an id
            var at = 1, previous: UInt64 = 0
            while at < bytes.count {
                guard let step = Varint.read(bytes, &at), step > 0 || list.isEmpty,
                      previous + step <= UInt64(UInt32.max) else { return nil }
                previous += step
                list.append(UInt32(previous))
            }
            return list.isEmpty ? nil : list
        }
        guard bytes.count % 4 == 0 else { return nil }
        list.reserveCapacity(bytes.count / 4)
        for i in 0..<bytes.count / 4 {
            let tid = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
            if let last = list.last, last >= tid { return nil }
            list.append(tid)
        }
        return list
    }
}
