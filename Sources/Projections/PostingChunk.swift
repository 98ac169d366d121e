import LMDB
import Roaring

/// One stored roaring container: the devices of one topic whose ordinals share
/// the same high 16 bits. Keeping a container per key means a subscription
/// rewrites at most 8 KiB, never a whole topic.
///
/// Keys are `pid ‖ high16 ‖ topic`: the containers of one 65,536-device slice
/// sit together, so a batch of new devices (which all land in the newest slice)
/// dirties a few contiguous pages instead of one page per topic; a topic's
/// bitmap is one point read per slice.
enum PostingChunk {
    static func high(_ ordinal: UInt32) -> UInt16 { UInt16(ordinal >> 16) }

    /// Decodes a stored chunk and checks that every ordinal belongs under its key.
    static func decode(_ bytes: UnsafeRawBufferPointer, pid: UInt32, topic: UInt32, high: UInt16) throws -> Bitmap {
        // The place is named only when there is something to report: a count reads dozens of chunks.
        func place() -> String { "postings/\(pid)/\(high)/\(topic)" }
        let bitmap: Bitmap
        do { bitmap = try Bitmap(chunk: bytes, high: high) } catch {
            throw ProjectionCorruption(place: place(), reason: "\(error)")
        }
        guard let lo = bitmap.min, let hi = bitmap.max, lo >> 16 == UInt32(high), hi >> 16 == UInt32(high) else {
            throw ProjectionCorruption(place: place(), reason: "container is empty or holds ordinals of another chunk")
        }
        // CRoaring takes a bitset's cardinality from its header: one that disagrees with the
        // bits would make every count of this topic wrong (counted in place where the CPU can).
        if let members = Bitmap.sliceCardinality(high, stored: bytes), members != bitmap.count {
            throw ProjectionCorruption(place: place(), reason: "container header says \(bitmap.count) members, it holds \(members)")
        }
        return bitmap
    }

    /// `topic`'s chunks of `slices` (ascending), each stored container
    /// copied straight into the result, or, when its bytes are not one
    /// well-formed container of that slice, decoded (which reports what is
    /// wrong). A slice without a chunk is skipped, or, with `required`, corrupt.
    static func read(pid: UInt32, topic: UInt32, slices: some Sequence<UInt16>, required: Bool,
                     tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bitmap {
        var result = Bitmap()
        try forEachChunk(pid: pid, topic: topic, slices: slices, required: required, tables: tables, txn) { high, v in
            // Slices are disjoint and ascending: each one appends a container.
            if !result.appendSlice(high, stored: v) { result.formUnion(try decode(v, pid: pid, topic: topic, high: high)) }
            return true
        }
        return result
    }

    /// Gathers the members of `topic` in its chunks of `slices` into
    /// `gathered`, each read in place. False, with nothing gathered, when they
    /// do not all fit or a chunk is a bitset or not well-formed (read the topic
    /// the ordinary way then); a listed slice without a chunk is corrupt.
    static func gather(pid: UInt32, topic: UInt32, slices: some Sequence<UInt16>, into gathered: inout GatheredValues,
                       tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bool {
        let mark = gathered.count
        var fits = true
        try forEachChunk(pid: pid, topic: topic, slices: slices, required: true, tables: tables, txn) { high, v in
            fits = gathered.append(slice: high, stored: v)
            return fits
        }
        if !fits { gathered.truncate(to: mark) }
        return fits
    }

    /// The number of members of `topic` in its chunks of `slices`, each
    /// counted in place (or decoded, when its bytes are not one well-formed
    /// container of that slice, which reports what is wrong); a listed slice
    /// without a chunk is corrupt. The compact layout's subscriber count.
    static func cardinality(pid: UInt32, topic: UInt32, slices: some Sequence<UInt16>,
                            tables: ProjectionTables, _ txn: borrowing Transaction) throws -> UInt32 {
        var total = 0
        try forEachChunk(pid: pid, topic: topic, slices: slices, required: true, tables: tables, txn) { high, v in
            total += try Bitmap.sliceCardinality(high, stored: v) ?? decode(v, pid: pid, topic: topic, high: high).count
            return true
        }
        guard total <= Int(UInt32.max) else { throw ProjectionCorruption(place: "topics/\(pid)/\(topic)", reason: "\(total) members") }
        return UInt32(total)
    }

    /// Calls `body` with each stored chunk of `topic` in `slices`, read in
    /// place, until it returns false; a slice without a chunk is skipped, or,
    /// with `required`, corrupt.
    private static func forEachChunk(pid: UInt32, topic: UInt32, slices: some Sequence<UInt16>, required: Bool,
                                     tables: ProjectionTables, _ txn: borrowing Transaction,
                                     _ body: (UInt16, UnsafeRawBufferPointer) throws -> Bool) throws {
        for high in slices {
            guard let v = try Keys.withChunk(pid, topic, high, { try txn.get(tables.postings, $0) }) else {
                if required {
                    throw ProjectionCorruption(place: "postings/\(pid)/\(high)/\(topic)", reason: "the topic lists this slice but it is missing")
                }
                continue
            }
            if try !body(high, v) { return }
        }
    }

    // MARK: The newest slice (schema 6)

    /// Whether topic `tid`'s record leaves out its project's newest slice: a
    /// shared topic of the compact layout (a built-in set keeps no record, a
    /// single topic lists all its slices).
    ///
    /// Every batch of new devices lands in the project's newest slice (the
    /// high 16 bits of its last ordinal), and a shared topic joins that slice
    /// at some random moment while the slice fills. Listing it there rewrote
    /// the record then, on a page of its own: at 10M devices, with 100,000
    /// shared topics, 41% of the bytes an install command wrote. So the
    /// record lists its slices below the newest one; a reader probes the
    /// newest one too (`withNewest`); and when the newest slice moves on, the
    /// writer adds the slice left behind to the records of the topics that
    /// have a chunk there, in one commit (`ProjectionWriter.relistLeftSlice`).
    /// The rule depends on the state only (the project's next ordinal and its
    /// chunks), so a rebuild writes the same records as the live path.
    static func omitsNewest(_ tid: UInt32, _ layout: ProjectionTables.TopicLayout) -> Bool {
        layout == .compact && leavesNewestOut(tid)
    }

    /// The topics whose records may leave out the newest slice, whatever the
    /// layout: what a reader probes (a legacy store's records list every
    /// slice, so the probe finds nothing unlisted there).
    @inline(__always)
    static func leavesNewestOut(_ tid: UInt32) -> Bool {
        tid >= ProjectionTables.firstTopicID && tid & ProjectionTables.singleTopicBit == 0
    }

    /// The slice a record leaves out: the newest of a project whose next ordinal is `nextOrdinal`.
    static func newest(nextOrdinal: UInt32) -> UInt16? { nextOrdinal == 0 ? nil : high(nextOrdinal - 1) }

    /// The slices topic `tid` occupies, given those its record lists: with the
    /// project's newest slice that has any chunk (`top`, from `maxHigh`) when
    /// the record may leave it out, does not list it and the topic has a chunk there.
    static func withNewest(_ listed: [UInt16], pid: UInt32, topic tid: UInt32, top: UInt16?,
                           tables: ProjectionTables, _ txn: borrowing Transaction) throws -> [UInt16] {
        guard leavesNewestOut(tid), let top, listed.last.map({ $0 < top }) ?? true else { return listed }
        guard try Keys.withChunk(pid, tid, top, { try txn.get(tables.postings, $0) }) != nil else { return listed }
        return listed + [top]
    }

    /// The highest slice any topic of the project uses (nil when it has no postings).
    static func maxHigh(pid: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> UInt16? {
        try txn.withCursor(tables.postings) { cursor in
            let entry: Cursor.Entry?
            if pid == .max {
                entry = try cursor.last()
            } else if try cursor.seek(atLeast: Keys.project(pid + 1)) != nil {
                entry = try cursor.previous()
            } else {
                entry = try cursor.last()
            }
            guard let (key, _) = entry, key.count == 10, key.loadBigEndian(at: 0, as: UInt32.self) == pid else { return nil }
            return key.loadBigEndian(at: 4, as: UInt16.self)
        }
    }

    /// The whole bitmap of `topic`, probing every slice the project uses
    /// (the built-in sets, which keep no slice list).
    static func read(pid: UInt32, topic: UInt32, tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bitmap {
        guard let top = try maxHigh(pid: pid, tables: tables, txn) else { return Bitmap() }
        return try read(pid: pid, topic: topic, slices: 0...top, required: false, tables: tables, txn)
    }
}
