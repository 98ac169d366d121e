import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// `load` of an export: new sequence numbers, but each record keeps its time,
/// so the fold decides as it did (a rejection applies only to a token
/// registered before it). Loaded into an empty store, an export gives the
/// same projections; into a newer store, times never go back.
@Suite(.serialized) struct ExportLoadRoundTripTests {
    /// A store whose history has rejections that applied, one the token's
    /// re-registration undid, and the random workload's own.
    func storeWithRejections(_ dir: TemporaryDirectory) throws -> TopicStore {
        let store = try TopicStore(directory: dir.sub("source"))
        for i in 0..<12 {
            let token = Self.token(i)
            let receipt = try store.submitAndWait(Event(project: "alpha", body: .token(deviceID: "r\(i)", token: token, platform: .ios)))
            try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "r\(i)", topics: [TopicSpec(code: "news")])))
            usleep(3_000)  // the rejections below come later than every token's time
            if i < 8 {
                try store.submitAndWait(Event(project: "alpha", body: .tokenRejected(token: token, rejectedAt: receipt.timestamp + 1, reason: "Unregistered")))
            }
        }
        usleep(3_000)
        try store.submitAndWait(Event(project: "alpha", body: .token(deviceID: "r3", token: Self.token(3), platform: .ios)))
        try HashChainTests.fill(store, count: 400, seed: 77)
        return store
    }

    static func token(_ i: Int) -> String { String(repeating: "ab", count: 31) + String(format: "%02d", i) }

    func exportFile(_ store: TopicStore, to path: String) throws -> [String] {
        var lines: [String] = []
        _ = try Export.lines(from: store) { lines.append($0) }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return lines
    }

    @Test("an export loaded into an empty store folds to the same projections, rejections included")
    func loadOfAnExportReproducesTheProjections() throws {
        let dir = TemporaryDirectory("export-load")
        let source = try storeWithRejections(dir)
        defer { source.close() }
        let rejected = try source.read { txn -> Int in
            let p = try #require(try source.reader.project(named: "alpha", txn))
            return try (0..<12).filter { try source.reader.device(p.id, deviceID: "r\($0)", txn)?.record.state == .rejected }.count
        }
        #expect(rejected == 7, "eight rejections, one undone by a later registration of the token")
        _ = try exportFile(source, to: dir.sub("export.jsonl"))

        let load = try compactCLI(["load", "--data", dir.sub("loaded"), "--json", dir.sub("export.jsonl")])
        #expect(load.status == 0, "\(load.error)")
        let loaded = try TopicStore(directory: dir.sub("loaded"))
        defer { loaded.close() }
        let want = try ProjectionDump.of(source), got = try ProjectionDump.of(loaded)
        #expect(got == want, "\(got.differences(from: want).prefix(5))")
        // The same records, time for time (so the same bytes, the same chain head).
        #expect(try allRecords(loaded) == allRecords(source))
        #expect(try loaded.read { txn in try loaded.log.head(txn) } == source.read { txn in try source.log.head(txn) })
    }

    @Test("loaded into a newer store, older times are raised and future ones lowered: times never go back")
    func loadedTimesNeverGoBack() throws {
        let dir = TemporaryDirectory("export-load-newer")
        let source = try storeWithRejections(dir)
        let lines = try exportFile(source, to: dir.sub("export.jsonl"))
        source.close()
        let target = try TopicStore(directory: dir.sub("target"))
        usleep(5_000)
        try target.submitAndWait(Event(project: "alpha", body: .token(deviceID: "newer", token: String(repeating: "a", count: 64), platform: .ios)))
        target.close()
        let future = #"{"seq":1,"ts":99999999999999,"project":"alpha","type":"unregister-all","device_id":"r1"}"#
        try (lines.prefix(50).joined(separator: "\n") + "\n" + future + "\n").write(toFile: dir.sub("mixed.jsonl"), atomically: true, encoding: .utf8)
        let before = nowMilliseconds()
        let load = try compactCLI(["load", "--data", dir.sub("target"), dir.sub("mixed.jsonl")])
        let after = nowMilliseconds()
        #expect(load.status == 0, "\(load.error)")
        let store = try TopicStore(directory: dir.sub("target"))
        let times = try allRecords(store).map(\.timestamp)
        store.close()
        #expect(times.count == 52)
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 <= $1 }, "\(times)")
        #expect(times.last! <= after && times.last! >= before - 1_000, "the future line's time is the commit's")
        // A bad ts is a bad line, reported with its number; nothing of it is applied.
        try #"{"ts":"yesterday","project":"alpha","type":"unregister-all","device_id":"r2"}"#.write(toFile: dir.sub("bad.jsonl"), atomically: true, encoding: .utf8)
        let refused = try compactCLI(["load", "--data", dir.sub("target"), dir.sub("bad.jsonl")])
        #expect(refused.status == 5)
        #expect(refused.error.contains("line 1") && refused.error.contains("ts"), "\(refused.error)")
    }
}
