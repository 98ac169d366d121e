import Foundation
import LMDB
import Notifications
import Projections
import Replay
import SubscriptionLog
import TopicStore

/// Nightly compaction of a store directory, beside a running server:
///
/// 1. **Plan**: the horizon is the last sequence at or before now − retain
///    (never the log's last record: the log always keeps one, so sequences and
///    the chain go on from it). Garbage is found by the rules.
/// 2. **Garbage**: appended as events (`forget-device`, `drop-topic`,
///    `expire-token`) through the ordinary write path, so replay equals live.
/// 3. **Snapshot** of the projections at the horizon with its chain head
///    (`snapshots/<horizon>/`), written and synced before anything is removed.
/// 4. **Archive** (optional): the events up to the horizon as zstd JSON Lines,
///    read back and verified against the log before anything is removed.
/// 5. **New file generation**: a packed copy of the live environment (every
///    page full, `PackedCopy`) without the log up to the horizon, caught up with
///    what was appended meanwhile (rounds until the delta is small), then
///    `TopicStore.retire(to:catchUp:)` holds every writer while the last few
///    records are folded in and the store switches to the new generation.
/// 6. The old generation and older snapshots are removed. Leftovers of a
///    killed run are removed at the start of the next one.
///
/// A kill at any moment leaves the store in its before or its after state:
/// nothing is removed from the live generation; the switch is atomic.
public enum Compactor {
    public struct Options: Sendable {
        public var retain: RetentionDuration
        public var archiveDirectory: String?
        public var dryRun = false
        public var garbage = GarbageRules()
        /// Write a new, compact file generation (default on).
        public var compactFile = true
        /// Garbage events committed per write transaction: every other writer of the
        /// store (a running server) waits while one commits, so they go in small ones.
        public var garbageBatchSize = 256
        /// The catch-up before the switch stops when fewer records than this remain: what is
        /// left is folded while every writer waits (1,968 records held them 114 ms at 1M devices).
        public var catchUpThreshold = 200
        public var maxCatchUpRounds = 10
        /// "Now" in ms since 1970 (tests pin it); nil: the clock.
        public var now: Int64?
        /// zstd level of the archive.
        public var archiveLevel: Int32 = 3
        /// The new file's log records in compressed blocks (`LogBlock`; default on):
        /// a bench record takes about 66 bytes of the file where it took about 120.
        /// Records appended later are single entries until the next compaction.
        public var logBlocks = true
        /// Refuse to start when the estimated free space is missing (`SpacePlan`); on by default.
        public var checksSpace = true
        /// For tests: called at each step of a run (`garbage`, `snapshot`, `snapshot-written`,
        /// `archive`, `archive-written`, `copy`, `copy-generation`, `catch-up`,
        /// `switch`, `switched`); what it throws fails the run there, as an I/O error would.
        public var testHook: (@Sendable (String) throws -> Void)?
        public init(retain: RetentionDuration) { self.retain = retain }
    }

    public struct Report: Sendable {
        public var dryRun: Bool
        public var directory: String
        /// The log before: first and last sequence (nil when empty).
        public var firstBefore: UInt64?
        public var lastBefore: UInt64?
        /// The new horizon (events through it leave the log), or the old one when nothing moves.
        public var horizon: UInt64
        public var horizonTime: Int64?
        public var previousHorizon: UInt64
        /// The last sequence older than the retention window (what `horizon` becomes when the log is trimmed).
        public var retentionHorizon: UInt64 = 0
        /// Whether the log's prefix through `horizon` was (or, in a dry run, would be) removed.
        public var logTrimmed = true
        public var eventsRemoved: UInt64
        public var eventsArchived: UInt64
        public var archivePath: String?
        public var archiveBytes: Int = 0
        public var archiveJSONBytes: Int = 0
        public var devicesForgotten = 0
        public var topicsDropped = 0
        public var tokensExpired = 0
        /// Notifications completed before the retention window, removed with their audiences and
        /// opens (auxiliary tables, not events: a replay never had them).
        public var notificationsRemoved = 0
        /// Garbage events that were planned but no longer applied when rechecked.
        public var garbageSkipped = 0
        /// Garbage events committed (also when a later phase failed: they are ordinary events).
        public var garbageCommitted = 0
        /// Write transactions the garbage events were committed in, and the longest of them
        /// (from submitting to durable: waiting for the write lock, the fold, the sync).
        public var garbageTransactions = 0
        public var garbageLongestSeconds: Double = 0
        /// `data.mdb` of the active generation, before and after.
        public var databaseBytesBefore: Int = 0
        public var databaseBytesAfter: Int = 0
        /// Every file under the store directory (generations, snapshots), before and after.
        public var totalBytesBefore: Int = 0
        public var totalBytesAfter: Int = 0
        public var snapshotBytes: Int = 0
        public var generationBefore = ""
        public var generationAfter = ""
        public var catchUpRounds = 0
        public var recordsCaughtUp: UInt64 = 0
        /// Records folded while every writer was held, and for how long.
        public var recordsAtSwitch: UInt64 = 0
        public var writePauseSeconds: Double = 0
        public var leftoversRemoved: [String] = []
        /// The free space the run needed and found (estimated before it wrote anything).
        public var space = SpacePlan()
        /// Seconds per phase, in order.
        public var phases: [(String, Double)] = []
        public var seconds: Double = 0
    }

    /// Runs a compaction of the store in `directory`. `store`, when given, is the
    /// process's open store on that directory (LMDB allows one open per process);
    /// it keeps serving and moves to the new generation. Otherwise one is opened
    /// (read-only for a dry run) and closed at the end.
    /// Refuses to compact a store whose database belongs to another user: the
    /// generation, CURRENT and snapshot it writes would be this user's, and the
    /// store's own server (say, running as a service user while root's cron
    /// compacts) could no longer open them.
    static func requireOwner(of directory: String) throws {
        let data = TopicStore.generationDirectory(directory, try TopicStore.activeGeneration(in: directory)) + "/data.mdb"
        var st = stat()
        guard stat(data, &st) == 0 else { return }  // opening it reports what is wrong
        let me = geteuid()
        guard st.st_uid != me else { return }
        func user(_ uid: uid_t) -> String {
            guard let pw = getpwuid(uid) else { return "uid \(uid)" }
            return "\(String(cString: pw.pointee.pw_name)) (uid \(uid))"
        }
        throw CompactionError.refused("""
            \(data) belongs to \(user(st.st_uid)), and this runs as \(user(me)): the files compaction writes \
            would be \(user(me))'s, which the store's own server could not open. Run compact as its owner \
            (for example: sudo -u \(getpwuid(st.st_uid).map { String(cString: $0.pointee.pw_name) } ?? "#\(st.st_uid)") topicstore compact …)
            """)
    }

    public static func run(directory: String, options: Options, store given: TopicStore? = nil,
                           progress: ((ReplayProgress) -> Void)? = nil) throws -> Report {
        let started = Date()
        var clock = PhaseClock()
        // Compaction works on a store; it never creates one (an empty or missing
        // directory is refused as every read command refuses it, before the lock opens it).
        try TopicStore.requireExisting(directory: directory)
        if !options.compactFile, options.archiveDirectory != nil {
            throw CompactionError.refused("without a new file generation (--no-file) no event leaves the log, so there is nothing to archive: drop --archive, or --no-file")
        }
        if !options.dryRun { try requireOwner(of: directory) }
        let lock = try DirectoryLock(directory)
        defer { lock.release() }

        var storeOptions = TopicStore.Options()
        storeOptions.readOnly = options.dryRun
        let live = try given ?? TopicStore(directory: directory, options: storeOptions)
        defer { if given == nil { live.close() } }

        let now = options.now ?? Int64(Date().timeIntervalSince1970 * 1000)
        let log = live.log
        let tables = live.tables
        let (bounds, compactedHead) = try live.read { txn in (try log.bounds(txn), try tables.compactedChainHead(txn)) }
        // A log with no record after its horizon (a replay exactly at the horizon writes
        // one) is empty: its horizon is then the compaction head in its meta, and the
        // snapshot there is kept, not taken for a leftover.
        let previousHorizon = bounds.map { $0.first - 1 } ?? compactedHead?.sequence ?? 0
        var report = Report(dryRun: options.dryRun, directory: directory, firstBefore: bounds?.first, lastBefore: bounds?.last,
                            horizon: previousHorizon, previousHorizon: previousHorizon, eventsRemoved: 0, eventsArchived: 0)
        report.generationBefore = try TopicStore.activeGeneration(in: directory)
        report.generationAfter = report.generationBefore
        report.databaseBytesBefore = databaseBytes(directory, report.generationBefore)
        report.totalBytesBefore = treeBytes(directory)

        // Leftovers of a killed run (the open above has completed or rolled back any
        // half-done switch), removed once the run is known to fit.
        let leftovers = Leftovers.find(directory: directory, activeGeneration: report.generationBefore,
                                       currentHorizon: previousHorizon, archive: options.archiveDirectory)
        report.leftoversRemoved = leftovers

        // 1. Plan.
        let cutoff = now - options.retain.milliseconds
        var retentionHorizon = previousHorizon
        if let bounds {
            let atCutoff = try live.read { txn in try log.lastSequence(atOrBefore: cutoff, txn) } ?? previousHorizon
            retentionHorizon = max(previousHorizon, min(atCutoff, bounds.last - 1))
        }
        // The log is trimmed only in a new file generation (nothing is ever removed from the
        // live one): without it the horizon stays, and no snapshot or archive is written
        // (the next run would remove both as leftovers of an interrupted run).
        let horizon = options.compactFile ? retentionHorizon : previousHorizon
        let topicHorizon: UInt64
        if let idle = options.garbage.topicIdle {
            topicHorizon = try live.read { txn in try log.lastSequence(atOrBefore: now - idle.milliseconds, txn) } ?? previousHorizon
        } else {
            topicHorizon = try live.read { txn in try log.lastSequence(atOrBefore: cutoff, txn) } ?? previousHorizon
        }
        let rejectedBefore = now - options.garbage.rejectedGrace.milliseconds
        let plan = try GarbagePlan.scan(live, rules: options.garbage, topicHorizon: topicHorizon, rejectedBefore: rejectedBefore) {
            progress?(ReplayProgress(phase: $0, done: $1, total: $2))
        }
        report.horizon = horizon
        report.retentionHorizon = retentionHorizon
        report.logTrimmed = options.compactFile
        report.eventsRemoved = horizon - previousHorizon
        report.devicesForgotten = plan.forgetDevices.count
        report.topicsDropped = plan.dropTopics.count
        report.tokensExpired = plan.expireTokens.count
        // Completed notifications never change again: the ones found now are the ones removed.
        let expiredNotifications = try SendQueue.completed(before: cutoff, in: live)
        report.notificationsRemoved = expiredNotifications.count
        if horizon > previousHorizon {
            report.horizonTime = try live.read { txn in try log.record(at: horizon, txn)?.timestamp }
        }
        if options.archiveDirectory != nil { report.eventsArchived = report.eventsRemoved }

        // Before anything is written: does the run fit on the disk?
        report.space = try SpacePlan.estimate(store: live, directory: directory, previous: previousHorizon, horizon: horizon,
                                              garbageEvents: plan.events.count, newFile: options.compactFile,
                                              archive: options.archiveDirectory, leftovers: leftovers)
        clock.lap("plan")
        if options.dryRun {
            report.databaseBytesAfter = report.databaseBytesBefore
            report.totalBytesAfter = report.totalBytesBefore
            report.phases = clock.phases
            report.seconds = Date().timeIntervalSince(started)
            return report
        }
        if options.checksSpace, var why = report.space.refusal(directory: directory, newFile: options.compactFile) {
            // What a killed or failed run left is never the store's: it goes even so, or it
            // would keep the disk full for the store's own writers.
            if !leftovers.isEmpty {
                let bytes = leftovers.reduce(0) { $0 + treeBytes($1) + Filesystem.fileBytes($1) }
                try Leftovers.remove(leftovers)
                why += " (Leftovers of an interrupted run were removed all the same, \(CompactionReportFormat.bytes(bytes)): \(leftovers.map { ($0 as NSString).lastPathComponent }.joined(separator: ", ")).)"
            }
            throw CompactionError.noSpace(why)
        }
        try Leftovers.remove(leftovers)
        clock.lap("leftovers")

        // From here on a failure removes what this run wrote, unless the switch committed it.
        var run = RunState(directory: directory, previousHorizon: previousHorizon, hook: options.testHook)
        do {
            try runPhases(&run, &report, &clock, live: live, expiredNotifications: expiredNotifications,
                          plan: plan, options: options, horizon: horizon,
                          topicHorizon: topicHorizon, rejectedBefore: rejectedBefore, now: now, progress: progress)
        } catch {
            throw run.failed(error, store: live, garbageCommitted: report.garbageCommitted)
        }
        report.databaseBytesAfter = databaseBytes(directory, report.generationAfter)
        report.totalBytesAfter = treeBytes(directory)
        report.phases = clock.phases
        report.seconds = Date().timeIntervalSince(started)
        return report
    }

    /// Phases 2–6 (see the type's notes), tracked in `run`.
    private static func runPhases(_ run: inout RunState, _ report: inout Report, _ clock: inout PhaseClock, live: TopicStore,
                                  expiredNotifications: [String],
                                  plan: GarbagePlan, options: Options, horizon: UInt64, topicHorizon: UInt64,
                                  rejectedBefore: Int64, now: Int64, progress: ((ReplayProgress) -> Void)?) throws {
        let directory = run.directory
        let previousHorizon = run.previousHorizon
        let log = live.log

        // 2. Garbage, as events through the write path (rechecked just before).
        if !plan.isEmpty {
            try run.enter("garbage")
            let fresh = try plan.rechecked(live, topicHorizon: topicHorizon, rejectedBefore: rejectedBefore)
            report.garbageSkipped = plan.events.count - fresh.events.count
            report.devicesForgotten = fresh.forgetDevices.count
            report.topicsDropped = fresh.dropTopics.count
            report.tokensExpired = fresh.expireTokens.count
            let events = fresh.events
            var i = 0
            while i < events.count {
                let batch = Array(events[i..<min(events.count, i + max(1, options.garbageBatchSize))])
                let started = Date()
                for result in live.submitAndWait(batch) { _ = try result.get() }
                report.garbageLongestSeconds = max(report.garbageLongestSeconds, Date().timeIntervalSince(started))
                report.garbageTransactions += 1
                report.garbageCommitted += batch.count
                i += batch.count
                progress?(ReplayProgress(phase: "garbage", done: UInt64(i), total: UInt64(events.count)))
            }
            clock.lap("garbage")
        }
        // 2b. Sent notifications past the retention window: without this their records and
        // pinned audiences (a bitmap of every device a send reached) stayed for ever.
        if !expiredNotifications.isEmpty {
            try run.enter("notifications")
            try SendQueue.remove(expiredNotifications, in: live)
            clock.lap("notifications")
        }

        // 3. Snapshot at the horizon, and 4. the archive, before anything is removed.
        var snapshotHead: ChainHead?
        if horizon > previousHorizon {
            try run.enter("snapshot")
            let previous = try Replay.snapshot(of: live)
            let snapshotDir = Snapshot.directory(inStore: directory, horizon: horizon)
            if Snapshot.horizons(inStore: directory).contains(horizon) {
                try FileManager.default.removeItem(atPath: snapshotDir)  // unused: made by a killed run
            }
            let (head, time) = try live.read { txn -> (ChainHead, Int64) in
                guard let (part, time) = try log.withRecordBytes(at: horizon, txn, {
                    (try RecordCodec.storedLinkPart(of: $0, key: horizon), try RecordCodec.timestamp(of: $0, key: horizon))
                }) else {
                    throw CompactionError.internalState("record \(horizon) is missing")
                }
                guard part != .none else {
                    throw CompactionError.refused("record \(horizon) is a version 1 record without a chain link; compaction needs a chained log")
                }
                let link = try live.chainLink(at: horizon, txn)
                return (ChainHead(sequence: horizon, hash: link), time)
            }
            // Its temporary directories, and then the snapshot itself, are this run's until the switch.
            run.created += Snapshots.temporaryDirectories(storeDirectory: directory, horizon: horizon) + [snapshotDir]
            _ = try Snapshots.make(from: live, storeDirectory: directory, head: head, timestamp: time, now: now, progress: progress)
            snapshotHead = head
            report.horizonTime = time
            report.snapshotBytes = treeBytes(snapshotDir)
            try run.enter("snapshot-written")
            clock.lap("snapshot")

            if let archiveDir = options.archiveDirectory {
                try run.enter("archive")
                let chainBefore = previous?.head.hash ?? .genesis
                let from = previousHorizon + 1
                if previous == nil && from > 1 { throw CompactionError.internalState("no snapshot before seq \(from)") }
                run.created.append((archiveDir as NSString).appendingPathComponent(Archive.fileName(from: from, to: horizon)))
                let summary = try Archive.write(from: live, from: from, to: horizon, into: archiveDir, chainBefore: chainBefore,
                                                level: options.archiveLevel, progress: progress)
                report.archivePath = summary.path
                report.archiveBytes = summary.compressedBytes
                report.archiveJSONBytes = summary.jsonBytes
                report.eventsArchived = summary.records
                try run.enter("archive-written")
                clock.lap("archive")
            }
        }

        // 5. The new file generation, and the switch.
        if options.compactFile {
            try run.enter("copy")
            let gen = nextGeneration(after: report.generationBefore, in: directory)
            let genDir = TopicStore.generationDirectory(directory, gen)
            try? FileManager.default.removeItem(atPath: genDir)
            run.created.append(genDir)
            let mapSize = max(live.environment.info().mapSize, 256 << 20)
            // One pass, table by table in key order, every page full (`PackedCopy`): LMDB's
            // compacting copy kept the half-empty leaves that random updates leave, and the log
            // records up to the horizon are left out instead of copied and deleted again.
            try FileManager.default.createDirectory(atPath: genDir, withIntermediateDirectories: true)
            var firstKept: [String: [UInt8]] = [:]
            if horizon > previousHorizon { firstKept[log.database.name] = EventLog.key(horizon + 1) }
            _ = try live.packedCopy(to: genDir, startingAt: firstKept, packingLogAfter: options.logBlocks ? horizon : nil)
            clock.lap("copy")
            try run.enter("copy-generation")
            try run.enter("catch-up")
            var builder = try GenerationBuilder(directory: genDir, mapSize: mapSize)
            defer { builder.close() }
            // The chain head at the horizon: the new log goes on from it.
            if horizon > previousHorizon, let head = snapshotHead { try builder.setCompactedHead(head) }
            // The writer's device_id and token indexes are read now, not in the switch while every writer waits.
            try builder.prepareWriter()
            // Catch up outside the switch until what is left is small.
            while report.catchUpRounds < options.maxCatchUpRounds {
                let last = try live.read { txn in try log.bounds(txn)?.last ?? 0 }
                if last <= builder.appliedSequence + UInt64(options.catchUpThreshold) { break }
                report.catchUpRounds += 1
                while builder.appliedSequence < last {
                    let chunk = try live.read { txn in try builder.pending(from: log, limit: 50_000, txn) }
                    if chunk.isEmpty { break }
                    try builder.apply(chunk)
                    report.recordsCaughtUp += UInt64(chunk.count)
                    progress?(ReplayProgress(phase: "catch-up", done: builder.appliedSequence, total: last))
                }
            }
            try builder.sync()
            clock.lap("catch-up")

            // The switch: every writer waits while the last records are folded in.
            // Timed around the whole call: waiting for the write lock, the catch-up, the marker, the rename.
            try run.enter("switch")
            run.switchingTo = gen
            let pauseStarted = Date()
            var atSwitch: UInt64 = 0
            try live.retire(to: gen) { oldTxn in
                // Called again if LMDB had to grow the map (the write lock was let go meanwhile):
                // carries over what is still missing, into the generation opened again.
                if builder.environment == nil {
                    builder = try GenerationBuilder(directory: genDir, mapSize: mapSize)
                    try builder.prepareWriter()
                }
                while true {
                    let chunk = try builder.pending(from: log, limit: 50_000, oldTxn)
                    if chunk.isEmpty { break }
                    try builder.apply(chunk)
                    atSwitch += UInt64(chunk.count)
                }
                try builder.sync()
                // Closed before the store can reopen there: two opens of one file in a
                // process would share (and release) its POSIX locks.
                builder.close()
            }
            run.committed = true
            report.writePauseSeconds = Date().timeIntervalSince(pauseStarted)
            report.recordsAtSwitch = atSwitch
            report.generationAfter = gen
            clock.lap("switch")
            try run.enter("switched")

            // 6. The old generation is garbage now (processes still on it reopen on the new one).
            try run.enter("cleanup")
            try removeGeneration(report.generationBefore, in: directory)
        }
        // Older snapshots only once the store has switched to a generation whose log starts after
        // `horizon`: until then its log continues from the snapshot at the previous horizon.
        if report.generationAfter != report.generationBefore {
            for h in Snapshot.horizons(inStore: directory) where h != horizon {
                try? FileManager.default.removeItem(atPath: Snapshot.directory(inStore: directory, horizon: h))
            }
        }
        clock.lap("cleanup")
    }

    // MARK: Generations and files

    /// `g000001` after "", `g000002` after `g000001`.
    static func nextGeneration(after current: String, in directory: String) -> String {
        TopicStore.nextGenerationName(after: current)
    }

    /// Removes a generation no store opens any more. Generation "" is the
    /// database files in the store directory itself.
    static func removeGeneration(_ generation: String, in directory: String) throws {
        let fm = FileManager.default
        if generation.isEmpty {
            for name in ["data.mdb", "lock.mdb"] {
                let path = (directory as NSString).appendingPathComponent(name)
                if fm.fileExists(atPath: path) { try fm.removeItem(atPath: path) }
            }
        } else {
            let path = TopicStore.generationDirectory(directory, generation)
            if fm.fileExists(atPath: path) { try fm.removeItem(atPath: path) }
        }
    }

    static func databaseBytes(_ directory: String, _ generation: String) -> Int {
        let path = (TopicStore.generationDirectory(directory, generation) as NSString).appendingPathComponent("data.mdb")
        return ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    /// Bytes of every regular file under `path`.
    public static func treeBytes(_ path: String) -> Int {
        let fm = FileManager.default
        guard let walker = fm.enumerator(atPath: path) else { return 0 }
        var total = 0
        while let name = walker.nextObject() as? String {
            let attributes = try? fm.attributesOfItem(atPath: (path as NSString).appendingPathComponent(name))
            if attributes?[.type] as? FileAttributeType == .typeRegular { total += attributes?[.size] as? Int ?? 0 }
        }
        return total
    }
}

/// Where a run is, and what it wrote that is not yet the store's: on a
/// failure, that is removed again and the message says which phase failed and
/// what the store holds (see `failed`).
struct RunState {
    let directory: String
    let previousHorizon: UInt64
    let hook: (@Sendable (String) throws -> Void)?
    private(set) var phase = "plan"
    /// Written by this run, oldest first: removed on a failure before the switch commits.
    /// The snapshot at the new horizon, the archive and the new generation become the
    /// store's when it commits; temporary directories never do.
    var created: [String] = []
    /// The generation the switch moves to, once it has begun.
    var switchingTo: String?
    /// The switch committed: the store is the new generation, with its snapshot.
    var committed = false

    init(directory: String, previousHorizon: UInt64, hook: (@Sendable (String) throws -> Void)?) {
        self.directory = directory
        self.previousHorizon = previousHorizon
        self.hook = hook
    }

    static let phases: [String: String] = [
        "garbage": "garbage", "notifications": "notifications", "snapshot": "snapshot", "snapshot-written": "snapshot", "archive": "archive",
        "archive-written": "archive", "copy": "new file generation",
        "copy-generation": "new file generation", "catch-up": "catch-up", "switch": "switch", "switched": "cleanup",
        "cleanup": "cleanup",
    ]

    mutating func enter(_ step: String) throws {
        phase = Self.phases[step] ?? step
        try hook?(step)
    }

    /// Temporary paths: never the store's.
    static func isTemporary(_ path: String) -> Bool {
        let name = (path as NSString).lastPathComponent
        return name.hasPrefix(".tmp-") || name.hasPrefix(".compact-copy-")
    }

    /// Removes what the failed run wrote and is not the store's, and says what happened.
    func failed(_ error: any Error, store: TopicStore, garbageCommitted: Int) -> CompactionError {
        // `retire` throws after its commit if CURRENT cannot be replaced: the store is then
        // the new generation all the same (every open finishes the switch).
        let committed = self.committed || (switchingTo != nil && (try? store.retiredTo()) == switchingTo)
        var removed: [String] = [], stuck: [String] = []
        let fm = FileManager.default
        for path in created.reversed() where !committed || Self.isTemporary(path) {
            var st = stat()
            guard lstat(path, &st) == 0 else { continue }
            do {
                try fm.removeItem(atPath: path)
                if !Self.isTemporary(path) || (path as NSString).lastPathComponent.hasPrefix(".compact-copy-") { removed.append(show(path)) }
            } catch {
                stuck.append(show(path))
            }
        }
        var text = committed
            ? "compaction failed after its switch, in the \(phase) phase: \(Self.describe(error))."
            : "compaction failed in the \(phase) phase: \(Self.describe(error))."
        if committed, let gen = switchingTo {
            text += " The compaction itself is committed: the store is now generation \(gen), its snapshot the one at its horizon;"
                + " what is left of the old generation is removed by the next run."
        } else {
            if !removed.isEmpty { text += " Removed what this run had written (\(removed.joined(separator: ", ")))." }
            text += garbageCommitted > 0
                ? " The store is unchanged except for the \(garbageCommitted) garbage event(s) committed before the failure"
                    + " (ordinary events in its log; a replay folds them too): its log, its file and its snapshot are as before."
                : " The store is unchanged."
        }
        if !stuck.isEmpty { text += " Could not remove \(stuck.joined(separator: ", ")): remove by hand (the next run also does)." }
        if Self.isOutOfSpace(error) {
            text += " \(CompactionReportFormat.bytes(Filesystem.available(at: directory))) is free in the filesystem of \(directory) now;"
                + " `topicstore compact --dry-run` estimates what a run needs."
        }
        return .failed(text)
    }

    /// A path as the message shows it: relative to the store directory when inside it.
    private func show(_ path: String) -> String {
        path.hasPrefix(directory + "/") ? String(path.dropFirst(directory.count + 1)) : path
    }

    static func describe(_ error: any Error) -> String {
        if let e = error as? CompactionError { return e.description }
        if let e = error as? LMDBError { return e.description }
        if let e = error as? CocoaError, let underlying = e.userInfo[NSUnderlyingErrorKey] as? NSError,
           underlying.domain == NSPOSIXErrorDomain {
            return "\(String(cString: strerror(Int32(underlying.code)))) (\(underlying.code))"
        }
        return "\(error)"
    }

    static func isOutOfSpace(_ error: any Error) -> Bool {
        if let e = error as? LMDBError, e.rawValue == ENOSPC || e.rawValue == EDQUOT { return true }
        if let e = error as? CocoaError, let underlying = e.userInfo[NSUnderlyingErrorKey] as? NSError,
           underlying.domain == NSPOSIXErrorDomain, underlying.code == Int(ENOSPC) { return true }
        let text = "\(error)"
        return text.contains("No space left on device") || text.contains("Disk quota exceeded")
    }
}

/// Seconds per phase.
struct PhaseClock {
    private var last = Date()
    private(set) var phases: [(String, Double)] = []
    mutating func lap(_ name: String) {
        let now = Date()
        phases.append((name, now.timeIntervalSince(last)))
        last = now
    }
}

/// An exclusive `flock` on the store directory: one compaction at a time.
final class DirectoryLock {
    private var fd: Int32
    init(_ directory: String) throws {
        // Close-on-exec: a child started meanwhile would otherwise share the lock and keep
        // the store "busy" for as long as it lives.
        fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else {
            throw CompactionError.refused("cannot open \(directory): \(String(cString: strerror(errno)))")
        }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            fd = -1
            throw CompactionError.busy(directory)
        }
    }
    func release() {
        if fd >= 0 { close(fd); fd = -1 }
    }
    deinit { release() }
}

/// Snapshot creation: a projections-only rebuild through the horizon into a
/// temporary directory, its manifest, then one rename.
enum Snapshots {
    /// Where `make` rebuilds the projections and where it packs them, before the rename.
    static func temporaryPaths(storeDirectory: String, horizon: UInt64) -> (String, String) {
        let tmp = (Snapshot.folder(inStore: storeDirectory) as NSString).appendingPathComponent(".tmp-\(horizon)-\(getpid())")
        return (tmp, tmp + "-packed")
    }

    static func temporaryDirectories(storeDirectory: String, horizon: UInt64) -> [String] {
        let (tmp, packed) = temporaryPaths(storeDirectory: storeDirectory, horizon: horizon)
        return [tmp, packed]
    }

    static func make(from store: TopicStore, storeDirectory: String, head: ChainHead, timestamp: Int64, now: Int64,
                     progress: ((ReplayProgress) -> Void)?) throws -> Snapshot {
        let folder = Snapshot.folder(inStore: storeDirectory)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let (tmp, packed) = temporaryPaths(storeDirectory: storeDirectory, horizon: head.sequence)
        try? FileManager.default.removeItem(atPath: tmp)
        try? FileManager.default.removeItem(atPath: packed)
        var options = Replay.Options()
        options.includeLog = false
        options.writesInsideStore = true  // snapshots/ is compaction's own
        let report = try Replay.rebuild(from: store, to: .sequence(head.sequence), into: tmp, options: options, progress: progress)
        guard report.through == head.sequence else {
            throw CompactionError.internalState("the snapshot rebuild stopped at \(report.through), not \(head.sequence)")
        }
        // The head at the horizon also goes into the snapshot's meta, as into the new generation's
        // (`compactedHead`), so a rebuild from the snapshot and the live store agree entry for entry.
        do {
            var envOptions = Environment.Options()
            envOptions.maxDatabases = 32
            envOptions.mapSize = 1 << 30
            let env = try Environment(path: tmp, options: envOptions)
            let tables = try ProjectionTables.open(in: env, create: false)
            try env.write { txn in try tables.setCompactedChainHead(head, txn) }
            // (That commit is synced: the rebuild's own commits were not, and `finish` synced them.)
            if !report.wroteInKeyOrder {
                // Written in rounds, or on top of the previous snapshot's copy: inserts in
                // random key order leave leaves part empty, and a packed copy writes them full.
                try FileManager.default.createDirectory(atPath: packed, withIntermediateDirectories: true)
                _ = try PackedCopy.copy(env, to: packed)
            }
        }
        if report.wroteInKeyOrder {
            // Every table was appended once in key order into an empty file: its pages are
            // full already. A packed copy of it was as large (3,229,642,752 bytes against
            // 3,229,626,368 at 10M devices) and wrote it all again.
            try FileManager.default.moveItem(atPath: tmp, toPath: packed)
        } else {
            try FileManager.default.removeItem(atPath: tmp)
        }
        let snapshot = Snapshot(directory: packed, head: head, timestamp: timestamp, createdAt: now)
        try snapshot.writeManifest()
        for name in ["data.mdb"] { try Durable.syncFile((packed as NSString).appendingPathComponent(name)) }
        let final = Snapshot.directory(inStore: storeDirectory, horizon: head.sequence)
        guard rename(packed, final) == 0 else {
            throw CompactionError.internalState("cannot rename \(packed) to \(final): \(String(cString: strerror(errno)))")
        }
        try Durable.syncDirectory(folder)
        return Snapshot(directory: final, head: head, timestamp: timestamp, createdAt: now)
    }
}

/// What a killed compaction may leave behind.
enum Leftovers {
    static func find(directory: String, activeGeneration: String, currentHorizon: UInt64, archive: String?) -> [String] {
        let fm = FileManager.default
        var out: [String] = []
        let names = (try? fm.contentsOfDirectory(atPath: directory)) ?? []
        for name in names {
            let path = (directory as NSString).appendingPathComponent(name)
            if name.hasPrefix(".compact-copy-") { out.append(path); continue }
            // Generation directories other than the active one: unfinished, or retired and not yet removed.
            if TopicStore.isGenerationName(name), name != activeGeneration {
                out.append(path)
            }
        }
        if !activeGeneration.isEmpty {
            for name in ["data.mdb", "lock.mdb"] where names.contains(name) {
                out.append((directory as NSString).appendingPathComponent(name))  // generation "" after a switch
            }
        }
        let folder = Snapshot.folder(inStore: directory)
        for name in (try? fm.contentsOfDirectory(atPath: folder)) ?? [] {
            let path = (folder as NSString).appendingPathComponent(name)
            if name.hasPrefix(".tmp-") { out.append(path); continue }
            if let h = UInt64(name), h != currentHorizon { out.append(path) }
        }
        if let archive {
            for name in (try? fm.contentsOfDirectory(atPath: archive)) ?? [] {
                let path = (archive as NSString).appendingPathComponent(name)
                if name.hasPrefix(".log-"), name.contains(".tmp-") { out.append(path); continue }
                // An archive of events still in the log: written by a run killed before its switch.
                if let range = Archive.range(ofFileName: name), range.lowerBound > currentHorizon { out.append(path) }
            }
        }
        return out.sorted()
    }

    static func remove(_ paths: [String]) throws {
        for p in paths { try FileManager.default.removeItem(atPath: p) }
    }
}
