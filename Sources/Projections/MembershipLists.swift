/// The writer's cached topic lists of devices (what `device_topics` holds),
/// by slot: each list's topic ids ascending, held back to back in one arena
/// rather than in an array each.
///
/// As an array each, a rebuild of bench's 1M store made and later freed a
/// million allocations; a list that grew was copied into a new one; and the
/// two walks over every list when the build is written (the `device_topics`
/// table, and the inversion into postings on another thread) missed the
/// cache on each list's own allocation (the inversion's costliest load, perf).
/// Here a list has room to grow where it is; one that outgrows it
/// moves to the arena's end with twice the room, and its old place stays
/// unused until the lists are cleared (`abandoned` counts it).
struct MembershipLists {
    /// Where a list is in the arena, and whether it changed since it was written.
    struct Span: Sendable {
        var start: Int
        var count: UInt32
        var room: UInt32
        var dirty: Bool
    }

    private var table = SlotTable<DeviceKey, Span>()
    private var arena: [UInt32] = []
    /// Ids of `arena` left behind by lists that moved.
    private(set) var abandoned = 0

    typealias DeviceKey = ProjectionWriter.DeviceKey

    /// A list of a new device gets room for this many ids at least.
    private static let leastRoom = 4

    var count: Int { table.count }

    /// Bytes held: the slots and the arena's ids in use (a reservation beyond
    /// them is address space never touched).
    var footprint: Int {
        count * (MemoryLayout<DeviceKey>.stride + MemoryLayout<Span>.stride) + arena.count * MemoryLayout<UInt32>.stride
    }

    /// The slot of `key`'s list (one added by `insert`, not `appendUnindexed`), or nil.
    func slot(of key: DeviceKey) -> Int? { table.slot(of: key) }

    func key(at slot: Int) -> DeviceKey { table.keys[slot] }

    func isDirty(_ slot: Int) -> Bool { table.values[slot].dirty }

    /// Marks the list in `slot` changed (`dirty`) or written; returns whether it was changed before.
    @inline(__always)
    @discardableResult
    mutating func setDirty(_ slot: Int, _ dirty: Bool) -> Bool {
        let was = table.values[slot].dirty
        table.values[slot].dirty = dirty
        return was
    }

    /// Adds `key` (not present) with `list` (ascending), found again by `slot(of:)`; returns its slot.
    mutating func insert(_ key: DeviceKey, _ list: [UInt32]) -> Int {
        table.insert(key, place(list))
    }

    /// Adds `key` with `list` (ascending) without indexing it: its slot is
    /// found another way (a build's, by ordinal). Never mixed with `insert`.
    mutating func appendUnindexed(_ key: DeviceKey, _ list: [UInt32]) -> Int {
        table.appendUnindexed(key, place(list))
    }

    /// A span at the arena's end holding `list`, with room for twice as many
    /// ids (none for an empty list: a register makes room for its topics).
    private mutating func place(_ list: [UInt32]) -> Span {
        guard !list.isEmpty else { return Span(start: arena.count, count: 0, room: 0, dirty: false) }
        let span = Span(start: arena.count, count: UInt32(list.count), room: UInt32(2 * list.count), dirty: false)
        arena.append(contentsOf: list)
        arena.append(contentsOf: repeatElement(0, count: list.count))
        return span
    }

    /// `body` with the list in `slot`, where it is held (valid during the call only).
    @inline(__always)
    func withList<R>(at slot: Int, _ body: (UnsafeBufferPointer<UInt32>) throws -> R) rethrows -> R {
        let span = table.values[slot]
        return try arena.withUnsafeBufferPointer { try body(Self.list(span, in: $0)) }
    }

    /// The ids `span` names in `arena`.
    @inline(__always)
    static func list(_ span: Span, in arena: UnsafeBufferPointer<UInt32>) -> UnsafeBufferPointer<UInt32> {
        UnsafeBufferPointer(start: arena.baseAddress.map { $0 + span.start }, count: Int(span.count))
    }

    /// A copy of the list in `slot`.
    func list(at slot: Int) -> [UInt32] { withList(at: slot) { Array($0) } }

    /// Makes room in the list in `slot` for `extra` more ids, at least
    /// doubling it, so that a register's topics go in without moving it again.
    mutating func reserveRoom(at slot: Int, for extra: Int) {
        let span = table.values[slot]
        let needed = Int(span.count) + extra
        if needed > Int(span.room) { move(slot, room: max(needed, 2 * Int(span.room), Self.leastRoom)) }
    }

    /// Moves the list in `slot` to the arena's end, with room for `room` ids.
    private mutating func move(_ slot: Int, room: Int) {
        precondition(room <= Int(UInt32.max), "a topic list of \(room) ids")
        var span = table.values[slot]
        let start = arena.count
        arena.append(contentsOf: repeatElement(0, count: room))
        if span.count > 0 {
            arena.withUnsafeMutableBufferPointer { a in
                (a.baseAddress! + start).update(from: a.baseAddress! + span.start, count: Int(span.count))
            }
        }
        abandoned += Int(span.room)
        span.start = start
        span.room = UInt32(room)
        table.values[slot] = span
    }

    /// Adds `tid` to the list in `slot`; false when it was there already.
    @inline(__always)
    mutating func insert(_ tid: UInt32, intoListAt slot: Int) -> Bool {
        let (found, at) = withList(at: slot) { DeviceTopics.search($0, tid) }
        if found { return false }
        if table.values[slot].count == table.values[slot].room {
            move(slot, room: max(2 * Int(table.values[slot].room), Self.leastRoom))
        }
        let span = table.values[slot]
        arena.withUnsafeMutableBufferPointer { a in
            // (A loop: a list is a few ids, and a call of memmove for them cost more than the move.)
            let list = a.baseAddress! + span.start
            var i = Int(span.count)
            while i > at { list[i] = list[i - 1]; i -= 1 }
            list[at] = tid
        }
        table.values[slot].count += 1
        return true
    }

    /// Removes `tid` from the list in `slot`; false when it was not there.
    @inline(__always)
    mutating func remove(_ tid: UInt32, fromListAt slot: Int) -> Bool {
        let (found, at) = withList(at: slot) { DeviceTopics.search($0, tid) }
        if !found { return false }
        let span = table.values[slot]
        arena.withUnsafeMutableBufferPointer { a in
            let list = a.baseAddress! + span.start
            for i in at..<(Int(span.count) - 1) { list[i] = list[i + 1] }
        }
        table.values[slot].count -= 1
        return true
    }

    /// Makes room for `devices` lists of about `ids` ids each, so that
    /// neither the slots nor the arena grow by copying on the way.
    mutating func reserve(devices: Int, ids: Int) {
        table.reserve(devices)
        arena.reserveCapacity(devices * ids)
    }

    mutating func removeAll() {
        table.removeAll()
        arena.removeAll(keepingCapacity: true)
        abandoned = 0
    }

    /// The lists as they are now, for another thread: the spans and the
    /// arena (shared until either is written here, then copied).
    var snapshot: Snapshot { Snapshot(spans: table.values, arena: arena) }

    struct Snapshot: Sendable {
        let spans: [Span]
        let arena: [UInt32]

        /// The lists, each read by slot through `Reader.withList`, during `body`.
        func read<R>(_ body: (Reader) throws -> R) rethrows -> R {
            try spans.withUnsafeBufferPointer { s in try arena.withUnsafeBufferPointer { a in try body(Reader(spans: s, arena: a)) } }
        }
    }

    struct Reader {
        let spans: UnsafeBufferPointer<Span>
        let arena: UnsafeBufferPointer<UInt32>

        @inline(__always)
        func withList<R>(at slot: Int, _ body: (UnsafeBufferPointer<UInt32>) throws -> R) rethrows -> R {
            try body(MembershipLists.list(spans[slot], in: arena))
        }
    }
}
