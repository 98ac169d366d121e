import Glibc

extension Array {
    /// `count` copies of `value`, the storage of a large array asked to be
    /// backed by 2 MiB pages first (`MADV_HUGEPAGE`): a hash table probed at
    /// random across tens of megabytes misses the TLB as well as the cache
    /// with 4 KiB pages.
    static func hugePageBacked(repeating value: Element, count: Int) -> [Element] {
        Array(unsafeUninitializedCapacity: count) { buffer, initialized in
            adviseHugePages(UnsafeMutableRawBufferPointer(buffer))
            buffer.initialize(repeating: value)
            initialized = count
        }
    }
}

/// Asks for the 2 MiB pages inside `bytes` to be backed by huge pages
/// (`MADV_HUGEPAGE`), when it spans at least `fewest` of them (four by
/// default: memory not aligned to them may hold only three); before the
/// memory is first touched.
func adviseHugePages(_ bytes: UnsafeMutableRawBufferPointer, fewest: Int = 4) {
    let huge = 2 << 20
    guard bytes.count >= fewest * huge, let base = bytes.baseAddress else { return }
    let start = (Int(bitPattern: base) + huge - 1) & ~(huge - 1)
    let end = (Int(bitPattern: base) + bytes.count) & ~(huge - 1)
    if end > start { _ = madvise(UnsafeMutableRawPointer(bitPattern: start), end - start, MADV_HUGEPAGE) }
}
