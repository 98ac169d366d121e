/// A build's topic postings made at once from its devices' final topic lists.
///
/// In a build into an empty target, every subscription change goes through
/// the device's topic list (`ProjectionWriter.subscribe` and `unsubscribe`),
/// so when the fold stops, a topic's members are exactly the devices whose
/// lists hold it. Inverting the lists once, one slice of 65,536 ordinals at a
/// time, hands each chunk its members in ascending order. Following the fold
/// bit by bit instead inserted members into the middle of containers and
/// removed them again for every churned subscription (a third of a rebuild's
/// CPU time in `bench`'s store went into those bitmaps).
struct PostingInversion {
    /// Members counted per topic index in the slice being inverted, then the
    /// place the next one goes in `lows`.
    private var counts: [Int32]
    /// The topic indexes of the slice in the order they first appeared, and their ids.
    private var touched: [Int32] = []
    private var touchedIDs: [UInt32] = []
    /// The slice's subscriptions in ordinal order: topic index and low 16 bits of the ordinal.
    private var subscriptionTopics: [Int32] = []
    private var subscriptionLows: [UInt16] = []
    /// The slice's members grouped by topic, each group ascending.
    private var lows: [UInt16] = []

    /// For topic indexes below `topicCount`.
    init(topicCount: Int) {
        counts = [Int32](repeating: 0, count: topicCount)
    }

    /// Inverts one project's lists: `list(ordinal)` gives the topic ids of
    /// device `ordinal` (below `ordinalCount`; nil for no device), `index(tid)`
    /// the dense index of a topic id, below `topicCount`. `emit` gets each
    /// chunk (topic id and index, slice, its members' low 16 bits ascending),
    /// slice by slice ascending, and within a slice in the order its topics first appear.
    mutating func invert(ordinalCount: Int,
                         list: (UInt32) -> [UInt32]?,
                         index: (UInt32) throws -> Int,
                         emit: (UInt32, Int, UInt16, UnsafeBufferPointer<UInt16>) throws -> Void) throws {
        let sliceWidth = 1 << 16
        var start = 0
        while start < ordinalCount {
            let end = min(start + sliceWidth, ordinalCount)
            try invertSlice(UInt16(truncatingIfNeeded: start >> 16), ordinals: start..<end, list: list, index: index, emit: emit)
            start = end
        }
    }

    private mutating func invertSlice(_ high: UInt16, ordinals: Range<Int>,
                                      list: (UInt32) -> [UInt32]?,
                                      index: (UInt32) throws -> Int,
                                      emit: (UInt32, Int, UInt16, UnsafeBufferPointer<UInt16>) throws -> Void) throws {
        touched.removeAll(keepingCapacity: true)
        touchedIDs.removeAll(keepingCapacity: true)
        subscriptionTopics.removeAll(keepingCapacity: true)
        subscriptionLows.removeAll(keepingCapacity: true)
        // Count each topic's members, noting the subscriptions in ordinal order.
        for ordinal in ordinals {
            guard let tids = list(UInt32(ordinal)), !tids.isEmpty else { continue }
            let low = UInt16(truncatingIfNeeded: ordinal)
            for tid in tids {
                let t = try index(tid)
                if counts[t] == 0 {
                    touched.append(Int32(t))
                    touchedIDs.append(tid)
                }
                counts[t] += 1
                subscriptionTopics.append(Int32(t))
                subscriptionLows.append(low)
            }
        }
        guard !touched.isEmpty else { return }
        // Each topic's group starts where the one before it ends (topics in `touched` order).
        var next: Int32 = 0
        for t in touched {
            let n = counts[Int(t)]
            counts[Int(t)] = next
            next += n
        }
        // Members placed in their groups, in ordinal order: each group ascending.
        lows.removeAll(keepingCapacity: true)
        lows.append(contentsOf: repeatElement(0, count: subscriptionLows.count))
        for i in subscriptionTopics.indices {
            let t = Int(subscriptionTopics[i])
            lows[Int(counts[t])] = subscriptionLows[i]
            counts[t] += 1
        }
        // Each group's end is now in `counts`: emit it, and clear the count for the next slice.
        try lows.withUnsafeBufferPointer { all in
            var begin = 0
            for (k, t) in touched.enumerated() {
                let end = Int(counts[Int(t)])
                counts[Int(t)] = 0
                try emit(touchedIDs[k], Int(t), high, UnsafeBufferPointer(rebasing: all[begin..<end]))
                begin = end
            }
        }
    }
}

/// A build's topic chunks made by `PostingInversion`, serialized in key order
/// (project, slice, topic id): what `writeBuild` appends to `postings`.
struct InvertedPostings: Sendable {
    var keys: [ProjectionWriter.ChunkKey] = []
    /// Where each chunk's bytes end in `bytes` (the first begins at 0).
    var ends: [Int] = []
    var bytes: [UInt8] = []
    /// Each chunk's topic (the writer's cache slot) and slice, in the order of
    /// `keys`: a topic's slices come ascending.
    var topicSlices: [(slot: Int32, high: UInt16)] = []

    /// The stored bytes of chunk `i`.
    func value(_ i: Int, in bytes: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[(i == 0 ? 0 : ends[i - 1])..<ends[i]])
    }
}

extension PostingInversion {
    /// The chunks of every project in `projects` (each with its devices'
    /// membership slots by ordinal, + 1; 0: none), the lists in `lists`,
    /// a topic's slot found in `topicSlots` (+ 1), below `topicCount`.
    /// Pure: it reads copies, so it runs beside the writer.
    static func serialized(projects: [(pid: UInt32, memberSlots: [Int32])],
                           lists: [ProjectionWriter.Cached<[UInt32]>],
                           topicSlots: TopicColumns<Int32>, topicCount: Int) throws -> InvertedPostings {
        var out = InvertedPostings()
        var inversion = PostingInversion(topicCount: topicCount)
        var topicSlots = topicSlots
        // One slice's chunks, put in topic order before they are serialized.
        var slice: [(tid: UInt32, slot: Int32, set: PostingSet)] = []
        var pid: UInt32 = 0, high: UInt16 = 0
        func serializeSlice() {
            slice.sort { $0.tid < $1.tid }
            for i in slice.indices {
                slice[i].set.optimize()
                let start = out.bytes.count, size = slice[i].set.serializedSize
                out.bytes.append(contentsOf: repeatElement(0, count: size))
                out.bytes.withUnsafeMutableBytes { b in
                    _ = slice[i].set.serialize(into: UnsafeMutableRawBufferPointer(rebasing: b[start..<(start + size)]))
                }
                out.keys.append(ProjectionWriter.ChunkKey(pid: pid, topic: slice[i].tid, high: high))
                out.ends.append(out.bytes.count)
                out.topicSlices.append((slice[i].slot, high))
            }
            slice.removeAll(keepingCapacity: true)
        }
        for project in projects {
            pid = project.pid
            high = 0
            try inversion.invert(ordinalCount: project.memberSlots.count, list: { ordinal in
                let s = project.memberSlots[Int(ordinal)]
                return s == 0 ? nil : lists[Int(s) - 1].value
            }, index: { tid in
                guard let s = topicSlots.value(project.pid, tid), s != 0 else {
                    throw ProjectionCorruption(place: "topics/\(project.pid)/\(tid)", reason: "membership of a missing topic")
                }
                return Int(s) - 1
            }, emit: { tid, slot, chunkHigh, lows in
                if chunkHigh != high {
                    serializeSlice()
                    high = chunkHigh
                }
                slice.append((tid, Int32(slot), PostingSet(high: chunkHigh, sortedLows: lows)))
            })
            serializeSlice()
        }
        return out
    }
}
