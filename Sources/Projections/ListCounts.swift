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
        var gathered = GatheredMembers(limit: TopicCache.inlineMembers * codes.count)
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
    /// snapshot at `asOf`: by what the topic directory held beside them, and
    /// from the recipient cache for the rest; nil when it cannot answer for
    /// every one of them.
    func gatheredCounts(_ pid: UInt32, _ gathered: inout GatheredMembers, asOf: UInt64,
                        unknown: [String]) -> AudienceCounts? {
        guard let cache = recipientCache else { return nil }
        // A device may be on several of the topics: counted once.
        let (unique, heldIOS, heldAndroid, unheld) = gathered.distinctReaches()
        var (ios, android) = (heldIOS, heldAndroid)
        if unheld > 0 {
            guard let (i, a) = gathered.withValues({
                cache.liveCounts(pid, members: UnsafeBufferPointer(rebasing: $0[..<unheld]), asOf: asOf)
            }) else { return nil }
            ios += i
            android += a
        }
        return AudienceCounts(asOfSeq: asOf, total: unique, ios: ios, android: android,
                              withoutToken: unique - ios - android, unknownTopics: unknown)
    }
}
