internal import CZstd

/// Consecutive log records kept as one LMDB entry, compressed: the form a
/// compaction gives the records it keeps (`LogBlockRewriter`; the writer
/// appends single records after them). docs/replay-audit.md, "Blocks".
///
/// ```
/// key: u64 the block's last sequence (big-endian, as a record's key)
/// u8  marker 0xB1 (never a record's version, which are 1…5)
/// u8  form: the compression in the low bits (0 none, 1 zstd), and 0x80
///     when the records' own CRCs are left out (schema 13)
/// u16 records n (1…65,535): sequences last − n + 1 … last
/// u32 length of the records' bytes, uncompressed
/// ... the records' bytes (compressed as said)
/// u32 CRC-32C of the key's 8 bytes and every byte before it
/// ```
/// Uncompressed, the records are back to back, each as a `u16` length and
/// the bytes the record has as an entry of its own (version 4 or 5, its own
/// chain link), without its last 4 bytes, its CRC over its own sequence,
/// when the form says so. Expanded, every record has its CRC again
/// (computed: the block's CRC covers the bytes it is computed from), so a
/// record taken out of a block is byte for byte the entry it was, checked,
/// located and chained as before, and a damaged block is reported for the
/// range of sequences it holds.
///
/// Leaving the records' CRCs out keeps 4 bytes of each record that zstd
/// cannot compress (a CRC is random): about 6% of a block. They guard
/// nothing the block's CRC does not: a fault in a block's bytes fails the
/// block's CRC before any record is read, and a record altered with every
/// checksum recomputed is found by its chain link, as before. A packer
/// takes only records whose CRC is right (a compaction copies any other
/// record as an entry of its own), so a block never vouches for a record
/// the log held damaged.
///
/// A value larger than about half a page goes to LMDB overflow pages, whole
/// pages each (`pack` fills a block to a byte budget, so a block wastes
/// little of its last page).
public enum LogBlock {
    public static let marker: UInt8 = 0xB1
    static let headerSize = 8
    static let trailerSize = 4
    /// The most records a block holds (its count is a u16).
    public static let maxRecords = Int(UInt16.max)
    /// The most bytes a block's records take, uncompressed: a block of a few
    /// pages never holds more than a few MB.
    static let maxExpandedBytes = 64 << 20

    public enum Compression: UInt8, Sendable {
        case none = 0
        case zstd = 1
    }
    /// The bit of the form byte that says the records' own CRCs are left out.
    static let checksumsLeftOut: UInt8 = 0x80
    /// The bytes of a record's CRC, its last.
    static let recordChecksumSize = 4

    /// Whether `value` (a log entry's bytes) is a block rather than a record.
    @inline(__always)
    public static func isBlock(_ value: UnsafeRawBufferPointer) -> Bool {
        value.first == marker
    }

    /// Whether a block leaves its records' CRCs out (the form since schema 13).
    public static func leavesChecksumsOut(_ value: UnsafeRawBufferPointer) -> Bool {
        value.count > 1 && value[1] & checksumsLeftOut != 0
    }

    /// The sequences a block under `key` says it holds, from its header alone
    /// (nil when the header is too short or says 0 records or more than the
    /// key allows): what a walk needs to place a block without expanding it.
    public static func sequences(of value: UnsafeRawBufferPointer, key: UInt64) -> ClosedRange<UInt64>? {
        guard value.count >= headerSize + trailerSize, value[0] == marker else { return nil }
        let n = UInt64(value.loadBigEndian(at: 2, as: UInt16.self))
        guard n >= 1, key >= n else { return nil }
        return key - n + 1...key
    }

    /// The records of a block, expanded: record k is sequence `first + k`.
    public struct Expanded: Sendable {
        public let first: UInt64
        /// The records as the block holds them, each after its u16 length:
        /// record k is `bytes[start(k)..<ends[k]]`.
        public private(set) var bytes: [UInt8]
        public private(set) var ends: [Int]

        /// Where record k's bytes start: past its length, right after the record before it.
        @inline(__always)
        func start(_ k: Int) -> Int { (k == 0 ? 0 : ends[k - 1]) + 2 }

        public var count: Int { ends.count }
        public var last: UInt64 { first + UInt64(count) - 1 }

        /// Calls `body` with each record's sequence and bytes (borrowed for the call), until it returns false.
        public func forEach(_ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool) rethrows {
            try bytes.withUnsafeBytes { all in
                for k in 0..<count {
                    if try !body(first + UInt64(k), UnsafeRawBufferPointer(rebasing: all[start(k)..<ends[k]])) { return }
                }
            }
        }

        /// Record `sequence`'s bytes, when the block holds it.
        public func withRecord<R>(_ sequence: UInt64, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R? {
            guard sequence >= first, sequence <= last else { return nil }
            let k = Int(sequence - first)
            return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start(k)..<ends[k]])) }
        }
    }

    /// Checks a block's CRC and header and expands its records; a fault is
    /// thrown naming the block's first sequence (or the key when the header
    /// cannot say) and the range in its reason.
    public static func expand(_ value: UnsafeRawBufferPointer, key: UInt64) throws -> Expanded {
        func fault(_ reason: String, _ kind: RecordCorruption.Kind = .format, offset: Int = 0) -> RecordCorruption {
            let range = sequences(of: value, key: key)
            let place = range.map { "the block of records \($0.lowerBound)…\($0.upperBound)" } ?? "the block under key \(key)"
            return RecordCorruption(sequence: range?.lowerBound ?? key, offset: offset, reason: "\(place): \(reason)", kind: kind)
        }
        guard value.count >= headerSize + trailerSize else { throw fault("\(value.count) bytes: too short for a block") }
        guard value[0] == marker else { throw fault("its first byte is \(value[0]), not a block's marker") }
        let stored = value.loadBigEndian(at: value.count - trailerSize, as: UInt32.self)
        let crc = withUnsafeBytes(of: key.bigEndian) { k in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: value[..<(value.count - trailerSize)]), seed: CRC32C.checksum(k))
        }
        guard crc == stored else { throw fault("checksum mismatch", .checksum, offset: value.count - trailerSize) }
        guard let range = sequences(of: value, key: key) else { throw fault("a count of 0 records, or more than its key allows", offset: 2) }
        let withoutChecksums = leavesChecksumsOut(value)
        guard let compression = Compression(rawValue: value[1] & ~checksumsLeftOut) else {
            throw fault("unknown compression \(value[1] & ~checksumsLeftOut)", .version, offset: 1)
        }
        let length = Int(value.loadBigEndian(at: 4, as: UInt32.self))
        // (Checked before anything is allocated for it: a forged header could ask for 4 GiB.)
        guard length <= maxExpandedBytes else { throw fault("\(length) bytes of records: more than a block holds", offset: 4) }
        let payload = UnsafeRawBufferPointer(rebasing: value[headerSize..<(value.count - trailerSize)])
        var bytes: [UInt8]
        switch compression {
        case .none:
            guard payload.count == length else { throw fault("\(payload.count) bytes of records where its header says \(length)", offset: 4) }
            bytes = Array(payload)
        case .zstd:
            var produced = 0
            // Not zero-filled first: zstd writes every byte it reports.
            bytes = [UInt8](unsafeUninitializedCapacity: length) { out, initialized in
                produced = ZSTD_decompress(out.baseAddress, out.count, payload.baseAddress, payload.count)
                initialized = ZSTD_isError(produced) == 0 ? min(produced, length) : 0
            }
            guard ZSTD_isError(produced) == 0 else {
                throw fault("its records do not decompress (\(String(cString: ZSTD_getErrorName(produced))))", offset: headerSize)
            }
            guard produced == length else { throw fault("\(produced) bytes of records where its header says \(length)", offset: 4) }
        }
        let n = Int(range.count)
        var ends: [Int] = []
        ends.reserveCapacity(n)
        var at = 0
        for k in 0..<n {
            guard at + 2 <= bytes.count else { throw fault("record \(range.lowerBound + UInt64(k)) is missing from its records", offset: headerSize) }
            let size = Int(UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1]))
            guard at + 2 + size <= bytes.count else { throw fault("record \(range.lowerBound + UInt64(k)) runs past its records", offset: headerSize) }
            // Its CRC put back, a record must still fit its u16 length.
            if withoutChecksums && size + recordChecksumSize > Int(UInt16.max) {
                throw fault("record \(range.lowerBound + UInt64(k)) is longer than a record can be", offset: headerSize)
            }
            ends.append(at + 2 + size)
            at += 2 + size
        }
        guard at == bytes.count else { throw fault("\(bytes.count - at) bytes after its last record", offset: headerSize) }
        guard withoutChecksums else {
            // Each record keeps its own frame: moved into place, it is an entry as it was.
            return Expanded(first: range.lowerBound, bytes: bytes, ends: ends)
        }
        return restoringChecksums(bytes, ends: ends, first: range.lowerBound)
    }

    /// The records of a block that left their CRCs out, each with its CRC
    /// computed and put back after it (and its length 4 more): the entries they were.
    private static func restoringChecksums(_ stored: [UInt8], ends storedEnds: [Int], first: UInt64) -> Expanded {
        var ends: [Int] = []
        ends.reserveCapacity(storedEnds.count)
        let total = stored.count + recordChecksumSize * storedEnds.count
        let bytes = [UInt8](unsafeUninitializedCapacity: total) { out, initialized in
            stored.withUnsafeBytes { from in
                var start = 0, at = 0
                for (k, end) in storedEnds.enumerated() {
                    let body = UnsafeRawBufferPointer(rebasing: from[(start + 2)..<end])
                    let size = UInt16(body.count + recordChecksumSize)
                    out[at] = UInt8(size >> 8); out[at + 1] = UInt8(size & 0xFF)
                    if !body.isEmpty { UnsafeMutableRawPointer(out.baseAddress! + at + 2).copyMemory(from: body.baseAddress!, byteCount: body.count) }
                    at += 2 + body.count
                    // (Never empty: a record of 0 bytes has no version, and no packer takes it.)
                    let crc = RecordCodec.checksum(ofRecordBody: body, version: body.first ?? 0, key: first + UInt64(k))
                    UnsafeMutableRawPointer(out.baseAddress! + at).storeBytes(of: crc.bigEndian, as: UInt32.self)
                    at += recordChecksumSize
                    ends.append(at)
                    start = end
                }
                initialized = at
            }
        }
        return Expanded(first: first, bytes: bytes, ends: ends)
    }

    /// Makes blocks; holds a zstd context for them.
    public final class Packer {
        private let context: OpaquePointer
        public let level: Int32
        /// Whether the blocks keep each record's own CRC (the form before schema 13).
        public let keepsChecksums: Bool
        /// Records in the last block `pack` made.
        private var lastCount: Int?

        public init(level: Int32 = 3, keepsChecksums: Bool = false) {
            context = ZSTD_createCCtx()!
            self.level = level
            self.keepsChecksums = keepsChecksums
        }

        deinit { ZSTD_freeCCtx(context) }

        /// Whether a block of this packer can hold `record` as sequence
        /// `sequence`: any record when it keeps their CRCs, else only one
        /// whose CRC is right (its frame checks), since the block would not
        /// keep the CRC that says it is not.
        public func accepts(_ record: UnsafeRawBufferPointer, as sequence: UInt64) -> Bool {
            keepsChecksums || (try? RecordCodec.checkFrame(record, key: sequence)) != nil
        }

        /// The block of `records` (each a record's bytes as an entry of its
        /// own, ending with `last`, each one this packer `accepts`):
        /// compressed when that is smaller.
        public func block(_ records: [UnsafeRawBufferPointer], last: UInt64) -> [UInt8] {
            precondition(!records.isEmpty && records.count <= LogBlock.maxRecords && UInt64(records.count) <= last)
            let first = last - UInt64(records.count) + 1
            checkAccepted(records[...], first: first)
            return assemble(records.map(kept), last: last)
        }

        /// What a block keeps of `record` (one it `accepts`): all of it, or all but its CRC.
        /// (Bytes too short to hold a CRC are not a record: kept whole, `checkAccepted` stops at them.)
        private func kept(_ record: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
            keepsChecksums || record.count < LogBlock.recordChecksumSize
                ? record : UnsafeRawBufferPointer(rebasing: record[..<(record.count - LogBlock.recordChecksumSize)])
        }

        /// Stops the program rather than let a block vouch for a record whose CRC it leaves out
        /// and that does not check (the caller's duty, as `LogBlockRewriter` does it).
        private func checkAccepted(_ records: ArraySlice<UnsafeRawBufferPointer>, first: UInt64) {
            guard !keepsChecksums else { return }
            for (k, r) in records.enumerated() {
                precondition(accepts(r, as: first + UInt64(k)), "record \(first + UInt64(k)) does not check: a block would vouch for it without its CRC")
            }
        }

        /// The block of `records`, as the block keeps them (`kept`).
        private func assemble(_ records: [UnsafeRawBufferPointer], last: UInt64) -> [UInt8] {
            let total = records.reduce(0) { $0 + 2 + $1.count }
            precondition(total <= LogBlock.maxExpandedBytes, "a block of \(total) bytes of records")
            var raw: [UInt8] = []
            raw.reserveCapacity(total)
            for r in records {
                precondition(r.count <= Int(UInt16.max), "a record of \(r.count) bytes")
                raw.append(UInt8(r.count >> 8)); raw.append(UInt8(r.count & 0xFF))
                raw.append(contentsOf: r)
            }
            var out = [UInt8](repeating: 0, count: LogBlock.headerSize + ZSTD_compressBound(raw.count) + LogBlock.trailerSize)
            let compressed = out.withUnsafeMutableBytes { o in
                raw.withUnsafeBytes { r in
                    ZSTD_compressCCtx(context, o.baseAddress! + LogBlock.headerSize, o.count - LogBlock.headerSize - LogBlock.trailerSize,
                                      r.baseAddress, r.count, level)
                }
            }
            let payload: Int
            if ZSTD_isError(compressed) == 0, compressed < raw.count {
                out[1] = Compression.zstd.rawValue
                payload = compressed
            } else {
                out[1] = Compression.none.rawValue
                out.replaceSubrange(LogBlock.headerSize..<(LogBlock.headerSize + raw.count), with: raw)
                payload = raw.count
            }
            out.removeSubrange((LogBlock.headerSize + payload + LogBlock.trailerSize)...)
            out[0] = LogBlock.marker
            if !keepsChecksums { out[1] |= LogBlock.checksumsLeftOut }
            out[2] = UInt8(records.count >> 8); out[3] = UInt8(records.count & 0xFF)
            withUnsafeBytes(of: UInt32(raw.count).bigEndian) { out.replaceSubrange(4..<8, with: $0) }
            let crc = out.withUnsafeBytes { o in
                withUnsafeBytes(of: last.bigEndian) { k in
                    CRC32C.checksum(UnsafeRawBufferPointer(rebasing: o[..<(o.count - LogBlock.trailerSize)]), seed: CRC32C.checksum(k))
                }
            }
            withUnsafeBytes(of: crc.bigEndian) { out.replaceSubrange((out.count - LogBlock.trailerSize)..., with: $0) }
            return out
        }

        /// The block of as many of `records` as fit in `budget` bytes (at
        /// least one; `first` is the sequence of `records[0]`), and how many
        /// it holds. A block is compressed whole, so the count is searched:
        /// guessed from the ratio of the last try, then halved or grown.
        public func pack(_ records: ArraySlice<UnsafeRawBufferPointer>, first: UInt64, budget: Int) -> (block: [UInt8], count: Int) {
            precondition(!records.isEmpty)
            // At most `maxRecords`, and records of at most `maxExpandedBytes` (a block of
            // records that repeat compresses well past what a reader would expand).
            var all: [UnsafeRawBufferPointer] = []
            var raw = 0
            for r in records.prefix(LogBlock.maxRecords) {
                raw += 2 + r.count
                if raw > LogBlock.maxExpandedBytes && !all.isEmpty { break }
                all.append(kept(r))
            }
            func make(_ n: Int) -> [UInt8] { assemble(Array(all[..<n]), last: first + UInt64(n) - 1) }
            // `fits`: a count whose block is within the budget; `tooMany`: the least known not to be.
            var fits = 1, best = make(1), tooMany = all.count + 1
            // Each record is checked once, when it goes into the block returned (a rewriter
            // hands `pack` the same pending records again until they are all in blocks).
            if best.count > budget {
                checkAccepted(records.prefix(1), first: first)
                return (best, 1)
            }
            // Blocks of one log are alike: the count the last one took is the first guess.
            var guess = min(all.count, max(2, lastCount ?? all.count))
            defer { lastCount = fits }
            for _ in 0..<16 {
                guard tooMany - fits > 1 else { break }
                let b = make(guess)
                if b.count <= budget { (fits, best) = (guess, b) } else { tooMany = guess }
                guard tooMany - fits > 1 else { break }
                // The next guess scaled by the bytes this one took (a little short of the
                // budget, so that it fits), or halfway once the two are close.
                let scaled = Int(Double(guess) * Double(budget) / Double(b.count) * 0.99)
                guess = tooMany - fits <= 16 ? (fits + tooMany) / 2 : min(max(scaled, fits + 1), tooMany - 1)
            }
            checkAccepted(records.prefix(fits), first: first)
            return (best, fits)
        }
    }
}
