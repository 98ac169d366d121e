import LMDB

/// The log of record: key = 8-byte big-endian sequence, value = an encoded
/// `LogRecord`. Sequences are gap-free and appended with `MDB_APPEND`;
/// timestamps never decrease, so a time maps to a sequence by binary search.
public struct EventLog: Sendable {
    public static let databaseName = "log"
    public let database: Database

    public init(database: Database) { self.database = database }

    public static func open(in environment: Environment, create: Bool) throws -> EventLog {
        EventLog(database: try environment.openDatabases([databaseName], create: create)[0])
    }

    public static func key(_ sequence: UInt64) -> [UInt8] {
        withUnsafeBytes(of: sequence.bigEndian) { Array($0) }
    }

    static func sequence(ofKey key: UnsafeRawBufferPointer) throws -> UInt64 {
        guard key.count == 8 else {
            throw RecordCorruption(sequence: 0, offset: 0, reason: "log key of \(key.count) bytes (expected 8)")
        }
        return key.loadBigEndian(at: 0, as: UInt64.self)
    }

    /// The first and last sequence in the log and the last timestamp, or nil when empty.
    public struct Bounds: Sendable, Equatable {
        public var first: UInt64
        public var last: UInt64
        public var lastTimestamp: Int64
    }

    public func bounds(_ txn: borrowing Transaction) throws -> Bounds? {
        try txn.withCursor(database) { cursor in
            guard let first = try cursor.first() else { return nil }
            let firstSeq = try Self.firstSequence(of: first.key, first.value)
            guard let last = try cursor.last() else { return nil }
            let lastSeq = try Self.sequence(ofKey: last.key)
            if LogBlock.isBlock(last.value) {
                let block = try LogBlock.expand(last.value, key: lastSeq)
                return Bounds(first: firstSeq, last: lastSeq,
                              lastTimestamp: try block.withRecord(lastSeq) { try RecordCodec.timestamp(of: $0, key: lastSeq) }!)
            }
            return Bounds(first: firstSeq, last: lastSeq,
                          lastTimestamp: try RecordCodec.timestamp(of: last.value, key: lastSeq))
        }
    }

    /// The first sequence an entry holds: its key, or a block's first (from
    /// its header; the key when the header cannot say, for a verifier to report).
    static func firstSequence(of key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> UInt64 {
        let seq = try sequence(ofKey: key)
        guard LogBlock.isBlock(value) else { return seq }
        return LogBlock.sequences(of: value, key: seq)?.lowerBound ?? seq
    }

    /// The first and last sequence, from the keys alone: no record is read, so a
    /// damaged last record is left for a verifier to report, located.
    public func sequenceRange(_ txn: borrowing Transaction) throws -> ClosedRange<UInt64>? {
        try txn.withCursor(database) { cursor in
            guard let first = try cursor.first() else { return nil }
            let firstSeq = try Self.firstSequence(of: first.key, first.value)
            guard let last = try cursor.last() else { return nil }
            return firstSeq...(try Self.sequence(ofKey: last.key))
        }
    }

    /// The last record's sequence and chain link (`link(at:)`), or nil when the log is empty.
    public func head(_ txn: borrowing Transaction, start: (UInt64) throws -> ChainHash?) throws -> ChainHead? {
        guard let last = try sequenceRange(txn)?.upperBound else { return nil }
        return ChainHead(sequence: last, hash: try link(at: last, txn, start: start))
    }

    /// The whole chain link of the record at `sequence`: the one it stores
    /// (versions 2 to 4), else computed from the last whole link before it (at
    /// most `RecordCodec.fullLinkInterval` − 1 records back in a log the writer
    /// wrote), checking each record's checksum and kept 8 bytes on the way. An
    /// unchained (version 1) record yields genesis: the chain starts after it.
    /// Before the log's first record the chain starts at genesis for sequence
    /// 0, else at `start(first − 1)`: the head a compaction kept (nil when it
    /// is unknown). A record missing or damaged on the way, or a start that is
    /// unknown, is thrown as a `RecordCorruption` naming its sequence.
    public func link(at sequence: UInt64, _ txn: borrowing Transaction, start: (UInt64) throws -> ChainHash?) throws -> ChainHash {
        try txn.withCursor(database) { cursor in
            // The version 5 records from `sequence` back to the last whole link, newest first
            // (copied: a record in a block lies in the block's expanded bytes).
            var pending: [(sequence: UInt64, bytes: [UInt8])] = []
            var due = sequence
            var block: LogBlock.Expanded?
            var link: ChainHash
            walk: while true {
                if block == nil || due < block!.first {
                    block = nil
                    if let (key, value) = try cursor.seek(atLeast: Self.key(due)), LogBlock.isBlock(value),
                       let k = key.count == 8 ? key.loadBigEndian(at: 0, as: UInt64.self) : nil,
                       LogBlock.sequences(of: value, key: k)?.contains(due) == true {
                        block = try LogBlock.expand(value, key: k)
                    }
                }
                // The record's link part, and its bytes when they are needed later.
                let read = { (bytes: UnsafeRawBufferPointer) throws -> (RecordCodec.StoredLink, [UInt8]?) in
                    let part = try RecordCodec.storedLinkPart(of: bytes, key: due)
                    if case .prefix = part { return (part, Array(bytes)) }
                    return (part, nil)
                }
                if let (part, bytes) = try block?.withRecord(due, read) ?? withRecordBytes(at: due, cursor: &cursor, read) {
                    switch part {
                    case .prefix:
                        pending.append((due, bytes!))
                        guard due > 0 else { link = .genesis; break walk }  // (a record 0 is never written)
                        due -= 1
                        continue
                    case .whole(let stored): link = stored
                    case .none: link = .genesis
                    }
                    break walk
                }
                // No record `due`: the chain's start when the log begins right after it.
                let first = try sequenceRange(txn)?.lowerBound
                guard first == due + 1 || (due == 0 && first == nil) else {
                    throw RecordCorruption(sequence: due, offset: 0, reason: first.map { due < $0
                        ? "record \(due) is before the log's first record \($0): its chain link is not known here"
                        : "missing record: the log has a gap" } ?? "the log is empty")
                }
                if due == 0 { link = .genesis; break }
                guard let known = try start(due) else {
                    throw RecordCorruption(sequence: due + 1, offset: 0,
                        reason: "the log starts at \(due + 1) and the chain link before it (a compaction's head) is not known")
                }
                link = known
                break
            }
            for record in pending.reversed() {
                link = try record.bytes.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: record.sequence, previous: link) }
            }
            return link
        }
    }

    /// Appends an encoded record under `sequence`, which must be above every key in the log.
    public func append(encoded bytes: [UInt8], sequence: UInt64, _ txn: borrowing Transaction) throws {
        try txn.put(database, Self.key(sequence), bytes, flags: .append)
    }

    /// Appends an encoded record under `sequence` (above every key in the log)
    /// through `cursor`, a cursor on this log in the writing transaction: the
    /// writer appends a batch's records through one cursor, which stays on the
    /// log's last page, where `append(encoded:sequence:_:)` opens one per record
    /// and searches the tree from its root (and builds its key in an array).
    public func append(encoded bytes: [UInt8], sequence: UInt64, cursor: inout Cursor) throws {
        try withUnsafeBytes(of: sequence.bigEndian) { k in
            try bytes.withUnsafeBytes { v in try cursor.put(k, v, flags: .append) }
        }
    }

    /// Seals `prepared` with `sequence` (above every key in the log) and
    /// `timestamp`, chained to `chain` (which it advances), directly into the
    /// space it reserves through `cursor`, as `append(encoded:sequence:cursor:)`
    /// does with bytes encoded before.
    public func append(_ prepared: borrowing PreparedRecord, sequence: UInt64, timestamp: Int64,
                       chainingFrom chain: inout ChainHash, cursor: inout Cursor) throws {
        try withUnsafeBytes(of: sequence.bigEndian) { k in
            try cursor.put(k, reserving: prepared.sealedCount(at: sequence), flags: .append) { out in
                RecordCodec.seal(prepared, sequence: sequence, timestamp: timestamp, chainingFrom: &chain, into: out)
            }
        }
    }

    public func record(at sequence: UInt64, _ txn: borrowing Transaction) throws -> LogRecord? {
        try withRecordBytes(at: sequence, txn) { try RecordCodec.decode($0, key: sequence) }
    }

    /// `body` applied to record `sequence`'s bytes (borrowed for the call),
    /// wherever they are: under its own key, or in a block; nil when the log
    /// does not hold it. A damaged block that holds it is thrown as a
    /// `RecordCorruption` naming the block's range.
    public func withRecordBytes<R>(at sequence: UInt64, _ txn: borrowing Transaction,
                                   _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        try txn.withCursor(database) { cursor in try withRecordBytes(at: sequence, cursor: &cursor, body) }
    }

    private func withRecordBytes<R>(at sequence: UInt64, cursor: inout Cursor,
                                    _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        guard let (key, value) = try cursor.seek(atLeast: Self.key(sequence)), key.count == 8 else { return nil }
        let k = key.loadBigEndian(at: 0, as: UInt64.self)
        if LogBlock.isBlock(value) {
            guard LogBlock.sequences(of: value, key: k)?.contains(sequence) ?? (k == sequence) else { return nil }
            return try LogBlock.expand(value, key: k).withRecord(sequence, body)
        }
        return k == sequence ? try body(value) : nil
    }

    /// Calls `body` with the raw bytes of each record from `from` through `through`
    /// (inclusive) in order, until it returns false. The bytes are borrowed.
    public func forEachEncoded(from: UInt64 = 0, through: UInt64 = .max, _ txn: borrowing Transaction,
                               _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool) throws {
        try txn.withCursor(database) { cursor in
            var entry = try cursor.seek(atLeast: Self.key(from))
            while let (key, value) = entry {
                let seq = try Self.sequence(ofKey: key)
                if LogBlock.isBlock(value) {
                    var stop = false
                    try LogBlock.expand(value, key: seq).forEach { s, bytes in
                        guard s >= from else { return true }
                        if s > through { stop = true; return false }
                        if try !body(s, bytes) { stop = true; return false }
                        return true
                    }
                    if stop { return }
                } else {
                    if seq > through { return }
                    if try !body(seq, value) { return }
                }
                entry = try cursor.next()
            }
        }
    }

    /// Walks the log in key order from `from`, taking every entry for what it
    /// is (`LogEntry`): the records due, in sequence, and whatever a damaged key
    /// put in their way. Stops after the last record at or before `through`, at
    /// the log's end, or when `body` returns false. Keys are read as stored, so a
    /// damaged one never stops the walk early nor sends it back: the cursor only
    /// moves forward, and the sequence due only grows. The bytes are borrowed.
    public func walk(from: UInt64 = 1, through: UInt64 = .max, _ txn: borrowing Transaction,
                     _ body: (LogEntry) throws -> Bool) throws {
        guard from <= through else { return }
        try txn.withCursor(database) { cursor in
            var due = from
            var entry = try cursor.seek(atLeast: Self.key(from))
            while let (rawKey, value) = entry {
                let key = rawKey.count == 8 ? rawKey.loadBigEndian(at: 0, as: UInt64.self) : nil
                if let key, LogBlock.isBlock(value) {
                    switch try walkBlock(value, key: key, due: &due, through: through, body) {
                    case .stop: return
                    case .next: entry = try cursor.next(); continue
                    }
                }
                let stated = RecordCodec.statedSequence(of: value, key: key, due: due)
                var next: Cursor.Entry?? = nil  // fetched when the entry needs its successor to be judged
                let found: LogEntry
                if key == due {
                    found = LogEntry(sequence: due, key: key, stated: stated, kind: .inOrder, bytes: value)
                } else if stated == due {
                    // The record due, under a key that is not its own (the key is damaged).
                    found = LogEntry(sequence: due, key: key, stated: stated, kind: .misplaced, bytes: value)
                } else {
                    // A key past the one due: the next record (sequences missing before it)
                    // unless the key after it is smaller, which makes it one out of order.
                    let following = try cursor.next()
                    next = .some(following)
                    let followingKey = following.flatMap { $0.key.count == 8 ? $0.key.loadBigEndian(at: 0, as: UInt64.self) : nil }
                    if let key, key > due, !(followingKey.map { $0 >= due && $0 < key } ?? false) {
                        if key > through { return }
                        found = LogEntry(sequence: key, key: key, stated: stated, kind: .afterGap(due...key - 1), bytes: value)
                    } else {
                        found = LogEntry(sequence: due, key: key, stated: stated, kind: .stray, bytes: value)
                    }
                }
                if found.kind != .stray {
                    if found.sequence > through { return }
                    guard found.sequence < .max else { _ = try body(found); return }
                    due = found.sequence + 1
                }
                if try !body(found) { return }
                if found.kind != .stray, found.sequence == through { return }
                entry = try next ?? cursor.next()
            }
        }
    }

    private enum BlockWalk { case stop, next }

    /// `walk` through a block under `key`: each of its records from `due` on as
    /// an entry of its own (bytes borrowed from the expanded block for the
    /// call), the first after a gap when the block starts past `due`. A block
    /// that does not expand is one `.damagedBlock` entry for the sequences it
    /// says it holds (from `due` to its key when it cannot say). A block wholly
    /// before `due` is stray, as a key out of order is.
    private func walkBlock(_ value: UnsafeRawBufferPointer, key: UInt64, due: inout UInt64, through: UInt64,
                           _ body: (LogEntry) throws -> Bool) throws -> BlockWalk {
        let block: LogBlock.Expanded
        do {
            block = try LogBlock.expand(value, key: key)
        } catch let damage as RecordCorruption {
            let claimed = LogBlock.sequences(of: value, key: key).flatMap { $0.upperBound >= due ? max($0.lowerBound, due)...$0.upperBound : nil }
            guard let range = claimed ?? (key >= due ? due...key : nil) else {
                let stray = LogEntry(sequence: due, key: key, stated: nil, kind: .stray, bytes: value)
                return try body(stray) ? .next : .stop
            }
            if range.lowerBound > through { return .stop }
            let found = LogEntry(sequence: range.lowerBound, key: key, stated: nil, kind: .damagedBlock(range), bytes: value, damage: damage)
            due = range.upperBound &+ 1
            return try body(found) && range.upperBound < through && due != 0 ? .next : .stop
        }
        guard block.last >= due else {
            let stray = LogEntry(sequence: due, key: key, stated: block.last, kind: .stray, bytes: value)
            return try body(stray) ? .next : .stop
        }
        var result = BlockWalk.next
        try block.forEach { seq, bytes in
            guard seq >= due else { return true }
            if seq > through { result = .stop; return false }
            let kind: LogEntry.Kind = seq == due ? .inOrder : .afterGap(due...seq - 1)
            due = seq &+ 1
            if try !body(LogEntry(sequence: seq, key: seq, stated: seq, kind: kind, bytes: bytes)) || seq == through || due == 0 {
                result = .stop
                return false
            }
            return true
        }
        return result
    }

    /// Decoded records from `from` through `through`, until `body` returns false.
    public func forEach(from: UInt64 = 0, through: UInt64 = .max, _ txn: borrowing Transaction,
                        _ body: (LogRecord) throws -> Bool) throws {
        try forEachEncoded(from: from, through: through, txn) { seq, bytes in
            try body(try RecordCodec.decode(bytes, key: seq))
        }
    }

    /// The first sequence whose timestamp is at or after `time` (ms since 1970), or nil.
    public func firstSequence(atOrAfter time: Int64, _ txn: borrowing Transaction) throws -> UInt64? {
        guard let b = try bounds(txn) else { return nil }
        if b.lastTimestamp < time { return nil }
        var lo = b.first, hi = b.last  // answer in lo...hi
        while lo < hi {
            let mid = lo + (hi - lo) / 2
            if try timestamp(at: mid, txn) >= time { hi = mid } else { lo = mid + 1 }
        }
        return lo
    }

    /// The last sequence whose timestamp is at or before `time`, or nil when none is.
    public func lastSequence(atOrBefore time: Int64, _ txn: borrowing Transaction) throws -> UInt64? {
        guard let b = try bounds(txn) else { return nil }
        if let after = try firstSequence(atOrAfter: time + 1, txn) {
            return after > b.first ? after - 1 : nil
        }
        return b.last
    }

    func timestamp(at sequence: UInt64, _ txn: borrowing Transaction) throws -> Int64 {
        guard let time = try withRecordBytes(at: sequence, txn, { try RecordCodec.timestamp(of: $0, key: sequence) }) else {
            throw RecordCorruption(sequence: sequence, offset: 0, reason: "missing record: the log has a gap")
        }
        return time
    }
}

/// One entry of the log as `EventLog.walk` finds it in key order.
public struct LogEntry {
    public enum Kind: Sendable, Equatable {
        /// Under its own sequence, right after the record before it.
        case inOrder
        /// Under its own sequence, after sequences no key holds (`missing`).
        case afterGap(ClosedRange<UInt64>)
        /// The record due (its bytes say so), under a key that is not its
        /// sequence: the key is damaged. `sequence` is the one due.
        case misplaced
        /// A key out of order whose record does not say it is the one due: not
        /// taken as a record of the walk. `sequence` is the one still due.
        case stray
        /// A block of records (`LogBlock`) that does not expand: damaged, so
        /// none of the sequences it holds can be read (from the one due, as far
        /// as its header says, else to its key). `sequence` is the first;
        /// `damage` says what is wrong.
        case damagedBlock(ClosedRange<UInt64>)
    }
    /// The sequence the walk takes this entry for (see `Kind`).
    public var sequence: UInt64
    /// The key as stored; nil when it is not 8 bytes.
    public var key: UInt64?
    /// The sequence the record's bytes state (see `RecordCodec.statedSequence`; nil when they cannot say).
    public var stated: UInt64?
    public var kind: Kind
    /// The record's bytes, borrowed until the transaction ends; a record in a
    /// block lies in the expanded block, borrowed only for the walk's call.
    /// A damaged block's bytes are the block's.
    public var bytes: UnsafeRawBufferPointer
    /// What is wrong with a damaged block (`.damagedBlock`).
    public var damage: RecordCorruption? = nil

    /// The key as text: its number, or its size when it is not 8 bytes.
    public var keyText: String { key.map { "\($0)" } ?? "of another size than 8 bytes" }

    /// What is wrong with this entry, when it is not in order: a sentence naming
    /// the key and the sequence the record states.
    public var problem: String? {
        switch kind {
        case .inOrder:
            return nil
        case .afterGap(let missing):
            return missing.count == 1 ? "record \(missing.lowerBound) is missing (the next key is \(sequence))"
                : "records \(missing.lowerBound)…\(missing.upperBound) are missing (the next key is \(sequence))"
        case .misplaced:
            return "the record in the place of \(sequence) says it is \(sequence) but is stored under key \(keyText): the key is damaged"
        case .damagedBlock(let range):
            return (range.count == 1 ? "record \(range.lowerBound) is" : "records \(range.lowerBound)…\(range.upperBound) are")
                + " in a damaged block (key \(keyText)): " + (damage?.reason ?? "it does not expand")
        case .stray:
            return "key \(keyText) is out of order (record \(sequence) is due) and its record says " + (stated.map { "sequence \($0)" } ?? "no sequence it could have (or its checksum fits neither its key nor \(sequence))")
        }
    }
}
