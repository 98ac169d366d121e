import LMDB
import Roaring

extension ProjectionReader {
    /// At most how many topics a list counted from the serving caches names
    /// (`heldListCounts`, with the codes from `topicsOfOR`, and
    /// `heldCounts(project:anyOf:tip:)`); a longer one is evaluated.
    static let mostListedTopics = 4096

    /// The counts of a send to any of `codes` (MPush's `topics` array) in the
    /// snapshot `txn` reads: `counts(project:_:_:)` of `AudienceExpression.anyOf(codes)`;
    /// an empty list is no device.
    public func counts(project: String, anyOf codes: [String], _ txn: borrowing Transaction) throws -> AudienceCounts {
        guard let expression = AudienceExpression.anyOf(codes) else {
            return AudienceCounts(asOfSeq: try appliedSequence(txn), total: 0, ios: 0, android: 0, withoutToken: 0,
                                  unknownTopics: [])
        }
        return try counts(project: project, expression, txn)
    }

    /// The counts of a send to a list of topics `codes` (`user.12 OR user.15 OR …`)
    /// when every one of them is a topic of a few devices or an unknown code:
    /// the members of those the serving process's topic directory holds as
    /// of `asOf` are gathered under one lock, the others placed from the
    /// snapshot (and offered to the directory for the next send), then the
    /// devices are sorted, counted once each and counted from the recipient
    /// cache, with no evaluation or bitmap. nil when a topic is held by its
    /// slices (a shared topic), or without the serving caches: the evaluation
    /// counts those.
    func heldListCounts(_ pid: UInt32, codes: [String], asOf: UInt64,
                        _ txn: borrowing Transaction) throws -> AudienceCounts? {
        guard let directory = topicCache, recipientCache != nil else { return nil }
        var gathered = GatheredValues(limit: TopicCache.inlineMembers * codes.count)
        var unknown = Set<String>()
        for i in directory.gatherMembers(pid, codes: codes, asOf: asOf, into: &gathered) {
            switch try placement(pid, code: codes[i], asOf: asOf, txn) {
            case nil:
                unknown.insert(codes[i])
            case .members(_, let members)?:
                guard members.withUnsafeBufferPointer({ gathered.append($0) }) else { return nil }
            case .slices(_, let slices)?:
                guard slices.isEmpty else { return nil }  // a shared topic: the evaluation's
            }
        }
        return gatheredCounts(pid, &gathered, asOf: asOf, unknown: unknown.sorted())
    }

    /// The counts of the devices `gathered` holds (repeats allowed) in the
    /// snapshot at `asOf`, from the recipient cache; nil when it cannot
    /// answer for every one of them.
    func gatheredCounts(_ pid: UInt32, _ gathered: inout GatheredValues, asOf: UInt64,
                        unknown: [String]) -> AudienceCounts? {
        guard let cache = recipientCache else { return nil }
        // Their cells are on the way while the duplicates are taken out.
        gathered.withValues(from: 0) { cache.prefetchCells(pid, members: $0) }
        // A device may be on several of the topics: counted once.
        // (In place: a copy into an array of their own was an allocation and a copy per list.)
        let unique = gathered.withMutableValues { Self.keepDistinct($0) }
        guard let (ios, android) = gathered.withValues(from: 0, {
            cache.liveCounts(pid, members: UnsafeBufferPointer(rebasing: $0[..<unique]), asOf: asOf, askingAhead: false)
        }) else { return nil }
        return AudienceCounts(asOfSeq: asOf, total: unique, ios: ios, android: android,
                              withoutToken: unique - ios - android, unknownTopics: unknown)
    }

    /// Moves the distinct values of `values` to its front, in no particular
    /// order, and returns how many there are: through a table of twice as
    /// many slots, not a sort (sorting the 100 members of a list was a third
    /// of its count).
    static func keepDistinct(_ values: UnsafeMutableBufferPointer<UInt32>) -> Int {
        guard values.count > 1 else { return values.count }
        var bits = 4
        while 1 << bits < 2 * values.count { bits += 1 }
        let size = 1 << bits, mask = size - 1
        // Slots hold value + 1; 0 is empty (kept as 64-bit values, so any UInt32 fits).
        let table = UnsafeMutablePointer<UInt64>.allocate(capacity: size)
        defer { table.deallocate() }
        table.initialize(repeating: 0, count: size)
        var unique = 0
        for v in values {
            let key = UInt64(v) + 1
            var slot = Int(truncatingIfNeeded: (UInt64(v) &* 0x9E37_79B9_7F4A_7C15) >> UInt64(64 - bits))
            while true {
                if table[slot] == key { break }
                if table[slot] == 0 {
                    table[slot] = key
                    values[unique] = v
                    unique += 1
                    break
                }
                slot = (slot + 1) & mask
            }
        }
        return unique
    }
}
