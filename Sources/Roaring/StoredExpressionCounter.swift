internal import CRoaringSlices

/// Counts a boolean combination of stored chunks, slice by slice, without
/// building it (`topicstore_expression_counts`): a program over numbered
/// leaves (the topics and sets of an audience), whose chunks for one slice
/// are set, then evaluated and counted with the slice's two live chunks.
/// Every operand is read as a bitset and the result is counted as it is
/// evaluated, in one pass: evaluating with bitmaps built a container per
/// operand and per operation.
public struct StoredExpressionCounter: ~Copyable {
    /// One step of a program, in postfix order: a leaf pushed, the top value
    /// combined with a leaf, or the two top values combined into one.
    public enum Step: Sendable, Hashable {
        case push(Int)
        case and(Int)
        case or(Int)
        case subtracting(Int)
        case andTop
        case orTop
        case subtractingTop

        var encoded: UInt16 {
            switch self {
            case .push(let leaf): return UInt16(kExpressionPush) << 8 | UInt16(leaf)
            case .and(let leaf): return UInt16(kExpressionAnd) << 8 | UInt16(leaf)
            case .or(let leaf): return UInt16(kExpressionOr) << 8 | UInt16(leaf)
            case .subtracting(let leaf): return UInt16(kExpressionAndNot) << 8 | UInt16(leaf)
            case .andTop: return UInt16(kExpressionAndTop) << 8
            case .orTop: return UInt16(kExpressionOrTop) << 8
            case .subtractingTop: return UInt16(kExpressionAndNotTop) << 8
            }
        }

        /// The values on the stack after this step, given those before it.
        func depth(after before: Int) -> Int {
            switch self {
            case .push: return before + 1
            case .and, .or, .subtracting: return before
            case .andTop, .orTop, .subtractingTop: return before - 1
            }
        }
    }

    /// Whether the CPU has AVX-512 with its vector popcount, which counts use
    /// unless `allowsVectorInstructions` is false.
    public static var cpuHasVectorInstructions: Bool { topicstore_has_vector_kernels() != 0 }

    /// False keeps this counter to the x86-64 baseline (with POPCNT) where the
    /// CPU has AVX-512 or AVX2: tests count both ways.
    public var allowsVectorInstructions = true

    /// At most how many leaves a program has, how deep its stack goes, and how many steps it has.
    public static let mostLeaves = Int(kMostExpressionLeaves)
    public static let mostDepth = Int(kMostExpressionDepth)
    public static let mostSteps = Int(kMostExpressionSteps)

    /// Whether `steps` over `leaves` leaves is a program this counter runs:
    /// at most `mostSteps` steps, leaves in range, the stack never deeper
    /// than `mostDepth` nor short of operands, one value at the end.
    public static func accepts(_ steps: [Step], leaves: Int) -> Bool {
        guard leaves <= mostLeaves, !steps.isEmpty, steps.count <= mostSteps else { return false }
        var depth = 0
        for step in steps {
            switch step {
            case .push(let l), .and(let l), .or(let l), .subtracting(let l):
                guard l >= 0 && l < leaves else { return false }
                if case .push = step {} else if depth < 1 { return false }
            case .andTop, .orTop, .subtractingTop:
                guard depth >= 2 else { return false }
            }
            depth = step.depth(after: depth)
            guard depth <= mostDepth else { return false }
        }
        return depth == 1
    }

    private let program: UnsafeMutableBufferPointer<UInt16>
    private let leafCount: Int
    private let scratch: UnsafeMutableRawPointer
    private let leaves: UnsafeMutablePointer<UnsafeRawPointer?>
    private let lengths: UnsafeMutablePointer<Int>
    private let kinds: UnsafeMutablePointer<UInt8>

    /// A counter for `steps` over `leaves` leaves; nil when `accepts` refuses them.
    public init?(_ steps: [Step], leaves: Int) {
        guard Self.accepts(steps, leaves: leaves) else { return nil }
        program = .allocate(capacity: steps.count)
        for (i, step) in steps.enumerated() { program[i] = step.encoded }
        leafCount = leaves
        scratch = .allocate(byteCount: (leaves + 2) * 8192 + Self.mostDepth * 512, alignment: 64)
        self.leaves = .allocate(capacity: max(1, leaves))
        self.leaves.initialize(repeating: nil, count: max(1, leaves))
        lengths = .allocate(capacity: max(1, leaves))
        lengths.initialize(repeating: 0, count: max(1, leaves))
        kinds = .allocate(capacity: max(1, leaves))
        kinds.initialize(repeating: 0, count: max(1, leaves))
    }

    deinit {
        program.deallocate()
        scratch.deallocate()
        leaves.deallocate()
        lengths.deallocate()
        kinds.deallocate()
    }

    /// Leaf `i` in the next count: a stored chunk of the slice (borrowed: it
    /// must stay valid until the count), or nil for none (the empty set).
    public mutating func setLeaf(_ i: Int, chunk: UnsafeRawBufferPointer?) {
        precondition(i >= 0 && i < leafCount, "leaf \(i) of \(leafCount)")
        leaves[i] = chunk?.baseAddress
        lengths[i] = chunk?.count ?? 0
        kinds[i] = UInt8(kExpressionLeafChunk)
        if let chunk, chunk.baseAddress == nil || chunk.count == 0 { lengths[i] = -1 }  // refused by `count`
    }

    /// Leaf `i` in the next count: the low 16 bits of its devices in the
    /// slice, ascending (borrowed until the count); empty is the empty set.
    public mutating func setLeaf(_ i: Int, values: UnsafeBufferPointer<UInt16>) {
        precondition(i >= 0 && i < leafCount, "leaf \(i) of \(leafCount)")
        leaves[i] = values.isEmpty ? nil : UnsafeRawPointer(values.baseAddress)
        lengths[i] = values.count
        kinds[i] = UInt8(kExpressionLeafValues)
    }

    /// The size of the program's result in slice `high`, and how many of its
    /// devices `first` and `second` (stored chunks of that slice; nil: none)
    /// hold; nil when a chunk is not a well-formed container of that slice,
    /// or the CPU lacks POPCNT (count the ordinary way then, which reports
    /// damage). The leaves stay set.
    public func count(inSlice high: UInt16, _ first: UnsafeRawBufferPointer?,
                      _ second: UnsafeRawBufferPointer?) -> (total: Int, first: Int, second: Int)? {
        for i in 0..<leafCount where lengths[i] < 0 { return nil }
        return countingAgainstLiveChunks(first, second) { live, liveLengths, counts in
            topicstore_expression_counts(high, program.baseAddress, program.count, leaves, lengths, kinds, leafCount,
                                         live, liveLengths, scratch, counts, allowsVectorInstructions ? 1 : 0)
        }
    }
}
