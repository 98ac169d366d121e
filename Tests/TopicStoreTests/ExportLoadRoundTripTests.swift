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
        #expect(try loaded.read { txn in try loaded.chainHead(txn) } == source.read { txn in try source.chainHead(txn) })
    }

    @Test("loaded into a newer store, an export stops at its first line: given later times, its rejections would be ignored")
    func anExportOlderThanTheStoreIsRefused() throws {
        let dir = TemporaryDirectory("export-load-newer")
        let source = try storeWithRejections(dir)
        let lines = try exportFile(source, to: dir.sub("export.jsonl"))
        source.close()
        let target = try TopicStore(directory: dir.sub("target"))
        usleep(5_000)
        try target.submitAndWait(Event(project: "other", body: .token(deviceID: "newer", token: String(repeating: "a", count: 64), platform: .ios)))
        target.close()
        func recordCount() throws -> Int {
            let store = try TopicStore(directory: dir.sub("target"))
            defer { store.close() }
            return try allRecords(store).count
        }

        let refused = try compactCLI(["load", "--data", dir.sub("target"), dir.sub("export.jsonl")])
        #expect(refused.status == 5, "\(refused.output) \(refused.error)")
        #expect(refused.error.contains("line 1: ts") && refused.error.contains("the store's last time") && refused.error.contains("--retime"),
                "\(refused.error)")
        #expect(try recordCount() == 1, "nothing of the export is applied")

        // With --retime it loads with later times (the rejections then compare with
        // those: devices the source holds rejected come back live), and says so.
        let retimed = try compactCLI(["load", "--data", dir.sub("target"), "--retime", "--json", dir.sub("export.jsonl")])
        #expect(retimed.status == 0, "\(retimed.error)")
        #expect(retimed.output.contains("\"retimed\":\(lines.count)"), "\(retimed.output)")
        let store = try TopicStore(directory: dir.sub("target"))
        let times = try allRecords(store).map(\.timestamp)
        store.close()
        #expect(times.count == 1 + lines.count)
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 <= $1 }, "times never go back")
    }

    @Test("a ts in seconds, in the future or going back within the file is refused with its line number")
    func badLineTimes() throws {
        let dir = TemporaryDirectory("export-load-times")
        let data = dir.sub("data")
        let now = nowMilliseconds()
        func line(_ ts: Int64, _ device: String) -> String {
            #"{"ts":\#(ts),"project":"alpha","type":"token","device_id":"\#(device)","token":"tok-\#(device)","platform":"ios"}"#
        }
        func load(_ lines: [String], _ extra: [String] = []) throws -> (status: Int32, output: String, error: String) {
            try (lines.joined(separator: "\n") + "\n").write(toFile: dir.sub("in.jsonl"), atomically: true, encoding: .utf8)
            return try compactCLI(["load", "--data", data] + extra + [dir.sub("in.jsonl")])
        }
        let seconds = try load([line(now / 1000, "s1")])
        #expect(seconds.status == 5 && seconds.error.contains("line 1") && seconds.error.contains("seconds"), "\(seconds.error)")
        let future = try load([line(now - 10_000, "f1"), line(now + 86_400_000, "f2"), line(now - 9_000, "f3")])
        #expect(future.status == 5 && future.error.contains("line 2") && future.error.contains("future"), "\(future.error)")
        #expect(future.output.contains("applied 2 commands"), "the other lines are applied: \(future.output)")
        let back = try load([line(now - 5_000, "b1"), line(now - 6_000, "b2"), line(now - 4_000, "b3")])
        #expect(back.status == 5 && back.error.contains("line 2: ts") && back.error.contains("a line before it"), "\(back.error)")
        #expect(back.output.contains("applied 1 commands"), "lines before it are applied, none after: \(back.output)")
    }
}
