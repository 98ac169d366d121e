import LMDB

/// Writes the log's records in blocks (`LogBlock`) as a compaction copies the
/// log into its new file (`PackedCopy.EntryRewriter`): the records after the
/// horizon, from single entries and from the blocks an earlier compaction
/// wrote, packed into blocks that fill `budget` bytes.
///
/// A full block an earlier compaction wrote, wholly after the horizon, is
/// copied as it is (not verified here: a damaged one stays for an audit),
/// when it is in the form this rewriter writes.
/// A block holds consecutive sequences only: a gap in the source ends the
/// block before it, so no block ever claims a record the log did not have.
/// A source entry that is not a record in order (a damaged block, a block
/// whose records overlap those before it, a key that is not 8 bytes) ends the
/// block before it too and is copied as it is, under its own key, so that an
/// audit of the new file still finds and locates it; so is a record whose
/// frame does not check (its CRC is wrong, or its version unknown), which a
/// block that leaves its records' CRCs out cannot hold.
public struct LogBlockRewriter: PackedCopy.EntryRewriter {
    /// Records at or before it are left out (they leave the log).
    let horizon: UInt64
    /// A block's most bytes: four pages of overflow, less LMDB's page header,
    /// so that a block wastes little of its last page.
    let budget: Int
    let packer: LogBlock.Packer
    /// Records taken and not yet written: their bytes back to back.
    private var pending: [UInt8] = []
    private var ends: [Int] = []
    /// The sequence of the first pending record.
    private var first: UInt64 = 0
    /// The last sequence taken (written or pending).
    private var lastTaken: UInt64?

    public static let defaultBudget = 4 * 4096 - 16

    public init(after horizon: UInt64, budget: Int = LogBlockRewriter.defaultBudget, level: Int32 = 3) {
        self.horizon = horizon
        self.budget = budget
        self.packer = LogBlock.Packer(level: level, keepsChecksums: false)
    }

    public mutating func take(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer,
                              write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        guard key.count == 8 else { return try passOn(key, value, write) }
        let sequence = key.loadBigEndian(at: 0, as: UInt64.self)
        if LogBlock.isBlock(value) {
            // A block an earlier compaction filled, wholly kept and next in line, is copied as
            // it is (the records pending before it become a block of their own: at most one
            // short block a night, where the block the horizon cut was): the nightly run does
            // not expand and compress the whole log again. A block in the form before schema 13,
            // which keeps its records' CRCs, is packed again: once, the night after the upgrade.
            if value.count >= budget / 2, value.count <= budget,
               LogBlock.leavesChecksumsOut(value) != packer.keepsChecksums,
               let range = LogBlock.sequences(of: value, key: sequence), range.lowerBound > horizon,
               lastTaken.map({ range.lowerBound == $0 &+ 1 }) ?? true {
                try flush(all: true, write)
                lastTaken = range.upperBound
                return try write(key, value)
            }
            // A damaged block, or one whose records overlap those before it (a damaged log),
            // is copied as it is, under its key (still in order), for an audit to find.
            guard let block = try? LogBlock.expand(value, key: sequence),
                  lastTaken.map({ block.first > $0 }) ?? true else { return try passOn(key, value, write) }
            try block.forEach { seq, bytes in
                try add(seq, bytes, write)
                return true
            }
        } else {
            try add(sequence, value, write)
        }
    }

    public mutating func finish(write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        try flush(all: true, write)
    }

    private mutating func add(_ sequence: UInt64, _ bytes: UnsafeRawBufferPointer,
                              _ write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        guard sequence > horizon else { return }
        // (Entries come in key order, and a block whose records overlap what came before is
        // passed on whole: a record before the last one taken cannot come here.)
        if let last = lastTaken, sequence <= last {
            throw RecordCorruption(sequence: sequence, offset: 0, reason: "record \(sequence) comes after record \(last) in the log's key order")
        }
        // A record whose frame does not check cannot go into a block that leaves CRCs out:
        // it is copied as an entry of its own, under its sequence, for an audit to find.
        guard packer.accepts(bytes, as: sequence) else {
            return try withUnsafeBytes(of: sequence.bigEndian) { try passOn($0, bytes, write) }
        }
        if !ends.isEmpty, sequence != first + UInt64(ends.count) { try flush(all: true, write) }
        if ends.isEmpty { first = sequence }
        pending.append(contentsOf: bytes)
        ends.append(pending.count)
        lastTaken = sequence
        // Enough for a full block at any ratio a block of records reaches, and a few more.
        if pending.count >= 4 * budget || ends.count == LogBlock.maxRecords { try flush(all: false, write) }
    }

    private mutating func passOn(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
                                 _ write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        try flush(all: true, write)
        try write(key, value)
        if key.count == 8 { lastTaken = max(lastTaken ?? 0, key.loadBigEndian(at: 0, as: UInt64.self)) }
    }

    /// Writes full blocks of the pending records (`all`: every one of them).
    private mutating func flush(all: Bool, _ write: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        guard !ends.isEmpty else { return }
        var done = 0
        try pending.withUnsafeBytes { bytes in
            var views: [UnsafeRawBufferPointer] = []
            views.reserveCapacity(ends.count)
            for k in ends.indices {
                views.append(UnsafeRawBufferPointer(rebasing: bytes[(k == 0 ? 0 : ends[k - 1])..<ends[k]]))
            }
            while done < views.count {
                // Without `all`, the last block is left until more records come to fill it.
                let remaining = pending.count - (done == 0 ? 0 : ends[done - 1])
                if !all && remaining < 2 * budget { break }
                let (block, n) = packer.pack(views[done...], first: first + UInt64(done), budget: budget)
                let last = first + UInt64(done + n) - 1
                try withUnsafeBytes(of: last.bigEndian) { k in try block.withUnsafeBytes { try write(k, $0) } }
                done += n
            }
        }
        guard done > 0 else { return }
        let cut = ends[done - 1]
        pending.removeSubrange(0..<cut)
        ends.removeSubrange(0..<done)
        for k in ends.indices { ends[k] -= cut }
        first += UInt64(done)
    }
}
