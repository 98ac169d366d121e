import Foundation
import Replay
import Testing
import TopicStore

/// `ReplayBenchmark.run` with several rebuilds: each one measured, the median one reported.
@Suite struct ReplayBenchmarkTests {
    @Test func severalRebuildsReportTheMedianAndLeaveNothingBehind() throws {
        let dir = TemporaryDirectory("replay-bench")
        let events = try ReplayBenchmark.generateWorkload(into: dir.sub("store"), devices: 2_000, seed: 7)
        let store = try TopicStore(directory: dir.sub("store"), options: .longRead)
        let scratch = dir.sub("scratch")
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let r = try ReplayBenchmark.run(store: store, scratchDirectory: scratch, rebuilds: 3)
        #expect(r.events == events)
        #expect(r.rebuildRates.count == 3)
        #expect(r.rebuildRates.allSatisfy { $0 > 0 })
        // The figures are the median rebuild's: its rate, and its time for the same events.
        #expect(r.eventsPerSecond == r.rebuildRates.sorted()[1])
        #expect(abs(r.eventsPerSecond * r.rebuildSeconds - Double(events)) < 1)
        #expect(r.runsNote.hasPrefix("the median of 3 rebuilds ("))
        #expect(r.summary.contains("the median of 3 rebuilds"))
        #expect(r.auditClean)
        // Every rebuild's directory (and the audit's) is removed.
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty)

        let once = try ReplayBenchmark.run(store: store, scratchDirectory: scratch)
        #expect(once.rebuildRates.count == 1 && once.runsNote.isEmpty)
        #expect(!once.summary.contains("median"))
    }
}
