import LMDB
import Roaring

extension ProjectionReader {
    /// An audience compiled for `StoredExpressionCounter`: its steps over
    /// numbered leaves, each a topic (by code) or a built-in set.
    struct CountProgram: Equatable {
        enum Leaf: Equatable {
            case topic(String)
            /// A platform's live devices or every device the project knows (`ProjectionTables.BuiltIn`).
            case set(UInt32)
        }
        var steps: [StoredExpressionCounter.Step] = []
        var leaves: [Leaf] = []

        /// `e` compiled as `AudienceEvaluation` evaluates it: `a AND NOT b` is
        /// `a` less `b`, a NOT alone every known device less its operand. nil
        /// when it needs more leaves or a deeper stack than the counter has.
        init?(_ e: AudienceExpression) {
            guard emit(e), StoredExpressionCounter.accepts(steps, leaves: leaves.count) else { return nil }
        }

        private enum Operation { case and, or, subtracting }

        /// Appends the steps that leave `e` on top of the stack.
        private mutating func emit(_ e: AudienceExpression) -> Bool {
            guard steps.count <= 4 * StoredExpressionCounter.mostLeaves else { return false }
            switch e {
            case .and(let a, .not(let b)), .and(.not(let b), let a):
                return emit(a) && combine(.subtracting, b)
            case .and(let a, let b):
                // A leaf is taken as the operand of the step, not pushed.
                return leaf(of: a) != nil && leaf(of: b) == nil ? emit(b) && combine(.and, a) : emit(a) && combine(.and, b)
            case .or(let a, let b):
                return leaf(of: a) != nil && leaf(of: b) == nil ? emit(b) && combine(.or, a) : emit(a) && combine(.or, b)
            case .not(let a):
                steps.append(.push(index(of: .set(ProjectionTables.BuiltIn.knownDevices))))
                return combine(.subtracting, a)
            case .topic, .platform, .allDevices:
                guard let l = leaf(of: e) else { return false }
                steps.append(.push(index(of: l)))
                return true
            }
        }

        /// Combines the top of the stack with `e`: in one step when it is a leaf.
        private mutating func combine(_ operation: Operation, _ e: AudienceExpression) -> Bool {
            if let l = leaf(of: e) {
                let i = index(of: l)
                switch operation {
                case .and: steps.append(.and(i))
                case .or: steps.append(.or(i))
                case .subtracting: steps.append(.subtracting(i))
                }
                return true
            }
            guard emit(e) else { return false }
            switch operation {
            case .and: steps.append(.andTop)
            case .or: steps.append(.orTop)
            case .subtracting: steps.append(.subtractingTop)
            }
            return true
        }

        private func leaf(of e: AudienceExpression) -> Leaf? {
            switch e {
            case .topic(let code): return .topic(code)
            case .platform(let p): return .set(ProjectionTables.BuiltIn.live(p))
            case .allDevices: return .set(ProjectionTables.BuiltIn.knownDevices)
            default: return nil
            }
        }

        /// The number of leaf `l`, the same for every mention of it.
        private mutating func index(of l: Leaf) -> Int {
            if let i = leaves.firstIndex(of: l) { return i }
            leaves.append(l)
            return leaves.count - 1
        }
    }

    /// The counts of `expression` for project `pid`, taken slice by slice from
    /// the stored chunks of its topics and sets (`StoredExpressionCounter`):
    /// every operand read as a bitset, the result counted as it is evaluated,
    /// nothing built. For audiences whose evaluation would build dense bitmaps
    /// (`buildsDense`), which windows of bitmaps counted before. Slices where
    /// the expression cannot hold a device (no topic of an OR there, say) are
    /// skipped unread. nil when the expression does not compile into the
    /// counter's program, or a chunk a topic lists is missing or is not
    /// well-formed: the evaluation counts it then, and reports the damage
    /// where it reads it. In the serving process, a topic's chunks come from
    /// the topic directory where it holds them for the snapshot.
    func expressionCounts(_ pid: UInt32, _ expression: AudienceExpression, asOf: UInt64,
                          _ txn: borrowing Transaction) throws -> AudienceCounts? {
        guard let program = CountProgram(expression),
              var counter = StoredExpressionCounter(program.steps, leaves: program.leaves.count) else { return nil }
        /// Where a leaf is: a topic in its slices, or with its members; nothing
        /// (an unknown code); a built-in set, in whichever slices it has chunks.
        enum Placed {
            case slices(tid: UInt32, [UInt16], held: TopicCache.HeldTopicChunks?)
            /// A few devices: their slices, and their low 16 bits (freed at the end).
            case members([UInt32], lows: UnsafeMutableBufferPointer<UInt16>)
            case none
            case set(UInt32)
        }
        var unknown = Set<String>()
        var placed: [Placed] = []
        var offered: [(i: Int, code: String, tid: UInt32)] = []  // leaves placed in slices
        defer {
            for case .members(_, let lows) in placed { lows.deallocate() }
        }
        for leaf in program.leaves {
            switch leaf {
            case .set(let tid):
                placed.append(.set(tid))
            case .topic(let code):
                switch try placement(pid, code: code, asOf: asOf, txn) {
                case nil:
                    unknown.insert(code)
                    placed.append(.none)
                case .members(_, let members)?:
                    let lows = UnsafeMutableBufferPointer<UInt16>.allocate(capacity: max(1, members.count))
                    for (j, m) in members.enumerated() { lows[j] = UInt16(truncatingIfNeeded: m) }
                    placed.append(.members(members, lows: lows))
                case .slices(let tid, let slices)?:
                    let held = topicCache?.chunks(pid, code: code, asOf: asOf)
                    placed.append(.slices(tid: tid, slices, held: held?.count == slices.count ? held : nil))
                    offered.append((i: placed.count - 1, code: code, tid: tid))
                }
            }
        }
        var counts = AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0,
                                    unknownTopics: unknown.sorted())
        guard let top = try PostingChunk.maxHigh(pid: pid, tables: tables, txn) else { return counts }
        var next = [Int](repeating: 0, count: placed.count)  // each listed leaf's next slice or member
        var first = [Int](repeating: 0, count: placed.count)  // a member leaf's first member in the slice at hand
        var present = [Bool](repeating: false, count: placed.count)
        var liveSets = LiveChunkReader(self, pid: pid, asOf: asOf)
        defer { withExtendedLifetime(liveSets) {} }
        var read = HeldChunkOffers(self, count: placed.count)
        let counted = try withExtendedLifetime(placed) {
            try txn.withCursor(tables.postings) { cursor -> Bool in
                for high in 0...top {
                    // Which leaves have devices here (a set may: it is read to know).
                    for i in placed.indices {
                        switch placed[i] {
                        case .slices(_, let slices, _):
                            while next[i] < slices.count && slices[next[i]] < high { next[i] += 1 }
                            present[i] = next[i] < slices.count && slices[next[i]] == high
                        case .members(let members, _):
                            while next[i] < members.count && PostingChunk.high(members[next[i]]) < high { next[i] += 1 }
                            first[i] = next[i]
                            while next[i] < members.count && PostingChunk.high(members[next[i]]) == high { next[i] += 1 }
                            present[i] = next[i] > first[i]
                        case .none:
                            present[i] = false
                        case .set:
                            present[i] = true
                        }
                    }
                    guard Self.mayHoldDevices(program.steps, present) else { continue }
                    let live = try liveSets.chunks(high, &cursor)
                    for i in placed.indices {
                        switch placed[i] {
                        case .slices(let tid, _, let held):
                            guard present[i] else { counter.setLeaf(i, chunk: nil); continue }
                            if let chunk = held?[next[i]] {
                                counter.setLeaf(i, chunk: chunk)
                            } else {
                                guard let (_, stored) = try Keys.withChunk(pid, tid, high, { try cursor.seek(exactly: $0) }) else {
                                    return false  // listed but missing: the evaluation reports it
                                }
                                counter.setLeaf(i, chunk: stored)
                                read.note(i, slice: next[i], stored)
                            }
                        case .members(_, let lows):
                            counter.setLeaf(i, values: UnsafeBufferPointer(rebasing: lows[first[i]..<next[i]]))
                        case .none:
                            counter.setLeaf(i, chunk: nil)
                        case .set(let tid):
                            switch tid {
                            case ProjectionTables.BuiltIn.liveIOS: counter.setLeaf(i, chunk: live.ios)
                            case ProjectionTables.BuiltIn.liveAndroid: counter.setLeaf(i, chunk: live.android)
                            default: counter.setLeaf(i, chunk: try Keys.withChunk(pid, tid, high, { try cursor.seek(exactly: $0) })?.value)
                            }
                        }
                    }
                    guard let (total, ios, android) = counter.count(inSlice: high, live.ios, live.android) else {
                        return false
                    }
                    counts.total += total
                    counts.ios += ios
                    counts.android += android
                }
                return true
            }
        }
        guard counted else { return nil }
        // Chunks read from the snapshot (still mapped: the transaction is open),
        // offered to the directory for the counts after this one.
        for o in offered { read.offer(o.i, pid, code: o.code, tid: o.tid, asOf: asOf) }
        counts.withoutToken = counts.total - counts.ios - counts.android
        return counts
    }

    /// Whether a program may leave a device in a slice where only the leaves
    /// `present` have any: an AND needs both sides, a difference its left.
    static func mayHoldDevices(_ steps: [StoredExpressionCounter.Step], _ present: [Bool]) -> Bool {
        // The stack as bits (at most `StoredExpressionCounter.mostDepth` deep), its top the lowest.
        var stack: UInt32 = 0
        for step in steps {
            switch step {
            case .push(let l): stack = stack << 1 | (present[l] ? 1 : 0)
            case .and(let l): if !present[l] { stack &= ~1 }
            case .or(let l): if present[l] { stack |= 1 }
            case .subtracting: break
            case .andTop: stack = (stack >> 1) & (stack | ~1)
            case .orTop: stack = (stack >> 1) | (stack & 1)
            case .subtractingTop: stack >>= 1
            }
        }
        return stack & 1 == 1
    }
}
