import Compaction
import Foundation
import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// `replay` exactly at a compaction horizon: the output holds no log record of
/// its own (the log of a compacted store starts after the horizon), only the
/// snapshot's projections and a copy of the snapshot. It must still be a store
/// at the horizon — its meta, its stats, its audit — and go on from there.
@Suite struct ReplayHorizonTests {
    static var readOnly: TopicStore.Options {
        var o = TopicStore.Options(); o.readOnly = true; return o
    }

    /// A compacted store (horizon inside the log) and its snapshot.
    func compactedStore(_ dir: TemporaryDirectory) throws -> (horizon: UInt64, snapshot: Snapshot) {
        let (store, cut) = try storeWithCut(dir, before: 300, after: 60, seed: 21)
        store.close()
        var options = compactionOptions(keepingFrom: cut)
        options.garbage.devices = false; options.garbage.topics = false; options.garbage.tokens = false
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(report.horizon > 0 && report.horizon < 360)
        let snapshot = try #require(try Snapshot.find(inStore: dir.sub("data"), horizon: report.horizon))
        return (report.horizon, snapshot)
    }

    @Test(arguments: ["seq", "time"])
    func replayAtTheHorizonIsAStoreAtTheHorizon(_ how: String) throws {
        let dir = TemporaryDirectory("horizon")
        let (horizon, snapshot) = try compactedStore(dir)
        let live = try TopicStore(directory: dir.sub("data"), options: Self.readOnly)
        defer { live.close() }
        #expect(try live.read { txn in try live.log.bounds(txn)?.first } == horizon + 1)

        let point: Replay.Point = how == "seq" ? .sequence(horizon) : .time(snapshot.timestamp)
        let report = try Replay.rebuild(from: live, to: point, into: dir.sub("out"))
        #expect(report.through == horizon)
        #expect(report.throughTimestamp == snapshot.timestamp)

        let out = try TopicStore(directory: dir.sub("out"), options: Self.readOnly)
        // The projections are the snapshot's, meta included: applied through the horizon, not 0.
        #expect(try out.read { txn in try out.tables.appliedSequence(txn) } == horizon)
        let expected = try TopicStore(directory: snapshot.directory, options: Self.readOnly)
        let got = try ProjectionDump.of(out), want = try ProjectionDump.of(expected)
        #expect(got == want, "\(got.differences(from: want).prefix(5))")
        expected.close()
        let stats = try out.statistics()
        #expect(stats.appliedSequence == horizon)
        #expect(stats.firstSequence == nil && stats.compactedThrough == horizon)

        // Its own audit starts from the copied snapshot and is clean; its head is the source's at the horizon.
        let audit = try Audit.run(out)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
        #expect(audit.snapshot == snapshot.head)
        #expect(audit.head == snapshot.head)
        out.close()
        let cli = try compactCLI(["audit", "--data", dir.sub("out")])
        #expect(cli.status == 0, "\(cli.output) \(cli.error)")
        #expect(cli.output.contains("head: seq \(horizon) sha256 \(snapshot.head.hash.hex)"), "\(cli.output)")
        let statsText = try compactCLI(["stats", "--data", dir.sub("out")])
        #expect(statsText.output.contains("projections at seq \(horizon)"), "\(statsText.output)")
        #expect(statsText.output.contains("compacted through seq \(horizon)"), "\(statsText.output)")
        let statsJSON = try compactCLI(["stats", "--data", dir.sub("out"), "--json"])
        #expect(statsJSON.output.contains("\"appliedSeq\":\(horizon)") && statsJSON.output.contains("\"compactedThroughSeq\":\(horizon)"),
                "\(statsJSON.output)")

        // And it goes on as a store: the next event is horizon + 1, chained from the snapshot's head.
        let writable = try TopicStore(directory: dir.sub("out"))
        defer { writable.close() }
        let receipt = try writable.submitAndWait(Event(project: "alpha", body: .register(deviceID: "later", topics: [TopicSpec(code: "news")])))
        #expect(receipt.sequence == horizon + 1)
        let after = try Audit.run(writable)
        #expect(after.isClean, "\(after.logIssues.prefix(3)) \(after.differences.prefix(3))")
        #expect(after.snapshot == snapshot.head && after.head?.sequence == horizon + 1)
    }

    /// Compacting such a store keeps the snapshot it starts from (its log is empty,
    /// so the horizon is the one its meta names), and its audit stays clean.
    @Test func compactingAStoreReplayedAtTheHorizonKeepsItsSnapshot() throws {
        let dir = TemporaryDirectory("horizon-compact")
        let (horizon, snapshot) = try compactedStore(dir)
        let live = try TopicStore(directory: dir.sub("data"), options: Self.readOnly)
        try Replay.rebuild(from: live, to: .sequence(horizon), into: dir.sub("out"))
        live.close()
        let report = try Compactor.run(directory: dir.sub("out"), options: compactionOptions(keepingFrom: nowMilliseconds()))
        #expect(report.previousHorizon == horizon && report.horizon == horizon)
        #expect(Snapshot.horizons(inStore: dir.sub("out")) == [horizon])
        let out = try TopicStore(directory: dir.sub("out"), options: Self.readOnly)
        defer { out.close() }
        let audit = try Audit.run(out)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
        #expect(audit.head == snapshot.head)
    }

    /// Projections only at the horizon: the snapshot's projections, applied through the horizon.
    @Test func projectionsOnlyAtTheHorizon() throws {
        let dir = TemporaryDirectory("horizon-po")
        let (horizon, snapshot) = try compactedStore(dir)
        let live = try TopicStore(directory: dir.sub("data"), options: Self.readOnly)
        defer { live.close() }
        var options = Replay.Options(); options.includeLog = false
        try Replay.rebuild(from: live, to: .sequence(horizon), into: dir.sub("po"), options: options)
        let out = try TopicStore(directory: dir.sub("po"), options: Self.readOnly)
        defer { out.close() }
        let expected = try TopicStore(directory: snapshot.directory, options: Self.readOnly)
        defer { expected.close() }
        #expect(try out.read { txn in try out.tables.appliedSequence(txn) } == horizon)
        #expect(try ProjectionDump.of(out) == ProjectionDump.of(expected))
    }
}
