import Roaring

extension ProjectionReader {
    /// The counts of `expression` for `project` in the newest committed
    /// snapshot, answered from the serving caches alone with no read
    /// transaction, when LMDB's newest transaction is `tip` (the caller reads
    /// it: a serving store from `MetaPages`, which needs no lock) and the
    /// caches hold that snapshot; nil otherwise: ask `counts(project:_:_:)` in a
    /// read transaction then.
    ///
    /// Answered this way: one topic held with its members (a per-user topic),
    /// and an OR of such topics (a send to a list of users). Beginning and
    /// ending a read transaction, ~90 ns, was a third of such a count. The
    /// answer is the snapshot's exactly: the topic directory answers only for
    /// the transaction its writer reported last (see `TopicCache`), and the
    /// recipient cache only with records that did not change after it.
    public func heldCounts(project: String, _ expression: AudienceExpression, tip: Int) -> AudienceCounts? {
        if case .topic(let code) = expression { return heldCountsOfTopic(project: project, code: code, tip: tip) }
        guard case .or = expression, let codes = Self.topicsOfOR(expression, atMost: Self.mostListedTopics) else { return nil }
        return heldCountsOfList(project: project, codes: codes, tip: tip)
    }

    /// `heldCounts(project:_:tip:)` of a send to any of `codes` (MPush's
    /// `topics` array), taken as they are: the same question as
    /// `AudienceExpression.anyOf(codes)`, without that chain of ORs built and
    /// walked back into a list (a quarter of a repeated list of 100's count; more
    /// for different lists, whose boxed nodes were cache misses).
    public func heldCounts(project: String, anyOf codes: [String], tip: Int) -> AudienceCounts? {
        switch codes.count {
        case 0: return nil
        case 1: return heldCountsOfTopic(project: project, code: codes[0], tip: tip)
        case ...Self.mostListedTopics: return heldCountsOfList(project: project, codes: codes, tip: tip)
        default: return nil
        }
    }

    /// `heldCounts(project:anyOf:tip:)` of codes given as bytes (a list as an
    /// HTTP request carries it), read in place.
    public func heldCounts(project: String, anyOf codes: TopicCodeList, tip: Int) -> AudienceCounts? {
        switch codes.count {
        case 0: return nil
        case 1: return heldCountsOfTopic(project: project, code: codes.string(at: 0), tip: tip)
        case ...Self.mostListedTopics:
            return heldCountsOfList(codes.count) { $0.gatherHeldMembers(project: project, codes: codes, tip: tip, into: &$1) }
        default: return nil
        }
    }

    /// One topic held with its members (a per-user topic), when the topic
    /// directory shares the recipient cache's lock. (Taking the code, not
    /// `.topic(code)`: an expression's every node is a box allocated.)
    private func heldCountsOfTopic(project: String, code: String, tip: Int) -> AudienceCounts? {
        guard let (held, ios, android) = topicCache?.heldLiveCounts(project: project, code: code, tip: tip) else { return nil }
        let total = held.withMembers { $0.count }
        return AudienceCounts(asOfSeq: held.asOf, total: total, ios: ios, android: android,
                              withoutToken: total - ios - android, unknownTopics: [])
    }

    /// The list part of `heldCounts`: every topic of `codes` held with its members.
    private func heldCountsOfList(project: String, codes: [String], tip: Int) -> AudienceCounts? {
        heldCountsOfList(codes.count) { $0.gatherHeldMembers(project: project, codes: codes, tip: tip, into: &$1) }
    }

    /// The counts of a list of `count` topics whose members `gather` gathers
    /// from the topic directory (nil: not every one is held).
    private func heldCountsOfList(_ count: Int, _ gather: (TopicCache, inout GatheredMembers) -> (pid: UInt32, asOf: UInt64)?) -> AudienceCounts? {
        guard let directory = topicCache else { return nil }
        var gathered = GatheredMembers(limit: TopicCache.inlineMembers * count)
        guard let (pid, asOf) = gather(directory, &gathered) else { return nil }
        return gatheredCounts(pid, &gathered, asOf: asOf, unknown: [])
    }
}
