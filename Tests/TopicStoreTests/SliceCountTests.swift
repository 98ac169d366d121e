import Foundation
import LMDB
import Projections
import Roaring
import SubscriptionLog
import Testing
import TopicStore

/// Audience counts read the live-token chunks in place
/// (`Bitmap.intersectionCount(inSlice:stored:)`, our C over both stored
/// formats: the compact one, and the portable one of stores before schema
/// 10). It must count exactly what CRoaring counts for every pair of
/// container kinds, refuse any stored bytes that are not one well-formed
/// container (and a portable chunk that names another slice than the one
/// asked for: a compact chunk's slice is its key's), and the count must then fall back to
/// decoding, which names the corrupt chunk. The same holds for a chunk's own
/// cardinality (`Bitmap.sliceCardinality`), the compact layout's subscriber counts.
@Suite("Slice counts")
struct SliceCountTests {
    /// `b` (one container) as a chunk is stored: the compact format, or the
    /// portable one that stores before schema 10 hold.
    static func stored(_ b: Bitmap, compact: Bool) -> [UInt8] { compact ? b.chunk() : b.serialized() }

    /// Values of slice `high` in one of the shapes CRoaring stores as an
    /// array, a bitset or runs (`optimize()` turns ranges into runs).
    static func slice(_ high: UInt32, shape: Int, _ rng: inout SeededRandom) -> Bitmap {
        let base = high << 16
        var values: [UInt32] = []
        switch shape {
        case 0:  // sparse: an array container
            for _ in 0..<(1 + rng.int(300)) { values.append(base | UInt32(rng.int(65_536))) }
        case 1:  // dense and scattered: a bitset
            for v in 0..<65_536 where rng.int(3) == 0 { values.append(base | UInt32(v)) }
        case 2:  // ranges: runs once optimized
            var at = rng.int(200)
            while at < 65_536 {
                let length = 1 + rng.int(900)
                for v in at..<min(at + length, 65_536) { values.append(base | UInt32(v)) }
                at += length + 1 + rng.int(700)
            }
        case 4:  // nearly full, with holes: many runs (`all`)
            for v in 0..<65_536 where rng.int(60) != 0 { values.append(base | UInt32(v)) }
        default:  // a handful at the edges of the slice
            values = [base, base | 1, base | 0xFFFE, base | 0xFFFF].filter { _ in rng.int(2) == 0 }
            if values.isEmpty { values = [base | 0xFFFF] }
        }
        var b = Bitmap(values)
        // Shape 4 as stores before the bitset rule (`Bitmap.mostRunsKept`) wrote `all`: runs.
        b.optimize(mostRuns: shape == 4 ? .max : Bitmap.mostRunsKept)
        return b
    }

    /// Calls `body` six times for every pair of container kinds: an audience
    /// with slice `high` of the memory shape and random slices on either side
    /// of it, and a chunk of slice `high` of the stored shape.
    static func forEachShapePair(_ rng: inout SeededRandom,
                                 _ body: (_ memoryShape: Int, _ storedShape: Int, _ high: UInt16, _ audience: Bitmap,
                                          _ stored: Bitmap, _ rng: inout SeededRandom) throws -> Void) rethrows {
        for memoryShape in 0..<5 {
            for storedShape in 0..<5 {
                for _ in 0..<6 {
                    let high = UInt16(1 + rng.int(20))
                    var audience = slice(UInt32(high), shape: memoryShape, &rng)
                    audience.formUnion(slice(UInt32(high) - 1, shape: rng.int(4), &rng))
                    audience.formUnion(slice(UInt32(high) + 1, shape: rng.int(4), &rng))
                    let stored = slice(UInt32(high), shape: storedShape, &rng)
                    try body(memoryShape, storedShape, high, audience, stored, &rng)
                }
            }
        }
    }

    @Test("counts what CRoaring counts, for every pair of container kinds", arguments: [1, 2, 3] as [UInt64], [true, false])
    func matchesCRoaring(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        // The audience also holds neighbouring slices, which must not count.
        Self.forEachShapePair(&rng) { memoryShape, storedShape, high, audience, stored, rng in
            let expected = audience.intersectionCount(stored)
            let bytes = Self.stored(stored, compact: compact)
            let counted = bytes.withUnsafeBytes { audience.intersectionCount(inSlice: high, stored: $0) }
            #expect(counted == expected, "memory shape \(memoryShape), stored shape \(storedShape)")
            // A chunk's own cardinality (the compact layout's subscriber counts).
            #expect(bytes.withUnsafeBytes { Bitmap.sliceCardinality(high, stored: $0) } == stored.count)
            // An audience with nothing in the slice counts nothing.
            let elsewhere = Self.slice(UInt32(high) + 3, shape: memoryShape, &rng)
            #expect(bytes.withUnsafeBytes { elsewhere.intersectionCount(inSlice: high, stored: $0) } == 0)
        }
    }

    @Test("intersecting a slice with a stored chunk in place is the set intersection, or refused unchanged", arguments: [4, 5] as [UInt64], [true, false])
    func intersectsInPlace(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        // Neighbouring slices must stay as they are.
        Self.forEachShapePair(&rng) { memoryShape, storedShape, high, audience, stored, _ in
            let wholeSlice = Bitmap(Array(UInt32(high) << 16..<(UInt32(high) + 1) << 16))
            var expected = audience.intersection(stored)
            expected.formUnion(audience.subtracting(wholeSlice))
            var result = audience
            let done = Self.stored(stored, compact: compact).withUnsafeBytes { result.formIntersection(inSlice: high, stored: $0) }
            if done {
                #expect(result == expected && result.count == expected.count, "memory \(memoryShape), stored \(storedShape)")
                // The slice in the form CRoaring keeps (at most 4,096 values are an
                // array), and gone when nothing is left of it.
                #expect(result.serializedSize == expected.serializedSize, "memory \(memoryShape), stored \(storedShape)")
                #expect(result.sliceKeys == expected.sliceKeys)
            } else {
                #expect(result == audience, "refused, so unchanged")
                #expect([2, 4].contains(storedShape) || [2, 4].contains(memoryShape), "only runs are refused: \(memoryShape), \(storedShape)")
            }
        }
        // Two bitsets whose intersection is small (an array) or empty (the slice goes).
        let evens = Bitmap(Array(stride(from: UInt32(9) << 16, to: UInt32(10) << 16, by: 2)))
        for (other, count) in [(Bitmap(Array(stride(from: UInt32(9) << 16, to: UInt32(9) << 16 + 20_000, by: 3))), 3_334),
                               (Bitmap(Array(stride(from: UInt32(9) << 16 + 1, to: UInt32(10) << 16, by: 2))), 0)] {
            var result = evens
            result.formUnion(Bitmap([UInt32(3) << 16 | 5]))
            #expect(other.serializedSize > 8_192, "stored as a bitset")
            #expect(Self.stored(other, compact: compact).withUnsafeBytes { result.formIntersection(inSlice: 9, stored: $0) })
            var expected = evens.intersection(other)
            expected.formUnion(Bitmap([UInt32(3) << 16 | 5]))
            #expect(result == expected && result.count == count + 1)
            #expect(result.serializedSize == expected.serializedSize && result.sliceKeys == expected.sliceKeys)
        }
        // A stored bitset whose bits do not match its cardinality is refused, the bitmap unchanged.
        var bits = Self.stored(Self.slice(7, shape: 1, &rng), compact: compact)
        bits[bits.count - 1] ^= 0x80
        var audience = Self.slice(7, shape: 1, &rng)
        let before = audience
        #expect(!bits.withUnsafeBytes { audience.formIntersection(inSlice: 7, stored: $0) })
        #expect(audience == before)
    }

    /// The two live sets of a slice are counted in one call: it must give
    /// each what the one-chunk count gives, for every pair of container
    /// kinds on each side, with either chunk absent, and an audience of many
    /// runs (spread into a bitset once for both) included.
    @Test("two chunks counted at once count what each counts alone", arguments: [6, 7] as [UInt64], [true, false])
    func twoAtOnceMatchOneByOne(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        var spread = 0
        for memoryShape in 0..<5 {
            for firstShape in -1..<5 {
                for secondShape in [-1, 0, 1, 2, 4] {
                    let high = UInt16(1 + rng.int(20))
                    var audience = Self.slice(UInt32(high), shape: memoryShape, &rng)
                    audience.formUnion(Self.slice(UInt32(high) + 1, shape: rng.int(5), &rng))
                    let first = firstShape < 0 ? nil : Self.stored(Self.slice(UInt32(high), shape: firstShape, &rng), compact: compact)
                    let second = secondShape < 0 ? nil : Self.stored(Self.slice(UInt32(high), shape: secondShape, &rng), compact: compact)
                    func alone(_ bytes: [UInt8]?) -> Int? {
                        guard let bytes else { return 0 }
                        return bytes.withUnsafeBytes { audience.intersectionCount(inSlice: high, stored: $0) }
                    }
                    let both = (first ?? []).withUnsafeBytes { f in
                        (second ?? []).withUnsafeBytes { s in
                            audience.intersectionCounts(inSlice: high, first == nil ? nil : f, second == nil ? nil : s)
                        }
                    }
                    let expected = (alone(first), alone(second))
                    #expect(both?.0 == expected.0 && both?.1 == expected.1,
                            "memory shape \(memoryShape), stored shapes \(firstShape) and \(secondShape)")
                    if memoryShape == 4 { spread += 1 }
                    // Nothing in the slice counts nothing; a portable chunk that is not one of this slice is refused.
                    let elsewhere = Self.slice(UInt32(high) + 3, shape: memoryShape, &rng)
                    let none = (first ?? []).withUnsafeBytes { f in elsewhere.intersectionCounts(inSlice: high, first == nil ? nil : f, nil) }
                    #expect(none?.0 == 0 && none?.1 == 0)
                    if let first, !compact {
                        let refused = first.withUnsafeBytes { audience.intersectionCounts(inSlice: high + 1, $0, nil) }
                        #expect(refused == nil, "a chunk of slice \(high) counted as one of \(high + 1)")
                    }
                }
            }
        }
        #expect(spread > 0)
    }

    @Test("a union of stored chunks counted in place counts what the union of their bitmaps counts", arguments: [8, 9] as [UInt64], [true, false])
    func unionCountedInPlace(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        var arrays = 0, ored = 0
        for round in 0..<600 {
            let high = UInt16(rng.int(6))
            // 1 to 6 chunks of any kind, mostly arrays (merged when they fit one array).
            let parts = (0..<(1 + rng.int(6))).map { _ in Self.slice(UInt32(high), shape: rng.int(3) == 0 ? rng.int(5) : 0, &rng) }
            let live = (0..<2).map { _ -> Bitmap? in rng.int(5) == 0 ? nil : Self.slice(UInt32(high), shape: rng.pick([0, 1, 2, 4]), &rng) }
            let stored = parts.map { Self.stored($0, compact: compact) }
            let liveBytes = live.map { $0.map { Self.stored($0, compact: compact) } ?? [] }
            var counter = StoredUnionCounter()
            // Every other round without the vector kernels (AVX-512 or AVX2, where
            // the CPU has them: dense unions are counted with them).
            counter.allowsVectorInstructions = round % 2 == 0
            func counted(_ chunks: [[UInt8]], inSlice h: UInt16) -> (total: Int, first: Int, second: Int)? {
                let buffers = chunks.map { bytes in
                    let b = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 8)
                    b.copyBytes(from: bytes)
                    return UnsafeRawBufferPointer(b)
                }
                defer { for b in buffers { b.deallocate() } }
                for b in buffers {
                    let staged = counter.stage(b)
                    #expect(staged)
                }
                return liveBytes[0].withUnsafeBytes { f in
                    liveBytes[1].withUnsafeBytes { s in
                        counter.count(inSlice: h, live[0] == nil ? nil : f, live[1] == nil ? nil : s)
                    }
                }
            }
            let union = Bitmap.union(parts)
            let got = try #require(counted(stored, inSlice: high), "round \(round)")
            #expect(got.total == union.count, "round \(round): \(parts.map(\.count))")
            #expect(got.first == (live[0].map { union.intersectionCount($0) } ?? 0), "round \(round)")
            #expect(got.second == (live[1].map { union.intersectionCount($0) } ?? 0), "round \(round)")
            if parts.count > 1 { if parts.allSatisfy({ $0.count <= 4_096 }) && union.count <= 4_096 { arrays += 1 } else { ored += 1 } }
            // A portable chunk of another slice, or a damaged one among them, is refused.
            if !compact { #expect(counted(stored, inSlice: high + 1) == nil, "round \(round)") }
            var damaged = stored
            let i = rng.int(damaged.count)
            damaged[i] = Array(damaged[i].dropLast())
            #expect(counted(damaged, inSlice: high) == nil, "round \(round)")
        }
        #expect(arrays > 50 && ored > 50, "\(arrays) merged, \(ored) ORed")
        // At most `mostChunks` are staged.
        var counter = StoredUnionCounter()
        let one = Self.slice(0, shape: 0, &rng), chunk = Self.stored(one, compact: compact)
        chunk.withUnsafeBytes { b in
            var staged = 0
            while counter.stage(b) { staged += 1 }
            #expect(staged == StoredUnionCounter.mostChunks)
            let all = counter.count(inSlice: 0, nil, nil)
            #expect(all?.total == one.count)
        }
    }

    @Test("appending stored chunks slice by slice builds the bitmap their union is", arguments: [4, 5] as [UInt64], [true, false])
    func appendMatchesUnion(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        for _ in 0..<20 {
            var built = Bitmap(), expected = Bitmap()
            var high: UInt32 = UInt32(rng.int(3))
            for _ in 0..<(1 + rng.int(6)) {
                let chunk = Self.slice(high, shape: rng.int(4), &rng)
                expected.formUnion(chunk)
                let appended = Self.stored(chunk, compact: compact).withUnsafeBytes { built.appendSlice(UInt16(high), stored: $0) }
                #expect(appended)
                high += UInt32(1 + rng.int(3))
            }
            #expect(built == expected)
            #expect(built.count == expected.count)
            #expect(built.sliceKeys == expected.sliceKeys)
            // A slice the bitmap already reaches, and malformed bytes, change nothing.
            let last = UInt16(try #require(built.max) >> 16)
            let before = built
            let again = Self.stored(Self.slice(UInt32(last), shape: 0, &rng), compact: compact)
            #expect(!again.withUnsafeBytes { built.appendSlice(last, stored: $0) })
            let next = Self.stored(Self.slice(UInt32(last) + 1, shape: rng.int(3), &rng), compact: compact)
            #expect(!Array(next.dropLast()).withUnsafeBytes { built.appendSlice(last + 1, stored: $0) })
            if !compact { #expect(!next.withUnsafeBytes { built.appendSlice(last + 2, stored: $0) }) }
            #expect(built == before)
        }
        // A run that would end past the slice is refused (CRoaring would later write past a bitset).
        var runs = Bitmap(Array((7 << 16 | 100)...(7 << 16 | 199)) as [UInt32])
        runs.optimize()
        var bytes = Self.stored(runs, compact: compact)
        // The one run now starts at 65,520 and runs 100 values.
        let start = compact ? 2 : 11
        bytes[start] = 0xF0; bytes[start + 1] = 0xFF
        var target = Bitmap()
        #expect(!bytes.withUnsafeBytes { target.appendSlice(7, stored: $0) })
        #expect(target.isEmpty)
    }

    /// A union of small topics gathers their chunks' values in place
    /// (`GatheredValues`): exactly the values CRoaring holds, or nothing when
    /// they do not fit, the chunk is a bitset, or it is malformed.
    @Test("gathering a stored chunk's values gives what CRoaring holds, or nothing", arguments: [6, 7] as [UInt64], [true, false])
    func gatherMatchesCRoaring(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        for _ in 0..<60 {
            var gathered = GatheredValues(limit: 5_000)
            var expected = Bitmap()
            for _ in 0..<(1 + rng.int(4)) {
                let high = UInt16(rng.int(8))
                let shape = rng.int(4)
                let chunk = Self.slice(UInt32(high), shape: shape, &rng)
                let bytes = Self.stored(chunk, compact: compact)
                let before = gathered.count
                let fits = chunk.count <= gathered.limit - before
                let taken = bytes.withUnsafeBytes { gathered.append(slice: high, stored: $0) }
                if shape == 1 || !fits {
                    #expect(!taken, "a bitset, or more than fits (\(chunk.count) values, room for \(gathered.limit - before))")
                    #expect(gathered.count == before)
                } else {
                    #expect(taken, "shape \(shape), \(chunk.count) values")
                    #expect(gathered.count == before + chunk.count)
                    expected.formUnion(chunk)
                }
                // Malformed bytes, or a portable chunk of another slice, gather nothing.
                #expect(!Array(bytes.dropLast()).withUnsafeBytes { gathered.append(slice: high, stored: $0) })
                if !compact { #expect(!bytes.withUnsafeBytes { gathered.append(slice: high &+ 1, stored: $0) }) }
            }
            #expect(gathered.bitmap() == expected)
        }
        // An array whose values do not ascend is refused.
        var array = Self.stored(Bitmap([5 << 16 | 10, 5 << 16 | 20, 5 << 16 | 30] as [UInt32]), compact: compact)
        let first = compact ? 2 : 16
        array.swapAt(first, first + 2); array.swapAt(first + 1, first + 3)
        var gathered = GatheredValues()
        #expect(!array.withUnsafeBytes { gathered.append(slice: 5, stored: $0) })
        #expect(gathered.count == 0 && gathered.bitmap().isEmpty)
    }

    /// Members appended to gathered values (a list's per-user topics), one by
    /// one or through one appender, are kept in order up to the limit; a list
    /// that does not fit adds nothing, and later ones that fit still go in.
    @Test func appendedMembersUpToTheLimit() {
        var rng = SeededRandom(seed: 21)
        for limit in [0, 1, 4, 7, 64] {
            for way in 0..<3 {  // one by one; through one appender; through it, four at most in place
                var gathered = GatheredValues(limit: limit)
                var expected: [UInt32] = []
                let lists = (0..<40).map { _ in (0..<rng.int(way == 2 ? 5 : 7)).map { _ in UInt32(truncatingIfNeeded: rng.next()) } }
                func add(_ list: [UInt32], _ append: (UnsafeBufferPointer<UInt32>) -> Bool) {
                    let fits = list.count <= limit - expected.count
                    #expect(list.withUnsafeBufferPointer(append) == fits, "limit \(limit), \(expected.count) held, \(list.count) more")
                    if fits { expected += list }
                }
                if way == 2 {
                    gathered.withAppender { appender in
                        for list in lists {
                            add(list) { values in
                                // Garbage beyond the first n must not be appended.
                                func at(_ i: Int) -> UInt32 { i < values.count ? values[i] : 0xDEAD_BEEF }
                                return appender.append(first: values.count, of: (at(0), at(1), at(2), at(3)))
                            }
                        }
                    }
                } else if way == 1 {
                    gathered.withAppender { appender in
                        for list in lists { add(list) { appender.append($0) } }
                    }
                } else {
                    for list in lists { add(list) { gathered.append($0) } }
                }
                #expect(gathered.count == expected.count)
                #expect(gathered.withValues(from: 0) { Array($0) } == expected)
            }
        }
    }

    /// `Bitmap.optimize()` undoes runs with our C: libroaring 0.2.66 loops
    /// forever (writing past an array) on a run that ends a slice in a
    /// container of at most 4,096 values, which the writer met when such a
    /// chunk changed. Optimizing again, from any shape, gives the bytes of the
    /// same set built afresh.
    @Test("optimize is canonical, runs that end a slice included", arguments: [11, 12] as [UInt64])
    func optimizeIsCanonical(seed: UInt64) throws {
        var rng = SeededRandom(seed: seed)
        for _ in 0..<200 {
            let high = UInt32(rng.int(3))
            var values: [UInt32] = []
            for _ in 0..<(1 + rng.int(3)) {
                switch rng.int(3) {
                case 0:  // a run to the end of the slice: short (an array) or long (a bitset)
                    let length = rng.int(2) == 0 ? 1 + rng.int(4_000) : 4_097 + rng.int(60_000)
                    values += (65_536 - length..<65_536).map { high << 16 | UInt32($0) }
                default:
                    values += Self.slice(high, shape: rng.int(5), &rng).toArray()
                }
            }
            var edited = Bitmap(values)
            edited.optimize()
            edited.optimize()  // the second undoes the runs the first made
            if let v = values.randomElement(using: &rng) { _ = edited.remove(v); values.removeAll { $0 == v } }
            edited.optimize()
            var fresh = Bitmap(Array(Set(values)).sorted())
            fresh.optimize()
            #expect(edited == fresh)
            #expect(edited.serialized() == fresh.serialized())
        }
    }

    @Test("a nearly full slice with scattered holes is kept as a bitset, a few long runs as runs")
    func manyRunsAreABitset() throws {
        var rng = SeededRandom(seed: 14)
        for (holes, bitset) in [(300, false), (600, true), (1_500, true)] {
            var full = Set(0..<65_536)
            while full.count > 65_536 - holes { full.remove(rng.int(65_536)) }
            let values = (full.sorted() as [Int]).map { 3 << 16 | UInt32($0) }
            var canonical = Bitmap(values), smallest = Bitmap(values)
            canonical.optimize()
            smallest.optimize(mostRuns: .max)
            let bytes = canonical.serialized()
            // Holes that touch make fewer runs than holes, never more.
            let runs = smallest.serializedSize < 8_192
            #expect(runs, "\(holes) holes: CRoaring's smallest form is runs")
            #expect((bytes.count > 8_192) == bitset, "\(holes) holes: \(bytes.count) bytes")
            #expect(canonical == smallest && canonical.count == full.count)
            // Either form counts the same against a stored chunk.
            let live = Self.slice(3, shape: 1, &rng)
            let stored = live.serialized()
            let a = stored.withUnsafeBytes { canonical.intersectionCount(inSlice: 3, stored: $0) }
            let b = stored.withUnsafeBytes { smallest.intersectionCount(inSlice: 3, stored: $0) }
            #expect(a == live.intersectionCount(canonical) && b == a)
        }
    }

    @Test("an empty bitmap has no slices, and counts nothing")
    func emptyBitmap() {
        let empty = Bitmap()
        #expect(empty.sliceKeys.isEmpty)
        #expect(empty.toArray().isEmpty)
        let stored = Bitmap([2 << 16 | 7] as [UInt32]).serialized()
        #expect(stored.withUnsafeBytes { empty.intersectionCount(inSlice: 2, stored: $0) } == 0)
        #expect(Bitmap([1, 70_000] as [UInt32]).sliceKeys == [0, 1])
    }

    @Test("stored bytes that are not one well-formed container of the slice are refused")
    func refusesMalformedChunks() throws {
        var rng = SeededRandom(seed: 9)
        let audience = Self.slice(5, shape: 1, &rng)
        // Whatever the intersection count refuses, the cardinality refuses too.
        func count(_ bytes: [UInt8], high: UInt16 = 5) -> Int? {
            let n = bytes.withUnsafeBytes { audience.intersectionCount(inSlice: high, stored: $0) }
            let c = bytes.withUnsafeBytes { Bitmap.sliceCardinality(high, stored: $0) }
            #expect((n == nil) == (c == nil), "count \(String(describing: n)), cardinality \(String(describing: c))")
            return n
        }
        for shape in 0..<3 {
            let good = Self.slice(5, shape: shape, &rng).serialized()
            #expect(count(good) != nil)
            #expect(count(Array(good.dropLast())) == nil, "truncated, shape \(shape)")
            #expect(count(good + [0]) == nil, "a byte too many, shape \(shape)")
            #expect(count(good, high: 6) == nil, "a chunk of another slice, shape \(shape)")
            #expect(count(Array(good.prefix(3))) == nil)
            var cookie = good
            cookie[0] ^= 0xFF
            #expect(count(cookie) == nil, "unknown cookie, shape \(shape)")
        }
        #expect(count([]) == nil)
        // Two containers in one chunk.
        var two = Bitmap([5 << 16 | 1, 6 << 16 | 1] as [UInt32])
        #expect(count(two.serialized()) == nil)
        two.optimize()
        #expect(count(two.serialized()) == nil)

        // An array whose values do not ascend (header intact: cookie, one
        // container, key 5, cardinality - 1 = 2, one offset; then the values).
        let three = Bitmap([5 << 16 | 10, 5 << 16 | 20, 5 << 16 | 30] as [UInt32])
        var array = three.serialized()
        #expect(array.count == 16 + 6)
        #expect(count(array) == audience.intersectionCount(three))
        array.swapAt(16, 18); array.swapAt(17, 19)  // 20, 10, 30
        #expect(count(array) == nil)

        // Runs that overlap, or run past the end of the slice.
        let first: ClosedRange<UInt32> = (5 << 16 | 100)...(5 << 16 | 199)
        let second: ClosedRange<UInt32> = (5 << 16 | 300)...(5 << 16 | 399)
        var runs = Bitmap(Array(first) + Array(second))
        runs.optimize()
        var bytes = runs.serialized()
        // cookie (count - 1 = 0) ‖ run flags ‖ key ‖ cardinality - 1 ‖ 2 runs ‖ (100, 99) (300, 99)
        #expect(bytes.count == 9 + 2 + 8)
        #expect(count(bytes) != nil)
        bytes[15] = 150 & 0xFF; bytes[16] = 0  // the second run starts at 150: inside the first
        #expect(count(bytes) == nil)
        bytes[15] = 0xF0; bytes[16] = 0xFF     // starts at 65,520 and runs 100 values
        #expect(count(bytes) == nil)
        // A run container without runs (the decoder refuses an empty chunk too).
        #expect(count(Array(bytes.prefix(9)) + [0, 0]) == nil)
    }

    @Test("compact chunks that are not one well-formed container are refused")
    func refusesMalformedCompactChunks() throws {
        var rng = SeededRandom(seed: 10)
        let audience = Self.slice(5, shape: 1, &rng)
        func count(_ bytes: [UInt8]) -> Int? {
            let n = bytes.withUnsafeBytes { audience.intersectionCount(inSlice: 5, stored: $0) }
            let c = bytes.withUnsafeBytes { Bitmap.sliceCardinality(5, stored: $0) }
            #expect((n == nil) == (c == nil), "count \(String(describing: n)), cardinality \(String(describing: c))")
            // What the counts refuse, the checked decoding refuses or reads as another set.
            if n == nil, let decoded = try? bytes.withUnsafeBytes({ try Bitmap(chunk: $0, high: 5) }) {
                #expect(bytes.withUnsafeBytes { Bitmap.sliceCardinality(5, stored: $0) } != decoded.count)
            }
            return n
        }
        for shape in 0..<3 {
            let bitmap = Self.slice(5, shape: shape, &rng)
            let good = bitmap.chunk()
            #expect(good[0] == [1, 2, 3][shape] && good[1] == 0, "tag of shape \(shape)")
            #expect(count(good) == audience.intersectionCount(bitmap))
            #expect(try good.withUnsafeBytes { try Bitmap(chunk: $0, high: 5) } == bitmap)
            #expect(count(Array(good.dropLast())) == nil, "truncated, shape \(shape)")
            #expect(count(good + [0]) == nil, "a byte too many, shape \(shape)")
            #expect(count(Array(good.prefix(2))) == nil, "a tag alone, shape \(shape)")
            var second = good
            second[1] = 1
            #expect(count(second) == nil, "a second byte that is not zero, shape \(shape)")
            #expect(throws: Bitmap.FormatError.self) { try second.withUnsafeBytes { try Bitmap(chunk: $0, high: 5) } }
        }
        #expect(count([]) == nil && count([1]) == nil && count([0, 0, 1, 0]) == nil)
        // Two containers are not a chunk.
        #expect(Bitmap([5 << 16 | 1, 6 << 16 | 1] as [UInt32]).chunkSize == nil)
        #expect(Bitmap().chunkSize == nil)
        // An array as long as a bitset is refused (at most 4,096 values), and a
        // bitset of 4,096 values or fewer (CRoaring holds those as an array).
        #expect(count([1, 0] + [UInt8](repeating: 0, count: 2 * 4_097)) == nil)
        var sparse = [UInt8](repeating: 0, count: 4 + 8_192)
        sparse[0] = 2; sparse[2] = 0xFF; sparse[3] = 0x0F  // 4,096 members said
        for v in 0..<4_096 { sparse[4 + v / 8 * 2] |= 1 << (v % 8) }  // every other byte's bits
        #expect(count(sparse) == nil)
        // An array whose values do not ascend.
        var array = Bitmap([5 << 16 | 10, 5 << 16 | 20, 5 << 16 | 30] as [UInt32]).chunk()
        #expect(array == [1, 0, 10, 0, 20, 0, 30, 0])
        array.swapAt(2, 4)  // 20, 10, 30
        #expect(count(array) == nil)
        // Runs that overlap, or run past the end of the slice.
        let first: ClosedRange<UInt32> = (5 << 16 | 100)...(5 << 16 | 199)
        let second: ClosedRange<UInt32> = (5 << 16 | 300)...(5 << 16 | 399)
        var runs = Bitmap(Array(first) + Array(second))
        runs.optimize()
        var bytes = runs.chunk()
        #expect(bytes == [3, 0, 100, 0, 99, 0, 0x2C, 1, 99, 0])  // the tag, a zero byte, (100, 99) (300, 99)
        #expect(count(bytes) != nil)
        bytes[6] = 150; bytes[7] = 0  // the second run starts at 150: inside the first
        #expect(count(bytes) == nil)
        bytes[6] = 0xF0; bytes[7] = 0xFF  // starts at 65,520 and runs 100 values
        #expect(count(bytes) == nil)
    }

    /// The check that a stored array ascends goes eight neighbours at a time
    /// from 9 values on, and one pair at a time for the rest: two neighbours
    /// out of order, or equal, anywhere in arrays of 2 to 40 values, make the
    /// chunk refused; the array as written is accepted.
    @Test("an array chunk is refused wherever two neighbours are out of order or equal")
    func arraysOutOfOrderAnywhere() {
        for length in 2...40 {
            let values = (0..<UInt32(length)).map { 3 << 16 | ($0 * 37 + 1) }
            let good = Bitmap(values).serialized()
            let header = good.count - 2 * length  // the values come last
            #expect(good.withUnsafeBytes { Bitmap.sliceCardinality(3, stored: $0) } == length)
            for at in 0..<(length - 1) {
                var swapped = good, equal = good
                swapped.swapAt(header + 2 * at, header + 2 * at + 2)
                swapped.swapAt(header + 2 * at + 1, header + 2 * at + 3)
                equal[header + 2 * at + 2] = equal[header + 2 * at]
                equal[header + 2 * at + 3] = equal[header + 2 * at + 1]
                #expect(swapped.withUnsafeBytes { Bitmap.sliceCardinality(3, stored: $0) } == nil, "\(length) values, pair \(at) swapped")
                #expect(equal.withUnsafeBytes { Bitmap.sliceCardinality(3, stored: $0) } == nil, "\(length) values, pair \(at) equal")
            }
        }
    }

    /// Damaged chunks: whatever the bytes, the C reads only inside them (the
    /// suite runs under AddressSanitizer with `swift test --sanitize=address`),
    /// and what it does not refuse it reads as CRoaring's decoder does.
    @Test("damaged chunks are refused or read as CRoaring reads them", arguments: [7, 8] as [UInt64], [true, false])
    func damagedChunks(seed: UInt64, compact: Bool) throws {
        var rng = SeededRandom(seed: seed)
        for _ in 0..<400 {
            let high = UInt16(rng.int(4))
            var audience = Self.slice(UInt32(high), shape: rng.int(4), &rng)
            audience.formUnion(Self.slice(UInt32(high) + 1, shape: rng.int(4), &rng))
            var bytes = Self.stored(Self.slice(UInt32(high), shape: rng.int(4), &rng), compact: compact)
            let header = compact ? 4 : 16
            switch rng.int(3) {
            case 0:  // flip a few bytes, most often in the header
                for _ in 0..<(1 + rng.int(3)) {
                    let i = rng.int(2) == 0 ? rng.int(min(bytes.count, header + 4)) : rng.int(bytes.count)
                    bytes[i] ^= UInt8(1 + rng.int(255))
                }
            case 1:  // cut it short
                bytes = Array(bytes.prefix(rng.int(bytes.count)))
            default:  // random bytes behind a real header
                bytes = Array(bytes.prefix(min(bytes.count, header))) + (0..<rng.int(64)).map { _ in UInt8(rng.int(256)) }
            }
            let counted = bytes.withUnsafeBytes { audience.intersectionCount(inSlice: high, stored: $0) }
            var appendedTo = Bitmap()
            let appended = bytes.withUnsafeBytes { appendedTo.appendSlice(high, stored: $0) }
            guard counted != nil || appended else { continue }
            let decoded = try #require(try? bytes.withUnsafeBytes { try Bitmap(chunk: $0, high: high) }, "accepted bytes CRoaring cannot read")
            if appended { #expect(appendedTo == decoded) }
            // A container with unordered values is refused by the count, so an accepted one
            // counts as CRoaring does (its bitsets are counted bit by bit, whatever the header says).
            if let counted { #expect(counted == audience.intersectionCount(decoded)) }
            // Likewise its cardinality: the members it holds, counted against the whole slice
            // (CRoaring's `count` takes a bitset's from its header, which the damage may have changed).
            if let cardinality = bytes.withUnsafeBytes({ Bitmap.sliceCardinality(high, stored: $0) }) {
                let whole = Bitmap(Array(UInt32(high) << 16...(UInt32(high) << 16 | 0xFFFF)))  // a bitset, counted word by word
                #expect(cardinality == decoded.intersectionCount(whole))
            }
        }
    }

    @Test("a bitset chunk whose header disagrees with its bits makes a count fail naming the chunk")
    func bitsetHeaderDisagreeingWithItsBits() throws {
        let dir = TemporaryDirectory("slice-count")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        // Every other one of 10,000 devices on `news`: 5,000 scattered members, a bitset chunk.
        var events: [Event] = []
        for i in 0..<10_000 {
            events.append(Event(project: "alpha", body: .token(deviceID: "d\(i)", token: "tok\(i)", platform: .ios)))
            if i % 2 == 0 { events.append(Event(project: "alpha", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "news")]))) }
        }
        for result in store.submitAndWait(events) { _ = try result.get() }
        let reader = store.reader
        func total() throws -> Int {
            try store.read { txn in try reader.counts(of: try reader.audience(project: "alpha", .topic("news"), txn), txn).total }
        }
        #expect(try total() == 5_000)
        // The one bitset-sized value is news's chunk; its header (the bitset tag, a zero byte,
        // cardinality - 1 at bytes 2…3) is made to say 4,999 members.
        let (key, value) = try store.read { txn in
            try txn.withCursor(store.tables.postings) { cursor -> ([UInt8], [UInt8]) in
                var entry = try cursor.first()
                while let (k, v) = entry {
                    if v.count > 8_192 { return (Array(k), Array(v)) }
                    entry = try cursor.next()
                }
                throw CancellationError()
            }
        }
        var damaged = value
        #expect(damaged.count == 4 + 8_192 && damaged[0] == 2 && damaged[1] == 0)
        #expect(damaged[2] == UInt8((5_000 - 1) & 0xFF) && damaged[3] == UInt8((5_000 - 1) >> 8))
        damaged[2] = UInt8((4_999 - 1) & 0xFF)
        try store.environment.write { txn in try txn.put(store.tables.postings, key, damaged) }
        let error = try #require(throws: ProjectionCorruption.self) { try total() }
        #expect(error.reason.contains("header says 4999 members, it holds 5000"), "\(error)")
        #expect(error.place.hasPrefix("postings/1/0/"), "\(error.place)")
    }

    /// Cuts the chunk of topic `code` (project 1) in slice `high` short by a
    /// byte, as a damaged value would be; returns the topic's id.
    static func cutChunkShort(_ store: TopicStore, code: String, high: UInt16) throws -> UInt32 {
        let tid = try #require(try store.read { txn in try store.reader.topicID(1, code: code, txn) })
        // `pid ‖ high16 ‖ topic`
        let key: [UInt8] = [0, 0, 0, 1, UInt8(high >> 8), UInt8(high & 0xFF)] + withUnsafeBytes(of: tid.bigEndian) { Array($0) }
        try store.environment.write { txn in
            let value = try #require(try txn.get(store.tables.postings, key))
            try txn.put(store.tables.postings, key, Array(value.dropLast()))
        }
        return tid
    }

    @Test("a corrupt chunk of a topic in an OR makes a count fail naming the chunk")
    func corruptChunkInAnOR() throws {
        let dir = TemporaryDirectory("slice-count")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        var events: [Event] = []
        for i in 0..<200 {
            events.append(Event(project: "alpha", body: .token(deviceID: "d\(i)", token: "tok\(i)", platform: i % 3 == 0 ? .android : .ios)))
            events.append(Event(project: "alpha", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: i % 2 == 0 ? "news" : "sport")])))
        }
        for result in store.submitAndWait(events) { _ = try result.get() }
        let reader = store.reader
        func counts() throws -> AudienceCounts {
            try store.read { txn in try reader.counts(project: "alpha", try AudienceExpression(parsing: "news OR sport OR nope"), txn) }
        }
        let before = try counts()
        #expect(before.total == 200 && before.android == 67 && before.ios == 133 && before.unknownTopics == ["nope"])
        let tid = try Self.cutChunkShort(store, code: "sport", high: 0)
        let error = try #require(throws: ProjectionCorruption.self) { try counts() }
        #expect(error.place == "postings/1/0/\(tid)", "\(error)")
    }

    @Test("a corrupt live-token chunk makes a count fail naming the chunk")
    func corruptLiveChunk() throws {
        let dir = TemporaryDirectory("slice-count")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        try store.submitAndWait(Event(project: "alpha", body: .token(deviceID: "d1", token: "tokA", platform: .ios)))
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "d1", topics: [TopicSpec(code: "news")])))
        let reader = store.reader
        func counts() throws -> AudienceCounts {
            try store.read { txn in try reader.counts(of: try reader.audience(project: "alpha", .topic("news"), txn), txn) }
        }
        #expect(try counts().ios == 1)
        // The live iOS set of project 1, slice 0 (`pid ‖ high16 ‖ topic 0`), overwritten with a chunk of slice 3.
        let key: [UInt8] = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
        try store.environment.write { txn in try txn.put(store.tables.postings, key, Bitmap([3 << 16] as [UInt32]).serialized()) }
        let error = try #require(throws: ProjectionCorruption.self) { try counts() }
        #expect(error.place == "postings/1/0/0")
    }
}
