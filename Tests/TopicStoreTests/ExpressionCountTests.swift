import Foundation
import Roaring
import Testing

/// A boolean audience over dense topics is counted slice by slice from the
/// stored chunks (`StoredExpressionCounter`, our C over the portable format):
/// every operand read as a bitset and the result counted as it is evaluated.
/// It must count exactly what CRoaring's algebra gives, for chunks of every
/// kind, empty leaves and leaves of values from memory, with the CPU's vector
/// kernel (AVX-512 or AVX2) and with the x86-64 baseline; refuse damaged
/// chunks and chunks of another slice;
/// and refuse programs it cannot run.
@Suite("Expression counts")
struct ExpressionCountTests {
    indirect enum Tree {
        case leaf(Int)
        case and(Tree, Tree)
        case or(Tree, Tree)
        case minus(Tree, Tree)
    }

    static func randomTree(leaves: Int, depth: Int, _ rng: inout SeededRandom) -> Tree {
        if depth == 0 || rng.int(3) == 0 { return .leaf(rng.int(leaves)) }
        let a = randomTree(leaves: leaves, depth: depth - 1, &rng), b = randomTree(leaves: leaves, depth: depth - 1, &rng)
        switch rng.int(3) {
        case 0: return .and(a, b)
        case 1: return .or(a, b)
        default: return .minus(a, b)
        }
    }

    /// The tree in postfix steps: a leaf on the right is the operand of its
    /// step; otherwise both sides are pushed and combined.
    static func steps(_ t: Tree) -> [StoredExpressionCounter.Step] {
        switch t {
        case .leaf(let l): return [.push(l)]
        case .and(let a, .leaf(let l)): return steps(a) + [.and(l)]
        case .or(let a, .leaf(let l)): return steps(a) + [.or(l)]
        case .minus(let a, .leaf(let l)): return steps(a) + [.subtracting(l)]
        case .and(let a, let b): return steps(a) + steps(b) + [.andTop]
        case .or(let a, let b): return steps(a) + steps(b) + [.orTop]
        case .minus(let a, let b): return steps(a) + steps(b) + [.subtractingTop]
        }
    }

    static func evaluate(_ t: Tree, _ leaves: [Bitmap]) -> Bitmap {
        switch t {
        case .leaf(let l): return leaves[l]
        case .and(let a, let b): return evaluate(a, leaves).intersection(evaluate(b, leaves))
        case .or(let a, let b): return evaluate(a, leaves).union(evaluate(b, leaves))
        case .minus(let a, let b): return evaluate(a, leaves).subtracting(evaluate(b, leaves))
        }
    }

    /// A leaf as the counter is given it.
    enum Leaf {
        case empty
        case chunk([UInt8])
        case values([UInt16])
    }

    /// Chunks copied each to its own 8-byte aligned buffer (as LMDB's values
    /// are at least 2-byte aligned), freed together.
    final class AlignedCopies {
        private var buffers: [UnsafeMutableRawBufferPointer] = []
        deinit { for b in buffers { b.deallocate() } }

        func copy(_ bytes: [UInt8]) -> UnsafeRawBufferPointer {
            let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 8)
            b.copyBytes(from: bytes)
            buffers.append(b)
            return UnsafeRawBufferPointer(rebasing: b[0..<bytes.count])
        }
    }

    /// Counts with `leaves` set on `counter`, each chunk in its own buffer (`AlignedCopies`).
    static func count(_ counter: inout StoredExpressionCounter, _ leaves: [Leaf], live: [[UInt8]?],
                      inSlice high: UInt16) -> (total: Int, first: Int, second: Int)? {
        let copies = AlignedCopies()
        func copy(_ bytes: [UInt8]) -> UnsafeRawBufferPointer { copies.copy(bytes) }
        for (i, leaf) in leaves.enumerated() {
            switch leaf {
            case .empty: counter.setLeaf(i, chunk: nil)
            case .chunk(let bytes): counter.setLeaf(i, chunk: copy(bytes))
            case .values(let values):
                let b = copy(values.withUnsafeBytes { Array($0) })
                counter.setLeaf(i, values: b.assumingMemoryBound(to: UInt16.self))
            }
        }
        let first = live[0].map(copy), second = live[1].map(copy)
        return withExtendedLifetime(copies) { counter.count(inSlice: high, first, second) }
    }

    @Test("counts what CRoaring's algebra gives, with the vector kernel and without", arguments: [21, 22, 23] as [UInt64])
    func matchesBitmapAlgebra(seed: UInt64) throws {
        for useVector in [true, false] {
            var rng = SeededRandom(seed: seed)
            var nonEmpty = 0
            for round in 0..<250 {
                let high = UInt16(rng.int(6))
                let n = 1 + rng.int(6)
                var bitmaps: [Bitmap] = []
                var leaves: [Leaf] = []
                for _ in 0..<n {
                    switch rng.int(6) {
                    case 0:
                        bitmaps.append(Bitmap())
                        leaves.append(.empty)
                    case 1:
                        let b = SliceCountTests.slice(UInt32(high), shape: 0, &rng)
                        bitmaps.append(b)
                        leaves.append(.values(b.toArray().map { UInt16(truncatingIfNeeded: $0) }))
                    default:
                        let b = SliceCountTests.slice(UInt32(high), shape: rng.pick([0, 1, 2, 3, 4]), &rng)
                        bitmaps.append(b)
                        leaves.append(.chunk(b.serialized()))
                    }
                }
                let live = (0..<2).map { _ -> Bitmap? in rng.int(5) == 0 ? nil : SliceCountTests.slice(UInt32(high), shape: rng.pick([0, 1, 2, 4]), &rng) }
                let liveBytes = live.map { $0?.serialized() }
                let tree = Self.randomTree(leaves: n, depth: 4, &rng)
                let program = Self.steps(tree)
                guard var counter = StoredExpressionCounter(program, leaves: n) else {
                    Issue.record("round \(round): program refused: \(program)")
                    continue
                }
                counter.allowsVectorInstructions = useVector
                let want = Self.evaluate(tree, bitmaps)
                if !want.isEmpty { nonEmpty += 1 }
                let got = try #require(Self.count(&counter, leaves, live: liveBytes, inSlice: high), "round \(round) (\(useVector))")
                #expect(got.total == want.count, "round \(round) (\(useVector)): \(tree)")
                #expect(got.first == (live[0].map { want.intersectionCount($0) } ?? 0), "round \(round) (\(useVector))")
                #expect(got.second == (live[1].map { want.intersectionCount($0) } ?? 0), "round \(round) (\(useVector))")
                // The same leaves again: the counter keeps nothing from one count to the next.
                let again = Self.count(&counter, leaves, live: liveBytes, inSlice: high)
                #expect(again?.total == got.total && again?.first == got.first, "round \(round)")
                // A chunk of another slice, or a damaged one, is refused.
                if let i = leaves.indices.first(where: { if case .chunk = leaves[$0] { return true } else { return false } }),
                   case .chunk(let bytes) = leaves[i] {
                    #expect(Self.count(&counter, leaves, live: liveBytes, inSlice: high + 1) == nil, "round \(round)")
                    var damaged = leaves
                    damaged[i] = .chunk(Array(bytes.dropLast()))
                    #expect(Self.count(&counter, damaged, live: liveBytes, inSlice: high) == nil, "round \(round)")
                }
                if let bytes = liveBytes[0] {
                    #expect(Self.count(&counter, leaves, live: [Array(bytes.dropLast()), liveBytes[1]], inSlice: high) == nil, "round \(round)")
                }
            }
            #expect(nonEmpty > 100, "\(nonEmpty) non-empty results")
        }
    }

    /// An audience ending in `AND platform:ios` has its last leaf in the same
    /// stored chunk as the live set it is counted against: the counter then
    /// counts that set's share as the whole result, once. It must still count
    /// what the algebra gives, whatever the chunk's kind, with the chunk given
    /// as either live set or as both, and when the last step is an OR or an
    /// AND NOT of that chunk.
    @Test("a last leaf that is a live set's own chunk", arguments: [31, 32] as [UInt64])
    func lastLeafIsALiveSet(seed: UInt64) throws {
        for useVector in [true, false] {
            var rng = SeededRandom(seed: seed)
            for round in 0..<150 {
                let high = UInt16(rng.int(4))
                let n = 2 + rng.int(5)
                let bitmaps = (0..<n).map { _ in SliceCountTests.slice(UInt32(high), shape: rng.pick([0, 1, 1, 2, 3, 4]), &rng) }
                let k = rng.int(n)
                let other = SliceCountTests.slice(UInt32(high), shape: rng.pick([0, 1, 2]), &rng)
                // Mostly `… AND leaf`; an OR or AND NOT of it must not be taken for one.
                let rest = Self.randomTree(leaves: n, depth: 3, &rng)
                let tree: Tree = switch rng.int(4) {
                case 0: .or(rest, .leaf(k))
                case 1: .minus(rest, .leaf(k))
                default: .and(rest, .leaf(k))
                }
                guard var counter = StoredExpressionCounter(Self.steps(tree), leaves: n) else {
                    Issue.record("round \(round): program refused")
                    continue
                }
                counter.allowsVectorInstructions = useVector
                let copies = AlignedCopies()
                defer { withExtendedLifetime(copies) {} }
                let chunks = bitmaps.map { copies.copy($0.serialized()) }
                for i in 0..<n { counter.setLeaf(i, chunk: chunks[i]) }
                let want = Self.evaluate(tree, bitmaps)
                let otherChunk = copies.copy(other.serialized())
                // The last leaf's chunk as the first live set, as the second, and as both.
                let cases: [(UnsafeRawBufferPointer, UnsafeRawBufferPointer, Bitmap, Bitmap)] = [
                    (chunks[k], otherChunk, bitmaps[k], other),
                    (otherChunk, chunks[k], other, bitmaps[k]),
                    (chunks[k], chunks[k], bitmaps[k], bitmaps[k]),
                ]
                for (c, (first, second, firstSet, secondSet)) in cases.enumerated() {
                    let counted = counter.count(inSlice: high, first, second)
                    let got = try #require(counted, "round \(round) case \(c)")
                    #expect(got.total == want.count, "round \(round) case \(c) (\(useVector)): \(tree)")
                    #expect(got.first == want.intersectionCount(firstSet), "round \(round) case \(c) (\(useVector))")
                    #expect(got.second == want.intersectionCount(secondSet), "round \(round) case \(c) (\(useVector))")
                }
            }
        }
    }

    @Test("every leaf of a slice, whatever its kind, and the whole slice")
    func fullAndEmptySlices() throws {
        let full = Bitmap(range: 0..<65_536)
        var runs = full
        runs.optimize()
        let leaves: [Leaf] = [.chunk(runs.serialized()), .values([0, 1, 65_535]), .empty]
        // full − (values ∪ empty)
        guard var counter = StoredExpressionCounter([.push(0), .push(1), .or(2), .subtractingTop], leaves: 3) else {
            Issue.record("program refused")
            return
        }
        let got = try #require(Self.count(&counter, leaves, live: [runs.serialized(), nil], inSlice: 0))
        #expect(got.total == 65_533 && got.first == 65_533 && got.second == 0)
    }

    @Test("programs it cannot run are refused; the longest it runs, whole")
    func refusesMalformedPrograms() {
        typealias S = StoredExpressionCounter.Step
        let refused: [([S], Int)] = [
            ([], 1),                                   // nothing
            ([.push(1)], 1),                           // leaf out of range
            ([.push(0), .push(0)], 1),                 // two values left
            ([.and(0)], 1),                            // no operand on the stack
            ([.push(0), .andTop], 1),                  // one operand short
            (Array(repeating: S.push(0), count: StoredExpressionCounter.mostDepth + 1)
             + Array(repeating: S.orTop, count: StoredExpressionCounter.mostDepth), 1),  // too deep
            ([.push(0)], StoredExpressionCounter.mostLeaves + 1),  // too many leaves
            ([.push(0)] + Array(repeating: S.or(0), count: StoredExpressionCounter.mostSteps), 1),  // too long
        ]
        func made(_ steps: [S], _ leaves: Int) -> Bool {
            if let _ = StoredExpressionCounter(steps, leaves: leaves) { return true }
            return false
        }
        for (steps, leaves) in refused {
            #expect(!StoredExpressionCounter.accepts(steps, leaves: leaves) && !made(steps, leaves), "\(steps) over \(leaves)")
        }
        let deepest = Array(repeating: S.push(0), count: StoredExpressionCounter.mostDepth)
            + Array(repeating: S.orTop, count: StoredExpressionCounter.mostDepth - 1)
        #expect(StoredExpressionCounter.accepts(deepest, leaves: 1) && made(deepest, 1))
        let longest = [S.push(0)] + Array(repeating: S.or(0), count: StoredExpressionCounter.mostSteps - 1)
        #expect(StoredExpressionCounter.accepts(longest, leaves: 1) && made(longest, 1))
        // A program of the most steps runs whole: ((a ∪ b) \ b) 127 times, then ∪ c, is (a \ b) ∪ c.
        let whole = [S.push(0)] + Array(repeating: [S.or(1), S.subtracting(1)], count: (StoredExpressionCounter.mostSteps - 2) / 2)
            .flatMap { $0 } + [S.or(2)]
        #expect(whole.count == StoredExpressionCounter.mostSteps)
        var rng = SeededRandom(seed: 41)
        let sets = (0..<3).map { _ in SliceCountTests.slice(3, shape: rng.pick([0, 1]), &rng) }
        if var counter = StoredExpressionCounter(whole, leaves: 3) {
            let counted = Self.count(&counter, sets.map { .chunk($0.serialized()) }, live: [nil, nil], inSlice: 3)
            #expect(counted?.total == sets[0].subtracting(sets[1]).union(sets[2]).count)
        } else {
            Issue.record("a program of \(whole.count) steps refused")
        }
    }
}
