import Compaction
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

    @Test("rejections name their times in ISO 8601; an ignored one says why; a device that does not exist is absent")
    func rejectionsAndAbsentDevices() throws {
        let dir = TemporaryDirectory("history-rejections")
        let path = dir.sub("data")
        let events: [(Int64, EventBody)] = [
            (Self.t0, .unregister(deviceID: "D1", codes: ["news"])),                                   // 1: no such device yet
            (Self.t0 + 100, .token(deviceID: "D1", token: "tok1", platform: .ios)),                    // 2
            (Self.t0 + 200, .tokenRejected(token: "tok1", rejectedAt: Self.t0 + 50, reason: "Unregistered")),  // 3: before the token: ignored
            (Self.t0 + 300, .tokenRejected(token: "tok1", rejectedAt: Self.t0 + 250, reason: "Unregistered")), // 4: applies
            (Self.t0 + 400, .forgetDevice(deviceID: "D1")),                                            // 5: idle and rejected: forgotten
        ]
        try {
            // The importer holds its environment until it is released: one open copy per process.
            let importer = try Importer(creating: path)
            for (i, (ts, body)) in events.enumerated() {
                try importer.add(LogRecord(sequence: UInt64(i + 1), timestamp: ts, event: Event(project: "demo", body: body)))
            }
            try importer.finish()
        }()
        let text = try compactCLI(["history", "--data", path, "--project", "demo", "--device", "D1"])
        #expect(text.status == 0, "\(text.error)")
        #expect(text.output == """
            device D1 in project demo: 5 event(s), log read through seq 5
            seq 1  2025-11-30T02:36:28.563Z  unregister: topics news  → no such device
            seq 2  2025-11-30T02:36:28.663Z  token: token tok1 (ios)  → live, topics []
            seq 3  2025-11-30T02:36:28.763Z  rejection-ignored: rejection at 2025-11-30T02:36:28.613Z ignored (the token was registered at 2025-11-30T02:36:28.663Z, after it)  → live, topics []
            seq 4  2025-11-30T02:36:28.863Z  token-rejected: provider rejected the token at 2025-11-30T02:36:28.813Z: Unregistered  → rejected, topics []
            seq 5  2025-11-30T02:36:28.963Z  forgotten: garbage collection forgot the idle device  → no such device

            """, "\(text.output)")
        // The state in --json and --csv is "absent" where no device exists, as replayed projections have none.
        let store = try TopicStore(directory: path, options: Self.readOnly)
        defer { store.close() }
        let timeline = try History.device("D1", project: "demo", in: store)
        #expect(timeline.entries.map(\.state) == ["absent", "live", "live", "rejected", "absent"])
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

    @Test("compaction's garbage collection drops an empty topic: its flow and header say so")
    func droppedByCompaction() throws {
        let dir = TemporaryDirectory("history-gc-drop")
        let store = try TopicStore(directory: dir.sub("data"))
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D1", topics: [TopicSpec(code: "promo"), TopicSpec(code: "news")])))
        try store.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "D1", codes: ["promo"])))
        usleep(20_000)
        let cut = nowMilliseconds()
        usleep(20_000)
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D2", topics: [TopicSpec(code: "news")])))
        store.close()
        let report = try Compactor.run(directory: dir.sub("data"), options: compactionOptions(keepingFrom: cut))
        #expect(report.topicsDropped == 1)
        let data = dir.sub("data")
        let compacted = try TopicStore(directory: data, options: Self.readOnly)
        let flow = try History.topic("promo", project: "demo", in: compacted)
        compacted.close()
        let drop = try #require(flow.points.last)
        #expect(drop.cause == "drop-topic" && drop.sequence > report.horizon)
        #expect(flow.lifecycle == [History.TopicLifeEvent(kind: .created, sequence: 1, timestamp: nil),
                                   History.TopicLifeEvent(kind: .dropped, sequence: drop.sequence, timestamp: drop.timestamp)])
        #expect(!flow.exists)
        let text = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "promo"])
        #expect(text.output.hasPrefix("topic promo in project demo: created at seq 1 (before the compaction horizon), "
            + "dropped at seq \(drop.sequence) (\(TimeText.iso(drop.timestamp))), so it no longer exists; "), "\(text.output)")
        #expect(text.output.hasSuffix("seq \(drop.sequence)  \(TimeText.iso(drop.timestamp))  drop-topic: the topic was removed "
            + "(garbage collection: no subscribers)\n"), "\(text.output)")
    }

    @Test("a topic dropped by garbage collection: the drop is in the flow, the header says dropped and created again")
    func droppedTopic() throws {
        let dir = TemporaryDirectory("history-dropped")
        let data = try Self.store(dir)
        let store = try TopicStore(directory: data, options: Self.readOnly)
        defer { store.close() }
        let flow = try History.topic("news", project: "demo", in: store, recordsPerReadTransaction: 3)
        #expect(flow.points.map(\.sequence) == [2, 3, 4, 5, 6, 7])
        let drop = try #require(flow.points.first { $0.sequence == 6 })
        #expect(drop.cause == "drop-topic" && drop.change == 0 && drop.subscribers == 0 && drop.deviceID.isEmpty)
        #expect(flow.createdSeq == 2)
        #expect(flow.lifecycle.map(\.kind) == [.created, .dropped, .created])
        #expect(flow.lifecycle.map(\.sequence) == [2, 6, 7])
        // The fold agrees: no topic between the drop and the new register.
        for (seq, exists) in [(5, true), (6, false), (7, true)] as [(UInt64, Bool)] {
            let out = dir.sub("replay-\(seq)")
            try Replay.rebuild(from: store, to: .sequence(seq), into: out)
            let replayed = try TopicStore(directory: out, options: Self.readOnly)
            let tid = try replayed.read { txn in try replayed.reader.topicID(1, code: "news", txn) }
            #expect((tid != nil) == exists, "seq \(seq)")
            replayed.close()
        }

        let text = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "news"])
        #expect(text.status == 0, "\(text.error)")
        let lines = text.output.split(separator: "\n").map(String.init)
        #expect(lines.first == "topic news in project demo: created at seq 2 (2025-11-30T02:36:28.999Z), "
            + "dropped at seq 6 (2025-11-30T02:36:32.250Z), created again at seq 7 (2025-11-30T02:36:33.007Z), "
            + "1 subscriber(s) as of seq 8, 5 change(s)")
        #expect(lines.contains("seq 6  2025-11-30T02:36:32.250Z  drop-topic: the topic was removed (garbage collection: no subscribers)"),
                "\(text.output)")
        let csv = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "news", "--csv"])
        #expect(csv.output.contains("\n6,1764470192250,2025-11-30T02:36:32.250Z,,0,drop-topic,0\n"), "\(csv.output)")
        let json = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "news", "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
        let lifecycle = try #require(object["lifecycle"] as? [[String: Any]])
        #expect(lifecycle.map { $0["event"] as? String } == ["created", "dropped", "created"])
        #expect(lifecycle.map { ($0["seq"] as? NSNumber)?.intValue } == [2, 6, 7])
        let points = try #require(object["points"] as? [[String: Any]])
        #expect(points.contains { $0["cause"] as? String == "drop-topic" && ($0["seq"] as? NSNumber)?.intValue == 6 })

        // Dropped and not created again: the header says it no longer exists.
        let gone = dir.sub("gone")
        let importer = try Importer(creating: gone)
        for (i, body) in [EventBody.register(deviceID: "D1", topics: [TopicSpec(code: "promo")]),
                          .unregister(deviceID: "D1", codes: ["promo"]), .dropTopic(code: "promo")].enumerated() {
            try importer.add(LogRecord(sequence: UInt64(i + 1), timestamp: Self.t0, event: Event(project: "demo", body: body)))
        }
        try importer.finish()
        let goneText = try compactCLI(["history", "--data", gone, "--project", "demo", "--topic", "promo"])
        #expect(goneText.output.hasPrefix("topic promo in project demo: created at seq 1 (2025-11-30T02:36:28.563Z), "
            + "dropped at seq 3 (2025-11-30T02:36:28.563Z), so it no longer exists; 0 subscriber(s) as of seq 3, 2 change(s)\n"),
                "\(goneText.output)")
    }

    @Test("--svg writes the chart and prints a summary, not the listing, unless --csv or --json asks for it")
    func svgPrintsASummary() throws {
        let dir = TemporaryDirectory("history-svg")
        let data = try Self.store(dir)
        let chart = dir.sub("chart.svg")
        let run = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "sport", "--svg", chart])
        #expect(run.status == 0, "\(run.error)")
        #expect(FileManager.default.fileExists(atPath: chart))
        #expect(run.output == "wrote \(chart): subscribers of sport in project demo, 3 point(s) from seq 3 to seq 8 "
            + "(2025-11-30T02:36:29.001Z to 2025-11-30T02:36:33.007Z), 0 to 1 subscriber(s), 1 as of seq 8\n", "\(run.output)")
        let withCSV = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "sport", "--svg", chart, "--csv"])
        #expect(withCSV.output.hasPrefix("seq,ts,time,device_id,change,cause,subscribers\n3,"), "\(withCSV.output)")
        let withJSON = try compactCLI(["history", "--data", data, "--project", "demo", "--topic", "sport", "--svg", chart, "--json"])
        #expect((try? JSONSerialization.jsonObject(with: Data(withJSON.output.utf8))) != nil, "\(withJSON.output)")
    }

    // MARK: Chart layout

    /// A label's box, from a character-width estimate (0.6 em, as sans-serif
    /// digits and lower-case letters are on average; bold 0.65 em).
    struct Box {
        var x0, x1, y0, y1: Double
        var text: String
        func overlaps(_ o: Box) -> Bool { x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1 }
    }

    static func labels(_ svg: String) -> [Box] {
        func attribute(_ name: String, _ tag: Substring) -> String? {
            guard let r = tag.range(of: " \(name)=\"") else { return nil }
            return String(tag[r.upperBound...].prefix { $0 != "\"" })
        }
        var boxes: [Box] = []
        var rest = svg[...]
        while let open = rest.range(of: "<text") {
            let tagEnd = rest[open.upperBound...].firstIndex(of: ">")!
            let tag = rest[open.upperBound..<tagEnd]
            let close = rest[tagEnd...].range(of: "</text>")!
            let content = rest[rest.index(after: tagEnd)..<close.lowerBound]
                .replacingOccurrences(of: "&amp;", with: "&").replacingOccurrences(of: "&lt;", with: "<")
                .replacingOccurrences(of: "&gt;", with: ">").replacingOccurrences(of: "&quot;", with: "\"")
            rest = rest[close.upperBound...]
            let size = Double(attribute("font-size", tag) ?? "12")!
            let bold = attribute("font-weight", tag) == "bold"
            let width = Double(content.count) * size * (bold ? 0.65 : 0.6)
            let (ascent, descent) = (0.8 * size, 0.25 * size)
            let anchor = attribute("text-anchor", tag) ?? "start"
            let (lx0, lx1) = anchor == "middle" ? (-width / 2, width / 2) : anchor == "end" ? (-width, 0) : (0, width)
            if let transform = attribute("transform", tag) {
                // translate(tx,ty) rotate(-90): local (x, y) lands on (tx + y, ty - x).
                let numbers = transform.split(whereSeparator: { !"0123456789.-".contains($0) }).compactMap { Double($0) }
                let (tx, ty) = (numbers[0], numbers[1])
                #expect(transform.contains("rotate(-90)"))
                boxes.append(Box(x0: tx - ascent, x1: tx + descent, y0: ty - lx1, y1: ty - lx0, text: content))
            } else {
                let x = Double(attribute("x", tag)!)!, y = Double(attribute("y", tag)!)!
                boxes.append(Box(x0: x + lx0, x1: x + lx1, y0: y - ascent, y1: y + descent, text: content))
            }
        }
        return boxes
    }

    static func flow(code: String = "all", span: Int64, counts: [Int]) -> History.TopicFlow {
        let points = counts.enumerated().map { i, n in
            History.TopicPoint(sequence: UInt64(i + 1), timestamp: t0 + span * Int64(i) / Int64(max(1, counts.count - 1)),
                               deviceID: "d\(i)", change: 1, cause: "register", subscribers: n)
        }
        return History.TopicFlow(project: "bench", code: code, createdSeq: 1, createdAt: t0, points: points,
                                 asOfSeq: UInt64(counts.count), asOfTime: t0 + span, horizon: nil)
    }

    /// An auditor review found five evenly spaced instants labelled with their date alone: the
    /// "2026-10-02" tick stood at 13:22 and 10-03 was missing. Ticks now sit on round times
    /// (midnights, whole hours…), each labelled with what it is.
    @Test("x ticks sit on round UTC times and say exactly which", arguments: [
        (Int64(1_790_830_000_000), Int64(6 * 86_400_000 + 3_600_000), ["2026-10-02", "2026-10-03", "2026-10-04", "2026-10-05", "2026-10-06", "2026-10-07"]),
        (Int64(1_790_830_000_000), Int64(3 * 3_600_000), ["05:00", "05:30", "06:00", "06:30", "07:00", "07:30"]),
        (Int64(1_790_830_000_000), Int64(40_000), ["04:46:40", "04:46:50", "04:47:00", "04:47:10", "04:47:20"]),
        (Int64(1_790_830_000_000), Int64(36 * 3_600_000), ["10-01 06:00", "10-01 12:00", "10-01 18:00", "10-02 00:00", "10-02 06:00", "10-02 12:00"]),
    ])
    func chartTimeTicks(start: Int64, span: Int64, labels: [String]) {
        let (ticks, text) = SubscriberChart.timeTicks(from: start, to: start + span)
        #expect(text == labels, "\(TimeText.iso(start)) + \(span) ms")
        #expect(ticks.count <= 7 && ticks.allSatisfy { $0 >= start && $0 <= start + span })
        // Each label is the tick's own time, cut to the precision of the step.
        for (t, label) in zip(ticks, text) { #expect(TimeText.iso(t).contains(label.replacingOccurrences(of: " ", with: "T")), "\(label) at \(TimeText.iso(t))") }
    }

    @Test("chart labels stay inside the picture and the y title clears the tick labels, however wide they are",
          arguments: [(1_000_000, Int64(1_800_000)), (7, Int64(40_000)), (123_456_789, Int64(3 * 86_400_000)), (45_000, Int64(7_200_000))])
    func chartLayout(top: Int, span: Int64) {
        for code in ["all", String(repeating: "user.12345678-", count: 9)] {
            let svg = SubscriberChart.svg(Self.flow(code: code, span: span, counts: [1, top / 2, top]))
            let view = svg.range(of: "viewBox=\"0 0 ")!
            let size = svg[view.upperBound...].prefix { $0 != "\"" }.split(separator: " ").map { Double($0)! }
            let boxes = Self.labels(svg)
            #expect(boxes.count >= 10)
            for b in boxes {
                #expect(b.x0 >= 0 && b.x1 <= size[0] && b.y0 >= 0 && b.y1 <= size[1], "\(b.text) at \(b) outside 0 0 \(size)")
            }
            for (i, a) in boxes.enumerated() {
                for b in boxes[(i + 1)...] { #expect(!a.overlaps(b), "\(a.text) overlaps \(b.text)") }
            }
            if top == 1_000_000 { #expect(svg.contains(">1,000,000</text>"), "y labels are grouped by thousands") }
        }
    }

    // MARK: Progress

    /// Runs `command` under `script`, so that standard error is a terminal; returns what that terminal showed.
    static func onATerminal(_ command: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-qec", command, "/dev/null"]
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    @Test("on a terminal the bar has an output phase while the listing is written to a file; quiet with --json",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func progressPhases() throws {
        let dir = TemporaryDirectory("history-progress")
        let data = try Self.store(dir)
        let binary = BuiltProducts.executable("topicstore")
        let listing = try Self.onATerminal("\(binary) history --data \(data) --project demo --topic news > \(dir.sub("out.txt"))")
        #expect(listing.contains("scan"), "\(listing.debugDescription)")
        #expect(listing.contains("output") && listing.contains("6/6 "), "\(listing.debugDescription)")
        #expect(try String(contentsOfFile: dir.sub("out.txt"), encoding: .utf8).hasPrefix("topic news in project demo"))
        let json = try Self.onATerminal("\(binary) history --data \(data) --project demo --topic news --json > \(dir.sub("out.json"))")
        #expect(json.isEmpty, "\(json.debugDescription)")
    }

    /// `load` and `import` show how much of their file is read (the docs said `import` did;
    /// an auditor review found no bar), and stay quiet with --json.
    @Test("load and import draw a bar of the bytes read on a terminal",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func loadAndImportProgress() throws {
        let dir = TemporaryDirectory("load-progress")
        let binary = BuiltProducts.executable("topicstore")
        let lines = (0..<20_000).map { #"{"project":"demo","type":"token","device_id":"d\#($0)","token":"t\#($0)","platform":"ios"}"# }
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir.sub("in.jsonl"), atomically: true, encoding: .utf8)
        let load = try Self.onATerminal("\(binary) load --data \(dir.sub("a")) \(dir.sub("in.jsonl"))")
        #expect(load.contains("load ") && load.contains(" bytes/s ETA"), "\(load.suffix(300).debugDescription)")
        #expect(!load.contains("0 bytes/s ETA 0:00"), "no rate before there is one to measure")
        let export = try Self.onATerminal("\(binary) export --data \(dir.sub("a")) > \(dir.sub("out.jsonl"))")
        #expect(export.contains("export"))
        let importing = try Self.onATerminal("\(binary) import --data \(dir.sub("b")) \(dir.sub("out.jsonl"))")
        #expect(importing.contains("import ") && importing.contains(" bytes/s ETA"), "\(importing.suffix(300).debugDescription)")
        #expect(importing.contains("imported 20000 records"))
        let quiet = try Self.onATerminal("\(binary) import --json --data \(dir.sub("c")) \(dir.sub("out.jsonl"))")
        #expect(!quiet.contains("ETA"), "\(quiet.debugDescription)")
    }
}
