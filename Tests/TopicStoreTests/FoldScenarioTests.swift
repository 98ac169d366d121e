import Foundation
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// The rules of the fold, one scenario each, as a reader of the API would state them.
@Suite struct FoldScenarioTests {
    let dir = TemporaryDirectory()
    let store: TopicStore

    init() throws { store = try TopicStore(directory: dir.path) }

    @discardableResult
    func send(_ body: EventBody, project: String = "demo") throws -> Receipt {
        try store.submitAndWait(Event(project: project, body: body))
    }

    func device(_ id: String, project: String = "demo") throws -> DeviceInfo? {
        try store.read { txn in
            guard let p = try store.reader.project(named: project, txn) else { return nil }
            return try store.reader.device(p.id, deviceID: id, txn)
        }
    }

    func counts(_ expression: String, project: String = "demo") throws -> AudienceCounts {
        let e = try AudienceExpression(parsing: expression)
        return try store.read { txn in try store.reader.counts(of: try store.reader.audience(project: project, e, txn), txn) }
    }

    @Test func aTokenThatMovesIsTakenFromTheOldDevice() throws {
        try send(.token(deviceID: "old-install", token: "T1", platform: .ios))
        try send(.register(deviceID: "old-install", topics: [TopicSpec(code: "all")]))
        try send(.token(deviceID: "new-install", token: "T1", platform: .ios))
        try send(.register(deviceID: "new-install", topics: [TopicSpec(code: "all")]))
        #expect(try device("old-install")?.record.state == .noToken)
        #expect(try device("new-install")?.record.token == "T1")
        let c = try counts("all")
        #expect(c.total == 2 && c.ios == 1 && c.withoutToken == 1)  // one delivery, not two
    }

    /// The writer reads back, within a transaction, the device records that
    /// transaction wrote (`TransactionDevices`): here every step reads a record
    /// a step before it changed, all in one group commit.
    @Test func oneBatchSeesEachChangeItMadeToADevice() throws {
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000
        let batch: [EventBody] = [
            .token(deviceID: "D1", token: "T1", platform: .ios),
            .register(deviceID: "D1", topics: [TopicSpec(code: "all")]),
            .token(deviceID: "D2", token: "T1", platform: .android),  // T1 moves: D1 is left without a token
            .register(deviceID: "D2", topics: [TopicSpec(code: "all")]),
            .token(deviceID: "D1", token: "T2", platform: .ios),  // read as the move above left it
            .tokenRejected(token: "T2", rejectedAt: later, reason: "Unregistered"),
            .token(deviceID: "D3", token: "T3", platform: .ios),
            .forgetDevice(deviceID: "D3"),  // live: kept
            .tokenRejected(token: "T3", rejectedAt: later, reason: "Unregistered"),
            .forgetDevice(deviceID: "D3"),  // rejected and without topics: forgotten
            .token(deviceID: "D3", token: "T3", platform: .android),  // a new device, under a new ordinal
        ]
        let before = store.commitCounters.batches
        let results = store.submitAndWait(batch.map { Event(project: "demo", body: $0) })
        #expect(results.allSatisfy { if case .success = $0 { true } else { false } })
        #expect(store.commitCounters.batches == before + 1, "one transaction")
        let d1 = try #require(try device("D1")).record
        #expect(d1.token == "T2" && d1.state == .rejected)
        let d2 = try #require(try device("D2")).record
        #expect(d2.token == "T1" && d2.platform == .android && d2.state == .live)
        let d3 = try #require(try device("D3"))
        #expect(d3.record.token == "T3" && d3.record.platform == .android && d3.record.state == .live)
        let c = try counts("all")
        #expect(c.total == 2 && c.android == 1 && c.ios == 0 && c.withoutToken == 1)
        let live = try ProjectionDump.of(store)
        let elsewhere = TemporaryDirectory()
        let rebuilt = try foldLog(of: store, into: elsewhere.path)
        #expect(live == rebuilt, "\(live.differences(from: rebuilt))")
    }

    /// A dropped topic's code is forgotten by the writer's code cache (a
    /// tombstone in it) and can be created again, as a new topic, in the same
    /// group commit and in a later one.
    @Test func aDroppedTopicsCodeCanBeCreatedAgain() throws {
        func topics() throws -> [String: (id: UInt32, subscribers: UInt32)] {
            try store.read { txn in
                guard let p = try store.reader.project(named: "demo", txn) else { return [:] }
                var out: [String: (id: UInt32, subscribers: UInt32)] = [:]
                for code in ["temp", "all"] {
                    if let id = try store.reader.topicID(p.id, code: code, txn), let t = try store.reader.topic(p.id, id, txn) {
                        out[code] = (id, t.subscribers)
                    }
                }
                return out
            }
        }
        try send(.token(deviceID: "D", token: "T", platform: .ios))
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "temp"), TopicSpec(code: "all")]))
        let first = try #require(try topics()["temp"]).id
        let batch: [EventBody] = [
            .unregister(deviceID: "D", codes: ["temp"]),
            .dropTopic(code: "temp"),
            .register(deviceID: "D", topics: [TopicSpec(code: "temp", title: "Again")]),
        ]
        let results = store.submitAndWait(batch.map { Event(project: "demo", body: $0) })
        #expect(results.allSatisfy { if case .success = $0 { true } else { false } })
        let second = try #require(try topics()["temp"])
        #expect(second.id != first && second.subscribers == 1)
        try send(.unregister(deviceID: "D", codes: ["temp"]))
        try send(.dropTopic(code: "temp"))
        #expect(try topics()["temp"] == nil)
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "temp")]))
        let third = try #require(try topics()["temp"])
        #expect(third.id != second.id && third.subscribers == 1)
        #expect(try counts("temp").total == 1 && counts("all").total == 1)
        let elsewhere = TemporaryDirectory()
        let live = try ProjectionDump.of(store)
        let rebuilt = try foldLog(of: store, into: elsewhere.path)
        #expect(live == rebuilt, "\(live.differences(from: rebuilt))")
    }

    @Test func aRejectionStopsATokenUntilItIsRegisteredAgain() throws {
        let first = try send(.token(deviceID: "D", token: "T", platform: .android))
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "news")]))
        // A rejection dated before the token was registered is stale: ignored.
        try send(.tokenRejected(token: "T", rejectedAt: first.timestamp - 1000, reason: "UNREGISTERED"))
        #expect(try device("D")?.record.state == .live)
        try send(.tokenRejected(token: "T", rejectedAt: first.timestamp + 1, reason: "UNREGISTERED"))
        #expect(try device("D")?.record.state == .rejected)
        #expect(try counts("news").withoutToken == 1)
        // The app registers the same token again after the rejection: it is live again.
        usleep(5_000)  // (the store's clock past the rejection's time)
        try send(.token(deviceID: "D", token: "T", platform: .android))
        #expect(try device("D")?.record.state == .live)
        #expect(try counts("news").android == 1)
    }

    /// Reviews found the answer depending on arrival order when a provider's clock runs ahead: a
    /// rejection dated after a registration that came later left the device rejected one way round,
    /// live the other. A rejection counts from the provider's time, but never from later than the
    /// store's when it was logged; a registration after that revives the token, in either order.
    @Test func aRejectionDatedAheadOfTheStoresClockCountsFromWhenItWasLogged() throws {
        let first = try send(.token(deviceID: "D", token: "T", platform: .ios))
        let ahead = first.timestamp + 600_000  // the provider's clock ten minutes ahead
        let rejection = try send(.tokenRejected(token: "T", rejectedAt: ahead, reason: "Unregistered"))
        #expect(try device("D")?.record.state == .rejected)
        #expect(try device("D")?.record.rejectedAt == rejection.timestamp, "the store's time, not the provider's later one")
        usleep(5_000)
        try send(.token(deviceID: "D", token: "T", platform: .ios))
        #expect(try device("D")?.record.state == .live, "registered after the rejection was logged")
        // The other order: the rejection of a token no one holds changes nothing, the registration is live.
        try send(.tokenRejected(token: "U", rejectedAt: ahead, reason: "Unregistered"))
        try send(.token(deviceID: "E", token: "U", platform: .ios))
        #expect(try device("E")?.record.state == .live)
        // A reinstall taking a rejected token after the rejection was logged: live.
        let moved = try send(.token(deviceID: "F", token: "V", platform: .android))
        try send(.tokenRejected(token: "V", rejectedAt: moved.timestamp + 600_000, reason: "UNREGISTERED"))
        usleep(5_000)
        try send(.token(deviceID: "G", token: "V", platform: .android))
        #expect(try device("G")?.record.state == .live && device("F")?.record.token == nil)
    }

    @Test func topicsAreCreatedWithDefaultsAndTitlesCanChange() throws {
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "sport")]))
        try send(.register(deviceID: "E", topics: [TopicSpec(code: "sport", title: "Sport Club", single: nil)]))
        try send(.register(deviceID: "F", topics: [TopicSpec(code: "sport")]))
        let topics = try store.read { txn in try store.reader.topics(try store.reader.project(named: "demo", txn)!.id, txn) }
        #expect(topics.count == 1)
        #expect(topics[0].record.title == "Sport Club" && !topics[0].record.single && topics[0].record.subscribers == 3)
    }

    @Test func unregisterIgnoresUnknownCodesAndUnregisterAllEmptiesADevice() throws {
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "a"), TopicSpec(code: "b"), TopicSpec(code: "c")]))
        try send(.unregister(deviceID: "D", codes: ["a", "never-seen"]))
        #expect(try device("D")?.topics.sorted() == ["b", "c"])
        try send(.unregisterAll(deviceID: "D"))
        #expect(try device("D")?.topics == [])
        #expect(try counts("a OR b OR c").total == 0)
        try send(.unregister(deviceID: "nobody", codes: ["a"]))
        #expect(try device("nobody") == nil)
    }

    @Test func projectsNeverSeeEachOther() throws {
        try send(.token(deviceID: "D", token: "T", platform: .ios), project: "one")
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "all")]), project: "one")
        try send(.register(deviceID: "D", topics: [TopicSpec(code: "all")]), project: "two")
        #expect(try counts("all", project: "one").ios == 1)
        #expect(try counts("all", project: "two").ios == 0)
        #expect(try counts("all", project: "three").total == 0)
        // The same token in another project is another device's business.
        try send(.tokenRejected(token: "T", rejectedAt: 7_000_000_000_000, reason: "Unregistered"), project: "two")
        #expect(try device("D", project: "one")?.record.state == .live)
    }

    @Test func expressionsCombineTopicsAndPlatforms() throws {
        for i in 0..<10 {
            try send(.token(deviceID: "d\(i)", token: "t\(i)", platform: i < 7 ? .ios : .android))
            try send(.register(deviceID: "d\(i)", topics: [TopicSpec(code: i % 2 == 0 ? "sport" : "news"), TopicSpec(code: "user.\(i)")]))
        }
        #expect(try counts("(sport OR news) AND platform:ios").total == 7)
        #expect(try counts("news AND NOT user.1").total == 4)
        #expect(try counts("NOT sport").total == 5)
        #expect(try counts("devices:all AND NOT platform:android").total == 7)
    }
}

/// Every accepted length of every keyed field fits LMDB's 511-byte key limit
/// (schemathesis found a 4,000-byte token answered with a 500 before the limit).
@Suite struct KeyLimitTests {
    @Test func theLongestAcceptedValuesAreStored() throws {
        let dir = TemporaryDirectory("limits")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let device = String(repeating: "d", count: Limits.deviceIDLength.upperBound)
        let token = String(repeating: "t", count: Limits.tokenLength.upperBound)
        let code = String(repeating: "c", count: Limits.topicCodeLength.upperBound)
        let project = String(repeating: "p", count: Limits.projectNameLength.upperBound)
        try store.submitAndWait(Event(project: project, body: .token(deviceID: device, token: token, platform: .ios)))
        try store.submitAndWait(Event(project: project, body: .register(deviceID: device, topics: [TopicSpec(code: code, title: String(repeating: "é", count: 256))])))
        try store.submitAndWait(Event(project: project, body: .tokenRejected(token: token, rejectedAt: 7_000_000_000_000, reason: "Unregistered")))
        let info = try store.read { txn in try store.reader.device(try store.reader.project(named: project, txn)!.id, deviceID: device, txn) }
        #expect(info?.record.token == token && info?.topics == [code] && info?.record.state == .rejected)
    }
}
