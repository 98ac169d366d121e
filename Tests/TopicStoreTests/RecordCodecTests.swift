import SubscriptionLog
import Testing

@Suite struct RecordCodecTests {
    static let events: [EventBody] = [
        .token(deviceID: "D1", token: String(repeating: "f", count: 64), platform: .ios),
        .token(deviceID: "dév-ü", token: "fcm:" + String(repeating: "x", count: 150), platform: .android),
        .register(deviceID: "D1", topics: [TopicSpec(code: "all"), TopicSpec(code: "user.1", title: "User 1", single: true),
                                           TopicSpec(code: "news", title: "Néws", single: false)]),
        .unregister(deviceID: "D1", codes: ["news", "nope"]),
        .unregisterAll(deviceID: "D1"),
        .tokenRejected(token: "abc", rejectedAt: 1_764_100_807_728, reason: "Unregistered"),
    ]

    @Test(arguments: events)
    func roundTrip(body: EventBody) throws {
        let record = LogRecord(sequence: 42, timestamp: 1_764_100_000_000, event: Event(project: "demo", body: body))
        let bytes = try RecordCodec.encode(record)
        let decoded = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 42) }
        #expect(decoded == record)
    }

    @Test func everyFlippedByteIsDetectedAndLocated() throws {
        let record = LogRecord(sequence: 7, timestamp: 1_764_100_000_000,
                               event: Event(project: "demo", body: Self.events[2]))
        let bytes = try RecordCodec.encode(record)
        for i in 0..<bytes.count {
            var corrupt = bytes
            corrupt[i] ^= 0x40
            do {
                _ = try corrupt.withUnsafeBytes { try RecordCodec.decode($0, key: 7) }
                Issue.record("flipped byte \(i) went unnoticed")
            } catch let e as RecordCorruption {
                #expect(e.sequence == 7)
            }
        }
        // Truncation and a record stored under the wrong key.
        #expect(throws: RecordCorruption.self) { try Array(bytes.dropLast(5)).withUnsafeBytes { try RecordCodec.decode($0, key: 7) } }
        #expect(throws: RecordCorruption.self) { try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 8) } }
    }

    /// A string field is a u16 length and its bytes. A longer one was a precondition trap, and a
    /// 1-character title of 65,537 bytes killed the server: it is an error naming the field.
    @Test func aFieldLongerThanItsLengthCanSayIsAnErrorNotATrap() throws {
        let accented = { (marks: Int) in "e" + String(repeating: "\u{301}", count: marks) }
        func record(_ body: EventBody) -> LogRecord { LogRecord(sequence: 3, timestamp: 1_764_100_000_000, event: Event(project: "demo", body: body)) }
        let cases: [(EventBody, String)] = [
            (.register(deviceID: "D", topics: [TopicSpec(code: "a"), TopicSpec(code: "z", title: accented(32_768))]), "topics.1.title"),
            (.tokenRejected(token: "t", rejectedAt: 1_764_100_807_728, reason: accented(40_000)), "reason"),
            (.unregisterAll(deviceID: String(repeating: "d", count: 70_000)), "device_id"),
            (.register(deviceID: "D", topics: Array(repeating: TopicSpec(code: "a"), count: 65_536)), "topics"),
        ]
        for (body, field) in cases {
            var link = ChainHash.genesis
            #expect(throws: FieldTooLong.self, "\(field)") { try RecordCodec.encode(record(body), chainingFrom: &link) }
            do throws(FieldTooLong) { _ = try RecordCodec.encode(record(body), chainingFrom: &link) } catch {
                #expect(error.field == field)
                #expect(error.description.contains(field) && error.description.contains("65535"), "\(error)")
            }
            #expect(link == .genesis, "a refused record does not advance the chain")
        }
        // 65,535 bytes is the most a field holds, and it round-trips.
        let largest = record(.register(deviceID: "D", topics: [TopicSpec(code: "z", title: accented(32_767))]))
        let bytes = try RecordCodec.encode(largest)
        #expect(try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: 3) } == largest)
    }

    @Test func crc32cMatchesTheStandardCheckValue() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([]) == 0)
        #expect(Array("123456789".utf8).withUnsafeBytes { CRC32C.tableChecksum($0) } == 0xE306_9283)
    }

    /// The instruction (where the CPU has it) and the tables agree on every
    /// length around the 8-byte steps, at every alignment, with seeds.
    @Test func crc32cInstructionMatchesTheTables() {
        #if arch(x86_64)
        #expect(CRC32C.usesHardware, "an x86-64 CPU without SSE4.2: the comparison below checks nothing")
        #endif
        var rng = SeededRandom(seed: 32)
        let buffer = (0..<400).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        buffer.withUnsafeBytes { all in
            for length in 0..<80 {
                for offset in 0..<9 {
                    let bytes = UnsafeRawBufferPointer(rebasing: all[offset..<offset + length])
                    let seed = length % 3 == 0 ? 0 : UInt32(truncatingIfNeeded: rng.next())
                    #expect(CRC32C.checksum(bytes, seed: seed) == CRC32C.tableChecksum(bytes, seed: seed),
                            "length \(length) at offset \(offset)")
                }
            }
            let whole = UnsafeRawBufferPointer(rebasing: all[3..<400])
            #expect(CRC32C.checksum(whole) == CRC32C.tableChecksum(whole))
        }
    }
}
