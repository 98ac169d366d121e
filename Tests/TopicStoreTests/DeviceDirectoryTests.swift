import Foundation
import LMDB
@testable import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// The writer's in-memory device_id → device and token → device indexes: the
/// table itself against a plain model, and the store around it where it could
/// go stale (a reopen, a batch that does not commit, a write by another
/// process, a version 1 or 2 store); and how readers find a device_id.
@Suite struct DeviceDirectoryTests {
    /// Random inserts and removals with a handful of hashes (every entry
    /// collides with others) homed at the end of the table (probes wrap
    /// around), checked against a multiset after every step.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func tableMatchesAMultisetModel(seed: UInt64) {
        var rng = SeededRandom(seed: seed)
        var index = OrdinalIndex()
        var model: [UInt64: [UInt32: [UInt32]]] = [:]  // hash → pid → ordinals
        // The top bits pick the home slot: these are homed in the last few slots of 1,024 (and later of more).
        let hashes: [UInt64] = (0..<12).map { i in UInt64.max - UInt64(i) << 54 - UInt64(i) }
        var next: UInt32 = 0
        for step in 0..<20_000 {
            let hash = hashes[Int(rng.next() % UInt64(hashes.count))]
            let pid = UInt32(rng.next() % 2)
            var held = model[hash, default: [:]][pid, default: []]
            if held.isEmpty || rng.next() % 100 < 55 || step > 15_000 && rng.next() % 100 < 10 {
                next += 1
                index.insert(pid: pid, hash: hash, ordinal: next)
                held.append(next)
            } else {
                let victim = held.remove(at: Int(rng.next() % UInt64(held.count)))
                let removed = index.remove(pid: pid, hash: hash, ordinal: victim)
                let again = index.remove(pid: pid, hash: hash, ordinal: victim)
                #expect(removed && !again, "step \(step): removed once, and only once")
            }
            model[hash, default: [:]][pid] = held
            if step % 97 == 0 || step > 19_900 {
                for h in hashes {
                    for p: UInt32 in 0...1 {
                        var found: [UInt32] = []
                        index.forEachCandidate(pid: p, hash: h) { found.append($0); return false }
                        #expect(found.sorted() == (model[h]?[p] ?? []).sorted(), "step \(step) hash \(h) pid \(p)")
                    }
                }
            }
        }
        #expect(index.count == model.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.count } })
        // A candidate walk stops where the body says so.
        var seen = 0
        index.forEachCandidate(pid: 0, hash: hashes[0]) { _ in seen += 1; return true }
        #expect(seen == min(1, model[hashes[0]]?[0]?.count ?? 0))
    }

    /// An index made for the names it holds, as a writer's load and the
    /// recipient cache's fill make it, takes a quarter more before it grows,
    /// and finds every name before and after it grows.
    /// The hash of name `i` in the table tests below (never 0, an empty slot).
    static func hash(_ i: Int) -> UInt64 { UInt64(i + 1) &* 0x9E37_79B9_7F4A_7C15 }

    /// Whether `index` files names 0..<n under `hash(i)`, each as ordinal i.
    static func findsAll(_ index: OrdinalIndex, _ n: Int) -> Bool {
        (0..<n).allSatisfy { i in
            var found = false
            index.forEachCandidate(pid: 1, hash: hash(i)) { found = $0 == UInt32(i); return found }
            return found
        }
    }

    @Test func anIndexMadeForWhatItHoldsTakesAQuarterMoreBeforeItGrows() {
        let held = 40_000
        let hash = Self.hash, findsAll = Self.findsAll
        var index = OrdinalIndex(capacity: held)
        for i in 0..<held { index.insert(pid: 1, hash: hash(i), ordinal: UInt32(i)) }
        let made = index.footprint
        for i in held..<(held + held / 4) { index.insert(pid: 1, hash: hash(i), ordinal: UInt32(i)) }
        #expect(index.footprint == made, "a quarter more names fit the table made for \(held)")
        #expect(findsAll(index, held + held / 4))
        index.insert(pid: 1, hash: hash(held + held / 4), ordinal: UInt32(held + held / 4))
        #expect(index.footprint == 2 * made, "the next one grows it")
        #expect(findsAll(index, held + held / 4 + 1))
    }

    /// A large table's next one is made on another thread from nine
    /// sixteenths full, and the entries move into it when it is ready or, at
    /// the latest, at five eighths: every name is found before, during and
    /// after, also in a copy of the index whose table the other copy took.
    @Test func aLargeTableGrowsIntoOneMadeOnAnotherThread() {
        let slots = OrdinalIndex.preparedFrom
        var index = OrdinalIndex(capacity: slots / 2)
        let made = index.footprint
        let preparing = slots * 9 / 16, due = slots * 5 / 8
        for i in 0..<preparing { index.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        #expect(index.footprint == made && index.grewIntoPrepared == 0, "not grown below nine sixteenths")
        // The next table is asked for now; it is taken when ready, at five eighths at the latest.
        for i in preparing..<(due + 1) { index.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        #expect(index.footprint == 2 * made && index.grewIntoPrepared == 1)
        #expect(Self.findsAll(index, due + 1))
        // Removals and inserts go on in the grown table.
        var removed = 0
        for i in stride(from: 0, to: due + 1, by: 3) where index.remove(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) { removed += 1 }
        #expect(removed == (due + 3) / 3 && index.count == due + 1 - removed)
        for i in stride(from: 0, to: due + 1, by: 3) { index.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        #expect(Self.findsAll(index, due + 1) && index.count == due + 1)
        // Two copies of an index that asked for the same table: one takes it, the other makes its own.
        var first = OrdinalIndex(capacity: slots / 2)
        for i in 0..<(preparing + 1) { first.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        var second = first
        for i in (preparing + 1)..<(due + 1) { first.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        for i in (preparing + 1)..<(due + 1) { second.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        #expect(first.grewIntoPrepared == 1 && second.grewIntoPrepared == 0 && second.footprint == first.footprint)
        #expect(Self.findsAll(first, due + 1) && Self.findsAll(second, due + 1))
        // A small table grows where it is.
        var small = OrdinalIndex(capacity: 1_000)
        for i in 0..<2_000 { small.insert(pid: 1, hash: Self.hash(i), ordinal: UInt32(i)) }
        #expect(small.grewIntoPrepared == 0 && Self.findsAll(small, 2_000))
    }

    /// The first new devices after a store is opened grow neither the
    /// recipient cache's device_id index (filled at open, as `serve` opens a
    /// store) nor a device index loaded as the writer loads its own at open:
    /// each was made for what the store held, and growing one holds the
    /// writer (and the cache's lock) while a table twice as large is
    /// allocated and filed again. On bench's 10M store the first register
    /// after `serve` started took 1.4–3.5 s, then 4–6 ms.
    @Test func theFirstNewDevicesAfterAReopenGrowNoIndex() throws {
        let dir = TemporaryDirectory("first-new-devices")
        let held = 3_000
        do {
            let store = try TopicStore(directory: dir.path)
            defer { store.close() }
            let events = (0..<held).map { i in
                Event(project: "p", body: .token(deviceID: "device-\(i)", token: "token-\(i)", platform: i % 3 == 0 ? .android : .ios))
            }
            for result in store.submitAndWait(events) { _ = try result.get() }
        }
        var options = TopicStore.Options()
        options.cachesRecipients = true
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        let cache = try #require(store.reader.recipientCache)
        #expect(cache.heldSequence == UInt64(held), "filled when the store was opened")
        let cached = cache.footprint
        var directory = DeviceDirectory(recordsChanges: false)
        try store.read { txn in try directory.load(store.tables, txn) }
        let loaded = directory.footprint
        let newcomers = held / 5
        for i in 0..<newcomers {
            try store.submitAndWait(Event(project: "p", body: .token(deviceID: "new-\(i)", token: "new-token-\(i)", platform: .ios)))
            directory.insert(.deviceID, 1, "new-\(i)", ordinal: UInt32(held + i))
            directory.insert(.token, 1, "new-token-\(i)", ordinal: UInt32(held + i))
        }
        #expect(cache.heldSequence == UInt64(held + newcomers))
        #expect(cache.footprint == cached, "the recipient cache's index took \(newcomers) new devices without growing")
        #expect(directory.footprint == loaded, "a loaded device index takes \(newcomers) new devices without growing")
        #expect(store.writerTableReads.deviceIndexes == 1, "loaded once, at open")
    }

    /// The random model workload, the store closed and reopened between rounds:
    /// each reopen loads the index from the device records (at open, or at
    /// the first command when the store is opened without `preparesWriter`).
    @Test(arguments: [5, 6] as [UInt64])
    func modelHoldsAcrossReopens(seed: UInt64) async throws {
        let dir = TemporaryDirectory("token-reopen")
        var gen = ModelBasedTests.Generator(rng: SeededRandom(seed: seed))
        gen.tokens = 12  // tokens move between devices often
        var model = SubscriptionModel()
        for round in 0..<5 {
            var options = TopicStore.Options()
            options.preparesWriter = round % 2 == 0
            let store = try TopicStore(directory: dir.path, options: options)
            defer { store.close() }
            for e in (0..<150).map({ _ in gen.event() }) { try store.submitAndWait(e) }
            try store.read { txn in try store.log.forEach(from: model.lastSequence + 1, txn) { model.apply($0); return true } }
            try ModelBasedTests().check(store, against: model, gen: &gen, round: round, expressions: 4)
        }
    }

    /// A batch that fails after the fold changed the index (the map is full,
    /// the transaction is aborted, grown and redone) leaves no trace of the
    /// failed attempt: the index is rolled back to what was committed.
    @Test func abortedTransactionsAreUndone() throws {
        let dir = TemporaryDirectory("token-abort")
        var options = TopicStore.Options()
        options.initialMapSize = 64 << 10
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        var model = SubscriptionModel()
        let tokens = (0..<6).map { "moving-\($0)" }
        for round in 0..<8 {
            // Each token moves to a new device first (its previous holder must lose it and is
            // not touched again), then enough subscriptions to fill the map mid-batch.
            var events: [Event] = []
            for (i, token) in tokens.enumerated() {
                events.append(Event(project: "p", body: .token(deviceID: "holder-\(round)-\(i)", token: token,
                                                               platform: i % 2 == 0 ? .ios : .android)))
            }
            for i in 0..<400 {
                events.append(Event(project: "p", body: .register(deviceID: "bulk-\(round)-\(i)",
                                                                  topics: (0..<6).map { TopicSpec(code: "topic-\(round)-\(i)-\($0)") })))
            }
            for result in store.submitAndWait(events) { _ = try result.get() }
        }
        #expect(store.environment.info().mapSize > 64 << 10, "the map grew: batches were aborted and redone")
        // Every token is rejected now: exactly its holder in the model must turn rejected.
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        for token in tokens { try store.submitAndWait(Event(project: "p", body: .tokenRejected(token: token, rejectedAt: later, reason: "Unregistered"))) }
        try store.read { txn in try store.log.forEach(from: 1, txn) { model.apply($0); return true } }
        var gen = ModelBasedTests.Generator(rng: SeededRandom(seed: 9))
        try ModelBasedTests().check(store, against: model, gen: &gen, round: 0, projects: ["p"], expressions: 2)
        #expect(model.projects["p"]!.devices.values.filter { $0.rejectedAt != nil }.count == tokens.count)
    }

    /// Another process moves a token while this one has the store open: this
    /// writer must notice (the writer stamp changed) and reload its index.
    @Test func anotherProcessWritingIsNoticed() throws {
        let dir = TemporaryDirectory("token-foreign")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D1", token: "shared-token", platform: .ios)))
        try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D3", token: "other-token", platform: .ios)))

        let load = Process()
        load.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
        load.arguments = ["load", "--data", dir.path, "-"]
        let input = Pipe()
        load.standardInput = input
        load.standardOutput = FileHandle.nullDevice
        try load.run()
        input.fileHandleForWriting.write(Data("""
            {"project":"demo","type":"token","device_id":"D2","token":"shared-token","platform":"android"}
            {"project":"demo","type":"register","device_id":"D5","topics":["news"]}
            {"project":"demo","type":"token","device_id":"D3","token":"third-token","platform":"ios"}

            """.utf8))
        try input.fileHandleForWriting.close()
        load.waitUntilExit()
        #expect(load.terminationStatus == 0)

        // Here: the rejection must reach D2, the token's holder now, and "other-token" has no holder any more.
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        try store.submitAndWait(Event(project: "demo", body: .tokenRejected(token: "shared-token", rejectedAt: later, reason: "Unregistered")))
        try store.submitAndWait(Event(project: "demo", body: .tokenRejected(token: "other-token", rejectedAt: later, reason: "Unregistered")))
        try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D4", token: "third-token", platform: .ios)))
        // D2 and D5 came from the other process: this writer must find them, not make them again.
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D2", topics: [TopicSpec(code: "news")])))
        try store.submitAndWait(Event(project: "demo", body: .unregister(deviceID: "D5", codes: ["news"])))
        try store.read { txn in
            let project = try #require(try store.reader.project(named: "demo", txn))
            #expect(project.nextOrdinal == 5, "D1, D3, D2, D5, D4: one ordinal each")
            #expect(try store.reader.device(project.id, deviceID: "D2", txn)?.topics == ["news"])
            #expect(try store.reader.device(project.id, deviceID: "D5", txn)?.topics == [])
            let pid = project.id
            let d1 = try #require(try store.reader.device(pid, deviceID: "D1", txn)).record
            let d2 = try #require(try store.reader.device(pid, deviceID: "D2", txn)).record
            let d3 = try #require(try store.reader.device(pid, deviceID: "D3", txn)).record
            let d4 = try #require(try store.reader.device(pid, deviceID: "D4", txn)).record
            #expect(d1.token == nil && d1.state == .noToken)
            #expect(d2.token == "shared-token" && d2.state == .rejected)
            #expect(d3.token == nil, "third-token moved on to D4")
            #expect(d4.token == "third-token" && d4.state == .live)
        }
        #expect(try Audit.run(store).isClean)
    }

    /// A version 1 store kept the token index as a `tokens` table, versions 1
    /// and 2 the device_id index as `device_ids`: opening one for writing
    /// drops them and stamps the current version; a read-only open reads it as it is.
    @Test(arguments: [1, 2] as [UInt8])
    func olderStoreIsBroughtUpToDate(version: UInt8) throws {
        let dir = TemporaryDirectory("directory-v\(version)")
        do {
            let store = try TopicStore(directory: dir.path)
            // Those versions kept one topic sequence and counts in the records, and said nothing about it.
            try store.environment.write { txn in try store.tables.setTopicLayout(.legacy, txn) }
            try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D1", token: "tok-1", platform: .ios)))
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D1", topics: [TopicSpec(code: "news")])))
            // Make it look like that version: the old tables with their entries, the old stamp.
            let deviceIDs = try store.environment.openDatabases(["device_ids"], create: true)[0]
            let tokens = version == 1 ? try store.environment.openDatabases(["tokens"], create: true)[0] : nil
            try store.environment.write { txn in
                try txn.put(deviceIDs, [0, 0, 0, 1] + Array("D1".utf8), [0, 0, 0, 0])
                if let tokens { try txn.put(tokens, [0, 0, 0, 1] + Array("tok-1".utf8), [0, 0, 0, 0]) }
                try txn.put(store.tables.meta, Array("schemaVersion".utf8), [0, 0, 0, version])
            }
            // A compacting copy: no free pages, the file ends at its last page (as after a file compaction).
            try FileManager.default.createDirectory(atPath: dir.path + "/copy", withIntermediateDirectories: false)
            try store.environment.copy(to: dir.path + "/copy", compact: true)
            store.close()
            try FileManager.default.removeItem(atPath: dir.path + "/data.mdb")
            try FileManager.default.moveItem(atPath: dir.path + "/copy/data.mdb", toPath: dir.path + "/data.mdb")
        }
        do {
            var readOnly = TopicStore.Options()
            readOnly.readOnly = true
            let store = try TopicStore(directory: dir.path, options: readOnly)
            let stored = try store.read { txn in try store.tables.storedSchemaVersion(txn) }
            #expect(stored == UInt32(version))
            let counts = try store.read { txn in
                try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("news"), txn), txn)
            }
            #expect(counts.total == 1 && counts.ios == 1)
            let d1 = try store.read { txn in try store.reader.device(1, deviceID: "D1", txn) }
            #expect(d1?.topics == ["news"])
            store.close()
        }
        // Opened for writing with a map no larger than the file (as a store another process filled to the
        // end of its map): the upgrade's transaction needs pages past it, so the map grows.
        var small = TopicStore.Options()
        small.initialMapSize = 64 << 10
        let store = try TopicStore(directory: dir.path, options: small)
        defer { store.close() }
        let stored = try store.read { txn in try store.tables.storedSchemaVersion(txn) }
        #expect(stored == ProjectionTables.schemaVersion)
        for name in ["tokens", "device_ids"] {
            let oldTable = try store.environment.write { txn in try txn.openDatabaseIfPresent(name) }
            #expect(oldTable == nil, "the old \(name) table is gone")
        }
        // The indexes came from the device records: D1 is found again, and its token moves and is taken from it.
        // A single topic created now is numbered as the store always numbered (the audit's rebuild does the same).
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "D1", topics: [TopicSpec(code: "sport"),
                                                                                                 TopicSpec(code: "user.1", single: true)])))
        try store.submitAndWait(Event(project: "demo", body: .token(deviceID: "D2", token: "tok-1", platform: .ios)))
        try store.read { txn in
            let project = try #require(try store.reader.project(named: "demo", txn))
            #expect(project.nextOrdinal == 2)
            let d1 = try #require(try store.reader.device(project.id, deviceID: "D1", txn))
            #expect(d1.record.token == nil && d1.topics.sorted() == ["news", "sport", "user.1"])
            #expect(try store.tables.topicLayout(txn) == .legacy)
            #expect(try store.reader.topicID(project.id, code: "user.1", txn) == 18)
        }
        #expect(try Audit.run(store).isClean)
    }

    /// A store with D1 (ordinal 0) and D2 (ordinal 1) (… D`count`), whose records `tamper` then changes.
    private static func twoDevices(_ name: String, count: Int = 2, tamper: (TopicStore, borrowing Transaction) throws -> Void) throws -> TemporaryDirectory {
        let dir = TemporaryDirectory(name)
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        for r in store.submitAndWait((1...count).map { Event(project: "demo", body: .token(deviceID: "D\($0)", token: "tok-\($0)", platform: .ios)) }) {
            _ = try r.get()
        }
        try store.environment.write { txn in try tamper(store, txn) }
        return dir
    }

    /// Two devices holding one token cannot come from the fold: opening such a
    /// store for writing reports it, naming the device. Also when the second is
    /// far after the first: the open files each name a few devices behind its walk
    /// (their slots prefetched meanwhile).
    @Test(arguments: zip([2, 100], [1, 99] as [UInt8]))
    func aTokenHeldTwiceIsReportedAtOpen(devices: Int, copiedTo ordinal: UInt8) throws {
        // Someone copies D1's record over another's (keeping that one's key).
        let dir = try Self.twoDevices("token-twice", count: devices) { store, txn in
            let d1 = try #require(try txn.get(store.tables.devices, [0, 0, 0, 1, 0, 0, 0, 0]).map { Array($0) })
            try txn.put(store.tables.devices, [0, 0, 0, 1, 0, 0, 0, ordinal], d1)
        }
        #expect {
            _ = try TopicStore(directory: dir.path)
        } throws: { error in
            "\(error)".contains("devices/1/\(ordinal)") && "\(error)".contains("also held by device ordinal 0")
        }
    }

    /// Two devices with one device_id cannot come from the fold either.
    @Test func aDeviceIDHeldTwiceIsReportedAtOpen() throws {
        // Someone renames D2 to D1 (its token stays its own).
        let dir = try Self.twoDevices("device-twice") { store, txn in
            try txn.put(store.tables.devices, [0, 0, 0, 1, 0, 0, 0, 1], DeviceRecord(deviceID: "D1", token: "tok-2", platform: .ios).encoded())
        }
        #expect {
            _ = try TopicStore(directory: dir.path)
        } throws: { error in
            "\(error)".contains("devices/1/1") && "\(error)".contains("device_id is also held by device ordinal 0")
        }
    }

    /// A serving process finds a device_id through its recipient cache's
    /// index, any other reader by walking the device records: both give the
    /// model's answer, forgotten devices and unknown ids included, and a
    /// snapshot from before the cache was filled is walked.
    @Test(arguments: [21, 22] as [UInt64])
    func readersFindDevicesWithAndWithoutTheCache(seed: UInt64) throws {
        let dir = TemporaryDirectory("device-readers")
        var options = TopicStore.Options()
        options.cachesRecipients = true
        var gen = ModelBasedTests.Generator(rng: SeededRandom(seed: seed))
        gen.devices = 30
        var model = SubscriptionModel()
        for round in 0..<4 {
            // Reopened each round: the cache is filled at the sequence the store is at.
            let store = try TopicStore(directory: dir.path, options: options)
            defer { store.close() }
            let cache = try #require(store.reader.recipientCache)
            let walker = ProjectionReader(tables: store.tables)
            let filledAt = try store.read { txn in try store.tables.appliedSequence(txn) }
            // Many forgets: devices come and go between rounds.
            for _ in 0..<300 {
                var e = gen.event()
                if gen.chance(8) { e = Event(project: e.project, body: .forgetDevice(deviceID: "dev-\(gen.rng.next() % 30)")) }
                try store.submitAndWait(e)
            }
            try store.read { txn in try store.log.forEach(from: model.lastSequence + 1, txn) { model.apply($0); return true } }
            try store.read { txn in
                let asOf = try store.tables.appliedSequence(txn)
                var seen = 0
                for (name, p) in model.projects {
                    let pid = try #require(try store.reader.project(named: name, txn)).id
                    #expect(cache.deviceCandidates(pid, UnsafeRawBufferPointer(start: nil, count: 0), asOf: asOf) != nil,
                            "round \(round): the cache answers for the current snapshot")
                    for id in (0..<32).map({ "dev-\($0)" }) {
                        let cached = try store.reader.device(pid, deviceID: id, txn)
                        let walked = try walker.device(pid, deviceID: id, txn)
                        #expect(cached == walked, "round \(round) \(name) \(id)")
                        #expect((cached != nil) == (p.devices[id] != nil), "round \(round) \(name) \(id)")
                        if cached != nil { seen += 1 }
                    }
                }
                #expect(seen > 0)
                // Before the fill, the cache does not answer: a device forgotten since could be missing from it.
                if filledAt > 0 {
                    #expect(cache.deviceCandidates(1, UnsafeRawBufferPointer(start: nil, count: 0), asOf: filledAt - 1) == nil)
                }
            }
        }
    }
}
