import Roaring

/// The members of one posting chunk as the writer holds them: up to three
/// ordinals inline, or a roaring bitmap beyond that.
///
/// A store with one per-user topic per device holds a million one-member
/// chunks. As bitmaps, each one was a Swift object, a CRoaring bitmap and an
/// array container (five allocations, about 250 bytes) and, in a rebuild,
/// three cache misses per subscription. Inline, it is 9 bytes in the writer's
/// table. It serializes to exactly the bytes CRoaring writes for the same set
/// after `optimize()`, so the stored form does not depend on which one held it
/// (`PostingSetTests` compares them).
struct PostingSet {
    /// Sorted distinct members of one 65,536-ordinal slice (`high`), at most three.
    struct Few {
        var high: UInt16 = 0
        var low: (UInt16, UInt16, UInt16) = (0, 0, 0)
        var count: UInt8 = 0

        static let capacity = 3

        @inline(__always)
        subscript(i: Int) -> UInt16 {
            get {
                switch i { case 0: return low.0; case 1: return low.1; default: return low.2 }
            }
            set {
                switch i { case 0: low.0 = newValue; case 1: low.1 = newValue; default: low.2 = newValue }
            }
        }

        /// Where `value` is, or where it would go.
        @inline(__always)
        func search(_ value: UInt16) -> (found: Bool, at: Int) {
            var i = 0
            while i < Int(count) {
                let v = self[i]
                if v == value { return (true, i) }
                if v > value { break }
                i += 1
            }
            return (false, i)
        }

        func ordinals() -> [UInt32] {
            (0..<Int(count)).map { UInt32(high) << 16 | UInt32(self[$0]) }
        }
    }

    enum Storage {
        case few(Few)
        case bitmap(Bitmap)
    }

    private(set) var storage: Storage

    init() { storage = .few(Few()) }
    init(_ bitmap: Bitmap) { storage = .bitmap(bitmap) }

    /// The set of slice `high` whose members have the low 16 bits `lows`
    /// (ascending, distinct, not empty): inline up to `Few.capacity`.
    init(high: UInt16, sortedLows lows: UnsafeBufferPointer<UInt16>) {
        precondition(!lows.isEmpty, "an empty chunk is not stored")
        if lows.count <= Few.capacity {
            var f = Few()
            f.high = high
            for (i, low) in lows.enumerated() { f[i] = low }
            f.count = UInt8(lows.count)
            storage = .few(f)
        } else {
            var bitmap = Bitmap()
            let appended = bitmap.appendSlice(high, sortedLows: lows)
            precondition(appended, "the members of a chunk are not ascending")
            storage = .bitmap(bitmap)
        }
    }

    var count: Int {
        switch storage {
        case .few(let f): return Int(f.count)
        case .bitmap(let b): return b.count
        }
    }

    var isEmpty: Bool {
        switch storage {
        case .few(let f): return f.count == 0
        case .bitmap(let b): return b.isEmpty
        }
    }

    /// Memory held outside the writer's table, roughly: none inline; a
    /// bitmap's containers and its objects.
    var heldBytes: Int {
        switch storage {
        case .few: return 0
        case .bitmap(let b): return b.serializedSize + 256
        }
    }

    func contains(_ ordinal: UInt32) -> Bool {
        switch storage {
        case .few(let f): return f.count > 0 && UInt32(f.high) == ordinal >> 16 && f.search(UInt16(truncatingIfNeeded: ordinal)).found
        case .bitmap(let b): return b.contains(ordinal)
        }
    }

    /// The members, ascending.
    func toArray() -> [UInt32] {
        switch storage {
        case .few(let f): return f.ordinals()
        case .bitmap(let b): return b.toArray()
        }
    }

    /// Inserts `ordinal`; returns true when it was not there. A chunk holds
    /// one slice: every ordinal of one set shares its high 16 bits.
    @inline(__always) @discardableResult
    mutating func insert(_ ordinal: UInt32) -> Bool { insertNotingEmpty(ordinal).inserted }

    /// Removes `ordinal`; returns true when it was there.
    @inline(__always) @discardableResult
    mutating func remove(_ ordinal: UInt32) -> Bool { removeNotingEmpty(ordinal).removed }

    /// `insert(_:)`, telling also whether the set was empty before, asked in
    /// the same mutating call as the change: asked apart, a bitmap was
    /// retained and released around its `isEmpty` (a call into another
    /// module), once for every member a writer or a rebuild sets.
    @inline(__always)
    mutating func insertNotingEmpty(_ ordinal: UInt32) -> (inserted: Bool, wasEmpty: Bool) {
        switch storage {
        case .few(var f):
            let wasEmpty = f.count == 0
            let high = UInt16(truncatingIfNeeded: ordinal >> 16), low = UInt16(truncatingIfNeeded: ordinal)
            if f.count == 0 { f.high = high }
            precondition(f.high == high, "ordinal \(ordinal) inserted into the chunk of slice \(f.high)")
            let (found, at) = f.search(low)
            if found { return (false, wasEmpty) }
            if Int(f.count) < Few.capacity {
                var i = Int(f.count)
                while i > at { f[i] = f[i - 1]; i -= 1 }
                f[at] = low
                f.count += 1
                storage = .few(f)
                return (true, wasEmpty)
            }
            var bitmap = Bitmap(f.ordinals())
            bitmap.insert(ordinal)
            storage = .bitmap(bitmap)
            return (true, false)
        case .bitmap(var bitmap):
            storage = .few(Few())  // let go of the reference, so the bitmap is changed in place
            let result = bitmap.insertNotingEmpty(ordinal)
            storage = .bitmap(bitmap)
            return result
        }
    }

    /// `remove(_:)`, telling also whether the set is empty after it (see `insertNotingEmpty`).
    @inline(__always)
    mutating func removeNotingEmpty(_ ordinal: UInt32) -> (removed: Bool, isEmpty: Bool) {
        switch storage {
        case .few(var f):
            guard f.count > 0, UInt32(f.high) == ordinal >> 16 else { return (false, f.count == 0) }
            let (found, at) = f.search(UInt16(truncatingIfNeeded: ordinal))
            guard found else { return (false, f.count == 0) }
            for i in at..<(Int(f.count) - 1) { f[i] = f[i + 1] }
            f.count -= 1
            storage = .few(f)
            return (true, f.count == 0)
        case .bitmap(var bitmap):
            storage = .few(Few())
            let result = bitmap.removeNotingEmpty(ordinal)
            storage = .bitmap(bitmap)
            return result
        }
    }

    /// Chooses the bitmap's canonical encoding before it is serialized (see
    /// `Bitmap.optimize`); nothing to do when it has it already, as a chunk
    /// the writer keeps from one commit to the next mostly does (a shared
    /// topic's, optimized for the last commit and given a few members since).
    mutating func optimize() {
        guard case .bitmap(var bitmap) = storage, !bitmap.hasCanonicalEncoding() else { return }
        storage = .few(Few())  // let go of the reference, so the bitmap is changed in place
        bitmap.optimize()
        storage = .bitmap(bitmap)
    }

    // MARK: Stored chunk (the compact format, see `Bitmap.chunkSize`)

    /// Whether CRoaring's `optimize()` makes the inline set a run container:
    /// three consecutive values, where one run (4 bytes and a count) is
    /// smaller than three array values and a cardinality. Any other set of
    /// up to three values stays an array (a run would not be smaller).
    private static func isRun(_ f: Few) -> Bool {
        f.count == 3 && f.low.2 &- f.low.0 == 2
    }

    /// Bytes of the stored chunk (after `optimize()` for a bitmap); the set
    /// must not be empty (an empty chunk is deleted, never stored).
    var chunkSize: Int {
        switch storage {
        case .few(let f):
            precondition(f.count > 0, "an empty posting set is not stored")
            // the tag and a zero byte, then one run or the values.
            return Self.isRun(f) ? 2 + 4 : 2 + 2 * Int(f.count)
        case .bitmap(let b):
            guard let n = b.chunkSize else { preconditionFailure("a posting set is one container") }
            return n
        }
    }

    /// Writes the stored chunk into `buffer` (at least `chunkSize` bytes);
    /// returns the bytes written: the bytes `Bitmap.writeChunk` writes for
    /// the same set once optimized (one array or run container).
    func writeChunk(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        switch storage {
        case .bitmap(let b):
            return b.writeChunk(into: buffer)
        case .few(let f):
            let size = chunkSize
            precondition(buffer.count >= size)
            func u16(_ v: UInt16, _ at: Int) { buffer.storeBytes(of: v.littleEndian, toByteOffset: at, as: UInt16.self) }
            if Self.isRun(f) {
                buffer[0] = Bitmap.ChunkTag.runs.rawValue; buffer[1] = 0
                u16(f.low.0, 2); u16(2, 4)  // one run: its start, its length - 1
            } else {
                buffer[0] = Bitmap.ChunkTag.array.rawValue; buffer[1] = 0
                for i in 0..<Int(f.count) { u16(f[i], 2 + 2 * i) }
            }
            return size
        }
    }

    func chunk() -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: chunkSize) { buffer, initialized in
            initialized = writeChunk(into: UnsafeMutableRawBufferPointer(buffer))
        }
    }
}
