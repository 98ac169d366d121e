/// A key with a cheap 64-bit hash, for `SlotTable`.
protocol SlotKey: Equatable {
    var hash64: UInt64 { get }
}

/// An open-addressing hash table (linear probing, multiply-shift hashing) that
/// hands out stable slot numbers, so a caller looks a key up once and then
/// reads and mutates its value in place by slot.
///
/// The writer's per-batch caches live in these: Swift's `Dictionary` spent most
/// of the fold's time seeding SipHash and probing (measured with perf).
struct SlotTable<Key: SlotKey, Value> {
    private(set) var keys: [Key] = []
    var values: [Value] = []
    private var index: [Int32]      // slot + 1, 0 = empty
    private var shift: UInt64

    init(capacity: Int = 1024) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        index = Array(repeating: 0, count: size)
        shift = UInt64(64 - size.trailingZeroBitCount)
        keys.reserveCapacity(capacity)
        values.reserveCapacity(capacity)
    }

    var count: Int { keys.count }

    @inline(__always)
    private func bucket(_ key: Key) -> Int {
        Int(truncatingIfNeeded: (key.hash64 &* 0x9E37_79B9_7F4A_7C15) >> shift)
    }

    /// The slot of `key`, or nil.
    @inline(__always)
    func slot(of key: Key) -> Int? {
        let mask = index.count - 1
        var b = bucket(key)
        while true {
            let s = Int(index[b])
            if s == 0 { return nil }
            if keys[s - 1] == key { return s - 1 }
            b = (b + 1) & mask
        }
    }

    /// Adds `key` (which must not be present) and returns its slot.
    @discardableResult
    mutating func insert(_ key: Key, _ value: consuming Value) -> Int {
        if (keys.count + 1) * 2 > index.count { grow() }
        let slot = keys.count
        keys.append(key)
        values.append(value)
        place(key, slot)
        return slot
    }

    /// Makes room for `count` entries appended unindexed, so the arrays do
    /// not grow by copying on the way (address space until written).
    mutating func reserve(_ count: Int) {
        keys.reserveCapacity(count)
        values.reserveCapacity(count)
    }

    /// Adds `key` with `value` without indexing it: `slot(of:)` will not find
    /// it, so the caller must find its slots another way (a build's
    /// memberships, found by device ordinal). Never mix with `insert`.
    /// (`value` is taken, not copied: a topic's record was copied on its way
    /// in, its strings retained, then the caller's released.)
    mutating func appendUnindexed(_ key: Key, _ value: consuming Value) -> Int {
        keys.append(key)
        values.append(value)
        return keys.count - 1
    }

    private mutating func place(_ key: Key, _ slot: Int) {
        let mask = index.count - 1
        var b = bucket(key)
        while index[b] != 0 { b = (b + 1) & mask }
        index[b] = Int32(slot + 1)
    }

    private mutating func grow() {
        let size = index.count * 2
        index = Array(repeating: 0, count: size)
        shift = UInt64(64 - size.trailingZeroBitCount)
        for (slot, key) in keys.enumerated() { place(key, slot) }
    }

    mutating func removeAll() {
        keys.removeAll(keepingCapacity: true)
        values.removeAll(keepingCapacity: true)
        for i in index.indices { index[i] = 0 }
    }

    /// Keeps the entries whose slot `keep` names (ascending), in their order,
    /// and drops the others: every kept entry gets a new slot, so no slot
    /// handed out before may be used after.
    mutating func keepOnly(slots keep: [Int]) {
        var w = 0
        for r in keep {
            precondition(r >= w && r < keys.count, "kept slots must be ascending and in the table")
            if w != r { keys.swapAt(w, r); values.swapAt(w, r) }
            w += 1
        }
        keys.removeLast(keys.count - w)
        values.removeLast(values.count - w)
        for i in index.indices { index[i] = 0 }
        for (slot, key) in keys.enumerated() { place(key, slot) }
    }
}
