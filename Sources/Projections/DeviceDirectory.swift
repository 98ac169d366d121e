import LMDB
import SubscriptionLog

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
/// any other stamp means someone else wrote: the indexes follow what the
/// other writers' journal entries list (`WriterJournal`), or, where they
/// cannot, are read again.
struct DeviceDirectory {
    enum Name { case deviceID, token }

    /// One index entry inserted or removed.
    struct Change: Equatable {
        var name: Name
        var insert: Bool
        var pid: UInt32
        var hash: UInt64
        var ordinal: UInt32
    }

    /// A store state: the writer stamp it carries and the sequence its projections are at.
    struct State: Equatable {
        var stamp: UInt64?
        var sequence: UInt64
    }

    /// How `sync` brought the indexes in line.
    enum Sync {
        /// Only this writer had written since they were last in line, from `State`.
        case own(State)
        /// Others wrote since `State`; `entries` list what they changed, now applied.
        case followed(State, [WriterJournal.Entry])
        /// They were read from the device records again.
        case loaded
    }

    private(set) var ids = OrdinalIndex()
    private(set) var tokens = OrdinalIndex()
    private(set) var isLoaded = false
    /// The store state the indexes are known to match.
    private var matched: State?
    /// Changes since then, oldest first, for undoing them (and for the journal).
    private(set) var changes: [Change] = []
    /// The state the last flush wrote, if its transaction commits.
    private var flushed: State?
    /// The stamp the last flush wrote (for its journal entry).
    var flushedStamp: UInt64? { flushed?.stamp }
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

    /// Brings the indexes in line with what `txn` sees (see the type's notes).
    /// Without `reading`, indexes that would have to be read again are left
    /// unloaded instead (and nil returned).
    @discardableResult
    mutating func sync(_ tables: ProjectionTables, _ txn: borrowing Transaction, reading: Bool = true) throws -> Sync? {
        if isLoaded {
            let now = State(stamp: try tables.writerStamp(txn), sequence: try tables.appliedSequence(txn))
            defer { flushed = nil }
            if let flushed, now == flushed {
                confirmFlush(flushed)
                return .own(flushed)
            }
            if let matched, now == matched {
                undoChanges()
                return .own(matched)
            }
            // Others wrote: after this writer's last transaction if it committed, or instead of it.
            if let flushed, let entries = try WriterJournal.chain(from: flushed.stamp, at: flushed.sequence, to: now.stamp,
                                                                   appliedSequence: now.sequence, tables, txn) {
                confirmFlush(flushed)
                follow(entries, to: now)
                return .followed(flushed, entries)
            }
            if let matched, let entries = try WriterJournal.chain(from: matched.stamp, at: matched.sequence, to: now.stamp,
                                                                   appliedSequence: now.sequence, tables, txn) {
                undoChanges()
                follow(entries, to: now)
                return .followed(matched, entries)
            }
            isLoaded = false
        }
        guard reading else { return nil }
        try load(tables, txn)
        return .loaded
    }

    private mutating func confirmFlush(_ state: State) {
        changes.removeAll(keepingCapacity: true)
        matched = state
    }

    private mutating func undoChanges() {
        for change in changes.reversed() {
            if change.insert { self[change.name].remove(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
            else { self[change.name].insert(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
        }
        changes.removeAll(keepingCapacity: true)
    }

    /// Applies what other writers' transactions changed (in order), reaching `state`.
    private mutating func follow(_ entries: [WriterJournal.Entry], to state: State) {
        for entry in entries {
            for change in entry.names {
                if change.insert { self[change.name].insert(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
                else { self[change.name].remove(pid: change.pid, hash: change.hash, ordinal: change.ordinal) }
            }
        }
        matched = state
    }

    /// Indexes another writer keeps, in line with `state` (the same device records in
    /// another file: a new generation), taken over instead of read.
    mutating func adopt(_ other: DeviceDirectory, at state: State) {
        guard other.isLoaded, other.changes.isEmpty else { return }
        ids = other.ids
        tokens = other.tokens
        isLoaded = true
        matched = state
        flushed = nil
        changes.removeAll()
    }

    /// Reads every device record of `txn` into new indexes, checking on the
    /// way that no two devices of a project share a device_id or a token.
    mutating func load(_ tables: ProjectionTables, _ txn: borrowing Transaction) throws {
        let count = try txn.statistics(tables.devices).entries
        var loadedIDs = OrdinalIndex(capacity: count)
        var loadedTokens = OrdinalIndex(capacity: count)
        let devices = tables.devices
        // Names stored in fewer bytes are spelled here to be hashed (one buffer for the
        // whole walk: `withText` per name cost a generic metadata lookup each, 0.1 s a million).
        let scratch = UnsafeMutableRawPointer.allocate(byteCount: StoredName.longestSpelled, alignment: 8)
        defer { scratch.deallocate() }
        // Each name is filed a few devices after its record is read (`LaggedInserts`):
        // its slot is then in the cache. `serve --no-file-check --no-recipient-cache` on
        // bench's 10M store, which is mostly this load: 6.2–8.1 → 3.4–4.0 s.
        // The fields held meanwhile point into the map, which `txn` keeps.
        typealias Insert = LaggedInserts<DeviceRecord.Fields>.Insert
        var idInserts = LaggedInserts<DeviceRecord.Fields>(), tokenInserts = LaggedInserts<DeviceRecord.Fields>()
        // Entries with the same hash are rare (a collision or a corrupt store): compare the names.
        func fileUnique(_ insert: Insert, in index: inout OrdinalIndex, what: String,
                        _ matches: (DeviceRecord.Fields, DeviceRecord.Fields) -> Bool) throws {
            let pid = insert.pid
            try index.forEachCandidate(pid: pid, hash: insert.hash) { other in
                if let v = try txn.get(devices, Keys.pair(pid, other)), let g = DeviceRecord.fields(of: v), matches(g, insert.payload) {
                    throw ProjectionCorruption(place: "devices/\(pid)/\(insert.ordinal)",
                                               reason: "its \(what) is also held by device ordinal \(other)")
                }
                return false
            }
            index.insert(pid: pid, hash: insert.hash, ordinal: insert.ordinal)
        }
        func fileID(_ insert: Insert) throws {
            try fileUnique(insert, in: &loadedIDs, what: "device_id") { $0.deviceID.equals($1.deviceID) }
        }
        func fileToken(_ insert: Insert) throws {
            try fileUnique(insert, in: &loadedTokens, what: "token") { $0.hasToken && $0.token.equals($1.token) }
        }
        try txn.withCursor(devices) { cursor in
            var entry = try cursor.first()
            while let (key, value) = entry {
                guard key.count == 8, let f = DeviceRecord.fields(of: value) else {
                    throw ProjectionCorruption(place: "devices/\(Array(key))", reason: "device record does not decode")
                }
                let pid = key.loadBigEndian(at: 0, as: UInt32.self), ordinal = key.loadBigEndian(at: 4, as: UInt32.self)
                let id = Insert(pid: pid, hash: OrdinalIndex.hash(pid, f.deviceID.text(spellingInto: scratch)), ordinal: ordinal, payload: f)
                if let due = idInserts.push(id, prefetchingIn: loadedIDs) { try fileID(due) }
                if f.hasToken {
                    let token = Insert(pid: pid, hash: OrdinalIndex.hash(pid, f.token.text(spellingInto: scratch)), ordinal: ordinal, payload: f)
                    if let due = tokenInserts.push(token, prefetchingIn: loadedTokens) { try fileToken(due) }
                }
                entry = try cursor.next()
            }
            for due in idInserts.drain() { try fileID(due) }
            for due in tokenInserts.drain() { try fileToken(due) }
        }
        ids = loadedIDs
        tokens = loadedTokens
        isLoaded = true
        matched = State(stamp: try tables.writerStamp(txn), sequence: try tables.appliedSequence(txn))
        changes.removeAll()
        flushed = nil
    }

    /// Writes a new stamp into `txn`, whose projections are at `sequence`: they are this writer's.
    mutating func stamp(_ tables: ProjectionTables, _ txn: borrowing Transaction, sequence: UInt64) throws {
        lastStamp &+= 1
        try tables.setWriterStamp(lastStamp, txn)
        flushed = State(stamp: lastStamp, sequence: sequence)
    }

    /// Where the probe for `hash` starts in the index of `name`, for `nextCandidate`.
    func firstSlot(_ name: Name, _ hash: UInt64) -> Int {
        name == .deviceID ? ids.firstSlot(hash) : tokens.firstSlot(hash)
    }

    /// The next device filed under `hash` in the index of `name`, from `slot` on
    /// (a candidate: its record says whether it has that name); nil when there is none.
    func nextCandidate(_ name: Name, _ pid: UInt32, _ hash: UInt64, slot: inout Int) -> UInt32? {
        name == .deviceID ? ids.nextCandidate(pid: pid, hash: hash, slot: &slot)
                          : tokens.nextCandidate(pid: pid, hash: hash, slot: &slot)
    }

    /// Device `ordinal` now has `value` (its previous holder must have been removed).
    mutating func insert(_ name: Name, _ pid: UInt32, _ value: String, ordinal: UInt32) {
        insert(name, pid, hash: OrdinalIndex.hash(pid, value), ordinal: ordinal)
    }

    /// `insert` of a name whose `OrdinalIndex.hash` is `hash`.
    mutating func insert(_ name: Name, _ pid: UInt32, hash: UInt64, ordinal: UInt32) {
        self[name].insert(pid: pid, hash: hash, ordinal: ordinal)
        if recordsChanges { changes.append(Change(name: name, insert: true, pid: pid, hash: hash, ordinal: ordinal)) }
    }

    /// Device `ordinal` no longer has `value`.
    mutating func remove(_ name: Name, _ pid: UInt32, _ value: String, ordinal: UInt32) {
        remove(name, pid, hash: OrdinalIndex.hash(pid, value), ordinal: ordinal)
    }

    /// `remove` of a name whose `OrdinalIndex.hash` is `hash`.
    mutating func remove(_ name: Name, _ pid: UInt32, hash: UInt64, ordinal: UInt32) {
        if self[name].remove(pid: pid, hash: hash, ordinal: ordinal), recordsChanges {
            changes.append(Change(name: name, insert: false, pid: pid, hash: hash, ordinal: ordinal))
        }
    }

    private subscript(name: Name) -> OrdinalIndex {
        get { name == .deviceID ? ids : tokens }
        _modify {
            if name == .deviceID { yield &ids } else { yield &tokens }
        }
    }
}
