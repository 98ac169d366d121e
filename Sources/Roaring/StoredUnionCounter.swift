internal import CRoaringSlices

/// Counts the union of stored chunks, slice by slice, without building it
/// (`topicstore_union_counts`): the chunks of one slice (one topic each, for
/// an OR of topics) are staged, then counted with the slice's two live
/// chunks. Building each topic's bitmap and their union, to count it and
/// throw it away, allocated a container per topic and slice and copied every value.
public struct StoredUnionCounter: ~Copyable {
    /// At most how many chunks one count takes.
    public static let mostChunks = Int(kMostUnionCounted)

    private let scratch: UnsafeMutableRawPointer
    private let chunks: UnsafeMutablePointer<UnsafeRawPointer?>
    private let lengths: UnsafeMutablePointer<Int>
    private var staged = 0

    /// False keeps this counter to the x86-64 baseline (with POPCNT) where the
    /// CPU has AVX-512 (`StoredExpressionCounter.cpuHasVectorInstructions`) or
    /// AVX2: tests count both ways.
    public var allowsVectorInstructions = true

    public init() {
        scratch = .allocate(byteCount: Int(kUnionCountsScratchBytes), alignment: 64)
        chunks = .allocate(capacity: Self.mostChunks)
        lengths = .allocate(capacity: Self.mostChunks)
    }

    deinit {
        scratch.deallocate()
        chunks.deallocate()
        lengths.deallocate()
    }

    /// Stages `chunk` (borrowed: it must stay valid until the count) for the
    /// next count; false when `mostChunks` are staged already.
    public mutating func stage(_ chunk: UnsafeRawBufferPointer) -> Bool {
        guard staged < Self.mostChunks else { return false }
        chunks[staged] = chunk.baseAddress
        lengths[staged] = chunk.count
        staged += 1
        return true
    }

    /// The size of the union of the staged chunks of slice `high`, and how
    /// many of its values `first` and `second` (stored chunks of that slice;
    /// nil: none) hold; nil when no chunk is staged, one is not a well-formed
    /// container of that slice, or the CPU lacks POPCNT (count the ordinary way
    /// then, which reports damage). Unstages the chunks.
    public mutating func count(inSlice high: UInt16, _ first: UnsafeRawBufferPointer?,
                               _ second: UnsafeRawBufferPointer?) -> (total: Int, first: Int, second: Int)? {
        defer { staged = 0 }
        for i in 0..<staged where lengths[i] == 0 { return nil }
        return countingAgainstLiveChunks(first, second) { live, liveLengths, counts in
            topicstore_union_counts(high, chunks, lengths, staged, live, liveLengths, scratch, counts,
                                    allowsVectorInstructions ? 1 : 0)
        }
    }
}
