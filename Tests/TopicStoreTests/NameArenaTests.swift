@testable import SubscriptionLog
import Testing

/// A rebuild's log reader decodes records for the fold with their names'
/// text in a `NameArena` (`FoldRecord`), not as Strings: the fold must see
/// exactly what `RecordCodec.decode` gives, for every name shape and every
/// record version, and the text must stay where it was put.
@Suite struct NameArenaTests {
    static func bodies(_ rng: inout SeededRandom) -> [EventBody] {
        let name = { (rng: inout SeededRandom) in DeviceRecordFormTests.randomName(&rng) }
        return [
            .token(deviceID: name(&rng), token: name(&rng), platform: rng.int(2) == 0 ? .ios : .android),
            .register(deviceID: name(&rng), topics: [TopicSpec(code: "all"), TopicSpec(code: "user.7", title: "User 7", single: true)]),
            .unregister(deviceID: name(&rng), codes: ["news", "nope"]),
            .unregisterAll(deviceID: name(&rng)),
            .tokenRejected(token: name(&rng), rejectedAt: 1_764_100_807_728, reason: "Unregistered"),
            .forgetDevice(deviceID: name(&rng)),
            .dropTopic(code: "old"),
            .expireToken(token: name(&rng)),
        ]
    }

    /// Every event type with names of every shape, written in every record
    /// version: the fold's decode, its names made Strings, is the record's decode.
    @Test func aFoldRecordIsTheRecordDecoded() throws {
        var rng = SeededRandom(seed: 0xA2E7A)
        let arena = NameArena()
        var checked = 0
        for round in 0..<400 {
            for body in Self.bodies(&rng) {
                let sequence = UInt64(round + 1)
                let record = LogRecord(sequence: sequence, timestamp: 1_764_100_000_000 + Int64(round), event: Event(project: "demo", body: body))
                var forms: [[UInt8]] = [try RecordCodec.encodeLegacyV1(record)]
                for version in RecordCodec.chainedVersions {
                    var link = ChainHash.genesis
                    forms.append(try RecordCodec.encode(record, chainingFrom: &link, version: version))
                }
                for bytes in forms {
                    let expected = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: sequence) }
                    let folded = try bytes.withUnsafeBytes { try RecordCodec.decode($0, key: sequence, names: arena) }
                    #expect(folded.logRecord == expected, "version \(bytes[0]): \(record)")
                    if bytes[0] != RecordCodec.legacyVersion {
                        let (verified, link) = try bytes.withUnsafeBytes {
                            try RecordCodec.decodeVerifyingLink($0, key: sequence, previous: .genesis, names: arena)
                        }
                        let (expectedVerified, expectedLink) = try bytes.withUnsafeBytes {
                            try RecordCodec.decodeVerifyingLink($0, key: sequence, previous: .genesis)
                        }
                        #expect(verified.logRecord == expectedVerified && link == expectedLink)
                    }
                    checked += 1
                }
            }
        }
        #expect(checked == 400 * 8 * (1 + RecordCodec.chainedVersions.count))
    }

    struct FoldFailed: Error {}

    /// The live path hands the fold each event's names through
    /// `EventBody.withTexts`; an error of the fold (a damaged record it
    /// refuses) passes through it for every event type, names long and short,
    /// and the event is intact after. (Declared `rethrows`, the debug build
    /// crashed there releasing a register's topic list.)
    @Test func anErrorOfTheFoldPassesThroughEveryEventType() throws {
        var rng = SeededRandom(seed: 0x7E8)
        for _ in 0..<50 {
            for body in Self.bodies(&rng) {
                var seen: FoldBody?
                #expect(throws: FoldFailed.self) {
                    try body.withTexts { folded in
                        seen = folded
                        throw FoldFailed()
                    }
                }
                #expect(seen?.typeName == body.typeName)
                try body.withTexts { folded in
                    let again = folded.mapNames { $0.string }
                    #expect(again == body)
                }
            }
        }
    }

    /// A name kept as text that is not UTF-8 (a record written by hand, or
    /// damaged and checksummed again) is repaired as a String repairs it, so
    /// the fold files the device under the name the live path filed it under.
    @Test func textThatIsNotUTF8IsRepairedAsAStringRepairsIt() {
        let arena = NameArena()
        for bytes: [UInt8] in [[0x64, 0xFF, 0x65], [0xC3], [0xE2, 0x82], [0x41, 0x80, 0x80, 0x42], Array("Gerät".utf8), []] {
            let text = bytes.withUnsafeBytes { arena.text(copying: $0) }
            let repaired = String(decoding: bytes, as: UTF8.self)
            #expect(text.string == repaired)
            #expect(Array(text.utf8) == Array(repaired.utf8))
        }
    }

    /// Texts stay where they were put while the arena grows by blocks (one
    /// longer than a block gets its own), as the fold reads them after the
    /// reader has gone on filling the arena.
    @Test func textsStayPutAsTheArenaGrows() {
        var rng = SeededRandom(seed: 0xB10C)
        let arena = NameArena()
        var kept: [(NameText, String)] = []
        for i in 0..<20_000 {
            let name = i % 5_000 == 0 ? String(repeating: "x", count: NameArena.blockSize + i) : DeviceRecordFormTests.randomName(&rng)
            kept.append((arena.text(copying: name), name))
        }
        for (text, name) in kept {
            #expect(text.equals(name) && text.string == name)
        }
        #expect(!kept[1].0.equals(kept[1].1 + "x"))
    }
}
