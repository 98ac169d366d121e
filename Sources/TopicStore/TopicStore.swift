import Foundation
import LMDB
import Projections
import SubscriptionLog

/// What a caller gets back once its command is durable.
public struct Receipt: Sendable, Hashable {
    public var sequence: UInt64
    public var timestamp: Int64
}

/// The store: an LMDB environment holding the log of record and its
/// projections, one writer thread with group commit, and snapshot reads.
///
/// Every command is appended to the log and folded into the projections in the
/// same write transaction; a caller is acknowledged only after that transaction
/// has committed (fsynced unless `Durability.noSync` was chosen).
public final class TopicStore: Sendable {
    public enum Durability: Sendable {
        /// Every commit is synced to disk before callers are acknowledged (the default).
        case durable
        /// Commits are not fsynced (`MDB_NOSYNC`): a machine crash may lose the
        /// last acknowledged commands. For bulk imports that can be redone.
        case noSync
    }

    public struct Options: Sendable {
        public var initialMapSize = 256 << 20
        public var readOnly = false
        public var durability = Durability.durable
        /// Most commands committed in one transaction.
        public var maxBatch = 4096
        public init() {}
    }

    public let directory: String
    public let environment: Environment
    public let log: EventLog
    public let tables: ProjectionTables
    public var reader: ProjectionReader { ProjectionReader(tables: tables) }
    let mapLock = ReadWriteLock()
    private let writer: CommitWriter?

    /// Opens the store in `directory`. Opening for writing creates a new store
    /// there when the directory is missing or holds no database yet.
    public init(directory: String, options: Options = Options()) throws {
        self.directory = directory
        try Self.prepare(directory: directory, create: !options.readOnly)
        var envOptions = Environment.Options()
        envOptions.mapSize = options.initialMapSize
        envOptions.readOnly = options.readOnly
        envOptions.noSync = options.durability == .noSync
        envOptions.maxDatabases = 32
        let env: Environment
        do {
            env = try Environment(path: directory, options: envOptions)
        } catch LMDBError.invalid {
            throw StoreError.notADatabase(path: directory, reason: "data.mdb is not an LMDB file")
        } catch LMDBError.versionMismatch {
            throw StoreError.notADatabase(path: directory, reason: "data.mdb was written by an incompatible LMDB")
        }
        try env.checkReaders()
        self.environment = env
        do {
            log = try EventLog.open(in: env, create: !options.readOnly)
            tables = try ProjectionTables.open(in: env, create: !options.readOnly)
        } catch LMDBError.notFound {
            throw StoreError.notADatabase(path: directory, reason: "it has no topicstore tables")
        }
        let tables = self.tables
        let version = try env.read { txn in try tables.storedSchemaVersion(txn) }
        guard let version else { throw StoreError.notADatabase(path: directory, reason: "it has no schema version") }
        guard version == ProjectionTables.schemaVersion else { throw StoreError.unsupportedSchema(path: directory, version: version) }
        writer = options.readOnly ? nil : CommitWriter(maxBatch: options.maxBatch)
        writer?.start(store: self)
    }

    deinit { writer?.stop() }

    /// Files a topicstore directory may hold besides its database.
    static let harmlessNames: Set<String> = ["README.md", ".gitignore", ".gitkeep", "archive", "snapshots"]

    private static func prepare(directory: String, create: Bool) throws {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        if !fm.fileExists(atPath: directory, isDirectory: &isDir) {
            guard create else { throw StoreError.notADatabase(path: directory, reason: "the directory does not exist") }
            try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return
        }
        guard isDir.boolValue else { throw StoreError.notADatabase(path: directory, reason: "it is not a directory") }
        if fm.fileExists(atPath: directory + "/data.mdb") { return }
        guard create else { throw StoreError.notADatabase(path: directory, reason: "it holds no data.mdb") }
        let foreign = try fm.contentsOfDirectory(atPath: directory).filter {
            !harmlessNames.contains($0) && !$0.hasSuffix(".jsonl") && !$0.hasSuffix(".jsonl.zst") && !$0.hasPrefix(".")
        }
        guard foreign.isEmpty else {
            throw StoreError.notADatabase(path: directory,
                reason: "it holds other files (\(foreign.sorted().prefix(3).joined(separator: ", "))) and no data.mdb; refusing to create a store there")
        }
    }

    /// Group-commit counters since this store was opened (zero when read-only).
    public var commitCounters: CommitCounters { writer?.counters ?? CommitCounters(batches: 0, commands: 0, batchesBySize: []) }

    /// Stops taking commands, commits what was accepted, and stops the writer.
    public func close() { writer?.stop() }

    // MARK: Reading

    /// Runs `body` in one read transaction: one consistent snapshot.
    public func read<R>(_ body: (borrowing Transaction) throws -> R) throws -> R {
        while true {
            do {
                return try mapLock.withReadLock { try environment.read(body) }
            } catch LMDBError.mapResized {
                try adoptGrownMap()
            }
        }
    }

    /// Another process grew the map: adopt its size.
    func adoptGrownMap() throws {
        try mapLock.withWriteLock { try environment.setMapSize(0) }
    }

    /// Doubles the map (after `MDB_MAP_FULL`).
    func growMap() throws {
        try mapLock.withWriteLock {
            let current = environment.info().mapSize
            try environment.setMapSize(current * 2)
        }
    }

    // MARK: Writing

    /// Appends `event` and waits until it is durable.
    @discardableResult
    public func submit(_ event: Event) async throws -> Receipt {
        guard let writer else { throw StoreError.readOnly }
        try Validation.validate(event)
        return try await withCheckedThrowingContinuation { continuation in
            writer.enqueue(event) { continuation.resume(with: $0) }
        }
    }

    /// Submits `events` and blocks until each is durable or refused; results
    /// are in the order given. Invalid events are refused alone.
    public func submitAndWait(_ events: [Event]) -> [Result<Receipt, any Error>] {
        guard let writer else { return events.map { _ in .failure(StoreError.readOnly) } }
        let results = ResultSlots(count: events.count)
        let group = DispatchGroup()
        var pending: [CommitWriter.Pending] = []
        pending.reserveCapacity(events.count)
        for (i, event) in events.enumerated() {
            do {
                try Validation.validate(event)
            } catch {
                results.set(i, .failure(error))
                continue
            }
            group.enter()
            pending.append(CommitWriter.Pending(event: event) { result in
                results.set(i, result)
                group.leave()
            })
        }
        writer.enqueue(pending)
        group.wait()
        return results.values
    }

    /// One command, blocking: for command-line tools and tests.
    @discardableResult
    public func submitAndWait(_ event: Event) throws -> Receipt {
        try submitAndWait([event])[0].get()
    }

    /// Commits `batch` in one transaction: called on the writer thread only.
    func commit(_ batch: [CommitWriter.Pending]) -> Result<[Receipt], any Error> {
        let projections = ProjectionWriter(tables: tables)
        while true {
            do {
                let receipts = try environment.write { txn -> [Receipt] in
                    try projections.begin(txn)
                    let bounds = try log.bounds(txn)
                    var sequence = bounds?.last ?? 0
                    var lastTime = bounds?.lastTimestamp ?? 0
                    var chain = try log.head(txn)?.hash ?? .genesis
                    let now = Int64(Date().timeIntervalSince1970 * 1000)
                    var receipts: [Receipt] = []
                    receipts.reserveCapacity(batch.count)
                    for pending in batch {
                        sequence += 1
                        lastTime = max(now, lastTime)
                        let record = LogRecord(sequence: sequence, timestamp: lastTime, event: pending.event)
                        try log.append(encoded: RecordCodec.encode(record, chainingFrom: &chain), sequence: sequence, txn)
                        try Fold.apply(record, to: projections, txn)
                        receipts.append(Receipt(sequence: sequence, timestamp: lastTime))
                    }
                    try projections.flush(txn)
                    return receipts
                }
                return .success(receipts)
            } catch LMDBError.mapFull {
                do { try growMap() } catch { return .failure(error) }
            } catch LMDBError.mapResized {
                do { try adoptGrownMap() } catch { return .failure(error) }
            } catch {
                return .failure(error)
            }
        }
    }
}

/// Commits by the writer since the store was opened. `batchesBySize[i]` counts
/// batches of at most 2^i commands (and more than 2^(i-1)); the last bucket takes the rest.
public struct CommitCounters: Sendable, Hashable {
    public var batches: Int
    public var commands: Int
    public var batchesBySize: [Int]
}

/// Result slots filled from the writer thread, read once everything is in.
private final class ResultSlots: @unchecked Sendable {
    private var slots: [Result<Receipt, any Error>?]
    private let lock = NSLock()
    init(count: Int) { slots = Array(repeating: nil, count: count) }
    func set(_ i: Int, _ r: Result<Receipt, any Error>) { lock.lock(); slots[i] = r; lock.unlock() }
    var values: [Result<Receipt, any Error>] {
        lock.lock(); defer { lock.unlock() }
        return slots.map { $0 ?? .failure(StoreError.closed) }
    }
}
