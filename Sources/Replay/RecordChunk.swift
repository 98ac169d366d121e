import LMDB
import Projections
import SubscriptionLog
import TopicStore

/// Records read from the log in one bounded read transaction: decoded, with
/// their encoded bytes kept when they are to be copied.
struct RecordChunk: Sendable {
    /// The records, their device_ids' and tokens' text in `names`.
    var records: [FoldRecord] = []
    let names = NameArena()
    /// The encoded records back to back (only when copying the log).
    var raw: [UInt8] = []
    /// End offset in `raw` of each record.
    var ends: [Int] = []
    /// Each record's whole chain link as the reader computed it checking the
    /// chain (nil where it was not known): what a copy of the log carries on
    /// without hashing the records again (only when copying the log).
    var links: [ChainHash?] = []
    /// Each record's `FoldHints` back to back, and where each record's end:
    /// hashed here, on the reading thread, for the fold to prefetch with.
    var hints: [UInt64] = []
    var hintEnds: [Int] = []

    /// Why the records stop short of what was read: a missing or undecodable
    /// record, before which a fold must stop.
    var stop: LogIssue?
    /// The last sequence read (decodable or not).
    var lastRead: UInt64 = 0

    func encoded(_ i: Int) -> ArraySlice<UInt8> {
        raw[(i == 0 ? 0 : ends[i - 1])..<ends[i]]
    }

    /// Record `i`'s whole link as its reader computed it; nil when it was not
    /// known, or the chunk was not read from a log (an import's lines).
    func link(_ i: Int) -> ChainHash? {
        i < links.count ? links[i] : nil
    }
}

/// Walks the log's records checking what an auditor checks: gap-free
/// sequences, checksums, decodability, non-decreasing time and the hash chain.
struct LogVerifier: Sendable {
    var issues: [LogIssue] = []
    /// Issues past `maxIssues` are counted, not kept.
    var issueCount = 0
    let maxIssues: Int
    var previousSequence: UInt64?
    var previousTimestamp: Int64 = .min
    /// The link the next record extends; nil when it is not known: after a
    /// damaged version 5 record (which keeps 8 bytes of its link), until a
    /// record keeps a whole link again.
    var link: ChainHash? = .genesis
    var checked: UInt64 = 0
    /// Records whose link could not be checked because the link before them
    /// was not known (see `link`): at most 63 after each damaged record.
    var linksUnchecked: UInt64 = 0
    let verifies: Bool
    /// Without `verifies`: the chain followed as the records are decoded, so a
    /// fold stops at a broken link as it does at a bad checksum.
    var chain: ChainCheck?

    init(verifies: Bool, maxIssues: Int = 1000, startingAfter sequence: UInt64? = nil, link: ChainHash? = .genesis) {
        self.verifies = verifies
        self.maxIssues = maxIssues
        self.previousSequence = sequence
        self.link = link
    }

    /// The last issue reported (kept past `maxIssues` too).
    private(set) var lastIssue: LogIssue?

    mutating func report(_ issue: LogIssue) {
        issueCount += 1
        lastIssue = issue
        if issues.count < maxIssues { issues.append(issue) }
    }

    /// A record whose frame and link check out but whose fields do not decode (a
    /// sequence inside it that is not its key's, say, with the CRC recomputed): an
    /// issue of its own, unless `check` already reported this record as undecodable.
    mutating func noteUndecodable(_ corruption: RecordCorruption) {
        let issue = LogIssue(corruption)
        guard issue.kind == .undecodable else { return }
        if let last = lastIssue, last.sequence == issue.sequence, last.kind == .undecodable { return }
        report(issue)
    }

    /// Checks one entry of the log walk: its place (gaps, keys out of order), its
    /// frame and its link. A key out of order never stops the checking: the walk
    /// takes the record due under a damaged key for that record (its checksum and
    /// link are checked, and the chain goes on), and a stray key is reported and passed.
    mutating func check(_ entry: LogEntry) {
        let sequence = entry.sequence
        if entry.kind == .stray {
            report(LogIssue(sequence: entry.key ?? sequence, kind: .misplaced, message: entry.problem ?? "a key out of order"))
            return
        }
        checked += 1
        var chainVerifiable = true
        if let previous = previousSequence {
            if sequence > previous &+ 1 {
                report(LogIssue(sequence: sequence, kind: .gap,
                                message: "sequences \(previous + 1)…\(sequence - 1) are missing (the chain cannot be checked across the gap)",
                                missing: previous + 1...sequence - 1))
                chainVerifiable = false
            } else if sequence <= previous {
                // (The walk never goes back; a verifier handed a record again says so rather than trap.)
                report(LogIssue(sequence: sequence, kind: .misplaced, message: "record \(sequence) comes after record \(previous)"))
                return
            }
        } else if sequence != 1 {
            report(LogIssue(sequence: sequence, kind: .missingStart,
                            message: "the log starts at sequence \(sequence): records 1…\(sequence - 1) are missing and there is no snapshot at seq \(sequence - 1) to start from",
                            missing: 1...sequence - 1))
            chainVerifiable = false
        }
        if entry.kind == .misplaced, let problem = entry.problem {
            report(LogIssue(sequence: sequence, kind: .misplaced, message: problem))
        }
        previousSequence = sequence
        if case .damagedBlock(let range) = entry.kind {
            // Placed above by its first sequence; none of its records can be read: reported
            // once, for the range, and the chain is taken up again at the next whole link.
            report(LogIssue(entry))
            checked &+= range.upperBound &- range.lowerBound
            previousSequence = range.upperBound
            link = nil
            return
        }
        let bytes = entry.bytes
        do {
            if chainVerifiable, let previous = link {
                link = try RecordCodec.verifyLink(of: bytes, key: sequence, previous: previous)
            } else {
                // The chain is taken up, unverified, at a whole stored link.
                if link == nil { linksUnchecked += 1 }
                switch try RecordCodec.storedLinkPart(of: bytes, key: sequence) {
                case .none: link = .genesis
                case .whole(let stored): link = stored
                case .prefix: link = nil
                }
            }
        } catch let e as RecordCorruption {
            report(LogIssue(e))
            // Carry the chain on from the whole link the record stores, so one damaged record is
            // reported once. A version 5 record keeps only 8 bytes of its link (and a record too
            // damaged to show one keeps none): the chain is then taken up at the next whole one,
            // at most 63 records on. A version 1 record has no link to lose.
            link = RecordCodec.unverifiedLink(of: bytes) ?? (bytes.first == RecordCodec.legacyVersion ? link : nil)
        } catch {
            report(LogIssue(sequence: sequence, kind: .undecodable, message: "\(error)"))
        }
    }

    mutating func checkTime(sequence: UInt64, timestamp: Int64) {
        if timestamp < previousTimestamp {
            report(LogIssue(sequence: sequence, kind: .timeWentBack,
                            message: "timestamp \(timestamp) is before the previous record's \(previousTimestamp)"))
        }
        previousTimestamp = timestamp
    }
}

/// Reads the log in bounded read transactions.
struct LogReader {
    let store: TopicStore
    /// Records per read transaction of the source.
    let recordsPerTransaction: Int

    /// Reads records from `from` through `through` (at most `recordsPerTransaction`)
    /// in one read transaction, decoding them (and checking them with `verifier`
    /// when it verifies). Decoding stops at the first missing or undecodable
    /// record (`stop`); checking goes on. `lastRead` stays 0 past the log's end.
    func read(from: UInt64, through: UInt64, keepRaw: Bool, verifier: inout LogVerifier) throws -> RecordChunk {
        let limit = recordsPerTransaction
        let log = store.log
        return try store.read { txn in
            try Self.read(log: log, from: from, through: through, limit: limit, keepRaw: keepRaw, verifier: &verifier, txn)
        }
    }

    static func read(log: EventLog, from: UInt64, through: UInt64, limit: Int, keepRaw: Bool,
                     verifier: inout LogVerifier, _ txn: borrowing Transaction) throws -> RecordChunk {
        var chunk = RecordChunk()
        chunk.records.reserveCapacity(min(limit, Int(clamping: through &- from &+ 1)))
        chunk.hintEnds.reserveCapacity(chunk.records.capacity)
        chunk.hints.reserveCapacity(chunk.records.capacity * 4)
        if keepRaw {
            chunk.ends.reserveCapacity(chunk.records.capacity)
            chunk.links.reserveCapacity(chunk.records.capacity)
        }
        var visited = 0
        // Taken once: read from the chunk, the arena was retained and released at every record.
        let names = chunk.names
        try log.walk(from: from, through: through, txn) { entry in
            visited += 1
            if verifier.verifies { verifier.check(entry) }
            // A stray key is no record of the sequence: the verifier reports it, the fold passes it.
            if entry.kind == .stray { return visited < limit }
            let seq = entry.sequence
            chunk.lastRead = seq
            if case .damagedBlock(let range) = entry.kind { chunk.lastRead = range.upperBound }
            if chunk.stop != nil, verifier.verifies, entry.kind == .inOrder {
                // Past where the fold stopped, an audit still decodes each record, to report those whose fields are wrong.
                do { _ = try RecordCodec.decode(entry.bytes, key: seq) } catch let e as RecordCorruption { verifier.noteUndecodable(e) }
            }
            if chunk.stop == nil {
                switch entry.kind {
                case .afterGap(let missing):
                    chunk.stop = LogIssue(sequence: missing.lowerBound, kind: missing.lowerBound == 1 ? .missingStart : .gap,
                                          message: entry.problem ?? "record \(missing.lowerBound) is missing", missing: missing)
                case .misplaced:
                    // The record is there, under a damaged key: a rebuild does not take it on trust.
                    chunk.stop = LogIssue(sequence: seq, kind: .misplaced, message: entry.problem ?? "record \(seq) is under another key")
                case .damagedBlock:
                    chunk.stop = LogIssue(entry)
                default:
                    do {
                        let record = verifier.chain != nil ? try verifier.chain!.checkAndDecode(entry.bytes, key: seq, names: names)
                                                           : try RecordCodec.decode(entry.bytes, key: seq, names: names)
                        if verifier.verifies { verifier.checkTime(sequence: record.sequence, timestamp: record.timestamp) }
                        appendHints(of: record, to: &chunk.hints)
                        chunk.hintEnds.append(chunk.hints.count)
                        // Moved into the chunk: appended before its last use, it was
                        // copied (each of its strings retained, and released after).
                        chunk.records.append(consume record)
                        if keepRaw {
                            chunk.raw.append(contentsOf: entry.bytes)
                            chunk.ends.append(chunk.raw.count)
                            chunk.links.append(verifier.verifies ? verifier.link : verifier.chain?.link)
                        }
                    } catch let e as RecordCorruption {
                        chunk.stop = LogIssue(e)
                        if verifier.verifies { verifier.noteUndecodable(e) }
                    }
                }
            }
            return visited < limit
        }
        return chunk
    }

    /// `record`'s `FoldHints`, its body handed over from the record borrowed:
    /// handed over from the local the chunk then takes, the body was copied
    /// first (a retain and a release of each of its strings and arrays).
    @inline(never)
    private static func appendHints(of record: borrowing FoldRecord, to hints: inout [UInt64]) {
        ProjectionWriter.FoldHints.append(record.body, to: &hints)
    }
}
