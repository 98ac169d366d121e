import Synchronization

/// The store's current generation as a count from the serving caches reads
/// it: borrowed under the map lock's read side, with no lock of its own and
/// no reference count taken.
///
/// `TopicStore.openGeneration` takes the state lock and retains the
/// generation, and the count releases it: four atomic operations, about 20 ns
/// of a per-user topic's 170 ns count (perf of a loop of them). Such a count
/// holds the map lock's read side anyway (it reads LMDB's newest transaction
/// id from the meta pages), so this copy of the reference is replaced only
/// under its write side: `set` is called with the map lock held exclusively,
/// `withBorrowed` with it held shared, and the generation it lends cannot be
/// released meanwhile.
final class MapGuardedGeneration: @unchecked Sendable {
    /// Retained once by this object; changed only under the map lock's write side.
    private var held: Unmanaged<Generation>?
    /// Set by `close()` before it lets go: a count after it goes the way
    /// that throws `StoreError.closed`, even where `close(waitingAtMost:)`
    /// could not take the map lock to let go.
    private let closed = Atomic<Bool>(false)

    init(_ g: Generation) {
        held = .passRetained(g)
    }

    deinit { held?.release() }

    /// Replaces the generation (the caller holds the map lock exclusively).
    func set(_ g: Generation?) {
        let old = held
        held = g.map { .passRetained($0) }
        old?.release()
    }

    /// Marks the store closed: `withBorrowed` answers nil from now on.
    func close() { closed.store(true, ordering: .releasing) }

    /// `body` with the current generation, borrowed for its duration (the
    /// caller holds the map lock's read side); nil once the store is closed.
    @inline(__always)
    func withBorrowed<R>(_ body: (Generation) -> R?) -> R? {
        guard !closed.load(ordering: .acquiring), let g = held else { return nil }
        return g._withUnsafeGuaranteedRef(body)
    }
}
