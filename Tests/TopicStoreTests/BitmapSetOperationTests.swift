@testable import Roaring
import Testing

/// `Bitmap.union` of many bitmaps takes two paths: small unions (a send to
/// a list of per-user topics) gather the values, larger ones go slice by
/// slice through our C (`topicstore_union_many`). Both must give exactly the set union.
@Suite("Bitmap unions, intersections and differences")
struct BitmapSetOperationTests {
    /// Random bitmaps of a few values each, spread over several slices and
    /// overlapping, some with a dense slice, checked against a Set model;
    /// the sizes put the total on both sides of the gathering limit.
    @Test func aManyWayUnionIsTheSetUnionOnBothPaths() {
        var rng = SeededRandom(seed: 0x0B17_5E75)
        var gathered = 0, ored = 0
        for round in 0..<400 {
            let n = rng.int(130)
            var model = Set<UInt32>()
            var parts: [Bitmap] = []
            var total = 0
            for _ in 0..<n {
                var values: [UInt32] = []
                let size = round % 4 == 0 ? rng.int(60) : rng.int(4)
                for _ in 0..<size { values.append(UInt32(rng.int(6)) << 16 | UInt32(rng.int(300))) }
                if rng.int(40) == 0 { values += (0..<UInt32(5_000)).map { 7 << 16 | $0 } }  // a dense slice
                model.formUnion(values)
                total += Set(values).count
                parts.append(Bitmap(values))
            }
            if n > 2 { if total <= Bitmap.gatheredUnionLimit { gathered += 1 } else { ored += 1 } }
            let union = Bitmap.union(parts)
            let same = union.toArray() == model.sorted()  // (compared apart: a failure would print both arrays whole)
            #expect(same, "round \(round): \(n) bitmaps, \(total) values")
            #expect(union.count == model.count)
        }
        #expect(gathered > 50 && ored > 50, "both paths ran: \(gathered) gathered, \(ored) slice by slice")
    }

    /// Arrays that fit one array together are merged two at a time, smallest
    /// first, by one of three walks (SortedArrays.c): a binary search per value
    /// when one is 16 times the other, eight values at a time when both have
    /// 8, one at a time otherwise. Random arrays of every size ratio, spread
    /// wide or crowded into a narrow range (many values in common), at the
    /// bottom or the top of the slice (0 and 65,535), with the lengths around
    /// 8 and 16 where the walks change, must give the set union.
    @Test func unionsOfArraysOfEverySizeRatioAreTheSetUnion() {
        var rng = SeededRandom(seed: 0x5EED_0A55)
        let sizes = [0, 1, 7, 8, 9, 15, 16, 17, 24, 63, 64, 65, 130, 400, 1_000, 2_000]
        for round in 0..<800 {
            var model = Set<UInt32>()
            var parts: [Bitmap] = []
            for _ in 0..<(2 + rng.int(3)) {
                let size = rng.int(3) == 0 ? rng.int(2_100) : rng.pick(sizes)
                // Narrow spans share most values; wide ones interleave.
                let span = min(65_536, max(size, 1) * rng.pick([1, 2, 4, 64]))
                let low = rng.pick([0, 65_536 - span, rng.int(65_536 - span + 1)])
                var values = Set<UInt32>()
                while values.count < min(size, span) { values.insert(UInt32(low + rng.int(span))) }
                model.formUnion(values)
                parts.append(Bitmap(Array(values)))
            }
            // Past the gathering limit, so that the union goes slice by slice.
            let filler = (0..<UInt32(1_100)).map { 9 << 16 | $0 * 7 }
            model.formUnion(filler)
            parts.append(Bitmap(filler))
            let union = Bitmap.union(parts)
            let same = union.toArray() == model.sorted()  // (compared apart: a failure would print both arrays whole)
            #expect(same, "round \(round): sizes \(parts.map(\.count))")
            #expect(union.count == model.count, "round \(round)")
        }
    }

    /// A random bitmap over slices 0…3 (each slice left out with chance
    /// 1/`absent`), each slice one container kind: a few values, an array, a
    /// dense or a sparser bitset, runs, the whole slice, or its last value
    /// only. Its values are flagged in `model` (one flag per value of the four slices).
    static func random(_ rng: inout SeededRandom, _ model: inout [Bool], absent: Int) -> Bitmap {
        var values: [UInt32] = []
        for slice in 0..<UInt32(4) where rng.int(absent) != 0 {
            let base = slice << 16
            switch rng.int(7) {
            case 0: for _ in 0..<(1 + rng.int(40)) { values.append(base | UInt32(rng.int(65_536))) }          // a few
            case 1: for _ in 0..<(100 + rng.int(3_000)) { values.append(base | UInt32(rng.int(65_536))) }     // an array
            case 2: for v in 0..<UInt32(65_536) where rng.int(3) != 0 { values.append(base | v) }             // a dense bitset
            case 3: for v in 0..<UInt32(65_536) where rng.int(9) == 0 { values.append(base | v) }             // a sparser bitset
            case 4:                                                                                           // runs
                for _ in 0..<(1 + rng.int(30)) {
                    let start = rng.int(65_536), length = 1 + rng.int(5_000)
                    values += (UInt32(start)..<UInt32(min(65_536, start + length))).map { base | $0 }
                }
            case 5: values += (0..<UInt32(65_536)).map { base | $0 }                                           // the whole slice
            default: values.append(base | 65_535)                                                             // its last value
            }
        }
        for v in values { model[Int(v)] = true }
        var b = Bitmap(values)
        b.optimize()  // ranges become run containers
        return b
    }

    /// Unions past the gathering limit go slice by slice through our C: a
    /// slice only one bitmap has is copied, small arrays are merged, anything
    /// else is ORed, counted, and kept as a bitset or turned back into an
    /// array. Random operands mix every container kind in shared slices (see
    /// `random`); the union must be the set union, with the right count, and
    /// must answer intersection counts and serialize as a bitmap built from the values does.
    @Test func aUnionContainerByContainerIsTheSetUnion() throws {
        var rng = SeededRandom(seed: 0xC0_47A1_4E25)
        for round in 0..<60 {
            let n = 3 + rng.int(rng.int(5) == 0 ? 30 : 6)
            // The model: one flag per value of the four slices.
            var model = [Bool](repeating: false, count: 4 << 16)
            let parts = (0..<n).map { _ in Self.random(&rng, &model, absent: 3) }
            let union = Bitmap.union(parts)
            let expected = model.indices.filter { model[$0] }.map { UInt32($0) }
            #expect(union.count == expected.count, "round \(round): \(n) bitmaps")
            let got = union.toArray()
            let same = got == expected  // (compared apart: a failure would print both arrays whole)
            #expect(same, "round \(round): \(n) bitmaps; \(got.count) values, \(expected.count) expected")
            let probed = (0..<2_000).map { _ in UInt32(rng.int(4)) << 16 | UInt32(rng.int(65_536)) }
            var probe = Bitmap(probed)
            #expect(union.intersectionCount(probe) == Set(probed.filter { model[Int($0)] }).count, "round \(round)")
            probe.formUnion(union)
            #expect(probe.count == expected.count + Set(probed.filter { !model[Int($0)] }).count, "round \(round)")
            var canonical = union
            canonical.optimize()
            var built = Bitmap(expected)
            built.optimize()
            #expect(canonical.serialized() == built.serialized(), "round \(round)")
        }
    }

    /// Intersections and differences combine two bitsets in our C (counted
    /// with POPCNT) and hand every other pair of containers to CRoaring; the
    /// results, and the mutating forms, must be the set operations, with the
    /// right counts, for every pair of container kinds and slices on one side only.
    @Test func intersectionsAndDifferencesAreTheSetOperations() {
        var rng = SeededRandom(seed: 0x1A7E_25EC)
        for round in 0..<60 {
            var inX = [Bool](repeating: false, count: 4 << 16), inY = inX
            let x = Self.random(&rng, &inX, absent: 4), y = Self.random(&rng, &inY, absent: 4)
            let both = inX.indices.filter { inX[$0] && inY[$0] }.map { UInt32($0) }
            let onlyX = inX.indices.filter { inX[$0] && !inY[$0] }.map { UInt32($0) }
            let intersection = x.intersection(y), difference = x.subtracting(y)
            var formed = x, subtracted = x
            formed.formIntersection(y)
            subtracted.subtract(y)
            for (name, got, expected) in [("x ∩ y", intersection, both), ("x \\ y", difference, onlyX),
                                          ("formIntersection", formed, both), ("subtract", subtracted, onlyX)] {
                let values = got.toArray()
                let same = values == expected  // (compared apart: a failure would print both arrays whole)
                #expect(same && got.count == expected.count, "round \(round), \(name): \(got.count) values, \(expected.count) expected")
            }
            #expect(x.toArray().count == inX.filter { $0 }.count, "the operands are left as they were")
        }
    }
}
