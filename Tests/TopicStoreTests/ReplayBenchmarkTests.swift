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
        // The median rebuild's CPU time, every thread's, and only over that rebuild: the
        // process's own (the workload's generation, the other rebuilds) would exceed what its
        // cores can spend in its time. (Clock ticks may leave a short rebuild at 0.)
        #expect(r.userSeconds >= 0 && r.kernelSeconds >= 0)
        let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
        #expect(r.userSeconds + r.kernelSeconds <= cores * r.rebuildSeconds + 0.05)
        #expect(r.summary.contains(" s of CPU, "))
        #expect(r.summary.contains("the median of 3 rebuilds"))
        #expect(r.auditClean)
        // Every rebuild's directory (and the audit's) is removed.
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty)

        let once = try ReplayBenchmark.run(store: store, scratchDirectory: scratch)
        #expect(once.rebuildRates.count == 1 && once.runsNote.isEmpty)
        #expect(!once.summary.contains("median"))
    }
}
