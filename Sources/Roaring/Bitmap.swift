internal import CRoaring
internal import CRoaringSlices

/// A set of `UInt32` as a roaring bitmap: a value type with copy-on-write
/// over CRoaring. CRoaring stays behind this API.
public struct Bitmap: Sendable {
    final class Storage: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<roaring_bitmap_t>
        init(_ pointer: UnsafeMutablePointer<roaring_bitmap_t>) { self.pointer = pointer }
        deinit { roaring_bitmap_free(pointer) }
    }

    var storage: Storage

    init(owning pointer: UnsafeMutablePointer<roaring_bitmap_t>) { storage = Storage(pointer) }

    public init() { self.init(owning: roaring_bitmap_create()) }

    public init<S: Sequence>(_ values: S) where S.Element == UInt32 {
        self.init()
        let array = Array(values)
        array.withUnsafeBufferPointer { roaring_bitmap_add_many(storage.pointer, $0.count, $0.baseAddress) }
    }

    /// All values in `range`.
    public init(range: Range<UInt32>) {
        if range.isEmpty { self.init() } else {
            self.init(owning: roaring_bitmap_from_range(UInt64(range.lowerBound), UInt64(range.upperBound), 1))
        }
    }

    var pointer: UnsafePointer<roaring_bitmap_t> { UnsafePointer(storage.pointer) }

    private mutating func mutablePointer() -> UnsafeMutablePointer<roaring_bitmap_t> {
        if !isKnownUniquelyReferenced(&storage) {
            storage = Storage(roaring_bitmap_copy(storage.pointer))
        }
        return storage.pointer
    }

    // MARK: Elements

    public var count: Int { Int(roaring_bitmap_get_cardinality(pointer)) }
    public var isEmpty: Bool { roaring_bitmap_is_empty(pointer) }
    public func contains(_ value: UInt32) -> Bool { roaring_bitmap_contains(pointer, value) }
    public var min: UInt32? { isEmpty ? nil : roaring_bitmap_minimum(pointer) }
    public var max: UInt32? { isEmpty ? nil : roaring_bitmap_maximum(pointer) }

    /// Inserts `value`; returns true when it was not there before.
    @discardableResult
    public mutating func insert(_ value: UInt32) -> Bool {
        roaring_bitmap_add_checked(mutablePointer(), value)
    }

    /// Removes `value`; returns true when it was there.
    @discardableResult
    public mutating func remove(_ value: UInt32) -> Bool {
        roaring_bitmap_remove_checked(mutablePointer(), value)
    }

    /// `insert(_:)`, telling also whether the bitmap was empty before: one
    /// mutating call, where asking `isEmpty` first made the caller retain and
    /// release the bitmap around that call.
    public mutating func insertNotingEmpty(_ value: UInt32) -> (inserted: Bool, wasEmpty: Bool) {
        let p = mutablePointer()
        let wasEmpty = roaring_bitmap_is_empty(p)
        return (roaring_bitmap_add_checked(p, value), wasEmpty)
    }

    /// `remove(_:)`, telling also whether the bitmap is empty after it (see `insertNotingEmpty`).
    public mutating func removeNotingEmpty(_ value: UInt32) -> (removed: Bool, isEmpty: Bool) {
        let p = mutablePointer()
        let removed = roaring_bitmap_remove_checked(p, value)
        return (removed, roaring_bitmap_is_empty(p))
    }

    public mutating func removeAll() { roaring_bitmap_clear(mutablePointer()) }

    // MARK: Set algebra

    public mutating func formUnion(_ other: Bitmap) { roaring_bitmap_or_inplace(mutablePointer(), other.pointer) }
    // (A new bitmap, not CRoaring's in-place forms: see `intersection`.)
    public mutating func formIntersection(_ other: Bitmap) { self = intersection(other) }
    public mutating func subtract(_ other: Bitmap) { self = subtracting(other) }

    public func union(_ other: Bitmap) -> Bitmap { Bitmap(owning: roaring_bitmap_or(pointer, other.pointer)) }

    /// Bitsets are combined and counted by our C with POPCNT (see
    /// `topicstore_intersection`); CRoaring answers where that cannot run.
    public func intersection(_ other: Bitmap) -> Bitmap {
        withExtendedLifetime((self, other)) {
            if let result = topicstore_intersection(pointer, other.pointer) {
                return Bitmap(owning: result.assumingMemoryBound(to: roaring_bitmap_t.self))
            }
            return Bitmap(owning: roaring_bitmap_and(pointer, other.pointer))
        }
    }

    /// As `intersection`, through `topicstore_difference`.
    public func subtracting(_ other: Bitmap) -> Bitmap {
        withExtendedLifetime((self, other)) {
            if let result = topicstore_difference(pointer, other.pointer) {
                return Bitmap(owning: result.assumingMemoryBound(to: roaring_bitmap_t.self))
            }
            return Bitmap(owning: roaring_bitmap_andnot(pointer, other.pointer))
        }
    }

    public func intersectionCount(_ other: Bitmap) -> Int { Int(roaring_bitmap_and_cardinality(pointer, other.pointer)) }

    /// Up to how many values in all a many-way union gathers them instead of
    /// going container by container: a union of 100 one-device (per-user)
    /// topics took 43 µs through CRoaring's `or_many`, 2 µs gathered.
    public static let gatheredUnionLimit = 1024

    /// The union of many bitmaps (two included) in one pass: gathered when
    /// they are small, else slice by slice in our C (`topicstore_union_many`),
    /// which counts each slice once with POPCNT; CRoaring's `or_many` (a bitset
    /// per slice, counted without POPCNT in Debian's build, most turned back
    /// into arrays) only where that cannot run. Three mid topics as one
    /// audience at 1M devices: 59 → 33 µs; at 10M, 1.12 → 0.38–0.53 ms.
    public static func union(_ bitmaps: [Bitmap]) -> Bitmap {
        switch bitmaps.count {
        case 0: return Bitmap()
        case 1: return bitmaps[0]
        default:
            var total = 0
            for b in bitmaps {
                total += b.count
                if total > gatheredUnionLimit { break }
            }
            if total <= gatheredUnionLimit { return gatheredUnion(bitmaps, count: total) }
            return withExtendedLifetime(bitmaps) {
                let pointers: [UnsafeRawPointer?] = bitmaps.map { UnsafeRawPointer($0.pointer) }
                if let result = pointers.withUnsafeBufferPointer({ topicstore_union_many($0.baseAddress, $0.count) }) {
                    return Bitmap(owning: result.assumingMemoryBound(to: roaring_bitmap_t.self))
                }
                var typed: [UnsafePointer<roaring_bitmap_t>?] = bitmaps.map { $0.pointer }
                return Bitmap(owning: typed.withUnsafeMutableBufferPointer { roaring_bitmap_or_many($0.count, $0.baseAddress)! })
            }
        }
    }

    /// The union of small bitmaps (`count` values in all): their values
    /// gathered, sorted, and added in order, each to the container at hand.
    private static func gatheredUnion(_ bitmaps: [Bitmap], count: Int) -> Bitmap {
        var gathered = GatheredValues(limit: count)
        for b in bitmaps { gathered.append(b) }
        return gathered.bitmap()
    }

    /// Above how many runs a container of more than 4,096 values is kept as a
    /// bitset by `optimize`, though its runs take fewer bytes. Such a container is
    /// a nearly full slice with scattered holes (`all`, ~1,100 runs per slice in the
    /// benchmark): counting it against the live sets spread its runs into a bitset
    /// first, on every count, about two thirds of a count of `all`. At 512 runs
    /// the runs take 2 KiB, so the bitset is at most four times their size.
    public static let mostRunsKept: Int32 = 512

    /// Chooses each container's encoding, canonically: the same set always
    /// serializes to the same bytes, whatever edits led to it (CRoaring keeps a
    /// run container when a run and an array tie, so runs are undone first: by
    /// our C, since libroaring's own undoing crashes on a run that ends a slice).
    /// The encoding is the smallest, except that a container of more than
    /// `mostRuns` runs and 4,096 values is a bitset (see `mostRunsKept`).
    /// Stores written before that rule hold such containers as runs; every
    /// reader takes either, and an audit compares chunks as sets.
    public mutating func optimize(mostRuns: Int32 = Bitmap.mostRunsKept) {
        let p = mutablePointer()
        guard topicstore_remove_run_compression(p) == 0 else { fatalError("out of memory undoing run containers") }
        roaring_bitmap_run_optimize(p)
        guard topicstore_bitsets_for_many_runs(p, mostRuns) == 0 else { fatalError("out of memory making bitsets of many runs") }
        roaring_bitmap_shrink_to_fit(p)
    }

    /// Whether every container already has the encoding `optimize(mostRuns:)`
    /// chooses for it, so that optimizing would change nothing written. Reads
    /// only, and counts a container's runs only as far as the choice needs:
    /// `optimize` undoes every run container and counts every container's runs
    /// again, and gives back spare capacity that the next insert takes again.
    public func hasCanonicalEncoding(mostRuns: Int32 = Bitmap.mostRunsKept) -> Bool {
        topicstore_has_canonical_encoding(pointer, mostRuns) != 0
    }

    // MARK: Slices (the 65,536-value ranges of the high 16 bits)

    /// How many slices hold at least one value (no array: a count of a small
    /// audience asks for this on every query).
    public var sliceCount: Int { Int(topicstore_slice_keys(pointer, nil, 0)) }

    /// The slices that hold at least one value, ascending.
    public var sliceKeys: [UInt16] {
        let n = Int(topicstore_slice_keys(pointer, nil, 0))
        // Not for none: an empty array's initializer writes to the shared
        // empty-array storage, a race ThreadSanitizer reports between threads.
        guard n > 0 else { return [] }
        return [UInt16](unsafeUninitializedCapacity: n) { buffer, initialized in
            initialized = Int(topicstore_slice_keys(pointer, buffer.baseAddress, Int32(n)))
        }
    }

    /// How many values of slice `high` are also in `stored`, a stored chunk of
    /// that slice (one container, either format), read in place
    /// (no decoding, no copy). Nil when `stored` is not one well-formed
    /// container of slice `high`, or the CPU lacks POPCNT: decode it then.
    public func intersectionCount(inSlice high: UInt16, stored: UnsafeRawBufferPointer) -> Int? {
        let n = topicstore_slice_intersection_count(pointer, high, stored.baseAddress, stored.count)
        return n < 0 ? nil : Int(n)
    }

    /// `intersectionCount(inSlice:stored:)` for two chunks of slice `high` at
    /// once (nil: no chunk, which shares nothing); nil when either is not one
    /// well-formed container of that slice, or the CPU lacks POPCNT.
    public func intersectionCounts(inSlice high: UInt16, _ first: UnsafeRawBufferPointer?,
                                   _ second: UnsafeRawBufferPointer?) -> (Int, Int)? {
        if first?.count == 0 || second?.count == 0 { return nil }  // not a chunk: decoding it says what is wrong
        var counts: (Int64, Int64) = (0, 0)
        let stored: (UnsafeRawPointer?, UnsafeRawPointer?) = (first?.baseAddress, second?.baseAddress)
        let lengths: (Int, Int) = (first?.count ?? 0, second?.count ?? 0)
        let result = withUnsafePointer(to: stored) { s in
            withUnsafePointer(to: lengths) { l in
                withUnsafeMutablePointer(to: &counts) { c in
                    topicstore_slice_intersection_counts(pointer, high, UnsafeRawPointer(s).assumingMemoryBound(to: UnsafeRawPointer?.self),
                                                         UnsafeRawPointer(l).assumingMemoryBound(to: Int.self),
                                                         UnsafeMutableRawPointer(c).assumingMemoryBound(to: Int64.self))
                }
            }
        }
        return result == 0 ? (Int(counts.0), Int(counts.1)) : nil
    }

    /// How many values `stored` (a one-container chunk of slice `high`, as
    /// above) holds, counted in place; nil when it is not one well-formed
    /// container of that slice, or the CPU lacks POPCNT: decode it then.
    public static func sliceCardinality(_ high: UInt16, stored: UnsafeRawBufferPointer) -> Int? {
        let n = topicstore_slice_cardinality(high, stored.baseAddress, stored.count)
        return n < 0 ? nil : Int(n)
    }

    /// Appends the container of `stored` (a one-container chunk of slice
    /// `high`, either format) when every value already here is below
    /// that slice. False, with nothing changed, when `stored` is not one
    /// well-formed container of slice `high` or the bitmap reaches that far.
    public mutating func appendSlice(_ high: UInt16, stored: UnsafeRawBufferPointer) -> Bool {
        topicstore_slice_append(mutablePointer(), high, stored.baseAddress, stored.count) == 0
    }

    /// Appends the container of slice `high` holding `sortedLows` (the low 16
    /// bits of its values, strictly ascending) when every value already here is
    /// below that slice: one allocation and one copy, where inserting the values
    /// one by one searched the container for each. False, with nothing changed,
    /// when `sortedLows` is empty or not strictly ascending, or the bitmap reaches that far.
    public mutating func appendSlice(_ high: UInt16, sortedLows: UnsafeBufferPointer<UInt16>) -> Bool {
        topicstore_slice_append_sorted(mutablePointer(), high, sortedLows.baseAddress, sortedLows.count) == 0
    }

    /// Keeps of slice `high` only the values `stored` (a one-container chunk of
    /// that slice, either format) also holds, reading the chunk in place
    /// (no copy of it). False, with nothing changed, when `stored` is not one
    /// well-formed container of slice `high`, or either side is a run container:
    /// intersect with the decoded chunk then.
    public mutating func formIntersection(inSlice high: UInt16, stored: UnsafeRawBufferPointer) -> Bool {
        guard sliceCount > 0 else { return true }
        switch topicstore_slice_intersect_stored(mutablePointer(), high, stored.baseAddress, stored.count) {
        case 0: return true
        case -3: fatalError("out of memory intersecting a slice")
        default: return false
        }
    }

    /// Removes every value of slice `high`.
    public mutating func removeSlice(_ high: UInt16) {
        _ = topicstore_remove_slice(mutablePointer(), high)
    }

    // MARK: Iteration

    public func toArray() -> [UInt32] {
        let n = count
        guard n > 0 else { return [] }  // see sliceKeys
        return [UInt32](unsafeUninitializedCapacity: n) { buffer, initialized in
            roaring_bitmap_to_uint32_array(pointer, buffer.baseAddress)
            initialized = n
        }
    }

    /// Calls `body` with successive ascending batches of values of at least
    /// `from`, until `body` returns false or the values run out.
    public func forEachBatch(from: UInt32 = 0, batchSize: Int = 4096,
                             _ body: (UnsafeBufferPointer<UInt32>) throws -> Bool) rethrows {
        var iterator = roaring_uint32_iterator_t()
        roaring_init_iterator(pointer, &iterator)
        if from > 0, !roaring_move_uint32_iterator_equalorlarger(&iterator, from) { return }
        // A temporary buffer, not an array: a query of a few devices (a count of a
        // per-user topic) paid more for the array than for the values.
        try withUnsafeTemporaryAllocation(of: UInt32.self, capacity: batchSize) { buffer in
            while true {
                let n = Int(roaring_read_uint32_iterator(&iterator, buffer.baseAddress, UInt32(buffer.count)))
                if n == 0 { return }
                if try !body(UnsafeBufferPointer(rebasing: buffer[0..<n])) || n < batchSize { return }
            }
        }
    }

    // MARK: Stored chunks (a posting chunk: one container of one slice)

    /// The first byte of a chunk in the compact format: the container that
    /// follows (after a zero byte). A portable chunk starts with 0x3A or 0x3B.
    public enum ChunkTag: UInt8 {
        case array = 1, bitset = 2, runs = 3
    }

    /// Whether `stored` is a chunk in the compact format (schema 10 on); any
    /// other bytes are read as the portable format of older stores.
    public static func isCompactChunk(_ stored: UnsafeRawBufferPointer) -> Bool {
        stored.count > 0 && stored[0] <= ChunkTag.runs.rawValue
    }

    /// Bytes of this bitmap as a stored chunk in the compact format (see
    /// `topicstore_chunk_size`); nil unless it holds exactly one container.
    public var chunkSize: Int? {
        let n = topicstore_chunk_size(pointer)
        return n < 0 ? nil : Int(n)
    }

    /// Writes this bitmap, which must hold exactly one container, as a stored
    /// chunk in the compact format into `buffer` (at least `chunkSize` bytes);
    /// returns the bytes written.
    public func writeChunk(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let n = topicstore_chunk_write(pointer, buffer.baseAddress, buffer.count)
        precondition(n >= 0, "a chunk is one container that fits its buffer")
        return Int(n)
    }

    /// This bitmap, of exactly one container, as a stored chunk in the compact format.
    public func chunk() -> [UInt8] {
        guard let n = chunkSize else { preconditionFailure("a chunk is one container") }
        return [UInt8](unsafeUninitializedCapacity: n) { buffer, initialized in
            initialized = writeChunk(into: UnsafeMutableRawBufferPointer(buffer))
        }
    }

    /// Decodes a stored chunk of slice `high`, in either format, with
    /// CRoaring's checked reader: the compact one is given the portable
    /// format's header first. It does not check that the values are those of
    /// slice `high` (a portable chunk names its own slice): its caller does.
    public init(chunk stored: UnsafeRawBufferPointer, high: UInt16) throws {
        guard Self.isCompactChunk(stored) else {
            try self.init(deserializing: stored)
            return
        }
        let capacity = stored.count + 16
        self = try withUnsafeTemporaryAllocation(byteCount: capacity, alignment: 8) { buffer in
            let n = topicstore_chunk_portable(high, stored.baseAddress, stored.count, buffer.baseAddress, capacity)
            guard n > 0 else {
                throw FormatError(description: "compact chunk of \(stored.count) bytes (tag \(stored[0])) is not one well-formed container")
            }
            return try Bitmap(deserializing: UnsafeRawBufferPointer(rebasing: buffer[0..<Int(n)]))
        }
    }

    // MARK: Portable format (compatible with other roaring implementations; posting chunks before schema 10)

    public var serializedSize: Int { roaring_bitmap_portable_size_in_bytes(pointer) }

    /// Writes the portable serialization into `buffer`, which must hold `serializedSize` bytes.
    public func serialize(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        precondition(buffer.count >= serializedSize)
        return roaring_bitmap_portable_serialize(pointer, buffer.baseAddress!.assumingMemoryBound(to: CChar.self))
    }

    public func serialized() -> [UInt8] {
        let n = serializedSize
        return [UInt8](unsafeUninitializedCapacity: n) { buffer, initialized in
            initialized = serialize(into: UnsafeMutableRawBufferPointer(buffer))
        }
    }

    public struct FormatError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads a portable serialization, checking that it fits `bytes` exactly.
    public init(deserializing bytes: UnsafeRawBufferPointer) throws {
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            throw FormatError(description: "empty roaring bitmap value")
        }
        let chars = base.assumingMemoryBound(to: CChar.self)
        let expected = roaring_bitmap_portable_deserialize_size(chars, bytes.count)
        guard expected == bytes.count else {
            throw FormatError(description: "roaring bitmap value of \(bytes.count) bytes declares \(expected) bytes")
        }
        guard let result = roaring_bitmap_portable_deserialize_safe(chars, bytes.count) else {
            throw FormatError(description: "roaring bitmap value of \(bytes.count) bytes does not decode")
        }
        self.init(owning: result)
    }

    public init(deserializing bytes: [UInt8]) throws {
        self = try bytes.withUnsafeBytes { (b) throws in try Bitmap(deserializing: b) }
    }
}

extension Bitmap: Equatable {
    public static func == (lhs: Bitmap, rhs: Bitmap) -> Bool { roaring_bitmap_equals(lhs.pointer, rhs.pointer) }
}

extension Bitmap: CustomStringConvertible {
    public var description: String {
        let values = count <= 16 ? toArray().map(String.init).joined(separator: ", ") : "\(count) values"
        return "Bitmap(\(values))"
    }
}

/// Values gathered for one union of small sets (a send to a list of per-user
/// topics): from bitmaps, or straight from stored chunks without making a
/// bitmap of each, up to `limit` values in all; `bitmap()` then builds the union.
///
/// It owns the room for them (not copyable): only the values gathered are
/// ever read, so that memory is left as allocated. As an array filled with
/// zeros it was a `memset` and, through the standard library's generic
/// path, a metadata lookup per count of a list (~1,000 of a different list
/// of 100's 32k instructions, cachegrind).
public struct GatheredValues: ~Copyable {
    private let values: UnsafeMutableBufferPointer<UInt32>
    /// Values gathered so far (duplicates included).
    public private(set) var count = 0
    public let limit: Int

    public init(limit: Int = Bitmap.gatheredUnionLimit) {
        self.limit = limit
        values = .allocate(capacity: max(limit, 1))
    }

    deinit { values.deallocate() }

    /// Appends every value of `bitmap`, which must fit.
    mutating func append(_ bitmap: Bitmap) {
        let n = bitmap.count
        precondition(n <= limit - count, "gathered values past their limit")
        if n == 0 { return }
        roaring_bitmap_to_uint32_array(bitmap.pointer, values.baseAddress! + count)
        count += n
    }

    /// Appends the values of `stored` (a one-container chunk of slice `high`)
    /// when they fit. False, with nothing gathered, when they do not, when the
    /// chunk is a bitset, or when it is not one well-formed container of that
    /// slice: read it the ordinary way then (which reports a corrupt one).
    public mutating func append(slice high: UInt16, stored: UnsafeRawBufferPointer) -> Bool {
        let room = limit - count
        let n = topicstore_slice_values(high, stored.baseAddress, stored.count, values.baseAddress! + count, room)
        guard n >= 0 else { return false }
        count += Int(n)
        return true
    }

    /// Appends `members` when they fit; false, with nothing gathered, when they do not.
    public mutating func append(_ members: UnsafeBufferPointer<UInt32>) -> Bool {
        withAppender { $0.append(members) }
    }

    /// Where values are appended for the length of one `withAppender`: the
    /// values' memory, how many are there and the limit.
    public struct Appender {
        @usableFromInline let values: UnsafeMutableBufferPointer<UInt32>
        @usableFromInline var count: Int

        @usableFromInline
        init(values: UnsafeMutableBufferPointer<UInt32>, count: Int) {
            (self.values, self.count) = (values, count)
        }

        /// Values gathered, those appended so far included: where the next one goes.
        @inlinable
        public var gathered: Int { count }

        /// Appends `members` when they fit; false, with nothing appended, when they do not.
        /// Inlined into the caller: a call per topic of a list of per-user topics,
        /// through the array, was 70 instructions a topic (a seventh of the list's count).
        @inlinable
        public mutating func append(_ members: UnsafeBufferPointer<UInt32>) -> Bool {
            guard members.count <= values.count - count else { return false }
            for v in members {
                values[count] = v
                count += 1
            }
            return true
        }

        /// Appends the first `n` (0…4) of `four` when they fit; false, with nothing
        /// appended, when they do not. A topic's few members held in place are
        /// stored one by one: through `append(_:)` the copy was a call to
        /// `memcpy` for every topic of a list (a twentieth of its count).
        @inlinable
        public mutating func append(first n: Int, of four: (UInt32, UInt32, UInt32, UInt32)) -> Bool {
            guard n >= 0, n <= 4, n <= values.count - count else { return false }
            if n > 0 { values[count] = four.0 }
            if n > 1 { values[count + 1] = four.1 }
            if n > 2 { values[count + 2] = four.2 }
            if n > 3 { values[count + 3] = four.3 }
            count += n
            return true
        }
    }

    /// Calls `body` with an appender at the values' end: what it appends is gathered.
    public mutating func withAppender<R>(_ body: (inout Appender) throws -> R) rethrows -> R {
        var appender = Appender(values: UnsafeMutableBufferPointer(rebasing: values[..<limit]), count: count)
        defer { count = appender.count }
        return try body(&appender)
    }

    /// Calls `body` with the values' memory (room for `limit`) and how many
    /// are gathered, which it moves on past the values it stores after them
    /// (a list's held members gathered in C, `topicstore_gather_held`).
    public mutating func withUnsafeStorage<R>(_ body: (UnsafeMutablePointer<UInt32>, inout Int) throws -> R) rethrows -> R {
        var n = count
        defer {
            precondition(n >= count && n <= limit, "gathered values past their limit")
            count = n
        }
        return try body(values.baseAddress!, &n)
    }

    /// Calls `body` with the values gathered, to change in place (`GatheredMembers.distinctReaches`).
    public mutating func withMutableValues<R>(_ body: (UnsafeMutableBufferPointer<UInt32>) throws -> R) rethrows -> R {
        try body(UnsafeMutableBufferPointer(rebasing: values[..<count]))
    }

    /// Calls `body` with the values gathered from index `mark` on (`count` before a topic was gathered).
    public func withValues<R>(from mark: Int, _ body: (UnsafeBufferPointer<UInt32>) throws -> R) rethrows -> R {
        precondition(mark <= count)
        return try body(UnsafeBufferPointer(rebasing: values[mark..<count]))
    }

    /// Forgets the values gathered after the first `count` (a topic that did not fit after all).
    public mutating func truncate(to count: Int) {
        precondition(count <= self.count)
        self.count = count
    }

    /// The set of the values gathered.
    public mutating func bitmap() -> Bitmap {
        let n = count
        let result = Bitmap()
        guard n > 0 else { return result }
        var gathered = UnsafeMutableBufferPointer(rebasing: values[..<n])
        gathered.sort()  // in order, each value lands in the container at hand
        roaring_bitmap_add_many(result.storage.pointer, n, gathered.baseAddress)
        return result
    }
}
