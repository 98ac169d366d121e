import LMDB
import Roaring

extension ProjectionReader {
    /// At most how many topics an OR counted in place names (`unionCounts`):
    /// a longer list is a send to many small topics, which the evaluation
    /// gathers in one pass.
    static let mostCountedInPlace = mostWindowedTopics

    /// The codes of `e` when it is an OR of at most `limit` topics and nothing
    /// else; nil otherwise (asked node by node, up to one topic past the limit).
    static func topicsOfOR(_ e: AudienceExpression, atMost limit: Int = mostCountedInPlace) -> [String]? {
        var codes: [String] = []
        // Room for a list of users at once: grown one doubling at a time, 100 codes took 8 allocations.
        codes.reserveCapacity(Swift.min(limit + 1, 128))
        func walk(_ e: AudienceExpression) -> Bool {
            switch e {
            case .topic(let code):
                codes.append(code)
                return codes.count <= limit
            case .or(let a, let b):
                return walk(b) && walk(a)
            default:
                return false
            }
        }
        guard walk(e) else { return nil }
        return codes
    }

    /// The counts of the OR of topics `codes`, taken slice by slice from the
    /// stored chunks of the topics and of the live sets (`StoredUnionCounter`):
    /// no bitmap is built. Building each topic's bitmap and their union, to
    /// count it and let it go, was an allocation per topic and slice and a copy
    /// of every member. nil when a topic is held with its members (a per-user
    /// topic in the serving directory: the evaluation gathers those), or when
    /// a chunk a topic lists is missing or is not well-formed: the evaluation
    /// counts it then, and reports the damage where it reads it.
    func unionCounts(_ pid: UInt32, codes: [String], asOf: UInt64, _ txn: borrowing Transaction) throws -> AudienceCounts? {
        var topics: [PlacedTopic] = []
        var unknown = Set<String>()
        for code in codes {
            guard let placed = try placement(pid, code: code, asOf: asOf, txn) else {
                unknown.insert(code)
                continue
            }
            guard case .slices(let tid, let slices) = placed else { return nil }
            topics.append(PlacedTopic(code: code, tid: tid, slices: slices))
        }
        return try unionCounts(pid, topics, unknown: unknown.sorted(), asOf: asOf, txn)
    }

    /// A topic of an OR counted in place, where its chunks are.
    struct PlacedTopic {
        let code: String
        let tid: UInt32
        let slices: [UInt16]
    }

    /// `unionCounts(_:codes:asOf:_:)` of topics already placed in their slices
    /// (`unknown`: the codes named that the project does not have). In the
    /// serving process, a topic's chunks come from the topic directory where it
    /// holds them for the snapshot (`TopicCache.chunks`), and are offered to it
    /// once read from the snapshot; so are the live sets' chunks (`LiveChunkReader`).
    func unionCounts(_ pid: UInt32, _ topics: [PlacedTopic], unknown: [String], asOf: UInt64,
                     _ txn: borrowing Transaction) throws -> AudienceCounts? {
        var counts = AudienceCounts(asOfSeq: asOf, total: 0, ios: 0, android: 0, withoutToken: 0, unknownTopics: unknown)
        var counter = StoredUnionCounter()
        // Each topic's chunks held by the directory (kept alive for the count), and
        // those read from the snapshot, to offer it afterwards.
        let held: [TopicCache.HeldTopicChunks?] = topics.map { topicCache?.chunks(pid, code: $0.code, asOf: asOf) }
        var read = HeldChunkOffers(self, count: topics.count)
        var next = [Int](repeating: 0, count: topics.count)  // each topic's next slice in its list
        var liveSets = LiveChunkReader(self, pid: pid, asOf: asOf)
        defer { withExtendedLifetime(liveSets) {} }
        let counted = try withExtendedLifetime(held) {
            try txn.withCursor(tables.postings) { cursor -> Bool in
                while true {
                    // The lowest slice a topic has left, and the chunks of every topic there.
                    var lowest: UInt16?
                    for i in topics.indices where next[i] < topics[i].slices.count {
                        lowest = min(lowest ?? .max, topics[i].slices[next[i]])
                    }
                    guard let high = lowest else { return true }
                    for i in topics.indices where next[i] < topics[i].slices.count && topics[i].slices[next[i]] == high {
                        let chunk: UnsafeRawBufferPointer
                        if let h = held[i], h.count == topics[i].slices.count, let c = h[next[i]] {
                            chunk = c
                        } else {
                            guard let (_, stored) = try Keys.withChunk(pid, topics[i].tid, high, { try cursor.seek(exactly: $0) }) else {
                                return false
                            }
                            chunk = stored
                            read.note(i, slice: next[i], stored)
                        }
                        next[i] += 1
                        guard counter.stage(chunk) else { return false }
                    }
                    let live = try liveSets.chunks(high, &cursor)
                    guard let (total, ios, android) = counter.count(inSlice: high, live.ios, live.android) else { return false }
                    counts.total += total
                    counts.ios += ios
                    counts.android += android
                }
            }
        }
        guard counted else { return nil }
        // Chunks read from the snapshot (still mapped: the transaction is open),
        // offered to the directory for the counts after this one.
        for i in topics.indices { read.offer(i, pid, code: topics[i].code, tid: topics[i].tid, asOf: asOf) }
        counts.withoutToken = counts.total - counts.ios - counts.android
        return counts
    }
}
