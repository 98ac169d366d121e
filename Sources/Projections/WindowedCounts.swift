import LMDB
import Roaring

extension ProjectionReader {
    /// Slices (65,536 devices each) a count of a large audience evaluates at a
    /// time: eight bitset slices of an operand are 64 KiB, so every operand
    /// and result of a window stays in the core's cache.
    public static let countWindowSlices = 8
    /// At most how many topics and platforms an expression counted window by
    /// window names: a longer list is a send to many small topics, which the
    /// whole evaluation gathers in one pass.
    static let mostWindowedLeaves = 8

    /// The counts of `expression` for `project` in the snapshot of `txn`: what
    /// `counts(of: audience(project:expression, txn), txn)` answers, without
    /// building the whole audience when it is large.
    ///
    /// An audience over many slices (a platform, every device, a NOT, or a
    /// topic in more than `windowSlices` slices) is evaluated and counted
    /// `windowSlices` slices at a time, and the windows' counts are added
    /// (their devices are disjoint). The whole bitmap of `t1 OR t2` at 10M
    /// devices is 1.2 MB; building it for a count wrote that much fresh memory
    /// and read it back, where a window's bitmaps are reused while in cache.
    /// `windowSlices` 0 evaluates the whole audience at once.
    public func counts(project: String, _ expression: AudienceExpression, _ txn: borrowing Transaction,
                       windowSlices: Int = ProjectionReader.countWindowSlices) throws -> AudienceCounts {
        let asOf = try appliedSequence(txn)
        guard let p = try self.project(named: project, txn) else {
            return AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0,
                                  unknownTopics: Array(Set(expression.topicCodes)).sorted())
        }
        var evaluation = AudienceEvaluation(reader: self, pid: p.id, asOf: asOf, remembersPlacements: true)
        func whole(_ evaluation: inout AudienceEvaluation, _ txn: borrowing Transaction) throws -> AudienceCounts {
            let devices = try evaluation.evaluate(expression, txn)
            return try counts(of: Audience(project: project, projectID: p.id, asOfSeq: asOf, devices: devices,
                                           unknownTopics: evaluation.unknown.sorted()), txn)
        }
        guard windowSlices > 0, try spansWindows(expression, &evaluation, windowSlices: windowSlices, txn),
              let top = try PostingChunk.maxHigh(pid: p.id, tables: tables, txn), Int(top) >= windowSlices else {
            return try whole(&evaluation, txn)
        }
        var sum = AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0, unknownTopics: [])
        var start = 0
        while start <= Int(top) {
            evaluation.window = UInt16(start)...UInt16(min(start + windowSlices - 1, Int(top)))
            let devices = try evaluation.evaluate(expression, txn)
            if !devices.isEmpty {
                let part = try counts(of: Audience(project: project, projectID: p.id, asOfSeq: asOf, devices: devices,
                                                   unknownTopics: []), txn)
                sum.total += part.total
                sum.ios += part.ios
                sum.android += part.android
                sum.withoutToken += part.withoutToken
            }
            start += windowSlices
        }
        sum.unknownTopics = evaluation.unknown.sorted()
        return sum
    }

    /// Whether `expression` is worth counting window by window: it names at most
    /// `mostWindowedLeaves` topics and platforms, and one of them is a platform,
    /// every device, a NOT, or a topic in more than `windowSlices` slices. The
    /// topics looked up are remembered by `evaluation`.
    private func spansWindows(_ expression: AudienceExpression, _ evaluation: inout AudienceEvaluation,
                              windowSlices: Int, _ txn: borrowing Transaction) throws -> Bool {
        var topics: [String] = []
        var large = false
        func walk(_ e: AudienceExpression) {
            switch e {
            case .topic(let code): topics.append(code)
            case .platform, .allDevices: large = true
            case .not(let a): large = true; walk(a)
            case .and(let a, let b), .or(let a, let b): walk(a); walk(b)
            }
        }
        walk(expression)
        if topics.count > Self.mostWindowedLeaves { return false }
        if large { return true }
        for code in topics {
            if case .slices(_, let slices)? = try evaluation.placement(code, txn), slices.count > windowSlices { return true }
        }
        return false
    }
}
