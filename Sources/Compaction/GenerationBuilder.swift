import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// A new file generation being prepared: a packed copy of the live
/// environment without the log records up to the horizon, then caught
/// up with what the live store appended since, record by record with the one fold.
final class GenerationBuilder {
    let directory: String
    private(set) var environment: Environment?
    let log: EventLog
    let tables: ProjectionTables
    let writer: ProjectionWriter
    private(set) var appliedSequence: UInt64 = 0

    /// Opens the database in `directory` (written by `TopicStore.packedCopy`).
    init(directory: String, mapSize: Int) throws {
        var options = Environment.Options()
        options.mapSize = mapSize
        options.maxDatabases = 32
        options.noSync = true  // synced once, inside the switch, before the store moves here
        let env = try Environment(path: directory, options: options)
        self.directory = directory
        self.environment = env
        log = try EventLog.open(in: env, create: false)
        tables = try ProjectionTables.open(in: env, create: false)
        writer = ProjectionWriter(tables: tables)
        let tables = self.tables
        appliedSequence = try env.read { txn in try tables.appliedSequence(txn) }
    }

    /// Reads what the writer keeps in memory (its device_id and token indexes) from the copy.
    func prepareWriter() throws {
        let writer = self.writer
        try env.read { txn in try writer.prepare(txn) }
    }

    private var env: Environment {
        get throws {
            guard let environment else { throw CompactionError.internalState("the new generation is closed") }
            return environment
        }
    }

    /// Records the chain head at the horizon in `meta` (the store goes on from it if the log is ever empty).
    func setCompactedHead(_ head: ChainHead) throws {
        let tables = self.tables
        try env.write { txn in try tables.setCompactedChainHead(head, txn) }
    }

    /// Appends the encoded records (the live log's bytes, which carry its chain)
    /// after `appliedSequence` and folds them, in one write transaction.
    func apply(_ raw: [(UInt64, [UInt8])]) throws {
        guard !raw.isEmpty else { return }
        let env = try self.env
        let log = self.log
        let writer = self.writer
        while true {
            do {
                try env.write { txn in
                    try writer.begin(txn)
                    var expected = try tables.appliedSequence(txn) + 1
                    for (seq, bytes) in raw {
                        guard seq == expected else {
                            throw CompactionError.internalState("catch-up expected seq \(expected), got \(seq)")
                        }
                        let record = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: seq) }
                        try log.append(encoded: bytes, sequence: seq, txn)
                        try Fold.apply(record, to: writer, txn)
                        expected += 1
                    }
                    try writer.flush(txn)
                }
                appliedSequence = raw.last!.0
                return
            } catch LMDBError.mapFull {
                try env.setMapSize(env.info().mapSize * 2)
            }
        }
    }

    /// Reads the records after `appliedSequence` from a live transaction (at most `limit`).
    func pending(from liveLog: EventLog, limit: Int, _ txn: borrowing Transaction) throws -> [(UInt64, [UInt8])] {
        var out: [(UInt64, [UInt8])] = []
        try liveLog.forEachEncoded(from: appliedSequence + 1, txn) { seq, bytes in
            out.append((seq, Array(bytes)))
            return out.count < limit
        }
        return out
    }

    func sync() throws { try env.sync(force: true) }

    /// Closes the environment (it must be closed before the store reopens on it
    /// in this process: LMDB forbids two opens of one file in a process).
    func close() { environment = nil }
}

/// Why a compaction stopped.
public enum CompactionError: Error, Sendable, CustomStringConvertible {
    case busy(String)
    case internalState(String)
    case refused(String)
    /// The free space a run needs is missing (`SpacePlan`); nothing was written.
    case noSpace(String)
    /// A phase failed; what this run wrote was removed (the message says what the store holds).
    case failed(String)

    public var description: String {
        switch self {
        case .busy(let why): return "another compaction is running on \(why)"
        case .internalState(let why): return "compaction: \(why)"
        case .refused(let why), .noSpace(let why), .failed(let why): return why
        }
    }
}
