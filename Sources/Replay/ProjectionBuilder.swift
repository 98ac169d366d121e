import Foundation
import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// A new store directory being built record by record: the projections folded
/// with `Fold.apply` (the one fold the live path uses) and, optionally, the log
/// records themselves, so the result is a store any read command opens.
///
/// Commits are not fsynced (the build can be redone); `finish()` syncs once.
///
/// With a memory budget (the default for replay, audit and import), the writer
/// runs in build mode: the fold's results stay in memory, with no LMDB lookups
/// while the target is empty, and are written table by table in key order
/// (`MDB_APPEND`) by `writeProjections()` — at the end, or in rounds whenever
/// the build outgrows the budget. Without one, every commit writes through.
/// The first write of a build into an empty store lays the file out itself
/// (`PageFileWriter`) and opens it in place of the one it had.
final class ProjectionBuilder {
    let directory: String
    /// Opened again on the file laid out by the first write of a build from nothing.
    private(set) var environment: Environment
    let log: EventLog
    let tables: ProjectionTables
    let writer: ProjectionWriter
    let writesLog: Bool
    /// Whether the writer builds in memory (see the type's note).
    let inMemory: Bool
    /// How many times the build was written before the end (budget rounds).
    private(set) var rounds = 0
    /// Whether the store was empty when the build began (not continuing a snapshot).
    private let startedEmpty: Bool
    /// Whether every table was written once, in key order (`MDB_APPEND`), into
    /// an empty store: built in memory, in one round, from nothing. Its pages are
    /// then as full as a packed copy's (`PackedCopy`), which adds nothing.
    var wroteInKeyOrder: Bool { inMemory && startedEmpty && rounds == 0 }
    /// Time spent writing the build into LMDB (build mode), in seconds.
    private(set) var writeSeconds = 0.0
    /// The last sequence folded (and committed).
    private(set) var appliedSequence: UInt64 = 0
    /// The chain link of the last record written to the log (when writing it).
    private(set) var link = ChainHash.genesis
    private(set) var lastTimestamp: Int64 = .min

    /// Creates the store in `directory`, which must not exist or be empty,
    /// laying topics out as `topicLayout` says and keying topic codes as
    /// `topicCodeOrder` says (a rebuild: as the store it rebuilds does, so
    /// that an audit compares the two key by key).
    convenience init(creating directory: String, writesLog: Bool, mapSize: Int = 1 << 30,
                     memoryBudget: Int? = ProjectionBuilder.defaultMemoryBudget,
                     topicLayout: ProjectionTables.TopicLayout = .compact,
                     topicCodeOrder: ProjectionTables.TopicCodeOrder = .byLength) throws {
        try Self.prepare(directory)
        try self.init(opening: directory, writesLog: writesLog, mapSize: mapSize, memoryBudget: memoryBudget, targetIsEmpty: true)
        let tables = self.tables
        try environment.write { txn in
            try tables.setTopicLayout(topicLayout, txn)
            try tables.reorderTopicCodes(topicCodeOrder, txn)
        }
    }

    /// A third of the machine's memory, at most 8 GiB: a 10M-device build fits in one round.
    static var defaultMemoryBudget: Int {
        min(8 << 30, Int(ProcessInfo.processInfo.physicalMemory / 3))
    }

    /// Creates the store in `directory` (new or empty) from `snapshot`: its
    /// projections as of the horizon, to be continued with the records after it
    /// (chained from the snapshot's head when the log is written). Its topic
    /// codes are keyed as `topicCodeOrder` says: a snapshot taken before
    /// schema 11 keeps the older form, which the store it belongs to may have
    /// left since (or not, when an audit reads a store not opened for writing since).
    convenience init(continuing snapshot: Snapshot, creating directory: String, writesLog: Bool, mapSize: Int = 1 << 30,
                     memoryBudget: Int? = ProjectionBuilder.defaultMemoryBudget,
                     topicCodeOrder: ProjectionTables.TopicCodeOrder = .byLength) throws {
        try Self.prepare(directory)
        try snapshot.copyDatabase(to: directory)
        try self.init(opening: directory, writesLog: writesLog, mapSize: mapSize, memoryBudget: memoryBudget, targetIsEmpty: false)
        let tables = self.tables
        try environment.write { txn in try tables.reorderTopicCodes(topicCodeOrder, txn) }
        let (applied, logBounds) = try environment.read { txn in (try tables.appliedSequence(txn), try log.bounds(txn)) }
        guard applied == snapshot.sequence, logBounds == nil else {
            throw ReplayError.badSnapshot(snapshot.directory,
                "its projections are as of seq \(applied), its manifest says \(snapshot.sequence)\(logBounds == nil ? "" : ", and it holds log records")")
        }
        appliedSequence = snapshot.sequence
        link = snapshot.head.hash
        lastTimestamp = snapshot.timestamp
    }

    private init(opening directory: String, writesLog: Bool, mapSize: Int, memoryBudget: Int?, targetIsEmpty: Bool) throws {
        let env = try Environment(path: directory, options: Self.options(mapSize: max(mapSize, 64 << 20)))
        self.directory = directory
        self.environment = env
        self.log = try EventLog.open(in: env, create: true)
        self.tables = try ProjectionTables.open(in: env, create: true)
        if let memoryBudget {
            self.writer = ProjectionWriter(tables: tables, buildingWithEmptyTarget: targetIsEmpty, memoryBudget: memoryBudget)
        } else {
            self.writer = ProjectionWriter(tables: tables)
        }
        self.inMemory = memoryBudget != nil
        self.startedEmpty = targetIsEmpty
        self.writesLog = writesLog
    }

    /// Commits are not synced: `finish()` syncs once.
    private static func options(mapSize: Int) -> Environment.Options {
        var options = Environment.Options()
        options.mapSize = mapSize
        options.noSync = true
        options.maxDatabases = 32
        return options
    }

    static func prepare(_ directory: String) throws {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        if fm.fileExists(atPath: directory, isDirectory: &isDir) {
            guard isDir.boolValue else { throw ReplayError.outputNotEmpty(directory, "it is not a directory") }
            let contents = try fm.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }
            guard contents.isEmpty else {
                throw ReplayError.outputNotEmpty(directory, "it holds \(contents.sorted().prefix(3).joined(separator: ", "))")
            }
        } else {
            try fm.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
    }

    /// Folds `chunk` (records in sequence order, the next after `appliedSequence`)
    /// in one write transaction; when writing the log, copies the encoded bytes
    /// if the chunk has them or encodes the records chained to the log's head.
    /// A full map is grown and the transaction redone.
    func apply(_ chunk: RecordChunk) throws { try apply([chunk]) }

    /// Folds `chunks` in one write transaction (see `apply(_:)`).
    func apply(_ chunks: [RecordChunk]) throws {
        try namingAFullDisk { try applyInOneTransaction(chunks) }
    }

    /// Runs `body`, which writes the store: a write that failed for want of room
    /// is thrown as `StoreError.storageFull` naming the directory (LMDB reports
    /// a write the filesystem cut short as EIO: a `replay` or an `import` onto a
    /// full disk said only `Input/output error (5)`).
    private func namingAFullDisk<R>(_ body: () throws -> R) throws -> R {
        do { return try body() } catch { throw TopicStore.storageFull(error, directory: directory) }
    }

    private func applyInOneTransaction(_ chunks: [RecordChunk]) throws {
        guard chunks.contains(where: { !$0.records.isEmpty }) else { return }
        if inMemory {
            var held = chunks  // copied (each record retained) when the fold moves its records
            return try applyInMemory(&held)
        }
        while true {
            do {
                let (newLink, newTime) = try environment.write { txn -> (ChainHash, Int64) in
                    try writer.begin(txn)
                    var link = self.link
                    var time = self.lastTimestamp
                    for chunk in chunks {
                        let copyRaw = writesLog && chunk.ends.count == chunk.records.count
                        for (i, record) in chunk.records.enumerated() {
                            if writesLog {
                                try appendToLog(chunk, i, copyRaw: copyRaw, link: &link, time: &time, txn)
                            }
                            time = max(time, record.timestamp)
                            try Fold.apply(record, to: writer, txn)
                        }
                    }
                    try writer.flush(txn)
                    return (link, time)
                }
                link = newLink
                lastTimestamp = newTime
                appliedSequence = chunks.last(where: { !$0.records.isEmpty })!.records.last!.sequence
                return
            } catch LMDBError.mapFull {
                try environment.setMapSize(environment.info().mapSize * 2)
            }
        }
    }

    /// How many events ahead the fold prefetches, and for how many events at a
    /// time (see `ProjectionWriter.prefetch`): the slots of events 8 to 15
    /// ahead start loading every 8 events.
    static let prefetchDistance = 8
    static let prefetchBatch = 8

    /// `apply(_:)` for chunks nothing else holds (the caller hands them over):
    /// a build in memory folds their records where they are, no copy made.
    func apply(taking chunks: inout [RecordChunk]) throws {
        guard inMemory else { return try apply(chunks) }
        guard chunks.contains(where: { !$0.records.isEmpty }) else { return }
        try namingAFullDisk { try applyInMemory(&chunks) }
    }

    /// Build mode: the log records (when written) in their own transaction,
    /// then the fold in memory, over a read transaction for what the target
    /// held before; a round is written when the build outgrows its budget.
    ///
    /// Each record is moved out of its chunk while it is folded and back
    /// after: `Fold.apply` borrows a value it was given, where a record
    /// borrowed from the chunk's buffer was copied first (a retain and a
    /// release of each of its strings, 5–6% of the folding thread).
    private func applyInMemory(_ chunks: inout [RecordChunk]) throws {
        var time = lastTimestamp
        for chunk in chunks { for record in chunk.records { time = max(time, record.timestamp) } }
        if writesLog {
            link = try writeLog(chunks)
        }
        try environment.read { txn in
            try writer.begin(txn)
            for k in chunks.indices {
                let hinted = chunks[k].hintEnds.count == chunks[k].records.count
                let (hintValues, hintEnds) = (chunks[k].hints, chunks[k].hintEnds)
                try chunks[k].records.withUnsafeMutableBufferPointer { records in
                    try hintValues.withUnsafeBufferPointer { hints in
                        try hintEnds.withUnsafeBufferPointer { ends in
                            for i in records.indices {
                                // The slots a few events ahead will probe start loading now.
                                if hinted, i % Self.prefetchBatch == 0 {
                                    let ahead = min(i + Self.prefetchDistance, records.count)
                                    let events = ahead..<min(ahead + Self.prefetchBatch, records.count)
                                    writer.prefetch(ProjectionWriter.FoldHintRun(hints: hints, ends: ends, events: events))
                                }
                                if hinted {
                                    writer.takeHints(UnsafeBufferPointer(rebasing: hints[(i == 0 ? 0 : ends[i - 1])..<ends[i]]))
                                }
                                let place = records.baseAddress! + i
                                let record = place.move()
                                defer { place.initialize(to: consume record) }
                                try Fold.apply(record, to: writer, txn)
                            }
                        }
                    }
                }
            }
        }
        lastTimestamp = time
        appliedSequence = chunks.last(where: { !$0.records.isEmpty })!.records.last!.sequence
        if writer.isOverBudget {
            try writeProjections()
            rounds += 1
        }
    }

    /// Appends record `i` of `chunk` to the log after `link`: the source's
    /// bytes as they are when `copyRaw` (the copy keeps the source's chain),
    /// else encoded and chained here. Timestamps must not go back.
    private func appendToLog(_ chunk: RecordChunk, _ i: Int, copyRaw: Bool, link: inout ChainHash,
                             time: inout Int64, _ txn: borrowing Transaction) throws {
        let record = chunk.records[i]
        guard record.timestamp >= time else {
            throw ReplayError.invalidInput(sequence: record.sequence,
                "timestamp \(record.timestamp) is before the previous record's \(time)")
        }
        time = record.timestamp
        if copyRaw {
            let key = EventLog.key(record.sequence)
            var next = link
            try chunk.encoded(i).withUnsafeBytes { b in
                try key.withUnsafeBytes { k in try txn.put(log.database, k, b, flags: .append) }
                // The link the reader computed checking the chain; else a whole link as stored, or a
                // version 5 record's computed here (hashing it again: 20% of a replay with its log).
                next = try chunk.link(i) ?? RecordCodec.unverifiedLink(of: b)
                    ?? (b.first == RecordCodec.legacyVersion ? .genesis : RecordCodec.verifyLink(of: b, key: record.sequence, previous: link))
            }
            link = next
        } else {
            try log.append(encoded: try RecordCodec.encode(record.logRecord, chainingFrom: &link), sequence: record.sequence, txn)
        }
    }

    /// Appends `chunks`' records to the log (a full map is grown and the
    /// transaction redone); returns the chain link after the last.
    private func writeLog(_ chunks: [RecordChunk]) throws -> ChainHash {
        while true {
            do {
                return try environment.write { txn -> ChainHash in
                    var link = self.link
                    var time = self.lastTimestamp
                    for chunk in chunks {
                        let copyRaw = chunk.ends.count == chunk.records.count
                        for i in chunk.records.indices {
                            try appendToLog(chunk, i, copyRaw: copyRaw, link: &link, time: &time, txn)
                        }
                    }
                    return link
                }
            } catch LMDBError.mapFull {
                try environment.setMapSize(environment.info().mapSize * 2)
            }
        }
    }

    /// The sequence the build was last written through (`writeProjections`).
    private var writtenThrough: UInt64?

    /// Build mode: writes what the build holds, each table in key order, in
    /// one transaction (a full map is grown and it is redone). Without build
    /// mode every commit has written already: nothing to do. Nothing folded
    /// since the last write, nothing is written (a rebuild's `finish()` after its
    /// fold's write committed the same applied sequence and stamp again).
    func writeProjections() throws {
        guard inMemory, writtenThrough != appliedSequence else { return }
        let started = Date()
        defer { writeSeconds += Date().timeIntervalSince(started) }
        if writer.holdsBuildForEmptyTarget {
            try writeIntoNewFile()
            writtenThrough = appliedSequence
            return
        }
        while true {
            do {
                try environment.write { txn in try writer.writeBuild(txn) }
                writer.didWriteBuild()
                writtenThrough = appliedSequence
                return
            } catch LMDBError.mapFull {
                try environment.setMapSize(environment.info().mapSize * 2)
            }
        }
    }

    /// The first write of a build into an empty store: the build's bulk tables
    /// are laid out in a new data file (`PageFileWriter`), beside what the store's
    /// other tables hold once the rest of the build is committed into them; the new
    /// file then takes the old one's place and is opened instead. Through LMDB's
    /// puts (`MDB_APPEND`), bench's 1M store's five million entries took 0.93 s, two
    /// thirds of it LMDB's own work per put. The file is written past the page
    /// cache: a rebuild's output is not served from at once, and the copy into
    /// the cache cost as much CPU as the write-out had spare (1M: write-out
    /// 0.77 → 0.59 s).
    private func writeIntoNewFile() throws {
        let newFile = directory + "/data.mdb.build"
        let bulk = writer.bulkTables
        do {
            let file = try { () throws -> PageFileWriter in
                while true {
                    // A page file for each attempt: the one before, and the writes its
                    // thread still had queued, are gone with its scope (its deinit
                    // waits for them) before this one truncates the file.
                    let attempt = try PageFileWriter(path: newFile, mode: Environment.dataFileMode, bypassingPageCache: true)
                    do {
                        try environment.write { txn in try writer.writeBuild(txn, bulkInto: attempt) }
                        return attempt
                    } catch LMDBError.mapFull {
                        // (The small tables filled the map.)
                        try environment.setMapSize(environment.info().mapSize * 2)
                    }
                }
            }()
            writer.didWriteBuild()
            try environment.read { txn in try PackedCopy.copyTables(from: txn, except: Set(bulk.map(\.name)), into: file) }
            try file.finish(mapSize: environment.info().mapSize)
        } catch {
            unlink(newFile)
            throw error
        }
        let mapSize = environment.info().mapSize
        environment.close()
        let renamed = rename(newFile, directory + "/data.mdb") == 0
        let renameError = errno
        if renamed {
            let dir = open(directory, O_RDONLY | O_CLOEXEC)
            if dir >= 0 { fsync(dir); close(dir) }
        } else {
            unlink(newFile)
        }
        // (Not renamed: the old file, with the build's other tables committed, and
        // the error thrown: the build is not there.)
        environment = try Environment(path: directory, options: Self.options(mapSize: mapSize))
        // Opened in the order they were before, the tables get the same handles the writer holds.
        let log = try EventLog.open(in: environment, create: false)
        let tables = try ProjectionTables.open(in: environment, create: false)
        precondition(log.database == self.log.database && tables.all == self.tables.all,
                     "the rebuilt store's tables were opened again under other handles")
        if !renamed { throw LMDBError(rawValue: renameError) }
    }

    /// Writes the projections (build mode) and flushes everything to disk.
    func finish() throws {
        try namingAFullDisk {
            try writeProjections()
            try environment.sync(force: true)
        }
    }
}

/// Why a replay, audit, import or export could not run.
public enum ReplayError: Error, Sendable, CustomStringConvertible {
    case outputNotEmpty(String, String)
    case sameDirectory(String)
    /// The output lies inside the store directory, which compaction manages.
    case insideStore(String, store: String)
    case beyondLog(requested: UInt64, last: UInt64)
    case cannotFold(LogIssue)
    case invalidInput(sequence: UInt64, String)
    case invalidLine(line: Int, String)
    /// The point asked for lies before the compaction horizon: those events were removed from the log.
    case beforeHorizon(requested: String, horizon: UInt64, horizonTime: Int64?)
    /// An export's bound at or before the compaction horizon: the log starts after it.
    case notAfterHorizon(requested: String, horizon: UInt64, horizonTime: Int64?)
    /// The log starts after sequence 1 but the snapshot it continues from is missing.
    case missingSnapshot(horizon: UInt64, directory: String)
    /// A record an export cannot decode, and the range that export asked for.
    case damagedRecord(RecordCorruption, exportFrom: UInt64, through: UInt64)
    /// Keys of the log out of order, or records missing, where an export (its range
    /// given) or a history read it: the reading stops there rather than end early unseen.
    case damagedLog(LogIssue, exportFrom: UInt64?, through: UInt64?)
    case badSnapshot(String, String)
    /// The snapshot's manifest names another head at the horizon than the store's meta,
    /// written by the same compaction: the manifest was altered (or copied from elsewhere).
    case snapshotHeadMismatch(directory: String, manifest: ChainHead, recorded: ChainHead)
    /// An imported line's `link` (an export's checkpoint) is not the link the lines before
    /// it and it give: a line after `lastMatched` and up to `sequence` was altered.
    case checkpointMismatch(line: Int?, sequence: UInt64, recorded: ChainHash, computed: ChainHash, lastMatched: UInt64)
    case io(String)
    /// A compaction switched the store to a new generation while a long read ran, removing
    /// records it had not read yet: not damage (the run is to be repeated).
    case compactedMeanwhile(store: String, from: String, to: String)

    public var description: String {
        switch self {
        case .outputNotEmpty(let dir, let why): return "refusing to write into \(dir): \(why) (give a new or empty directory)"
        case .sameDirectory(let dir): return "the output \(dir) is the store being read; replay never writes into it"
        case .insideStore(let dir, let store):
            return "the output \(dir) is inside the store directory \(store), which compaction manages (it removes generations "
                + "and snapshots it did not make there): give a directory outside it"
        case .beyondLog(let r, let last): return "sequence \(r) is beyond the log, which ends at \(last)"
        case .cannotFold(let issue): return "cannot rebuild past \(issue)"
        case .invalidInput(let seq, let why): return "record \(seq): \(why)"
        case .invalidLine(let line, let why): return "line \(line): \(why)"
        case .beforeHorizon(let what, let horizon, let time):
            let at = time.map { " (\(TimeText.iso($0)))" } ?? ""
            return "\(what) is before the compaction horizon, seq \(horizon)\(at): the log keeps only the events after it "
                + "and replay can start no earlier (older events are in the compaction archive, if one was kept: topicstore import it)"
        case .notAfterHorizon(let what, let horizon, let time):
            let at = time.map { " (\(TimeText.iso($0)))" } ?? ""
            return "\(what) is at or before the compaction horizon, seq \(horizon)\(at): the log keeps only the events after it, "
                + "from seq \(horizon + 1) (older events are in the compaction archive, if one was kept)"
        case .missingSnapshot(let horizon, let dir):
            return "the log starts at seq \(horizon + 1) but the snapshot at its horizon, \(dir), is missing"
        case .damagedRecord(let e, let from, let through):
            var around: [String] = []
            if e.sequence > from { around.append("the records before it with --to-seq \(e.sequence - 1)") }
            if e.sequence < through { around.append("those after it with --from-seq \(e.sequence + 1)") }
            return "\(e): the export stops there" + (around.isEmpty ? "" : "; export " + around.joined(separator: ", "))
                + " (topicstore audit locates every damaged record)"
        case .damagedLog(let issue, let from, let through):
            guard let from, let through else { return "\(issue): the log cannot be read past it (topicstore audit locates every damaged record)" }
            let first = issue.missing?.lowerBound ?? issue.sequence, last = issue.missing?.upperBound ?? issue.sequence
            var around: [String] = []
            if first > from { around.append("the records before it with --to-seq \(first - 1)") }
            if last < through { around.append("those after it with --from-seq \(last + 1)") }
            return "\(issue): the export stops there" + (around.isEmpty ? "" : "; export " + around.joined(separator: ", "))
                + " (topicstore audit locates every damaged record)"
        case .badSnapshot(let dir, let why): return "the snapshot \(dir) cannot be used: \(why)"
        case .checkpointMismatch(let line, let seq, let recorded, let computed, let lastMatched):
            let at = line.map { "line \($0) (seq \(seq))" } ?? "seq \(seq)"
            return "\(at): the export recorded the chain link \(recorded.hex) there, the lines give \(computed.hex): "
                + "a line from seq \(lastMatched + 1) through \(seq) was altered"
                + (lastMatched > 0 ? " (the checkpoint at seq \(lastMatched) matched)" : "")
        case .snapshotHeadMismatch(let dir, let manifest, let recorded):
            return "the snapshot \(dir) is damaged: its \(Snapshot.manifestName) gives the head at seq \(manifest.sequence) as "
                + "\(manifest.hash.hex), the store's meta (written by the same compaction) as \(recorded.hash.hex): "
                + "the manifest was altered or comes from another store, so the chain cannot be taken up from it "
                + "(restore the store from a backup)"
        case .io(let why): return why
        case .compactedMeanwhile(let store, let from, let to):
            return "a compaction switched \(store) from generation \(from.isEmpty ? "(none)" : from) to \(to) while this ran, removing what "
                + "it had not read yet (records are in that compaction's archive, if one was kept): nothing is damaged; run it again"
        }
    }
}
