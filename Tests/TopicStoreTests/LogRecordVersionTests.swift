import Compaction
import Digest
import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Log records of version 3 hold device_ids and tokens as `StoredName`s, those
/// of version 4 no sequence (their checksum covers the key), a 48-bit time and
/// short lengths; the chain link of each is computed over the version 2 form,
/// so a log that mixes versions (a store written before and after a change)
/// verifies, exports, imports and archives with one chain and one head.
@Suite struct LogRecordVersionTests {
    static let uuidLower = "0f8fad5b-d9cb-469f-a165-70867728950e"
    static let apns = String(repeating: "9a", count: 32)
    /// An FCM-shaped token of 163 characters.
    static func fcm(_ i: Int) -> String { "i\(String(format: "%021d", i)):APA91b" + String(repeating: "Zq_-", count: 33) + "k9" }

    /// Random events with names of every shape, as in `DeviceRecordFormTests`.
    static func randomRecords(_ n: Int, seed: UInt64) -> [LogRecord] {
        var rng = SeededRandom(seed: seed)
        func name() -> String {
            let s = DeviceRecordFormTests.randomName(&rng)
            return s.isEmpty ? "e" : s
        }
        return (1...n).map { i in
            let body: EventBody
            switch rng.int(8) {
            case 0: body = .token(deviceID: name(), token: name(), platform: rng.int(2) == 0 ? .ios : .android)
            case 1: body = .register(deviceID: name(), topics: [TopicSpec(code: "news", title: rng.int(2) == 0 ? nil : "Néws", single: rng.int(3) == 0 ? nil : true),
                                                                TopicSpec(code: "user.\(i)")])
            case 2: body = .unregister(deviceID: name(), codes: ["news", "x.\(i)"])
            case 3: body = .unregisterAll(deviceID: name())
            case 4: body = .tokenRejected(token: name(), rejectedAt: 1_764_100_807_728 + Int64(i), reason: "Unregistered")
            case 5: body = .forgetDevice(deviceID: name())
            case 6: body = .dropTopic(code: "t.\(i)")
            default: body = .expireToken(token: name())
            }
            return LogRecord(sequence: UInt64(i), timestamp: 1_764_100_000_000 + Int64(i), event: Event(project: "demo", body: body))
        }
    }

    /// Every event type and name shape: versions 3, 4 and 5 decode to the same record and carry
    /// the link of its version 2 form; version 3 is at most a byte per name larger (a name kept
    /// as text), version 4 at least 11 bytes smaller than version 3 (the sequence, two bytes of
    /// the time, a byte of the project's length), version 5 24 bytes smaller than version 4 (8
    /// bytes of the link kept); every flipped byte is caught.
    @Test func versionsThreeAndFourCarryTheLinkOfVersionTwo() throws {
        var link2 = ChainHash.genesis, link3 = ChainHash.genesis, link4 = ChainHash.genesis, link5 = ChainHash.genesis
        for record in Self.randomRecords(3_000, seed: 21) {
            let previous = link4
            let v2 = try RecordCodec.encode(record, chainingFrom: &link2, version: 2)
            let v3 = try RecordCodec.encode(record, chainingFrom: &link3, version: 3)
            let v4 = try RecordCodec.encode(record, chainingFrom: &link4, version: 4)
            let v5 = try RecordCodec.encode(record, chainingFrom: &link5, version: 5)
            #expect(link2 == link3 && link3 == link4 && link4 == link5, "seq \(record.sequence)")
            #expect(v3.count <= v2.count + 2)
            #expect(v4[0] == 4 && v4.count <= v3.count - 11)
            #expect(v5[0] == 5 && v5.count == v4.count - 24)
            for bytes in [v2, v3, v4, v5] {
                #expect(try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: record.sequence) } == record)
                #expect(try bytes.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: record.sequence, previous: previous) } == link4)
                // The one pass a replay makes (decoded from the version 2 form the link covers) gives both.
                let both = try bytes.withUnsafeBytes { try RecordCodec.decodeVerifyingLink($0, key: record.sequence, previous: previous) }
                #expect(both.record == record && both.link == link4, "seq \(record.sequence), version \(bytes[0])")
            }
        }
        // An SDK device's token event: 64 bytes fewer than version 2 (21 for the UUID, 32 for
        // the APNs token, 11 for the sequence, the time and the project's length).
        let token = LogRecord(sequence: 1, timestamp: 1, event: Event(project: "demo", body: .token(deviceID: Self.uuidLower, token: Self.apns, platform: .ios)))
        var a = ChainHash.genesis, b = ChainHash.genesis
        #expect(try RecordCodec.encode(token, chainingFrom: &a, version: 2).count - RecordCodec.encode(token, chainingFrom: &b, version: 4).count == 64)
        // An Android device's: 72 bytes fewer (40 for the FCM token in 6 bits a character).
        let android = LogRecord(sequence: 1, timestamp: 1, event: Event(project: "demo", body: .token(deviceID: Self.uuidLower, token: Self.fcm(7), platform: .android)))
        a = .genesis; b = .genesis
        #expect(try RecordCodec.encode(android, chainingFrom: &a, version: 2).count - RecordCodec.encode(android, chainingFrom: &b, version: 4).count == 72)
        for bytes in [try RecordCodec.encode(token, version: 4), try RecordCodec.encode(token)] {
        #expect(bytes[0] == 4 || bytes[0] == 5)
        for i in 0..<bytes.count {
            var corrupt = bytes
            corrupt[i] ^= 0x10
            #expect(throws: RecordCorruption.self, "byte \(i)") {
                _ = try corrupt.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: 1, previous: .genesis) }
            }
        }
        }
    }

    /// The one pass of link and decode refuses every damaged record that the two
    /// calls refuse, with the same error (a fault in the fields located in the
    /// record as stored), and never returns a record where either refuses.
    @Test func theOnePassOfLinkAndDecodeFailsAsTheTwoCallsDo() throws {
        var link = ChainHash.genesis
        for record in Self.randomRecords(200, seed: 5) {
            let previous = link
            let bytes = try RecordCodec.encode(record, chainingFrom: &link)
            for i in 0..<bytes.count - 4 {
                for (flip, resealed) in [(UInt8(0x01), false), (0x80, false), (0x01, true), (0x80, true)] {
                    var corrupt = bytes
                    corrupt[i] ^= flip
                    if resealed {
                        // A forged record: its checksum computed again, so the link and the fields are what is checked.
                        let sum = corrupt.withUnsafeBytes {
                            RecordCodec.checksum(ofRecordBody: UnsafeRawBufferPointer(rebasing: $0[0..<corrupt.count - 4]), version: corrupt[0], key: record.sequence)
                        }
                        corrupt.replaceSubrange((corrupt.count - 4)..., with: withUnsafeBytes(of: sum.bigEndian) { Array($0) })
                    }
                    let separate = corrupt.withUnsafeBytes { b in
                        Result { () throws -> (LogRecord, ChainHash) in
                            let l = try RecordCodec.verifyLink(of: b, key: record.sequence, previous: previous)
                            return (try RecordCodec.decode(b, key: record.sequence), l)
                        }
                    }
                    let onePass = corrupt.withUnsafeBytes { b in
                        Result { try RecordCodec.decodeVerifyingLink(b, key: record.sequence, previous: previous) }
                    }
                    switch (separate, onePass) {
                    case (.failure(let a as RecordCorruption), .failure(let b as RecordCorruption)):
                        #expect(a.offset == b.offset && a.kind == b.kind && a.reason == b.reason, "seq \(record.sequence), byte \(i)")
                    case (.success(let a), .success(let b)):
                        #expect(a.0 == b.record && a.1 == b.link)
                    default:
                        Issue.record("seq \(record.sequence), byte \(i): \(separate) against \(onePass)")
                    }
                }
            }
        }
    }

    /// A name altered inside a version 3 record, its checksum recomputed, breaks the chain there.
    /// The writer seals records its callers prepared: one prepared event, sealed
    /// at any sequence and time, is byte for byte the record the version 2 path
    /// chains to the same link, and decodes to that record.
    @Test func aPreparedRecordSealsToItsRecordAtAnySequence() throws {
        var link2 = ChainHash.genesis, link3 = ChainHash.genesis
        for (i, record) in Self.randomRecords(500, seed: 5).enumerated() {
            let prepared = try RecordCodec.prepare(record.event)
            for (sequence, time) in [(record.sequence, record.timestamp), (UInt64(i) << 40 | 7, Int64(i) * 1_000_003 + 5),
                                     (UInt64(i + 1) * 64, Int64(i)), (UInt64.max - UInt64(i), Int64(1) << 48 - 1 - Int64(i))] {
                let moved = LogRecord(sequence: sequence, timestamp: time, event: record.event)
                let previous = link3
                var sealed = [UInt8](repeating: 0xEE, count: prepared.sealedCount(at: sequence))
                sealed.withUnsafeMutableBytes {
                    RecordCodec.seal(prepared, sequence: sequence, timestamp: time, chainingFrom: &link3, into: $0)
                }
                // Every 64th record keeps its whole link (version 4), the others its first 8 bytes (version 5).
                #expect(sealed[0] == (sequence % 64 == 0 ? 4 : 5), "record \(i) at \(sequence)")
                var link4 = previous
                #expect(try RecordCodec.encode(moved, chainingFrom: &link4) == sealed, "record \(i) at \(sequence)")
                _ = try RecordCodec.encode(moved, chainingFrom: &link2, version: 2)
                #expect(link3 == link2 && link4 == link3, "record \(i) at \(sequence)")
                #expect(try sealed.withUnsafeBytes { try RecordCodec.decode($0, key: sequence) } == moved)
                #expect(try sealed.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: sequence, previous: previous) } == link3)
            }
        }
    }

    @Test func anAlteredCompactNameBreaksTheChain() throws {
        let dir = ReplayTempDir("v3-forged-name")
        let store = try TopicStore(directory: dir.sub("live"))
        defer { store.close() }
        try store.submitAndWait(Event(project: "demo", body: .token(deviceID: Self.uuidLower, token: Self.apns, platform: .ios)))
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: Self.uuidLower, topics: [TopicSpec(code: "news")])))
        var bytes = try HashChainTests.rawRecord(store, 1)
        // The token's first byte, stored packed: its 32 bytes of 0x9a (the first 0x9a alone
        // may be a byte of the record's timestamp, about one run in 60: then the altered time
        // also went past the next record's, and audit reported that too).
        let packed = [UInt8](repeating: 0x9a, count: 32)
        let at = try #require(bytes.indices.first { bytes[$0...].starts(with: packed) })
        bytes[at] = 0x9b
        try HashChainTests.overwrite(store, 1, HashChainTests.recomputedChecksum(bytes, key: 1))
        let report = try Audit.run(store)
        #expect(report.logIssues.map(\.sequence) == [1] && report.logIssues.first?.kind == .chain)
    }

    /// Version 4's edges: lengths of 254 and more (the escape and a u16), up to the limit;
    /// a length written behind the escape when one byte holds it is refused; a time that does
    /// not fit in 48 bits is written in version 3; a record's project is read from either header.
    @Test func versionFourLengthsTimesAndProjects() throws {
        for n in [0, 1, 254, 255, 256, 300, 65_535] {
            let long = String(repeating: "é", count: n / 2) + String(repeating: "t", count: n % 2)
            let project = n <= 300 ? "p" + String(repeating: "q", count: max(0, n - 1)) : "demo"
            let record = LogRecord(sequence: 9, timestamp: 1_764_100_000_000, event: Event(project: project, body: .register(
                deviceID: Self.uuidLower, topics: [TopicSpec(code: "news", title: long, single: nil), TopicSpec(code: "user.\(n)")])))
            var link2 = ChainHash.genesis, link4 = ChainHash.genesis
            _ = try RecordCodec.encode(record, chainingFrom: &link2, version: 2)
            let v4 = try RecordCodec.encode(record, chainingFrom: &link4, version: 4)
            let v3 = try RecordCodec.encode(record, version: 3)
            #expect(v4[0] == 4 && link4 == link2, "length \(n)")
            #expect(try v4.withUnsafeBytes { try RecordCodec.decode($0, key: 9) } == record, "length \(n)")
            #expect(try v4.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: 9, previous: .genesis) } == link2, "length \(n)")
            for bytes in [v3, v4, try RecordCodec.encode(record, version: 5)] {
                #expect(bytes.withUnsafeBytes { RecordCodec.names(project: Array(project.utf8), $0) }, "v\(bytes[0]) length \(n)")
                #expect(try bytes.withUnsafeBytes { try RecordCodec.timestamp(of: $0, key: 9) } == record.timestamp, "v\(bytes[0]) length \(n)")
                #expect(!bytes.withUnsafeBytes { RecordCodec.names(project: Array((project + "x").utf8), $0) }, "v\(bytes[0]) length \(n)")
                #expect(!bytes.withUnsafeBytes { RecordCodec.names(project: Array(project.utf8.dropLast()), $0) }, "v\(bytes[0]) length \(n)")
            }
        }
        // The project "demo"'s length (byte 8) rewritten as the escape and a u16 4, the CRC recomputed.
        let record = LogRecord(sequence: 3, timestamp: 1_764_100_000_000, event: Event(project: "demo", body: .unregisterAll(deviceID: "d")))
        let v4 = try RecordCodec.encode(record)
        #expect(v4[8] == 4)
        var overlong = Array(v4[..<8]) + [255, 0, 4] + Array(v4[9...])
        overlong = HashChainTests.recomputedChecksum(overlong, key: 3)
        for check in [{ _ = try overlong.withUnsafeBytes { try RecordCodec.decode($0, key: 3) } },
                      { _ = try overlong.withUnsafeBytes { try RecordCodec.verifyLink(of: $0, key: 3, previous: .genesis) } }] {
            do {
                try check()
                Issue.record("a length written in three bytes was taken")
            } catch let e as RecordCorruption {
                #expect(e.kind == .format && e.offset == 8 && e.reason.contains("three bytes"), "\(e)")
            }
        }
        // Times outside 48 bits: version 3, the same link, the same record back.
        for time in [-1, 1 << 48, Int64.max, Int64.min] as [Int64] {
            let old = LogRecord(sequence: 4, timestamp: time, event: record.event)
            var link2 = ChainHash.genesis, link = ChainHash.genesis
            _ = try RecordCodec.encode(old, chainingFrom: &link2, version: 2)
            let bytes = try RecordCodec.encode(old, chainingFrom: &link)
            #expect(bytes[0] == 3 && link == link2, "time \(time)")
            #expect(try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 4) } == old)
            #expect(try bytes.withUnsafeBytes { try RecordCodec.timestamp(of: $0, key: 4) } == time)
        }
        let last = LogRecord(sequence: 4, timestamp: 1 << 48 - 1, event: record.event)
        let bytes = try RecordCodec.encode(last)
        let stored = try bytes.withUnsafeBytes { try RecordCodec.timestamp(of: $0, key: 4) }
        #expect(bytes[0] == 5 && stored == 1 << 48 - 1)
    }

    /// Forged records: random version 3, 4 and 5 records with bytes changed, cut, inserted or
    /// doubled, their checksum recomputed for the key, as someone rewriting the file would.
    /// Every reader either gives a record back or throws a `RecordCorruption` naming the key;
    /// none traps, and none reads past the record. A record that still decodes verifies or
    /// breaks the chain at its own sequence.
    @Test func forgedRecordsAreRefusedOrReadNeverTrapped() throws {
        var rng = SeededRandom(seed: 77)
        let records = Self.randomRecords(1_500, seed: 13)
        var decoded = 0, refused = 0
        for record in records {
            let version: UInt8 = [3, 4, 5, 5][rng.int(4)]
            var original = try RecordCodec.encode(record, version: version)
            // The CRC's four bytes stay at the end: the forger recomputes them.
            var body = Array(original[..<(original.count - 4)])
            switch rng.int(5) {
            case 0:
                for _ in 0...rng.int(3) { body[rng.int(body.count)] = UInt8(truncatingIfNeeded: rng.next()) }
            case 1:
                // Cut anywhere, to nothing at all.
                body.removeLast(1 + rng.int(rng.int(2) == 0 ? body.count : min(body.count, 40)))
            case 2:
                let at = rng.int(body.count + 1)
                body.insert(contentsOf: (0...rng.int(6)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }, at: at)
            case 3:
                let at = rng.int(body.count)
                body.insert(contentsOf: body[at..<min(body.count, at + 1 + rng.int(20))], at: at)
            default:
                // A length or count made the escape, or the escape made a small length.
                let at = 1 + rng.int(body.count - 1)
                body[at] = body[at] == 255 ? UInt8(rng.int(255)) : 255
            }
            original = HashChainTests.recomputedChecksum(body + [0, 0, 0, 0], key: record.sequence)
            let key = record.sequence
            try original.withUnsafeBytes { b in
                do {
                    let back = try RecordCodec.decode(b, key: key)
                    #expect(back.sequence == key)
                    decoded += 1
                } catch let e as RecordCorruption {
                    #expect(e.sequence == key && e.offset >= 0 && e.offset <= b.count, "\(e)")
                    refused += 1
                }
                do {
                    _ = try RecordCodec.verifyLink(of: b, key: key, previous: .genesis)
                } catch let e as RecordCorruption {
                    #expect(e.sequence == key, "\(e)")
                }
                _ = RecordCodec.statedSequence(of: b, key: key &+ 1, due: key)
                _ = RecordCodec.names(project: Array("demo".utf8), b)
                _ = RecordCodec.unverifiedLink(of: b)
                _ = try? RecordCodec.storedLinkPart(of: b, key: key)
                _ = RecordGlance(b)
                _ = try? RecordCodec.timestamp(of: b, key: key)
            }
        }
        #expect(decoded > 50 && refused > 500, "decoded \(decoded), refused \(refused)")
    }

    /// A store whose log holds version 2 and version 3 records (written before the changes) and
    /// version 4 ones: audit is clean, export and import give the same head, and compaction
    /// archives and verifies them.
    @Test func aLogOfThreeVersionsVerifiesExportsAndArchives() throws {
        let dir = ReplayTempDir("v2-v3-v4")
        let store = try TopicStore(directory: dir.sub("data"))
        var events: [Event] = []
        for i in 0..<200 {
            let id = i % 2 == 0 ? UUID().uuidString.lowercased() : "dev-\(i)"
            events.append(Event(project: "demo", body: .token(deviceID: id, token: String(format: "%064x", i * 7919), platform: .ios)))
            events.append(Event(project: "demo", body: .register(deviceID: id, topics: [TopicSpec(code: "news"), TopicSpec(code: "t\(i % 7)")])))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        let head = try #require(try store.read { txn in try store.chainHead(txn) })
        // The first 100 records as version 2 wrote them, the next 150 as version 3: the same
        // links, so the chain holds.
        var link = ChainHash.genesis
        for seq in UInt64(1)...250 {
            let record = try HashChainTests.rawRecord(store, seq).withUnsafeBytes { try RecordCodec.decode($0, key: seq) }
            try HashChainTests.overwrite(store, seq, try RecordCodec.encode(record, chainingFrom: &link, version: seq <= 100 ? 2 : 3))
        }
        #expect(try HashChainTests.rawRecord(store, 100)[0] == 2 && HashChainTests.rawRecord(store, 250)[0] == 3
                    && HashChainTests.rawRecord(store, 251)[0] == 5 && HashChainTests.rawRecord(store, 256)[0] == 4)
        #expect(try Audit.run(store).isClean)

        var lines: [String] = []
        try Export.lines(from: store) { lines.append($0) }
        let importer = try Importer(creating: dir.sub("imported"))
        for (i, line) in lines.enumerated() {
            let parsed = try Importer.parse(line: line, lineNumber: i + 1)
            try importer.add(parsed.record, link: parsed.link, unchained: parsed.unchained, lineNumber: i + 1)
        }
        #expect(try importer.finish() == head, "the imported log (versions 4 and 5) has the source's head")
        store.close()

        let cut = try #require(lines.count > 300 ? Int64?(nowMilliseconds() + 60_000) : nil)
        let report = try Compactor.run(directory: dir.sub("data"), options: compactionOptions(keepingFrom: cut, archive: dir.sub("archive")))
        // Everything up to the horizon (all but the last record) archived, version 2 records included, and verified.
        #expect(report.horizon >= 300 && report.eventsArchived == report.horizon)
        let after = try TopicStore(directory: dir.sub("data"))
        defer { after.close() }
        #expect(try Audit.run(after).isClean)
    }

    /// A store written before the 6-bit form holds its FCM tokens as text in
    /// version 3 records: the audit is clean, and compaction archives and verifies
    /// them (each archive line re-encodes with the token in 6 bits: the same event
    /// under the same chain link, not the same bytes).
    @Test func fcmTokensStoredAsTextAuditAndArchive() throws {
        let dir = ReplayTempDir("fcm-as-text")
        let store = try TopicStore(directory: dir.sub("data"))
        var events: [Event] = []
        for i in 0..<200 {
            events.append(Event(project: "demo", body: .token(deviceID: "dev-\(i)", token: Self.fcm(i), platform: .android)))
            events.append(Event(project: "demo", body: .register(deviceID: "dev-\(i)", topics: [TopicSpec(code: "news"), TopicSpec(code: "t\(i % 7)")])))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        // The first 250 records as the code before wrote them: version 3, every name as text.
        var link = ChainHash.genesis
        for seq in UInt64(1)...250 {
            let record = try HashChainTests.rawRecord(store, seq).withUnsafeBytes { try RecordCodec.decode($0, key: seq) }
            try HashChainTests.overwrite(store, seq, try Self.namesAsText(record, chainingFrom: &link))
        }
        let old = try HashChainTests.rawRecord(store, 249), new = try HashChainTests.rawRecord(store, 251)
        #expect(old[0] == 3 && new[0] == 5 && old.count == new.count + 41 + 1 + 11 + 24,
                "as text: the token 41 bytes more, the device id (dev-124) one; version 3: 11 more, and the whole link 24")
        #expect(try old.withUnsafeBytes { try RecordCodec.decode($0, key: 249) }.event.body == .token(deviceID: "dev-124", token: Self.fcm(124), platform: .android))
        #expect(try Audit.run(store).isClean)
        store.close()

        let report = try Compactor.run(directory: dir.sub("data"), options: compactionOptions(keepingFrom: nowMilliseconds() + 60_000, archive: dir.sub("archive")))
        #expect(report.horizon >= 300 && report.eventsArchived == report.horizon)
        let after = try TopicStore(directory: dir.sub("data"))
        defer { after.close() }
        #expect(try Audit.run(after).isClean)
    }

    /// `record` as version 3 with its names as text (form 0), as written before the
    /// 6-bit form: its version 2 form with a form byte before each name (token and
    /// register events only), under the same link.
    static func namesAsText(_ record: LogRecord, chainingFrom link: inout ChainHash) throws -> [UInt8] {
        let v2 = try RecordCodec.encode(record, chainingFrom: &link, version: 2)
        let fields = Array(v2[..<(v2.count - 36)])
        var out = [UInt8](fields[..<18])
        out[0] = 3
        var at = 18
        func string(name: Bool) {
            let n = Int(fields[at]) << 8 | Int(fields[at + 1])
            if name { out.append(0) }
            out += fields[at..<at + 2 + n]
            at += 2 + n
        }
        string(name: false)  // project
        switch record.event.body {
        case .token: string(name: true); string(name: true)
        case .register: string(name: true)
        default: Issue.record("only token and register events")
        }
        out += fields[at...]
        out += v2[(v2.count - 36)..<(v2.count - 4)]  // the link
        out += withUnsafeBytes(of: CRC32C.checksum(out).bigEndian) { Array($0) }
        return out
    }
}
