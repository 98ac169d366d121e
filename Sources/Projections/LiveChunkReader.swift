import LMDB

/// The live sets' chunks of the slices one count reads, slice by slice: from
/// the serving process's topic directory where it holds them for the count's
/// snapshot (taken once for the count), else read from the snapshot with one
/// seek and one step and, while the count's budget has room, copied to the
/// directory for the counts after it. Keep the reader alive while the chunks
/// it returned are read (`withExtendedLifetime`): held ones live in it.
struct LiveChunkReader {
    /// Bytes of live sets' chunks one count may copy to the directory: the
    /// first counts after a commit that dropped many slices stay cheap.
    static let offeredPerCount = 64 << 10

    private let directory: TopicCache?
    private let pid: UInt32
    private let asOf: UInt64
    private let held: TopicCache.HeldLive?
    private var key: [UInt8]
    private var budget = Self.offeredPerCount

    init(_ reader: ProjectionReader, pid: UInt32, asOf: UInt64) {
        directory = reader.topicCache
        self.pid = pid
        self.asOf = asOf
        held = directory?.heldLive(pid, asOf: asOf)
        key = Keys.chunk(pid, ProjectionTables.BuiltIn.liveIOS, 0)
    }

    /// Both live sets' chunks of slice `high` (nil: none there), `cursor` on the postings.
    @inline(__always)
    mutating func chunks(_ high: UInt16, _ cursor: inout Cursor) throws
        -> (ios: UnsafeRawBufferPointer?, android: UnsafeRawBufferPointer?) {
        if let chunks = held?.chunks(high) {
            return (chunks[0].count > 0 ? chunks[0] : nil, chunks[1].count > 0 ? chunks[1] : nil)
        }
        let live = try ProjectionReader.liveChunks(pid, high, key: &key, &cursor)
        guard let directory else { return live }
        let size = (live.ios?.count ?? 0) + (live.android?.count ?? 0)
        // An empty stored chunk is damage, which the count reports: never held.
        if size <= budget, live.ios?.count != 0, live.android?.count != 0 {
            budget -= size
            let none = UnsafeRawBufferPointer(start: nil, count: 0)
            directory.offerLiveChunks(pid, high, TopicChunks([live.ios ?? none, live.android ?? none]), readAt: asOf)
        }
        return live
    }
}
