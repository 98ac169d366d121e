import LMDB
import SubscriptionLog

/// The projection databases, all keyed with the project id first.
///
/// | table          | key                         | value                        |
/// |----------------|-----------------------------|------------------------------|
/// | meta           | name                        | schema version, applied seq  |
/// | projects       | project name                | `ProjectRecord`              |
/// | devices        | pid ‖ ordinal               | `DeviceRecord`               |
/// | device_ids     | pid ‖ device_id             | ordinal                      |
/// | tokens         | pid ‖ token                 | ordinal                      |
/// | topics         | pid ‖ topic id              | `TopicRecord`                |
/// | topic_codes    | pid ‖ code                  | topic id                     |
/// | postings       | pid ‖ high16 ‖ topic id     | one roaring container        |
/// | device_topics  | pid ‖ ordinal               | ascending u32 topic ids      |
public struct ProjectionTables: Sendable {
    public static let schemaVersion: UInt32 = 1
    public static let names = ["meta", "projects", "devices", "device_ids", "tokens",
                               "topics", "topic_codes", "postings", "device_topics"]

    public let meta: Database
    public let projects: Database
    public let devices: Database
    public let deviceIDs: Database
    public let tokens: Database
    public let topics: Database
    public let topicCodes: Database
    public let postings: Database
    public let deviceTopics: Database

    public var all: [Database] { [meta, projects, devices, deviceIDs, tokens, topics, topicCodes, postings, deviceTopics] }

    /// Built-in bitmaps kept per project beside the topics (ids below `firstTopicID`).
    enum BuiltIn {
        static let liveIOS: UInt32 = 0
        static let liveAndroid: UInt32 = 1
        static let knownDevices: UInt32 = 2
        static func live(_ platform: Platform) -> UInt32 { platform == .ios ? liveIOS : liveAndroid }
    }
    static let firstTopicID: UInt32 = 16

    static let appliedSeqKey = Array("appliedSeq".utf8)
    static let versionKey = Array("schemaVersion".utf8)
    static let nextProjectKey = Array("nextProject".utf8)

    /// Opens the tables; with `create`, creates missing ones and stamps the schema version.
    public static func open(in environment: Environment, create: Bool) throws -> ProjectionTables {
        let d = try environment.openDatabases(names, create: create)
        let tables = ProjectionTables(meta: d[0], projects: d[1], devices: d[2], deviceIDs: d[3], tokens: d[4],
                                      topics: d[5], topicCodes: d[6], postings: d[7], deviceTopics: d[8])
        if create {
            try environment.write { txn in
                if try txn.get(tables.meta, versionKey) == nil {
                    var w = ByteWriter(); w.u32(schemaVersion)
                    try txn.put(tables.meta, versionKey, w.bytes)
                }
            }
        }
        return tables
    }

    /// The schema version stored in `meta`, or nil when this is not a topicstore database.
    public func storedSchemaVersion(_ txn: borrowing Transaction) throws -> UInt32? {
        guard let v = try txn.get(meta, Self.versionKey), v.count == 4 else { return nil }
        return v.loadBigEndian(at: 0, as: UInt32.self)
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

    /// Removes every projection entry (for a rebuild); the schema version stays.
    public func clear(_ txn: borrowing Transaction) throws {
        for db in all where db != meta { try txn.clear(db) }
        try txn.delete(meta, Self.appliedSeqKey)
        try txn.delete(meta, Self.nextProjectKey)
    }
}
