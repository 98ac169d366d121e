import Foundation
import EventJSON
import SubscriptionLog
import TopicStore

/// The log as JSON Lines, in the schema `topicstore load` reads plus `seq` and `ts`.
///
/// Every `checkpointInterval`-th record (by sequence) and the last one exported also carry
/// `link`, the record's chain link: `import` checks each against the chain it computes, so an
/// altered line is located within one interval, and each compaction archive records the head
/// it ends at. (`load` ignores it.)
public enum Export {
    public static let checkpointInterval: UInt64 = 4096

    public struct Summary: Sendable {
        public var records: UInt64
        public var firstSequence: UInt64?
        public var lastSequence: UInt64?
    }

    /// Calls `body` with the JSON line (no newline) of each record from `from`
    /// through `through`, reading in bounded read transactions. A record that
    /// does not decode stops the export with its sequence.
    @discardableResult
    public static func lines(from store: TopicStore, from: UInt64 = 1, through: UInt64 = .max,
                             recordsPerReadTransaction: Int = 50_000,
                             progress: ((ReplayProgress) -> Void)? = nil,
                             _ body: (String) throws -> Void) throws -> Summary {
        try lineBytes(from: store, from: from, through: through, recordsPerReadTransaction: recordsPerReadTransaction,
                      progress: progress) { try body(String(decoding: $0, as: UTF8.self)) }
    }

    /// `lines`, each line handed over as its UTF-8 bytes (valid only during the
    /// call): what `export` and compaction's archive write, without a String made
    /// for each line (a sixth of an export's time, perf).
    ///
    /// The hash chain is followed on a second thread (`ChainFollower`) while
    /// this one decodes and writes the lines; a read transaction's lines are
    /// handed over once the follower has passed them, so no line of a record
    /// altered with its checksum recomputed, nor of any record after it, is
    /// ever handed over.
    @discardableResult
    public static func lineBytes(from store: TopicStore, from: UInt64 = 1, through: UInt64 = .max,
                                 recordsPerReadTransaction: Int = 50_000,
                                 progress: ((ReplayProgress) -> Void)? = nil,
                                 _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> Summary {
        try store.requireLog()
        let log = store.log
        let end = min(through, try store.read { txn in try log.bounds(txn)?.last } ?? 0)
        var summary = Summary(records: 0)
        var next = max(from, 1)
        let total = end >= next ? end - next + 1 : 0
        let generation = store.generation
        // The chain is followed from the record before the first exported one (or from the log's
        // start): a record altered with its checksum recomputed stops the export.
        let first = try store.read { txn in try log.sequenceRange(txn)?.lowerBound } ?? 1
        let follower = ChainFollower(store: store, from: next, through: end,
                                     after: next > first ? try store.read { txn in try store.chainLink(at: next - 1, txn) }
                                                         : try Replay.chainStart(of: store),
                                     recordsPerTransaction: recordsPerReadTransaction)
        defer { follower.cancel() }
        var checkpoints = true
        var text: [UInt8] = []
        var ends: [Int] = []
        while next <= end {
            text.removeAll(keepingCapacity: true)
            ends.removeAll(keepingCapacity: true)
            let chunkStart = next
            var last: UInt64 = 0
            var damage: LogIssue?
            var corruption: RecordCorruption?
            do {
                try store.read { txn in
                    try log.walk(from: next, through: end, txn) { entry in
                        // A record missing or a key out of order stops the export where it is,
                        // as a damaged record does (it used to end there, silently, with exit 0).
                        guard entry.kind == .inOrder else { damage = LogIssue(entry); return false }
                        // A record of the version before the chain (1) has no link; an import
                        // re-encodes it chained, so no later link of this export could match.
                        let unchained = entry.bytes.first == RecordCodec.legacyVersion
                        if unchained { checkpoints = false }
                        let checkpoint = checkpoints && (entry.sequence % checkpointInterval == 0 || entry.sequence == end)
                        // The link the follower verifies: the record's stored one, or for a version 5
                        // record (8 bytes of it kept) computed from the last whole link before it.
                        let link = checkpoint ? RecordCodec.unverifiedLink(of: entry.bytes)
                                                  ?? (try? store.chainLink(at: entry.sequence, txn)) : nil
                        EventJSON.appendLine(try RecordCodec.decode(entry.bytes, key: entry.sequence),
                                             link: link, unchained: unchained, to: &text)
                        ends.append(text.count)
                        last = entry.sequence
                        return ends.count < recordsPerReadTransaction
                    }
                }
            } catch let e as RecordCorruption {
                corruption = e
            }
            // The lines are handed over only as far as the follower has verified the chain: of a
            // fault it found and one this walk met, the one earlier in the log is reported.
            do {
                let readThrough = corruption?.sequence ?? (damage.map { $0.sequence &- 1 } ?? last)
                if let shortOf = try follower.waitUntilVerified(through: readThrough) {
                    // The follower met a record missing or out of place that this walk did not:
                    // the log changed between the two reads. Nothing from there on is handed over.
                    if corruption == nil, damage.map({ $0.sequence > shortOf.sequence }) ?? true { damage = shortOf }
                    ends.removeSubrange(min(ends.count, Int(shortOf.sequence.saturatingSubtract(chunkStart)))...)
                }
            } catch let e as RecordCorruption {
                (corruption, damage) = (e, nil)
            }
            if let corruption { ends.removeSubrange(min(ends.count, Int(corruption.sequence.saturatingSubtract(chunkStart)))...) }
            if damage == nil, corruption == nil, ends.isEmpty {
                // Keys up to the log's last one, but none from `next` on that reads as a record due.
                damage = LogIssue(sequence: next, kind: .gap, message: next == end ? "record \(next) is missing"
                                    : "records \(next)…\(end) are missing (the log's last key is \(end))", missing: next...end)
            }
            try text.withUnsafeBytes { all in
                for i in ends.indices {
                    try body(UnsafeRawBufferPointer(rebasing: all[(i == 0 ? 0 : ends[i - 1])..<ends[i]]))
                }
            }
            if let corruption { throw ReplayError.damagedRecord(corruption, exportFrom: max(from, 1), through: end) }
            if let damage {
                try ReplayError.checkNotCompacted(store, since: generation)
                throw ReplayError.damagedLog(damage, exportFrom: max(from, 1), through: end)
            }
            if summary.firstSequence == nil { summary.firstSequence = chunkStart }
            summary.records += UInt64(ends.count)
            summary.lastSequence = last
            progress?(ReplayProgress(phase: "export", done: min(last - max(from, 1) + 1, total), total: total))
            next = last + 1
        }
        return summary
    }
}

/// Loads an export into a new store exactly: same sequences, same times, so
/// the same log bytes, the same chain head and the same projections. (`load`
/// instead appends commands as new events, with new times.)
public final class Importer {
    private let builder: ProjectionBuilder
    /// Folds the chunks into the store on a second thread; the builder is its alone until `finish`.
    private let applier: ImportApplier
    private var pending = RecordChunk()
    /// The sequence and time of the last record added (the builder's are the folding thread's).
    private var lastSequence: UInt64 = 0
    private var lastTimestamp: Int64
    /// The chain link of the last record added, and the last checkpoint that matched (0: none yet).
    private var link = ChainHash.genesis
    private var lastCheckpoint: UInt64 = 0
    private var checksCheckpoints = true
    private let recordsPerCommit: Int
    public private(set) var records: UInt64 = 0

    /// Creates a store in `directory`, which must be new or empty. The projections are
    /// built in memory up to `memoryBudget` bytes and written in rounds beyond it (nil:
    /// written through every commit), as `replay` builds them.
    public init(creating directory: String, recordsPerCommit: Int = 100_000,
                memoryBudget: Int? = Replay.Options.defaultMemoryBudget) throws {
        builder = try ProjectionBuilder(creating: directory, writesLog: true, mapSize: 256 << 20, memoryBudget: memoryBudget)
        self.recordsPerCommit = recordsPerCommit
        lastSequence = builder.appliedSequence
        lastTimestamp = builder.lastTimestamp
        applier = ImportApplier(builder)
    }

    /// An importer dropped unfinished (an `add` threw): its folding thread ends too.
    deinit { applier.close() }

    /// Parses one exported line: an event with `seq` and `ts`.
    public static func record(fromLine line: String, lineNumber: Int) throws -> LogRecord {
        try parse(line: line, lineNumber: lineNumber).record
    }

    /// Parses one exported line: the record, the chain link the export recorded with it
    /// (a checkpoint; nil on most lines, and on exports older than checkpoints), and whether
    /// the record was of the version before the chain (`"unchained":true`).
    public static func parse(line: String, lineNumber: Int) throws -> (record: LogRecord, link: ChainHash?, unchained: Bool) {
        if let read = ExportLineParser.parse(line) { return read }
        return try parseObject(line: line, lineNumber: lineNumber)
    }

    /// `parse` the general way: any JSON object, with an error naming what is wrong.
    static func parseObject(line: String, lineNumber: Int) throws -> (record: LogRecord, link: ChainHash?, unchained: Bool) {
        guard let data = line.data(using: .utf8),
              let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw ReplayError.invalidLine(line: lineNumber, "not a JSON object")
        }
        var link: ChainHash?
        if let value = object["link"] {
            guard let hex = value as? String, let hash = ChainHash(hex: hex) else {
                throw ReplayError.invalidLine(line: lineNumber, "link: 64 hexadecimal digits expected")
            }
            link = hash
        }
        guard let seq = (object["seq"] as? NSNumber)?.uint64Value, seq > 0 else {
            throw ReplayError.invalidLine(line: lineNumber, "no seq: import takes lines written by export (use load for plain commands)")
        }
        guard let ts = (object["ts"] as? NSNumber)?.int64Value else {
            throw ReplayError.invalidLine(line: lineNumber, "no ts (ms since 1970)")
        }
        let event: Event
        do { event = try EventJSON.event(from: object, rules: .logged) } catch {
            throw ReplayError.invalidLine(line: lineNumber, error.description)
        }
        return (LogRecord(sequence: seq, timestamp: ts, event: event), link, object["unchained"] as? Bool == true)
    }

    /// Adds the next record: its sequence must follow the previous one, its
    /// time must not go back, and its event must be valid. `link`, the chain link an
    /// export recorded with it (a checkpoint), must be the one the records so far give.
    ///
    /// A record `unchained` in its source (the version before the chain) is imported chained, so
    /// the chain differs from the source's from there on: no later checkpoint is checked.
    public func add(_ record: LogRecord, link recorded: ChainHash? = nil, unchained: Bool = false, lineNumber: Int? = nil) throws {
        let expected = lastSequence + 1
        guard record.sequence == expected else {
            throw ReplayError.invalidInput(sequence: record.sequence, "expected sequence \(expected): an import must be gap-free from 1")
        }
        guard record.timestamp >= lastTimestamp else {
            throw ReplayError.invalidInput(sequence: record.sequence, "time \(record.timestamp) is before the previous record's \(lastTimestamp)")
        }
        do { try Validation.validate(record.event, rules: .logged) } catch {
            throw ReplayError.invalidInput(sequence: record.sequence, error.description)
        }
        // Encoded and chained here, and handed to the builder as bytes to copy (so it hashes nothing again).
        var next = link
        let bytes: [UInt8]
        do { bytes = try RecordCodec.encode(record, chainingFrom: &next) } catch {
            throw ReplayError.invalidInput(sequence: record.sequence, error.description)
        }
        if unchained { checksCheckpoints = false }
        if let recorded, checksCheckpoints, recorded != next {
            throw ReplayError.checkpointMismatch(line: lineNumber, sequence: record.sequence, recorded: recorded,
                                                 computed: next, lastMatched: lastCheckpoint)
        }
        if recorded != nil { lastCheckpoint = record.sequence }
        link = next
        (lastSequence, lastTimestamp) = (record.sequence, record.timestamp)
        pending.records.append(FoldRecord(record, names: pending.names))
        pending.raw += bytes
        pending.ends.append(pending.raw.count)
        pending.links.append(next)
        if pending.records.count >= recordsPerCommit { try flush() }
    }

    /// Hands the pending records to the folding thread.
    private func flush() throws {
        guard !pending.records.isEmpty else { return }
        let count = pending.records.count
        try applier.hand(pending)
        records += UInt64(count)
        pending = RecordChunk()
    }

    /// Commits what is pending and syncs; returns the new log's head. A
    /// failure to fold any chunk is thrown here if no `add` threw it before.
    @discardableResult
    public func finish() throws -> ChainHead? {
        let handed: Result<Void, any Error> = Result { try flush() }
        try applier.finish()
        try handed.get()
        try builder.finish()
        return builder.appliedSequence == 0 ? nil : ChainHead(sequence: builder.appliedSequence, hash: builder.link)
    }
}

private extension UInt64 {
    /// `self - other`, or 0 when `other` is larger.
    func saturatingSubtract(_ other: UInt64) -> UInt64 { self > other ? self - other : 0 }
}
