import Dispatch

/// A build's posting changes, applied on a second core while the fold goes on.
///
/// In a rebuild into an empty target, the fold's decisions (which device,
/// which topic, whether a subscription is new) need only device and topic
/// state; the bitmaps it then changes are written, never read, until the
/// build is written out. So the fold hands each bit change to this worker in
/// order, and the worker owns the posting chunks and the topics' slice lists
/// until `drain()`, after which the writer reads them as if it had made the
/// changes itself. Nothing is looked up in LMDB here: a target that is not
/// empty (a later round, a snapshot continued) takes the direct path.
final class PostingWorker: @unchecked Sendable {
    struct Change {
        var pid: UInt32
        var tid: UInt32
        var ordinal: UInt32
        var on: Bool
    }

    private let queue = DispatchQueue(label: "topicstore-postings")
    /// How many changes the folding thread gathers before it hands them over.
    /// It gathers them in its own memory (`ProjectionWriter`), never in this
    /// object: the worker writes the fields below all the time, and the fold
    /// touching the same cache lines (or this object's reference count) for
    /// every change made the two cores take the lines from each other.
    static let batch = 16_384

    // Owned by the queue between drains.
    private var cache = PostingCache(tracksLastChunks: true)
    /// Slice lists of the topics whose chunks appeared or emptied, by topic id
    /// (nil: unchanged), and those topics in the order they first changed.
    private var slices = TopicColumns<[UInt16]?>(empty: nil)
    private var changedTopics: [ProjectionWriter.TopicKey] = []

    init() {}

    /// Queues bit changes (of topics, or built-in sets), applied in order.
    func enqueue(_ changes: [Change]) {
        queue.async { [self] in apply(changes) }
    }

    private func apply(_ changes: [Change]) {
        for c in changes {
            let (_, slice) = cache.set(c.pid, c.tid, c.ordinal, c.on) { _ in nil }
            guard let slice, c.tid >= ProjectionTables.firstTopicID else { continue }
            var list: [UInt16]
            if let held = slices.value(c.pid, c.tid), let held {
                list = held
                slices.update(c.pid, c.tid, nil)  // let go of it, so the change below does not copy
            } else {
                list = []
                changedTopics.append(ProjectionWriter.TopicKey(pid: c.pid, topic: c.tid))
            }
            slice.apply(PostingChunk.high(c.ordinal), to: &list)
            slices.update(c.pid, c.tid, list)
        }
    }

    /// Waits until every queued change is applied. After it, and until the
    /// next `set`, the caller may read and change what the worker holds.
    func drain() {
        queue.sync {}
    }

    /// The chunks (call after `drain()`).
    var postings: PostingCache {
        get { cache }
        _modify { yield &cache }
    }

    /// Each topic whose slice list changed, with the list (call after `drain()`).
    func forEachChangedTopic(_ body: (ProjectionWriter.TopicKey, [UInt16]) throws -> Void) rethrows {
        for key in changedTopics {
            try body(key, (slices.value(key.pid, key.topic) ?? nil) ?? [])
        }
    }

    /// The changed slice lists were written into the topics: forget them (call after `drain()`).
    func forgetChangedTopics() {
        slices = TopicColumns(empty: nil)
        changedTopics = []
    }

    /// Bytes held, roughly (call after `drain()`).
    var footprint: Int { cache.footprint + slices.slots * 8 + changedTopics.count * 40 }
}
