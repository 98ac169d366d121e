import CIntrinsics
import SubscriptionLog

/// A hash index from names (push tokens, device ids) to device ordinals,
/// kept in memory by the writer (`DeviceDirectory`) instead of in LMDB tables.
///
/// An entry is (project, 64-bit hash of the name, ordinal): 16 bytes, 32 MiB
/// per million names at the table's load. It stores no names: a lookup
/// confirms each candidate against its device record, so a hash collision
/// costs one read, never a wrong answer. Open addressing with linear probing;
/// removal shifts the following entries back, so the table never fills with
/// tombstones.
struct OrdinalIndex {
    struct Entry {
        /// 0 marks an empty slot (a real hash of 0 is stored as 1).
        var hash: UInt64 = 0
        var pid: UInt32 = 0
        var ordinal: UInt32 = 0
    }

    /// Any size (see `home`), so a table sized for a store is not rounded up to a power of two.
    private var entries: [Entry]
    private(set) var count = 0
    /// The table twice as large, being made on another thread (`insert`).
    private var nextTable: Background<[Entry]>?
    /// Times the table grew into one made on another thread (for tests).
    private(set) var grewIntoPrepared = 0

    init(capacity: Int = 0) {
        entries = Self.emptyTable(Self.tableSize(for: capacity))
    }

    /// Bytes the table takes.
    var footprint: Int { entries.count * MemoryLayout<Entry>.stride }

    /// The hash a name is filed under in project `pid`.
    static func hash(_ pid: UInt32, _ name: UnsafeRawBufferPointer) -> UInt64 {
        let h = NameIndex.hash(pid, name)
        return h == 0 ? 1 : h
    }

    static func hash(_ pid: UInt32, _ name: String) -> UInt64 {
        name.withUTF8Bytes { hash(pid, $0) }
    }

    /// `hash(pid, name)` from the name's `NameIndex.nameHash`.
    static func hash(_ pid: UInt32, nameHash: UInt64) -> UInt64 {
        let h = NameIndex.hash(pid, nameHash: nameHash)
        return h == 0 ? 1 : h
    }

    /// Starts loading the slots where the lookups of names begin, so those
    /// lookups do not wait for memory: for each of `events` (`FoldHints`),
    /// the name hash at `offset` in its hints (0: none). One access to the
    /// table for them all (see `ProjectionWriter.prefetch`).
    func prefetch(pid: UInt32, hintAt offset: Int, of events: ProjectionWriter.FoldHintRun) {
        entries.withUnsafeBufferPointer { table in
            events.forEach { hints in
                let nameHash = hints[offset]
                guard nameHash != 0 else { return }
                topicstore_prefetch(table.baseAddress! + home(Self.hash(pid, nameHash: nameHash)))
            }
        }
    }

    /// Starts loading the slot where the probe for `hash` begins.
    func prefetch(_ hash: UInt64) {
        entries.withUnsafeBufferPointer { topicstore_prefetch($0.baseAddress! + home(hash)) }
    }

    /// Calls `body` with each ordinal filed under (`pid`, `hash`) until it returns true.
    func forEachCandidate(pid: UInt32, hash: UInt64, _ body: (UInt32) throws -> Bool) rethrows {
        var i = home(hash)
        while true {
            let e = entries[i]
            if e.hash == 0 { return }
            if e.hash == hash && e.pid == pid, try body(e.ordinal) { return }
            i = next(i)
        }
    }

    /// The next ordinal filed under (`pid`, `hash`) from `slot` on (start at
    /// `home(hash)`, see `firstSlot`), advancing `slot` past it; nil when there
    /// is none. The writer's lookups use this rather than `forEachCandidate`:
    /// a closure that calls back into the writer made Swift copy the whole
    /// directory (a retain and a release per table) at every lookup.
    @inline(__always)
    func nextCandidate(pid: UInt32, hash: UInt64, slot: inout Int) -> UInt32? {
        while true {
            let e = entries[slot]
            if e.hash == 0 { return nil }
            slot = next(slot)
            if e.hash == hash && e.pid == pid { return e.ordinal }
        }
    }

    /// Where the probe for `hash` starts (for `nextCandidate`).
    @inline(__always)
    func firstSlot(_ hash: UInt64) -> Int { home(hash) }

    /// Files `ordinal` under (`pid`, `hash`). The table grows (doubles) when
    /// it would be more than five eighths full (`growsPast`).
    mutating func insert(pid: UInt32, hash: UInt64, ordinal: UInt32) {
        if (count + 1) * Self.preparesPast.slots > entries.count * Self.preparesPast.filled { growIfDue() }
        place(Entry(hash: hash, pid: pid, ordinal: ordinal))
        count += 1
    }

    /// Past nine sixteenths full, a large table's next one (twice as large) is
    /// made on another thread, and the entries move into it as soon as it is
    /// ready: most of a growth is the kernel zeroing the new table's memory
    /// (90% of the samples of a 10M-device index's growth), which the writer
    /// (or the recipient cache's lock) no longer waits for; filing the entries
    /// again is the rest. A table that reaches five eighths first waits for
    /// it. A small table grows at five eighths, where it is. A table made for
    /// 10M names taking 100k new ones a second: its slowest insert 1.82 s when
    /// it grew where it was, 39–44 ms now; for 1M, 16–190 ms against 4–5 ms.
    private mutating func growIfDue() {
        let due = (count + 1) * Self.growsPast.slots > entries.count * Self.growsPast.filled
        guard entries.count >= Self.preparedFrom else {
            if due { grow() }
            return
        }
        if nextTable == nil {
            let size = entries.count * 2
            nextTable = Background { Self.emptyTable(size) }
        }
        guard let next = nextTable, due || next.isDone else { return }
        nextTable = nil
        // (A copy of this index that asked for the same table may have taken it: then it grows here.)
        guard let table = next.take(), table.count == entries.count * 2 else { return grow() }
        let old = entries
        entries = table
        refile(old)
        grewIntoPrepared += 1
    }

    /// Removes the entry (`pid`, `hash`, `ordinal`); false when there is none.
    @discardableResult
    mutating func remove(pid: UInt32, hash: UInt64, ordinal: UInt32) -> Bool {
        var i = home(hash)
        while true {
            let e = entries[i]
            if e.hash == 0 { return false }
            if e.hash == hash && e.pid == pid && e.ordinal == ordinal { break }
            i = next(i)
        }
        // Backward shift: move up every following entry that may sit in the hole.
        var hole = i
        var j = next(i)
        while entries[j].hash != 0 {
            let h = home(entries[j].hash)
            // The entry at j may fill the hole when its home is not cyclically in (hole, j].
            let between = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j)
            if !between {
                entries[hole] = entries[j]
                hole = j
            }
            j = next(j)
        }
        entries[hole] = Entry()
        count -= 1
        return true
    }

    mutating func removeAll() {
        entries = Self.emptyTable(Self.tableSize(for: 0))
        nextTable = nil
        count = 0
    }

    /// Sizes the table for at least `capacity` entries without growing.
    mutating func reserve(_ capacity: Int) {
        guard Self.tableSize(for: capacity) > entries.count else { return }
        rehash(Self.tableSize(for: capacity))
    }

    // MARK: Table

    /// The slot a hash starts probing at: the high word of hash × size, which
    /// spreads the hash over any table size.
    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Self.home(hash, in: entries.count) }

    @inline(__always)
    private static func home(_ hash: UInt64, in size: Int) -> Int {
        Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(size)).high)
    }

    @inline(__always)
    private func next(_ i: Int) -> Int { i + 1 == entries.count ? 0 : i + 1 }

    private mutating func place(_ entry: Entry) {
        var i = home(entry.hash)
        while entries[i].hash != 0 { i = next(i) }
        entries[i] = entry
    }

    private mutating func grow() { rehash(entries.count * 2) }

    private mutating func rehash(_ size: Int) {
        let old = entries
        entries = Self.emptyTable(size)
        nextTable = nil
        refile(old)
    }

    /// Files the entries of `old` into the table, which holds none: each
    /// one's slot starts loading 16 slots of `old` before it is filled (its
    /// home in a large table is anywhere: moving 11.3M names took 50–91 ms
    /// waiting on memory for each, 39–44 ms with the slots prefetched).
    private mutating func refile(_ old: [Entry]) {
        let size = entries.count, ahead = 16
        entries.withUnsafeMutableBufferPointer { table in
            old.withUnsafeBufferPointer { from in
                for i in from.indices {
                    if i + ahead < from.count, from[i + ahead].hash != 0 {
                        topicstore_prefetch(table.baseAddress! + Self.home(from[i + ahead].hash, in: size))
                    }
                    let e = from[i]
                    guard e.hash != 0 else { continue }
                    var slot = Self.home(e.hash, in: size)
                    while table[slot].hash != 0 { slot = slot + 1 == size ? 0 : slot + 1 }
                    table[slot] = e
                }
            }
        }
    }

    private static func emptyTable(_ count: Int) -> [Entry] { .hugePageBacked(repeating: Entry(), count: count) }

    /// Room for `capacity` entries at half load (at least 1,024 slots).
    private static func tableSize(for capacity: Int) -> Int { max(1024, capacity * 2) }

    /// The load past which an insert grows the table: five eighths. A table
    /// is made for what it is to hold at half load (`tableSize`): a store's
    /// device index when a writer opens it (`DeviceDirectory.load`), the
    /// recipient cache's when `serve` fills it (`RecipientCache.fill`). So it
    /// takes a quarter more names before it grows. When it grew at half load,
    /// the first new device after `serve` started waited for both to grow: a
    /// table twice as large allocated, its memory touched for the first time
    /// and every entry filed again, holding the writer and the cache's lock.
    /// On bench's 10M store the first register took 1.4–3.5 s (perf: 90% of
    /// it the kernel zeroing the new pages), 0.04–0.29 s at 1M. Linear probing
    /// at five eighths reads about as few slots as at a half (mostly one
    /// cache line of four entries).
    static let growsPast = (filled: 5, slots: 8)

    /// The load past which a large table's next one is made on another thread (`growIfDue`).
    static let preparesPast = (filled: 9, slots: 16)

    /// The slots from which a table's next one is made on another thread:
    /// 16 MiB of entries, room for half a million names.
    static let preparedFrom = 1 << 20
}

/// Names to file in an `OrdinalIndex`, held back a few names behind the walk that
/// finds them: each one's slot is prefetched when it is found and filled `lag`
/// names later, by when it is in the cache. Filling a table of ten million slots
/// in the order of a device walk waited on memory at every name (`DeviceDirectory.load`,
/// `RecipientCache.fill`).
struct LaggedInserts<Payload> {
    struct Insert {
        var pid: UInt32
        var hash: UInt64
        var ordinal: UInt32
        /// What the caller needs to file it (the device's record, say).
        var payload: Payload
    }

    private var ring: [Insert] = []
    private var oldest = 0
    let lag: Int

    init(lag: Int = 16) {
        self.lag = lag
        ring.reserveCapacity(lag)
    }

    /// Prefetches `insert`'s slot in `index` and takes it in; returns the insert
    /// taken `lag` names before it, to be filed now (nil while fewer are held).
    mutating func push(_ insert: Insert, prefetchingIn index: OrdinalIndex) -> Insert? {
        index.prefetch(insert.hash)
        guard ring.count == lag else {
            ring.append(insert)
            return nil
        }
        let due = ring[oldest]
        ring[oldest] = insert
        oldest = oldest + 1 == lag ? 0 : oldest + 1
        return due
    }

    /// The inserts still held, oldest first; none are held after.
    mutating func drain() -> [Insert] {
        defer { ring.removeAll(keepingCapacity: true); oldest = 0 }
        return Array(ring[oldest...] + ring[..<oldest])
    }
}
