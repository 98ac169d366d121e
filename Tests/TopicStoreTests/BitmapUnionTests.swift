@testable import Roaring
import Testing

/// `Bitmap.union` of many bitmaps takes two paths: small unions (a send to
/// a list of per-user topics) gather the values, larger ones go through
/// CRoaring's `or_many`. Both must give exactly the set union.
@Suite("Bitmap unions")
struct BitmapUnionTests {
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
            #expect(union.toArray() == model.sorted(), "round \(round): \(n) bitmaps, \(total) values")
            #expect(union.count == model.count)
        }
        #expect(gathered > 50 && ored > 50, "both paths ran: \(gathered) gathered, \(ored) through or_many")
    }
}
