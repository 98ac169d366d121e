import Compaction
import Foundation
import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// `history` on a compacted store: the log starts after the horizon, so a
/// device's timeline and a topic's flow start from the compaction snapshot's
/// state there. Past the horizon they must read exactly as on the same store
/// uncompacted, and they must end where the live projections are.
@Suite(.serialized) struct HistoryAfterCompactionTests {
    static let devices = (0..<14).map { "dev-\($0)" }
    static let topics = ["news", "sport", "all", "user.1", "promo", "weather"]

    /// A store with a cut between two workloads; a copy of it taken before
    /// compaction (the full history); the compacted store; and its horizon.
    func compacted(_ dir: TemporaryDirectory, garbage: Bool) throws -> (full: TopicStore, store: TopicStore, horizon: UInt64) {
        let (store, cut) = try storeWithCut(dir, before: 500, after: 200, seed: 41)
        store.close()
        try FileManager.default.copyItem(atPath: dir.sub("data"), toPath: dir.sub("full"))
        var options = compactionOptions(keepingFrom: cut)
        if garbage {
            options.garbage.rejectedGrace = RetentionDuration(milliseconds: 0)
        } else {
            options.garbage.devices = false; options.garbage.topics = false; options.garbage.tokens = false
        }
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        let horizon = report.horizon
        return (try TopicStore(directory: dir.sub("full")), try TopicStore(directory: dir.sub("data")), horizon)
    }

    @Test("after compaction, timelines and flows start from the snapshot and continue as the full log's")
    func historyContinuesFromTheSnapshot() throws {
        let dir = TemporaryDirectory("history-compacted")
        let (full, store, horizon) = try compacted(dir, garbage: false)
        defer { full.close(); store.close() }
        var seeded = 0
        for device in Self.devices {
            let whole = try History.device(device, project: "alpha", in: full)
            let now = try History.device(device, project: "alpha", in: store, recordsPerReadTransaction: 17)
            #expect(now.horizon == horizon && whole.horizon == nil)
            // The snapshot's entry is the full timeline's state at the horizon.
            if let before = whole.entries.last(where: { $0.sequence <= horizon }) {
                let first = try #require(now.entries.first, "\(device)")
                #expect(first.kind == .horizon && first.sequence == horizon)
                #expect(first.topics == before.topics && first.state == before.state && first.token == before.token, "\(device)")
                seeded += 1
            } else {
                #expect(now.entries.first?.kind != .horizon, "\(device) did not exist at the horizon")
            }
            // Past the horizon, entry for entry the same.
            #expect(now.entries.filter { $0.sequence > horizon } == whole.entries.filter { $0.sequence > horizon }, "\(device)")
        }
        #expect(seeded > 5)
        for code in Self.topics {
            let whole = try History.topic(code, project: "alpha", in: full)
            let now = try History.topic(code, project: "alpha", in: store, recordsPerReadTransaction: 17)
            let atHorizon = whole.points.last(where: { $0.sequence <= horizon })?.subscribers ?? 0
            if let created = whole.createdSeq, created <= horizon {
                let first = try #require(now.points.first)
                #expect(first.change == 0 && first.sequence == horizon && first.subscribers == atHorizon, "\(code)")
                #expect(now.createdSeq == created)
            }
            #expect(now.points.filter { $0.sequence > horizon } == whole.points.filter { $0.sequence > horizon }, "\(code)")
            #expect(now.subscribers == whole.subscribers, "\(code)")
        }
    }

    @Test("with garbage collected, every timeline and flow ends where the projections are")
    func historyEndsAtTheProjections() throws {
        let dir = TemporaryDirectory("history-gc")
        let (full, store, horizon) = try compacted(dir, garbage: true)
        full.close()
        defer { store.close() }
        let reader = store.reader
        var expiredSeen = false
        for device in Self.devices {
            let timeline = try History.device(device, project: "alpha", in: store)
            let info = try store.read { txn -> DeviceInfo? in
                guard let p = try reader.project(named: "alpha", txn) else { return nil }
                return try reader.device(p.id, deviceID: device, txn)
            }
            if timeline.entries.contains(where: { $0.kind == .tokenExpired || $0.kind == .forgotten }) { expiredSeen = true }
            guard let last = timeline.entries.last else {
                #expect(info == nil, "\(device) has no history but is in the projections")
                continue
            }
            #expect(last.sequence >= horizon)
            if last.kind == .forgotten { #expect(info == nil, "\(device)"); continue }
            #expect(Set(info?.topics ?? []) == Set(last.topics), "\(device)")
            #expect((info?.record.state.rawValue ?? "absent") == last.state, "\(device)")
            #expect(info?.record.token == last.token, "\(device)")
        }
        #expect(expiredSeen, "the garbage collector's events appear in the timelines")
        for code in Self.topics {
            let flow = try History.topic(code, project: "alpha", in: store)
            let (exists, subscribers) = try store.read { txn -> (Bool, Int) in
                guard let p = try reader.project(named: "alpha", txn), let tid = try reader.topicID(p.id, code: code, txn) else { return (false, 0) }
                return (true, Int(try reader.topic(p.id, tid, txn)?.subscribers ?? 0))
            }
            #expect(flow.subscribers == subscribers, "\(code)")
            #expect(flow.exists == exists, "\(code): \(flow.lifecycle)")
            if let drop = flow.points.first(where: { $0.cause == "drop-topic" }) {
                #expect(drop.sequence > horizon && flow.lifecycle.contains { $0.kind == .dropped && $0.sequence == drop.sequence })
            }
        }
    }

    @Test("the command says where the log was compacted; an unwritable chart is a failure, not a usage error")
    func commandLine() throws {
        let dir = TemporaryDirectory("history-cli")
        let (full, store, horizon) = try compacted(dir, garbage: false)
        full.close(); store.close()
        let topic = try compactCLI(["history", "--data", dir.sub("data"), "--project", "alpha", "--topic", "news"])
        #expect(topic.status == 0, "\(topic.error)")
        #expect(topic.output.contains("compacted at seq \(horizon)"), "\(topic.output)")
        #expect(topic.output.contains("compaction-horizon:"), "\(topic.output)")
        let device = try compactCLI(["history", "--data", dir.sub("data"), "--project", "alpha", "--device", "dev-2", "--json"])
        #expect(device.status == 0, "\(device.error)")
        let object = try JSONSerialization.jsonObject(with: Data(device.output.utf8)) as? [String: Any]
        #expect(object?["device_id"] as? String == "dev-2")
        #expect((object?["horizon"] as? NSNumber)?.uint64Value == horizon)
        let chart = try compactCLI(["history", "--data", dir.sub("data"), "--project", "alpha", "--topic", "news",
                                    "--svg", dir.sub("no/such/dir/chart.svg")])
        #expect(chart.status == 1, "\(chart.error)")
        #expect(chart.error.contains("cannot write"))
    }
}
