import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// How far a long run has got, for progress bars.
public struct ReplayProgress: Sendable {
    /// What is running: "rebuild", "catch-up", "compare", "export", "import", "scan", "output" (history's listing).
    public var phase: String
    public var done: UInt64
    public var total: UInt64
    public init(phase: String, done: UInt64, total: UInt64) {
        self.phase = phase
        self.done = done
        self.total = total
    }
}

/// Rebuilding projections from the log, as of any point.
public enum Replay {
    /// Records the log reader decodes into one chunk (one read transaction)
    /// before it hands the chunk to the fold. A chunk of 8,000 records is a
    /// few MB, so the fold reads its records while they are still in the
    /// cache the reader wrote them to; chunks of 50,000 were gone from it by
    /// then. Bench's 1M store, nine alternating pairs: the fold phase a
    /// median 2.39 → 2.15 s, the whole rebuild 3.32 → 3.11 s.
    public static let recordsPerChunk = 8_000

    /// A point in the log's history.
    public enum Point: Sendable, Hashable {
        /// Through this sequence (0: before the first event).
        case sequence(UInt64)
        /// Through the last event appended at or before this time (ms since 1970).
        case time(Int64)
        /// Through the last event in the log.
        case end
    }

    public struct Options: Sendable {
        /// Records read per read transaction of the source (bounded, so a long
        /// replay never pins the live store's pages for long), and per chunk
        /// the reader hands the fold.
        public var recordsPerReadTransaction = Replay.recordsPerChunk
        /// Records folded per write transaction of the target.
        public var recordsPerCommit = 200_000
        /// Copy the log records too, so the output is a complete store as of
        /// the point (whose own audit passes); without it only projections are written.
        public var includeLog = true
        /// Build the projections in memory and write each table once, in key
        /// order with `MDB_APPEND`, at the end — or in rounds, whenever the
        /// build holds more than this many bytes (roughly). nil: write through
        /// to LMDB at every commit (slower; kept to compare the two).
        public var memoryBudget: Int? = defaultMemoryBudget
        /// Whether the output may lie inside the source's store directory: only
        /// for compaction, which writes its snapshot there and manages it.
        public var writesInsideStore = false
        /// A third of the machine's memory, at most 8 GiB: 10M devices fit in one round.
        public static var defaultMemoryBudget: Int { ProjectionBuilder.defaultMemoryBudget }
        public init() {}
    }

    public struct Report: Sendable {
        public var directory: String
        /// The last sequence folded (0 when the point is before the first event).
        public var through: UInt64
        /// Time of that event (ms), when there is one.
        public var throughTimestamp: Int64?
        public var events: UInt64
        public var seconds: Double
        /// Times the in-memory build was written before the end because it
        /// outgrew its memory budget (0: written once, at the end).
        public var rounds = 0
        /// Whether every table was written once, in key order, into an empty store
        /// (in memory, one round, not from a snapshot): its pages are full, and a
        /// packed copy of it would add nothing.
        public var wroteInKeyOrder = false
        /// Of `seconds`, the time spent writing the in-memory build into LMDB.
        public var writeSeconds = 0.0
        public var eventsPerSecond: Double { seconds > 0 ? Double(events) / seconds : 0 }
    }

    /// The store directory a store was opened on (where `snapshots/` lives).
    public static func root(of store: TopicStore) -> String { store.directory }

    /// The snapshot the store's log continues from: nil when the log starts at
    /// sequence 1 (or is empty and was never compacted). Throws when the log was
    /// compacted and the snapshot at its horizon is missing.
    ///
    /// A compacted log with no record after its horizon — a replay exactly at
    /// the horizon writes one — is empty; its horizon is then the compaction
    /// head its projections carry in `meta` (`compactedHead`).
    public static func snapshot(of store: TopicStore) throws -> Snapshot? {
        let horizon = try horizon(of: store)
        guard horizon > 0 else { return nil }
        let root = root(of: store)
        guard let snapshot = try Snapshot.find(inStore: root, horizon: horizon) else {
            // A compaction that switched generations since the store was opened removes the
            // snapshot the old generation's log continues from.
            try ReplayError.checkStillCurrent(store, since: store.generation)
            throw ReplayError.missingSnapshot(horizon: horizon, directory: Snapshot.directory(inStore: root, horizon: horizon))
        }
        // The compaction wrote the head at the horizon twice: into the manifest and into the new
        // generation's meta. A manifest that disagrees is not trusted: the chain would be taken up
        // from it, and an audit blame the intact first record (an auditor's review found this).
        let tables = store.tables
        if let recorded = try store.read({ txn in try tables.compactedChainHead(txn) }),
           recorded.sequence == snapshot.sequence, recorded.hash != snapshot.head.hash {
            throw ReplayError.snapshotHeadMismatch(directory: snapshot.directory, manifest: snapshot.head, recorded: recorded)
        }
        return snapshot
    }

    /// The sequence the store's log continues after: 0 when it starts at 1 (or is empty and
    /// was never compacted), else the compaction horizon (for an empty compacted log, the
    /// compaction head its projections carry in `meta`).
    public static func horizon(of store: TopicStore) throws -> UInt64 {
        let log = store.log, tables = store.tables
        return try store.read { txn in
            if let first = try log.sequenceRange(txn)?.lowerBound { return first - 1 }
            return try tables.compactedChainHead(txn)?.sequence ?? 0
        }
    }

    /// The link the log's first record extends: genesis, or the head of the compaction
    /// snapshot the log continues from (nil when that snapshot is missing: the chain is
    /// then taken up, unverified, at the first record's stored link).
    static func chainStart(of store: TopicStore) throws -> ChainHash? {
        try horizon(of: store) == 0 ? .genesis : (try? snapshot(of: store))??.head.hash
    }

    /// The sequence `point` names in `store`'s log. A compacted log can be
    /// replayed from its horizon on: an earlier point is an error naming the horizon.
    public static func resolve(_ point: Point, in store: TopicStore) throws -> UInt64 {
        try resolve(point, in: store, snapshot: try snapshot(of: store))
    }

    static func resolve(_ point: Point, in store: TopicStore, snapshot: Snapshot?) throws -> UInt64 {
        let log = store.log
        let horizon = snapshot?.sequence ?? 0
        return try store.read { txn in
            let last = try log.bounds(txn)?.last ?? 0
            switch point {
            case .end:
                return last
            case .sequence(let s):
                guard s <= last else { throw ReplayError.beyondLog(requested: s, last: last) }
                guard s >= horizon else {
                    throw ReplayError.beforeHorizon(requested: "sequence \(s)", horizon: horizon, horizonTime: snapshot?.timestamp)
                }
                return s
            case .time(let t):
                if let s = try log.lastSequence(atOrBefore: t, txn) { return s }
                guard let snapshot else { return 0 }
                guard t >= snapshot.timestamp else {
                    throw ReplayError.beforeHorizon(requested: "time \(TimeText.iso(t))",
                                                    horizon: horizon, horizonTime: snapshot.timestamp)
                }
                return horizon
            }
        }
    }

    /// Rebuilds the projections as of `point` into `directory` (new or empty),
    /// folding the log with `Fold.apply`, the fold the live path uses. The
    /// source store is only read, in bounded read transactions. A compacted
    /// store is replayed from its snapshot; with `includeLog` the output gets a
    /// copy of the snapshot too, so it is a complete (compacted) store itself.
    ///
    /// A rebuild that fails (a damaged record, a full disk) removes what it wrote:
    /// a review found a store "at seq N−1" left behind by a replay that stopped
    /// at record N, easy to take for the store asked for.
    @discardableResult
    public static func rebuild(from store: TopicStore, to point: Point, into directory: String,
                               options: Options = Options(),
                               progress: ((ReplayProgress) -> Void)? = nil) throws -> Report {
        if samePath(directory, store.directory) { throw ReplayError.sameDirectory(directory) }
        // A review's as-of stores under the store directory were removed, unnamed, by the next compaction.
        if !options.writesInsideStore, isInside(directory, store.directory) { throw ReplayError.insideStore(directory, store: store.directory) }
        let output = OutputDirectory(directory)
        do {
            return try rebuildOnce(from: store, to: point, into: directory, options: options, progress: progress)
        } catch {
            output.discardWritten()  // (the output's environment is closed by now: the builder was local to rebuildOnce)
            throw error
        }
    }

    private static func rebuildOnce(from store: TopicStore, to point: Point, into directory: String,
                                    options: Options, progress: ((ReplayProgress) -> Void)?) throws -> Report {
        let started = Date()
        try store.requireLog()
        let snapshot = try snapshot(of: store)
        let through = try resolve(point, in: store, snapshot: snapshot)
        let mapSize = min(store.environment.info().usedBytes, 1 << 50) * 2 + (256 << 20)
        // The rebuild keys topic codes as the store does (see `ProjectionTables.TopicCodeOrder`).
        let codeOrder = try store.read { txn in try store.tables.topicCodeOrder(txn) }
        let builder: ProjectionBuilder
        if let snapshot {
            builder = try ProjectionBuilder(continuing: snapshot, creating: directory, writesLog: options.includeLog, mapSize: mapSize,
                                            memoryBudget: options.memoryBudget, topicCodeOrder: codeOrder)
            if options.includeLog {
                try snapshot.copy(toDirectory: Snapshot.directory(inStore: directory, horizon: snapshot.sequence))
            }
        } else {
            let layout = try store.read { txn in try store.tables.topicLayout(txn) }
            builder = try ProjectionBuilder(creating: directory, writesLog: options.includeLog, mapSize: mapSize,
                                            memoryBudget: options.memoryBudget, topicLayout: layout, topicCodeOrder: codeOrder)
        }
        var events: UInt64 = 0
        if through > builder.appliedSequence {
            // Not an audit, but no answer from a record whose link is broken: the fold stops there (exit 4).
            var verifier = LogVerifier(verifies: false)
            verifier.chain = ChainCheck(after: snapshot?.head.hash ?? .genesis)
            _ = try fold(from: store, through: through, into: builder, verifier: verifier,
                         options: options, phase: "rebuild", progress: progress, events: &events)
        }
        try builder.finish()
        var time: Int64? = nil
        if through > 0 {
            time = try store.read { txn in try store.log.record(at: through, txn)?.timestamp }
            if time == nil, let snapshot, snapshot.sequence == through { time = snapshot.timestamp }
        }
        return Report(directory: directory, through: through, throughTimestamp: time, events: events,
                      seconds: Date().timeIntervalSince(started), rounds: builder.rounds,
                      wroteInKeyOrder: builder.wroteInKeyOrder, writeSeconds: builder.writeSeconds)
    }

    /// How many devices and topics a build of `events` of `store`'s log
    /// records will hold, roughly: what the store's projections hold
    /// (`TopicStore.tableSizes`), in proportion to the share of the log
    /// folded, or a device and a topic for every two events (a token and a
    /// register, as an install has them) when that is more, never more than
    /// a sixteenth above what the store holds. Without held devices: a device for every two events,
    /// at most 8M, and no topic. Sized from the events alone, the 10M store's
    /// build grew its name indexes and topic records by rehashing and copying
    /// past 8M; in proportion alone, a rebuild to the middle of a log whose
    /// first half was installs grew them too. Topics are never hinted below the
    /// store's topics per device times the devices hinted: an install that
    /// brings a per-user topic and subscribes to shared ones makes more than one
    /// topic per two events by the end of the installs, and bench's 1M store
    /// rebuilt to its 2,000,000th event (the installs; 1,010,003 topics) grew its
    /// name index from room for 1,000,000 to 2,000,000 codes in the middle of
    /// the fold (8% of the rebuild's CPU samples, most of them the kernel
    /// zeroing the new table's pages).
    static func sizeHint(_ store: TopicStore, events: UInt64) -> (devices: Int, topics: Int) {
        guard let sizes = try? store.tableSizes(), sizes.devices > 0, sizes.lastSequence >= sizes.firstSequence else {
            return (Int(min(events / 2, 8_000_000)), 0)
        }
        let share = min(1, Double(events) / Double(sizes.lastSequence - sizes.firstSequence + 1))
        let installs = Int(min(events / 2, UInt64(Int.max)))
        // The sixteenth: a store may hold fewer than a build of its log's earlier part
        // does, when garbage collection dropped some since. Compaction collects garbage
        // before it rebuilds its snapshot at the horizon; bench's 10M store, 102,719
        // topics dropped, was built short of room, its tables grew by doubling, and the
        // build went over its budget: two rounds and 76.7 s, where one round takes 39 s.
        func hint(_ held: Int, atLeast: Int) -> Int { min(held + held / 16, max(Int(Double(held) * share), atLeast)) }
        let devices = hint(sizes.devices, atLeast: installs)
        let topicsPerDevice = Double(sizes.topics) / Double(sizes.devices)
        return (devices, hint(sizes.topics, atLeast: max(installs, Int(Double(devices) * topicsPerDevice))))
    }

    /// Folds `builder.appliedSequence + 1 ... through` from `store`'s log with a
    /// reader thread. Without verification, a record that cannot be folded
    /// throws; with it, folding stops there and the verifier reads on to the end.
    static func fold(from store: TopicStore, through: UInt64, into builder: ProjectionBuilder,
                     verifier: LogVerifier, options: Options, phase: String,
                     progress: ((ReplayProgress) -> Void)?, events: inout UInt64) throws -> (LogVerifier, LogIssue?) {
        let start = builder.appliedSequence + 1
        let generation = store.generation
        let pipeline = ChunkPipeline(store: store, from: start, through: through,
                                     recordsPerTransaction: options.recordsPerReadTransaction,
                                     keepRaw: builder.writesLog, verifier: verifier, stopAtFault: !verifier.verifies)
        var pending: [RecordChunk] = []
        var pendingCount = 0
        var stop: LogIssue?
        let total = through - start + 1
        let hint = sizeHint(store, events: total)
        builder.writer.reserveBuild(devices: hint.devices, topics: hint.topics)
        do {
            while var chunk = try pipeline.next() {
                let lastRead = chunk.lastRead
                if stop == nil {
                    if let s = chunk.stop { stop = s }
                    if !chunk.records.isEmpty {
                        pendingCount += chunk.records.count
                        // Handed over: the fold moves its records in place (`apply(taking:)`).
                        pending.append(chunk)
                        chunk = RecordChunk()
                    }
                    // A build in memory commits nothing per batch: it folds each
                    // chunk as it comes, so the fold starts after one chunk, not four.
                    if pendingCount >= options.recordsPerCommit || stop != nil || builder.inMemory {
                        try builder.apply(taking: &pending)
                        events += UInt64(pendingCount)
                        pipeline.discard(&pending)
                        pendingCount = 0
                    }
                }
                if let progress, lastRead > 0 {
                    progress(ReplayProgress(phase: phase, done: min(lastRead - start + 1, total), total: total))
                }
            }
            try builder.apply(taking: &pending)
            events += UInt64(pendingCount)
            pipeline.discard(&pending)
        } catch {
            pipeline.cancel()
            throw error
        }
        let verified = pipeline.result()
        pipeline.close()  // the reader thread frees the last chunks while the tables are written
        try builder.writeProjections()
        if stop == nil, builder.appliedSequence < through {
            // The log ended early (it cannot shrink, but a reader may be handed a wrong bound).
            stop = LogIssue(sequence: builder.appliedSequence + 1, kind: .gap,
                            message: "record \(builder.appliedSequence + 1) is missing")
        }
        if let stop, stop.kind == .gap || stop.kind == .missingStart { try ReplayError.checkNotCompacted(store, since: generation) }
        if let stop, !verifier.verifies { throw ReplayError.cannotFold(stop) }
        return (verified, stop)
    }

    static func samePath(_ a: String, _ b: String) -> Bool {
        canonical(a) == canonical(b)
    }

    /// Whether `path` lies below `root` (both with symbolic links resolved; `path`
    /// need not exist yet: its nearest existing ancestor is resolved).
    static func isInside(_ path: String, _ root: String) -> Bool {
        var existing = URL(fileURLWithPath: path).standardizedFileURL
        var rest: [String] = []
        while !FileManager.default.fileExists(atPath: existing.path), existing.path != "/" {
            rest.insert(existing.lastPathComponent, at: 0)
            existing.deleteLastPathComponent()
        }
        let resolved = ([canonical(existing.path)] + rest).joined(separator: "/")
        let r = canonical(root)
        return resolved.hasPrefix(r == "/" ? r : r + "/")
    }

    private static func canonical(_ p: String) -> String {
        URL(fileURLWithPath: p).standardizedFileURL.resolvingSymlinksInPath().path
    }
}

extension ReplayError {
    /// Throws `compactedMeanwhile` when `store` is no longer on `generation`: a gap met by
    /// a long read is then a compaction's doing, not damage (a review got "gap … exit 4"
    /// from an export and an audit that ran across a nightly compaction). A store that
    /// stays on its generation (`TopicStore.Options.staysOnGeneration`, as the CLI opens
    /// it) reads one log to its end whatever a compaction does: a gap there is damage.
    static func checkNotCompacted(_ store: TopicStore, since generation: String) throws {
        guard !store.staysOnGeneration else { return }
        try checkStillCurrent(store, since: generation)
    }

    /// Throws `compactedMeanwhile` when the store directory's current generation is no
    /// longer `generation`, or `store` moved on from it.
    static func checkStillCurrent(_ store: TopicStore, since generation: String) throws {
        let now = (try? TopicStore.activeGeneration(in: store.directory)) ?? store.generation
        if now != generation || store.generation != generation {
            throw ReplayError.compactedMeanwhile(store: store.directory, from: generation, to: now)
        }
    }
}
