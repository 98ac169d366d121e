import LMDB
import Roaring
import SubscriptionLog

/// The projections' side of one write transaction. It caches what a batch of
/// events touches over and over (project counters, topic records, posting
/// chunks) and writes it back once in `flush`, which must run before commit.
/// Device records and indexes are written straight through.
///
/// Used by the live write path and by replay alike, through `Fold.apply`.
public final class ProjectionWriter {
    public let tables: ProjectionTables

    struct ChunkKey: Hashable { var pid: UInt32; var topic: UInt32; var high: UInt16 }
    struct TopicKey: Hashable { var pid: UInt32; var topic: UInt32 }
    struct DeviceKey: Hashable { var pid: UInt32; var ordinal: UInt32 }
    struct CodeKey: Hashable { var pid: UInt32; var code: String }

    private var projects: [String: ProjectRecord] = [:]
    private var dirtyProjects: Set<String> = []
    private var topics: [TopicKey: TopicRecord] = [:]
    private var dirtyTopics: Set<TopicKey> = []
    private var chunks: [ChunkKey: Bitmap] = [:]
    private var dirtyChunks: Set<ChunkKey> = []
    private var memberships: [DeviceKey: [UInt32]] = [:]
    private var dirtyMemberships: Set<DeviceKey> = []
    private var topicCodes: [CodeKey: UInt32] = [:]
    private var nextProjectID: UInt32?
    public private(set) var appliedSequence: UInt64

    public init(tables: ProjectionTables) {
        self.tables = tables
        self.appliedSequence = 0
    }

    /// Starts a batch on top of what `txn` holds, forgetting anything cached
    /// before: another transaction (or process) may have changed the tables since.
    public func begin(_ txn: borrowing Transaction) throws {
        projects = [:]; dirtyProjects = []; topics = [:]; dirtyTopics = []
        chunks = [:]; dirtyChunks = []; nextProjectID = nil
        memberships = [:]; dirtyMemberships = []; topicCodes = [:]
        appliedSequence = try tables.appliedSequence(txn)
    }

    // MARK: Projects

    func project(named name: String, create: Bool, _ txn: borrowing Transaction) throws -> ProjectRecord? {
        if let p = projects[name] { return p }
        if let v = try txn.get(tables.projects, Array(name.utf8)) {
            let p = try ProjectRecord(decoding: v, at: "projects/\(name)")
            projects[name] = p
            return p
        }
        guard create else { return nil }
        let id = try allocateProjectID(txn)
        let p = ProjectRecord(id: id, nextOrdinal: 0, nextTopicID: ProjectionTables.firstTopicID)
        projects[name] = p
        dirtyProjects.insert(name)
        return p
    }

    func update(project name: String, _ record: ProjectRecord) {
        projects[name] = record
        dirtyProjects.insert(name)
    }

    private func allocateProjectID(_ txn: borrowing Transaction) throws -> UInt32 {
        var next: UInt32 = 1
        if let cached = nextProjectID { next = cached }
        else if let v = try txn.get(tables.meta, ProjectionTables.nextProjectKey), v.count == 4 { next = v.loadBigEndian(at: 0) }
        nextProjectID = next + 1
        return next
    }

    // MARK: Topics

    func topic(_ pid: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws -> TopicRecord? {
        let key = TopicKey(pid: pid, topic: tid)
        if let t = topics[key] { return t }
        guard let v = try txn.get(tables.topics, Keys.pair(pid, tid)) else { return nil }
        let t = try TopicRecord(decoding: v, at: "topics/\(pid)/\(tid)")
        topics[key] = t
        return t
    }

    func update(topic tid: UInt32, of pid: UInt32, _ record: TopicRecord) {
        let key = TopicKey(pid: pid, topic: tid)
        topics[key] = record
        dirtyTopics.insert(key)
    }

    func topicID(_ pid: UInt32, code: String, _ txn: borrowing Transaction) throws -> UInt32? {
        let key = CodeKey(pid: pid, code: code)
        if let id = topicCodes[key] { return id }
        guard let v = try txn.get(tables.topicCodes, Keys.named(pid, code)) else { return nil }
        guard v.count == 4 else { throw ProjectionCorruption(place: "topic_codes/\(pid)/\(code)", reason: "\(v.count) bytes") }
        let id: UInt32 = v.loadBigEndian(at: 0)
        topicCodes[key] = id
        return id
    }

    func insertTopicCode(_ pid: UInt32, code: String, id: UInt32, _ txn: borrowing Transaction) throws {
        var w = ByteWriter(capacity: 4); w.u32(id)
        try txn.put(tables.topicCodes, Keys.named(pid, code), w.bytes)
        topicCodes[CodeKey(pid: pid, code: code)] = id
    }

    // MARK: Devices

    func ordinal(_ pid: UInt32, deviceID: String, _ txn: borrowing Transaction) throws -> UInt32? {
        try lookupOrdinal(tables.deviceIDs, Keys.named(pid, deviceID), place: "device_ids/\(pid)/\(deviceID)", txn)
    }

    func ordinal(_ pid: UInt32, token: String, _ txn: borrowing Transaction) throws -> UInt32? {
        try lookupOrdinal(tables.tokens, Keys.named(pid, token), place: "tokens/\(pid)", txn)
    }

    private func lookupOrdinal(_ db: Database, _ key: [UInt8], place: @autoclosure () -> String,
                               _ txn: borrowing Transaction) throws -> UInt32? {
        guard let v = try txn.get(db, key) else { return nil }
        guard v.count == 4 else { throw ProjectionCorruption(place: place(), reason: "\(v.count) bytes") }
        return v.loadBigEndian(at: 0)
    }

    func setIndex(_ db: Database, _ pid: UInt32, _ name: String, ordinal: UInt32, _ txn: borrowing Transaction) throws {
        var w = ByteWriter(capacity: 4); w.u32(ordinal)
        try txn.put(db, Keys.named(pid, name), w.bytes)
    }

    func device(_ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws -> DeviceRecord {
        guard let v = try txn.get(tables.devices, Keys.pair(pid, ordinal)) else {
            throw ProjectionCorruption(place: "devices/\(pid)/\(ordinal)", reason: "indexed device is missing")
        }
        return try DeviceRecord(decoding: v, at: "devices/\(pid)/\(ordinal)")
    }

    func put(device: DeviceRecord, _ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws {
        try txn.put(tables.devices, Keys.pair(pid, ordinal), device.encoded())
    }

    // MARK: Memberships (device → topics and topic → devices, kept together)

    /// Loads a device's topic list into the batch cache.
    private func loadMemberships(_ key: DeviceKey, _ txn: borrowing Transaction) throws {
        if memberships[key] == nil {
            memberships[key] = try ProjectionReader.memberships(key.pid, key.ordinal, tables: tables, txn)
        }
    }

    func isMember(_ pid: UInt32, _ ordinal: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws -> Bool {
        let key = DeviceKey(pid: pid, ordinal: ordinal)
        try loadMemberships(key, txn)
        return DeviceTopics.search(memberships[key]!, tid).found
    }

    func addMembership(_ pid: UInt32, _ ordinal: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws {
        let key = DeviceKey(pid: pid, ordinal: ordinal)
        try loadMemberships(key, txn)
        let (found, index) = DeviceTopics.search(memberships[key]!, tid)
        if !found {
            memberships[key]!.insert(tid, at: index)
            dirtyMemberships.insert(key)
        }
        try setBit(pid, tid, ordinal, true, txn)
    }

    func removeMembership(_ pid: UInt32, _ ordinal: UInt32, _ tid: UInt32, _ txn: borrowing Transaction) throws {
        let key = DeviceKey(pid: pid, ordinal: ordinal)
        try loadMemberships(key, txn)
        let (found, index) = DeviceTopics.search(memberships[key]!, tid)
        if found {
            memberships[key]!.remove(at: index)
            dirtyMemberships.insert(key)
        }
        try setBit(pid, tid, ordinal, false, txn)
    }

    /// The topic ids a device belongs to, ascending.
    func memberships(_ pid: UInt32, _ ordinal: UInt32, _ txn: borrowing Transaction) throws -> [UInt32] {
        let key = DeviceKey(pid: pid, ordinal: ordinal)
        try loadMemberships(key, txn)
        return memberships[key]!
    }

    /// Sets or clears one device's bit in a topic's (or built-in set's) bitmap.
    @discardableResult
    func setBit(_ pid: UInt32, _ tid: UInt32, _ ordinal: UInt32, _ on: Bool, _ txn: borrowing Transaction) throws -> Bool {
        let key = ChunkKey(pid: pid, topic: tid, high: PostingChunk.high(ordinal))
        if chunks[key] == nil {
            if let v = try txn.get(tables.postings, Keys.chunk(pid, tid, key.high)) {
                chunks[key] = try PostingChunk.decode(v, pid: pid, topic: tid, high: key.high)
            } else {
                chunks[key] = Bitmap()
            }
        }
        // Mutated in place through the dictionary, so the bitmap stays uniquely referenced.
        let changed = on ? chunks[key]!.insert(ordinal) : chunks[key]!.remove(ordinal)
        if changed { dirtyChunks.insert(key) }
        return changed
    }

    // MARK: Sequence

    func advance(to sequence: UInt64) throws {
        guard sequence == appliedSequence + 1 else {
            throw FoldError.outOfOrder(expected: appliedSequence + 1, got: sequence)
        }
        appliedSequence = sequence
    }

    /// Writes every cached change into the transaction.
    public func flush(_ txn: borrowing Transaction) throws {
        for name in dirtyProjects {
            try txn.put(tables.projects, Array(name.utf8), projects[name]!.encoded())
        }
        if let next = nextProjectID {
            var w = ByteWriter(capacity: 4); w.u32(next)
            try txn.put(tables.meta, ProjectionTables.nextProjectKey, w.bytes)
        }
        for key in dirtyTopics {
            try txn.put(tables.topics, Keys.pair(key.pid, key.topic), topics[key]!.encoded())
        }
        for key in dirtyChunks {
            let dbKey = Keys.chunk(key.pid, key.topic, key.high)
            guard var bitmap = chunks[key] else { continue }
            if bitmap.isEmpty {
                try txn.delete(tables.postings, dbKey)
            } else {
                chunks[key] = nil
                bitmap.optimize()
                let size = bitmap.serializedSize
                try txn.put(tables.postings, dbKey, reserving: size) { _ = bitmap.serialize(into: $0) }
                chunks[key] = bitmap
            }
        }
        for key in dirtyMemberships {
            let list = memberships[key]!
            let dbKey = Keys.pair(key.pid, key.ordinal)
            if list.isEmpty {
                try txn.delete(tables.deviceTopics, dbKey)
            } else {
                try txn.put(tables.deviceTopics, dbKey, reserving: list.count * 4) { DeviceTopics.encode(list, into: $0) }
            }
        }
        dirtyMemberships = []
        if memberships.count > 200_000 { memberships = [:] }
        var w = ByteWriter(capacity: 8); w.u64(appliedSequence)
        try txn.put(tables.meta, ProjectionTables.appliedSeqKey, w.bytes)
        dirtyProjects = []; dirtyTopics = []; dirtyChunks = []
        // Whatever was flushed is in the transaction now; bound the cache for long replays.
        if chunks.count > 50_000 { chunks = [:] }
    }
}

public enum FoldError: Error, CustomStringConvertible {
    case outOfOrder(expected: UInt64, got: UInt64)
    public var description: String {
        switch self {
        case .outOfOrder(let e, let g): return "event sequence \(g) applied out of order (expected \(e))"
        }
    }
}
