/// Which device holds a push token: the writer's token → ordinal index, kept
/// in memory instead of in an LMDB table.
///
/// The holder of a token is a function of the device records (every record
/// with a token, live or rejected; no two devices of a project hold the same
/// one), so storing it again adds nothing durable. It cost a lot: a `tokens`
/// B-tree keyed by the token itself put one random leaf page into the commit
/// of every new token, about 40% of the pages an install command dirtied at
/// 1M devices. The writer loads the index from `devices` (a cursor walk) and
/// checks on every transaction that no one else has written since.
///
/// An entry is (project, 64-bit hash of the token, ordinal): 16 bytes, 32 MiB
/// per million devices at the table's load. A lookup confirms a candidate
/// against its device record, so a hash collision costs one read, never a
/// wrong answer. Open addressing with linear probing; removal shifts the
/// following entries back, so the table never fills with tombstones.
struct TokenIndex {
    struct Entry {
        /// 0 marks an empty slot (a real hash of 0 is stored as 1).
        var hash: UInt64 = 0
        var pid: UInt32 = 0
        var ordinal: UInt32 = 0
    }

    private var entries: [Entry]
    private var shift: UInt64
    private(set) var count = 0

    init(capacity: Int = 0) {
        let size = Self.tableSize(for: capacity)
        entries = Self.emptyTable(size)
        shift = UInt64(64 - size.trailingZeroBitCount)
    }

    /// Bytes the table takes.
    var footprint: Int { entries.count * MemoryLayout<Entry>.stride }

    /// The hash a token is filed under in project `pid`.
    static func hash(_ pid: UInt32, _ token: UnsafeRawBufferPointer) -> UInt64 {
        let h = NameIndex.hash(pid, token)
        return h == 0 ? 1 : h
    }

    static func hash(_ pid: UInt32, _ token: String) -> UInt64 {
        var token = token
        return token.withUTF8 { hash(pid, UnsafeRawBufferPointer($0)) }
    }

    /// Calls `body` with each ordinal filed under (`pid`, `hash`) until it returns true.
    func forEachCandidate(pid: UInt32, hash: UInt64, _ body: (UInt32) throws -> Bool) rethrows {
        let mask = entries.count - 1
        var i = home(hash)
        while true {
            let e = entries[i]
            if e.hash == 0 { return }
            if e.hash == hash && e.pid == pid, try body(e.ordinal) { return }
            i = (i + 1) & mask
        }
    }

    /// Files `ordinal` under (`pid`, `hash`).
    mutating func insert(pid: UInt32, hash: UInt64, ordinal: UInt32) {
        if (count + 1) * 2 > entries.count { grow() }
        place(Entry(hash: hash, pid: pid, ordinal: ordinal))
        count += 1
    }

    /// Removes the entry (`pid`, `hash`, `ordinal`); false when there is none.
    @discardableResult
    mutating func remove(pid: UInt32, hash: UInt64, ordinal: UInt32) -> Bool {
        let mask = entries.count - 1
        var i = home(hash)
        while true {
            let e = entries[i]
            if e.hash == 0 { return false }
            if e.hash == hash && e.pid == pid && e.ordinal == ordinal { break }
            i = (i + 1) & mask
        }
        // Backward shift: move up every following entry that may sit in the hole.
        var hole = i
        var j = (i + 1) & mask
        while entries[j].hash != 0 {
            let h = home(entries[j].hash)
            // The entry at j may fill the hole when its home is not cyclically in (hole, j].
            let between = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j)
            if !between {
                entries[hole] = entries[j]
                hole = j
            }
            j = (j + 1) & mask
        }
        entries[hole] = Entry()
        count -= 1
        return true
    }

    mutating func removeAll() {
        entries = Self.emptyTable(Self.tableSize(for: 0))
        shift = UInt64(64 - entries.count.trailingZeroBitCount)
        count = 0
    }

    /// Sizes the table for at least `capacity` entries without growing.
    mutating func reserve(_ capacity: Int) {
        guard Self.tableSize(for: capacity) > entries.count else { return }
        rehash(Self.tableSize(for: capacity))
    }

    // MARK: Table

    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: hash >> shift) }

    private mutating func place(_ entry: Entry) {
        let mask = entries.count - 1
        var i = home(entry.hash)
        while entries[i].hash != 0 { i = (i + 1) & mask }
        entries[i] = entry
    }

    private mutating func grow() { rehash(entries.count * 2) }

    private mutating func rehash(_ size: Int) {
        let old = entries
        entries = Self.emptyTable(size)
        shift = UInt64(64 - size.trailingZeroBitCount)
        for e in old where e.hash != 0 { place(e) }
    }

    private static func emptyTable(_ count: Int) -> [Entry] { .hugePageBacked(repeating: Entry(), count: count) }

    /// A power of two with room for `capacity` entries at half load (at least 1,024).
    private static func tableSize(for capacity: Int) -> Int {
        var size = 1024
        while size < capacity * 2 { size *= 2 }
        return size
    }
}
