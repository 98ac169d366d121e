import LMDB
import SubscriptionLog

/// The projection databases, all keyed with the project id first.
///
/// | table          | key                         | value                        |
/// |----------------|-----------------------------|------------------------------|
/// | meta           | name                        | schema version, applied seq  |
/// | projects       | project name                | `ProjectRecord`              |
/// | devices        | pid ‖ ordinal               | `DeviceRecord`               |
/// | topics         | pid ‖ topic id              | `TopicRecord`                |
/// | topic_codes    | pid ‖ (0x7F + length) ‖ code | topic id                    |
/// | postings       | pid ‖ high16 ‖ topic id     | one roaring container        |
/// | device_topics  | pid ‖ ordinal               | ascending u32 topic ids      |
///
/// Which device has a device_id, and which holds a token, are not tables:
/// the writer keeps both in memory, loaded from `devices` (see
/// `DeviceDirectory`); other readers find a device_id in `devices` itself. Beside the projections, a store
/// opened for writing has `writer_state`, bookkeeping of the writers (not a
/// projection: never compared, never rebuilt).
public struct ProjectionTables: Sendable {
    /// 13: the blocks a compaction writes leave out their records' own CRCs
    /// (`LogBlock`, form bit 0x80: the block's CRC covers the bytes, and
    /// each record's CRC is computed again when the block is expanded), and
    /// device records written from now on hold their times in 6 bytes each
    /// when they fit (`DeviceRecord.shortTimesFlag`); nothing is rewritten,
    /// and an older program refuses the store (it would take such a block for
    /// a damaged one, such a record for one it cannot decode).
    /// 12: a compaction writes the log's records it keeps in compressed
    /// blocks (`LogBlock`: one entry for a run of records, each in its own
    /// frame); nothing is rewritten when an older store is opened, and an older
    /// program refuses the store (it would take a block for a record of an
    /// unknown version, 0xB1).
    /// 11: `topic_codes` keys hold a code's length before the code
    /// (`TopicCodeOrder.byLength`): the codes of a project are in order of
    /// length, then of bytes. Per-user codes given out in counting order
    /// (`user.1000000`, `user.1000001`, …) were inserted among the shorter
    /// codes before them, in the middle of the tree, where LMDB splits a full
    /// page in half and leaves the left half as it is: the table's pages were
    /// half full. Of one length, such codes now come last, and fill their
    /// pages. Opening an older store for writing rewrites its `topic_codes`
    /// in the new form, in the transaction that stamps the version (a 10M
    /// store: 10M entries, 5.9 s); an older program then refuses the store.
    /// 10: posting chunks written from now on are in the compact format (a
    /// tag byte and a zero byte before the container, where the portable
    /// format spent 16 bytes of header on an array; see `Bitmap.chunkSize`),
    /// and devices' topic lists in the varint form (`DeviceTopics`); chunks
    /// and lists an older store has keep their form until rewritten, and read
    /// as before; an older program refuses the store (it would take the new
    /// ones for corruption).
    /// 9: log records written from now on are version 5, which keeps the
    /// first 8 bytes of its chain link, except every 64th, version 4 with the
    /// whole link (`RecordCodec.fullLinkInterval`); nothing is rewritten, and
    /// an older program refuses the store (it would take those records for
    /// corruption).
    /// 8: log records written from now on are version 4 (`RecordCodec`: no
    /// stored sequence, the checksum covering the key, a 48-bit timestamp, short
    /// lengths); nothing is rewritten, and an older program refuses the store
    /// (it would take those records for corruption).
    /// 7: device records and log records written from now on may hold a
    /// token in `StoredName`'s 6-bit form (an FCM token in 125 bytes instead
    /// of 166); nothing is rewritten, and an older program refuses the store
    /// (it would not read those names).
    /// 6: a shared topic's record in the compact layout does not list its
    /// project's newest slice (see `PostingChunk.omitsNewest`); opening an
    /// older compact store for writing takes that slice out of the records
    /// that list it, in the same transaction that stamps the version, and
    /// an older program then refuses the store (it would miss those members).
    /// 5: topic records written from now on are in form 2 (varint sequences
    /// and lengths, no title when it is the code, no subscriber count in the
    /// compact layout: see `TopicRecord`); an older store's records keep their
    /// form until rewritten, and read as before.
    /// 4: device records written from now on hold their device_id and token
    /// as `StoredName`s (a UUID in 16 bytes, a hex token in half its length);
    /// the records an older store has keep their form until rewritten, and
    /// read as before. 3: no `device_ids` table; 2: no `tokens` table.
    /// Opening an older store for writing drops what it has of those tables
    /// and stamps the current version (an older program then refuses the store
    /// rather than misread its new records).
    public static let schemaVersion: UInt32 = 13
    /// The versions this code reads.
    public static let readableSchemaVersions: ClosedRange<UInt32> = 1...13
    public static let names = ["meta", "projects", "devices",
                               "topics", "topic_codes", "postings", "device_topics"]

    public let meta: Database
    public let projects: Database
    public let devices: Database
    public let topics: Database
    public let topicCodes: Database
    public let postings: Database
    public let deviceTopics: Database
    /// `writer_state`: nil in an environment opened read-only.
    public let writerState: Database?

    public var all: [Database] { [meta, projects, devices, topics, topicCodes, postings, deviceTopics] }

    /// Built-in bitmaps kept per project beside the topics (ids below `firstTopicID`).
    enum BuiltIn {
        static let liveIOS: UInt32 = 0
        static let liveAndroid: UInt32 = 1
        static let knownDevices: UInt32 = 2
        static func live(_ platform: Platform) -> UInt32 { platform == .ios ? liveIOS : liveAndroid }
    }
    static let firstTopicID: UInt32 = 16

    /// How the fold lays topics out, fixed when a store is created (in
    /// `meta`) and copied into a rebuild, so the rebuild folds as the store did.
    public enum TopicLayout: UInt32, Sendable {
        /// Stores created before schema 3: one id sequence for every topic,
        /// and each topic's record keeps its subscriber count (rewritten,
        /// with `lastChangeSeq`, at every subscription change).
        case legacy = 0
        /// Shared topics numbered from the sequence, single topics (one
        /// device's) at 2^31 + the sequence, so the records and containers of
        /// the few shared topics that every batch of new devices updates stay
        /// together in key order instead of spread among a million per-user
        /// topics. A record stores no subscriber count (0): the count is the
        /// sum of the cardinalities of the topic's stored chunks, and the
        /// record is rewritten only when the topic itself changes (title,
        /// single, the slices it occupies) or gains its first or loses its
        /// last subscriber (`lastChangeSeq`, which compaction reads).
        case compact = 1
    }
    /// How `topic_codes` orders a project's codes: in `meta` since schema 11,
    /// which rewrites an older store's table (`reorderTopicCodes`); a rebuild
    /// takes its source's order, so that the two compare key by key.
    public enum TopicCodeOrder: UInt32, Sendable {
        /// `pid ‖ code`: byte order. Stores from before schema 11.
        case bytewise = 0
        /// `pid ‖ (0x7F + length) ‖ code`: by length, then byte order. A
        /// listing in code order merges the lengths (`ProjectionReader.topicPage`).
        case byLength = 1
    }
    static let singleTopicBit: UInt32 = 1 << 31
    /// Topic ids are given out below this (2,130,706,432 topics a project),
    /// with or without `singleTopicBit`: no topic list of the form before
    /// schema 10 (4-byte big-endian ids) then starts with the byte 0xFF,
    /// which marks the varint form (`DeviceTopics`).
    static let topicIDLimit: UInt32 = 0x7F00_0000

    static let appliedSeqKey = Array("appliedSeq".utf8)
    static let versionKey = Array("schemaVersion".utf8)
    /// The key of the schema version in `meta` (a u32), for checks made before the tables are opened.
    public static var schemaVersionKey: [UInt8] { versionKey }
    static let nextProjectKey = Array("nextProject".utf8)
    static let writerStampKey = Array("stamp".utf8)
    static let topicLayoutKey = Array("topicLayout".utf8)
    static let topicCodeOrderKey = Array("topicCodeOrder".utf8)
    /// The key a compaction sets in a generation's `meta` when it retires it (the value names
    /// the generation that replaced it): bookkeeping, which no fold writes.
    public static let retiredToKey = Array("retiredTo".utf8)

    /// Opens the tables; with `create`, creates missing ones, stamps the
    /// schema version, and brings an older store to version 3.
    public static func open(in environment: Environment, create: Bool) throws -> ProjectionTables {
        let d = try environment.openDatabases(names, create: create)
        let writerState = environment.isReadOnly ? nil : try environment.openDatabases(["writer_state"], create: true)[0]
        let tables = ProjectionTables(meta: d[0], projects: d[1], devices: d[2],
                                      topics: d[3], topicCodes: d[4], postings: d[5], deviceTopics: d[6],
                                      writerState: writerState)
        if create {
            try environment.write { txn in
                let stored = try tables.storedSchemaVersion(txn)
                if let stored, stored < schemaVersion {
                    // Version 1 kept token → ordinal in a `tokens` table, and versions 1
                    // and 2 device_id → ordinal in `device_ids`. Both indexes are now
                    // derived from `devices` in memory, so the tables only take space.
                    for name in ["tokens", "device_ids"] {
                        if let old = try txn.openDatabaseIfPresent(name) { try txn.drop(old) }
                    }
                }
                if let stored, stored < 6, try tables.topicLayout(txn) == .compact {
                    try tables.leaveOutNewestSlices(txn)
                }
                if stored.map({ $0 < 11 }) ?? true { try tables.reorderTopicCodes(.byLength, txn) }
                if stored == nil || stored! < schemaVersion {
                    var w = ByteWriter(); w.u32(schemaVersion)
                    try txn.put(tables.meta, versionKey, w.bytes)
                }
                // A new store lays topics out compactly; an older one keeps the layout it has.
                if stored == nil { try tables.setTopicLayout(.compact, txn) }
            }
        }
        return tables
    }

    /// Brings a compact store's shared topic records to schema 6: the
    /// records listing their project's newest slice are written without it
    /// (in a 10M-device store, one walk of 100,000 shared topics' records).
    func leaveOutNewestSlices(_ txn: borrowing Transaction) throws {
        var newest: [(pid: UInt32, slice: UInt16)] = []
        try txn.withCursor(projects) { cursor in
            var entry = try cursor.first()
            while let (key, value) = entry {
                let name = String(decoding: key, as: UTF8.self)
                let p = try ProjectRecord(decoding: value, at: "projects/\(name)")
                if let h = PostingChunk.newest(nextOrdinal: p.nextOrdinal) { newest.append((p.id, h)) }
                entry = try cursor.next()
            }
        }
        for (pid, h) in newest {
            var rewritten: [(tid: UInt32, record: [UInt8])] = []
            try txn.withCursor(topics) { cursor in
                var entry = try Keys.withPair(pid, Self.firstTopicID) { try cursor.seek(atLeast: $0) }
                while let (key, value) = entry, key.count == 8, key.loadBigEndian(at: 0, as: UInt32.self) == pid {
                    let tid = key.loadBigEndian(at: 4, as: UInt32.self)
                    guard PostingChunk.leavesNewestOut(tid) else { break }  // the single topics follow
                    // A damaged record is left as it is, for reads and the audit to report
                    // where it is: it must not keep the store from opening.
                    if TopicRecord.storedSlices(of: value)?.last == h,
                       var record = try? TopicRecord(decoding: value, at: "topics/\(pid)/\(tid)") {
                        record.slices.removeLast()
                        rewritten.append((tid, record.encoded(storingCount: false)))
                    }
                    entry = try cursor.next()
                }
            }
            for (tid, record) in rewritten { try txn.put(topics, Keys.pair(pid, tid), record) }
        }
    }

    /// How `topic_codes` orders its keys (see `TopicCodeOrder`).
    public func topicCodeOrder(_ txn: borrowing Transaction) throws -> TopicCodeOrder {
        try choice(Self.topicCodeOrderKey, absent: .bytewise, "order", txn)
    }

    /// Rewrites every `topic_codes` key in the form `order` says, and records
    /// it in `meta`. Entries are read in the order they have and put back in
    /// the new one, ascending, so LMDB fills the pages (it splits a page at
    /// the new key when that key goes last). A key whose code has no form of
    /// the other kind (empty, or longer than the length byte allows: only a
    /// damaged one) is put back as it was, for the audit to report.
    public func reorderTopicCodes(_ order: TopicCodeOrder, _ txn: borrowing Transaction) throws {
        if try topicCodeOrder(txn) == order { return }
        var keys: [UInt8] = []
        var entries: [(pid: UInt32, start: Int, count: Int, value: UInt32)] = []
        var kept: [([UInt8], [UInt8])] = []
        var changes = false
        try txn.withCursor(topicCodes) { cursor in
            var entry = try cursor.first()
            while let (key, value) = entry {
                if let (code, form) = Keys.codeBytes(ofKey: key), value.count == 4,
                   order == .bytewise || (1...Keys.maxCodeKeyLength).contains(code.count) {
                    if form != order { changes = true }
                    entries.append((key.loadBigEndian(at: 0, as: UInt32.self), keys.count, code.count,
                                    value.loadBigEndian(at: 0, as: UInt32.self)))
                    keys.append(contentsOf: code)
                } else {
                    kept.append((Array(key), Array(value)))
                }
                entry = try cursor.next()
            }
        }
        if changes {
            // Within a project and a length, byte order is the order both forms
            // share: sorting by project, then (length first) by length, keeps it.
            let sorted = order == .bytewise
                ? entries.indices.sorted { a, b in
                    let x = entries[a], y = entries[b]
                    if x.pid != y.pid { return x.pid < y.pid }
                    return keys[x.start..<x.start + x.count].lexicographicallyPrecedes(keys[y.start..<y.start + y.count])
                }
                : Self.stableOrder(of: entries.indices) { (entries[$0].pid, entries[$0].count) }
            try txn.clear(topicCodes)
            var key = [UInt8](repeating: 0, count: 5 + Keys.maxCodeKeyLength + 1024)
            try txn.withCursor(topicCodes) { cursor in
                for i in sorted {
                    let e = entries[i]
                    let head = order == .byLength ? 5 : 4
                    if key.count < head + e.count { key = [UInt8](repeating: 0, count: head + e.count) }
                    try key.withUnsafeMutableBytes { k in
                        k.storeBytes(of: e.pid.bigEndian, as: UInt32.self)
                        if order == .byLength { k[4] = Keys.codeLengthByte(e.count) }
                        keys.withUnsafeBytes { b in
                            if e.count > 0 { (k.baseAddress! + head).copyMemory(from: b.baseAddress! + e.start, byteCount: e.count) }
                        }
                        try withUnsafeBytes(of: e.value.bigEndian) { v in
                            try cursor.put(UnsafeRawBufferPointer(rebasing: k[0..<head + e.count]), v)
                        }
                    }
                }
            }
            for (k, v) in kept { try txn.put(topicCodes, k, v) }
        }
        try setTopicCodeOrder(order, txn)
    }

    /// The topic code a `topic_codes` key names, in either form (for reports).
    public static func topicCode(ofKey key: [UInt8]) -> String? {
        key.withUnsafeBytes { k in Keys.codeBytes(ofKey: k).map { String(decoding: $0.code, as: UTF8.self) } }
    }

    /// `indices` ordered by `group` (project, then length), each group in the order it had.
    static func stableOrder(of indices: Range<Int>, by group: (Int) -> (UInt32, Int)) -> [Int] {
        var buckets: [UInt64: [Int]] = [:]
        for i in indices {
            let (pid, length) = group(i)
            buckets[UInt64(pid) << 32 | UInt64(length), default: []].append(i)
        }
        return buckets.keys.sorted().flatMap { buckets[$0]! }
    }

    /// Records how `topic_codes` orders its keys: `.bytewise` as no entry, as in
    /// the stores that predate the choice. Only `reorderTopicCodes` sets it,
    /// with the keys in that form.
    func setTopicCodeOrder(_ order: TopicCodeOrder, _ txn: borrowing Transaction) throws {
        try setChoice(Self.topicCodeOrderKey, order, absent: .bytewise, txn)
    }

    /// A choice kept in `meta` under `key` as a u32 (`absent` when there is no entry).
    private func choice<Choice: RawRepresentable>(_ key: [UInt8], absent: Choice, _ what: String,
                                                  _ txn: borrowing Transaction) throws -> Choice where Choice.RawValue == UInt32 {
        guard let v = try txn.get(meta, key) else { return absent }
        guard v.count == 4, let value = Choice(rawValue: v.loadBigEndian(at: 0, as: UInt32.self)) else {
            throw ProjectionCorruption(place: "meta/\(String(decoding: key, as: UTF8.self))", reason: "\(v.count) bytes, not a known \(what)")
        }
        return value
    }

    /// Stores a choice `choice` reads; `absent` as no entry.
    private func setChoice<Choice: RawRepresentable & Equatable>(_ key: [UInt8], _ value: Choice, absent: Choice,
                                                                 _ txn: borrowing Transaction) throws where Choice.RawValue == UInt32 {
        guard value != absent else {
            try txn.delete(meta, key)
            return
        }
        var w = ByteWriter(capacity: 4); w.u32(value.rawValue)
        try txn.put(meta, key, w.bytes)
    }

    /// The schema version stored in `meta`, or nil when this is not a topicstore database.
    public func storedSchemaVersion(_ txn: borrowing Transaction) throws -> UInt32? {
        guard let v = try txn.get(meta, Self.versionKey), v.count == 4 else { return nil }
        return v.loadBigEndian(at: 0, as: UInt32.self)
    }

    /// How the fold lays topics out in this store (see `TopicLayout`).
    public func topicLayout(_ txn: borrowing Transaction) throws -> TopicLayout {
        try choice(Self.topicLayoutKey, absent: .legacy, "layout", txn)
    }

    /// Sets how the fold lays topics out: when a store is created, or a rebuild
    /// as its source did. `.legacy` is stored as no entry, as in the stores
    /// that predate the choice.
    public func setTopicLayout(_ layout: TopicLayout, _ txn: borrowing Transaction) throws {
        try setChoice(Self.topicLayoutKey, layout, absent: .legacy, txn)
    }

    /// The sequence of the last event folded into these projections (0 when none).
    public func appliedSequence(_ txn: borrowing Transaction) throws -> UInt64 {
        guard let v = try txn.get(meta, Self.appliedSeqKey) else { return 0 }
        guard v.count == 8 else { throw ProjectionCorruption(place: "meta/appliedSeq", reason: "\(v.count) bytes") }
        return v.loadBigEndian(at: 0, as: UInt64.self)
    }

    static let compactedHeadKey = Array("compactedHead".utf8)

    /// The chain head at the horizon of the last log compaction: the sequence
    /// and link of the last record removed (the log continues from it).
    public func compactedChainHead(_ txn: borrowing Transaction) throws -> ChainHead? {
        guard let v = try txn.get(meta, Self.compactedHeadKey) else { return nil }
        guard v.count == 8 + ChainHash.byteCount,
              let hash = ChainHash(bytes: UnsafeRawBufferPointer(rebasing: v[8...])) else {
            throw ProjectionCorruption(place: "meta/compactedHead", reason: "\(v.count) bytes")
        }
        return ChainHead(sequence: v.loadBigEndian(at: 0, as: UInt64.self), hash: hash)
    }

    /// Records the chain head at a compaction horizon (see `compactedChainHead`).
    public func setCompactedChainHead(_ head: ChainHead, _ txn: borrowing Transaction) throws {
        var w = ByteWriter(capacity: 40)
        w.u64(head.sequence)
        w.raw(head.hash.bytes)
        try txn.put(meta, Self.compactedHeadKey, w.bytes)
    }

    /// The stamp of the last writer that changed the projections (nil when
    /// none has): a writer holding state derived from them (its device indexes)
    /// compares it with the stamp it wrote itself to know that no one else wrote.
    public func writerStamp(_ txn: borrowing Transaction) throws -> UInt64? {
        guard let writerState, let v = try txn.get(writerState, Self.writerStampKey) else { return nil }
        guard v.count == 8 else { throw ProjectionCorruption(place: "writer_state/stamp", reason: "\(v.count) bytes") }
        return v.loadBigEndian(at: 0, as: UInt64.self)
    }

    func setWriterStamp(_ stamp: UInt64, _ txn: borrowing Transaction) throws {
        guard let writerState else { preconditionFailure("projections written in a read-only environment") }
        var w = ByteWriter(capacity: 8); w.u64(stamp)
        try txn.put(writerState, Self.writerStampKey, w.bytes)
    }

    /// Checks a project record read under `name` against what the tables hold, and
    /// throws `ProjectionCorruption` naming it when it cannot be right: an id this
    /// store never gave out (ids come from `meta/nextProject`), a next device
    /// ordinal past what the events folded could have given (each new device takes
    /// one event) or not above the project's last device's, a next topic id not
    /// above the project's last topic's. The project's keys in the other tables are
    /// found by its id, so a damaged id answers every question about it with
    /// nothing, and a damaged ordinal made the writer give a new device an ordinal in
    /// the billions (and grow its caches to it). A few point lookups: the writer
    /// checks a record when it loads it; readers, which use only the id, check the id
    /// (`checkProjectID`), one lookup in a one-page table.
    public func checkProject(_ p: ProjectRecord, named name: String, _ txn: borrowing Transaction) throws {
        func corrupt(_ why: String) -> ProjectionCorruption { Self.corrupt(p, name, why) }
        try checkProjectID(p, named: name, txn)
        let applied = try appliedSequence(txn)
        guard UInt64(p.nextOrdinal) <= applied else {
            throw corrupt("its next device ordinal is more than the \(applied) events folded (meta/appliedSeq) could have given out")
        }
        guard p.nextTopicID >= Self.firstTopicID, p.nextTopicID <= Self.singleTopicBit else {
            throw corrupt("its next topic id is outside \(Self.firstTopicID)…\(Self.singleTopicBit)")
        }
        let prefix = Keys.project(p.id)
        if let key = try lastKey(devices, before: Keys.project(p.id &+ 1), txn), key.count >= 8, key.starts(with: prefix) {
            let ordinal = key.withUnsafeBytes { $0.loadBigEndian(at: 4, as: UInt32.self) }
            guard ordinal < p.nextOrdinal else { throw corrupt("device ordinal \(ordinal) exists (devices/\(p.id)/\(ordinal)), at or past the next one") }
        }
        // Shared topics are numbered below 2^31, single ones (compact layout) at 2^31 + their number.
        for bound in [Keys.pair(p.id, Self.singleTopicBit), Keys.project(p.id &+ 1)] {
            if let key = try lastKey(topics, before: bound, txn), key.count >= 8, key.starts(with: prefix) {
                let topic = key.withUnsafeBytes { $0.loadBigEndian(at: 4, as: UInt32.self) }
                guard topic & ~Self.singleTopicBit < p.nextTopicID else {
                    throw corrupt("topic id \(topic) exists (topics/\(p.id)/\(topic)), at or past the next one")
                }
            }
        }
    }

    /// Throws `ProjectionCorruption` naming the record unless its id is one this store
    /// gave out (`meta/nextProject`): every key of the project is found by it.
    public func checkProjectID(_ p: ProjectRecord, named name: String, _ txn: borrowing Transaction) throws {
        var nextProject: UInt32?
        if let v = try txn.get(meta, Self.nextProjectKey), v.count == 4 { nextProject = v.loadBigEndian(at: 0, as: UInt32.self) }
        guard p.id >= 1, p.id < nextProject ?? 1 else {
            throw Self.corrupt(p, name, "its id is not one this store gave out" + (nextProject.map { " (it gave out 1…\($0 &- 1))" } ?? " (it gave out none)"))
        }
    }

    private static func corrupt(_ p: ProjectRecord, _ name: String, _ why: String) -> ProjectionCorruption {
        ProjectionCorruption(place: "projects/\(name)",
                             reason: why + " (the record holds id \(p.id), next device ordinal \(p.nextOrdinal), next topic id \(p.nextTopicID))")
    }

    /// The last key of `db` below `bound`, copied.
    private func lastKey(_ db: Database, before bound: [UInt8], _ txn: borrowing Transaction) throws -> [UInt8]? {
        try txn.withCursor(db) { cursor in
            let entry = try cursor.seek(atLeast: bound) != nil ? try cursor.previous() : try cursor.last()
            return entry.map { Array($0.key) }
        }
    }

    /// Removes every projection entry (for a rebuild); the schema version stays.
    public func clear(_ txn: borrowing Transaction) throws {
        for db in all where db != meta { try txn.clear(db) }
        try txn.delete(meta, Self.appliedSeqKey)
        try txn.delete(meta, Self.nextProjectKey)
        if let writerState { try txn.delete(writerState, Self.writerStampKey) }
    }
}
