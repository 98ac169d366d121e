import LMDB
import Projections
import Synchronization

/// What a count from the serving caches reads of a generation: its reader,
/// which holds the caches, and its file's meta pages, mapped on their own.
///
/// Such a count reads LMDB's newest transaction id, to know whether the caches
/// hold that snapshot. Read through the environment's map, that took the map
/// lock's read side, so that the map could not move meanwhile (18.5 ns of a
/// per-user topic's 122, loop over the 1M benchmark store); the meta pages'
/// own mapping never moves.
final class ServingView: Sendable {
    let reader: ProjectionReader
    let metaPages: MetaPages
    /// The generation's identity (the view does not hold the generation, which
    /// holds the environment: a closed store's directory can be opened again).
    let generation: ObjectIdentifier

    /// The view of `g`; nil when it has no serving caches (or its meta pages cannot be mapped).
    init?(_ g: Generation) {
        guard g.reader.topicCache != nil, let pages = MetaPages(g.environment) else { return nil }
        reader = g.reader
        metaPages = pages
        generation = ObjectIdentifier(g)
    }

    /// Empties the caches and detaches the meta pages: a count still reading
    /// them goes to a snapshot, and the memory and the file are let go.
    func retire() {
        metaPages.detach()
        reader.topicCache?.forget()
        reader.recipientCache?.forget()
    }
}

/// The store's current serving view, as counts from the serving caches read
/// it: with no lock and no reference count taken.
///
/// A view replaced (the store moved to a new generation, or closed) is
/// retired and kept until the store itself goes, so a count that loaded it
/// just before never reads freed memory; kept, it holds two unmapped pages and
/// empty caches, one per generation switch.
final class ServingViews: Sendable {
    private let current = Atomic<Unmanaged<ServingView>?>(nil)
    /// Set by `close()`: a count after it goes the way that throws `StoreError.closed`.
    private let closed = Atomic<Bool>(false)
    private let retired = Mutex<[ServingView]>([])

    init(_ g: Generation) { publish(g) }

    deinit { current.load(ordering: .acquiring)?.release() }

    /// Makes `g`'s view the current one (none for nil), retiring the one before;
    /// nothing when `g` is the current view's generation already. Called by one
    /// thread at a time (under the map lock's write side, or closing).
    func publish(_ g: Generation?) {
        if let g, let view = current.load(ordering: .acquiring),
           view._withUnsafeGuaranteedRef({ $0.generation == ObjectIdentifier(g) }) { return }
        let next = g.flatMap(ServingView.init).map { Unmanaged.passRetained($0) }
        guard let old = current.exchange(next, ordering: .acquiringAndReleasing) else { return }
        let view = old.takeRetainedValue()
        view.retire()
        retired.withLock { $0.append(view) }
    }

    /// The views retired so far, oldest first.
    var retiredViews: [ServingView] { retired.withLock { $0 } }

    /// Closes the store to counts from the serving caches, and retires the current view.
    func close() {
        closed.store(true, ordering: .releasing)
        publish(nil)
    }

    /// `body` with the current view, borrowed for its duration; nil once the store is closed.
    @inline(__always)
    func withCurrent<R>(_ body: (ServingView) -> R?) -> R? {
        guard !closed.load(ordering: .acquiring), let view = current.load(ordering: .acquiring) else { return nil }
        return view._withUnsafeGuaranteedRef(body)
    }
}
