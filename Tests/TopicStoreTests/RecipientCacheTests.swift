import Foundation
import LMDB
@testable import Projections
import SubscriptionLog
import Testing
import TopicStore

/// The serving process's recipient cache: streams read through it are exactly
/// their snapshot's records, however the cache moved on since, and a store
/// another process wrote is read from the map until the writer reads it again.
@Suite struct RecipientCacheTests {
    static let project = "app"

    static func servingStore(_ path: String) throws -> TopicStore {
        var options = TopicStore.Options()
        options.cachesRecipients = true
        return try TopicStore(directory: path, options: options)
    }

    /// device_id → token of every reachable device of the project, streamed through `reader`.
    static func recipients(_ reader: ProjectionReader, _ txn: borrowing Transaction, project: String = project) throws -> [String: String] {
        guard let p = try reader.project(named: project, txn) else { return [:] }
        let reachable = try reader.reachable(try reader.audience(project: project, .allDevices, txn), txn)
        var got: [String: String] = [:]
        var last: UInt32?
        try reader.forEachRecipient(projectID: p.id, in: reachable, txn) { ordinal, _, id, token in
            #expect(last.map { $0 < ordinal } ?? true, "ascending ordinals")
            last = ordinal
            got[String(decoding: id, as: UTF8.self)] = String(decoding: token, as: UTF8.self)
            return true
        }
        return got
    }

    /// Runs `topicstore load` on `directory` in another process with `lines`; its exit status.
    static func loadInAnotherProcess(_ binary: String, _ directory: String, _ lines: [String]) throws -> Int32 {
        let load = Process()
        load.executableURL = URL(fileURLWithPath: binary)
        load.arguments = ["load", "--data", directory, "-"]
        let input = Pipe()
        load.standardInput = input
        load.standardOutput = Pipe()
        load.standardError = Pipe()
        try load.run()
        input.fileHandleForWriting.write(Data((lines.joined(separator: "\n") + "\n").utf8))
        try input.fileHandleForWriting.close()
        load.waitUntilExit()
        return load.terminationStatus
    }

    /// The first few devices whose recipient differs between `a` and `b` (empty when equal).
    static func differences(_ a: [String: String], _ b: [String: String]) -> [String] {
        let keys = Set(a.keys).union(b.keys).filter { a[$0] != b[$0] }.sorted()
        return keys.prefix(5).map { "\($0): \(a[$0] ?? "none") vs \(b[$0] ?? "none")" }
    }

    static func token(_ device: Int, _ generation: Int) -> Event {
        Event(project: project, body: .token(deviceID: "dev-\(device)", token: "tok-\(device)-\(generation)",
                                             platform: device % 3 == 0 ? .android : .ios))
    }

    @Test func aSnapshotKeepsItsRecordsWhileTheCacheMovesOn() throws {
        let dir = TemporaryDirectory()
        let store = try Self.servingStore(dir.path)
        defer { store.close() }
        let cache = try #require(store.reader.recipientCache)
        for r in store.submitAndWait((0..<3000).map { Self.token($0, 0) }) { _ = try r.get() }
        let map = ProjectionReader(tables: store.tables)

        try store.read { txn in
            let asOf = try store.tables.appliedSequence(txn)
            #expect(cache.heldSequence == asOf, "the writer applied its commits")
            let before = try Self.recipients(store.reader, txn)
            #expect(before.count == 3000)
            #expect(Self.differences(before, try Self.recipients(map, txn)) == [])

            // While this snapshot is open: new tokens, rejections, a forgotten device, new devices.
            var changes = (0..<3000).filter { $0 % 4 == 0 }.map { Self.token($0, 1) }
            changes += (0..<3000).filter { $0 % 7 == 1 }.map {
                Event(project: Self.project, body: .tokenRejected(token: "tok-\($0)-0", rejectedAt: Int64(Date().timeIntervalSince1970 * 1000) + 60_000, reason: "Unregistered"))
            }
            changes.append(Event(project: Self.project, body: .forgetDevice(deviceID: "dev-5")))
            changes += (3000..<3100).map { Self.token($0, 0) }
            for r in store.submitAndWait(changes) { _ = try r.get() }
            #expect(cache.heldSequence! > asOf)

            let again = try Self.recipients(store.reader, txn)
            #expect(Self.differences(again, before) == [], "the old snapshot streams its own records, not the cache's newer ones")
        }

        try store.read { txn in
            #expect(cache.heldSequence == (try store.tables.appliedSequence(txn)))
            let after = try Self.recipients(store.reader, txn)
            #expect(Self.differences(after, try Self.recipients(map, txn)) == [])
            #expect(after["dev-8"] == "tok-8-1")
            #expect(after["dev-1"] == nil, "rejected")
            #expect(after["dev-3050"] == "tok-3050-0")
            #expect(after.count == 3100 - (0..<3000).filter { $0 % 7 == 1 && $0 % 4 != 0 }.count)
        }
    }

    @Test func streamsWhileTheWriterCommitsAreTheirSnapshots() async throws {
        let dir = TemporaryDirectory()
        let store = try Self.servingStore(dir.path)
        defer { store.close() }
        for r in store.submitAndWait((0..<2000).map { Self.token($0, 0) }) { _ = try r.get() }
        let map = ProjectionReader(tables: store.tables)

        // A writer moving tokens around (token changes, rejections, new devices) while
        // three readers stream, each compared with the map in its own transaction.
        let writer = Task.detached {
            for round in 1...40 {
                let events = (0..<100).map { i -> Event in
                    let device = (round * 131 + i * 17) % 2200
                    return i % 9 == 0
                        ? Event(project: Self.project, body: .tokenRejected(token: "tok-\(device)-\(round - 1)", rejectedAt: Int64(Date().timeIntervalSince1970 * 1000) + 60_000, reason: "Unregistered"))
                        : Self.token(device, round)
                }
                for r in store.submitAndWait(events) { _ = try r.get() }
            }
        }
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    var streams = 0
                    while streams < 20 {
                        try store.read { txn in
                            let cached = try Self.recipients(store.reader, txn)
                            let mapped = try Self.recipients(map, txn)
                            #expect(Self.differences(cached, mapped) == [])
                        }
                        streams += 1
                    }
                    return streams
                }
            }
            for try await n in group { #expect(n == 20) }
        }
        try await writer.value
        let (applied, cached, mapped) = try store.read { txn in
            (try store.tables.appliedSequence(txn), try Self.recipients(store.reader, txn), try Self.recipients(map, txn))
        }
        #expect(store.reader.recipientCache?.heldSequence == applied)
        #expect(Self.differences(cached, mapped) == [])
    }

    @Test func aServingStoreFillsItsCacheWhileItReadsTheIndexes() throws {
        let dir = TemporaryDirectory()
        do {
            let store = try TopicStore(directory: dir.path)
            for r in store.submitAndWait((0..<2_000).map { Self.token($0, 0) }) { _ = try r.get() }
            store.close()
        }
        // Opened for serving: the cache is read on a second thread beside the writer's indexes.
        let store = try Self.servingStore(dir.path)
        defer { store.close() }
        let cache = try #require(store.reader.recipientCache)
        try store.read { txn in
            #expect(cache.heldSequence == (try store.tables.appliedSequence(txn)), "filled at open, before any command")
            let got = try Self.recipients(store.reader, txn)
            #expect(got.count == 2_000 && got["dev-7"] == "tok-7-0")
            #expect(Self.differences(got, try Self.recipients(ProjectionReader(tables: store.tables), txn)) == [])
        }
        // The indexes were read too: a known device_id keeps its device, a moved token leaves its holder.
        _ = try store.submitAndWait(Event(project: Self.project, body: .token(deviceID: "dev-8", token: "tok-9-0", platform: .ios)))
        try store.read { txn in
            let got = try Self.recipients(store.reader, txn)
            #expect(got.count == 1_999, "dev-9 lost its token to dev-8")
            #expect(got["dev-8"] == "tok-9-0" && got["dev-9"] == nil)
            #expect(try store.reader.project(named: Self.project, txn)?.nextOrdinal == 2_000, "no new device")
        }
    }

    @Test func aCacheReadBesideTheIndexesIsOfTheirSnapshot() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        for r in store.submitAndWait((0..<300).map { Self.token($0, 0) }) { _ = try r.get() }
        try store.read { old in
            let asOf = try store.tables.appliedSequence(old)
            // Commits after `old` was opened: a transaction opened now sees a later snapshot.
            for r in store.submitAndWait((0..<50).map { Self.token($0, 1) }) { _ = try r.get() }
            let cache = RecipientCache()
            let writer = ProjectionWriter(tables: store.tables, recipientCache: cache)
            try writer.prepare(old, alongside: store.environment)
            #expect(cache.heldSequence == asOf, "read from the indexes' snapshot, not the latest")
            let got = try Self.recipients(ProjectionReader(tables: store.tables, recipientCache: cache), old)
            #expect(got.count == 300 && got["dev-3"] == "tok-3-0")
        }
        try store.read { latest in
            let cache = RecipientCache()
            let writer = ProjectionWriter(tables: store.tables, recipientCache: cache)
            try writer.prepare(latest, alongside: store.environment)
            #expect(cache.heldSequence == (try store.tables.appliedSequence(latest)))
            #expect(try Self.recipients(ProjectionReader(tables: store.tables, recipientCache: cache), latest)["dev-3"] == "tok-3-1")
        }
    }

    @Test func anotherProcessWritingSendsReadersToTheMapUntilTheWriterReadsAgain() throws {
        let binary = BuiltProducts.executable("topicstore")
        try #require(FileManager.default.isExecutableFile(atPath: binary), "topicstore is built beside the tests")
        let dir = TemporaryDirectory()
        let store = try Self.servingStore(dir.path)
        defer { store.close() }
        let cache = try #require(store.reader.recipientCache)
        for r in store.submitAndWait((0..<500).map { Self.token($0, 0) }) { _ = try r.get() }
        let held = try #require(cache.heldSequence)

        // `topicstore load`, in another process, gives ten devices new tokens.
        let lines = (0..<10).map { #"{"project":"app","type":"token","device_id":"dev-\#($0 * 10)","token":"other-\#($0)","platform":"ios"}"# }
        #expect(try Self.loadInAnotherProcess(binary, dir.path, lines) == 0)

        try store.read { txn in
            #expect(try store.tables.appliedSequence(txn) == held + 10)
            #expect(cache.heldSequence == held, "this process's writer has not seen the other's commit yet")
            let got = try Self.recipients(store.reader, txn)
            #expect(got["dev-30"] == "other-3")
            #expect(Self.differences(got, try Self.recipients(ProjectionReader(tables: store.tables), txn)) == [])
        }

        // The next commit here reads the table again; the cache is in use again.
        _ = try store.submitAndWait(Self.token(1, 1))
        try store.read { txn in
            #expect(cache.heldSequence == (try store.tables.appliedSequence(txn)))
            let got = try Self.recipients(store.reader, txn)
            #expect(got["dev-30"] == "other-3" && got["dev-1"] == "tok-1-1")
            #expect(Self.differences(got, try Self.recipients(ProjectionReader(tables: store.tables), txn)) == [])
        }
    }
}

/// The cache's own bookkeeping: records replaced commit after commit, the
/// arena copied afresh once replaced records are most of it.
@Suite struct RecipientCacheArenaTests {
    @Test func replacedRecordsAreCompactedAwayAndTheLatestOnesKept() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        for r in store.submitAndWait((0..<50).map { RecipientCacheTests.token($0, 0) }) { _ = try r.get() }
        let cache = RecipientCache(compactingAfter: 1)
        let (pid, start) = try store.read { txn in
            (try #require(try store.reader.project(named: RecipientCacheTests.project, txn)).id, try store.tables.appliedSequence(txn))
        }
        try store.read { txn in try cache.fill(from: store.tables, through: start, txn) }
        let filled = cache.arenaBytes

        // Twenty commits, each rewriting every record with bytes that name the commit.
        var latest: [UInt32: [UInt8]] = [:]
        var sequence = start
        for round in 1...20 {
            var changes = RecipientCache.Changes()
            for ordinal in UInt32(0)..<50 {
                sequence += 1
                if ordinal == 7 && round == 20 {
                    changes.delete(pid, ordinal, sequence: sequence)
                    latest[ordinal] = nil
                } else {
                    let record = Array("round \(round) ordinal \(ordinal)".utf8)
                    record.withUnsafeBytes { changes.put(pid, ordinal, sequence: sequence, record: $0) }
                    latest[ordinal] = record
                }
            }
            cache.apply(changes, from: sequence - 50, through: sequence)
            #expect(cache.heldSequence == sequence)
        }
        // Replaced records were dropped along the way: far less than 21 generations of them.
        #expect(cache.arenaBytes < filled + 3 * 50 * 40, "arena \(cache.arenaBytes) bytes after compaction (filled: \(filled))")

        var batch = RecipientCache.Batch()
        let ordinals = (UInt32(0)..<50).map { $0 }
        #expect(ordinals.withUnsafeBufferPointer { cache.copy(pid, $0, asOf: sequence, into: &batch) })
        batch.bytes.withUnsafeBytes { all in
            for i in 0..<50 {
                #expect(batch.record(i, in: all).map(Array.init) == latest[UInt32(i)], "ordinal \(i)")
            }
        }
        // A snapshot before the last commit gets nothing from the cache for what that commit changed.
        #expect(ordinals.withUnsafeBufferPointer { cache.copy(pid, $0, asOf: sequence - 1, into: &batch) })
        batch.bytes.withUnsafeBytes { all in #expect(batch.record(49, in: all) == nil && batch.record(0, in: all) != nil) }
        // A commit that does not follow what the cache holds empties it.
        cache.apply(RecipientCache.Changes(), from: sequence + 5, through: sequence + 6)
        #expect(cache.heldSequence == nil)
        #expect(!ordinals.withUnsafeBufferPointer { cache.copy(pid, $0, asOf: sequence, into: &batch) })
    }

    /// A column from its threshold on grows into cells made on another thread:
    /// every record is where it was put after each growth, and cells still
    /// being made when the cache is emptied are let go.
    @Test func aLargeColumnGrowsIntoCellsMadeOnAnotherThread() throws {
        let dir = TemporaryDirectory()
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        for r in store.submitAndWait((0..<50).map { RecipientCacheTests.token($0, 0) }) { _ = try r.get() }
        let cache = RecipientCache(compactingAfter: 64 << 20, preparingColumnsFrom: 64)
        let (pid, start) = try store.read { txn in
            (try #require(try store.reader.project(named: RecipientCacheTests.project, txn)).id, try store.tables.appliedSequence(txn))
        }
        try store.read { txn in try cache.fill(from: store.tables, through: start, txn) }
        // New devices, ten a commit: the column of 64 cells grows to 128, 256, 512 and 1,024.
        var sequence = start
        var latest: [UInt32: [UInt8]] = [:]
        for first in stride(from: UInt32(50), to: 1_000, by: 10) {
            var changes = RecipientCache.Changes()
            for ordinal in first..<(first + 10) {
                sequence += 1
                let record = Array("device \(ordinal)".utf8)
                record.withUnsafeBytes { changes.put(pid, ordinal, sequence: sequence, record: $0) }
                latest[ordinal] = record
            }
            cache.apply(changes, from: sequence - 10, through: sequence)
        }
        #expect(cache.heldSequence == sequence)
        #expect(cache.columnsGrownIntoPrepared == 4)
        var batch = RecipientCache.Batch()
        let ordinals = (UInt32(50)..<1_000).map { $0 }
        #expect(ordinals.withUnsafeBufferPointer { cache.copy(pid, $0, asOf: sequence, into: &batch) })
        batch.bytes.withUnsafeBytes { all in
            for (i, ordinal) in ordinals.enumerated() {
                #expect(batch.record(i, in: all).map(Array.init) == latest[ordinal], "ordinal \(ordinal)")
            }
        }
        // Past three quarters of 1,024 cells, the next 2,048 are being made: emptying the cache lets them go.
        cache.forget()
        #expect(cache.heldSequence == nil)
    }

    /// The arena's records stay where they were put while it grows past the
    /// table of segments it started with, records larger than a segment included.
    @Test func theArenaKeepsEveryRecordAcrossManySegments() {
        var arena = RecordArena(segmentSize: 64)
        defer { arena.free() }
        var rng = SeededRandom(seed: 7)
        var held: [(handle: Int, bytes: [UInt8])] = []
        for i in 0..<2_000 {
            // Mostly small records, some longer than a segment.
            let length = i % 97 == 0 ? 64 + Int(rng.next() % 200) : Int(rng.next() % 40)
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            held.append((bytes.withUnsafeBytes { arena.append($0) }, bytes))
        }
        #expect(held.last!.handle >> 32 > 100, "more segments than the table started with")
        for (n, (handle, bytes)) in held.enumerated() {
            #expect(Array(arena.record(handle)) == bytes, "record \(n)")
        }
        #expect(arena.bytes == held.reduce(0) { $0 + 4 + $1.bytes.count })
    }
}
