import Roaring

extension ProjectionReader {
    /// At most how many topics a list counted from the serving caches names
    /// (`heldListCounts`); a longer one is evaluated.
    static let mostListedTopics = 4096

    /// The counts of a send to a list of topics (`user.12 OR user.15 OR …`)
    /// when the serving process's topic directory holds every one of them with
    /// its members as of `asOf`, and its recipient cache their devices: the
    /// members gathered under one lock, sorted, and counted from the cache,
    /// with no evaluation, bitmap or snapshot read. nil otherwise (a topic not
    /// held, or held by its slices, or a code the project does not have: the
    /// evaluation reads those, and the directory then holds them for the next
    /// send).
    func heldListCounts(_ pid: UInt32, _ expression: AudienceExpression, asOf: UInt64) -> AudienceCounts? {
        guard let directory = topicCache, let cache = recipientCache else { return nil }
        var codes: [String] = []
        func collect(_ e: AudienceExpression) -> Bool {
            switch e {
            case .topic(let code):
                codes.append(code)
                return codes.count <= Self.mostListedTopics
            case .or(let a, let b):
                return collect(a) && collect(b)
            default:
                return false
            }
        }
        guard collect(expression) else { return nil }
        var gathered = GatheredValues(limit: TopicCache.inlineMembers * codes.count)
        guard directory.gatherMembers(pid, codes: codes, asOf: asOf, into: &gathered).isEmpty else { return nil }
        // A device may be on several of the topics: counted once.
        var members = gathered.withValues(from: 0) { Array($0) }
        members.sort()
        var unique = 0
        for m in members where unique == 0 || members[unique - 1] != m {
            members[unique] = m
            unique += 1
        }
        members.removeLast(members.count - unique)
        guard let (ios, android) = cache.liveCounts(pid, members: members, asOf: asOf) else { return nil }
        return AudienceCounts(asOfSeq: asOf, total: unique, ios: ios, android: android,
                              withoutToken: unique - ios - android, unknownTopics: [])
    }
}
