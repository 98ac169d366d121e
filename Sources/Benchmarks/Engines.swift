import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// One audience question, asked of every engine in the same words.
public enum AudienceQuery: Sendable, Hashable, CustomStringConvertible {
    /// Devices on any of these topic codes (MPush's `topics` array).
    case anyOf([String])
    /// A boolean audience expression (topicstore's syntax; translated to SQL for SQLite).
    case expression(String)

    public var description: String {
        switch self {
        case .anyOf(let codes): return codes.joined(separator: " OR ")
        case .expression(let text): return text
        }
    }

    public func parsed() throws -> AudienceExpression {
        switch self {
        case .anyOf(let codes):
            guard let e = AudienceExpression.anyOf(codes) else { throw BenchmarkError("an audience needs at least one topic") }
            return e
        case .expression(let text): return try AudienceExpression(parsing: text)
        }
    }
}

/// A query as both engines are handed it in the timed loop: its words (the
/// codes SQLite binds, the list topicstore is asked for) and its expression,
/// parsed beforehand, as an application prepares a statement or an audience
/// once and asks it many times. (Until 2026-12-03 topicstore's engine looked
/// the parsed expression up in a dictionary keyed by the query inside the
/// timed region: hashing a list of 100 codes and a lock, timed as if
/// topicstore's.)
public struct PreparedQuery: Sendable {
    public let query: AudienceQuery
    public let expression: AudienceExpression

    public init(_ query: AudienceQuery) throws {
        self.query = query
        expression = try query.parsed()
    }
}

/// The query classes the report lists, each with its queries.
public struct QueryClass: Sendable {
    public var name: String
    public var queries: [AudienceQuery]
    public var repetitions: Int

    /// Lists of per-user topics asked round-robin (fewer in quick runs).
    static let singleTopicLists = 500

    public static func standard(for spec: WorkloadSpec, quick: Bool) -> [QueryClass] {
        let r = quick ? 5 : 1
        return [
            QueryClass(name: "all", queries: [.anyOf([WorkloadSpec.allTopic])], repetitions: 1000 / r),
            QueryClass(name: "3 mid topics", queries: spec.midTopics.map { .anyOf([$0]) }, repetitions: 300 / r),
            // A send to "any of these topics", the question a send service asks most.
            QueryClass(name: "3 mid topics in one audience", queries: [.anyOf(spec.midTopics)], repetitions: 1000 / r),
            // The same kind of send to 20 different triples in turn, as a send service asks.
            QueryClass(name: "20 different mid-topic triples in one audience", queries: spec.midTopicTriples.map { .anyOf($0) },
                       repetitions: 50 / r),
            QueryClass(name: "100 single topics", queries: spec.singleTopics.map { .anyOf([$0]) }, repetitions: 20 / r),
            // A send to a list of users ("topics": ["user.12", "user.15", …]): the same
            // 100 per-user topics, asked as one audience.
            QueryClass(name: "100 single topics in one audience", queries: [.anyOf(spec.singleTopics)], repetitions: 1000 / r),
            // Sends to lists of users, a different list each time: their users were not asked
            // lately (the warm-up asks each list once, as a first send would).
            QueryClass(name: "\(singleTopicLists / r) different lists of 100 single topics in one audience",
                       queries: spec.singleTopicLists(singleTopicLists / r).map { .anyOf($0) }, repetitions: 3),
            QueryClass(name: "expression", queries: [.expression(spec.expression)], repetitions: 1000 / r),
        ]
    }
}

// MARK: topicstore

/// topicstore driven through its public API, as an application would.
final class TopicStoreEngine: @unchecked Sendable {
    let store: TopicStore
    let project: String

    init(directory: String, project: String, mapSize: Int, maxBatch: Int) throws {
        var options = TopicStore.Options()
        options.initialMapSize = mapSize
        options.durability = .durable
        options.maxBatch = maxBatch
        options.cachesRecipients = true  // as `topicstore serve` runs
        store = try TopicStore(directory: directory, options: options)
        self.project = project
    }

    /// Submits `events` and waits until every one is durable.
    func submit(_ events: [Event]) throws {
        var failures = 0
        var first: (any Error)?
        for r in store.submitAndWait(events) {
            if case .failure(let e) = r { failures += 1; if first == nil { first = e } }
        }
        if let first { throw BenchmarkError("topicstore refused \(failures) of \(events.count) commands: \(first)") }
    }

    /// Write transactions committed so far (LMDB's transaction id).
    var transactionID: Int { store.environment.info().lastTransactionID }

    /// A list of topics is asked as a send service with MPush's `topics` array
    /// asks it (`counts(project:anyOf:)`), an expression as parsed.
    func counts(_ q: PreparedQuery) throws -> AudienceTally {
        let c: AudienceCounts
        switch q.query {
        case .anyOf(let codes): c = try store.counts(project: project, anyOf: codes)
        case .expression: c = try store.counts(project: project, q.expression)
        }
        return AudienceTally(total: c.total, ios: c.ios, android: c.android)
    }

    /// Streams the reachable recipients of `topic` (forEachRecipient) into `sink`:
    /// as the serving process does (its recipient cache), or `fromMap` as any
    /// other process does (the device table only).
    func stream(topic: String, fromMap: Bool = false, into sink: inout RecipientSink) throws {
        let reader = fromMap ? ProjectionReader(tables: store.tables) : store.reader
        let project = self.project
        try store.read { txn in
            let audience = try reader.audience(project: project, .topic(topic), txn)
            let reachable = try reader.reachable(audience, txn)
            try reader.forEachRecipient(projectID: audience.projectID, in: reachable, txn) { _, platform, id, token in
                sink.take(deviceID: id, token: token, platform: platform.rawValue)
                return true
            }
        }
    }

    /// The limit for streaming: a bare cursor walk over the same device records,
    /// copying each whole record into the same sink.
    func rawDeviceWalk(into sink: inout RecipientSink) throws {
        let devices = store.tables.devices
        try store.read { txn in
            try txn.withCursor(devices) { cursor in
                var entry = try cursor.first()
                while let (_, value) = entry {
                    sink.take(record: value)
                    entry = try cursor.next()
                }
            }
        }
    }

    func close() { store.close() }
}

// MARK: raw LMDB limit

/// The LMDB limit for ingest: the same encoded records appended with
/// `MDB_APPEND` to a bare log in a fresh environment, one durable (synced)
/// commit per batch, no projections.
final class RawLMDBLog {
    let environment: Environment
    let log: Database
    private(set) var sequence: UInt64 = 0

    init(directory: String, mapSize: Int) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var options = Environment.Options()
        options.mapSize = mapSize
        options.maxDatabases = 4
        environment = try Environment(path: directory, options: options)
        log = try environment.openDatabases(["log"], create: true)[0]
    }

    /// Encodes `events` as log records with the next sequences (not timed by callers).
    func encode(_ events: [Event]) throws -> [[UInt8]] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var records: [[UInt8]] = []
        records.reserveCapacity(events.count)
        for event in events {
            sequence += 1
            records.append(try RecordCodec.encode(LogRecord(sequence: sequence, timestamp: now, event: event)))
        }
        return records
    }

    /// Appends encoded records whose sequences end at `sequence`, in one durable commit.
    func append(_ records: [[UInt8]]) throws {
        let log = self.log
        var seq = sequence - UInt64(records.count)
        try environment.write { txn in
            for record in records {
                seq += 1
                try txn.put(log, EventLog.key(seq), record, flags: .append)
            }
        }
    }
}

/// A failure of the benchmark itself (not of a measured engine's speed).
public struct BenchmarkError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A thread that repeats a unit of write work until stopped (the concurrent churn writer).
final class BackgroundWriter: @unchecked Sendable {
    private let lock = NSLock()
    private var stopRequested = false
    private var failure: (any Error)?
    private var commands = 0
    private var started: UInt64 = 0
    private var stopped: UInt64 = 0
    private let finished = DispatchSemaphore(value: 0)

    /// Starts calling `work` (which returns the commands it committed) until `stop`.
    init(_ work: @escaping @Sendable () throws -> Int) {
        let thread = Thread { [self] in
            lock.lock(); started = monotonicNanos(); lock.unlock()
            while true {
                lock.lock(); let stop = stopRequested; lock.unlock()
                if stop { break }
                do {
                    let n = try work()
                    lock.lock(); commands += n; lock.unlock()
                } catch {
                    lock.lock(); failure = error; lock.unlock()
                    break
                }
            }
            lock.lock(); stopped = monotonicNanos(); lock.unlock()
            finished.signal()
        }
        thread.name = "bench-churn-writer"
        thread.start()
    }

    /// Stops, waits, and returns the commands committed and their rate.
    func stop() throws -> (commands: Int, perSecond: Double) {
        lock.lock(); stopRequested = true; lock.unlock()
        finished.wait()
        lock.lock(); defer { lock.unlock() }
        if let failure { throw failure }
        let seconds = Double(stopped - started) / 1e9
        return (commands, seconds > 0 ? Double(commands) / seconds : 0)
    }
}

/// Hands a non-Sendable value to exactly one other thread.
final class Handoff<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}
