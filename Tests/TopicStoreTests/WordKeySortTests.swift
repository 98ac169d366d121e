@testable import Projections
import Testing

/// The radix sort a rebuild orders its topic codes with (`sortByWords`): the
/// order the standard library's sort gives with the same comparison, for keys
/// that share bytes (passed over), that differ in one byte only, that are
/// equal in all three words (ordered by the tie-break alone), at every size
/// around the point where a range is sorted by insertion.
@Suite struct WordKeySortTests {
    /// A word of 8 bytes, each one of `alphabet`: few values, so that ranges
    /// share bytes at every depth and words are often equal.
    static func word(_ alphabet: [UInt8], _ rng: inout SeededRandom) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { w, _ in w << 8 | UInt64(alphabet.randomElement(using: &rng)!) }
    }

    @Test(arguments: [0, 1, 2, 23, 24, 25, 100, 1_000, 20_000])
    func ordersAsTheStandardSortWithTheSameComparison(count: Int) {
        var rng = SeededRandom(seed: UInt64(count) &+ 11)
        // The payload's low half is the tie-break; the high half tells equal items apart.
        let tieBreak: (WordKeyed, WordKeyed) -> Bool = { UInt32(truncatingIfNeeded: $0.payload) < UInt32(truncatingIfNeeded: $1.payload) }
        let shapes: [[UInt8]] = [[0x61], [0x00, 0xFF], [0x61, 0x62, 0x63], Array(0...255)]
        for shape in shapes {
            var items: [WordKeyed] = (0..<count).map { i in
                WordKeyed(w0: Self.word([7], &rng) ^ UInt64.random(in: 0...1, using: &rng),
                          w1: Self.word(shape, &rng), w2: Self.word(shape, &rng),
                          payload: UInt64(i) << 32 | UInt64.random(in: 0...3, using: &rng))
            }
            let expected = items.sorted { l, r in
                if (l.w0, l.w1, l.w2) != (r.w0, r.w1, r.w2) { return (l.w0, l.w1, l.w2) < (r.w0, r.w1, r.w2) }
                return tieBreak(l, r)
            }
            items.sortByWords(tieBreak: tieBreak)
            // Items the comparison calls equal may come in either order; their keys may not.
            #expect(items.map { [$0.w0, $0.w1, $0.w2, $0.payload & 0xFFFF_FFFF] } == expected.map { [$0.w0, $0.w1, $0.w2, $0.payload & 0xFFFF_FFFF] })
            #expect(Set(items.map(\.payload)) == Set(expected.map(\.payload)))
        }
    }
}
