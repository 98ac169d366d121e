import Glibc

extension Array {
    /// `count` copies of `value`, the storage of a large array asked to be
    /// backed by 2 MiB pages first (`MADV_HUGEPAGE`): a hash table probed at
    /// random across tens of megabytes misses the TLB as well as the cache
    /// with 4 KiB pages.
    static func hugePageBacked(repeating value: Element, count: Int) -> [Element] {
        Array(unsafeUninitializedCapacity: count) { buffer, initialized in
            let bytes = UnsafeMutableRawBufferPointer(buffer)
            let huge = 2 << 20
            if bytes.count >= 4 * huge, let base = bytes.baseAddress {
                let start = (Int(bitPattern: base) + huge - 1) & ~(huge - 1)
                let end = (Int(bitPattern: base) + bytes.count) & ~(huge - 1)
                if end > start { _ = madvise(UnsafeMutableRawPointer(bitPattern: start), end - start, MADV_HUGEPAGE) }
            }
            buffer.initialize(repeating: value)
            initialized = count
        }
    }
}
