import CIntrinsics
import SubscriptionLog
import Dispatch
import Glibc
import LMDB
import Synchronization

/// What `NameIndex.lookupEach` hands each name's answer to.
protocol NameLookupVisitor {
    /// Name `i`'s answer, as `lookup` gives it; false stops the lookups.
    mutating func visit(_ i: Int, _ answer: UInt32??) -> Bool
}

/// The string-keyed index entries of a build (`topic_codes`: pid ‖ code →
/// topic id) held in memory: the names back to back in one byte
/// arena, found through an open-addressing table whose 32-byte slots hold a
/// hash tag, the value and where the name is (and a short name itself), so a
/// lookup hashes the name's UTF-8 in place, allocates nothing and touches one
/// slot (and the arena only for a name longer than `inlineName` whose tag
/// matches). A removed name stays as a tombstone, which becomes a delete
/// when the entries go to a non-empty table.
///
/// A class: read through the build's reference in place, where a struct held
/// by a class was copied (its arrays retained and released) on every lookup.
/// Only the folding thread changes it; the write-out's sort only reads it.
final class NameIndex: @unchecked Sendable {
    /// 32 bytes, each in one cache line (`table` aligns them). Defined in C
    /// (`topicstore_name_slot`), where a list's lookups read it too
    /// (`topicstore_gather_held`). `low` and `high` hold a name of at most
    /// `inlineName` bytes, as `shortWords` reads it (zero beyond it): compared
    /// there, a lookup of a per-user topic's code does not read the arena (a
    /// cache miss per name of a list of users not asked lately); longer names
    /// leave them zero. `state` is 0 for empty, 1 present, 2 removed.
    typealias Slot = topicstore_name_slot

    /// Names of at most this many bytes are held in their slot too
    /// (`user.9999999` is 12).
    static let inlineName = 12

    /// The names back to back: `arenaCount` bytes of `arenaCapacity`. It and
    /// the table are memory the index allocates and frees itself, read through
    /// pointers: as arrays held by the class, every lookup retained and
    /// released both (8% of a per-user topic's count from the serving caches).
    private var arena: UnsafeMutableRawPointer
    private var arenaCount = 0
    private var arenaCapacity: Int
    /// Any size: a hash picks its home slot by multiplying (`home`), so a
    /// reserved table is as large as asked, not rounded up to a power of two
    /// (on this VM every megabyte first touched costs ~2 ms of page faults).
    private var slots: UnsafeMutableBufferPointer<Slot>
    private(set) var count = 0

    private static let initialSlots = 1024
    private static let initialArena = 4096

    init() {
        slots = Self.table(Self.initialSlots)
        arenaCapacity = Self.initialArena
        arena = .allocate(byteCount: arenaCapacity, alignment: 16)
    }

    deinit {
        slots.deallocate()
        arena.deallocate()
    }

    /// A table of `size` empty slots, aligned to cache lines; from 2 MiB on,
    /// aligned to 2 MiB pages and backed by them (`adviseHugePages`): the
    /// topic directory's table of tens of thousands of codes (4 MiB at 60k)
    /// is read at random by a list of users not asked lately.
    private static func table(_ size: Int) -> UnsafeMutableBufferPointer<Slot> {
        let bytes = allocateOnHugePages(byteCount: size * MemoryLayout<Slot>.stride)
        let table = UnsafeMutableBufferPointer(start: bytes.bindMemory(to: Slot.self, capacity: size), count: size)
        table.initialize(repeating: Slot())
        return table
    }

    /// The arena's bytes in use.
    private var nameArena: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: arena, count: arenaCount) }

    /// Appends `bytes` to the arena, doubling it when full.
    private func appendName(_ bytes: UnsafeRawBufferPointer) {
        if arenaCount + bytes.count > arenaCapacity {
            let capacity = max(arenaCapacity * 2, arenaCount + bytes.count)
            let grown = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
            grown.copyMemory(from: arena, byteCount: arenaCount)
            arena.deallocate()
            (arena, arenaCapacity) = (grown, capacity)
        }
        if let base = bytes.baseAddress, bytes.count > 0 { (arena + arenaCount).copyMemory(from: base, byteCount: bytes.count) }
        arenaCount += bytes.count
    }

    /// A slot's tag is the hash's high 32 bits, and its home slot is picked
    /// from the tag alone: growing the table moves each slot by its tag,
    /// without reading its name from the arena and hashing it again (a
    /// rebuild's table of a million topic codes grew eleven times, and the
    /// rehashing was half of inserting its names).
    @inline(__always)
    private static func tag(_ hash: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: hash >> 32) }

    /// Always the first slot of a cache line (two slots each, the table
    /// aligned to lines): a probe that goes on past its home slot reads the
    /// line it has, where from the second slot of a line it missed the
    /// cache again on the next (6 of the ~316 L2 misses of a list of 100
    /// users not asked lately, cachegrind).
    @inline(__always)
    private static func home(_ tag: UInt32, _ size: Int) -> Int {
        Int(truncatingIfNeeded: (UInt64(tag) &* UInt64(size)) >> 32) & ~1
    }

    var isEmpty: Bool { count == 0 }
    /// Bytes held, roughly (for the build's memory budget).
    var footprint: Int { arenaCapacity + slots.count * MemoryLayout<Slot>.stride }
    /// Bytes of names held (offsets are 32-bit: the build is written long before 4 GiB).
    var nameBytes: Int { arenaCount }

    @inline(__always)
    static func hash(_ pid: UInt32, _ name: UnsafeRawBufferPointer) -> UInt64 {
        hash(pid, nameHash: nameHash(name))
    }

    /// The hash of `name` in project `pid`, from `nameHash(_:)`.
    @inline(__always)
    static func hash(_ pid: UInt32, nameHash: UInt64) -> UInt64 {
        topicstore_name_hash_project(pid, nameHash)
    }

    /// The project-independent part of a name's hash: what a thread that
    /// does not know project ids can compute ahead of the fold.
    @inline(__always)
    static func nameHash(_ name: UnsafeRawBufferPointer) -> UInt64 {
        var h = hashStart(name.count)
        var i = 0
        while i + 8 <= name.count {
            h = hashWord(h, name.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            i += 8
        }
        return hashEnd(h, tail: tail(name, from: i))
    }

    // The name hash's three steps (defined in C, `HeldList.h`, where a
    // list's lookups hash too), shared by both ways of reading a name
    // (`nameHash(_:)`, `nameHash(shortWords:count:)`): its length, each whole
    // 8-byte word, then the last 0-7 bytes as one word.
    @inline(__always)
    private static func hashStart(_ count: Int) -> UInt64 { topicstore_name_hash_start(count) }

    @inline(__always)
    private static func hashWord(_ h: UInt64, _ word: UInt64) -> UInt64 { topicstore_name_hash_word(h, word) }

    @inline(__always)
    private static func hashEnd(_ h: UInt64, tail: UInt64) -> UInt64 { topicstore_name_hash_end(h, tail) }

    /// The last 0-7 bytes of `name`, from `i`, as a little-endian word
    /// (`littleEndianTail`, which says why it reads them as it does).
    @inline(__always)
    private static func tail(_ name: UnsafeRawBufferPointer, from i: Int) -> UInt64 {
        guard let base = name.baseAddress else { return 0 }
        return (base + i).littleEndianTail(name.count - i)
    }

    /// Names of at most this many bytes are compared as two words (`shortWords`).
    static let shortName = 16

    /// The `n` ≤ 16 bytes at `p` as two little-endian words, zero beyond the
    /// name: two names of the same length are equal when their words are.
    /// Read only within the name's bytes, and, for a short String's copy on the
    /// stack, inside the two words it was stored as (`littleEndianWords`).
    @inline(__always)
    static func shortWords(_ p: UnsafeRawPointer, _ n: Int) -> (UInt64, UInt64) {
        p.littleEndianWords(n)
    }

    /// Whether the `name.count` bytes at `p` are `name`'s. Two words compared
    /// for a short name: `memcmp`, a call for the 5–15 bytes of a topic code,
    /// was a tenth of looking up a list's 100 codes (perf).
    @inline(__always)
    private static func sameBytes(_ p: UnsafeRawPointer, _ name: UnsafeRawBufferPointer) -> Bool {
        let n = name.count
        guard n > 0, let base = name.baseAddress else { return true }
        if n <= shortName { return shortWords(p, n) == shortWords(base, n) }
        return memcmp(p, base, n) == 0
    }

    /// `nameHash` of a name of at most `shortName` bytes, from its `shortWords`:
    /// the same value (the words are the 8-byte word the hash reads whole and
    /// the last bytes it reads as its tail), without reading the name's last
    /// bytes a second time (~20 instructions and a branch on the length of
    /// each name a list looks up).
    @inline(__always)
    static func nameHash(shortWords words: (UInt64, UInt64), count n: Int) -> UInt64 {
        topicstore_short_name_hash(words.0, words.1, n)
    }

    /// `nameHash` of a String's UTF-8: a small string's from its value's words
    /// (`smallUTF8Words`), as a topic code's hint for the fold is made,
    /// rather than from a copy of them on the stack, read back.
    static func nameHash(_ name: String) -> UInt64 {
        if let (words, count) = name.smallUTF8Words { return nameHash(shortWords: words, count: count) }
        return name.withUTF8Bytes { nameHash($0) }
    }

    /// Starts loading the slots where the lookups of names begin, so those
    /// lookups do not wait for memory: for each of `events` (`FoldHints`),
    /// the name hashes from `offset` to the end of its hints. One access to
    /// the table for them all (see `ProjectionWriter.prefetch`).
    func prefetch(_ pid: UInt32, hintsFrom offset: Int, of events: ProjectionWriter.FoldHintRun) {
        let table = UnsafeBufferPointer(slots)
        events.forEach { hints in
            var i = offset
            while i < hints.count {
                topicstore_prefetch(table.baseAddress! + Self.home(Self.tag(Self.hash(pid, nameHash: hints[i])), table.count))
                i += 1
            }
        }
    }

    /// The slot holding `name`, or the empty slot where it would go.
    @inline(__always)
    private func find(_ pid: UInt32, _ name: UnsafeRawBufferPointer, _ hash: UInt64) -> (found: Bool, slot: Int) {
        Self.find(UnsafeBufferPointer(slots), nameArena, pid, Self.tag(hash), name)
    }

    /// The slot of `slots` holding `name` of project `pid`, whose hash has `tag`,
    /// or the empty slot where it would go: the one probe every lookup makes.
    @inline(__always)
    private static func find(_ slots: UnsafeBufferPointer<Slot>, _ arena: UnsafeRawBufferPointer, _ pid: UInt32,
                             _ tag: UInt32, _ name: UnsafeRawBufferPointer) -> (found: Bool, slot: Int) {
        let n = name.count
        if n <= inlineName, let base = name.baseAddress {
            return find(slots, pid, tag, length: n, inline: shortWords(base, n))
        }
        return find(slots, arena, pid, tag, length: n) { sameBytes($0, name) }
    }

    /// `find` for a name of at most `inlineName` bytes whose `shortWords` are
    /// `words`: compared with its slot alone.
    @inline(__always)
    private static func find(_ slots: UnsafeBufferPointer<Slot>, _ pid: UInt32, _ tag: UInt32,
                             length: Int, inline words: (UInt64, UInt64)) -> (found: Bool, slot: Int) {
        let high = UInt32(truncatingIfNeeded: words.1)
        return probe(slots, pid, tag, length: length) { $0.low == words.0 && $0.high == high }
    }

    /// `find` for a name of `length` bytes that `matches` tells from the bytes at a pointer into the arena.
    @inline(__always)
    private static func find(_ slots: UnsafeBufferPointer<Slot>, _ arena: UnsafeRawBufferPointer, _ pid: UInt32,
                             _ tag: UInt32, length: Int, _ matches: (UnsafeRawPointer) -> Bool) -> (found: Bool, slot: Int) {
        probe(slots, pid, tag, length: length) { length == 0 || matches(arena.baseAddress! + Int($0.offset)) }
    }

    /// The probe every lookup makes: from the home slot of `tag` on, the slot
    /// whose tag, project and length are these and that `holds` says holds the
    /// name, or the empty slot where it would go.
    @inline(__always)
    private static func probe(_ slots: UnsafeBufferPointer<Slot>, _ pid: UInt32, _ tag: UInt32, length: Int,
                              _ holds: (Slot) -> Bool) -> (found: Bool, slot: Int) {
        let size = slots.count
        var b = home(tag, size)
        while true {
            let s = slots[b]
            if s.state == 0 { return (false, b) }
            if s.tag == tag, s.pid == pid, Int(s.length) == length, holds(s) { return (true, b) }
            b += 1
            if b == size { b = 0 }
        }
    }

    /// What the build holds for `name`: `.some(value)`, `.some(nil)` when it
    /// was removed, nil when the build never saw it.
    func lookup(_ pid: UInt32, _ name: String) -> UInt32?? {
        // The closure holds the table and the names, not the index: holding
        // the index, each lookup retained and released it (6% of a per-user
        // topic's count from the serving caches).
        // A small string (a per-user topic's code) is read from the String
        // value: through `withUTF8Bytes` its two words were stored on the
        // stack and loaded back (90 → 73 ns a per-user topic's count, loop).
        let ss = UnsafeBufferPointer(slots), a = nameArena
        if let (words, n) = name.smallUTF8Words, n <= Self.inlineName {
            return Self.answer(ss, Self.find(ss, pid, Self.shortTag(pid, words, n), length: n, inline: words))
        }
        return name.withUTF8Bytes { name in
            let n = name.count
            if n <= Self.inlineName, let base = name.baseAddress {
                let words = Self.shortWords(base, n)
                return Self.answer(ss, Self.find(ss, pid, Self.shortTag(pid, words, n), length: n, inline: words))
            }
            let tag = Self.tag(Self.hash(pid, name))
            return Self.answer(ss, Self.find(ss, a, pid, tag, name))
        }
    }

    /// The tag of a name of at most `shortName` bytes in project `pid`, from its `shortWords`.
    @inline(__always)
    static func shortTag(_ pid: UInt32, _ words: (UInt64, UInt64), _ count: Int) -> UInt32 {
        tag(hash(pid, nameHash: nameHash(shortWords: words, count: count)))
    }

    /// `lookup` for each of `names` in turn (a caller's Strings read in place
    /// from their array, or a `TopicCodeList`'s bytes), each name's index and
    /// answer handed to `visitor`, which returns false to stop. Nothing is
    /// retained per name: held for each lookup, the table and the names were
    /// retained and released each time (a third of looking up the 100 codes of
    /// a list). The visitor is a type, not a closure, so that a caller's
    /// handling is compiled into its lookup (through a closure, a call and a
    /// forwarding thunk per name).
    ///
    /// Names are taken `lookaheadGroup` at a time: each is hashed, its home
    /// slot asked of memory and, when short, its bytes kept as two words
    /// (`shortWords`; a small String's taken from its value, `NameList.shortWords`),
    /// then the group is probed. The slots of a list of
    /// per-user topics not asked lately are cache misses, which one probe after
    /// another waited for one after another.
    func lookupEach<Names: NameList, Visitor: NameLookupVisitor>(_ pid: UInt32, _ names: Names, _ visitor: inout Visitor) {
        let size = slots.count, group = Self.lookaheadGroup, short = Self.shortName, inline = Self.inlineName
        let ss = UnsafeBufferPointer(slots), a = nameArena
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 2 * group) { tagsAndLengths in
            withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 2 * group) { words in
                var start = 0
                while start < names.count {
                    let end = min(start + group, names.count)
                    for n in start..<end {
                        let k = n - start
                        let tag: UInt32
                        if let (kept, length) = names.shortWords(n) {
                            tagsAndLengths[group + k] = UInt32(length)
                            (words[2 * k], words[2 * k + 1]) = kept
                            tag = Self.shortTag(pid, kept, length)
                        } else {
                            tag = names.withName(n) { name -> UInt32 in
                                // A longer name is read again (from a String in place: it is not a small string).
                                tagsAndLengths[group + k] = UInt32(name.count)
                                if name.count <= short, let base = name.baseAddress {
                                    let kept = Self.shortWords(base, name.count)
                                    (words[2 * k], words[2 * k + 1]) = kept
                                    return Self.shortTag(pid, kept, name.count)
                                }
                                return Self.tag(Self.hash(pid, name))
                            }
                        }
                        tagsAndLengths[k] = tag
                        topicstore_prefetch(ss.baseAddress! + Self.home(tag, size))
                    }
                    for n in start..<end {
                        let k = n - start, length = Int(tagsAndLengths[group + k])
                        let answer: UInt32??
                        if length <= inline {
                            let kept = (words[2 * k], words[2 * k + 1])
                            answer = Self.answer(ss, Self.find(ss, pid, tagsAndLengths[k], length: length, inline: kept))
                        } else if length <= short {
                            let kept = (words[2 * k], words[2 * k + 1])
                            answer = Self.answer(ss, Self.find(ss, a, pid, tagsAndLengths[k], length: length) { Self.shortWords($0, length) == kept })
                        } else {
                            answer = names.withName(n) { Self.answer(ss, Self.find(ss, a, pid, tagsAndLengths[k], $0)) }
                        }
                        if !visitor.visit(n, answer) { return }
                    }
                    start = end
                }
            }
        }
    }

    /// Calls `body` with the table's slots, to read in place (`topicstore_gather_held`,
    /// under the lock of the index's owner).
    func withSlots<R>(_ body: (UnsafeBufferPointer<Slot>) throws -> R) rethrows -> R {
        try body(UnsafeBufferPointer(slots))
    }

    /// Names whose slots `lookupEach` asks for together.
    static let lookaheadGroup = 16

    /// `lookup`'s answer from `slots` for a name `find` found at `slot` (or did not).
    @inline(__always)
    private static func answer(_ slots: UnsafeBufferPointer<Slot>, _ slot: (found: Bool, slot: Int)) -> UInt32?? {
        guard slot.found else { return nil }
        return .some(slots[slot.slot].state == 1 ? slots[slot.slot].value : nil)
    }

    /// Sets `name` to `value`, or removes it (a tombstone) when `value` is nil.
    func set(_ pid: UInt32, _ name: String, _ value: UInt32?) {
        // A small string (a per-user topic's code) is read from the String
        // value, as `lookup` reads it: through `withUTF8Bytes` its words were
        // stored on the stack and read back, and its bytes hashed again.
        if let (words, n) = name.smallUTF8Words, n <= Self.inlineName {
            let tag = Self.shortTag(pid, words, n)
            let (found, b) = Self.find(UnsafeBufferPointer(slots), pid, tag, length: n, inline: words)
            withUnsafeBytes(of: words) { bytes in
                put(pid, UnsafeRawBufferPointer(rebasing: bytes[0..<n]), value, tag: tag, words: words, found: found, at: b)
            }
            return
        }
        name.withUTF8Bytes { bytes in
            let hash = Self.hash(pid, bytes)
            let (found, b) = find(pid, bytes, hash)
            var words = (UInt64(0), UInt64(0))
            if bytes.count <= Self.inlineName, let base = bytes.baseAddress { words = Self.shortWords(base, bytes.count) }
            put(pid, bytes, value, tag: Self.tag(hash), words: words, found: found, at: b)
        }
    }

    /// `set`'s write into slot `b`, which `find` said holds `bytes` (`found`)
    /// or is where they go; `words` are their `shortWords` when they are
    /// held in the slot (at most `inlineName` bytes), else zero.
    @inline(__always)
    private func put(_ pid: UInt32, _ bytes: UnsafeRawBufferPointer, _ value: UInt32?, tag: UInt32,
                     words: (UInt64, UInt64), found: Bool, at b: Int) {
        precondition(bytes.count <= Int(UInt16.max) && arenaCount + bytes.count <= Int(UInt32.max), "name index full")
        if found {
            slots[b].value = value ?? 0
            slots[b].state = value == nil ? 2 : 1
            return
        }
        slots[b] = Slot(low: words.0, high: UInt32(truncatingIfNeeded: words.1), offset: UInt32(arenaCount),
                        value: value ?? 0, tag: tag, pid: pid, length: UInt16(bytes.count),
                        state: value == nil ? 2 : 1)
        appendName(bytes)
        count += 1
        if count * 2 > slots.count { grow() }
    }

    /// Makes room for `names` names without growing on the way.
    func reserve(_ names: Int) {
        let size = names * 2 + 2
        if size > slots.count { grow(to: size) }
    }

    private func grow(to size: Int? = nil) {
        let old = slots
        let size = size ?? slots.count * 2
        precondition(size < 1 << 32, "name index too large")
        let new = Self.table(size)
        for s in old where s.state != 0 {
            var b = Self.home(s.tag, size)
            while new[b].state != 0 { b = b + 1 == size ? 0 : b + 1 }
            new[b] = s
        }
        slots = new
        old.deallocate()
    }

    /// The used slots in the order of their `topic_codes` keys in the form
    /// `form` (big-endian pid first, then, length first, the length, then
    /// the bytes, a prefix before its extensions). Sorted by radix
    /// (`sortByWords`) on the project and (length first) the length as one
    /// word, then the first 16 bytes of the name as two big-endian words;
    /// only names that share those read the rest of their bytes.
    func sortedSlots(_ form: ProjectionTables.TopicCodeOrder) -> [Slot] {
        var items: [WordKeyed] = []
        items.reserveCapacity(count)
        let a = nameArena, slots = UnsafeBufferPointer(slots)
        let lengthFirst = form == .byLength
        for (i, s) in slots.enumerated() where s.state != 0 {
            var prefix = (UInt64(0), UInt64(0))
            withUnsafeMutableBytes(of: &prefix) { p in
                let n = min(16, Int(s.length))
                if n > 0 { p.baseAddress!.copyMemory(from: a.baseAddress! + Int(s.offset), byteCount: n) }
            }
            let head = UInt64(s.pid) << 32 | (lengthFirst ? UInt64(s.length) : 0)
            items.append(WordKeyed(w0: head, w1: UInt64(bigEndian: prefix.0), w2: UInt64(bigEndian: prefix.1),
                                   payload: UInt64(s.length) << 32 | UInt64(i)))
        }
        let base = a.baseAddress
        // Names whose first 16 bytes are the same: the rest of their bytes, then the shorter first.
        items.sortByWords { l, r in
            let ln = Int(l.payload >> 32), rn = Int(r.payload >> 32), n = min(ln, rn)
            guard n > 16 else { return ln < rn }
            let x = slots[Int(UInt32(truncatingIfNeeded: l.payload))], y = slots[Int(UInt32(truncatingIfNeeded: r.payload))]
            let c = memcmp(base! + Int(x.offset) + 16, base! + Int(y.offset) + 16, n - 16)
            return c != 0 ? c < 0 : ln < rn
        }
        return items.map { slots[Int(UInt32(truncatingIfNeeded: $0.payload))] }
    }

    /// Calls `body` with each entry's `topic_codes` key in the form `form`
    /// (`Keys.code`) and value (nil: removed), in key order (`order` is
    /// `sortedSlots(form)`). A name no key of that form holds (validation lets
    /// none through) is an error.
    func forEach(in order: [Slot], _ form: ProjectionTables.TopicCodeOrder,
                 _ body: (UnsafeRawBufferPointer, UInt32?) throws -> Void) throws {
        var key = [UInt8](repeating: 0, count: 5 + Int(UInt16.max))
        let a = nameArena
        let head = form == .byLength ? 5 : 4
        try key.withUnsafeMutableBytes { k in
            for s in order {
                k.storeBytes(of: s.pid.bigEndian, toByteOffset: 0, as: UInt32.self)
                if form == .byLength {
                    guard (1...Keys.maxCodeKeyLength).contains(Int(s.length)) else {
                        throw ProjectionCorruption(place: "topic_codes/\(s.pid)", reason: "a code of \(s.length) bytes has no key")
                    }
                    k[4] = Keys.codeLengthByte(Int(s.length))
                }
                if s.length > 0 {
                    (k.baseAddress! + head).copyMemory(from: a.baseAddress! + Int(s.offset), byteCount: Int(s.length))
                }
                try body(UnsafeRawBufferPointer(rebasing: k[0..<head + Int(s.length)]), s.state == 1 ? s.value : nil)
            }
        }
    }

    func removeAll() {
        slots.deallocate()
        slots = Self.table(Self.initialSlots)
        arena.deallocate()
        arenaCapacity = Self.initialArena
        arena = .allocate(byteCount: arenaCapacity, alignment: 16)
        arenaCount = 0
        count = 0
    }
}

/// What a `ProjectionWriter` in build mode holds beyond its caches: the rows it
/// would otherwise write straight through (devices, topic codes) and the
/// removals a non-empty target needs.
final class BuildState {
    /// Whether the target tables were empty when the build (or its current
    /// round) began: then an entry the build does not hold does not exist,
    /// and no lookup goes to LMDB.
    var targetIsEmpty: Bool
    let memoryBudget: Int
    var topicCodes = NameIndex()
    /// Device records by project and ordinal, as their bytes.
    private(set) var devices = BuildDevices()
    /// The writer's membership slot (+ 1; 0: not held) of each device: an
    /// array index where a hash probe into a table of a million entries was.
    private var members = OrdinalColumns<Int32>(empty: 0)
    /// The writer's topic cache slot (+ 1; 0: not held) of each topic, by id.
    private var topics = TopicColumns<Int32>(empty: 0)
    /// Topics dropped since the last write (deleted from a non-empty target).
    var droppedTopics: [ProjectionWriter.TopicKey] = []
    var begun = false
    /// The project of the last event, with changes not yet in the writer's cache.
    /// Changed through the methods below, in place: each event asks for its
    /// project and most change its record (the next ordinal or topic id), and
    /// a copy of the tuple out and back (with an observer on it) retained and
    /// released its name and the build.
    private(set) var currentProject: (name: String, record: ProjectRecord, dirty: Bool)?
    /// The id of `currentProject`, read before every event a rebuild folds
    /// (`prefetch`), where reading it from the tuple copied the tuple.
    private(set) var currentProjectID: UInt32?

    /// The current project's record, when it is project `name`'s.
    @inline(__always)
    func currentRecord(ofProject name: String) -> ProjectRecord? {
        currentProject?.name == name ? currentProject?.record : nil
    }

    func setCurrentProject(_ name: String, _ record: ProjectRecord) {
        currentProject = (name, record, false)
        currentProjectID = record.id
    }

    func clearCurrentProject() {
        currentProject = nil
        currentProjectID = nil
    }

    /// Takes `record` as project `name`'s, marked to be written, when it is the
    /// current project; false when it is not.
    func update(currentProject name: String, _ record: ProjectRecord) -> Bool {
        guard currentProject?.name == name else { return false }
        if currentProject?.record != record {
            currentProject?.record = record
            currentProject?.dirty = true
            currentProjectID = record.id
        }
        return true
    }

    /// The current project's record as it is to be written, when it changed
    /// since it was last taken; marked unchanged from then on.
    func takeChangedCurrentProject() -> (name: String, record: ProjectRecord)? {
        guard let current = currentProject, current.dirty else { return nil }
        currentProject?.dirty = false
        return (current.name, current.record)
    }

    init(targetIsEmpty: Bool, memoryBudget: Int) {
        self.targetIsEmpty = targetIsEmpty
        self.memoryBudget = memoryBudget
    }

    func removeAll() {
        topicCodes = NameIndex()
        devices = BuildDevices()
        members = OrdinalColumns(empty: 0)
        topics = TopicColumns(empty: 0)
        droppedTopics = []
    }
}

extension BuildState {
    /// What the build holds for device `ordinal`: `.some(record)`, `.some(nil)`
    /// when it was deleted, nil when the build never wrote it.
    @inline(__always)
    func device(_ pid: UInt32, _ ordinal: UInt32) throws -> DeviceRecord?? {
        try devices.record(pid, ordinal)
    }

    /// Makes room for about `devices` devices in the first project's columns,
    /// so they do not grow by copying (a hint; they grow beyond it).
    func reserve(devices count: Int) {
        devices.reserve(devices: count)
        members.reserveFirstColumn(count)
    }

    /// Bytes held beyond the writer's caches, roughly.
    var footprint: Int {
        topicCodes.footprint
            + devices.footprint + (members.slots + topics.slots) * 4
    }

    /// The writer's membership slot of device `ordinal`, when the build holds one.
    @inline(__always)
    func memberSlot(_ pid: UInt32, _ ordinal: UInt32) -> Int? {
        guard let s = members.value(pid, ordinal), s != 0 else { return nil }
        return Int(s) - 1
    }

    /// The projects whose devices the build holds, ascending, each with its
    /// devices' membership slots (+ 1; 0: not held) by ordinal.
    func memberColumns() -> [(pid: UInt32, memberSlots: [Int32])] {
        zip(members.projects, members.columns).map { ($0, $1) }.sorted { $0.pid < $1.pid }
    }

    /// The topics' cache slots (+ 1; 0: not held) by project and id, as they are now.
    var topicSlotColumns: TopicColumns<Int32> { topics }

    /// The membership slots held, in key order (pid, ordinal): the order
    /// `device_topics` is written in, without a sort.
    func memberSlotsInKeyOrder() -> [Int] {
        var slots: [Int] = []
        slots.reserveCapacity(members.slots)
        members.forEachInKeyOrder { s in if s != 0 { slots.append(Int(s) - 1) } }
        return slots
    }

    /// The topic slots held, in key order (pid, topic id): the order `topics`
    /// is written in, without a sort.
    func topicSlotsInKeyOrder() -> [Int] {
        var slots: [Int] = []
        slots.reserveCapacity(topics.slots)
        topics.forEachInKeyOrder { s in if s != 0 { slots.append(Int(s) - 1) } }
        return slots
    }

    func setMemberSlot(_ pid: UInt32, _ ordinal: UInt32, _ slot: Int) {
        precondition(slot < Int(Int32.max), "membership slots exhausted")
        members.set(pid, ordinal, Int32(slot + 1))
    }

    /// The writer's cache slot of topic `tid`, when the build holds it.
    @inline(__always)
    func topicSlot(_ pid: UInt32, _ tid: UInt32) -> Int? {
        guard let s = topics.value(pid, tid), s != 0 else { return nil }
        return Int(s) - 1
    }

    func setTopicSlot(_ pid: UInt32, _ tid: UInt32, _ slot: Int) {
        precondition(slot < Int(Int32.max), "topic slots exhausted")
        topics.set(pid, tid, Int32(slot + 1))
    }

}

/// Values by project and a dense id (a device ordinal, a topic id): a value is
/// found by array index in its project's column; the last project asked is
/// kept at hand, since a run of events mostly stays in one project.
struct OrdinalColumns<Element> {
    /// Each project's values by ordinal, `empty` where nothing was set.
    private(set) var columns: [[Element]] = []
    /// The project of each column.
    private(set) var projects: [UInt32] = []
    /// Values allocated in all columns (set or `empty`).
    private(set) var slots = 0
    private var columnOfProject: [UInt32: Int] = [:]
    private var last: (pid: UInt32, column: Int)?
    private let empty: Element

    init(empty: Element) { self.empty = empty }

    @inline(__always)
    private mutating func column(_ pid: UInt32) -> Int? {
        if let last, last.pid == pid { return last.column }
        guard let c = columnOfProject[pid] else { return nil }
        last = (pid, c)
        return c
    }

    /// The value at `ordinal`, or nil beyond the column's end (never set).
    @inline(__always)
    mutating func value(_ pid: UInt32, _ ordinal: UInt32) -> Element? {
        guard let c = column(pid), Int(ordinal) < columns[c].count else { return nil }
        return columns[c][Int(ordinal)]
    }

    /// `body` applied to the value at `ordinal` where it is stored (no copy),
    /// or nil beyond the column's end (never set).
    @inline(__always)
    mutating func withValue<R>(_ pid: UInt32, _ ordinal: UInt32, _ body: (borrowing Element) -> R) -> R? {
        guard let c = column(pid), Int(ordinal) < columns[c].count else { return nil }
        return columns[c].withUnsafeBufferPointer { body($0[Int(ordinal)]) }
    }

    /// Capacity the next new column starts with (then back to none).
    private var reservation = 0

    /// Gives the first column created after this `count` values of capacity.
    mutating func reserveFirstColumn(_ count: Int) {
        if columns.isEmpty { reservation = count }
    }

    /// Sets the value at `ordinal`; returns what was there (`empty` when new).
    @discardableResult
    mutating func set(_ pid: UInt32, _ ordinal: UInt32, _ value: Element) -> Element {
        let (c, i) = place(pid, ordinal)
        let old = columns[c][i]
        columns[c][i] = value
        return old
    }

    /// Sets the value at `ordinal`, dropping what was there without copying it out.
    @inline(__always)
    mutating func update(_ pid: UInt32, _ ordinal: UInt32, _ value: consuming Element) {
        let (c, i) = place(pid, ordinal)
        columns[c][i] = value
    }

    /// The column and index of `ordinal`, the column created or extended as needed.
    @inline(__always)
    private mutating func place(_ pid: UInt32, _ ordinal: UInt32) -> (column: Int, index: Int) {
        let c: Int
        if let found = column(pid) { c = found } else {
            c = columns.count
            columns.append([])
            if reservation > 0 {
                columns[c].reserveCapacity(reservation)
                reservation = 0
            }
            projects.append(pid)
            columnOfProject[pid] = c
        }
        let i = Int(ordinal)
        if i >= columns[c].count {
            slots += i + 1 - columns[c].count
            if i == columns[c].count {
                columns[c].append(empty)  // the usual case: the next ordinal
            } else {
                columns[c].append(contentsOf: repeatElement(empty, count: i + 1 - columns[c].count))
            }
        }
        return (c, i)
    }

    /// Every value of project `pid`, ordinals ascending.
    func forEachValue(ofProject pid: UInt32, _ body: (Element) -> Void) {
        guard let c = columnOfProject[pid] else { return }
        columns[c].withUnsafeBufferPointer { column in for v in column { body(v) } }
    }

    /// Every value, projects in ascending id order, ordinals ascending.
    func forEachInKeyOrder(_ body: (Element) -> Void) {
        for (_, c) in columnOfProject.sorted(by: { $0.key < $1.key }) {
            columns[c].withUnsafeBufferPointer { column in for v in column { body(v) } }
        }
    }
}

/// Work done on another thread while the writer writes: `value()` waits for it.
final class Background<T>: @unchecked Sendable {
    private let group = DispatchGroup()
    private var result: T?

    init(_ work: @escaping @Sendable () -> T) {
        DispatchQueue.global().async(group: group) { [self] in result = work() }
    }

    func value() -> T {
        group.wait()
        return result!
    }

    /// Whether the work is done (`value()` would not wait).
    var isDone: Bool { group.wait(timeout: .now()) == .success }

    private let taken = Atomic<Bool>(false)

    /// The result, which this no longer holds (waiting for it): the caller's
    /// copy is the only one, so changing it copies nothing. Nil when it was
    /// taken already (by a copy of the value that asked for the work).
    func take() -> T? {
        group.wait()
        guard !taken.exchange(true, ordering: .acquiringAndReleasing) else { return nil }
        defer { result = nil }
        return result
    }
}

/// What a finished build round held, to be freed on another thread.
final class Garbage: @unchecked Sendable {
    private var values: [Any]
    init(_ values: [Any]) { self.values = values }
    func drop() { values = [] }
}

extension OrdinalColumns: Sendable where Element: Sendable {}
