import LMDB
import Projections
import SubscriptionLog

/// The store at a glance, from one snapshot.
public struct StoreStatistics: Sendable {
    public struct ProjectSummary: Sendable {
        public var name: String
        public var devices: Int
        public var topics: Int
        public var liveTokens: Int

        public init(name: String, devices: Int, topics: Int, liveTokens: Int) {
            self.name = name
            self.devices = devices
            self.topics = topics
            self.liveTokens = liveTokens
        }
    }
    public struct TableSummary: Sendable {
        public var name: String
        public var entries: Int
        public var bytes: Int
        /// Why the table's record in the table of tables cannot be right (its counts are
        /// then 0), or nil.
        public var damage: String? = nil
    }
    public var schemaVersion: UInt32
    public var topicLayout: ProjectionTables.TopicLayout
    public var firstSequence: UInt64?
    public var lastSequence: UInt64
    public var lastTimestamp: Int64?
    public var appliedSequence: UInt64
    /// The horizon of the last log compaction (the log goes on after it), when there was one.
    /// A store replayed exactly at a horizon has an empty log and its projections at this sequence.
    public var compactedThrough: UInt64?
    public var projects: [ProjectSummary]
    public var tables: [TableSummary]
    public var usedBytes: Int
    public var mapSize: Int
}

extension TopicStore {
    public func statistics() throws -> StoreStatistics {
        let g = try openGeneration()
        let reader = ProjectionReader(tables: g.tables), log = g.log, tables = g.tables
        let info = g.environment.info()
        return try read { txn in
            let bounds = try log.bounds(txn)
            var projects: [StoreStatistics.ProjectSummary] = []
            for (name, record) in try reader.projects(txn) {
                let known = try reader.knownDevices(record.id, txn).count
                let live = try reader.liveDevices(record.id, .ios, txn).count + reader.liveDevices(record.id, .android, txn).count
                projects.append(.init(name: name, devices: known, topics: try reader.topicCount(record.id, txn), liveTokens: live))
            }
            var summaries: [StoreStatistics.TableSummary] = []
            for db in [log.database] + tables.all {
                do {
                    let s = try txn.statistics(db)
                    summaries.append(.init(name: db.name, entries: s.entries, bytes: s.bytes))
                } catch let e as DamagedTableRecord {
                    summaries.append(.init(name: db.name, entries: 0, bytes: 0, damage: e.reason))
                }
            }
            return StoreStatistics(schemaVersion: try tables.storedSchemaVersion(txn) ?? 0, topicLayout: try tables.topicLayout(txn),
                                   firstSequence: bounds?.first, lastSequence: bounds?.last ?? 0,
                                   lastTimestamp: bounds?.lastTimestamp, appliedSequence: try tables.appliedSequence(txn),
                                   compactedThrough: try tables.compactedChainHead(txn)?.sequence,
                                   projects: projects, tables: summaries, usedBytes: info.usedBytes, mapSize: info.mapSize)
        }
    }

    /// The device records and topic codes the projections hold, and the
    /// log's first and last sequences: from `mdb_stat` and the log's ends,
    /// no walk. A rebuild sizes its tables from them (`Replay.fold`).
    public func tableSizes() throws -> TableSizes {
        let g = try openGeneration()
        let log = g.log, tables = g.tables
        return try read { txn in
            let bounds = try log.bounds(txn)
            return TableSizes(devices: try txn.statistics(tables.devices).entries,
                              topics: try txn.statistics(tables.topicCodes).entries,
                              firstSequence: bounds?.first ?? 0, lastSequence: bounds?.last ?? 0)
        }
    }
}

/// What `TopicStore.tableSizes()` reads.
public struct TableSizes: Sendable, Equatable {
    public var devices: Int
    public var topics: Int
    public var firstSequence: UInt64
    public var lastSequence: UInt64
}
