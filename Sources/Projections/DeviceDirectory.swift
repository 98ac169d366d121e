import LMDB

/// Which device has each device_id, and which holds each push token, as the
/// writer knows it: two `OrdinalIndex`es read from `devices` and kept true
/// across the writer's transactions.
///
/// Both are functions of the device records (a record holds its device_id
/// and its token; no two devices of a project share either), so storing them
/// again in LMDB adds nothing durable. It cost a lot: a B-tree keyed by the
/// name itself puts one random leaf page into the commit of every new device
/// and every new token. At 1M devices, the `tokens` table (schema 1) was
/// about 40% of the pages an install command dirtied, and `device_ids`
/// (schema 2) took install from 62 to 38 thousand commands/s.
///
/// It is the truth only while the store holds what this writer last
/// committed. Every flush writes a new writer stamp (`writer_state`) into its
/// transaction; at the start of the next transaction `sync` reads the stamp
/// back: the flush's stamp means that transaction committed (its changes
/// stay), the stamp from before means it did not (its changes are undone),
/// any other stamp means someone else wrote (the indexes are read again).
struct DeviceDirectory {
    enum Name { case deviceID, token }

    private(set) var ids = OrdinalIndex()
    private(set) var tokens = OrdinalIndex()
    private(set) var isLoaded = false
    /// The stamp of the store state the indexes are known to match.
    private var matchedStamp: UInt64?
    /// Changes since then, oldest first, for undoing them.
    private var changes: [(name: Name, insert: Bool, pid: UInt32, hash: UInt64, ordinal: UInt32)] = []
    /// The stamp the last flush wrote.
    private var flushedStamp: UInt64?
    /// A random start, then one more per stamp written.
    private var lastStamp = UInt64.random(in: 1...UInt64.max)
    /// A build (replay, import) is never rolled back: it records no changes.
    private let recordsChanges: Bool

    init(recordsChanges: Bool) { self.recordsChanges = recordsChanges }

    /// Bytes the tables take.
    var footprint: Int { ids.footprint + tokens.footprint }

    /// A build into empty tables: nothing to read.
    mutating func startEmpty() { isLoaded = true }

    mutating func reserve(_ devices: Int) {
        ids.reserve(devices)
        tokens.reserve(devices)
    }

    /// Brings the indexes in line with what `txn` sees (see the type's notes);
    /// true when that meant reading every device record.
    @discardableResult
    mutating func sync(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws -> Bool {
        if isLoaded {
            let stored = try tables.writerStamp(txn)
            if let flushed = flushedStamp, stored == flushed {
                changes.removeAll(keepingCapacity: true)
                matchedStamp = flushed
            } else if stored == matchedStamp {
                for change in changes.reversed() {
                    if change.insert { self[change.name].remove(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
                    else { self[change.name].insert(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
                }
                changes.removeAll(keepingCapacity: true)
            } else {
                isLoaded = false
            }
            flushedStamp = nil
        }
        if !isLoaded { try load(tables, txn); return true }
        return false
    }

    /// Reads every device record of `txn` into new indexes, checking on the
    /// way that no two devices of a project share a device_id or a token.
    mutating func load(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws {
        let count = try txn.statistics(tables.devices).entries
        var loadedIDs = OrdinalIndex(capacity: count)
        var loadedTokens = OrdinalIndex(capacity: count)
        let devices = tables.devices
        try txn.withCursor(devices) { cursor in
            var entry = try cursor.first()
            while let (key, value) = entry {
                guard key.count == 8, let f = DeviceRecord.fields(of: value) else {
                    throw ProjectionCorruption(place: "devices/\(Array(key))", reason: "device record does not decode")
                }
                let pid = key.loadBigEndian(at: 0, as: UInt32.self), ordinal = key.loadBigEndian(at: 4, as: UInt32.self)
                // Entries with the same hash are rare (a collision or a corrupt store): compare the names.
                func fileUnique(_ name: UnsafeRawBufferPointer, in index: inout OrdinalIndex, what: String,
                                _ matches: (DeviceRecord.Fields) -> Bool) throws {
                    let hash = OrdinalIndex.hash(pid, name)
                    try index.forEachCandidate(pid: pid, hash: hash) { other in
                        if let v = try txn.get(devices, Keys.pair(pid, other)), let g = DeviceRecord.fields(of: v), matches(g) {
                            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)",
                                                       reason: "its \(what) is also held by device ordinal \(other)")
                        }
                        return false
                    }
                    index.insert(pid: pid, hash: hash, ordinal: ordinal)
                }
                try fileUnique(f.deviceID, in: &loadedIDs, what: "device_id") { $0.has(deviceID: f.deviceID) }
                if f.hasToken {
                    try fileUnique(f.token, in: &loadedTokens, what: "token") { $0.holds(f.token) }
                }
                entry = try cursor.next()
            }
        }
        ids = loadedIDs
        tokens = loadedTokens
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

    /// Calls `body` with each device filed under `name` until it returns true
    /// (a candidate: its record says whether it has that name).
    func forEachCandidate(_ name: Name, _ pid: UInt32, _ value: String, _ body: (UInt32) throws -> Bool) rethrows {
        let hash = OrdinalIndex.hash(pid, value)
        switch name {
        case .deviceID: try ids.forEachCandidate(pid: pid, hash: hash, body)
        case .token: try tokens.forEachCandidate(pid: pid, hash: hash, body)
        }
    }

    /// Device `ordinal` now has `value` (its previous holder must have been removed).
    mutating func insert(_ name: Name, _ pid: UInt32, _ value: String, ordinal: UInt32) {
        let hash = OrdinalIndex.hash(pid, value)
        self[name].insert(pid: pid, hash: hash, ordinal: ordinal)
        if recordsChanges { changes.append((name, true, pid, hash, ordinal)) }
    }

    /// Device `ordinal` no longer has `value`.
    mutating func remove(_ name: Name, _ pid: UInt32, _ value: String, ordinal: UInt32) {
        let hash = OrdinalIndex.hash(pid, value)
        if self[name].remove(pid: pid, hash: hash, ordinal: ordinal), recordsChanges {
            changes.append((name, false, pid, hash, ordinal))
        }
    }

    private subscript(name: Name) -> OrdinalIndex {
        get { name == .deviceID ? ids : tokens }
        _modify {
            if name == .deviceID { yield &ids } else { yield &tokens }
        }
    }
}
