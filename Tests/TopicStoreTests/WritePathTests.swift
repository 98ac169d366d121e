import Foundation
import LMDB
import Projections
import SubscriptionLog
import Synchronization
import Testing
@testable import TopicStore

@Suite struct WritePathTests {
    func register(_ device: String, _ topics: [String], project: String = "demo") -> Event {
        Event(project: project, body: .register(deviceID: device, topics: topics.map { TopicSpec(code: $0) }))
    }

    /// A review removed the data directory under a running server: registers
    /// went on being answered 200, into a deleted file, and were gone at the
    /// restart. A commit into a removed file is not acknowledged.
    @Test func nothingIsAcknowledgedOnceTheDatabaseFileIsRemoved() throws {
        let dir = TemporaryDirectory("removed")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        try store.submitAndWait(Event(project: "p", body: .register(deviceID: "a", topics: [TopicSpec(code: "t")])))
        try store.checkFileIsPresent()
        let data = TopicStore.generationDirectory(dir.path, store.generation) + "/data.mdb"
        try FileManager.default.removeItem(atPath: data)
        #expect(throws: StoreError.self) { try store.checkFileIsPresent() }
        do {
            try store.submitAndWait(Event(project: "p", body: .register(deviceID: "b", topics: [TopicSpec(code: "t")])))
            Issue.record("a command was acknowledged into a removed file")
        } catch let error as StoreError {
            #expect("\(error)".contains("was removed"), "\(error)")
        }
    }

    @Test func concurrentCallersShareCommitsAndGetGapFreeSequences() async throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let receipts = try await withThrowingTaskGroup(of: Receipt.self) { group in
            for i in 0..<400 { group.addTask { try await store.submit(register("d\(i)", ["all"])) } }
            var all: [Receipt] = []
            for try await r in group { all.append(r) }
            return all
        }
        #expect(Set(receipts.map(\.sequence)) == Set(1...400))
        let info = try store.environment.read { txn in txn.id }
        // Far fewer write transactions than commands: callers were grouped.
        #expect(info < 400, "expected group commit, saw \(info) transactions for 400 commands")
        let counts = try store.read { txn in
            try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("all"), txn), txn)
        }
        #expect(counts.total == 400 && counts.asOfSeq == 400)
    }

    @Test func aRejectedCommandChangesNothingAndDoesNotStopItsBatch() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let events = [register("a", ["news"]), register("", ["news"]), register("b", ["bad code!"]),
                      Event(project: "Demo!", body: .unregisterAll(deviceID: "x")), register("c", ["news"])]
        let results = store.submitAndWait(events)
        #expect(try results[0].get().sequence == 1)
        #expect(try results[4].get().sequence == 2)
        for i in 1...3 {
            #expect(throws: InvalidCommand.self) { try results[i].get() }
        }
        let (bounds, counts) = try store.read { txn in
            (try store.log.bounds(txn), try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("news"), txn), txn))
        }
        #expect(bounds?.last == 2)
        #expect(counts.total == 2)
    }

    /// A log record cannot hold a field over 65,535 bytes. The encoder trapped on one and the
    /// server died; now such a command is refused alone when its record is prepared, on the
    /// caller's thread (validation refuses such commands before that: this is the backstop for
    /// a gap in it), and the others of its batch commit.
    @Test func aCommandItsRecordCannotHoldIsRefusedAloneInItsBatch() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        let huge = "e" + String(repeating: "\u{301}", count: 32_768)
        let oversized = Event(project: "demo", body: .register(deviceID: "z", topics: [TopicSpec(code: "zalgo", title: huge)]))
        // The backstop itself, past validation.
        do {
            _ = try TopicStore.prepare(oversized)
            Issue.record("the oversized command was prepared")
        } catch {
            #expect(error.errors.map(\.field) == ["topics.0.title"])
            #expect(error.description.contains("65537 bytes"), "\(error)")
        }
        let results = store.submitAndWait([register("a", ["news"]), oversized, register("b", ["news"])])
        #expect(results.count == 3)
        #expect(try results[0].get().sequence == 1)
        #expect(throws: InvalidCommand.self) { try results[1].get() }
        #expect(try results[2].get().sequence == 2)
        #expect(try allRecords(store).map(\.sequence) == [1, 2])
        #expect(try store.submitAndWait(register("c", ["news"])).sequence == 3)
        let counts = try store.read { txn in
            try store.reader.counts(of: try store.reader.audience(project: "demo", .topic("news"), txn), txn)
        }
        #expect(counts.total == 3)
    }

    @Test func theMapGrowsFromATinyInitialSize() throws {
        let dir = TemporaryDirectory()
        var options = TopicStore.Options()
        options.initialMapSize = 64 << 10
        let store = try TopicStore(directory: dir.path, options: options)
        defer { store.close() }
        let before = store.environment.info().mapSize
        let events = (0..<3000).map { i in
            Event(project: "demo", body: .token(deviceID: "device-\(i)", token: String(repeating: "ab", count: 32) + "\(i)", platform: .ios))
        }
        let results = store.submitAndWait(events)
        #expect(results.allSatisfy { (try? $0.get()) != nil })
        #expect(store.environment.info().mapSize > before)
        let stats = try store.statistics()
        #expect(stats.lastSequence == 3000)
        #expect(stats.projects.first?.liveTokens == 3000)
    }

    @Test func timestampsNeverDecreaseAndTimeMapsToSequence() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        var receipts: [Receipt] = []
        for i in 0..<30 {
            receipts.append(try store.submitAndWait(register("d\(i)", ["t"])))
            if i % 10 == 9 { usleep(20_000) }
        }
        #expect(zip(receipts, receipts.dropFirst()).allSatisfy { $0.timestamp <= $1.timestamp })
        let log = store.log
        try store.read { txn in
            for r in receipts {
                let first = try log.firstSequence(atOrAfter: r.timestamp, txn)!
                #expect(receipts[Int(first) - 1].timestamp == r.timestamp && first <= r.sequence)
                let last = try log.lastSequence(atOrBefore: r.timestamp, txn)!
                #expect(last >= r.sequence && receipts[Int(last) - 1].timestamp == r.timestamp)
            }
            #expect(try log.firstSequence(atOrAfter: receipts.last!.timestamp + 1, txn) == nil)
            #expect(try log.lastSequence(atOrBefore: receipts[0].timestamp - 1, txn) == nil)
            var seen: [UInt64] = []
            try log.forEach(from: 10, through: 12, txn) { seen.append($0.sequence); return true }
            #expect(seen == [10, 11, 12])
        }
    }

    @Test func aDirectoryThatIsNotAStoreIsRefused() throws {
        let dir = TemporaryDirectory()
        try Data("hello".utf8).write(to: URL(fileURLWithPath: dir.sub("notes.txt")))
        #expect(throws: StoreError.self) { try TopicStore(directory: dir.path) }
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        #expect(throws: StoreError.self) { try TopicStore(directory: dir.sub("missing"), options: readOnly) }
        // An LMDB file that topicstore did not write.
        let foreign = dir.sub("foreign")
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        let env = try Environment(path: foreign)
        _ = try env.openDatabases(["other"], create: true)
        #expect(throws: StoreError.self) { try TopicStore(directory: foreign, options: readOnly) }
        // Garbage where data.mdb should be.
        let garbage = dir.sub("garbage")
        try FileManager.default.createDirectory(atPath: garbage, withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: garbage + "/data.mdb"))
        #expect(throws: StoreError.self) { try TopicStore(directory: garbage) }
    }

    /// A second process (the CLI, read-only) sees consistent snapshots while this one writes:
    /// every device registered up to asOfSeq is counted, none after it.
    @Test func aSecondProcessReadsConsistentSnapshotsWhileTheWriterRuns() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        // One register per command, each adding one new device to `all`, from a
        // dedicated thread so the writer runs whatever the test pool is doing.
        try store.submitAndWait(register("d0", ["all"]))
        let stop = Mutex(false)
        let writer = Thread {
            var i = 1
            while !stop.withLock({ $0 }) && i < 200_000 {
                _ = store.submitAndWait((0..<50).map { k in register("d\(i + k)", ["all"]) })
                i += 50
            }
        }
        writer.start()
        defer { stop.withLock { $0 = true } }
        var observed: Set<UInt64> = []
        for _ in 0..<6 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
            process.arguments = ["audience", "--data", dir.path, "--project", "demo", "--json", "all"]
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
            let asOf = (object?["asOfSeq"] as? NSNumber)?.uint64Value ?? 0
            let total = (object?["total"] as? NSNumber)?.uint64Value ?? 0
            #expect(asOf >= 1 && total == asOf, "snapshot at seq \(asOf) counted \(total) devices")
            observed.insert(asOf)
            // Let the writer move on before the next look.
            for _ in 0..<200 where try store.statistics().lastSequence <= asOf { usleep(5_000) }
        }
        #expect(observed.count > 1, "the reader should have seen the log advance")
    }
}

/// Two writers on one directory — this process and `topicstore load` in
/// another — take turns: each must see what the other committed, though the
/// store keeps its containers cached between its own batches.
@Suite struct InterleavedWritersTests {
    @Test func cachesNeverOutliveAnotherWritersCommit() throws {
        let dir = TemporaryDirectory("interleaved")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        for round in 0..<8 {
            for i in 0..<20 {
                try store.submitAndWait(Event(project: "p", body: .register(deviceID: "d\((round * 7 + i) % 50)",
                                                                           topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(i % 7)")])))
            }
            // Another process unsubscribes some of the same devices from the same containers.
            let lines = (0..<10).map { i in #"{"project":"p","type":"unregister","device_id":"d\#((round * 11 + i * 3) % 50)","topics":["all","t\#(i % 7)"]}"# }
            let load = Process()
            load.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
            load.arguments = ["load", "--data", dir.path, "--json", "-"]
            let input = Pipe()
            load.standardInput = input
            load.standardOutput = Pipe()
            try load.run()
            input.fileHandleForWriting.write(Data(lines.joined(separator: "\n").utf8))
            try input.fileHandleForWriting.close()
            load.waitUntilExit()
            #expect(load.terminationStatus == 0)
        }
        #expect(try store.statistics().lastSequence == 8 * 30)
        let live = try ProjectionDump.of(store)
        let rebuilt = try foldLog(of: store, into: dir.sub("fold"))
        #expect(live == rebuilt, "\(live.differences(from: rebuilt))")
    }
}
