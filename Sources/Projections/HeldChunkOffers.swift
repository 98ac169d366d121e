/// The topics' chunks one count read from its snapshot, to offer the topic
/// directory once it has counted (`TopicCache.offerChunks`). At most
/// `offeredPerCount` bytes are noted, so the first count after a commit that
/// changed many slices, or the first of topics not held yet, copies a bounded
/// share and leaves the rest to the counts after it. The chunks are the
/// snapshot's: offer them while its transaction is open.
struct HeldChunkOffers {
    /// Bytes of topics' chunks one count may copy to the directory: at 10M
    /// devices, 64 of the 8 KiB chunks of a popular topic's 153 slices.
    static let offeredPerCount = 512 << 10

    private let directory: TopicCache?
    /// By topic of the count: the index of each slice read, in the topic's placement, and its chunk.
    private var read: [[(index: Int, chunk: UnsafeRawBufferPointer)]]
    private var budget = Self.offeredPerCount

    /// For a count of `count` topics by `reader` (nothing is noted without a directory).
    init(_ reader: ProjectionReader, count: Int) {
        self.init(reader.topicCache, count: count)
    }

    /// For a count of `count` topics offering to `directory`.
    init(_ directory: TopicCache?, count: Int) {
        self.directory = directory
        read = directory == nil ? [] : Array(repeating: [], count: count)
    }

    /// Notes that topic `i`'s chunk in the `slice`th slice of its placement was read from the snapshot.
    @inline(__always)
    mutating func note(_ i: Int, slice: Int, _ chunk: UnsafeRawBufferPointer) {
        guard directory != nil, chunk.count <= budget else { return }
        budget -= chunk.count
        read[i].append((slice, chunk))
    }

    /// Offers what was noted of topic `i` (code `code`, id `tid` of project `pid`), read at `asOf`.
    func offer(_ i: Int, _ pid: UInt32, code: String, tid: UInt32, asOf: UInt64) {
        guard let directory, !read[i].isEmpty else { return }
        directory.offerChunks(pid, code: code, tid: tid, read[i], readAt: asOf)
    }
}
