import Foundation
import Replay
import SubscriptionLog
import TopicStore

/// The compaction measurement: a store of `devices` devices after heavy churn,
/// compacted with a 30-day retention while a writer keeps committing.
///
/// Workload (one project, written through the exact-import path with times in the past):
/// - 60 to 50 days ago: every device gets a token and registers to `all`, one of
///   20 categories and one of 5 languages;
/// - 50 to 31 days ago: 30 % of the devices re-subscribe twice (unregister their
///   category, register another, twice), 10 % unregister from everything, 2 %
///   have their token rejected (half of those also unregistered everything);
/// - the last 30 days: 1 % change token.
/// With `--retain 30d` the horizon falls at the end of the churn, so most of the
/// log goes; rejected tokens are past the 30-day grace.
public enum CompactionBenchmark {
    public struct Result: Sendable {
        public var devices: Int
        public var events: UInt64
        public var generateSeconds: Double
        public var report: Compactor.Report
        public var writesDuringCompaction: Int
        public var maxWriteLatency: Double
        public var auditSeconds: Double
        public var auditClean: Bool

        public var summary: String {
            var lines = [String(format: "workload: %d devices, %llu events (generated in %.1f s)", devices, events, generateSeconds)]
            lines.append(CompactionReportFormat.text(report))
            lines.append(String(format: "concurrent writer: %d commands committed during the compaction, slowest %.0f ms",
                                writesDuringCompaction, maxWriteLatency * 1000))
            lines.append(String(format: "audit after compaction: %@ in %.1f s", auditClean ? "clean" : "NOT CLEAN", auditSeconds))
            return lines.joined(separator: "\n")
        }

        public var json: [String: Any] {
            ["devices": devices, "events": events, "generateSeconds": generateSeconds,
             "compaction": CompactionReportFormat.json(report), "writesDuringCompaction": writesDuringCompaction,
             "maxWriteLatencySeconds": maxWriteLatency, "auditSeconds": auditSeconds, "auditClean": auditClean]
        }
    }

    static let day: Int64 = 86_400_000

    /// Writes the workload into `directory` (new or empty); returns the number of events.
    @discardableResult
    public static func generate(into directory: String, devices: Int, now: Int64, seed: UInt64 = 7,
                                progress: ((ReplayProgress) -> Void)? = nil) throws -> UInt64 {
        let importer = try Importer(creating: directory, recordsPerCommit: 200_000)
        var random = SplitMix64(seed: seed)
        func next() -> UInt64 { random.next() }
        let estimate = UInt64(Double(devices) * 3.35)
        var sequence: UInt64 = 0
        var time: Int64 = 0
        func add(_ body: EventBody) throws {
            sequence += 1
            try importer.add(LogRecord(sequence: sequence, timestamp: time, event: Event(project: "bench", body: body)))
            if sequence % 100_000 == 0 { progress?(ReplayProgress(phase: "generate", done: sequence, total: max(estimate, sequence))) }
        }
        func id(_ i: Int) -> String { "device-\(String(i, radix: 16))-\(i &* 2_654_435_761 % 1_000_003)" }
        func token(_ i: Int, _ g: Int) -> String { "tok\(g)x\(String(UInt64(i) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(g), radix: 16))" }
        // 60 to 50 days ago: everyone arrives.
        let start = now - 60 * day
        for i in 0..<devices {
            time = start + Int64(i) * (10 * day) / Int64(max(devices, 1))
            try add(.token(deviceID: id(i), token: token(i, 0), platform: next() % 2 == 0 ? .ios : .android))
            try add(.register(deviceID: id(i), topics: [TopicSpec(code: "all"), TopicSpec(code: "cat.\(i % 20)"),
                                                        TopicSpec(code: "lang.\(i % 5)")]))
        }
        // 50 to 31 days ago: churn.
        let churnStart = now - 50 * day
        let churnSpan = 19 * day
        let resubscribers = devices * 3 / 10
        let leavers = devices / 10
        let rejected = devices / 50
        let churnEvents = Int64(resubscribers * 4 + leavers + rejected)
        var k: Int64 = 0
        func tick() { time = max(time, churnStart + k * churnSpan / max(churnEvents, 1)); k += 1 }
        var category = [UInt8](repeating: 0, count: devices)
        for i in 0..<devices { category[i] = UInt8(i % 20) }
        for n in 0..<resubscribers {
            let i = (n * 7 + 3) % devices
            for _ in 0..<2 {
                tick(); try add(.unregister(deviceID: id(i), codes: ["cat.\(category[i])"]))
                category[i] = UInt8((Int(category[i]) + 1 + Int(next() % 19)) % 20)
                tick(); try add(.register(deviceID: id(i), topics: [TopicSpec(code: "cat.\(category[i])")]))
            }
        }
        for n in 0..<leavers {
            let i = (n * 11 + 5) % devices
            tick(); try add(.unregisterAll(deviceID: id(i)))
        }
        for n in 0..<rejected {
            // Half of them are devices that just left every topic: they become garbage.
            let i = n % 2 == 0 ? ((n / 2) * 11 + 5) % devices : (n * 13 + 1) % devices
            tick(); try add(.tokenRejected(token: token(i, 0), rejectedAt: time, reason: "Unregistered"))
        }
        // The last 30 days: 1 % change token.
        let recentStart = now - 29 * day
        let recent = max(devices / 100, 1)
        for n in 0..<recent {
            time = max(time, recentStart + Int64(n) * (28 * day) / Int64(recent))
            let i = (n * 17 + 2) % devices
            try add(.token(deviceID: id(i), token: token(i, 2), platform: .ios))
        }
        try importer.finish()
        return sequence
    }

    /// Generates the workload into `directory` (new or empty), then compacts it
    /// with `--retain 30d` while a writer thread commits small batches, then audits.
    public static func run(directory: String, devices: Int, archive: String? = nil,
                           progress: ((ReplayProgress) -> Void)? = nil) throws -> Result {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let t0 = Date()
        let events = try generate(into: directory, devices: devices, now: now, progress: progress)
        let generateSeconds = Date().timeIntervalSince(t0)

        let store = try TopicStore(directory: directory)
        let writer = BackgroundWriter(store: store)
        writer.start()
        var options = Compactor.Options(retain: RetentionDuration(milliseconds: 30 * day))
        options.archiveDirectory = archive
        let report: Compactor.Report
        do {
            report = try Compactor.run(directory: directory, options: options, store: store, progress: progress)
        } catch {
            writer.stop()
            throw error
        }
        let (writes, slowest) = writer.stop()
        let audit = try Audit.run(store)
        store.close()
        return Result(devices: devices, events: events, generateSeconds: generateSeconds, report: report,
                      writesDuringCompaction: writes, maxWriteLatency: slowest,
                      auditSeconds: audit.seconds, auditClean: audit.isClean)
    }
}

/// Commits batches of 8 commands in a loop on its own thread, timing each.
final class BackgroundWriter: @unchecked Sendable {
    private let store: TopicStore
    private let lock = NSLock()
    private var stopping = false
    private var count = 0
    private var slowest = 0.0
    private let done = DispatchSemaphore(value: 0)

    init(store: TopicStore) { self.store = store }

    func start() {
        let thread = Thread { [self] in
            var i = 0
            while !lock.withLock({ stopping }) {
                let events = (0..<8).map { j in
                    Event(project: "bench", body: .register(deviceID: "live-\(i)-\(j)", topics: [TopicSpec(code: "all")]))
                }
                let t = Date()
                let ok = store.submitAndWait(events).filter { (try? $0.get()) != nil }.count
                let latency = Date().timeIntervalSince(t)
                lock.withLock { count += ok; slowest = max(slowest, latency) }
                i += 1
                usleep(2_000)
            }
            done.signal()
        }
        thread.start()
    }

    @discardableResult
    func stop() -> (Int, Double) {
        lock.withLock { stopping = true }
        done.wait()
        return lock.withLock { (count, slowest) }
    }
}
