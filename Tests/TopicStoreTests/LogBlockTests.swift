import SubscriptionLog
import Testing

/// Log records packed into compressed blocks (`LogBlock`): each record comes
/// out byte for byte as it went in, under its own sequence; a block fills its
/// byte budget; any damage to a block is caught and named by its range.
@Suite struct LogBlockTests {
    /// The records of `LogRecordVersionTests.randomRecords`, each in the
    /// version the writer gives its sequence, chained from genesis.
    static func encodedRecords(_ n: Int, seed: UInt64) throws -> [[UInt8]] {
        var link = ChainHash.genesis
        return try LogRecordVersionTests.randomRecords(n, seed: seed).map {
            try RecordCodec.encode($0, chainingFrom: &link, version: RecordCodec.writtenVersion(at: $0.sequence))
        }
    }

    /// Packs `records` (sequences from 1) into blocks of at most `budget` bytes.
    static func packAll(_ records: [[UInt8]], budget: Int, packer: LogBlock.Packer) -> [(last: UInt64, block: [UInt8])] {
        var blocks: [(UInt64, [UInt8])] = []
        withPointers(records) { views in
            var at = 0
            while at < views.count {
                let (block, n) = packer.pack(views[at...], first: UInt64(at + 1), budget: budget)
                at += n
                blocks.append((UInt64(at), block))
            }
        }
        return blocks
    }

    static func withPointers<R>(_ records: [[UInt8]], _ body: ([UnsafeRawBufferPointer]) -> R) -> R {
        // The arrays outlive the call: their storage is pinned for it by copying into one buffer.
        let flat = records.flatMap { $0 }
        return flat.withUnsafeBytes { all in
            var views: [UnsafeRawBufferPointer] = []
            var at = 0
            for r in records {
                views.append(UnsafeRawBufferPointer(rebasing: all[at..<(at + r.count)]))
                at += r.count
            }
            return body(views)
        }
    }

    /// In both forms: the blocks since schema 13, which leave the records' CRCs out, and those before.
    @Test(arguments: [2_032, 16_368], [false, true])
    func recordsComeOutAsTheyWentIn(budget: Int, keepsChecksums: Bool) throws {
        let records = try Self.encodedRecords(3_000, seed: 7)
        let decoded = LogRecordVersionTests.randomRecords(3_000, seed: 7)
        let packer = LogBlock.Packer(keepsChecksums: keepsChecksums)
        let blocks = Self.packAll(records, budget: budget, packer: packer)
        var next: UInt64 = 1
        var stored = 0
        for (last, block) in blocks {
            #expect(block.count <= budget)
            #expect(block[1] & 0x80 == (keepsChecksums ? 0 : 0x80))
            stored += block.count
            let expanded = try block.withUnsafeBytes { b in
                #expect(LogBlock.isBlock(b))
                #expect(LogBlock.sequences(of: b, key: last) == next...last)
                return try LogBlock.expand(b, key: last)
            }
            #expect(expanded.first == next && expanded.last == last)
            try expanded.forEach { (seq, bytes) throws -> Bool in
                #expect(Array(bytes) == records[Int(seq) - 1], "seq \(seq)")
                // Each record keeps its own frame: it decodes under its own sequence.
                #expect(try RecordCodec.decode(bytes, key: seq) == decoded[Int(seq) - 1])
                return seq < last
            }
            #expect(try expanded.withRecord(last) { Array($0) } == records[Int(last) - 1])
            #expect(expanded.withRecord(last + 1) { _ in 0 } == nil)
            next = last + 1
        }
        #expect(next == 3_001)
        let raw = records.reduce(0) { $0 + $1.count }
        #expect(stored < raw * 9 / 10, "\(stored) bytes in blocks for \(raw) in records")
    }

    /// A block that leaves its records' CRCs out holds what the one that keeps them does, in
    /// about 4 bytes a record less (a CRC is random: zstd does not compress it).
    @Test func leavingTheChecksumsOutSavesTheirBytes() throws {
        let records = try Self.encodedRecords(3_000, seed: 17)
        func bytes(_ keepsChecksums: Bool) -> Int {
            Self.packAll(records, budget: 1 << 20, packer: LogBlock.Packer(keepsChecksums: keepsChecksums)).reduce(0) { $0 + $1.block.count }
        }
        let kept = bytes(true), leftOut = bytes(false)
        #expect(kept - leftOut > 3 * records.count && kept - leftOut < 5 * records.count, "\(kept) against \(leftOut) bytes")
    }

    /// A packer that leaves CRCs out takes only records whose CRC is right under their sequence:
    /// a block would otherwise vouch for a damaged record (its CRC computed afresh as it expands).
    @Test func aRecordThatDoesNotCheckIsNotTaken() throws {
        let records = try Self.encodedRecords(3, seed: 18)
        let packer = LogBlock.Packer(), keeping = LogBlock.Packer(keepsChecksums: true)
        var damaged = records[1]
        damaged[damaged.count / 2] ^= 1
        for (record, sequence, taken) in [(records[1], UInt64(2), true), (damaged, 2, false), (records[1], 3, false), ([], 2, false)] {
            record.withUnsafeBytes { r in
                #expect(packer.accepts(r, as: sequence) == taken, "sequence \(sequence)")
                #expect(keeping.accepts(r, as: sequence))
            }
        }
    }

    /// A block holds as many records as fit: one more would not.
    @Test func aBlockFillsItsBudget() throws {
        let records = try Self.encodedRecords(2_000, seed: 8)
        let packer = LogBlock.Packer()
        let budget = 4_080
        Self.withPointers(records) { views in
            var at = 0
            var blocks = 0
            while at < views.count - 200 {
                let (block, n) = packer.pack(views[at...], first: UInt64(at + 1), budget: budget)
                #expect(block.count <= budget)
                let more = packer.block(Array(views[at..<(at + n + 1)]), last: UInt64(at + n + 1))
                #expect(more.count > budget, "\(n) records took \(block.count) bytes; \(n + 1) take \(more.count)")
                at += n
                blocks += 1
            }
            #expect(blocks > 10)
        }
    }

    /// Every flipped byte of a block, and the block under another key, fail with its range named.
    @Test func damageIsCaughtAndLocated() throws {
        let records = try Self.encodedRecords(40, seed: 9)
        let block = Self.withPointers(records) { LogBlock.Packer().block(Array($0[10..<40]), last: 40) }
        for i in block.indices {
            for bit in [0, 3, 7] {
                var damaged = block
                damaged[i] ^= UInt8(1 << bit)
                let error = #expect(throws: RecordCorruption.self) {
                    try damaged.withUnsafeBytes { try LogBlock.expand($0, key: 40) }
                }
                // A damaged marker or count cannot say the block's range: the key is named.
                if i == 0 || (i >= 2 && i < 4) { continue }
                #expect(error?.reason.contains("11…40") == true, "byte \(i): \(error?.reason ?? "")")
            }
        }
        let moved = #expect(throws: RecordCorruption.self) { try block.withUnsafeBytes { try LogBlock.expand($0, key: 41) } }
        #expect(moved?.kind == .checksum)
    }

    /// Records that repeat compress far beyond what a reader expands: a block holds at most
    /// 64 MiB of them (and 65,535), whatever its budget, and expands again.
    @Test func aBlockOfRepeatedRecordsStaysExpandable() throws {
        let record = [UInt8](repeating: 7, count: 2_000)
        let block = try record.withUnsafeBytes { r -> [UInt8] in
            let views = [UnsafeRawBufferPointer](repeating: r, count: 40_000)
            // (Not records: a packer that keeps their CRCs takes any bytes.)
            let (block, n) = LogBlock.Packer(keepsChecksums: true).pack(views[...], first: 1, budget: 16_368)
            #expect(n < 40_000 && n * 2_002 <= 64 << 20 && n * 2_002 > 60 << 20, "\(n) records")
            #expect(block.count <= 16_368)
            return block
        }
        let last = UInt64(block.withUnsafeBytes { Int($0.loadBigEndian(at: 2, as: UInt16.self)) })
        let expanded = try block.withUnsafeBytes { try LogBlock.expand($0, key: last) }
        #expect(expanded.count == Int(last))
    }

    /// Records that do not compress are kept as they are.
    @Test func incompressibleRecordsAreStoredUncompressed() throws {
        var rng = SeededRandom(seed: 3)
        let records = (0..<5).map { _ in (0..<300).map { _ in UInt8(truncatingIfNeeded: rng.int(256)) } }
        let block = Self.withPointers(records) { LogBlock.Packer(keepsChecksums: true).block($0, last: 5) }
        #expect(block[1] == LogBlock.Compression.none.rawValue)
        let expanded = try block.withUnsafeBytes { try LogBlock.expand($0, key: 5) }
        expanded.forEach { seq, bytes in
            #expect(Array(bytes) == records[Int(seq) - 1])
            return true
        }
    }
}

/// `LogBlockRewriter` as a compaction's copy drives it.
@Suite struct LogBlockRewriterTests {
    /// Feeds `entries` (key, value) to a rewriter; returns what it writes.
    static func rewrite(_ entries: [(UInt64, [UInt8])], after horizon: UInt64, budget: Int = LogBlockRewriter.defaultBudget) throws -> [(UInt64, [UInt8])] {
        var rewriter = LogBlockRewriter(after: horizon, budget: budget)
        var out: [(UInt64, [UInt8])] = []
        let write = { (k: UnsafeRawBufferPointer, v: UnsafeRawBufferPointer) in
            out.append((k.loadBigEndian(at: 0, as: UInt64.self), Array(v)))
        }
        for (key, value) in entries {
            try withUnsafeBytes(of: key.bigEndian) { k in try value.withUnsafeBytes { v in try rewriter.take(key: k, value: v, write: write) } }
        }
        try rewriter.finish(write: write)
        return out
    }

    /// The records each written entry holds, by sequence.
    static func records(_ entries: [(UInt64, [UInt8])]) throws -> [UInt64: [UInt8]] {
        var out: [UInt64: [UInt8]] = [:]
        for (key, value) in entries {
            try value.withUnsafeBytes { v in
                if LogBlock.isBlock(v) {
                    try LogBlock.expand(v, key: key).forEach { seq, bytes in out[seq] = Array(bytes); return true }
                } else {
                    out[key] = value
                }
            }
        }
        return out
    }

    @Test func singlesAndBlocksComeOutInBlocksFromTheHorizonOn() throws {
        let records = try LogBlockTests.encodedRecords(3_300, seed: 11)
        let singles = records.enumerated().map { (UInt64($0.offset + 1), $0.element) }
        let once = try Self.rewrite(Array(singles.prefix(3_000)), after: 0)
        #expect(once.count < 60 && once.last?.0 == 3_000)
        #expect(try Self.records(once) == Dictionary(uniqueKeysWithValues: singles.prefix(3_000).map { $0 }))
        // The next night: the blocks, then singles appended since; the horizon inside a block.
        let straddled = try #require(once.first { $0.0 > 1_234 })
        let twice = try Self.rewrite(once + singles.suffix(300), after: 1_234)
        let kept = try Self.records(twice)
        #expect(kept.keys.min() == 1_235 && kept.count == 3_300 - 1_234)
        #expect(kept == Dictionary(uniqueKeysWithValues: singles.filter { $0.0 > 1_234 }))
        #expect(twice.allSatisfy { $0.1.count <= LogBlockRewriter.defaultBudget })
        // The block cut is made again; the full blocks after it are copied as they were.
        #expect(!twice.contains { $0.0 == straddled.0 && $0.1 == straddled.1 })
        let after = once.filter { $0.0 > straddled.0 && $0.1.count >= LogBlockRewriter.defaultBudget / 2 }
        #expect(!after.isEmpty)
        for block in after { #expect(twice.contains { $0.0 == block.0 && $0.1 == block.1 }, "block \(block.0)") }
    }

    /// Full blocks in the form before schema 13, which keep their records' CRCs, are packed
    /// again in the form that leaves them out (the night after the upgrade), records unchanged.
    @Test func blocksThatKeepTheirChecksumsArePackedAgain() throws {
        let records = try LogBlockTests.encodedRecords(3_000, seed: 15)
        let old = LogBlockTests.packAll(records, budget: LogBlockRewriter.defaultBudget, packer: LogBlock.Packer(keepsChecksums: true))
        #expect(old.count > 5 && old.allSatisfy { $0.block[1] & 0x80 == 0 })
        let out = try Self.rewrite(old.map { ($0.last, $0.block) }, after: 0)
        #expect(out.allSatisfy { $0.1[1] & 0x80 == 0x80 })
        #expect(out.reduce(0) { $0 + $1.1.count } < old.reduce(0) { $0 + $1.block.count })
        #expect(try Self.records(out) == Dictionary(uniqueKeysWithValues: records.enumerated().map { (UInt64($0.offset + 1), $0.element) }))
        // Written again, the blocks in the new form are copied as they are.
        let again = try Self.rewrite(out, after: 0)
        #expect(again.map(\.0) == out.map(\.0) && again.map(\.1) == out.map(\.1))
    }

    /// A damaged block, and a block whose records overlap those before it, are copied as they
    /// are under their keys (in order still), for an audit to find; the records around them
    /// are packed as usual.
    @Test func aDamagedOrOverlappingBlockIsCopiedAsItIs() throws {
        let records = try LogBlockTests.encodedRecords(900, seed: 13)
        let singles = records.enumerated().map { (UInt64($0.offset + 1), $0.element) }
        let packer = LogBlock.Packer()
        var damaged = LogBlockTests.withPointers(Array(records[300..<400])) { packer.block($0, last: 400) }
        damaged[damaged.count / 2] ^= 0x10
        let overlapping = LogBlockTests.withPointers(Array(records[550..<700])) { packer.block($0, last: 700) }
        let entries = Array(singles[0..<300]) + [(400, damaged)] + Array(singles[400..<600]) + [(700, overlapping)]
            + Array(singles[700...])
        let out = try Self.rewrite(entries, after: 0)
        #expect(out.contains { $0.0 == 400 && $0.1 == damaged })
        #expect(out.contains { $0.0 == 700 && $0.1 == overlapping })
        #expect(zip(out, out.dropFirst()).allSatisfy { $0.0 < $1.0 }, "keys ascending")
        let kept = try Self.records(out.filter { $0.0 != 400 })
        for seq in [1, 300, 401, 600, 701, 900] as [UInt64] { #expect(kept[seq] == records[Int(seq) - 1], "\(seq)") }
    }

    /// A record whose CRC is wrong, single or in a block that kept the CRCs (schema 12), ends
    /// the block before it and is copied as an entry of its own, under its sequence, as it was:
    /// a block that leaves CRCs out would make it whole again.
    @Test func aRecordThatDoesNotCheckIsCopiedAsItIs() throws {
        let records = try LogBlockTests.encodedRecords(900, seed: 14)
        var singles = records.enumerated().map { (UInt64($0.offset + 1), $0.element) }
        singles[99].1[10] ^= 4                                  // sequence 100, single
        var inBlock = Array(records[400..<500])
        inBlock[49][10] ^= 4                                    // sequence 450, in a block of 401…500
        let old = LogBlockTests.withPointers(inBlock) { LogBlock.Packer(keepsChecksums: true).block($0, last: 500) }
        let entries = Array(singles[0..<400]) + [(500, old)] + Array(singles[500...])
        let out = try Self.rewrite(entries, after: 0)
        #expect(out.contains { $0.0 == 100 && $0.1 == singles[99].1 })
        #expect(out.contains { $0.0 == 450 && $0.1 == inBlock[49] })
        #expect(zip(out, out.dropFirst()).allSatisfy { $0.0 < $1.0 }, "keys ascending")
        let kept = try Self.records(out)
        #expect(kept.count == 900)
        for seq in 1...900 as ClosedRange<UInt64> where seq != 100 && seq != 450 {
            #expect(kept[seq] == records[Int(seq) - 1], "\(seq)")
        }
        #expect(out.filter { $0.1.first == LogBlock.marker }.count >= 3)
    }

    /// A gap ends the block before it: no block claims a record the log did not have.
    @Test func aGapEndsABlock() throws {
        let records = try LogBlockTests.encodedRecords(600, seed: 12)
        var singles = records.enumerated().map { (UInt64($0.offset + 1), $0.element) }
        singles.removeSubrange(299..<310)  // sequences 300…310
        let out = try Self.rewrite(singles, after: 0)
        #expect(out.contains { $0.0 == 299 })
        #expect(try Self.records(out) == Dictionary(uniqueKeysWithValues: singles))
    }
}
