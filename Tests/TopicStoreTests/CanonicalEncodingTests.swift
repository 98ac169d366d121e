@testable import Projections
import Roaring
import Testing

/// `Bitmap.hasCanonicalEncoding` lets the writer skip `optimize` for a chunk
/// it keeps from one commit to the next. Skipping must never change what is
/// written: a chunk edited over many commits, optimized only when the check
/// says so, stores exactly the bytes a fresh bitmap of the same members does
/// once optimized.
@Suite struct CanonicalEncodingTests {
    /// One slice's set edited in rounds that move it across every boundary of
    /// the choice: arrays that become runs (2r < n), 4,096 values (array or
    /// bitset), and `mostRunsKept` runs above 4,096 values (runs or bitset).
    @Test(arguments: [11, 12, 13, 14, 15, 16] as [UInt64])
    func aChunkKeptAcrossCommitsStoresTheBytesOfAFreshOne(seed: UInt64) {
        var rng = SeededRandom(seed: seed)
        let high = UInt32(rng.int(16))
        var kept = PostingSet()
        var model = Set<UInt32>()
        var skipped = 0, optimized = 0
        for round in 0..<240 {
            if round % 20 == 0 { kept = PostingSet(); model = [] }  // a new chunk's life, from empty
            // A round: a stretch of consecutive values added or removed, or scattered ones.
            let start = rng.int(65_536)
            let length = [1, 3, 40, 700, 5_000, 20_000][rng.int(model.count < 5_000 ? 4 : 6)]
            let scattered = rng.int(2) == 0
            let adding = model.count < 3_000 || rng.int(3) != 0
            for i in 0..<length {
                let low = scattered ? rng.int(65_536) : (start + i) & 0xFFFF
                let ordinal = high << 16 | UInt32(low)
                if adding { kept.insert(ordinal); model.insert(ordinal) } else { kept.remove(ordinal); model.remove(ordinal) }
            }
            guard !model.isEmpty else { continue }
            if case .bitmap(let b) = kept.storage {
                if b.hasCanonicalEncoding() { skipped += 1 } else { optimized += 1 }
            }
            kept.optimize()
            var fresh = Bitmap(model.sorted())
            fresh.optimize()
            #expect(kept.chunk() == fresh.chunk(), "\(model.count) members")
            if case .bitmap(let b) = kept.storage {
                #expect(b.hasCanonicalEncoding(), "optimize's own result is canonical")
            }
        }
        // Both ways were taken, so the comparison above tested the skip.
        #expect(skipped > 10 && optimized > 10, "skipped \(skipped), optimized \(optimized)")
    }

    /// Each rule of the choice at its boundary, for a container in each of
    /// CRoaring's forms: the check agrees with `optimize` changing nothing.
    @Test func theCheckAgreesWithOptimizeAtEachBoundary() {
        func bitmap(_ values: [UInt32], as form: Int) -> Bitmap {
            var b = Bitmap(values)
            switch form {
            case 0: b.optimize()
            case 1: _ = b  // as CRoaring built it (array or bitset)
            default: b.optimize(mostRuns: Int32.max)  // runs wherever they are smaller
            }
            return b
        }
        let shapes: [[UInt32]] = [
            [1, 2, 3],  // one run of 3: runs (4 bytes < 6)
            [1, 2, 4, 5],  // two runs of 4 values: a tie, so an array
            [1, 2, 3, 5, 6, 7],  // two runs of 6: runs
            Array(0..<4_096),  // 4,096 values: one run
            (0..<4_096).map { $0 * 2 },  // 4,096 scattered: an array
            (0..<4_097).map { $0 * 2 },  // 4,097 scattered: a bitset
            (0..<512).flatMap { r in (0..<10).map { UInt32(r * 20 + $0) } },  // 512 runs, 5,120 values: runs
            (0..<513).flatMap { r in (0..<10).map { UInt32(r * 20 + $0) } },  // 513 runs: a bitset
            Array(0..<65_536),  // the whole slice
        ]
        for shape in shapes {
            for form in 0..<3 {
                let b = bitmap(shape, as: form)
                var optimized = b
                optimized.optimize()
                let unchanged = optimized.chunk() == (b.chunkSize.map { _ in b.chunk() } ?? [])
                if b.hasCanonicalEncoding() {
                    #expect(unchanged, "\(shape.count) values, form \(form): said canonical, but optimize changes it")
                }
                if form == 0 { #expect(b.hasCanonicalEncoding(), "\(shape.count) values: optimize's result is canonical") }
            }
        }
    }
}
