/// SplitMix64: a small, fast, seeded generator for reproducible workloads (the replay,
/// compaction and store benchmarks generate the same data from a seed); it also seeds
/// other generators and derives independent per-item streams from (seed, index) pairs.
/// Deterministic on every platform; no Foundation.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }

    @inline(__always)
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A well-mixed 64-bit value for `(seed, a, b)`: independent streams per device and generation.
    @inline(__always)
    public static func mix(_ seed: UInt64, _ a: UInt64, _ b: UInt64 = 0) -> UInt64 {
        var s = SplitMix64(seed: seed ^ (a &* 0xD6E8_FEB8_6659_FD93) ^ (b &* 0xA076_1D64_78BD_642F))
        _ = s.next()
        return s.next()
    }
}
