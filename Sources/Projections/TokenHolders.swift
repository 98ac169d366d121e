import LMDB

/// Which device holds each token, as the writer knows it: a `TokenIndex`
/// read from `devices`, kept true across the writer's transactions.
///
/// It is the truth only while the store holds what this writer last
/// committed. Every flush writes a new writer stamp (`writer_state`) into its
/// transaction; at the start of the next transaction `sync` reads the stamp
/// back: the flush's stamp means that transaction committed (its changes
/// stay), the stamp from before means it did not (its changes are undone),
/// any other stamp means someone else wrote (the index is read again).
struct TokenHolders {
    private(set) var index = TokenIndex()
    private(set) var isLoaded = false
    /// The stamp of the store state the index is known to match.
    private var matchedStamp: UInt64?
    /// Changes since then, oldest first, for undoing them.
    private var changes: [(insert: Bool, pid: UInt32, hash: UInt64, ordinal: UInt32)] = []
    /// The stamp the last flush wrote.
    private var flushedStamp: UInt64?
    /// A random start, then one more per stamp written.
    private var lastStamp = UInt64.random(in: 1...UInt64.max)
    /// A build (replay, import) is never rolled back: it records no changes.
    private let recordsChanges: Bool

    init(recordsChanges: Bool) { self.recordsChanges = recordsChanges }

    /// Bytes the table takes.
    var footprint: Int { index.footprint }

    /// A build into empty tables: nothing to read.
    mutating func startEmpty() { isLoaded = true }

    mutating func reserve(_ devices: Int) { index.reserve(devices) }

    /// Brings the index in line with what `txn` sees (see the type's notes).
    mutating func sync(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws {
        if isLoaded {
            let stored = try tables.writerStamp(txn)
            if let flushed = flushedStamp, stored == flushed {
                changes.removeAll(keepingCapacity: true)
                matchedStamp = flushed
            } else if stored == matchedStamp {
                for change in changes.reversed() {
                    if change.insert { index.remove(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
                    else { index.insert(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
                }
                changes.removeAll(keepingCapacity: true)
            } else {
                isLoaded = false
            }
            flushedStamp = nil
        }
        if !isLoaded { try load(tables, txn) }
    }

    /// Reads every device record of `txn` into a new index, checking on the
    /// way that no two devices of a project hold the same token.
    mutating func load(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws {
        var loaded = TokenIndex(capacity: try txn.statistics(tables.devices).entries)
        let devices = tables.devices
        try txn.withCursor(devices) { cursor in
            var entry = try cursor.first()
            while let (key, value) = entry {
                guard key.count == 8, let f = DeviceRecord.fields(of: value) else {
                    throw ProjectionCorruption(place: "devices/\(Array(key))", reason: "device record does not decode")
                }
                if f.hasToken {
                    let pid = key.loadBigEndian(at: 0, as: UInt32.self), ordinal = key.loadBigEndian(at: 4, as: UInt32.self)
                    let hash = TokenIndex.hash(pid, f.token)
                    // Entries with the same hash are rare (a collision or a corrupt store): compare the tokens.
                    try loaded.forEachCandidate(pid: pid, hash: hash) { other in
                        if let v = try txn.get(devices, Keys.pair(pid, other)), let g = DeviceRecord.fields(of: v), g.holds(f.token) {
                            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)",
                                                       reason: "its token is also held by device ordinal \(other)")
                        }
                        return false
                    }
                    loaded.insert(pid: pid, hash: hash, ordinal: ordinal)
                }
                entry = try cursor.next()
            }
        }
        index = loaded
        isLoaded = true
        matchedStamp = try tables.writerStamp(txn)
        changes.removeAll()
        flushedStamp = nil
    }

    /// Writes a new stamp into `txn`: the projections there are this writer's.
    mutating func stamp(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws {
        lastStamp &+= 1
        try tables.setWriterStamp(lastStamp, txn)
        flushedStamp = lastStamp
    }

    /// Calls `body` with each device filed under `token` until it returns true
    /// (a candidate: its record says whether it holds the token).
    func forEachCandidate(_ pid: UInt32, _ token: String, _ body: (UInt32) throws -> Bool) rethrows {
        try index.forEachCandidate(pid: pid, hash: TokenIndex.hash(pid, token), body)
    }

    /// Device `ordinal` now holds `token` (its previous holder must have been removed).
    mutating func insert(_ pid: UInt32, _ token: String, ordinal: UInt32) {
        let hash = TokenIndex.hash(pid, token)
        index.insert(pid: pid, hash: hash, ordinal: ordinal)
        if recordsChanges { changes.append((true, pid, hash, ordinal)) }
    }

    /// Device `ordinal` no longer holds `token`.
    mutating func remove(_ pid: UInt32, _ token: String, ordinal: UInt32) {
        let hash = TokenIndex.hash(pid, token)
        if index.remove(pid: pid, hash: hash, ordinal: ordinal), recordsChanges {
            changes.append((false, pid, hash, ordinal))
        }
    }
}
