import CIntrinsics
import Foundation
import LMDB
import Roaring
import SubscriptionLog

/// The serving process's copy of the device records, by project and ordinal,
/// so that streaming recipients (`ProjectionReader.forEachRecipient`) reads
/// memory instead of stepping an LMDB cursor over scattered pages: that step
/// and the first touch of each page were the streaming rate's limit.
///
/// It holds the `devices` table exactly as of one log sequence, `heldThrough`.
/// The writer of this process keeps it: it is filled from the table when the
/// writer starts (or finds that another process wrote), and after each commit
/// the batch's device records are applied, each marked with the sequence of
/// the event that wrote it. A reader whose snapshot is at sequence S takes an
/// entry only when the cache holds S or later and the entry last changed at or
/// before S; anything else (a record changed after S, a store another process
/// wrote, a cache not filled yet) is read from the snapshot itself. A stream
/// is therefore always exactly its snapshot's records.
public final class RecipientCache: @unchecked Sendable {
    /// Shared with the topic directory of the same serving reader (see
    /// `TopicCache.init(sharingLockWith:)`), so that a per-user topic's count
    /// takes one lock for both.
    let lock: CacheLock
    // Everything below is guarded by `lock`.
    private var columns = ColumnsByProject()
    private var arena = RecordArena()
    /// Bytes of the arena no column points at any more.
    private var garbage = 0
    /// The sequence the cache holds the table at; nil when it holds nothing usable.
    private var heldThrough: UInt64?
    /// Every device_id with a record since `filledAt` (see `deviceCandidates`):
    /// entries are added with a device's first record and never removed, as
    /// an ordinal is never given to another device.
    private var ids = OrdinalIndex()
    /// The sequence of the last `fill`.
    private var filledAt: UInt64?
    /// By project: the cells a large column grows into next (twice as many),
    /// being made on another thread (`prepareGrowth`).
    private var nextCells: [UInt32: Background<UnsafeMutableBufferPointer<Cell>>] = [:]
    /// Columns that grew into cells made on another thread (for tests).
    private var grownIntoPrepared = 0
    /// The cells from which a column's next ones are made on another thread.
    private let preparesFrom: Int

    /// Garbage (bytes of replaced records) above which the arena is copied
    /// afresh, when it is also more than half of the arena.
    private let compactionThreshold: Int

    public convenience init() { self.init(compactingAfter: 64 << 20) }

    /// `preparingColumnsFrom`: the cells (2^20, 16 MiB) from which a column's
    /// next cells are made on another thread (`prepareGrowth`).
    init(compactingAfter garbageBytes: Int, preparingColumnsFrom cells: Int = 1 << 20) {
        compactionThreshold = garbageBytes
        preparesFrom = cells
        lock = CacheLock()
    }

    deinit {
        arena.free()
        columns.free()
        for next in nextCells.values { next.take()?.deallocate() }
    }

    /// Columns that grew into cells made on another thread.
    var columnsGrownIntoPrepared: Int { lock.withLock { grownIntoPrepared } }

    /// A large column's next cells (twice as many) are asked of another
    /// thread when an ordinal reaches three quarters of it, and taken when one
    /// goes past it (called with the lock held). Growing it where it was held
    /// the lock, which every count of a per-user topic and every recipient
    /// stream takes, while memory twice the column's size was made ready: a
    /// project's devices crossing 2^24 (16.7 M, a 268 MB column) held it
    /// 75–1,198 ms. Now the column copies its cells over only: 21–23 ms.
    private func prepareGrowth(of column: inout Column, pid: UInt32, for ordinal: UInt32) {
        let i = Int(ordinal), n = column.cells.count
        guard n >= preparesFrom, i >= n / 4 * 3 else { return }
        if i < n {
            if nextCells[pid] == nil { nextCells[pid] = Background { Column.emptyCells(2 * n) } }
        } else if let next = nextCells.removeValue(forKey: pid), let cells = next.take() {
            if cells.count == 2 * n, i < cells.count {
                column.grow(into: cells)
                grownIntoPrepared += 1
            } else {
                cells.deallocate()
            }
        }
    }

    /// Frees the cells being made for columns that are replaced or freed, on
    /// another thread (which waits for them): called with the lock held.
    private func discardNextCells() {
        guard !nextCells.isEmpty else { return }
        let pending = Array(nextCells.values)
        nextCells = [:]
        DispatchQueue.global().async { for next in pending { next.take()?.deallocate() } }
    }

    /// The sequence the cache holds the table at (nil: nothing usable).
    public var heldSequence: UInt64? { lock.withLock { heldThrough } }

    /// Bytes of records held, replaced ones included until the arena is compacted.
    var arenaBytes: Int { lock.withLock { arena.bytes } }

    /// Bytes held (the arena and the columns).
    public var footprint: Int {
        lock.withLock { arena.capacity + ids.footprint + columns.all.reduce(0) { $0 + $1.cells.count * MemoryLayout<Cell>.stride } }
    }

    /// Fills the cache from `txn`'s device table, which holds the events through `sequence`.
    func fill(from tables: ProjectionTables, through sequence: UInt64, _ txn: borrowing Transaction) throws {
        var filled = ColumnsByProject()
        var records = RecordArena()
        var filledIDs = OrdinalIndex(capacity: try txn.statistics(tables.devices).entries)
        // Where a device_id stored in fewer bytes is spelled to be hashed (see `DeviceDirectory.load`).
        let scratch = UnsafeMutableRawPointer.allocate(byteCount: StoredName.longestSpelled, alignment: 8)
        defer { scratch.deallocate() }
        // The device_ids filed a few devices behind the walk, their slots prefetched (as `DeviceDirectory.load` does).
        var idInserts = LaggedInserts<Void>()
        // The column being filled, not yet in `filled`.
        var current: (pid: UInt32, column: Column)?
        do {
            try txn.withCursor(tables.devices) { cursor in
                var entry = try cursor.first()
                while let (key, value) = entry {
                    guard key.count == 8 else {
                        throw ProjectionCorruption(place: "devices/\(Array(key))", reason: "key of \(key.count) bytes")
                    }
                    let pid = key.loadBigEndian(at: 0, as: UInt32.self), ordinal = key.loadBigEndian(at: 4, as: UInt32.self)
                    if current?.pid != pid {
                        if let c = current { filled[c.pid] = c.column }
                        current = (pid, Column())
                    }
                    guard let f = DeviceRecord.fields(of: value) else {
                        throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "device record does not decode")
                    }
                    let id = LaggedInserts<Void>.Insert(pid: pid, hash: OrdinalIndex.hash(pid, f.deviceID.text(spellingInto: scratch)), ordinal: ordinal, payload: ())
                    if let due = idInserts.push(id, prefetchingIn: filledIDs) { filledIDs.insert(pid: due.pid, hash: due.hash, ordinal: due.ordinal) }
                    current!.column.set(ordinal, handle: records.appendTextForm(value), reach: Reach(f), changed: 0)
                    entry = try cursor.next()
                }
                for due in idInserts.drain() { filledIDs.insert(pid: due.pid, hash: due.hash, ordinal: due.ordinal) }
                if let c = current { filled[c.pid] = c.column }
                current = nil
            }
        } catch {
            records.free()
            current?.column.free()
            filled.free()
            throw error
        }
        let old = lock.withLock {
            defer { columns = filled; arena = records; garbage = 0; heldThrough = sequence; ids = filledIDs; filledAt = sequence }
            discardNextCells()
            return (arena, columns)
        }
        old.0.free()
        old.1.free()
    }

    /// Takes everything `other` holds (a cache of the same device records in
    /// another file generation), leaving it empty: its readers go to their snapshots.
    func take(from other: RecipientCache) {
        guard other !== self else { return }
        let taken = other.lock.withLock {
            let held = (other.columns, other.arena, other.garbage, other.heldThrough, other.ids, other.filledAt)
            // The arena moves: `other` gets a new one and must not free this one.
            other.columns = ColumnsByProject(); other.arena = RecordArena(); other.garbage = 0
            other.heldThrough = nil; other.ids = OrdinalIndex(); other.filledAt = nil
            other.discardNextCells()
            return held
        }
        let old = lock.withLock {
            let replaced = (arena, columns)
            discardNextCells()
            (columns, arena, garbage, heldThrough, ids, filledAt) = taken
            return replaced
        }
        old.0.free()
        old.1.free()
    }

    /// Forgets everything, memory included: readers go to the snapshot until the next `fill`.
    public func forget() { lock.withLock { forgetAll() } }

    /// Forgets everything, so readers go to the snapshot until the next `fill`
    /// (called with the lock held).
    private func forgetAll() {
        columns.free()
        columns = ColumnsByProject()
        discardNextCells()
        arena.free()
        arena = RecordArena()
        garbage = 0
        heldThrough = nil
        ids = OrdinalIndex()
        filledAt = nil
    }

    /// Applies the device records a committed transaction wrote, which took
    /// the store from `from` to `through`. A cache not at `from` missed
    /// something: it is invalidated instead.
    func apply(_ changes: Changes, from: UInt64, through: UInt64) {
        lock.withLock {
            guard heldThrough == from else { return forgetAll() }
            changes.bytes.withUnsafeBytes { all in
                // Changes come in runs of one project: its column is taken out once per run.
                var current: (pid: UInt32, column: Column)?
                for change in changes.entries {
                    if current?.pid != change.pid {
                        if let c = current { columns[c.pid] = c.column }
                        current = (change.pid, columns.removeValue(forKey: change.pid) ?? Column())
                    }
                    let i = Int(change.ordinal)
                    let old = i < current!.column.cells.count ? current!.column.cells[i].handle : nil
                    if let old { garbage += 4 + arena.record(old).count }
                    let record = change.range.map { UnsafeRawBufferPointer(rebasing: all[$0]) }
                    let fields = record.flatMap(DeviceRecord.fields(of:))
                    if old == nil, let f = fields {
                        // A device's first record: its device_id goes into the index.
                        ids.insert(pid: change.pid, hash: f.deviceID.withText { OrdinalIndex.hash(change.pid, $0) }, ordinal: change.ordinal)
                    }
                    let handle = record.map { arena.appendTextForm($0) }
                    prepareGrowth(of: &current!.column, pid: change.pid, for: change.ordinal)
                    current!.column.set(change.ordinal, handle: handle, reach: Reach(fields), changed: change.sequence)
                }
                if let c = current { columns[c.pid] = c.column }
            }
            heldThrough = through
            if garbage > compactionThreshold && garbage > arena.bytes / 2 { compactArena() }
        }
    }

    /// The ordinals that may have `deviceID` in project `pid` as of sequence
    /// `asOf`, to be confirmed against the snapshot's records; nil when the
    /// cache cannot answer for that snapshot (then walk the records).
    ///
    /// Exact for any snapshot from `filledAt` to `heldThrough`: a device of
    /// such a snapshot either had a record at the fill, or got its first one
    /// after it, and entries are never removed. A snapshot from before the
    /// fill may hold a device that was forgotten before it.
    func deviceCandidates(_ pid: UInt32, _ deviceID: UnsafeRawBufferPointer, asOf: UInt64) -> [UInt32]? {
        let hash = OrdinalIndex.hash(pid, deviceID)
        return lock.withLock {
            guard let held = heldThrough, held >= asOf, let from = filledAt, from <= asOf else { return nil }
            var candidates: [UInt32] = []
            ids.forEachCandidate(pid: pid, hash: hash) { candidates.append($0); return false }
            return candidates
        }
    }

    /// Copies the records of `ordinals` (of project `pid`) as of sequence
    /// `asOf` into `batch`; an ordinal the cache cannot answer for is left to
    /// the caller (`Batch.record` is nil). False when the cache cannot answer
    /// for that snapshot at all.
    func copy(_ pid: UInt32, _ ordinals: UnsafeBufferPointer<UInt32>, asOf: UInt64, into batch: inout Batch) -> Bool {
        batch.clear()
        return lock.withLock {
            guard let held = heldThrough, held >= asOf, let column = columns[pid] else { return false }
            // Read through a local copy: the property, reached once per record, was retained and
            // released around each call (17% of a stream's samples).
            let arena = self.arena
            let cells = column.cells
            // A record replaced since the fill sits at the arena's end, out of ordinal
            // order, where each would be a cache miss in turn (6% of a 1M store's records
            // rewritten took its stream from 26 to 20 M/s): each record is asked for
            // `ahead` places before it is copied.
            let ahead = 16
            func prefetch(_ j: Int) {
                let i = Int(ordinals[j])
                if i < cells.count, let handle = cells[i].handle { arena.prefetch(handle) }
            }
            for j in 0..<min(ahead, ordinals.count) { prefetch(j) }
            for (j, ordinal) in ordinals.enumerated() {
                if j + ahead < ordinals.count { prefetch(j + ahead) }
                let i = Int(ordinal)
                guard i < cells.count, let handle = cells[i].handle, cells[i].changed <= asOf else {
                    batch.ranges.append(nil)
                    continue
                }
                let start = batch.bytes.count
                batch.bytes.append(contentsOf: arena.record(handle))
                batch.ranges.append(start..<batch.bytes.count)
            }
            return true
        }
    }

    /// How many of `devices` (of project `pid`) have a live iOS and a live
    /// Android token as of sequence `asOf`, read from the held records; nil
    /// when the cache cannot answer for every one of them (read the snapshot then).
    func liveCounts(_ pid: UInt32, _ devices: Bitmap, asOf: UInt64) -> (ios: Int, android: Int)? {
        liveCounts(pid, asOf: asOf) { tally in
            devices.forEachBatch(batchSize: 256) { tally($0) }
        }
    }

    /// The same for a few devices given by their ordinals (a placed topic's
    /// members: a count of a per-user topic builds no bitmap).
    func liveCounts(_ pid: UInt32, members: [UInt32], asOf: UInt64) -> (ios: Int, android: Int)? {
        members.withUnsafeBufferPointer { liveCounts(pid, members: $0, asOf: asOf) }
    }

    /// The same, borrowing the ordinals (those of a list's members whose
    /// reach the topic directory did not hold).
    func liveCounts(_ pid: UInt32, members: UnsafeBufferPointer<UInt32>, asOf: UInt64) -> (ios: Int, android: Int)? {
        liveCounts(pid, asOf: asOf) { tally in _ = tally(members) }
    }

    /// Live counts of the ordinals `feed` hands to its tally, batch by batch;
    /// the tally returns false (and the counts are nil) at the first ordinal
    /// the cache does not hold as of `asOf`.
    private func liveCounts(_ pid: UInt32, asOf: UInt64,
                            _ feed: ((UnsafeBufferPointer<UInt32>) -> Bool) -> Void) -> (ios: Int, android: Int)? {
        lock.withLock { liveCountsLocked(pid, asOf: asOf, feed) }
    }

    /// What each of `members` (of project `pid`, at most four) reaches as of
    /// sequence `asOf`, one byte each from the lowest (`Reach.ios`, `.android`
    /// or `.unreachable`), for the topic directory to hold beside them; nil
    /// when the cache cannot tell it for every one of them. Called with `lock`
    /// held (the directory shares it).
    func reachesLocked(_ pid: UInt32, members: UnsafeBufferPointer<UInt32>, asOf: UInt64) -> UInt32? {
        precondition(members.count <= 4, "reaches of at most four members")
        guard let held = heldThrough, held >= asOf, let column = columns[pid] else { return nil }
        let cells = column.cells
        var reaches: UInt32 = 0
        for (k, ordinal) in members.enumerated() {
            let i = Int(ordinal)
            guard i < cells.count, let reach = cells[i].reach(asOf: asOf) else { return nil }
            reaches |= UInt32(reach.rawValue) << (8 * k)
        }
        return reaches
    }

    /// `liveCounts(_:asOf:_:)` with the lock held; each cell is asked of
    /// memory 16 ordinals before it is read.
    private func liveCountsLocked(_ pid: UInt32, asOf: UInt64,
                                  _ feed: ((UnsafeBufferPointer<UInt32>) -> Bool) -> Void) -> (ios: Int, android: Int)? {
        guard let held = heldThrough, held >= asOf, let column = columns[pid] else { return nil }
        var ios = 0, android = 0, answered = true
        let cells = column.cells
        feed { batch in
            // Each cell asked of memory `ahead` ordinals before it is read: the cells of a
            // list's members not asked lately are cache misses, waited for one after another.
            let ahead = 16
            for ordinal in batch.prefix(ahead) where Int(ordinal) < cells.count {
                topicstore_prefetch(cells.baseAddress! + Int(ordinal))
            }
            for (j, ordinal) in batch.enumerated() {
                if j + ahead < batch.count, Int(batch[j + ahead]) < cells.count {
                    topicstore_prefetch(cells.baseAddress! + Int(batch[j + ahead]))
                }
                let i = Int(ordinal)
                // (The records themselves are not read: their cells say what a count needs.)
                guard i < cells.count, let reach = cells[i].reach(asOf: asOf) else {
                    answered = false
                    return false
                }
                if reach == .ios { ios += 1 } else if reach == .android { android += 1 }
            }
            return true
        }
        return answered ? (ios, android) : nil
    }

    /// Records copied out of the cache for one batch of ordinals.
    struct Batch {
        var bytes: [UInt8] = []
        /// Where each ordinal's record is in `bytes`; nil: not copied (read it from the snapshot).
        var ranges: [Range<Int>?] = []

        mutating func clear() {
            bytes.removeAll(keepingCapacity: true)
            ranges.removeAll(keepingCapacity: true)
        }

        /// Record `i` of the batch, within `all` (the batch's bytes).
        func record(_ i: Int, in all: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
            ranges[i].map { UnsafeRawBufferPointer(rebasing: all[$0]) }
        }
    }

    /// The device records one write transaction wrote, in order, for `apply`.
    struct Changes {
        var bytes: [UInt8] = []
        var entries: [(pid: UInt32, ordinal: UInt32, sequence: UInt64, range: Range<Int>?)] = []

        mutating func removeAll() {
            bytes.removeAll(keepingCapacity: true)
            entries.removeAll(keepingCapacity: true)
        }

        mutating func put(_ pid: UInt32, _ ordinal: UInt32, sequence: UInt64, record: UnsafeRawBufferPointer) {
            let start = bytes.count
            bytes.append(contentsOf: record)
            entries.append((pid, ordinal, sequence, start..<bytes.count))
        }

        mutating func delete(_ pid: UInt32, _ ordinal: UInt32, sequence: UInt64) {
            entries.append((pid, ordinal, sequence, nil))
        }
    }

    /// Copies the live records into a new arena (called with the lock held).
    private func compactArena() {
        var compacted = RecordArena()
        for pid in columns.pids {
            var column = columns.removeValue(forKey: pid)!
            for i in column.cells.indices {
                if let handle = column.cells[i].handle { column.move(i, to: compacted.append(arena.record(handle))) }
            }
            columns[pid] = column
        }
        arena.free()
        arena = compacted
        garbage = 0
    }
}

/// Records in 4 MiB segments that never move: growing copies nothing already
/// held (an array doubling held twice the table during the copy), and the
/// memory stays within a segment of what the records take. The table of
/// segments is memory the arena allocates too, not an array: a copy of the
/// arena, as each reader takes under the cache's lock, retains nothing.
struct RecordArena {
    private let segmentSize: Int
    private var segments = UnsafeMutableBufferPointer<UnsafeMutableRawBufferPointer>(start: nil, count: 0)
    private var segmentCount = 0
    /// Bytes used in the last segment.
    private var used = 0
    /// Bytes of every record appended (with their length fields).
    private(set) var bytes = 0

    init(segmentSize: Int = 4 << 20) { self.segmentSize = segmentSize }

    var capacity: Int { segments.prefix(segmentCount).reduce(0) { $0 + $1.count } }

    /// Appends `record`; returns its handle (segment << 32 | offset).
    mutating func append(_ record: UnsafeRawBufferPointer) -> Int {
        append(length: record.count) { p in
            if let base = record.baseAddress { p.copyMemory(from: base, byteCount: record.count) }
        }
    }

    /// Appends a device record in its text form (`DeviceRecord.writeTextForm`);
    /// one that does not decode is appended as it is, for the reader to report.
    mutating func appendTextForm(_ record: UnsafeRawBufferPointer) -> Int {
        guard record.count > 0, record[0] & DeviceRecord.storedNamesFlag != 0, let f = DeviceRecord.fields(of: record) else {
            return append(record)
        }
        return append(length: DeviceRecord.textFormSize(f)) { DeviceRecord.writeTextForm(f, to: $0) }
    }

    /// Appends a record of `length` bytes that `write` puts at the pointer it is given; returns its handle.
    private mutating func append(length: Int, _ write: (UnsafeMutableRawPointer) -> Void) -> Int {
        let size = 4 + length
        if segmentCount == 0 || used + size > segments[segmentCount - 1].count {
            addSegment(.allocate(byteCount: max(segmentSize, size), alignment: 8))
            used = 0
        }
        let segment = segments[segmentCount - 1]
        segment.storeBytes(of: UInt32(length), toByteOffset: used, as: UInt32.self)
        write(segment.baseAddress! + used + 4)
        let handle = (segmentCount - 1) << 32 | used
        used += size
        bytes += size
        return handle
    }

    private mutating func addSegment(_ segment: UnsafeMutableRawBufferPointer) {
        if segmentCount == segments.count {
            let grown = UnsafeMutableBufferPointer<UnsafeMutableRawBufferPointer>.allocate(capacity: max(16, 2 * segments.count))
            _ = grown.initialize(from: segments)
            segments.deallocate()
            segments = grown
        }
        segments.initializeElement(at: segmentCount, to: segment)
        segmentCount += 1
    }

    /// Asks the CPU for the first two cache lines of the record behind `handle`.
    func prefetch(_ handle: Int) {
        let at = segments[handle >> 32].baseAddress! + (handle & 0xFFFF_FFFF)
        topicstore_prefetch(at)
        topicstore_prefetch(at + 64)
    }

    /// The record behind `handle`.
    func record(_ handle: Int) -> UnsafeRawBufferPointer {
        let segment = segments[handle >> 32], offset = handle & 0xFFFF_FFFF
        let length = Int(segment.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        return UnsafeRawBufferPointer(rebasing: segment[(offset + 4)..<(offset + 4 + length)])
    }

    /// Frees the segments (the arena must not be used afterwards).
    func free() {
        for s in segments.prefix(segmentCount) { s.deallocate() }
        segments.deallocate()
    }
}
