import Foundation
import LMDB
import Projections
import Roaring
import SubscriptionLog
import TopicStore

/// Verifies a store: the log (gap-free sequences, checksums, decodable records,
/// the hash chain) and the projections (every entry of every table compared
/// with a rebuild from the log by the same fold).
///
/// It never blocks the store's writer: the log is read in bounded read
/// transactions, and the comparison goes table by table in bounded chunks. For
/// each chunk it opens one live snapshot, catches the rebuild up to the
/// sequence that snapshot reflects, and compares that key range at that
/// sequence, so every entry is compared at a point where both sides must agree.
public enum Audit {
    public struct Options: Sendable {
        /// Records read per read transaction and per chunk of the rebuild
        /// (`Replay.recordsPerChunk`); also how far behind the live log the
        /// rebuild may be for a comparison to catch it up inside its snapshot.
        public var recordsPerReadTransaction = Replay.recordsPerChunk
        public var recordsPerCommit = 200_000
        /// Entries compared per pair of read transactions.
        public var entriesPerComparison = 20_000
        /// Most issues and differences kept in the report (the rest are counted).
        public var maxReported = 1000
        /// A head published earlier (`SEQ:HEX`): the link at that sequence must match.
        public var expectedHead: ChainHead?
        /// Where the rebuild is made (a new directory inside it; removed afterwards).
        public var scratchDirectory: String = NSTemporaryDirectory()
        /// The rebuild's memory budget in bytes (see `Replay.Options.memoryBudget`).
        public var memoryBudget: Int? = Replay.Options.defaultMemoryBudget
        public init() {}
    }

    public struct Report: Sendable {
        /// The last record checked and its chain link: publish it to anchor the log.
        public var head: ChainHead?
        public var firstSequence: UInt64?
        /// The snapshot a compacted log was checked from (its horizon and chain head), when there is one.
        public var snapshot: ChainHead?
        public var recordsChecked: UInt64
        /// Records whose link could not be checked: after a damaged record (reported), the
        /// ones up to the next that keeps its whole link (at most 63: a version 5 record
        /// keeps 8 bytes of its link, which only the link before it can check).
        public var linksUnchecked: UInt64 = 0
        public var logIssues: [LogIssue]
        public var logIssueCount: Int
        /// False when the log could not be folded to its end (see `foldStop`).
        public var projectionsCompared: Bool
        public var foldStop: LogIssue?
        public var differences: [ProjectionDifference]
        public var differenceCount: Int
        public var entriesCompared: Int
        /// Entries holding the same value in another encoding, not differences: posting chunks in
        /// another roaring encoding or the portable format, device and topic records and
        /// devices' topic lists in the form an older version wrote.
        public var equivalentEncodings: Int = 0
        /// The schema version of a store no writer of this version has opened yet (the
        /// rebuild is in `ProjectionTables.schemaVersion`): not a difference, as the older
        /// forms read alike; its writer's next open stamps the current one.
        public var olderSchema: UInt32?
        /// The live applied sequence at the last comparison chunk.
        public var comparedAsOf: UInt64
        public var rebuildSeconds: Double
        public var compareSeconds: Double
        public var seconds: Double

        /// Everything matches: exit 0.
        public var isClean: Bool { logIssueCount == 0 && differenceCount == 0 && projectionsCompared }
    }

    public static func run(_ store: TopicStore, options: Options = Options(),
                           progress: ((ReplayProgress) -> Void)? = nil) throws -> Report {
        let started = Date()
        try store.requireLog()
        let generation = store.generation
        let log = store.log
        // The keys alone: a damaged last record is for the verifier to report, located, like any other.
        let range = try store.read { txn in try log.sequenceRange(txn) }
        let madeScratch = try makeScratchDirectory(options.scratchDirectory)
        removeAbandonedScratch(in: options.scratchDirectory)
        // Made here: removed once empty, after the rebuild's directory (the defer below runs first).
        defer { if madeScratch { rmdir(options.scratchDirectory) } }
        let scratch = (options.scratchDirectory as NSString)
            .appendingPathComponent("topicstore-audit-\(getpid())-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let mapSize = min(store.environment.info().usedBytes, 1 << 50) * 2 + (256 << 20)
        // A compacted log continues from the snapshot at its horizon: the rebuild
        // starts from the snapshot's projections and the chain from its head.
        // Without the snapshot, the log is reported as not starting at 1.
        var snapshot: Snapshot?
        do { snapshot = try Replay.snapshot(of: store) } catch ReplayError.missingSnapshot { snapshot = nil }
        // The rebuild keys topic codes as the store does (see `ProjectionTables.TopicCodeOrder`).
        let codeOrder = try store.read { txn in try store.tables.topicCodeOrder(txn) }
        let builder: ProjectionBuilder
        if let snapshot {
            builder = try ProjectionBuilder(continuing: snapshot, creating: scratch, writesLog: false, mapSize: mapSize,
                                            memoryBudget: options.memoryBudget, topicCodeOrder: codeOrder)
        } else {
            let layout = try store.read { txn in try store.tables.topicLayout(txn) }
            builder = try ProjectionBuilder(creating: scratch, writesLog: false, mapSize: mapSize, memoryBudget: options.memoryBudget,
                                            topicLayout: layout, topicCodeOrder: codeOrder)
        }

        var replayOptions = Replay.Options()
        replayOptions.recordsPerReadTransaction = options.recordsPerReadTransaction
        replayOptions.recordsPerCommit = options.recordsPerCommit
        replayOptions.includeLog = false
        var verifier = LogVerifier(verifies: true, maxIssues: options.maxReported,
                                   startingAfter: snapshot?.sequence, link: snapshot?.head.hash ?? .genesis)
        var stop: LogIssue?
        var events: UInt64 = 0
        if let last = range?.upperBound, last > builder.appliedSequence {
            (verifier, stop) = try Replay.fold(from: store, through: last, into: builder, verifier: verifier,
                                               options: replayOptions, phase: "rebuild", progress: progress, events: &events)
        }
        let rebuildSeconds = Date().timeIntervalSince(started)

        var report = Report(head: nil, firstSequence: range?.lowerBound, snapshot: snapshot?.head, recordsChecked: 0, logIssues: [], logIssueCount: 0,
                            projectionsCompared: false, foldStop: stop, differences: [], differenceCount: 0,
                            entriesCompared: 0, comparedAsOf: 0, rebuildSeconds: rebuildSeconds, compareSeconds: 0, seconds: 0)
        if stop == nil {
            var comparer = Comparer(store: store, builder: builder, options: options, verifier: verifier)
            try comparer.run(progress: progress)
            verifier = comparer.verifier
            report.projectionsCompared = comparer.stop == nil
            report.foldStop = comparer.stop
            report.differences = comparer.differences
            report.differenceCount = comparer.differenceCount
            report.entriesCompared = comparer.entriesCompared
            report.equivalentEncodings = comparer.equivalentEncodings
            report.olderSchema = comparer.olderSchema
            report.comparedAsOf = comparer.asOf
        }
        if let s = report.foldStop, !verifier.issues.contains(where: { $0.isSame(as: s) }) {
            verifier.report(s)  // e.g. fields that do not decode under a valid checksum and link
        }
        if let last = verifier.previousSequence, let link = verifier.link {
            report.head = ChainHead(sequence: last, hash: link)
        }
        if let expected = options.expectedHead {
            try checkAnchor(expected, store: store, snapshot: snapshot, verifier: &verifier)
        }
        if verifier.issues.contains(where: { $0.kind == .gap || $0.kind == .missingStart }) || report.foldStop.map({ $0.kind == .gap }) == true {
            try ReplayError.checkNotCompacted(store, since: generation)
        }
        report.recordsChecked = verifier.checked
        report.linksUnchecked = verifier.linksUnchecked
        report.logIssues = verifier.issues
        report.logIssueCount = verifier.issueCount
        report.compareSeconds = Date().timeIntervalSince(started) - rebuildSeconds
        report.seconds = Date().timeIntervalSince(started)
        return report
    }

    /// Removes the rebuilds of audits that were killed (their process is gone): each
    /// left a `topicstore-audit-PID-…` directory as large as the projections.
    static func removeAbandonedScratch(in directory: String) {
        let fm = FileManager.default
        for name in (try? fm.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix("topicstore-audit-") {
            let parts = name.split(separator: "-")
            guard parts.count >= 4, let pid = Int32(parts[2]), pid > 0, pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH {
                try? fm.removeItem(atPath: (directory as NSString).appendingPathComponent(name))
            }
        }
    }

    /// Makes the scratch directory if it does not exist, as one new directory in an
    /// existing parent (a mistyped path must not become a tree of new directories);
    /// returns whether it made it.
    static func makeScratchDirectory(_ directory: String) throws -> Bool {
        let fm = FileManager.default
        var isDirectory: ObjCBool = false
        if fm.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw ReplayError.io("the scratch directory \(directory) is not a directory") }
            return false
        }
        let parent = (directory as NSString).deletingLastPathComponent
        guard fm.fileExists(atPath: parent.isEmpty ? "." : parent, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ReplayError.io("cannot make the scratch directory \(directory): \(parent) does not exist "
                + "(audit makes only the last directory of the path)")
        }
        try fm.createDirectory(atPath: directory, withIntermediateDirectories: false)
        return true
    }

    /// The link stored at the anchored sequence must be the anchored one (the
    /// chain itself was verified up to the head, so this pins every record before it).
    static func checkAnchor(_ expected: ChainHead, store: TopicStore, snapshot: Snapshot?, verifier: inout LogVerifier) throws {
        let log = store.log
        if let snapshot, expected.sequence <= snapshot.sequence {
            if expected.sequence == snapshot.sequence {
                if expected.hash != snapshot.head.hash {
                    verifier.report(LogIssue(sequence: expected.sequence, kind: .headMismatch,
                        message: "the snapshot's head at the horizon is \(snapshot.head.hash.hex), the anchor says \(expected.hash.hex)"))
                }
            } else {
                verifier.report(LogIssue(sequence: expected.sequence, kind: .headMismatch,
                    message: "the anchored head \(expected) is before the compaction horizon \(snapshot.sequence), so this store "
                        + "no longer holds it: import the compaction archive (its files in order, from log-1-…) into a new directory "
                        + "without --expect-head (import compares only the final head), then run "
                        + "topicstore audit --data NEW --expect-head \(expected)"))
            }
            return
        }
        // The link at the anchored sequence: the one its record stores, or computed from the
        // last whole link before it (nil when a record on the way is damaged: reported already).
        let stored: ChainHash?? = try store.read { txn in
            guard let stored = try log.withRecordBytes(at: expected.sequence, txn, { RecordCodec.unverifiedLink(of: $0) }) else { return .none }
            return .some(stored ?? (try? store.chainLink(at: expected.sequence, txn)))
        }
        switch stored {
        case .none:
            verifier.report(LogIssue(sequence: expected.sequence, kind: .headMismatch,
                message: "the anchored head \(expected) names a record the log no longer has"))
        case .some(let link) where link != expected.hash:
            verifier.report(LogIssue(sequence: expected.sequence, kind: .headMismatch,
                message: "the link at the anchored sequence is \(link?.hex ?? "absent"), the anchor says \(expected.hash.hex)"))
        default:
            break
        }
    }

    /// Compares every table, chunk by chunk, catching the rebuild up with the live store.
    struct Comparer {
        let store: TopicStore
        let builder: ProjectionBuilder
        let options: Options
        var verifier: LogVerifier
        var differences: [ProjectionDifference] = []
        var differenceCount = 0
        var entriesCompared = 0
        var equivalentEncodings = 0
        var olderSchema: UInt32?
        var asOf: UInt64 = 0
        var stop: LogIssue?

        init(store: TopicStore, builder: ProjectionBuilder, options: Options, verifier: LogVerifier) {
            self.store = store
            self.builder = builder
            self.options = options
            self.verifier = verifier
        }

        enum Step { case compared(lastKey: [UInt8]?, done: Bool), behind(UInt64) }

        mutating func run(progress: ((ReplayProgress) -> Void)?) throws {
            let live = store.tables
            let rebuilt = builder.tables
            var describer = DifferenceDescriber(live: live, rebuilt: rebuilt)
            let pairs = Array(zip(live.all, rebuilt.all))
            let totalEntries = try store.read { txn in try live.all.reduce(0) { $0 + (try txn.statistics($1).entries) } }
            for (liveDB, rebuiltDB) in pairs {
                var resume: [UInt8]? = nil
                while true {
                    let step = try store.read { txn -> Step in
                        let s = try live.appliedSequence(txn)
                        if s > builder.appliedSequence {
                            if s - builder.appliedSequence > UInt64(options.recordsPerReadTransaction) { return .behind(s) }
                            // Catch up inside this snapshot: the records are few.
                            var chunk = try LogReader.read(log: store.log, from: builder.appliedSequence + 1, through: s,
                                                           limit: options.recordsPerReadTransaction, keepRaw: false,
                                                           verifier: &verifier, txn)
                            if chunk.lastRead == 0 && chunk.stop == nil {
                                stop = missingRecords(through: s)
                                return .compared(lastKey: nil, done: true)
                            }
                            if let st = chunk.stop { stop = st; chunk.records = chunk.records.filter { $0.sequence < st.sequence } }
                            try builder.apply(chunk)
                            try builder.writeProjections()
                            if stop != nil { return .compared(lastKey: nil, done: true) }
                        }
                        asOf = s
                        return try builder.environment.read { rtxn in
                            try compareChunk(liveDB, rebuiltDB, after: resume, asOf: s, txn, rtxn, &describer)
                        }
                    }
                    if stop != nil { return }
                    switch step {
                    case .behind(let target):
                        try catchUp(to: target)
                        if stop != nil { return }
                    case .compared(let lastKey, let done):
                        resume = lastKey
                        progress?(ReplayProgress(phase: "compare", done: UInt64(min(entriesCompared, totalEntries)),
                                                 total: UInt64(max(totalEntries, entriesCompared))))
                        if done { break }
                        continue
                    }
                    if case .compared(_, true) = step { break }
                }
            }
        }

        /// Posting chunks are compared as sets: CRoaring keeps a run or an array
        /// container when both serialize to the same size, so equal sets may be
        /// encoded differently depending on the order of changes (and batching),
        /// and a store from before schema 10 holds chunks not rewritten since in
        /// the portable format, a rebuild in the compact one. Devices' topic
        /// lists likewise: 4-byte ids before schema 10, varints in a rebuild.
        /// Device records are compared as records: a store from before schema 4
        /// holds the names of devices not rewritten since as text, a rebuild in fewer bytes.
        mutating func sameContent(_ table: String, key: UnsafeRawBufferPointer,
                                  _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
            switch table {
            case "postings":
                guard key.count == 10 else { return false }
                let high = key.loadBigEndian(at: 4, as: UInt16.self)
                guard let x = try? Bitmap(chunk: a, high: high), let y = try? Bitmap(chunk: b, high: high),
                      x.count == y.count, x.intersectionCount(y) == x.count else { return false }
            case "device_topics":
                guard let x = DeviceTopics.decode(a), let y = DeviceTopics.decode(b), x == y else { return false }
            case "devices":
                guard let x = try? DeviceRecord(decoding: a, at: ""), let y = try? DeviceRecord(decoding: b, at: ""), x == y else { return false }
            case "topics":
                guard let x = try? TopicRecord(decoding: a, at: ""), let y = try? TopicRecord(decoding: b, at: ""), x == y else { return false }
            default:
                return false
            }
            equivalentEncodings += 1
            return true
        }

        /// Folds the live log up to `target` in bounded read transactions.
        mutating func catchUp(to target: UInt64) throws {
            let reader = LogReader(store: store, recordsPerTransaction: options.recordsPerReadTransaction)
            while builder.appliedSequence < target {
                var chunk = try reader.read(from: builder.appliedSequence + 1, through: target, keepRaw: false, verifier: &verifier)
                if chunk.lastRead == 0 && chunk.stop == nil { stop = missingRecords(through: target); break }
                if let st = chunk.stop { stop = st; chunk.records = chunk.records.filter { $0.sequence < st.sequence } }
                try builder.apply(chunk)
                if stop != nil { break }
            }
            try builder.writeProjections()
        }

        /// The live projections are at `applied`, but the log has no record after the rebuild's
        /// last one: those records are missing (a store whose log ends early, or a compaction
        /// snapshot audited as a store). Catching up with them looped for ever once more than
        /// a read transaction's worth were missing, and compared, reporting every entry, below.
        func missingRecords(through applied: UInt64) -> LogIssue {
            let first = builder.appliedSequence + 1
            let what = first == applied ? "record \(first) is" : "records \(first)…\(applied) are"
            if first == 1 {
                return LogIssue(sequence: 1, kind: .missingStart,
                                message: "the projections are at seq \(applied) but the log holds none of their records: \(what) missing and there is "
                                    + "no snapshot to start from (a compaction snapshot is projections only: audit the store it belongs to)",
                                missing: first...applied)
            }
            return LogIssue(sequence: first, kind: .gap, message: "the projections are at seq \(applied) but the log ends at seq \(first - 1): \(what) missing",
                            missing: first...applied)
        }

        /// The live store's schema version, when it is one this code reads and older than
        /// the rebuild's: a store that no writer of this version has opened yet.
        static func olderVersion(_ live: [UInt8]?, than rebuilt: [UInt8]?) -> UInt32? {
            guard let live, let rebuilt, live.count == 4, rebuilt.count == 4 else { return nil }
            let l = live.withUnsafeBytes { $0.loadBigEndian(at: 0, as: UInt32.self) }
            let r = rebuilt.withUnsafeBytes { $0.loadBigEndian(at: 0, as: UInt32.self) }
            return l < r && ProjectionTables.readableSchemaVersions.contains(l) ? l : nil
        }

        /// Compares up to `entriesPerComparison` entries after `after` (exclusive).
        mutating func compareChunk(_ liveDB: Database, _ rebuiltDB: Database, after: [UInt8]?, asOf: UInt64,
                                   _ liveTxn: borrowing Transaction, _ rebuiltTxn: borrowing Transaction,
                                   _ describer: inout DifferenceDescriber) throws -> Step {
            var found: [(key: [UInt8], live: [UInt8]?, rebuilt: [UInt8]?)] = []
            let limit = options.entriesPerComparison
            var compared = 0
            var lastKey: [UInt8]? = after
            let done: Bool = try liveTxn.withCursor(liveDB) { lc in
                try rebuiltTxn.withCursor(rebuiltDB) { rc in
                    func start(_ c: inout Cursor) throws -> Cursor.Entry? {
                        guard let after else { return try c.first() }
                        guard let e = try c.seek(atLeast: after) else { return nil }
                        return e.key.elementsEqual(after) ? try c.next() : e
                    }
                    var l = try start(&lc)
                    var r = try start(&rc)
                    while compared < limit {
                        switch (l, r) {
                        case (nil, nil):
                            return true
                        case (let le?, nil):
                            found.append((Array(le.key), Array(le.value), nil)); lastKey = Array(le.key); l = try lc.next()
                        case (nil, let re?):
                            found.append((Array(re.key), nil, Array(re.value))); lastKey = Array(re.key); r = try rc.next()
                        case (let le?, let re?):
                            if le.key.elementsEqual(re.key) {
                                if !le.value.elementsEqual(re.value) && !sameContent(liveDB.name, key: le.key, le.value, re.value) {
                                    found.append((Array(le.key), Array(le.value), Array(re.value)))
                                }
                                lastKey = Array(le.key)
                                l = try lc.next(); r = try rc.next()
                            } else if le.key.lexicographicallyPrecedes(re.key) {
                                found.append((Array(le.key), Array(le.value), nil)); lastKey = Array(le.key); l = try lc.next()
                            } else {
                                found.append((Array(re.key), nil, Array(re.value))); lastKey = Array(re.key); r = try rc.next()
                            }
                        }
                        compared += 1
                    }
                    return l == nil && r == nil
                }
            }
            entriesCompared += compared
            // A generation that a compaction retired while the audit read it (it stays on it)
            // carries the retirement mark in `meta`, which no fold writes.
            for f in found where !(liveDB.name == "meta" && f.rebuilt == nil && f.key == ProjectionTables.retiredToKey) {
                if liveDB.name == "meta", f.key == ProjectionTables.schemaVersionKey, let older = Self.olderVersion(f.live, than: f.rebuilt) {
                    olderSchema = older
                    continue
                }
                differenceCount += 1
                if differences.count < options.maxReported {
                    differences.append(describer.describe(table: liveDB.name, key: f.key, live: f.live, rebuilt: f.rebuilt,
                                                          asOf: asOf, liveTxn, rebuiltTxn))
                }
            }
            return .compared(lastKey: lastKey, done: done)
        }
    }
}
