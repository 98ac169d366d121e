@testable import EventJSON
import Foundation
import MPushAPI
@testable import Projections
import Testing

/// The hand-written JSON quoting of token streams and exports.
@Suite struct JSONTextTests {
    /// The word-at-a-time scan agrees with a byte-by-byte one on random
    /// bytes, whatever the length and wherever the one byte to escape sits.
    @Test func escapeScanMatchesByteByByte() {
        var rng = SeededRandom(seed: 7)
        let interesting: [UInt8] = [0x00, 0x01, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xA2, 0xDC, 0xE1, 0xE2, 0xE3, 0xFF]
        for _ in 0..<20_000 {
            let count = Int(rng.next() % 40)
            var bytes = (0..<count).map { _ in UInt8(0x30 + rng.next() % 64) }  // plain characters
            if count > 0 && rng.next() % 2 == 0 {
                bytes[Int(rng.next() % UInt64(count))] = interesting[Int(rng.next() % UInt64(interesting.count))]
            }
            let expected = bytes.contains { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C || $0 == 0xE2 }
            let got = bytes.withUnsafeBytes { JSONText.needsEscaping($0) }
            #expect(got == expected, "\(bytes)")
        }
    }

    /// appendQuoted writes what JSONSerialization reads back as the same string.
    @Test func quotedStringsRoundTrip() throws {
        for s in ["", "plain-token-0123456789abcdef", "a\"b", "back\\slash", "tab\there", "nul\u{0}x", "\u{1F}", "é ü 日本", String(repeating: "x", count: 200) + "\"",
                  "line\u{2028}sep\u{2029}aration", "dash — euro €"] {
            var out: [UInt8] = []
            var copy = s
            copy.withUTF8 { JSONText.appendQuoted(UnsafeRawBufferPointer($0), to: &out) }
            let parsed = try JSONSerialization.jsonObject(with: Data("[".utf8 + out + "]".utf8)) as? [String]
            #expect(parsed == [s], "\(s.debugDescription) → \(String(decoding: out, as: UTF8.self))")
            // One NDJSON line whatever splits it: U+2028/U+2029 escaped (a send-service review found them raw).
            #expect(!String(decoding: out, as: UTF8.self).unicodeScalars.contains { $0.value == 0x2028 || $0.value == 0x2029 })
        }
    }
}

/// The topic list (HTTP and `topics --json`) is written by hand: the same
/// bytes `JSONSerialization` writes with sorted keys and unescaped slashes.
@Suite struct TopicListJSONTests {
    @Test func sameBytesAsJSONSerialization() throws {
        let titles = ["News", "Ne\"ws/é\u{1}\\", "tab\there\nline", "🎉 emoji", "", "\u{7F}\u{1F}"]
        var topics: [TopicInfo] = []
        for (i, title) in titles.enumerated() {
            topics.append(TopicInfo(id: UInt32(16 + i), record: TopicRecord(
                code: "code.\(titles.count - i)", title: title, single: i % 2 == 0,
                subscribers: UInt32(i * 1_000_003), createdSeq: 1, lastChangeSeq: 1)))
        }
        let object: [String: Any] = ["project": "pro\"ject/1", "asOfSeq": 42, "topics":
            topics.sorted { $0.record.code < $1.record.code }.map { t -> [String: Any] in
                ["code": t.record.code, "title": t.record.title, "single": t.record.single, "subscribers": t.record.subscribers]
            }]
        let expected = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        let written = TopicListJSON.encode(project: "pro\"ject/1", asOf: 42, topics: topics)
        #expect(String(decoding: written, as: UTF8.self) == String(decoding: expected, as: UTF8.self))
        #expect(TopicListJSON.encode(project: "p", asOf: 0, topics: []) == Array(#"{"asOfSeq":0,"project":"p","topics":[]}"#.utf8))
    }
}
