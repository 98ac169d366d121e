import Foundation
import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// A count of a large audience is evaluated a window of slices at a time and
/// the windows' counts added. Whatever the window, it must give the counts of
/// the whole audience: checked against a plain model of a store of three slices
/// (140,000 devices) with dense, sparse, run-shaped, per-user and last-slice topics.
@Suite struct WindowedCountTests {
    struct Device {
        var topics: Set<String> = []
        var platform: Platform?
        var rejected = false
        var live: Bool { platform != nil && !rejected }
    }

    static let deviceCount = 140_000

    /// What a count answers, but the sequence.
    struct Tally: Equatable {
        var total, ios, android, withoutToken: Int
        var unknownTopics: [String]
        init(total: Int, ios: Int, android: Int, withoutToken: Int, unknownTopics: [String]) {
            (self.total, self.ios, self.android, self.withoutToken, self.unknownTopics) = (total, ios, android, withoutToken, unknownTopics)
        }
        init(_ c: AudienceCounts) {
            self.init(total: c.total, ios: c.ios, android: c.android, withoutToken: c.withoutToken, unknownTopics: c.unknownTopics)
        }
    }

    /// The workload, written through the exact-import path (as a replay writes a store), and its model.
    static func build(into directory: String) throws -> [Device] {
        var devices = [Device](repeating: Device(), count: deviceCount)
        let importer = try Importer(creating: directory)
        var sequence: UInt64 = 0
        func add(_ body: EventBody) throws {
            sequence += 1
            try importer.add(LogRecord(sequence: sequence, timestamp: 1_767_225_600_000 + Int64(sequence), event: Event(project: "w", body: body)))
        }
        for i in 0..<deviceCount {
            if i % 10 != 3 {  // every tenth device never gets a token
                let platform: Platform = i % 3 == 0 ? .android : .ios
                try add(.token(deviceID: "d\(i)", token: "tok\(i)", platform: platform))
                devices[i].platform = platform
            }
            var topics = [TopicSpec(code: "all")]
            if i % 2 == 0 { topics.append(TopicSpec(code: "even")) }         // bitsets
            if i % 97 == 0 { topics.append(TopicSpec(code: "sparse")) }      // arrays
            if (70_000..<100_000).contains(i) { topics.append(TopicSpec(code: "run")) }  // runs, across a slice boundary
            if i >= 131_072 { topics.append(TopicSpec(code: "edge")) }       // the last slice only
            if i % 5_000 == 0 { topics.append(TopicSpec(code: "user.\(i)", single: true)) }  // held with its member
            try add(.register(deviceID: "d\(i)", topics: topics))
            devices[i].topics = Set(topics.map(\.code))
        }
        for i in 0..<deviceCount {
            if i % 50 == 1, devices[i].platform != nil {
                // Rejected at the moment it is reported, after the token was registered.
                try add(.tokenRejected(token: "tok\(i)", rejectedAt: 1_767_225_600_000 + Int64(sequence + 1), reason: "Unregistered"))
                devices[i].rejected = true
            }
            if i % 14 == 0 {
                try add(.unregister(deviceID: "d\(i)", codes: ["even"]))
                devices[i].topics.remove("even")
            }
            if i % 1_001 == 7 {
                try add(.unregisterAll(deviceID: "d\(i)"))
                devices[i].topics = []
            }
        }
        _ = try importer.finish()
        return devices
    }

    static func isMember(_ e: AudienceExpression, _ d: Device) -> Bool {
        switch e {
        case .topic(let code): return d.topics.contains(code)
        case .platform(let p): return d.live && d.platform == p
        case .allDevices: return true
        case .and(let a, let b): return isMember(a, d) && isMember(b, d)
        case .or(let a, let b): return isMember(a, d) || isMember(b, d)
        case .not(let a): return !isMember(a, d)
        }
    }

    @Test("counts taken window by window equal the whole audience's and the model's, for every window size")
    func windowsAddUpToTheWholeAudience() throws {
        let dir = TemporaryDirectory("windowed-count")
        let model = try Self.build(into: dir.sub("data"))
        var options = TopicStore.Options()
        options.cachesRecipients = true  // and topics: a per-user topic is then held with its member
        let store = try TopicStore(directory: dir.sub("data"), options: options)
        defer { store.close() }
        let texts = [
            "all", "even", "sparse", "run", "edge", "user.0 OR user.135000", "even AND NOT run",
            "(sparse OR run) AND platform:ios", "NOT even", "platform:android", "devices:all", "run AND NOT edge",
            "nope OR even", "even AND nope", "(all AND NOT even) OR edge", "(NOT (run OR sparse)) AND platform:android",
            "user.5000 OR sparse", "edge OR run OR sparse", "run AND even AND platform:ios", "user.135000", "nope",
            // Slices where the right of a difference has nothing (slice 0 here) are still counted.
            "even AND NOT (run OR edge)", "(sparse OR user.5000) AND NOT (edge AND run)", "(edge OR run) AND (even OR user.135000)",
            "t0 OR t1 OR t2 OR t3 OR t4 OR t5 OR t6 OR t7 OR even",  // more topics than are counted by windows
            // Few topics, but more nodes than the plan walks (counted whole).
            String(repeating: "NOT ", count: 40) + "(run OR sparse) AND platform:ios",
            String(repeating: "NOT ", count: 41) + "even",
        ]
        let readers = [store.reader, ProjectionReader(tables: store.tables)]  // with the serving caches, and without
        for text in texts {
            let e = try AudienceExpression(parsing: text)
            let members = model.filter { Self.isMember(e, $0) }
            let live = members.filter(\.live)
            let ios = live.filter { $0.platform == .ios }.count
            let unknown = e.topicCodes.filter { $0 == "nope" || $0.hasPrefix("t") }.sorted()
            let want = Tally(total: members.count, ios: ios, android: live.count - ios,
                                      withoutToken: members.count - live.count, unknownTopics: unknown)
            try store.read { txn in
                for (r, reader) in readers.enumerated() {
                    let whole = try reader.counts(of: try reader.audience(project: "w", e, txn), txn)
                    #expect(Tally(whole) == want, "\(text), whole audience, reader \(r)")
                    // As serving counts (an OR of topics in place from the stored chunks, by
                    // windows only where the whole evaluation builds dense bitmaps), and by
                    // windows wherever the audience spreads over a window.
                    for window in [0, 1, 2, 3, 8] {
                        for whenDense in [true, false] {
                            let counted = try reader.counts(project: "w", e, txn, windowSlices: window, windowsWhenDense: whenDense)
                            #expect(counted.asOfSeq == whole.asOfSeq && counted.asOfSeq > 0)
                            #expect(Tally(counted) == want, "\(text), windows of \(window) slices (\(whenDense)), reader \(r)")
                        }
                    }
                }
            }
        }
        // An unknown project counts nothing and names the topics asked for.
        let none = try store.read { txn in try store.reader.counts(project: "elsewhere", try AudienceExpression(parsing: "b OR a"), txn, windowSlices: 1) }
        #expect(none.total == 0 && none.unknownTopics == ["a", "b"])
    }

    @Test("a damaged chunk of a topic in an expression counted in place makes the count fail naming the chunk")
    func damagedChunkInAnExpression() throws {
        let dir = TemporaryDirectory("windowed-damage")
        let model = try Self.build(into: dir.sub("data"))
        let store = try TopicStore(directory: dir.sub("data"))
        defer { store.close() }
        let reader = store.reader
        let e = try AudienceExpression(parsing: "(even OR sparse) AND NOT run AND platform:ios")
        func counts() throws -> AudienceCounts {
            try store.read { txn in try reader.counts(project: "w", e, txn, windowSlices: 1) }
        }
        let members = model.filter { Self.isMember(e, $0) }
        #expect(try counts().total == members.count && members.count > 10_000)
        // even's chunk of slice 1 cut short by a byte.
        let tid = try SliceCountTests.cutChunkShort(store, code: "even", high: 1)
        let error = try #require(throws: ProjectionCorruption.self) { try counts() }
        #expect(error.place == "postings/1/1/\(tid)", "\(error)")
    }
}
