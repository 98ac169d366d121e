import Foundation
import SubscriptionLog
import TopicStore

/// The replay measurement: the rebuild rate of a whole store (projections only,
/// as an audit rebuilds them) and the time of a full audit.
public enum ReplayBenchmark {
    public struct Result: Sendable {
        public var events: UInt64
        public var rebuildSeconds: Double
        public var eventsPerSecond: Double
        /// Of `rebuildSeconds`, the time spent writing the built tables into LMDB.
        public var writeSeconds: Double = 0
        /// Budget rounds the rebuild was written in before the end (0: once, at the end).
        public var rounds = 0
        /// A whole audit: log verification (CRC, SHA-256 chain), rebuild, and the comparison of every entry.
        public var auditSeconds: Double
        public var auditClean: Bool
        /// Every rebuild's rate in the order they ran; the figures above are the median one's.
        public var rebuildRates: [Double] = []
        /// The median rebuild's CPU time, every thread of the process: in user space and in
        /// the kernel (page faults on memory touched for the first time, the copy of the new
        /// file into the page cache). On a VM that backs memory lazily the kernel's share is
        /// what moves the most between runs of the same rebuild.
        public var userSeconds: Double = 0
        public var kernelSeconds: Double = 0
        /// "8.12 s of CPU, 1.93 s of it in the kernel".
        public var cpuNote: String {
            String(format: "%.2f s of CPU, %.2f s of it in the kernel", userSeconds + kernelSeconds, kernelSeconds)
        }
        /// "the median of 3 rebuilds (455k, 681k, 701k events/s)", or "" after one.
        public var runsNote: String {
            guard rebuildRates.count > 1 else { return "" }
            let rates = rebuildRates.map { String(format: "%.0fk", $0 / 1000) }.joined(separator: ", ")
            return "the median of \(rebuildRates.count) rebuilds (\(rates) events/s, in the order they ran)"
        }
        public var summary: String {
            String(format: "replay: %llu events rebuilt in %.2f s (%.2f s of it writing the tables%@; %@) = %.0f events/s%@; audit %.2f s (%@)",
                   events, rebuildSeconds, writeSeconds, rounds > 0 ? ", \(rounds + 1) rounds" : "", cpuNote, eventsPerSecond,
                   runsNote.isEmpty ? "" : ", " + runsNote, auditSeconds, auditClean ? "clean" : "NOT clean")
        }
    }

    /// Rebuilds `store` into a scratch directory `rebuilds` times, then audits
    /// it; removes what it wrote. The result is the median rebuild's (by rate).
    ///
    /// One rebuild on a machine whose memory is fresh measures that memory's
    /// first touch as much as the rebuild: on the same VM and store, the first
    /// rebuild after `bench`'s ingest took 4.65 s, the next ones 3.3–3.4 s,
    /// with the write-out 1.9 s against 0.9 s.
    public static func run(store: TopicStore, scratchDirectory: String = NSTemporaryDirectory(),
                           memoryBudget: Int? = Replay.Options.defaultMemoryBudget, rebuilds: Int = 1) throws -> Result {
        precondition(rebuilds >= 1, "at least one rebuild")
        var options = Replay.Options()
        options.includeLog = false
        options.memoryBudget = memoryBudget
        var reports: [(report: Replay.Report, user: Double, kernel: Double)] = []
        for _ in 0..<rebuilds {
            let out = (scratchDirectory as NSString).appendingPathComponent("topicstore-replay-bench-\(getpid())-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(atPath: out) }
            let before = ProcessCPUTime.now()
            let report = try Replay.rebuild(from: store, to: .end, into: out, options: options)
            let after = ProcessCPUTime.now()
            reports.append((report, after.user - before.user, after.kernel - before.kernel))
        }
        let median = reports.sorted { $0.report.eventsPerSecond < $1.report.eventsPerSecond }[reports.count / 2]
        let rebuild = median.report
        var auditOptions = Audit.Options()
        auditOptions.scratchDirectory = scratchDirectory
        auditOptions.memoryBudget = memoryBudget
        let audit = try Audit.run(store, options: auditOptions)
        return Result(events: rebuild.events, rebuildSeconds: rebuild.seconds, eventsPerSecond: rebuild.eventsPerSecond,
                      writeSeconds: rebuild.writeSeconds, rounds: rebuild.rounds, auditSeconds: audit.seconds, auditClean: audit.isClean,
                      rebuildRates: reports.map(\.report.eventsPerSecond), userSeconds: median.user, kernelSeconds: median.kernel)
    }


    /// Writes a store of `devices` devices in one project into `directory`
    /// (new or empty) through the exact-import path: each device gets a token
    /// and registers to `all`, one of 20 categories and one of 5 languages; then
    /// churn: 10 % unsubscribe from their category, 5 % change token, 3 % are
    /// rejected by the provider, 2 % unregister from everything. About 2.2 events
    /// per device. Returns the number of events.
    @discardableResult
    public static func generateWorkload(into directory: String, devices: Int, seed: UInt64 = 42,
                                        progress: ((ReplayProgress) -> Void)? = nil) throws -> UInt64 {
        let importer = try Importer(creating: directory, recordsPerCommit: 200_000)
        var random = SplitMix64(seed: seed)
        func next() -> UInt64 { random.next() }
        var sequence: UInt64 = 0
        var time: Int64 = 1_767_225_600_000  // 2026-01-01
        func add(_ body: EventBody) throws {
            sequence += 1
            if sequence % 16 == 0 { time += 1 }
            try importer.add(LogRecord(sequence: sequence, timestamp: time, event: Event(project: "bench", body: body)))
            if sequence % 100_000 == 0 { progress?(ReplayProgress(phase: "generate", done: sequence, total: UInt64(Double(devices) * 2.2))) }
        }
        func deviceID(_ i: Int) -> String { "device-\(String(i, radix: 16))-\(i &* 2_654_435_761 % 1_000_003)" }
        func token(_ i: Int, _ generation: Int) -> String { "tok\(generation)x\(String(UInt64(i) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(generation), radix: 16))" }
        for i in 0..<devices {
            try add(.token(deviceID: deviceID(i), token: token(i, 0), platform: next() % 2 == 0 ? .ios : .android))
            try add(.register(deviceID: deviceID(i), topics: [TopicSpec(code: "all"), TopicSpec(code: "cat.\(i % 20)"),
                                                              TopicSpec(code: "lang.\(i % 5)")]))
        }
        for _ in 0..<(devices / 5) {
            let i = Int(next() % UInt64(max(devices, 1)))
            switch next() % 20 {
            case 0..<10: try add(.unregister(deviceID: deviceID(i), codes: ["cat.\(i % 20)"]))
            case 10..<15: try add(.token(deviceID: deviceID(i), token: token(i, 1), platform: next() % 2 == 0 ? .ios : .android))
            case 15..<18: try add(.tokenRejected(token: token(i, 0), rejectedAt: time, reason: "Unregistered"))
            default: try add(.unregisterAll(deviceID: deviceID(i)))
            }
        }
        try importer.finish()
        return sequence
    }
}
