import Dispatch

/// A build's changes to the built-in sets (live iOS, live Android, known
/// devices), applied on a second core while the fold goes on.
///
/// In a rebuild into an empty target, the fold's decisions (which device,
/// whether a token moves) need only device state; the sets it then changes
/// are written, never read, until the build is written out. So the fold
/// hands each bit change to this worker in order, and the worker owns those
/// chunks until `drain()`, after which the writer reads them as if it had
/// made the changes itself. Nothing is looked up in LMDB here: a target that
/// is not empty (a later round, a snapshot continued) takes the direct path.
/// The topics' chunks are not followed at all: they are made from the
/// devices' topic lists when the build is written (`PostingInversion`).
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

    init() {}

    /// Queues bit changes of built-in sets, applied in order.
    func enqueue(_ changes: [Change]) {
        queue.async { [self] in apply(changes) }
    }

    private func apply(_ changes: [Change]) {
        for c in changes {
            precondition(c.tid < ProjectionTables.firstTopicID, "topic \(c.tid) handed to the built-in sets' worker")
            _ = cache.set(c.pid, c.tid, c.ordinal, c.on) { _ in nil }
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

    /// Bytes held, roughly (call after `drain()`).
    var footprint: Int { cache.footprint }
}
