import CIntrinsics
import Foundation
import Roaring

/// The serving process's directory of the topics its audiences named: for a
/// topic code, its id and where its members are (the slices it occupies, or,
/// for a topic of a few devices, the devices themselves), so that a send to
/// a list of per-user topics does not search three B-trees per topic (the
/// code, the topic record, the chunk): those searches were nearly all of
/// such an audience's time, and SQLite's index probes were as fast.
///
/// Filled by readers, emptied by the writer, and exact for every snapshot it
/// answers, as `RecipientCache` is:
/// - `heldThrough` is the sequence up to which the writer of this process has
///   reported what changed. The writer sets it when a write transaction begins
///   (dropping everything when another process wrote since) and after each
///   commit, when it also drops the entry of every topic the commit changed
///   (its record, its code, or any of its chunks).
/// - A reader offers what it read from a snapshot at sequence S only when S is
///   `heldThrough`: a commit after S that changed the topic has not been
///   reported yet, and will drop the entry when it is. The entry is valid
///   from S on.
/// - A reader at S takes an entry only when `validFrom` ≤ S ≤ `heldThrough`:
///   every change in that range dropped it, so it is the snapshot's.
/// Codes that do not exist are not held (their creation needs no report).
/// The live sets' chunks of a slice are held under the same rules, dropped
/// when a commit changes either of them in that slice. So is what the members
/// of a topic of a few devices reach, held beside them (see `offer`): the
/// writer also reports the devices whose records each commit wrote, and the
/// entries holding any of them are dropped.
///
/// A reader with no transaction (`heldMembers`, `gatherHeldMembers`) asks
/// for the newest committed snapshot: it names LMDB's newest transaction id,
/// and is answered at `heldThrough` only when the writer reported that
/// sequence as that very transaction (`heldTransaction`). A commit of any
/// process since, this writer's included until it reports, moves LMDB's id
/// past it, and the reader goes to a snapshot.
public final class TopicCache: @unchecked Sendable {
    /// What is held for a topic.
    public enum Placement: Sendable, Equatable {
        /// A single topic of at most `inlineMembers` devices: its members, ascending.
        case members(tid: UInt32, [UInt32])
        /// A larger one: the slices its chunks are in, ascending.
        case slices(tid: UInt32, [UInt16])

        var tid: UInt32 {
            switch self {
            case .members(let tid, _), .slices(let tid, _): return tid
            }
        }
    }

    /// Topics of at most this many devices are held with their members.
    public static let inlineMembers = 4

    /// A topic has at most this many bytes of its stored chunks held
    /// (`chunks(_:code:asOf:)`), within `chunkBudget` bytes in all: every
    /// slice of a topic that all 16M devices of a project are on (8 KiB each),
    /// so that the most popular topics at 10M devices are held too. At 256 KiB
    /// they were not, and an expression of two of them sought 306 chunks in the
    /// B-tree at every count.
    public static let mostChunkBytes = 2 << 20
    /// Bytes of chunks held at most, across topics and live sets (64 MiB).
    public static let chunkBudget = 64 << 20

    /// A topic's members held for the newest committed snapshot (`heldMembers`).
    public struct HeldMembers {
        /// The topic's project.
        public var pid: UInt32
        /// The snapshot's sequence.
        public var asOf: UInt64
        var members: InlineMembers

        /// Calls `body` with the members, ascending.
        public func withMembers<R>(_ body: (UnsafeBufferPointer<UInt32>) -> R) -> R {
            members.withValues(body)
        }
    }

    /// What is held for a topic, beside its `Validity`.
    private struct Entry {
        var placement: Placement
        /// The topic's stored chunks, a slot per slice of `placement` (none
        /// until a reader offers one), each held from when it was read: a
        /// commit that changes the topic in some slices drops those alone.
        var chunks: [HeldSlice?] = []
        /// Bytes of `chunks` (`mostChunkBytes` at most).
        var chunkBytes = 0
    }

    /// One slice's stored chunk of a topic, copied from a snapshot at
    /// `validFrom`, and held from then on until a commit changes it.
    struct HeldSlice {
        var chunk: TopicChunks
        var validFrom: UInt64
    }

    /// The part of an entry a count of a topic of a few devices reads: from
    /// when it holds, and the members. 32 bytes, two to a cache line, apart
    /// from the rest: the whole entry (56 bytes) was in two lines for about
    /// half of the entries, and a list of users not asked lately reads one
    /// entry per user.
    struct Validity {
        /// The first sequence the entry holds for; `UInt64.max` when dropped.
        var validFrom: UInt64
        /// A placement's members again, outside its array: a send to a list of
        /// per-user topics reads them without retaining and releasing the array
        /// (a third of the gathering's time).
        var members: InlineMembers

        /// `reaches` (0: not known) is what each of a placement's members reaches.
        init(_ placement: Placement, reaches: UInt32, validFrom: UInt64) {
            self.validFrom = validFrom
            switch placement {
            case .members(_, let m): members = InlineMembers(m, reaches: reaches)
            case .slices(_, let slices): members = slices.isEmpty ? InlineMembers([]) : InlineMembers()
            }
        }
    }

    /// The recipient cache's lock when made `sharingLockWith` it.
    let lock: CacheLock
    /// That recipient cache: a topic held with its members holds what each
    /// reaches as it tells it for the snapshot offered (see `offer`).
    private let recipients: RecipientCache?
    // Everything below is guarded by `lock`.
    /// (pid, code) → index in `entries`. An index stays with its code: a
    /// dropped entry is refilled in place.
    private let codes = NameIndex()
    /// `capacity` entries at most, each in two parts at the same index, in
    /// memory on 2 MiB pages: the entries of a list's per-user topics not
    /// asked lately are read at random.
    private let entries: HugePageBuffer<Entry>
    private let validity: HugePageBuffer<Validity>
    /// pid << 32 | topic id → index in `entries`, for the writer's drops.
    private var byTopic: [UInt64: Int] = [:]
    /// pid << 32 | device ordinal → the entries holding what that device
    /// reaches (those held with their members and their reach), for the
    /// writer's drops when the device's record changes.
    private var byDevice: [UInt64: EntryIndices] = [:]
    private var heldThrough: UInt64?
    /// The LMDB transaction id of the committed snapshot at `heldThrough`, when
    /// the writer knows it (nil otherwise).
    private var heldTransaction: Int?
    /// Projects' ids by name, as readers found them: a project keeps its id
    /// in a file for ever, so these are dropped only with everything.
    private var projectIDs: [String: UInt32] = [:]
    /// The project found last: a serving process mostly hears of one, and
    /// comparing its name costs less than hashing it (SipHash was a tenth of a
    /// per-user topic's count).
    private var lastProject: (name: String, pid: UInt32)?
    /// pid → by slice, the live sets' chunks of that slice (`heldLive`), iOS's
    /// then Android's, an empty one where the snapshot has none. A reader takes
    /// a project's array once per count (copied on write after that), where a
    /// lock per slice was taken 153 times by a count at 10M devices.
    private var live: [UInt32: [LiveSlot?]] = [:]
    /// Bytes of the chunks held, topics' and live sets' (`chunkBudget` at most).
    private var chunkBytes = 0
    /// Entries above which the cache starts afresh (each about 200 bytes with
    /// its index slots and arrays: some 50 MB at the default 262,144).
    private let capacity: Int

    public convenience init() { self.init(capacity: 1 << 18) }

    /// A directory that takes `recipients`' lock as its own: a per-user
    /// topic's count then reads both under one lock (`heldLiveCounts`), where
    /// it took each cache's own in turn (132 → 122 ns a count, loop over the
    /// 1M benchmark store). Only `heldLiveCounts` reads one cache from the
    /// other, the lock taken once; neither runs its callers' code with it held.
    ///
    /// The directory then also holds what the members of a topic of a few
    /// devices reach (their live iOS or Android token, or none), so that a
    /// list of such topics is counted without the recipient cache's cells.
    public convenience init(sharingLockWith recipients: RecipientCache) {
        self.init(capacity: 1 << 18, sharingLockWith: recipients)
    }

    init(capacity: Int, sharingLockWith recipients: RecipientCache? = nil) {
        self.capacity = capacity
        self.lock = recipients?.lock ?? CacheLock()
        self.recipients = recipients
        entries = HugePageBuffer(capacity: capacity)
        validity = HugePageBuffer(capacity: capacity)
    }

    /// The sequence through which the writer reported its changes (nil: none yet).
    public var heldSequence: UInt64? { lock.withLock { heldThrough } }

    /// Topics held (dropped ones included until refilled).
    public var count: Int { lock.withLock { entries.count } }

    // MARK: Readers

    /// Where topic `code` of project `pid` is in a snapshot at sequence `asOf`, when held for it.
    public func placement(_ pid: UInt32, code: String, asOf: UInt64) -> Placement? {
        lock.withLock {
            guard let held = heldThrough, asOf <= held, let index = codes.lookup(pid, code), let i = index else { return nil }
            // Read in place: a copy of the entry retained and released its placement's array.
            return validity[Int(i)].validFrom <= asOf ? entries[Int(i)].placement : nil
        }
    }

    /// The members of topic `code` of project `project` in the newest committed
    /// snapshot, with that snapshot's sequence and the project's id, when LMDB's
    /// newest transaction is `tip` and the cache holds the topic for it with its
    /// members (a topic of a few devices); nil otherwise (read a snapshot then).
    /// Copied out as values: no array is retained.
    public func heldMembers(project: String, code: String, tip: Int) -> HeldMembers? {
        lock.withLock { heldMembersLocked(project: project, code: code, tip: tip) }
    }

    /// `heldMembers` with the live iOS and Android devices among them, as
    /// held beside them (a directory sharing a recipient cache holds that);
    /// nil when not held. A per-user topic's count then reads one entry, and
    /// no cell of the recipient cache.
    func heldLiveCounts(project: String, code: String, tip: Int) -> (held: HeldMembers, ios: Int, android: Int)? {
        lock.withLock {
            guard let held = heldMembersLocked(project: project, code: code, tip: tip),
                  let (ios, android) = held.members.liveCounts else { return nil }
            return (held, ios, android)
        }
    }

    /// `heldMembers` with the lock held.
    func heldMembersLocked(project: String, code: String, tip: Int) -> HeldMembers? {
        guard heldTransaction == tip, let asOf = heldThrough, let pid = projectIDLocked(project),
              let index = codes.lookup(pid, code), let i = index.map(Int.init),
              validity[i].validFrom <= asOf, validity[i].members.isAll else { return nil }
        return HeldMembers(pid: pid, asOf: asOf, members: validity[i].members)
    }

    /// `gatherMembers` for the newest committed snapshot, when LMDB's newest
    /// transaction is `tip`: the project's id and the snapshot's sequence when
    /// every topic of `codes` was gathered; nil otherwise (some not held, or
    /// held by their slices, or the cache not at that snapshot), with
    /// `gathered` to be discarded.
    public func gatherHeldMembers(project: String, codes: [String], tip: Int,
                                  into gathered: inout GatheredMembers) -> (pid: UInt32, asOf: UInt64)? {
        codes.withUnsafeBufferPointer { gatherHeld(project: project, StringNames(strings: $0), tip: tip, into: &gathered) }
    }

    /// `gatherHeldMembers` of codes given as bytes.
    public func gatherHeldMembers(project: String, codes: TopicCodeList, tip: Int,
                                  into gathered: inout GatheredMembers) -> (pid: UInt32, asOf: UInt64)? {
        codes.withNames { gatherHeld(project: project, $0, tip: tip, into: &gathered) }
    }

    private func gatherHeld<Names: NameList>(project: String, _ names: Names, tip: Int,
                                             into gathered: inout GatheredMembers) -> (pid: UInt32, asOf: UInt64)? {
        lock.withLock {
            guard heldTransaction == tip, let asOf = heldThrough, let pid = projectIDLocked(project) else { return nil }
            if let all = gatherShortLocked(pid, names, asOf: asOf, into: &gathered) { return all ? (pid, asOf) : nil }
            let missed = gatherLocked(pid, names, asOf: asOf, into: &gathered, stoppingAtFirstMiss: true)
            return missed.isEmpty ? (pid, asOf) : nil
        }
    }

    /// `gatherLocked` stopping at the first miss, for names of at most
    /// `NameIndex.inlineName` bytes (a per-user topic's code), in C
    /// (`topicstore_gather_held`): whether every name was gathered; nil, with
    /// nothing gathered, when one is longer. The same lookups and gathering
    /// as `lookupEach` with `EntryFinder` then `gatherLocked`'s loop, which
    /// the Swift compiler made 190 instructions a name of a held list of 100
    /// (overflow and bounds checks, the answer's two optionals, spills).
    /// Small Strings are read by C from their values: copying their words
    /// out in Swift first cost 27 instructions a name.
    private func gatherShortLocked<Names: NameList>(_ pid: UInt32, _ names: Names, asOf: UInt64,
                                                    into gathered: inout GatheredMembers) -> Bool? {
        guard Self.validityMatchesC else { return nil }
        let n = names.count
        if let strings = names.stringValues {
            let answer = gatherInC(n, asOf: asOf, into: &gathered) { slots, entries, found, values, reaches, count, limit in
                topicstore_gather_held_strings(slots.baseAddress, slots.count, pid, strings, n, entries.baseAddress, asOf,
                                               found, values, reaches, &count, limit)
            }
            // -1: a String that is not small, or longer than a slot holds: read as bytes below.
            if answer >= 0 { return answer == n }
        }
        return withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 2 * n) { words -> Bool? in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: n) { lengths -> Bool? in
                for i in 0..<n {
                    guard let (w, count) = names.inlineWords(i) else { return nil }
                    words[2 * i] = w.0
                    words[2 * i + 1] = w.1
                    lengths[i] = UInt8(truncatingIfNeeded: count)
                }
                return gatherInC(n, asOf: asOf, into: &gathered) { slots, entries, found, values, reaches, count, limit in
                    topicstore_gather_held(slots.baseAddress, slots.count, pid, words.baseAddress, lengths.baseAddress, n,
                                           entries.baseAddress, asOf, found, values, reaches, &count, limit)
                } == n
            }
        }
    }

    /// Calls `gather` with what a list's `n` names are gathered through in C:
    /// the name table, the entries as C reads them, room for `n` entries found,
    /// and `gathered`'s memory; returns what it returns.
    private func gatherInC(_ n: Int, asOf: UInt64, into gathered: inout GatheredMembers,
                           _ gather: (UnsafeBufferPointer<NameIndex.Slot>, UnsafeBufferPointer<topicstore_held_entry>,
                                      UnsafeMutablePointer<UnsafePointer<topicstore_held_entry>?>,
                                      UnsafeMutablePointer<UInt32>, UnsafeMutablePointer<UInt8>, inout Int, Int) -> Int) -> Int {
        withUnsafeTemporaryAllocation(of: UnsafePointer<topicstore_held_entry>?.self, capacity: max(n, 1)) { found in
            codes.withSlots { slots in
                validity.withUnsafeBufferPointer { validity in
                    validity.withMemoryRebound(to: topicstore_held_entry.self) { entries in
                        gathered.withUnsafeStorage { values, reaches, count, limit in
                            gather(slots, entries, found.baseAddress!, values, reaches, &count, limit)
                        }
                    }
                }
            }
        }
    }

    /// Whether `Validity` is laid out as `topicstore_held_entry`, which
    /// `gatherShortLocked` reads it as (checked once; `HeldListTests` too).
    static let validityMatchesC: Bool = {
        MemoryLayout<Validity>.stride == MemoryLayout<topicstore_held_entry>.stride
            && MemoryLayout<Validity>.offset(of: \Validity.validFrom) == 0
            && MemoryLayout<Validity>.offset(of: \Validity.members) == 8
            && InlineMembers.layoutMatchesC
    }()

    /// Notes that project `name` has id `pid` (as a snapshot of this store's file holds it).
    public func noteProject(_ name: String, id pid: UInt32) {
        lock.withLock {
            if projectIDs[name] == nil { projectIDs[name] = pid }
        }
    }

    /// Project `name`'s id, if a reader noted it (called with the lock held).
    private func projectIDLocked(_ name: String) -> UInt32? {
        if let last = lastProject, last.name == name { return last.pid }
        guard let pid = projectIDs[name] else { return nil }
        lastProject = (name, pid)
        return pid
    }

    /// Gathers into `gathered`, under one lock, the members of each topic of
    /// `codes` held with its members for a snapshot at `asOf` (a send to a list
    /// of per-user topics; a topic with no member left gathers nothing), with
    /// what they reach where that is held. Returns the indices into `codes` it
    /// did not gather (not held, held by its slices, or not fitting): look
    /// those up one by one.
    public func gatherMembers(_ pid: UInt32, codes: [String], asOf: UInt64, into gathered: inout GatheredMembers) -> [Int] {
        lock.withLock {
            guard let held = heldThrough, asOf <= held else { return Array(codes.indices) }
            return codes.withUnsafeBufferPointer { strings in
                let names = StringNames(strings: strings)
                if let missed = gatherEachShortLocked(pid, names, asOf: asOf, into: &gathered) { return missed }
                return gatherLocked(pid, names, asOf: asOf, into: &gathered, stoppingAtFirstMiss: false)
            }
        }
    }

    /// `gatherLocked` of every name, in C (`topicstore_gather_each_held_string`),
    /// when every one is a small String of at most `NameIndex.inlineName` bytes:
    /// the indices not gathered; nil, with nothing gathered, otherwise.
    private func gatherEachShortLocked(_ pid: UInt32, _ names: StringNames, asOf: UInt64,
                                       into gathered: inout GatheredMembers) -> [Int]? {
        guard Self.validityMatchesC, let strings = names.stringValues else { return nil }
        let n = names.count
        return withUnsafeTemporaryAllocation(of: Int.self, capacity: max(n, 1)) { missed -> [Int]? in
            let count = gatherInC(n, asOf: asOf, into: &gathered) { slots, entries, found, values, reaches, gatheredCount, limit in
                topicstore_gather_each_held_string(slots.baseAddress, slots.count, pid, strings, n, entries.baseAddress, asOf,
                                                   found, values, reaches, &gatheredCount, limit, missed.baseAddress)
            }
            return count < 0 ? nil : Array(missed[..<count])
        }
    }

    /// `gatherMembers` with the lock held; with `stoppingAtFirstMiss`, only the
    /// first index not gathered is returned.
    ///
    /// The codes are looked up first, each entry found asked of memory, and
    /// gathered after: the entries of a list's per-user topics not asked
    /// lately are cache misses, which gathered as each code was found were
    /// waited for one after another.
    private func gatherLocked<Names: NameList>(_ pid: UInt32, _ names: Names, asOf: UInt64,
                              into gathered: inout GatheredMembers, stoppingAtFirstMiss: Bool) -> [Int] {
        var rest: [Int] = []
        validity.withUnsafeBufferPointer { validity in
            withUnsafeTemporaryAllocation(of: Int.self, capacity: names.count) { found in
                // Each code's entry, -1 where the code is not held; with `stoppingAtFirstMiss`,
                // up to the first code not held.
                var finder = EntryFinder(found: found, validity: validity, stoppingAtFirstMiss: stoppingAtFirstMiss)
                codes.lookupEach(pid, names, &finder)
                gathered.withAppender { appender in
                    for c in 0..<finder.looked {
                        let i = found[c]
                        guard i >= 0, validity[i].validFrom <= asOf, validity[i].members.isAll,
                              appender.append(validity[i].members) else {
                            rest.append(c)
                            if stoppingAtFirstMiss { return }
                            continue
                        }
                    }
                }
            }
        }
        return rest
    }

    /// Notes each code's entry as the lookups find it (-1 where the code is
    /// not held) and asks memory for the entry; with `stoppingAtFirstMiss`,
    /// stops at the first code not held.
    private struct EntryFinder: NameLookupVisitor {
        let found: UnsafeMutableBufferPointer<Int>
        let validity: UnsafeBufferPointer<Validity>
        let stoppingAtFirstMiss: Bool
        /// Codes looked up so far.
        var looked = 0

        mutating func visit(_ c: Int, _ index: UInt32??) -> Bool {
            looked = c + 1
            guard let index, let i = index.map(Int.init) else {
                found[c] = -1
                return !stoppingAtFirstMiss
            }
            found[c] = i
            topicstore_prefetch(validity.baseAddress! + i)
            return true
        }
    }

    /// The stored chunks of topic `code` of project `pid` held for a snapshot
    /// at sequence `asOf`, slice by slice, when the topic's placement is held
    /// for it: an OR counted in place then seeks only the slices not held (at
    /// 10M devices, three of every four B-tree searches of a count of three
    /// topics were for their chunks, and most of its time).
    public func chunks(_ pid: UInt32, code: String, asOf: UInt64) -> HeldTopicChunks? {
        lock.withLock {
            guard let held = heldThrough, asOf <= held, let index = codes.lookup(pid, code), let i = index,
                  validity[Int(i)].validFrom <= asOf, !entries[Int(i)].chunks.isEmpty else { return nil }
            return HeldTopicChunks(slots: entries[Int(i)].chunks, asOf: asOf)
        }
    }

    /// A topic's chunks as the directory held them for one snapshot: a slot
    /// per slice of its placement. Valid while this value lives.
    public struct HeldTopicChunks {
        fileprivate let slots: [HeldSlice?]
        fileprivate let asOf: UInt64

        /// The slices of the placement (`chunks(_:code:asOf:)` held it).
        public var count: Int { slots.count }

        /// The chunk of the placement's slice `i` when held for the snapshot;
        /// nil when it is to be read from the snapshot.
        @inline(__always)
        public subscript(i: Int) -> UnsafeRawBufferPointer? {
            guard let slot = slots[i], slot.validFrom <= asOf else { return nil }
            return slot.chunk[0]
        }
    }

    /// Offers stored chunks of topic `code` (id `tid`) as read from a snapshot
    /// at sequence `readAt`: `read` pairs an index into the slices of the
    /// placement held for the topic with that slice's chunk. Taken only at the
    /// sequence the writer has reported through, for an entry held from then
    /// on, for slices not held already, within the topic's and the
    /// directory's budgets. The chunks wanted are copied between two holds of
    /// the lock, which the serving caches' readers share.
    public func offerChunks(_ pid: UInt32, code: String, tid: UInt32,
                            _ read: [(index: Int, chunk: UnsafeRawBufferPointer)], readAt: UInt64) {
        func entry() -> (index: Int, slices: Int)? {
            guard heldThrough == readAt, let index = codes.lookup(pid, code), let i = index.map(Int.init),
                  validity[i].validFrom <= readAt, case .slices(tid, let slices) = entries[i].placement else { return nil }
            return (i, slices.count)
        }
        let wanted: [(index: Int, chunk: UnsafeRawBufferPointer)] = lock.withLock {
            guard let (i, slices) = entry() else { return [] }
            var room = min(Self.mostChunkBytes - entries[i].chunkBytes, Self.chunkBudget - chunkBytes)
            return read.filter { r in
                guard r.index < slices, entries[i].chunks.isEmpty || entries[i].chunks[r.index] == nil,
                      r.chunk.count < room else { return false }
                room -= r.chunk.count + 1
                return true
            }
        }
        guard !wanted.isEmpty else { return }
        let copies = wanted.map { (index: $0.index, chunk: TopicChunks([$0.chunk])) }
        lock.withLock {
            guard let (i, slices) = entry() else { return }
            if entries[i].chunks.count != slices { entries[i].chunks = Array(repeating: nil, count: slices) }
            for (j, chunk) in copies where entries[i].chunks[j] == nil {
                let size = chunk.byteCount
                guard entries[i].chunkBytes + size <= Self.mostChunkBytes, chunkBytes + size <= Self.chunkBudget else { break }
                entries[i].chunks[j] = HeldSlice(chunk: chunk, validFrom: readAt)
                entries[i].chunkBytes += size
                chunkBytes += size
            }
        }
    }

    /// Drops the chunks held for entry `i` (called with the lock held).
    private func dropChunks(of i: Int) {
        chunkBytes -= entries[i].chunkBytes
        entries[i].chunks = []
        entries[i].chunkBytes = 0
    }

    /// The live sets' chunks held for one slice, from the sequence `validFrom` on.
    struct LiveSlot {
        var chunks: TopicChunks
        var validFrom: UInt64
    }

    /// The live sets' chunks the directory holds for project `pid`, for a
    /// snapshot at sequence `asOf` (nil: none can be, the writer has not
    /// reported it): taken under one lock for a whole count.
    public struct HeldLive {
        fileprivate let slots: [LiveSlot?]
        fileprivate let asOf: UInt64

        /// Both live sets' chunks in slice `high`, when held for the snapshot:
        /// iOS's then Android's, an empty one where the snapshot has none. A
        /// count then searches no B-tree for them (a quarter of a mid topic's
        /// count at 1M devices). Valid while this value lives.
        public func chunks(_ high: UInt16) -> TopicChunks? {
            guard Int(high) < slots.count, let slot = slots[Int(high)], slot.validFrom <= asOf else { return nil }
            return slot.chunks
        }
    }

    /// The live sets' chunks held for project `pid` for a snapshot at `asOf`:
    /// each was held from its `validFrom` through `heldThrough` (every commit
    /// in between that changed its slice dropped it), so for `asOf` when it
    /// is at or after `validFrom`.
    public func heldLive(_ pid: UInt32, asOf: UInt64) -> HeldLive? {
        lock.withLock {
            guard let held = heldThrough, asOf <= held, let slots = live[pid] else { return nil }
            return HeldLive(slots: slots, asOf: asOf)
        }
    }

    /// `heldLive(pid, asOf:)?.chunks(high)`.
    public func liveChunks(_ pid: UInt32, _ high: UInt16, asOf: UInt64) -> TopicChunks? {
        heldLive(pid, asOf: asOf)?.chunks(high)
    }

    /// Offers the live sets' chunks of slice `high` (as `HeldLive.chunks` gives
    /// them), read from a snapshot at sequence `readAt`; taken only at the
    /// sequence the writer has reported through, within the budget.
    public func offerLiveChunks(_ pid: UInt32, _ high: UInt16, _ chunks: TopicChunks, readAt: UInt64) {
        lock.withLock {
            let i = Int(high)
            guard heldThrough == readAt, chunks.count == 2, chunkBytes + chunks.byteCount <= Self.chunkBudget else { return }
            var slots = live.removeValue(forKey: pid) ?? []  // taken out: changed in place unless a reader holds it
            if slots.count <= i { slots.append(contentsOf: repeatElement(nil, count: i + 1 - slots.count)) }
            if slots[i] == nil {
                slots[i] = LiveSlot(chunks: chunks, validFrom: readAt)
                chunkBytes += chunks.byteCount
            }
            live[pid] = slots
        }
    }

    /// Offers where topic `code` is, as read from a snapshot at sequence `readAt`;
    /// taken only when that is the sequence the writer has reported through.
    ///
    /// A directory sharing a recipient cache holds a topic's few members with
    /// what each reaches, which that cache tells for the same snapshot (under
    /// the lock they share); a topic whose members it cannot tell that for (it
    /// is not filled yet, or a record changed since) is not held: it is
    /// offered again by the next count that reads it.
    public func offer(_ pid: UInt32, code: String, _ placement: Placement, readAt: UInt64) {
        lock.withLock {
            guard heldThrough == readAt else { return }
            var reaches: UInt32 = 0
            if let recipients, case .members(_, let members) = placement, !members.isEmpty {
                guard let known = members.withUnsafeBufferPointer({ recipients.reachesLocked(pid, members: $0, asOf: readAt) })
                else { return }
                reaches = known
            }
            let key = UInt64(pid) << 32 | UInt64(placement.tid)
            if let index = codes.lookup(pid, code), let i = index.map(Int.init) {
                if validity[i].validFrom <= readAt { return }  // held already, for as long or longer
                let old = entries[i].placement.tid
                if old != placement.tid, byTopic[UInt64(pid) << 32 | UInt64(old)] == i {
                    byTopic[UInt64(pid) << 32 | UInt64(old)] = nil
                }
                dropChunks(of: i)
                noteDevices(pid, of: i, holding: false)
                entries[i] = Entry(placement: placement)
                validity[i] = Validity(placement, reaches: reaches, validFrom: readAt)
                noteDevices(pid, of: i, holding: true)
                byTopic[key] = i
                return
            }
            if entries.count >= capacity { dropEntries() }
            codes.set(pid, code, UInt32(entries.count))
            byTopic[key] = entries.count
            entries.append(Entry(placement: placement))
            validity.append(Validity(placement, reaches: reaches, validFrom: readAt))
            noteDevices(pid, of: entries.count - 1, holding: true)
        }
    }

    /// Notes in `byDevice` that entry `i` of project `pid` holds (or no longer
    /// holds) what its members reach, when it holds that (called with the lock held).
    private func noteDevices(_ pid: UInt32, of i: Int, holding: Bool) {
        let members = validity[i].members
        guard members.isAll, members.reaches != 0 else { return }
        members.withValues { ordinals in
            for ordinal in ordinals {
                let key = UInt64(pid) << 32 | UInt64(ordinal)
                if holding {
                    byDevice[key, default: EntryIndices()].insert(i)
                } else if var held = byDevice.removeValue(forKey: key) {
                    held.remove(i)
                    if !held.isEmpty { byDevice[key] = held }
                }
            }
        }
    }

    // MARK: The writer

    /// A write transaction begins on a store at `sequence`, the committed
    /// snapshot `snapshot` (LMDB's transaction id; or the writer is prepared, or
    /// takes over another generation, there): anything held for another
    /// sequence is dropped (another process wrote), and readers at `sequence`
    /// may offer.
    func beginWrite(at sequence: UInt64, snapshot: Int? = nil) {
        lock.withLock {
            if heldThrough != sequence {
                forgetAll()
                heldThrough = sequence
            }
            heldTransaction = snapshot
        }
    }

    /// A chunk of a topic a commit rewrote and left holding devices: the
    /// topic (pid << 32 | topic id) and the slice.
    struct ChangedSlice {
        var topic: UInt64
        var high: UInt16
    }

    /// A transaction that began at `from` committed through `through`, changing
    /// `topics` (pid << 32 | topic id, in any order, repeats allowed: their
    /// records, codes, or chunks they left), the chunks of `topicSlices` (a
    /// topic held with those slices keeps the chunks of its other slices; one
    /// held otherwise is dropped), the live sets' chunks of `liveSlices`
    /// (pid << 32 | slice) and the records of `devices` (pid << 32 | ordinal:
    /// what they reach may have changed); it is LMDB's transaction
    /// `transaction` when given, which readers without a transaction of their
    /// own may then be answered for.
    func didCommit(changing topics: [UInt64], topicSlices: [ChangedSlice] = [], liveSlices: [UInt64] = [],
                   devices: [UInt64] = [], from: UInt64, through: UInt64, transaction: Int? = nil) {
        lock.withLock {
            guard heldThrough == from else { return forgetAll() }
            for key in liveSlices {
                let pid = UInt32(truncatingIfNeeded: key >> 32), i = Int(key & 0xFFFF)
                guard var slots = live.removeValue(forKey: pid) else { continue }
                if i < slots.count, let dropped = slots[i] {
                    chunkBytes -= dropped.chunks.byteCount
                    slots[i] = nil
                }
                live[pid] = slots
            }
            if !byTopic.isEmpty {
                for key in topics {
                    if let i = byTopic.removeValue(forKey: key) {
                        validity[i].validFrom = .max
                        dropChunks(of: i)
                    }
                }
                for change in topicSlices {
                    guard let i = byTopic[change.topic] else { continue }
                    // Held in its slices, one of them changed: that chunk alone goes. A slice
                    // it was not held in (it has devices there now), or a topic held with its
                    // members: the placement itself changed.
                    guard case .slices(_, let slices) = entries[i].placement,
                          case let (found, j) = DeviceTopics.search16(slices, change.high), found else {
                        byTopic[change.topic] = nil
                        validity[i].validFrom = .max
                        dropChunks(of: i)
                        continue
                    }
                    if j < entries[i].chunks.count, let dropped = entries[i].chunks[j] {
                        entries[i].chunkBytes -= dropped.chunk.byteCount
                        chunkBytes -= dropped.chunk.byteCount
                        entries[i].chunks[j] = nil
                    }
                }
            }
            if !byDevice.isEmpty {
                for key in devices {
                    byDevice[key]?.forEach { validity[$0].validFrom = .max }
                }
            }
            heldThrough = through
            heldTransaction = transaction
        }
    }

    /// LMDB transaction `transaction` committed on the snapshot just before it
    /// and changed no projection (a write of the auxiliary tables): what is held
    /// for that snapshot holds for this one, if the writer had reported it.
    public func didCommitBeside(transaction: Int) {
        lock.withLock {
            if heldTransaction == transaction - 1 { heldTransaction = transaction }
        }
    }

    /// Drops everything: readers go to their snapshots until the writer reports again.
    public func forget() { lock.withLock { forgetAll() } }

    /// Drops everything (called with the lock held); readers go to their snapshots.
    private func forgetAll() {
        dropEntries()
        projectIDs.removeAll()
        lastProject = nil
        heldThrough = nil
        heldTransaction = nil
    }

    /// Drops every entry, keeping what the writer reported (called with the lock held).
    private func dropEntries() {
        codes.removeAll()
        entries.removeAll()
        validity.removeAll()
        byTopic.removeAll()
        byDevice.removeAll()
        live.removeAll()
        chunkBytes = 0
    }
}

/// At most `TopicCache.inlineMembers` devices, in place: all of a topic's
/// (`isAll`), or none held (a topic held by its slices); with what each
/// reaches, when known.
struct InlineMembers {
    private var values: (UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0)
    private var count: UInt8 = 0
    private(set) var isAll = false
    /// What each member reaches, one byte each from the lowest: a
    /// `RecipientCache.Reach` (`.ios`, `.android`, `.unreachable`), or 0 for
    /// every member when not known. (Laid out after the flags: 24 bytes in all.)
    private(set) var reaches: UInt32 = 0

    /// None held.
    init() {}

    /// All of a topic's members (none: a topic everyone left), with what they
    /// reach (`reaches`, as `RecipientCache.reachesLocked` gives it; 0: not known).
    init(_ members: [UInt32], reaches: UInt32 = 0) {
        guard members.count <= TopicCache.inlineMembers else { return }
        withUnsafeMutableBytes(of: &values) { raw in
            for (i, m) in members.enumerated() { raw.storeBytes(of: m, toByteOffset: 4 * i, as: UInt32.self) }
        }
        count = UInt8(members.count)
        isAll = true
        self.reaches = reaches
    }

    /// Whether the fields sit where `topicstore_held_entry` has them, 8 bytes
    /// into an entry: the four values, the count, the flag, the reaches.
    static var layoutMatchesC: Bool {
        MemoryLayout<InlineMembers>.offset(of: \InlineMembers.values) == 0
            && MemoryLayout<InlineMembers>.offset(of: \InlineMembers.count) == 16
            && MemoryLayout<InlineMembers>.offset(of: \InlineMembers.isAll) == 17
            && MemoryLayout<InlineMembers>.offset(of: \InlineMembers.reaches) == 20
            && MemoryLayout<Bool>.size == 1
    }

    /// Whether what every member reaches is held (so with no member at all).
    var reachesKnown: Bool { count == 0 || reaches != 0 }

    /// How many members reach an iOS and an Android token; nil when not known.
    var liveCounts: (ios: Int, android: Int)? {
        guard reachesKnown else { return nil }
        var ios = 0, android = 0
        for k in 0..<Int(count) {
            switch UInt8(truncatingIfNeeded: reaches >> (8 * k)) {
            case RecipientCache.Reach.ios.rawValue: ios += 1
            case RecipientCache.Reach.android.rawValue: android += 1
            default: continue
            }
        }
        return (ios, android)
    }

    /// Appends the members held to `appender`; false when they do not fit.
    @inline(__always)
    func append(to appender: inout GatheredValues.Appender) -> Bool {
        appender.append(first: Int(count), of: values)
    }

    /// Calls `body` with the members held.
    func withValues<R>(_ body: (UnsafeBufferPointer<UInt32>) -> R) -> R {
        var values = self.values
        return withUnsafeBytes(of: &values) { raw in
            body(UnsafeBufferPointer(start: raw.baseAddress!.assumingMemoryBound(to: UInt32.self), count: Int(count)))
        }
    }
}

/// A topic's stored chunks, copied out of a snapshot: one per slice, each at
/// an even offset of one buffer (the counts read arrays as 16-bit values).
/// Immutable; freed with the last reference.
public final class TopicChunks: @unchecked Sendable {
    private let base: UnsafeMutableRawPointer
    /// Where each chunk starts, and its length.
    private let spans: [(start: Int, count: Int)]
    /// Bytes held (with the padding).
    public let byteCount: Int

    /// Copies `chunks` (borrowed from a snapshot).
    public init(_ chunks: [UnsafeRawBufferPointer]) {
        var spans: [(start: Int, count: Int)] = []
        spans.reserveCapacity(chunks.count)
        var at = 0
        for c in chunks {
            spans.append((at, c.count))
            at += (c.count + 1) & ~1
        }
        byteCount = max(at, 2)
        base = .allocate(byteCount: byteCount, alignment: 8)
        for (c, span) in zip(chunks, spans) where span.count > 0 {
            (base + span.start).copyMemory(from: c.baseAddress!, byteCount: span.count)
        }
        self.spans = spans
    }

    deinit { base.deallocate() }

    /// How many chunks (slices).
    public var count: Int { spans.count }

    /// Chunk `i`, valid while this object lives.
    public subscript(i: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + spans[i].start, count: spans[i].count)
    }
}

/// The entries of the topic directory that hold what one device reaches:
/// mostly one (its per-user topic), kept without an array.
struct EntryIndices {
    private var first = -1
    private var rest: [Int] = []

    var isEmpty: Bool { first < 0 }

    mutating func insert(_ i: Int) {
        if first < 0 { first = i } else if first != i, !rest.contains(i) { rest.append(i) }
    }

    mutating func remove(_ i: Int) {
        if first == i {
            first = rest.popLast() ?? -1
        } else if let at = rest.firstIndex(of: i) {
            rest.remove(at: at)
        }
    }

    func forEach(_ body: (Int) -> Void) {
        guard first >= 0 else { return }
        body(first)
        rest.forEach(body)
    }
}
