import Benchmarks
import Foundation
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// The SQLite competitor must answer what topicstore answers, or its timings
/// would compare different work.
@Suite struct BenchmarkCompetitorTests {
    func topicstoreCounts(_ store: TopicStore, _ project: String, _ expression: AudienceExpression) throws -> AudienceTally {
        let reader = store.reader
        return try store.read { txn in
            let c = try reader.counts(of: try reader.audience(project: project, expression, txn), txn)
            return AudienceTally(total: c.total, ios: c.ios, android: c.android)
        }
    }

    func sqliteCounts(_ reader: SQLiteReader, _ q: AudienceQuery) throws -> AudienceTally {
        switch q {
        case .anyOf(let codes): return try reader.counts(anyOf: codes)
        case .expression: return try reader.counts(expression: try q.parsed())
        }
    }

    func openStore(_ path: String) throws -> TopicStore {
        var options = TopicStore.Options()
        options.durability = .noSync  // semantics, not durability, are under test here
        return try TopicStore(directory: path, options: options)
    }

    @Test func sqliteAnswersTheSameCountsAsTopicstoreOnAGeneratedWorkload() throws {
        let dir = TemporaryDirectory("bench-competitor")
        let spec = WorkloadSpec(devices: 3_000, seed: 5)
        let store = try openStore(dir.sub("ts"))
        defer { store.close() }
        try FileManager.default.createDirectory(atPath: dir.sub("sql"), withIntermediateDirectories: true)
        let sql = try SQLiteCompetitor(directory: dir.sub("sql"))

        func apply(_ events: [Event]) throws {
            for r in store.submitAndWait(events) { _ = try r.get() }
            try sql.apply(events)
        }
        var install = InstallStream(spec: spec)
        var events: [Event] = []
        while !install.isFinished {
            events.removeAll()
            _ = install.next(commands: 400, into: &events)
            try apply(events)
        }
        var churn = ChurnStream(spec: spec)
        for _ in 0..<15 {
            events.removeAll()
            _ = churn.next(commands: 400, into: &events)
            try apply(events)
        }

        let reader = try sql.openReader()
        var queries: [AudienceQuery] = QueryClass.standard(for: spec, quick: true).flatMap(\.queries)
        queries += [.anyOf(["ios"]), .anyOf(["android"]), .anyOf(["t1", "t2", "t3"]), .anyOf(["t7", "no.such.topic"]),
                    .expression("devices:all"), .expression("NOT t1"), .expression("t1 AND t2"),
                    .expression("(t3 OR t4 OR t5) AND NOT platform:android"), .expression("platform:android"),
                    .expression("all AND NOT (ios OR android)"), .expression("user.17 OR user.18 OR t40")]
        var nonTrivial = 0
        for q in queries {
            let a = try topicstoreCounts(store, spec.project, try q.parsed())
            let b = try sqliteCounts(reader, q)
            #expect(a == b, "\(q): topicstore \(a), SQLite \(b)")
            if a.total > 0 { nonTrivial += 1 }
        }
        // (unregister-all empties some per-user topics; most queries still select devices)
        #expect(nonTrivial >= queries.count * 8 / 10, "the queries select devices")
        // Churn left devices in `all` that cannot be reached (rejected tokens), in both engines.
        let all = try sqliteCounts(reader, .anyOf(["all"]))
        #expect(all.total > all.ios + all.android)
        #expect(all.total < spec.devices, "unregister-all took some devices out of `all`")
    }

    @Test func sqliteFoldFollowsTheStoreRules() throws {
        let dir = TemporaryDirectory("bench-competitor-rules")
        let store = try openStore(dir.sub("ts"))
        defer { store.close() }
        try FileManager.default.createDirectory(atPath: dir.sub("sql"), withIntermediateDirectories: true)
        let sql = try SQLiteCompetitor(directory: dir.sub("sql"))
        let p = "rules"
        func run(_ bodies: [EventBody]) throws {
            let events = bodies.map { Event(project: p, body: $0) }
            for r in store.submitAndWait(events) { _ = try r.get() }
            try sql.apply(events)
        }
        let future: Int64 = 4_102_444_800_000  // 2100: after every token time
        try run([
            .token(deviceID: "d1", token: "A", platform: .ios),
            .token(deviceID: "d2", token: "B", platform: .android),
            .register(deviceID: "d1", topics: [TopicSpec(code: "news")]),
            .register(deviceID: "d2", topics: [TopicSpec(code: "news"), TopicSpec(code: "sport", title: "Sport")]),
            .register(deviceID: "d3", topics: [TopicSpec(code: "news")]),      // never had a token
            .token(deviceID: "d4", token: "A", platform: .ios),                // A moves from d1 to d4
            .tokenRejected(token: "B", rejectedAt: future, reason: "UNREGISTERED"),
        ])
        let reader = try sql.openReader()
        func check(_ q: AudienceQuery, _ expected: AudienceTally, sourceLocation: SourceLocation = #_sourceLocation) throws {
            #expect(try topicstoreCounts(store, p, try q.parsed()) == expected, "topicstore \(q)", sourceLocation: sourceLocation)
            #expect(try sqliteCounts(reader, q) == expected, "SQLite \(q)", sourceLocation: sourceLocation)
        }
        try check(.anyOf(["news"]), AudienceTally(total: 3, ios: 0, android: 0))
        try check(.expression("platform:ios"), AudienceTally(total: 1, ios: 1, android: 0))
        try check(.expression("devices:all"), AudienceTally(total: 4, ios: 1, android: 0))
        try run([
            .token(deviceID: "d2", token: "C", platform: .android),            // revives d2
            .tokenRejected(token: "C", rejectedAt: 1_000_000_000_000, reason: "old"),  // before C was registered: ignored
            .unregisterAll(deviceID: "d3"),
            .unregister(deviceID: "d1", codes: ["news", "unknown"]),
            .unregister(deviceID: "nobody", codes: ["news"]),
        ])
        try check(.anyOf(["news"]), AudienceTally(total: 1, ios: 0, android: 1))
        try check(.anyOf(["news", "sport"]), AudienceTally(total: 1, ios: 0, android: 1))
        try check(.expression("devices:all AND NOT news"), AudienceTally(total: 3, ios: 1, android: 0))
    }
}
