import Replay

/// xoshiro256**: the workload's random stream (fast, 256-bit state, good statistics).
public struct Xoshiro256: Sendable {
    private var s0, s1, s2, s3: UInt64

    public init(seed: UInt64) {
        var sm = SplitMix64(seed: seed)
        s0 = sm.next(); s1 = sm.next(); s2 = sm.next(); s3 = sm.next()
    }

    @inline(__always)
    public mutating func next() -> UInt64 {
        let result = ((s1 &* 5) << 7 | (s1 &* 5) >> 57) &* 9
        let t = s1 << 17
        s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3
        s2 ^= t
        s3 = s3 << 45 | s3 >> 19
        return result
    }

    /// Uniform in `0..<bound` (Lemire's multiply-shift, unbiased by rejection).
    @inline(__always)
    public mutating func below(_ bound: Int) -> Int {
        precondition(bound > 0)
        let b = UInt64(bound)
        var m = next().multipliedFullWidth(by: b)
        if m.low < b {
            let threshold = (0 &- b) % b
            while m.low < threshold { m = next().multipliedFullWidth(by: b) }
        }
        return Int(m.high)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    @inline(__always)
    public mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    /// True with probability `p`.
    @inline(__always)
    public mutating func chance(_ p: Double) -> Bool { unit() < p }
}

/// Draws ranks `1...n` with probability proportional to `1 / rank^exponent`,
/// by binary search in a precomputed cumulative table (n ≤ a few 100k).
public struct ZipfSampler: Sendable {
    public let n: Int
    public let exponent: Double
    private let cumulative: [Double]

    public init(n: Int, exponent: Double) {
        precondition(n > 0)
        self.n = n
        self.exponent = exponent
        var c = [Double](repeating: 0, count: n)
        var sum = 0.0
        for k in 1...n {
            sum += 1.0 / Self.power(Double(k), exponent)
            c[k - 1] = sum
        }
        for i in 0..<n { c[i] /= sum }
        c[n - 1] = 1.0
        cumulative = c
    }

    /// Probability of `rank` (1-based).
    public func probability(ofRank rank: Int) -> Double {
        rank == 1 ? cumulative[0] : cumulative[rank - 1] - cumulative[rank - 2]
    }

    /// A rank in `1...n`.
    @inline(__always)
    public func sample(_ rng: inout Xoshiro256) -> Int {
        let u = rng.unit()
        var lo = 0, hi = n - 1
        while lo < hi {
            let mid = (lo + hi) >> 1
            if cumulative[mid] > u { hi = mid } else { lo = mid + 1 }
        }
        return lo + 1
    }

    /// x^e without Foundation (e is 1.0 in the default workload, handled exactly).
    static func power(_ x: Double, _ e: Double) -> Double {
        if e == 1.0 { return x }
        return exp2(e * log2(x))
    }
}

// exp2/log2 from the C library (Glibc), available without Foundation.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
