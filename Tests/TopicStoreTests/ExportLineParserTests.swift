import EventJSON
import Foundation
@testable import Replay
import SubscriptionLog
import Testing

/// The fast reading of export lines gives what the general reading gives, or nothing.
@Suite struct ExportLineParserTests {
    static let pieces = ["a", "news", "D1", "é", "日本", "🙂", "\"", "\\", "\n", "\t", "\r", "\u{01}", "\u{1F}", "\u{7F}",
                         "\u{2028}", " ", "x.y_z-1", "/", "{", "]", ",", ":"]

    static func text(_ random: inout SeededRandom, plain: Bool) -> String {
        if plain { return "s\(random.int(100_000))" }
        return (0..<(1 + random.int(4))).map { _ in random.pick(pieces) }.joined()
    }

    static func record(_ random: inout SeededRandom, plain: Bool) -> LogRecord {
        func t() -> String { text(&random, plain: plain) }
        let body: EventBody
        switch random.int(8) {
        case 0: body = .token(deviceID: t(), token: t() + String(repeating: "f", count: random.int(70)), platform: random.int(2) == 0 ? .ios : .android)
        case 1:
            body = .register(deviceID: t(), topics: (0..<random.int(4)).map { i in
                TopicSpec(code: "c\(i)" + (plain ? "" : t()), title: random.int(3) == 0 ? nil : t(),
                          single: [nil, true, false][random.int(3)])
            })
        case 2: body = .unregister(deviceID: t(), codes: (0..<random.int(4)).map { "c\($0)" + (plain ? "" : t()) })
        case 3: body = .unregisterAll(deviceID: t())
        case 4: body = .tokenRejected(token: t(), rejectedAt: 1_700_000_000_000 + Int64(random.int(1_000_000)), reason: t())
        case 5: body = .forgetDevice(deviceID: t())
        case 6: body = .dropTopic(code: t())
        default: body = .expireToken(token: t())
        }
        return LogRecord(sequence: UInt64(1 + random.int(1 << 40)), timestamp: 1_700_000_000_000 + Int64(random.int(1 << 30)),
                         event: Event(project: random.int(5) == 0 && !plain ? t() : "demo", body: body))
    }

    @Test func theFastReadingIsTheGeneralOneWhereItReads() throws {
        var random = SeededRandom(seed: 17)
        var fast = 0, general = 0, plainRead = 0, plainGeneral = 0
        for n in 0..<20_000 {
            let plain = n % 2 == 0
            let record = Self.record(&random, plain: plain)
            let link: ChainHash? = random.int(4) == 0 ? ChainHash(hex: String(repeating: "ab", count: 32)) : nil
            let line = EventJSON.line(record, link: link, unchained: random.int(10) == 0)
            let read = ExportLineParser.parse(line)
            let slow = try? Importer.parseObject(line: line, lineNumber: n + 1)
            if let read {
                fast += 1
                if plain { plainRead += 1 }
                let slow = try #require(slow, "the fast reading accepted a line the general one refuses: \(line)")
                #expect(read.record == slow.record && read.link == slow.link && read.unchained == slow.unchained, "\(line)")
                #expect(read.record == record, "\(line)")
            }
            if slow != nil { general += 1; if plain { plainGeneral += 1 } }
        }
        // It is the path taken: every valid plain line, and the escaped strings it knows.
        #expect(plainRead == plainGeneral && plainGeneral > 9_000, "\(plainRead) of \(plainGeneral)")
        #expect(fast * 10 > general * 9, "fast \(fast), general \(general)")
    }

    /// Lines written some other way are left to the general reading.
    @Test func otherFormsAreLeftToTheGeneralReading() throws {
        let base = #"{"seq":5,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"}"#
        #expect(ExportLineParser.parse(base) != nil)
        for other in [
            #"{"ts":1770000000000,"seq":5,"project":"demo","type":"unregister-all","device_id":"D1"}"#,
            #"{"seq": 5,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"}"#,
            #"{"seq":5.0,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"}"#,
            #"{"seq":05,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"}"#,
            #"{"seq":0,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"}"#,
            #"{"seq":5,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D\u0031"}"#,
            #"{"seq":5,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1","extra":1}"#,
            #"{"seq":5,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"} "#,
            #"{"seq":5,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":""}"#,
            #"{"seq":5,"ts":1770000000000,"project":"demo","type":"token","device_id":"D1","token":"t","platform":"IOS"}"#,
            #"{"seq":12345678901234567890,"ts":1770000000000,"project":"demo","type":"unregister-all","device_id":"D1"}"#,
        ] {
            #expect(ExportLineParser.parse(other) == nil, "\(other)")
        }
    }
}
