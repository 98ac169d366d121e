import Compaction
import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Schema 6: a shared topic's record leaves out its project's newest slice
/// (`PostingChunk.omitsNewest`), readers probe that slice, and when the
/// newest slice moves on the writer lists the slice left behind in every
/// record that has a chunk there. A mistake anywhere here is a wrong
/// audience count, so the stores below reach three slices (132,000 devices)
/// and every shared topic is checked against a model at each step: its
/// stored record, what readers say it occupies, its count, and the audit
/// (a rebuild compared with every live entry), in one round and in many.
@Suite("Newest slice")
struct NewestSliceTests {
    /// Which ordinals each topic of project `demo` holds; a device's ordinal is the order of its first register.
    struct Model {
        var members: [String: Set<UInt32>] = [:]
        var devices: UInt32 = 0
        var newest: UInt16 { UInt16((devices - 1) >> 16) }
        func slices(_ code: String) -> [UInt16] { Set((members[code] ?? []).map { UInt16($0 >> 16) }).sorted() }
    }

    static let shared = ["news", "even", "early", "tail", "lone", "late"]

    /// Registers devices `range` of `demo` in batches of `batch`, each with the topics `topics(i)` names.
    static func register(_ store: TopicStore, _ model: inout Model, _ range: Range<Int>, batch: Int,
                         topics: (Int) -> [String]) throws {
        for start in stride(from: range.lowerBound, to: range.upperBound, by: batch) {
            let events = (start..<min(start + batch, range.upperBound)).map { i -> Event in
                var specs = topics(i).map { TopicSpec(code: $0) }
                specs.append(TopicSpec(code: "user.\(i)", single: true))
                return Event(project: "demo", body: .register(deviceID: "d\(i)", topics: specs))
            }
            for result in store.submitAndWait(events) { _ = try result.get() }
            for i in start..<min(start + batch, range.upperBound) {
                precondition(UInt32(i) == model.devices, "devices are numbered in order")
                model.devices += 1
                for code in topics(i) { model.members[code, default: []].insert(UInt32(i)) }
            }
        }
    }

    static func unregister(_ store: TopicStore, _ model: inout Model, _ devices: [Int], from code: String) throws {
        let events = devices.map { Event(project: "demo", body: .unregister(deviceID: "d\($0)", codes: [code])) }
        for result in store.submitAndWait(events) { _ = try result.get() }
        for i in devices { model.members[code]?.remove(UInt32(i)) }
    }

    /// Every shared topic as the model says: stored without the newest slice,
    /// read with it, counted right; and the audit clean.
    static func expectAsModel(_ store: TopicStore, _ model: Model, _ when: String, codes: [String] = shared,
                              lastDeviceHasItsTopic: Bool = true) throws {
        try store.read { txn in
            let pid = try #require(try store.reader.project(named: "demo", txn)).id
            for code in codes {
                let tid = try #require(try store.reader.topicID(pid, code: code, txn), "\(when): \(code)")
                let slices = model.slices(code)
                let stored = try #require(try store.reader.storedTopic(pid, tid, txn))
                #expect(stored.slices == slices.filter { $0 != model.newest }, "\(when): \(code) as stored")
                let read = try #require(try store.reader.topic(pid, tid, txn))
                #expect(read.slices == slices && read.subscribers == UInt32(model.members[code]?.count ?? 0),
                        "\(when): \(code) read")
                let counts = try store.reader.counts(of: try store.reader.audience(project: "demo", .topic(code), txn), txn)
                #expect(counts.total == model.members[code]?.count ?? 0, "\(when): \(code) counted")
            }
            // A single topic lists every slice, the newest too.
            guard lastDeviceHasItsTopic else { return }
            let last = Int(model.devices) - 1
            let user = try #require(try store.reader.topicID(pid, code: "user.\(last)", txn))
            #expect(try store.reader.storedTopic(pid, user, txn)?.slices == [model.newest], "\(when): a single topic")
        }
        let report = try Audit.run(store)
        #expect(report.isClean, "\(when): \(report.differences.prefix(3)) \(report.logIssues.prefix(3))")
    }

    /// Three slices, filled in batches that cross the slice boundaries inside
    /// them (phase 1) and at their first device (phase 3), with topics that
    /// the batch which moves the newest slice on does not touch (`even`,
    /// `lone`): their records must list the slice left behind all the same.
    @Test("records leave out the newest slice and list it once it is left behind", arguments: [200_000, 16])
    func recordsFollowTheNewestSlice(cacheEntries: Int) throws {
        let dir = TemporaryDirectory("newest-slice")
        var options = TopicStore.Options()
        options.writerCacheEntries = cacheEntries  // 16: the writer's caches start afresh after almost every flush
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        var model = Model()
        // Phase 1: 70,000 devices, batches of 5,000 (one spans ordinal 65,536). Newest slice: 1.
        try Self.register(store, &model, 0..<70_000, batch: 5_000) { i in
            var codes = ["news"]
            if i % 2 == 0 { codes.append("even") }
            if i < 1_000 { codes.append("early") }
            if i >= 69_000 { codes.append("tail") }
            if i == 65_541 { codes.append("lone") }
            if i == 0 { codes.append("late") }
            return codes
        }
        try Self.expectAsModel(store, model, "slice 1 newest")
        // Phase 2: `tail` leaves the newest slice, then gains a member in slice 0.
        try Self.unregister(store, &model, Array(69_000..<70_000), from: "tail")
        try Self.expectAsModel(store, model, "tail emptied")
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "d10", topics: [TopicSpec(code: "tail")])))
        model.members["tail", default: []].insert(10)
        try Self.expectAsModel(store, model, "tail again")
        // Phase 3: up to ordinal 131,071, then a batch that starts slice 2.
        try Self.register(store, &model, 70_000..<131_072, batch: 20_000) { i in i % 3 == 0 ? ["news"] : [] }
        try Self.expectAsModel(store, model, "slice 1 full")
        try Self.register(store, &model, 131_072..<132_000, batch: 500) { i in i % 100 == 0 ? ["news", "late"] : ["news"] }
        try Self.expectAsModel(store, model, "slice 2 newest")
        // `late` leaves slice 0 and `lone` leaves slice 1: both records then list no slice below the newest.
        try Self.unregister(store, &model, [0], from: "late")
        try Self.unregister(store, &model, [65_541], from: "lone")
        try Self.expectAsModel(store, model, "late and lone left")
        // `early` (slice 0 only) loses every member and is dropped, in one commit: the slice
        // change must not bring its record back.
        let early = try store.read { txn in try store.reader.topicID(1, code: "early", txn) }
        let emptyAndDrop = (0..<1_000).map { Event(project: "demo", body: .unregister(deviceID: "d\($0)", codes: ["early"])) }
            + [Event(project: "demo", body: .dropTopic(code: "early"))]
        for result in store.submitAndWait(emptyAndDrop) { _ = try result.get() }
        let earlyID = try #require(early)
        try store.read { txn in
            let code = try store.reader.topicID(1, code: "early", txn)
            let record = try store.reader.storedTopic(1, earlyID, txn)
            #expect(code == nil)
            #expect(record == nil, "the dropped record stays dropped")
        }
        model.members["early"] = nil
        let check = try Audit.run(store)
        #expect(check.isClean, "\(check.differences.prefix(3))")

        // A rebuild written in many rounds (the later ones over a target that already holds records) agrees.
        var rounds = Audit.Options()
        rounds.memoryBudget = 1
        rounds.recordsPerCommit = 30_000
        rounds.recordsPerReadTransaction = 30_000
        let scratch = TemporaryDirectory("newest-slice-rounds")
        rounds.scratchDirectory = scratch.path
        let report = try Audit.run(store, options: rounds)
        #expect(report.isClean, "\(report.differences.prefix(3))")
    }

    /// Random commands over a store near the end of its second slice, until
    /// new devices open the third: sparse topics whose chunks in old slices
    /// appear and empty, joins and leaves in the newest slice, unregister-all;
    /// checked against the model every few batches and audited.
    @Test("random commands across a newest slice's move keep every record and count right", arguments: [21, 22] as [UInt64])
    func randomCommandsAcrossTheMove(seed: UInt64) throws {
        let dir = TemporaryDirectory("newest-slice-random")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        var rng = SeededRandom(seed: seed)
        let codes = (0..<8).map { "r\($0)" }
        var model = Model()
        // A few members a topic in each of the two slices, so its chunks there empty and appear again.
        try Self.register(store, &model, 0..<130_900, batch: 20_000) { i in
            codes.indices.filter { k in i == 0 || (i &* 2_654_435_761 &+ k &* 40_503) % 20_011 == 0 }.map { codes[$0] }
        }
        var lastHasTopic = true
        for round in 0..<40 {
            var events: [Event] = []
            for _ in 0..<100 {
                let op = rng.int(100)
                let code = rng.pick(codes)
                let members = Array(model.members[code] ?? [])
                if op < 40 {
                    // A new device, with some topics.
                    let i = Int(model.devices)
                    let picked = codes.filter { _ in rng.int(10) < 2 }
                    let specs = picked.map { TopicSpec(code: $0) } + [TopicSpec(code: "user.\(i)", single: true)]
                    events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: specs)))
                    model.devices += 1
                    for c in picked { model.members[c, default: []].insert(UInt32(i)) }
                    lastHasTopic = true
                } else if op < 65 {
                    let i = rng.int(Int(model.devices))
                    events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: code)])))
                    model.members[code, default: []].insert(UInt32(i))
                } else if op < 90, !members.isEmpty {
                    // Mostly a member in an old slice, whose chunk there holds a few and empties.
                    let old = members.filter { $0 >> 16 != model.newest }
                    let i = !old.isEmpty && rng.int(3) > 0 ? rng.pick(old) : rng.pick(members)
                    events.append(Event(project: "demo", body: .unregister(deviceID: "d\(i)", codes: [code])))
                    model.members[code]?.remove(i)
                } else if !members.isEmpty {
                    let i = rng.pick(members)
                    events.append(Event(project: "demo", body: .unregisterAll(deviceID: "d\(i)")))
                    for c in codes { model.members[c]?.remove(i) }
                    if i == model.devices - 1 { lastHasTopic = false }
                }
            }
            for result in store.submitAndWait(events) { _ = try result.get() }
            if round % 8 == 7 {
                try Self.expectAsModel(store, model, "seed \(seed), round \(round)", codes: codes, lastDeviceHasItsTopic: lastHasTopic)
            }
        }
        #expect(model.newest == 2, "new devices reached the third slice")
    }

    /// A store written before schema 6 lists the newest slice in its shared
    /// topic records: opened for writing, they are rewritten without it, and
    /// the audit is clean; read-only, it answers as before.
    @Test("an older store's records lose their newest slice when it is opened for writing")
    func olderStoreIsBroughtToSchema6() throws {
        let dir = TemporaryDirectory("newest-slice-migration")
        var model = Model()
        do {
            let store = try TopicStore(directory: dir.path)
            try Self.register(store, &model, 0..<66_000, batch: 11_000) { i in
                var codes = ["news", "late", "tail", "lone"]
                if i % 2 == 0 { codes.append("even") }
                if i < 10 { codes.append("early") }
                return codes
            }
            store.close()
        }
        do {
            let store = try TopicStore(directory: dir.path)
            // As schema 5 left them: news, even, late, tail and lone list slice 1.
            #expect(try listNewestSlices(store) == 5)
            try store.environment.write { txn in try txn.put(store.tables.meta, Array("schemaVersion".utf8), [0, 0, 0, 5]) }
            store.close()
        }
        do {
            let store = try replayOpenReadOnly(dir.path)
            defer { store.close() }
            try store.read { txn in
                let pid = try #require(try store.reader.project(named: "demo", txn)).id
                let news = try #require(try store.reader.topicID(pid, code: "news", txn))
                #expect(try store.reader.storedTopic(pid, news, txn)?.slices == [0, 1])
                #expect(try store.reader.topic(pid, news, txn)?.subscribers == 66_000)
            }
        }
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == ProjectionTables.schemaVersion)
        try Self.expectAsModel(store, model, "opened for writing")
        #expect(try listNewestSlices(store) == 5, "the migration took slice 1 out of the five records again")
    }

    /// A damaged shared topic record does not keep an older store from being
    /// opened for writing: the migration leaves it, and the audit reports it.
    @Test("the migration leaves a damaged record for the audit to report")
    func migrationLeavesDamagedRecords() throws {
        let dir = TemporaryDirectory("newest-slice-damaged")
        do {
            let store = try TopicStore(directory: dir.path)
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D1", topics: [TopicSpec(code: "news"), TopicSpec(code: "sport")])))
            #expect(try listNewestSlices(store) == 2)
            try store.environment.write { txn in
                let news = try #require(try store.reader.topicID(1, code: "news", txn))
                var damaged = Array(try #require(try txn.get(store.tables.topics, Keys.pair(1, news))))
                damaged.removeLast()  // its slice list cut short
                try txn.put(store.tables.topics, Keys.pair(1, news), damaged)
                try txn.put(store.tables.meta, Array("schemaVersion".utf8), [0, 0, 0, 5])
            }
            store.close()
        }
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        #expect(try store.read { txn in try store.tables.storedSchemaVersion(txn) } == ProjectionTables.schemaVersion)
        let sport = try store.read { txn in try store.reader.storedTopic(1, try #require(try store.reader.topicID(1, code: "sport", txn)), txn) }
        #expect(sport?.slices == [], "the sound record lost its newest slice")
        let report = try Audit.run(store)
        #expect(!report.isClean && report.differences.contains { $0.table == "topics" }, "\(report.differences.prefix(3))")
    }

    /// Compaction drops a topic that has no subscribers: one whose members all
    /// sit in the newest slice lists no slice, and must not be taken for empty.
    @Test("garbage collection keeps a topic whose members are all in the newest slice")
    func garbageKeepsTopicsOfTheNewestSlice() throws {
        let dir = TemporaryDirectory("newest-slice-garbage")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D1", topics: [TopicSpec(code: "news"), TopicSpec(code: "gone")])))
        try store.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "D1", codes: ["gone"])))
        try store.read { txn in
            let news = try #require(try store.reader.topicID(1, code: "news", txn))
            #expect(try store.reader.storedTopic(1, news, txn)?.slices == [], "slice 0 is the newest: not listed")
        }
        var rules = GarbageRules()
        rules.devices = false
        rules.tokens = false
        let plan = try GarbagePlan.scan(store, rules: rules, topicHorizon: .max, rejectedBefore: 0)
        let dropped = plan.dropTopics.map { event -> String in
            if case .dropTopic(let code) = event.body { return code }
            return "?"
        }
        #expect(dropped == ["gone"])
    }
}
