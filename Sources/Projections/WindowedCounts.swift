import LMDB
import Roaring

extension ProjectionReader {
    /// Slices (65,536 devices each) a count of a large audience evaluates at a
    /// time: eight bitset slices of an operand are 64 KiB, so the operands and
    /// results of a window stay in the core's cache and its memory is reused.
    public static let countWindowSlices = 8
    /// At most how many topics an expression counted window by window names:
    /// a longer list is a send to many small topics, which the whole
    /// evaluation gathers in one pass.
    static let mostWindowedTopics = 8

    /// The counts of `expression` for `project` in the snapshot of `txn`: what
    /// `counts(of: audience(project:expression, txn), txn)` answers, without
    /// building the whole audience when it is large.
    ///
    /// One topic within a window's slices is counted from its placement. A
    /// list of topics of a few devices each (per-user topics) is counted
    /// from their members in the serving caches (`heldListCounts`). An OR of at
    /// most `mostCountedInPlace` topics (one topic spread wider included) is
    /// counted slice by slice from the stored chunks, with no bitmap built
    /// (`unionCounts`). Any other audience over more than `windowSlices`
    /// slices whose whole evaluation would build a dense bitmap
    /// (`buildsDense`; at most `mostWindowedTopics` topics) is counted slice
    /// by slice from the stored chunks by a program over bitsets
    /// (`expressionCounts`); failing that (a damaged chunk, a program too
    /// deep), it is evaluated and counted `windowSlices` slices at a time,
    /// and the windows' counts are added (their devices are disjoint). The whole bitmap
    /// of `t1 OR t2` at 10M devices is 1.2 MB: building it for a count wrote that
    /// much fresh memory (the kernel clearing new pages was 16% of the
    /// expression's samples) and read it back, where a window's memory is
    /// reused while it is in cache. `windowSlices` 0 evaluates the whole
    /// audience at once; `windowsWhenDense` false goes by windows wherever the
    /// audience names a set, a NOT or a topic over more than a window, dense or
    /// not, and counts no OR or expression in place (tests of the windowed
    /// evaluation ask for that).
    public func counts(project: String, _ expression: AudienceExpression, _ txn: borrowing Transaction,
                       windowSlices: Int = ProjectionReader.countWindowSlices,
                       windowsWhenDense: Bool = true) throws -> AudienceCounts {
        let asOf = try appliedSequence(txn)
        guard let p = try self.project(named: project, txn) else {
            return AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0,
                                  unknownTopics: Array(Set(expression.topicCodes)).sorted())
        }
        func counted(_ devices: Bitmap, _ unknown: Set<String>, _ txn: borrowing Transaction) throws -> AudienceCounts {
            try counts(of: Audience(project: project, projectID: p.id, asOfSeq: asOf, devices: devices,
                                    unknownTopics: unknown.sorted()), txn)
        }
        // One topic, the most usual count, in at most a window's slices: counted
        // from its placement, with no evaluation set up (copying the reader into
        // one and destroying it was 9% of a per-user topic's count).
        if case .topic(let code) = expression {
            guard let placed = try placement(p.id, code: code, asOf: asOf, txn) else {
                return AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0, unknownTopics: [code])
            }
            switch placed {
            case .members(_, let members):
                // A topic of a few devices (a per-user topic): counted from its members
                // in the serving caches, where they are (no bitmap, no audience).
                if let (ios, android) = recipientCache?.liveCounts(p.id, members: members, asOf: asOf) {
                    return AudienceCounts(asOfSeq: asOf, total: members.count, ios: ios, android: android,
                                          withoutToken: members.count - ios - android, unknownTopics: [])
                }
                return try counted(try bitmap(p.id, placed, txn), [], txn)
            case .slices(_, let slices) where windowSlices == 0 || slices.count <= windowSlices:
                return try counted(try bitmap(p.id, placed, txn), [], txn)
            case .slices(let tid, let slices):
                // Spread over more than a window: counted from its chunks in place, or planned below.
                if windowsWhenDense, let counted = try unionCounts(p.id, [PlacedTopic(code: code, tid: tid, slices: slices)],
                                                                   unknown: [], asOf: asOf, txn) {
                    return counted
                }
            }
        }
        if case .or = expression, let codes = Self.topicsOfOR(expression, atMost: Self.mostListedTopics) {
            // A send to a list of per-user topics, counted from the serving caches.
            if let counted = try heldListCounts(p.id, codes: codes, asOf: asOf, txn) { return counted }
            // An OR of a few topics, the usual send: counted slice by slice from the
            // stored chunks, nothing built (`windowsWhenDense` false, which tests of
            // the windows ask, evaluates it by windows instead).
            if windowsWhenDense, codes.count <= Self.mostCountedInPlace,
               let counted = try unionCounts(p.id, codes: codes, asOf: asOf, txn) {
                return counted
            }
        }
        var evaluation = AudienceEvaluation(reader: self, pid: p.id, asOf: asOf)
        let top: UInt16
        switch try plan(expression, &evaluation, pid: p.id, windowSlices: windowSlices, whenDense: windowsWhenDense, txn) {
        case .whole:
            let devices = try evaluation.evaluate(expression, txn)
            return try counted(devices, evaluation.unknown, txn)
        case .windows(let last):
            // Counted slice by slice from the stored chunks, nothing built; the
            // windows of bitmaps are left for damage (which they report) and for
            // tests of the windows.
            if windowsWhenDense, let counted = try expressionCounts(p.id, expression, asOf: asOf, txn) {
                return counted
            }
            top = last
        }
        evaluation.remembersPlacements()
        var sum = AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0, unknownTopics: [])
        var start = 0
        while start <= Int(top) {
            evaluation.window = UInt16(start)...UInt16(min(start + windowSlices - 1, Int(top)))
            let devices = try evaluation.evaluate(expression, txn)
            if !devices.isEmpty {
                let part = try counted(devices, [], txn)
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

    /// How a count that is not of one small topic is taken: the whole audience
    /// at once, or by windows up to slice `through`.
    private enum CountPlan {
        case whole
        case windows(through: UInt16)
    }

    /// Whether `expression` is counted by windows: it names at most
    /// `mostWindowedTopics` topics, the project spans more than a window, and
    /// the whole evaluation would build a dense bitmap (`buildsDense`; with
    /// `whenDense` false, any audience that names a set, a NOT, or a topic in
    /// more than a window's slices: what tests of the windows ask).
    private func plan(_ expression: AudienceExpression, _ evaluation: inout AudienceEvaluation, pid: UInt32,
                      windowSlices: Int, whenDense: Bool, _ txn: borrowing Transaction) throws -> CountPlan {
        let shape = Self.shape(of: expression)
        guard windowSlices > 0, shape.topics <= Self.mostWindowedTopics else { return .whole }
        if whenDense {
            if try !buildsDense(expression, &evaluation, pid: pid, txn) { return .whole }
        } else if !shape.hasSet {
            let spans = try Self.hasTopic(in: expression, { code in
                guard case .slices(_, let slices)? = try evaluation.placement(code, txn) else { return false }
                return slices.count > windowSlices
            })
            if !spans { return .whole }
        }
        guard let top = try PostingChunk.maxHigh(pid: pid, tables: tables, txn), Int(top) >= windowSlices else { return .whole }
        return .windows(through: top)
    }

    /// Whether evaluating `e` whole builds a dense bitmap (bitset containers,
    /// 8 KiB a slice), whose fresh memory the windows spare. A sparse audience is
    /// counted faster whole, since each window has its own lookups, bitmaps and
    /// live counts: one mid topic at 1M devices took 10–19% longer by windows.
    /// This follows what `AudienceEvaluation` builds: a platform, every device
    /// and a NOT are built whole; an AND with a leaf builds its other side and
    /// intersects the leaf in place; an AND NOT builds both sides; a topic is
    /// dense when its chunk in its middle slice is 8 KiB or more (a bitset, or
    /// an array at its largest, 4,096 devices).
    private func buildsDense(_ e: AudienceExpression, _ evaluation: inout AudienceEvaluation, pid: UInt32,
                             _ txn: borrowing Transaction) throws -> Bool {
        switch e {
        case .platform, .allDevices, .not:
            return true
        case .topic(let code):
            guard case .slices(let tid, let slices)? = try evaluation.placement(code, txn), !slices.isEmpty else { return false }
            let stored = try Keys.withChunk(pid, tid, slices[slices.count / 2], { try txn.get(tables.postings, $0)?.count }) ?? 0
            return stored >= Self.denseChunkBytes
        case .or(let a, let b), .and(let a, .not(let b)), .and(.not(let b), let a):
            return try buildsDense(a, &evaluation, pid: pid, txn) || buildsDense(b, &evaluation, pid: pid, txn)
        case .and(let a, let b):
            if AudienceEvaluation.isLeaf(b) { return try buildsDense(a, &evaluation, pid: pid, txn) }
            if AudienceEvaluation.isLeaf(a) { return try buildsDense(b, &evaluation, pid: pid, txn) }
            return try buildsDense(a, &evaluation, pid: pid, txn) || buildsDense(b, &evaluation, pid: pid, txn)
        }
    }

    /// A stored chunk of at least this many bytes holds a dense slice (see `buildsDense`).
    static let denseChunkBytes = 8192

    /// How many topics `e` names (counted up to one past `mostWindowedTopics`),
    /// and whether it names a built-in set (a platform, every device) or a
    /// NOT, which reach over every slice. The walk visits at most
    /// `mostShapeNodes` nodes and reports one topic too many past them: a list
    /// of 100 per-user topics is a chain of ORs whose first topic is 100 nodes
    /// down, and binding each node's operands cost a retain and a release
    /// (14% of the time of a count of such a list).
    private static func shape(of e: AudienceExpression) -> (topics: Int, hasSet: Bool) {
        var topics = 0, nodes = 0, hasSet = false
        func walk(_ e: AudienceExpression) {
            guard topics <= mostWindowedTopics else { return }
            nodes += 1
            guard nodes <= mostShapeNodes else { topics = mostWindowedTopics + 1; return }
            switch e {
            case .topic: topics += 1
            case .platform, .allDevices: hasSet = true
            case .not(let a): hasSet = true; walk(a)
            // The right operand first: a list's chain of ORs is built to the left,
            // its last topic on the right of the top node.
            case .and(let a, let b), .or(let a, let b): walk(b); walk(a)
            }
        }
        walk(e)
        return (topics, hasSet)
    }

    /// At most how many nodes (topics, sets, operators) of an expression
    /// `shape(of:)` visits: room for `mostWindowedTopics` topics with as many
    /// sets and NOTs; a larger expression is counted whole.
    static let mostShapeNodes = 4 * mostWindowedTopics

    /// Whether `e` names a topic `test` holds for (asked in order, until one does).
    private static func hasTopic(in e: AudienceExpression, _ test: (String) throws -> Bool) rethrows -> Bool {
        switch e {
        case .topic(let code): return try test(code)
        case .platform, .allDevices: return false
        case .not(let a): return try hasTopic(in: a, test)
        case .and(let a, let b), .or(let a, let b): return try hasTopic(in: a, test) || hasTopic(in: b, test)
        }
    }
}
