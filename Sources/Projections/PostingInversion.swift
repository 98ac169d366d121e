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

    /// How `invert` reads a device's topic ids: borrowed where they are held.
    /// (Handed out as arrays, each device's list was retained and released:
    /// 17% of the inversion's thread at 1M devices, perf.)
    typealias List = (UInt32, (UnsafeBufferPointer<UInt32>) throws -> Void) throws -> Void

    /// For topic indexes below `topicCount`.
    init(topicCount: Int) {
        counts = [Int32](repeating: 0, count: topicCount)
    }

    /// Inverts one project's lists: `list(ordinal, body)` calls `body` with the
    /// topic ids of device `ordinal` (below `ordinalCount`; not at all for no
    /// device) where they are held, `index(tid)`
    /// the dense index of a topic id, below `topicCount`. `emit` gets each
    /// chunk (topic id and index, slice, its members' low 16 bits ascending),
    /// slice by slice ascending, and within a slice in the order its topics first appear.
    mutating func invert(ordinalCount: Int,
                         list: List,
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
                                      list: List,
                                      index: (UInt32) throws -> Int,
                                      emit: (UInt32, Int, UInt16, UnsafeBufferPointer<UInt16>) throws -> Void) throws {
        touched.removeAll(keepingCapacity: true)
        touchedIDs.removeAll(keepingCapacity: true)
        subscriptionTopics.removeAll(keepingCapacity: true)
        subscriptionLows.removeAll(keepingCapacity: true)
        // Count each topic's members, noting the subscriptions in ordinal order.
        // (`index` is called from within `list`'s call, which Swift takes for an escape.)
        try withoutActuallyEscaping(index) { index in
            for ordinal in ordinals {
                let low = UInt16(truncatingIfNeeded: ordinal)
                try list(UInt32(ordinal)) { tids in
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
