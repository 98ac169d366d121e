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

/// `byteCount` bytes aligned to cache lines; from 2 MiB on, aligned to 2 MiB
/// pages and advised to be backed by them (`adviseHugePages`), before they
/// are first touched. Freed with `deallocate()`.
func allocateOnHugePages(byteCount: Int) -> UnsafeMutableRawPointer {
    let huge = 2 << 20
    let bytes = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: byteCount >= huge ? huge : 64)
    adviseHugePages(UnsafeMutableRawBufferPointer(start: bytes, count: byteCount), fewest: 1)
    return bytes
}

/// Up to `capacity` elements in memory reserved whole when made, aligned to
/// 2 MiB and asked to be backed by 2 MiB pages (`adviseHugePages`): for a
/// table read at random whose size is bounded, such as the topic directory's
/// entries, which a list of users not asked lately reads one per code. An
/// array grows by copying into new memory of 4 KiB pages, each a TLB miss of
/// its own there. Memory becomes resident only as elements are appended.
///
/// A class, read through a `let`: elements are reached through its pointer,
/// with no exclusivity check or retain of storage per access.
final class HugePageBuffer<Element> {
    private let base: UnsafeMutablePointer<Element>
    let capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        precondition(capacity >= 0 && MemoryLayout<Element>.alignment <= 64)
        let bytes = allocateOnHugePages(byteCount: max(capacity, 1) * MemoryLayout<Element>.stride)
        base = bytes.bindMemory(to: Element.self, capacity: max(capacity, 1))
        self.capacity = capacity
    }

    deinit {
        base.deinitialize(count: count)
        base.deallocate()
    }

    subscript(i: Int) -> Element {
        unsafeAddress {
            precondition(i >= 0 && i < count, "index out of range")
            return UnsafePointer(base + i)
        }
        unsafeMutableAddress {
            precondition(i >= 0 && i < count, "index out of range")
            return base + i
        }
    }

    /// Calls `body` with the elements, valid only within it.
    func withUnsafeBufferPointer<R>(_ body: (UnsafeBufferPointer<Element>) throws -> R) rethrows -> R {
        try body(UnsafeBufferPointer(start: base, count: count))
    }

    /// Appends `element`; the buffer must not be full.
    func append(_ element: consuming Element) {
        precondition(count < capacity, "buffer full")
        (base + count).initialize(to: element)
        count += 1
    }

    /// Removes every element (the memory stays, for those appended next).
    func removeAll() {
        base.deinitialize(count: count)
        count = 0
    }
}
