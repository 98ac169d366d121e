import Foundation
import Projections
@testable import Replay
import SubscriptionLog
import Testing
import TopicStore

/// `topicstore history` as a user sees it: the exact text and CSV lines, the
/// flow of a topic that garbage collection dropped, what `--svg` prints, the
/// chart's layout, and the progress bar's phases.
@Suite(.serialized) struct HistoryOutputTests {
    static let t0: Int64 = 1_764_470_188_563  // 2025-11-30T02:36:28.563Z
    static let readOnly = { var o = TopicStore.Options(); o.readOnly = true; return o }()

    /// A store with exact times (through `Importer`, as `import` makes it):
    /// `news` is created, emptied, dropped by garbage collection and created
    /// again; `sport` is never dropped.
    static func store(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.sub("data")
        let events: [(Int64, EventBody)] = [
            (t0, .token(deviceID: "D1", token: "tok1", platform: .ios)),                                          // 1
            (t0 + 436, .register(deviceID: "D1", topics: [TopicSpec(code: "news")])),                            // 2  .999
            (t0 + 438, .register(deviceID: "D2", topics: [TopicSpec(code: "news"), TopicSpec(code: "sport")])),  // 3  29.001
            (t0 + 1_937, .unregister(deviceID: "D1", codes: ["news"])),                                          // 4  30.500
            (t0 + 2_437, .unregisterAll(deviceID: "D2")),                                                        // 5  31.000
            (t0 + 3_687, .dropTopic(code: "news")),                                                              // 6  32.250
            (t0 + 4_444, .register(deviceID: "D3", topics: [TopicSpec(code: "news")])),                          // 7  33.007
            (t0 + 4_444, .register(deviceID: "D1", topics: [TopicSpec(code: "sport")])),                         // 8  33.007
        ]
        let importer = try Importer(creating: path)
        for (i, (ts, body)) in events.enumerated() {
            try importer.add(LogRecord(sequence: UInt64(i + 1), timestamp: ts, event: Event(project: "demo", body: body)))
        }
        try importer.finish()
        return path
    }

    @Test("text and CSV lines are exactly as documented (times to the millisecond, never rounded)")
    func exactLines() throws {
        let dir = TemporaryDirectory("history-lines")
        let data = try Self.store(dir)
        let text = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "sport"])
        #expect(text.status == 0, "\(text.error)")
        #expect(text.output == """
            topic sport in project demo: created at seq 3 (2025-11-30T02:36:29.001Z), 1 subscriber(s) as of seq 8, 3 change(s)
            seq 3  2025-11-30T02:36:29.001Z  + D2 (register)  → 1
            seq 5  2025-11-30T02:36:31.000Z  - D2 (unregister-all)  → 0
            seq 8  2025-11-30T02:36:33.007Z  + D1 (register)  → 1

            """)
        let csv = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "sport", "--csv"])
        #expect(csv.output == """
            seq,ts,time,device_id,change,cause,subscribers
            3,1764470189001,2025-11-30T02:36:29.001Z,D2,1,register,1
            5,1764470191000,2025-11-30T02:36:31.000Z,D2,-1,unregister-all,0
            8,1764470193007,2025-11-30T02:36:33.007Z,D1,1,register,1

            """)
        let device = try compactCLI(["history", "--data", data, "--project", "demo", "--device", "D1"])
        #expect(device.output == """
            device D1 in project demo: 4 event(s), log read through seq 8
            seq 1  2025-11-30T02:36:28.563Z  token: token tok1 (ios)  → live, topics []
            seq 2  2025-11-30T02:36:28.999Z  register: topics news  +[news]  → live, topics [news]
            seq 4  2025-11-30T02:36:30.500Z  unregister: topics news  -[news]  → live, topics []
            seq 8  2025-11-30T02:36:33.007Z  register: topics sport  +[sport]  → live, topics [sport]

            """)
        let deviceCSV = try compactCLI(["history", "--data", data, "--project", "demo", "--device", "D1", "--csv"])
        #expect(deviceCSV.output.split(separator: "\n").prefix(3) == [
            "seq,ts,time,kind,detail,subscribed,unsubscribed,topics,state,token,platform",
            "1,1764470188563,2025-11-30T02:36:28.563Z,token,token tok1 (ios),,,,live,tok1,ios",
            "2,1764470188999,2025-11-30T02:36:28.999Z,register,topics news,news,,news,live,tok1,ios",
        ])
    }

    @Test("the hand-written ISO-8601 time is the one Foundation's formatter gives, byte for byte")
    func isoMatchesFoundation() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var random = SeededRandom(seed: 77)
        var samples: [Int64] = [0, 1, 999, 1000, 86_399_999, 951_782_400_000, 4_102_444_799_999, 7_258_118_399_999]
        for _ in 0..<20_000 { samples.append(Int64(random.next() % 7_258_118_400_000)) }
        for base in [Self.t0, 1_709_164_800_000 /* 2024-02-29 */] { for ms in 0..<2_000 { samples.append(base + Int64(ms)) } }
        var bytes: [UInt8] = []
        for ms in samples {
            let expected = f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
            bytes.removeAll(keepingCapacity: true)
            TimeText.appendISO(ms, to: &bytes)
            guard String(decoding: bytes, as: UTF8.self) == expected, TimeText.iso(ms) == expected else {
                Issue.record("\(ms): \(String(decoding: bytes, as: UTF8.self)) vs \(expected)")
                return
            }
        }
    }
}
