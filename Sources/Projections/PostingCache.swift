/// The posting chunks a writer holds decoded: the chunks it changed since they
/// were last written, and the ones it read on the way.
struct PostingCache {
    typealias Key = ProjectionWriter.ChunkKey

    var chunks = SlotTable<Key, ProjectionWriter.Cached<PostingSet>>()
    /// Slots changed since the last write.
    var dirty: [Int] = []
    /// A build's last chunk changed per topic, by topic id: its slice (high
    /// 32 bits) and slot + 1 (low 32; 0: none). New devices all land in the
    /// newest slice, so this finds the chunk by array index where the chunk
    /// table's probe (over a million per-user chunks) missed the cache. Nil on
    /// the live path, whose caches come and go with transactions.
    private var lastChunks: TopicColumns<UInt64>?

    init(tracksLastChunks: Bool) {
        lastChunks = tracksLastChunks ? TopicColumns(empty: 0) : nil
    }

    /// How a change altered its chunk's place in the topic's slice list.
    enum SliceChange {
        case appeared, emptied

        /// Applies the change of the chunk of slice `high` to a topic's ascending slice list.
        func apply(_ high: UInt16, to slices: inout [UInt16]) {
            let (found, at) = DeviceTopics.search16(slices, high)
            if self == .appeared && !found { slices.insert(high, at: at) }
            if self == .emptied && found { slices.remove(at: at) }
        }
    }

    /// Sets or clears `ordinal` in topic `tid`'s chunk, taking the chunk from
    /// `load` when the cache does not hold it (nil: none is stored). Returns
    /// whether the set changed, and whether the chunk appeared or emptied.
    @inline(__always)
    mutating func set(_ pid: UInt32, _ tid: UInt32, _ ordinal: UInt32, _ on: Bool,
                      load: (Key) throws -> PostingSet?) rethrows -> (changed: Bool, slice: SliceChange?) {
        let key = Key(pid: pid, topic: tid, high: PostingChunk.high(ordinal))
        let slot: Int
        if let s = lastChunkSlot(pid, tid, high: key.high) {
            slot = s
        } else {
            if let s = chunks.slot(of: key) {
                slot = s
            } else {
                slot = chunks.insert(key, .init(value: try load(key) ?? PostingSet(), dirty: false))
            }
            setLastChunkSlot(pid, tid, high: key.high, slot)
        }
        // Changed in place in the table's array, so a bitmap stays uniquely referenced. A chunk
        // appears when its first member is set: asked before the change, since counting a
        // bitmap's members afterwards (to see 1) was 1.5% of the writer's instructions.
        let changed: Bool, sliceChange: Bool
        if on {
            (changed, sliceChange) = chunks.values[slot].value.insertNotingEmpty(ordinal)
        } else {
            (changed, sliceChange) = chunks.values[slot].value.removeNotingEmpty(ordinal)
        }
        guard changed else { return (false, nil) }
        if !chunks.values[slot].dirty {
            chunks.values[slot].dirty = true
            dirty.append(slot)
        }
        return (true, sliceChange ? (on ? .appeared : .emptied) : nil)
    }

    @inline(__always)
    private mutating func lastChunkSlot(_ pid: UInt32, _ tid: UInt32, high: UInt16) -> Int? {
        guard let e = lastChunks?.value(pid, tid), e != 0, e >> 32 == UInt64(high) else { return nil }
        return Int(truncatingIfNeeded: e & 0xFFFF_FFFF) - 1
    }

    private mutating func setLastChunkSlot(_ pid: UInt32, _ tid: UInt32, high: UInt16, _ slot: Int) {
        guard lastChunks != nil else { return }
        precondition(slot < Int(UInt32.max), "chunk slots exhausted")
        lastChunks!.set(pid, tid, UInt64(high) << 32 | UInt64(slot + 1))
    }

    var count: Int { chunks.count }

    /// The changed chunks' slots in the order of their LMDB keys (pid ‖ slice
    /// ‖ topic), sorted by keys packed next to the slots: a sort that read
    /// each slot's key from the table missed the cache on every comparison.
    func sortedDirtySlots() -> [Int] {
        struct Item { var pidHigh: UInt64; var topic: UInt32; var slot: UInt32 }
        var items: [Item] = []
        items.reserveCapacity(dirty.count)
        for slot in dirty where chunks.values[slot].dirty {
            let k = chunks.keys[slot]
            items.append(Item(pidHigh: UInt64(k.pid) << 16 | UInt64(k.high), topic: k.topic, slot: UInt32(truncatingIfNeeded: slot)))
        }
        items.sort { $0.pidHigh != $1.pidHigh ? $0.pidHigh < $1.pidHigh : $0.topic < $1.topic }
        return items.map { Int($0.slot) }
    }

    /// Bytes held, estimated from up to 1,024 chunks spread over the table
    /// (a table entry each, and a bitmap's serialized size plus its overhead).
    /// Charging each chunk a full 8 KiB container, as before, put a store with
    /// one per-user topic per device (a million one-member chunks) at 9 GiB and
    /// split its rebuild into rounds that look names up in LMDB again.
    var footprint: Int {
        let n = chunks.count
        guard n > 0 else { return 0 }
        let step = max(1, n / 1024)
        var sampled = 0, bytes = 0
        var i = 0
        while i < n {
            bytes += chunks.values[i].value.heldBytes
            sampled += 1
            i += step
        }
        return (bytes / sampled + 48) * n + (lastChunks?.slots ?? 0) * 8
    }

    mutating func removeAll() {
        chunks.removeAll()
        dirty = []
        if lastChunks != nil { lastChunks = TopicColumns(empty: 0) }
    }
}
