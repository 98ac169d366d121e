import Digest
import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

@Suite("HashChain")
struct HashChainTests {
    @Test("SHA-256 from libcrypto gives the FIPS 180-2 answers")
    func knownAnswers() {
        #expect(ChainHash(bytes: SHA256.hash(Array("abc".utf8)))!.hex
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(ChainHash(bytes: SHA256.hash([]))!.hex
                == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(ChainHash.genesis.bytes == [UInt8](repeating: 0, count: 32))
        #expect(ChainHash(hex: ChainHash.genesis.hex) == .genesis)
        #expect(ChainHead(parsing: "12:" + String(repeating: "ab", count: 32))?.sequence == 12)
        #expect(ChainHead(parsing: "12:abc") == nil)
    }

    static func fill(_ store: TopicStore, count: Int, seed: UInt64 = 9) throws {
        var workload = ReplayWorkload(seed: seed)
        var done = 0
        while done < count {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let events = (0..<min(25, count - done)).map { _ in workload.next(now: now) }
            for r in store.submitAndWait(events) { _ = try r.get() }
            done += events.count
        }
    }

    static func rawRecord(_ store: TopicStore, _ seq: UInt64) throws -> [UInt8] {
        // Wherever it is: a compaction writes its records in blocks.
        try store.read { txn in try #require(try store.log.withRecordBytes(at: seq, txn) { Array($0) }) }
    }

    /// `bytes` (a record to be stored under `key`) with its CRC recomputed, as a forger would.
    static func recomputedChecksum(_ bytes: [UInt8], key: UInt64) -> [UInt8] {
        var bytes = bytes
        let crc = bytes.withUnsafeBytes { b in
            RecordCodec.checksum(ofRecordBody: UnsafeRawBufferPointer(rebasing: b[0..<(b.count - 4)]), version: b[0], key: key)
        }
        bytes.replaceSubrange((bytes.count - 4)..., with: withUnsafeBytes(of: crc.bigEndian) { Array($0) })
        return bytes
    }

    static func overwrite(_ store: TopicStore, _ seq: UInt64, _ bytes: [UInt8]) throws {
        try store.environment.write { txn in try txn.put(store.log.database, EventLog.key(seq), bytes) }
    }

    /// The reader hashes a link where it built the record's version 2 form,
    /// padding it in place: the same digest as the incremental calls, at every
    /// length around the block boundaries, and over whatever the padding overwrites.
    @Test("SHA-256 padded in place gives the digest of the message; a link so computed is the link")
    func paddedInPlace() {
        var rng = SeededRandom(seed: 0x5A256)
        for count in 0...300 {
            let message = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            var room = message + (0..<(SHA256.paddedSize(count) - count)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            #expect(SHA256.paddedSize(count) % 64 == 0 && SHA256.paddedSize(count) >= count + 9)
            var digest = [UInt8](repeating: 0, count: 32)
            room.withUnsafeMutableBytes { m in digest.withUnsafeMutableBytes { SHA256.hash(paddingInPlace: m, count: count, into: $0) } }
            #expect(digest == SHA256.hash(message), "\(count) bytes")

            let previous = ChainHash(bytes: SHA256.hash(Array("link \(count)".utf8)))!
            var buffer = [UInt8](repeating: 0xEE, count: 32) + message + [UInt8](repeating: 0xEE, count: SHA256.paddedSize(32 + count) - 32 - count)
            let inPlace = buffer.withUnsafeMutableBytes { previous.next(overBodyAfterRoomIn: $0, count: count) }
            #expect(inPlace == message.withUnsafeBytes { previous.next(over: $0) }, "\(count) bytes")
        }
    }

    @Test("every record written by the store links to the one before, from genesis, across batches")
    func chainIsComputedIndependently() throws {
        let dir = ReplayTempDir("chain")
        let store = try TopicStore(directory: dir.sub("live"))
        try Self.fill(store, count: 120)
        var link = ChainHash.genesis
        for seq in UInt64(1)...120 {
            let bytes = try Self.rawRecord(store, seq)
            // Every 64th record keeps its whole link (version 4), the others its first 8 bytes (version 5).
            let whole = seq % 64 == 0
            #expect(bytes[0] == (whole ? 4 : 5), "seq \(seq)")
            // SHA-256(previous ‖ the record's version 2 form before the link), computed here from scratch.
            let record = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: seq) }
            let v2 = Self.version2Form(record)
            let expected = ChainHash(bytes: SHA256.hash(link.bytes + v2))!
            let kept = whole ? 32 : 8
            #expect(Array(bytes[(bytes.count - 4 - kept)..<(bytes.count - 4)]) == Array(expected.bytes.prefix(kept)), "seq \(seq)")
            // The store computes every record's whole link from the last whole one before it.
            #expect(try store.read { txn in try store.chainLink(at: seq, txn) } == expected, "seq \(seq)")
            link = expected
        }
        let head = try store.read { txn in try store.chainHead(txn) }
        #expect(head == ChainHead(sequence: 120, hash: link))
        // A store reopened carries the chain on.
        store.close()
        let reopened = try TopicStore(directory: dir.sub("live"))
        try reopened.submitAndWait(Event(project: "alpha", body: .unregisterAll(deviceID: "dev-1")))
        let bytes = try Self.rawRecord(reopened, 121)
        let expected = ChainHash(bytes: SHA256.hash(link.bytes + Self.version2Form(try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 121) })))!
        #expect(try reopened.read { txn in try reopened.chainHead(txn) }?.hash == expected)
        #expect(try Audit.run(reopened).isClean)
    }

    /// A record's version 2 form before its link (what the chain covers), written here
    /// field by field as docs/replay-audit.md describes it, not by the codec.
    static func version2Form(_ r: LogRecord) -> [UInt8] {
        func u16(_ n: Int) -> [UInt8] { [UInt8(n >> 8), UInt8(n & 0xFF)] }
        func str(_ s: String) -> [UInt8] { u16(s.utf8.count) + Array(s.utf8) }
        func be<T: FixedWidthInteger>(_ v: T) -> [UInt8] { withUnsafeBytes(of: v.bigEndian) { Array($0) } }
        var out: [UInt8] = [2]
        let type: UInt8
        var fields: [UInt8] = []
        switch r.event.body {
        case .token(let d, let t, let p): type = 1; fields = str(d) + str(t) + [p.rawValue]
        case .register(let d, let topics):
            type = 2
            fields = str(d) + u16(topics.count)
            for t in topics {
                fields += str(t.code) + [(t.title != nil ? 1 : 0) | (t.single != nil ? 2 : 0) | (t.single == true ? 4 : 0)]
                if let title = t.title { fields += str(title) }
            }
        case .unregister(let d, let codes): type = 3; fields = str(d) + u16(codes.count) + codes.flatMap(str)
        case .unregisterAll(let d): type = 4; fields = str(d)
        case .tokenRejected(let t, let at, let reason): type = 5; fields = str(t) + be(at) + str(reason)
        case .forgetDevice(let d): type = 6; fields = str(d)
        case .dropTopic(let c): type = 7; fields = str(c)
        case .expireToken(let t): type = 8; fields = str(t)
        }
        out.append(type)
        out += be(r.sequence) + be(r.timestamp) + str(r.event.project) + fields
        return out
    }

    @Test("version 1 records still decode; unknown versions and damaged trailers are rejected")
    func versions() throws {
        let record = LogRecord(sequence: 5, timestamp: 1_700_000_000_000,
                               event: Event(project: "alpha", body: .register(deviceID: "d", topics: [TopicSpec(code: "news", title: "N", single: true)])))
        let v1 = try RecordCodec.encodeLegacyV1(record)
        #expect(try v1.withUnsafeBytes { try RecordCodec.decode($0, key: 5) } == record)
        #expect(try v1.withUnsafeBytes { try RecordCodec.storedLink(of: $0, key: 5) } == nil)
        #expect(throws: RecordCorruption.self) { try v1.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: 5, previous: .genesis) } }
        var link2 = ChainHash.genesis, link3 = ChainHash.genesis, link4 = ChainHash.genesis, link5 = ChainHash.genesis
        let v2 = try RecordCodec.encode(record, chainingFrom: &link2, version: 2)
        let v3 = try RecordCodec.encode(record, chainingFrom: &link3, version: 3)
        let v4 = try RecordCodec.encode(record, chainingFrom: &link4, version: 4)
        let v5 = try RecordCodec.encode(record, chainingFrom: &link5)
        #expect(v2.count == v1.count + 32 && v2[0] == 2 && v3[0] == 3 && v4[0] == 4 && v5[0] == 5)
        // Version 4: no sequence (8 bytes), a 6-byte time (2), one-byte lengths (1 each for the
        // project, the list, the code and the title); the device_id "d" is text in both.
        #expect(v4.count == v3.count - 8 - 2 - 4)
        // Version 5: the link's first 8 bytes of its 32.
        #expect(v5.count == v4.count - 24 && Array(v5[(v5.count - 12)..<(v5.count - 4)]) == Array(link2.bytes.prefix(8)))
        #expect(link2 == link3 && link3 == link4 && link4 == link5, "every version carries the same link")
        for bytes in [v2, v3, v4, v5] {
            #expect(try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 5) } == record)
            #expect(try bytes.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: 5, previous: .genesis) } == link2)
        }
        // Verified from another link, version 5's 8 bytes break the chain as version 4's 32 do.
        for bytes in [v4, v5] {
            #expect(throws: RecordCorruption.self) { try bytes.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: 5, previous: link2) } }
        }
        #expect(try v5.withUnsafeBytes { try RecordCodec.storedLinkPart(of: $0, key: 5) } == .prefix(link2.prefix))
        #expect(try v5.withUnsafeBytes { try RecordCodec.storedLink(of: $0, key: 5) } == nil)
        // A version 4 or 5 record under another key fails its checksum, which covers the key.
        for bytes in [v4, v5] {
            do {
                _ = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 6) }
                Issue.record("a version \(bytes[0]) record decoded under another key")
            } catch let e as RecordCorruption {
                #expect(e.kind == .checksum && e.sequence == 6 && e.reason.contains("for key 6"), "\(e)")
            }
        }
        var v6 = v4
        v6[0] = 6
        v6 = Self.recomputedChecksum(v6, key: 5)
        do {
            _ = try v6.withUnsafeBytes { try RecordCodec.decode($0, key: 5) }
            Issue.record("version 6 decoded")
        } catch let e as RecordCorruption {
            #expect(e.kind == .version)
        }
    }

    @Test("a flipped byte in one record is found, located by its sequence, and fails the audit")
    func flippedByte() throws {
        let dir = ReplayTempDir("flip")
        let store = try TopicStore(directory: dir.sub("live"))
        try Self.fill(store, count: 200)
        #expect(try Audit.run(store).isClean)
        var bytes = try Self.rawRecord(store, 137)
        bytes[21] ^= 0x04   // inside the project name
        try Self.overwrite(store, 137, bytes)
        let report = try Audit.run(store)
        #expect(!report.isClean)
        #expect(report.logIssues.map(\.sequence) == [137])
        #expect(report.logIssues.first?.kind == .checksum)
        #expect(report.foldStop?.sequence == 137)
        #expect(!report.projectionsCompared)
        // Nothing else is blamed. The record keeps 8 bytes of its link, so the chain is taken up
        // at the next record keeping its whole link, 192: the links of 138…192 are not checked.
        #expect(report.recordsChecked == 200)
        #expect(report.linksUnchecked == 55)
        #expect(report.head?.sequence == 200)
        #expect(report.head == (try store.read { txn in try store.chainHead(txn) }))
    }

    @Test("a damaged last record (the head) is reported like any other, not thrown")
    func damagedHead() throws {
        let dir = ReplayTempDir("flip-head")
        let store = try TopicStore(directory: dir.sub("live"))
        try Self.fill(store, count: 40)
        var bytes = try Self.rawRecord(store, 40)
        bytes[21] ^= 0x01
        try Self.overwrite(store, 40, bytes)
        let report = try Audit.run(store)
        #expect(!report.isClean)
        #expect(report.logIssues.map(\.sequence) == [40])
        #expect(report.logIssues.first?.kind == .checksum)
        #expect(report.foldStop?.sequence == 40)
        #expect(report.recordsChecked == 40)
        // Cut short too (no time, no checksum to read).
        try Self.overwrite(store, 40, Array(bytes.prefix(10)))
        let cut = try Audit.run(store)
        #expect(cut.logIssues.map(\.sequence) == [40] && cut.logIssues.first?.kind == .undecodable, "\(cut.logIssues)")
    }

    static func delete(_ store: TopicStore, _ seq: UInt64) throws {
        let deleted = try store.environment.write { txn in try txn.delete(store.log.database, EventLog.key(seq)) }
        #expect(deleted)
    }

    @Test("a missing record, or a missing start, is reported once and counted once")
    func missingRecordsReportedOnce() throws {
        let dir = ReplayTempDir("gap-once")
        let store = try TopicStore(directory: dir.sub("live"))
        try Self.fill(store, count: 30)
        try Self.delete(store, 3)
        var report = try Audit.run(store)
        #expect(report.logIssueCount == 1, "\(report.logIssues)")
        #expect(report.logIssues.map(\.kind) == [.gap])
        #expect(report.logIssues.first?.message.contains("3…3") == true)
        #expect(report.foldStop?.kind == .gap && !report.projectionsCompared)

        let dir2 = ReplayTempDir("start-once")
        let other = try TopicStore(directory: dir2.sub("live"))
        try Self.fill(other, count: 30)
        try Self.delete(other, 1)
        report = try Audit.run(other)
        #expect(report.logIssueCount == 1, "\(report.logIssues)")
        #expect(report.logIssues.map(\.kind) == [.missingStart])
        #expect(report.foldStop?.kind == .missingStart && !report.projectionsCompared)
    }

    @Test("a record rewritten with a valid checksum breaks the chain at its sequence; its content shows in the projections")
    func rewrittenWithValidChecksum() throws {
        let dir = ReplayTempDir("rewrite")
        let store = try TopicStore(directory: dir.sub("live"))
        try store.submitAndWait(Event(project: "alpha", body: .token(deviceID: "d1", token: "tokA", platform: .ios)))
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "d1", topics: [TopicSpec(code: "news")])))
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "d2", topics: [TopicSpec(code: "sport")])))
        try Self.fill(store, count: 70)
        // Record 2 now says "nexs": same length, checksum recomputed, link left as it was.
        var bytes = try Self.rawRecord(store, 2)
        let at = try #require(bytes.indices.first { i in i + 4 <= bytes.count && Array(bytes[i..<i + 4]) == Array("news".utf8) })
        bytes[at + 2] = UInt8(ascii: "x")
        try Self.overwrite(store, 2, Self.recomputedChecksum(bytes, key: 2))
        #expect(try store.read { txn in try store.log.record(at: 2, txn) } != nil)  // it decodes: only the chain tells

        let report = try Audit.run(store)
        #expect(!report.isClean)
        #expect(report.logIssues.map(\.sequence) == [2])
        #expect(report.logIssues.first?.kind == .chain)
        // The fold of the altered log disagrees with the live projections, and says where.
        #expect(report.projectionsCompared)
        #expect(report.differences.contains { $0.table == "topic_codes" && $0.project == "alpha" && $0.subject == "topic nexs" && $0.live == nil })
        #expect(report.differences.contains { $0.table == "topics" && $0.project == "alpha" && $0.subject == "topic news (id 16)"
            && ($0.live ?? "").hasPrefix("code news,") && ($0.rebuilt ?? "").hasPrefix("code nexs,") })

        // replay, history and export follow the chain too: a review found each answering from the
        // forged record with exit 0 (replay's output then failed its own audit).
        do {
            try Replay.rebuild(from: store, to: .end, into: dir.sub("as-of"))
            Issue.record("replay folded the forged record")
        } catch ReplayError.cannotFold(let issue) {
            #expect(issue.sequence == 2 && issue.kind == .chain, "\(issue)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir.sub("as-of")), "a failed replay leaves no store behind")
        try FileManager.default.createDirectory(atPath: dir.sub("empty-out"), withIntermediateDirectories: true)
        #expect(throws: ReplayError.self) { try Replay.rebuild(from: store, to: .end, into: dir.sub("empty-out")) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.sub("empty-out")) == [], "an empty --out is left empty")
        #expect(throws: RecordCorruption.self) { try History.device("d1", project: "alpha", in: store) }
        #expect(throws: RecordCorruption.self) { try History.topic("news", project: "alpha", in: store) }
        var exported = 0
        #expect(throws: ReplayError.self) { try Export.lines(from: store) { _ in exported += 1 } }
        #expect(exported == 1, "the record before it is exported, the forged one is not")
        // A range that starts right after it cannot be: the link before it is computed through the
        // forged record (record 2 keeps only 8 bytes of its link), which breaks the chain there.
        #expect { try Export.lines(from: store, from: 3) { _ in } } throws: { error in
            (error as? RecordCorruption).map { $0.sequence == 2 && $0.kind == .chain } ?? false
        }
        // One that starts after the next record keeping its whole link (64) follows the chain from it.
        #expect(try Export.lines(from: store, from: 65) { _ in }.records == 9)
    }

    /// An auditor review changed the sequence inside a record (CRC recomputed): the audit named
    /// only the broken link; that the record names another sequence showed only in the projections line.
    /// Records before version 4 state their sequence; a version 4 record states none, and one
    /// sealed for another sequence fails its checksum under this key.
    @Test("a record that names another sequence than its key is reported as such, beside its broken link")
    func recordNamingAnotherSequence() throws {
        let dir = ReplayTempDir("renumber")
        let store = try TopicStore(directory: dir.sub("live"))
        try Self.fill(store, count: 80)
        for seq: UInt64 in [12, 70] {
            // Record `seq` as version 3 (its own link), then saying seq + 1, its CRC recomputed.
            let previous = try store.read { txn in try store.chainLink(at: seq - 1, txn) }
            let record = try #require(try store.read { txn in try store.log.record(at: seq, txn) })
            var bytes = try RecordCodec.encode(record, previous: previous, version: 3)
            bytes.replaceSubrange(2..<10, with: withUnsafeBytes(of: (seq + 1).bigEndian) { Array($0) })
            try Self.overwrite(store, seq, Self.recomputedChecksum(bytes, key: seq))
        }
        // Record 20 sealed as version 4 for sequence 21 (its link and CRC as they would be there).
        let previous = try store.read { txn in try store.chainLink(at: 20 - 1, txn) }
        var moved = try #require(try store.read { txn in try store.log.record(at: 20, txn) })
        moved.sequence = 21
        try Self.overwrite(store, 20, try RecordCodec.encode(moved, previous: previous))
        let report = try Audit.run(store)
        #expect(!report.isClean)
        // Record 20 is damaged and keeps 8 bytes of its link: the chain is taken up at 64, which
        // keeps its whole link, and checked again from 65.
        #expect(report.linksUnchecked == 44)
        for seq: UInt64 in [12, 70] {
            #expect(report.logIssues.contains { $0.sequence == seq && $0.kind == .chain }, "\(report.logIssues)")
            #expect(report.logIssues.contains { $0.sequence == seq && $0.kind == .undecodable && $0.message.contains("record says sequence \(seq + 1)") },
                    "\(report.logIssues)")
        }
        #expect(report.logIssues.contains { $0.sequence == 20 && $0.message.contains("checksum mismatch") && $0.message.contains("for key 20") },
                "\(report.logIssues)")
    }

    @Test("a record rewritten with a recomputed link breaks the next link; the last one is caught by the anchored head")
    func rewrittenWithRecomputedLink() throws {
        let dir = ReplayTempDir("relink")
        let store = try TopicStore(directory: dir.sub("live"))
        try Self.fill(store, count: 60)
        func forge(_ seq: UInt64) throws {
            let previous = try store.read { txn in try store.chainLink(at: seq - 1, txn) }
            var record = try #require(try store.read { txn in try store.log.record(at: seq, txn) })
            record.timestamp += 1   // same length; a plausible forgery
            try Self.overwrite(store, seq, try RecordCodec.encode(record, previous: previous))
        }
        let anchored = try #require(try store.read { txn in try store.chainHead(txn) })
        try forge(30)
        var report = try Audit.run(store)
        // Record 31's link no longer follows (and its time may now be before 30's).
        #expect(Set(report.logIssues.map(\.sequence)) == [31])
        #expect(report.logIssues.first?.kind == .chain)

        let dir2 = ReplayTempDir("relink-last")
        let other = try TopicStore(directory: dir2.sub("live"))
        try Self.fill(other, count: 60)
        let head = try #require(try other.read { txn in try other.chainHead(txn) })
        let previous = try other.read { txn in try other.chainLink(at: 60 - 1, txn) }
        var last = try #require(try other.read { txn in try other.log.record(at: 60, txn) })
        last.timestamp += 1
        try Self.overwrite(other, 60, try RecordCodec.encode(last, previous: previous))
        report = try Audit.run(other)
        #expect(report.logIssueCount == 0)     // internally consistent…
        #expect(report.head != head)           // …but the head moved
        var options = Audit.Options()
        options.expectedHead = head
        report = try Audit.run(other, options: options)
        #expect(!report.isClean)
        #expect(report.logIssues.map(\.kind) == [.headMismatch])
        #expect(report.logIssues.first?.sequence == 60)
        _ = anchored
    }
}
