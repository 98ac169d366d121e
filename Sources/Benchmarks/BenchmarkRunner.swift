import Compaction
import Foundation
import Replay
import SubscriptionLog

/// What to run.
public struct BenchmarkConfig: Sendable {
    public var spec: WorkloadSpec
    /// Where the three databases go; created when missing.
    public var directory: String
    public var skipSQLite = false
    /// Commands per durable batch, for every engine.
    public var batchSize = 1000
    /// Commands per commit of the concurrent churn writer.
    public var churnBatchSize = 100
    /// Fewer query repetitions and shorter time budgets (CI smoke runs).
    public var quick = false
    public init(spec: WorkloadSpec, directory: String) {
        self.spec = spec
        self.directory = directory
    }
}

/// Runs every measurement on the same generated data, engine after engine, and builds the report.
public struct BenchmarkRunner {
    public let config: BenchmarkConfig
    let progress: (String) -> Void

    public init(config: BenchmarkConfig, progress: @escaping (String) -> Void = { _ in }) {
        self.config = config
        self.progress = progress
    }

    var spec: WorkloadSpec { config.spec }
    var budget: Double { config.quick ? 0.5 : 4 }
    var underWritesSeconds: Double { config.quick ? 0.5 : 10 }
    var mapSize: Int { Swift.max(1 << 30, spec.devices * 4096) }

    /// Results of one engine, gathered before the report compares them.
    struct EngineResults {
        var installRate = 0.0          // commands/s
        var installSubscriptionRate = 0.0
        var installWrittenPerCommand = 0.0   // bytes sent to storage per command
        var churnRate = 0.0
        var churnWrittenPerCommand = 0.0     // bytes sent to storage per churn command
        var commits = 0
        var quiet: [String: LatencySamples] = [:]
        var loaded: [String: LatencySamples] = [:]
        var loadedWriterRate = 0.0
        var answers: [AudienceQuery: AudienceTally] = [:]
        var streamRate = 0.0           // recipients/s
        var streamBytesRate = 0.0
        var streamRecipients = 0
        /// The same stream without the serving process's recipient cache (topicstore only).
        var mapStreamRate = 0.0
        var walkRate = 0.0
        var walkRecipients = 0
        var diskBytes = 0
        var peakRSS = 0
        /// The whole store rebuilt from its log (topicstore only).
        var replay: ReplayBenchmark.Result?
        /// The churn stream after the last command this engine committed.
        var churnAfter: ChurnStream?
    }

    public func run() throws -> BenchmarkReport {
        let started = monotonicNanos()
        try FileManager.default.createDirectory(atPath: config.directory, withIntermediateDirectories: true)
        let classes = QueryClass.standard(for: spec, quick: config.quick)
        var report = BenchmarkReport(spec: spec, batchSize: config.batchSize)
        report.skippedSQLite = config.skipSQLite

        let ts = try runTopicStore(classes)
        let raw = try runRawLMDB()
        let sql = config.skipSQLite ? nil : try runSQLite(classes)
        let paired = try sql.map { try runSideBySide(classes, ts: ts, sql: $0) }
        let nightly = try runNightlyCompaction()

        // Same data, same questions: the answers must agree.
        if let sql {
            for (q, a) in ts.answers.sorted(by: { $0.key.description < $1.key.description }) {
                report.comparedQueries += 1
                if let b = sql.answers[q], a != b { report.disagreements.append("\(q): topicstore \(a); SQLite \(b)") }
            }
        }
        if let paired {
            report.comparedQueries += paired.compared
            report.disagreements += paired.disagreements
        }

        func rate(_ v: Double?) -> Figure? { v.map { Figure($0) } }
        var rows: [ReportRow] = []
        rows.append(ReportRow(name: "durable ingest, install phase", unit: "commands", kind: .rate,
                              topicstore: Figure(ts.installRate), sqlite: rate(sql?.installRate), limit: Figure(raw.installRate),
                              note: "\(spec.devices * 2) commands (token + register per device) in batches of \(config.batchSize); "
                                  + "topicstore committed them in \(ts.commits) write transactions, the raw log in \(raw.commits)"))
        rows.append(ReportRow(name: "durable ingest, install phase", unit: "subscription changes", kind: .rate,
                              topicstore: Figure(ts.installSubscriptionRate), sqlite: rate(sql?.installSubscriptionRate),
                              limit: Figure(raw.installSubscriptionRate)))
        rows.append(ReportRow(name: "bytes written to storage per install command", unit: "", kind: .bytes,
                              topicstore: Figure(ts.installWrittenPerCommand), sqlite: sql.map { Figure($0.installWrittenPerCommand) },
                              limit: Figure(raw.installWrittenPerCommand),
                              note: "sectors written to the block device holding the databases (/proc/diskstats) over the install phase ÷ commands: "
                                  + "what each durable commit costs the disk (the whole device: exact on an otherwise idle machine)"))
        rows.append(ReportRow(name: "durable ingest, churn phase", unit: "commands", kind: .rate,
                              topicstore: Figure(ts.churnRate), sqlite: rate(sql?.churnRate), limit: Figure(raw.churnRate),
                              note: "\(spec.churnCommands) commands: 40% re-subscribe, 25% unregister, 5% unregister-all, 20% token change, 10% token rejected"))
        rows.append(ReportRow(name: "bytes written to storage per churn command", unit: "", kind: .bytes,
                              topicstore: Figure(ts.churnWrittenPerCommand), sqlite: sql.map { Figure($0.churnWrittenPerCommand) },
                              limit: Figure(raw.churnWrittenPerCommand),
                              note: "as for install: a churn command touches a device anywhere in the store, so its commit dirties pages all over the file"))
        for c in classes {
            rows.append(ReportRow(name: "audience count: \(c.name)", unit: "", kind: .latency,
                                  topicstore: ts.quiet[c.name].map(Figure.latency), sqlite: sql?.quiet[c.name].map(Figure.latency)))
        }
        for c in classes {
            rows.append(ReportRow(name: "audience count under writes: \(c.name)", unit: "", kind: .latency,
                                  topicstore: ts.loaded[c.name].map(Figure.latency), sqlite: sql?.loaded[c.name].map(Figure.latency)))
        }
        if let paired {
            for c in classes {
                rows.append(ReportRow(name: "audience count side by side: \(c.name)", unit: "", kind: .latency,
                                      topicstore: paired.topicstore[c.name].map(Figure.latency),
                                      sqlite: paired.sqlite[c.name].map(Figure.latency),
                                      note: c.name == classes.first?.name ? sideBySideNote(paired) : ""))
            }
        }
        rows.append(ReportRow(name: "churn committed while counting", unit: "commands", kind: .rate,
                              topicstore: Figure(ts.loadedWriterRate), sqlite: rate(sql?.loadedWriterRate),
                              note: "a writer thread commits churn in batches of \(config.churnBatchSize) while the counts above run"))
        rows.append(ReportRow(name: "token streaming, all", unit: "recipients", kind: .rate,
                              topicstore: Figure(ts.streamRate), sqlite: rate(sql?.streamRate), limit: Figure(ts.walkRate),
                              note: "\(ts.streamRecipients) reachable recipients of `all`, each device_id and token copied into a buffer "
                                  + "(\(BenchmarkReport.bytes(ts.streamBytesRate))/s), by the serving process (its recipient cache holds the device records); "
                                  + "limit = bare LMDB cursor walk over all \(ts.walkRecipients) device records doing the same copy"))
        rows.append(ReportRow(name: "token streaming, all, from the map", unit: "recipients", kind: .rate,
                              topicstore: Figure(ts.mapStreamRate), sqlite: rate(sql?.streamRate), limit: Figure(ts.walkRate),
                              note: "the same stream as any other process reads it: every record from the LMDB device table"))
        if let replay = ts.replay {
            rows.append(ReportRow(name: "replay: rebuild from the log", unit: "events", kind: .rate,
                                  topicstore: Figure(replay.eventsPerSecond),
                                  note: "\(replay.events) events (install, churn and the churn committed while counting) folded into a new "
                                      + "store with the live fold, in \(String(format: "%.2f", replay.rebuildSeconds)) s (\(replay.cpuNote))"
                                      + (replay.runsNote.isEmpty ? "" : ", \(replay.runsNote)") + "; a full audit (log checksums and "
                                      + "hash chain, rebuild, every entry compared) took \(String(format: "%.2f", replay.auditSeconds)) s and was "
                                      + (replay.auditClean ? "clean" : "NOT clean")))
            if !replay.auditClean { report.disagreements.append("audit of the benchmark store found differences") }
        }
        rows.append(ReportRow(name: "bytes on disk", unit: "", kind: .bytes,
                              topicstore: Figure(Double(ts.diskBytes)), sqlite: sql.map { Figure(Double($0.diskBytes)) },
                              limit: Figure(Double(raw.diskBytes)),
                              note: "allocated blocks; topicstore holds the log and every projection, the limit only the log; SQLite after a WAL checkpoint"))
        rows.append(ReportRow(name: "bytes on disk after the nightly compaction", unit: "", kind: .bytes,
                              topicstore: Figure(Double(nightly.diskBytes)),
                              note: "`topicstore compact --retain 30d`, as an operator runs it each night, after everything above: every event "
                                  + "kept (\(nightly.records) in the log; all are younger than the window), \(nightly.garbage) garbage events "
                                  + "appended, the file written again with full pages and the log's records in compressed blocks; took "
                                  + String(format: "%.1f", nightly.seconds) + " s"))
        rows.append(ReportRow(name: "peak RSS", unit: "", kind: .bytes,
                              topicstore: Figure(Double(ts.peakRSS)), sqlite: sql.map { Figure(Double($0.peakRSS)) },
                              limit: Figure(Double(raw.peakRSS)),
                              note: "VmHWM of each engine's phase (reset between phases); mapped LMDB pages count as resident"))
        report.rows = rows
        report.goals = goals(ts: ts, raw: raw, sql: sql, paired: paired, classes: classes, nightly: nightly)
        report.notes.append("SQLite: WAL, synchronous=FULL, 128 MiB cache, mmap; one project per file; the same encoded records in an events table.")
        report.notes.append("Latencies include opening the read transaction where one is opened (topicstore answers per-user topics from its serving caches without one when they hold the newest commit; SQLite always opens one); each query class is sampled round-robin (samples in --json).")
        let timed = [ts.quiet, ts.loaded, sql?.quiet ?? [:], sql?.loaded ?? [:], paired?.topicstore ?? [:], paired?.sqlite ?? [:]]
        if let note = Self.clockNote(timed.flatMap(\.values), sideBySide: paired != nil) { report.notes.append(note) }
        report.seconds = Double(monotonicNanos() - started) / 1e9
        return report
    }

    /// What the latencies leave out: the clock's own read, as calibrated before each class was timed.
    static func clockNote(_ samples: [LatencySamples], sideBySide: Bool) -> String? {
        let reads = samples.compactMap(\.clockNanos)
        guard let low = reads.map(\.lowerBound).min(), let high = reads.map(\.upperBound).max() else { return nil }
        let range = low == high ? "\(low) ns" : "\(low)–\(high) ns"
        return "Latencies leave out the clock's own read: two reads back to back took \(range) (median of 20,000 pairs, "
            + "measured before each class\(sideBySide ? " and each side-by-side block" : "")), subtracted from every sample of every engine."
    }

    // MARK: Goals

    /// What the side-by-side rows are, said once under the first.
    func sideBySideNote(_ paired: SideBySideResults) -> String {
        "both stores opened again after the phases above and brought to the same commands"
            + (paired.toppedUp > 0 ? " (\(paired.toppedUpEngine) took the \(paired.toppedUp) churn commands its writer had not reached)" : "")
            + "; each class asked in \(sideBySideBlocks) blocks per engine, alternating, so that both see the machine at the same moments"
    }

    func goals(ts: EngineResults, raw: EngineResults, sql: EngineResults?, paired: SideBySideResults?,
               classes: [QueryClass], nightly: NightlyCompaction) -> [GoalCheck] {
        let scale = spec.devices == 1_000_000 ? "" : " (goal set for 1M devices; this run has \(spec.devices))"
        var goals: [GoalCheck] = []
        let ingest = ts.installRate / raw.installRate
        goals.append(GoalCheck(name: "durable ingest vs raw LMDB append" + scale, target: "≥ 25%",
                               measured: BenchmarkReport.percent(ingest), met: ingest >= 0.25))
        let stream = ts.streamRate / ts.walkRate
        goals.append(GoalCheck(name: "token streaming vs raw cursor walk" + scale, target: "≥ 50%",
                               measured: BenchmarkReport.percent(stream), met: stream >= 0.5))
        for (label, set) in [("every audience count, p99", ts.quiet), ("every audience count under writes, p99", ts.loaded)] {
            let worst = classes.compactMap { c in set[c.name].map { (c.name, $0.p99) } }.max { $0.1 < $1.1 }
            goals.append(GoalCheck(name: label + scale, target: "< 1 ms",
                                   measured: worst.map { "worst \(BenchmarkReport.duration($0.1)) (\($0.0))" } ?? "—",
                                   met: (worst?.1 ?? .infinity) < 1e6))
        }
        if let sql {
            var worst: (String, Double)?
            for c in classes {
                for (ts, s, tag) in [(ts.quiet[c.name], sql.quiet[c.name], ""), (ts.loaded[c.name], sql.loaded[c.name], " under writes")] {
                    guard let t = ts, let s else { continue }
                    let r = s.p50 / Swift.max(t.p50, 1)
                    if worst == nil || r < worst!.1 { worst = (c.name + tag, r) }
                }
            }
            goals.append(GoalCheck(name: "audience counts vs SQLite (p50)" + scale, target: "≥ 100×",
                                   measured: worst.map { "worst \(BenchmarkReport.ratio($0.1)) (\($0.0))" } ?? "—",
                                   met: (worst?.1 ?? 0) >= 100))
            if let paired {
                let side = classes.compactMap { c -> (String, Double)? in
                    guard let t = paired.topicstore[c.name], let s = paired.sqlite[c.name] else { return nil }
                    return (c.name, s.p50 / Swift.max(t.p50, 1))
                }.min { $0.1 < $1.1 }
                goals.append(GoalCheck(name: "audience counts vs SQLite side by side (p50)" + scale, target: "≥ 100×",
                                       measured: side.map { "worst \(BenchmarkReport.ratio($0.1)) (\($0.0))" } ?? "—",
                                       met: (side?.1 ?? 0) >= 100))
            }
            let s = ts.streamRate / sql.streamRate
            goals.append(GoalCheck(name: "token streaming vs SQLite" + scale, target: "≥ 4×", measured: BenchmarkReport.ratio(s), met: s >= 4))
            let i = ts.installRate / sql.installRate
            goals.append(GoalCheck(name: "durable ingest vs SQLite" + scale, target: "≥ 5×", measured: BenchmarkReport.ratio(i), met: i >= 5))
        }
        if let replay = ts.replay {
            goals.append(GoalCheck(name: "replay rebuild rate" + scale, target: "≥ 1,000,000 events/s",
                                   measured: "\(BenchmarkReport.number(replay.eventsPerSecond)) events/s",
                                   met: replay.eventsPerSecond >= 1_000_000))
        }
        if let store = GoalCheck.storeAtTenMillion(devices: spec.devices, diskBytes: ts.diskBytes,
                                                   afterCompaction: nightly.diskBytes) { goals.append(store) }
        return goals
    }

    // MARK: Phases shared by the engines

    /// Feeds the install stream in batches to `apply`, timing only `apply`.
    func ingestInstall(_ apply: ([Event]) throws -> Void) throws -> (rate: Double, subscriptionRate: Double, writtenPerCommand: Double) {
        try ingestInstall(prepare: { $0 }, apply)
    }

    /// Feeds the install stream in batches through `prepare` (not timed) to `apply` (timed).
    func ingestInstall<Prepared>(prepare: ([Event]) throws -> Prepared, _ apply: (Prepared) throws -> Void) throws
        -> (rate: Double, subscriptionRate: Double, writtenPerCommand: Double) {
        var stream = InstallStream(spec: spec)
        var events: [Event] = []
        events.reserveCapacity(config.batchSize)
        var nanos: UInt64 = 0
        var commands = 0, changes = 0
        var nextReport = spec.devices / 10
        let written = ProcessMemory.deviceWriteBytes(holding: config.directory)
        while !stream.isFinished {
            events.removeAll(keepingCapacity: true)
            let tally = stream.next(commands: config.batchSize, into: &events)
            let prepared = try prepare(events)
            let t0 = monotonicNanos()
            try apply(prepared)
            nanos += monotonicNanos() - t0
            commands += tally.commands
            changes += tally.subscriptionChanges
            if stream.nextDevice >= nextReport {
                progress("  \(stream.nextDevice) devices, \(BenchmarkReport.number(Double(commands) / (Double(nanos) / 1e9)))/s")
                nextReport += spec.devices / 10
            }
        }
        let seconds = Double(nanos) / 1e9
        return (Double(commands) / seconds, Double(changes) / seconds, writtenPerCommand(since: written, commands: commands))
    }

    /// Feeds `spec.churnCommands` churn commands in batches; returns commands/s, bytes written
    /// to the device per command, and the stream to continue.
    func ingestChurn(_ apply: ([Event]) throws -> Void) throws -> (rate: Double, writtenPerCommand: Double, stream: ChurnStream) {
        try ingestChurn(prepare: { $0 }, apply)
    }

    /// `ingestChurn` with each batch passed through `prepare` (not timed) first.
    func ingestChurn<Prepared>(prepare: ([Event]) throws -> Prepared, _ apply: (Prepared) throws -> Void) throws
        -> (rate: Double, writtenPerCommand: Double, stream: ChurnStream) {
        var churn = ChurnStream(spec: spec)
        var events: [Event] = []
        var nanos: UInt64 = 0
        var done = 0
        let written = ProcessMemory.deviceWriteBytes(holding: config.directory)
        while done < spec.churnCommands {
            events.removeAll(keepingCapacity: true)
            let n = Swift.min(config.batchSize, spec.churnCommands - done)
            _ = churn.next(commands: n, into: &events)
            let prepared = try prepare(events)
            let t0 = monotonicNanos()
            try apply(prepared)
            nanos += monotonicNanos() - t0
            done += n
        }
        return (Double(done) / (Double(nanos) / 1e9), writtenPerCommand(since: written, commands: done), churn)
    }

    /// Bytes written to the device holding the databases since `before` (a
    /// `ProcessMemory.deviceWriteBytes` reading), per command; 0 where unknown.
    private func writtenPerCommand(since before: Int?, commands: Int) -> Double {
        guard let before, let after = ProcessMemory.deviceWriteBytes(holding: config.directory), commands > 0 else { return 0 }
        return Double(after - before) / Double(commands)
    }

    func sample(_ classes: [QueryClass], _ ask: (PreparedQuery) throws -> AudienceTally) throws -> [String: LatencySamples] {
        var result: [String: LatencySamples] = [:]
        for c in classes {
            let prepared = try c.queries.map(PreparedQuery.init)  // parsed before the clock runs
            result[c.name] = try sampleLatencies(prepared, repetitions: c.repetitions, budgetSeconds: budget) { q in
                _ = try ask(q)
            }
        }
        return result
    }

    /// `sample` repeated until at least `seconds` have passed, so a concurrent writer commits many batches meanwhile.
    func sample(forAtLeast seconds: Double, _ classes: [QueryClass], _ ask: (PreparedQuery) throws -> AudienceTally) throws -> [String: LatencySamples] {
        let deadline = monotonicNanos() + UInt64(seconds * 1e9)
        var result = try sample(classes, ask)
        while monotonicNanos() < deadline {
            for (name, more) in try sample(classes, ask) { result[name, default: LatencySamples()].add(contentsOf: more) }
        }
        return result
    }

    func answers(_ classes: [QueryClass], _ ask: (PreparedQuery) throws -> AudienceTally) throws -> [AudienceQuery: AudienceTally] {
        var result: [AudienceQuery: AudienceTally] = [:]
        for c in classes { for q in c.queries { result[q] = try ask(try PreparedQuery(q)) } }
        return result
    }

    /// Runs `body` three times and returns the median rate of items per second.
    func medianRate(_ body: (inout RecipientSink) throws -> Void) throws -> (rate: Double, bytesRate: Double, items: Int) {
        var runs: [(Double, Double, Int)] = []
        for _ in 0..<3 {
            var sink = RecipientSink()
            defer { sink.deallocate() }
            let t0 = monotonicNanos()
            try body(&sink)
            let s = Double(monotonicNanos() - t0) / 1e9
            runs.append((Double(sink.recipients) / s, Double(sink.bytes) / s, sink.recipients))
        }
        return runs.sorted { $0.0 < $1.0 }[1]
    }

    // MARK: Engines

    func runTopicStore(_ classes: [QueryClass]) throws -> EngineResults {
        ProcessMemory.resetPeak()
        let dir = config.directory + "/topicstore"
        var r = EngineResults()
        let engine = try TopicStoreEngine(directory: dir, project: spec.project, mapSize: mapSize,
                                          maxBatch: Swift.max(4096, config.batchSize))
        defer { engine.close() }
        progress("topicstore: install phase (\(spec.devices) devices)")
        let t0 = engine.transactionID
        (r.installRate, r.installSubscriptionRate, r.installWrittenPerCommand) = try ingestInstall { try engine.submit($0) }
        r.commits = engine.transactionID - t0
        progress("topicstore: churn phase (\(spec.churnCommands) commands)")
        let churn: ChurnStream
        (r.churnRate, r.churnWrittenPerCommand, churn) = try ingestChurn { try engine.submit($0) }
        progress("topicstore: audience counts")
        r.answers = try answers(classes, engine.counts)
        r.quiet = try sample(classes, engine.counts)
        progress("topicstore: token streaming")
        (r.streamRate, r.streamBytesRate, r.streamRecipients) = try medianRate { try engine.stream(topic: WorkloadSpec.allTopic, into: &$0) }
        (r.mapStreamRate, _, _) = try medianRate { try engine.stream(topic: WorkloadSpec.allTopic, fromMap: true, into: &$0) }
        (r.walkRate, _, r.walkRecipients) = try medianRate { try engine.rawDeviceWalk(into: &$0) }
        (r.loaded, r.loadedWriterRate, r.churnAfter) = try countsUnderWrites(classes, engine, churn)
        r.peakRSS = ProcessMemory.peakResidentBytes()
        progress("topicstore: replay (rebuild every projection from the log) and audit")
        // The median of three rebuilds: the first pays for memory the machine had not touched
        // yet (`ReplayBenchmark.run`; at 10M, 53.4 s for the first against 33.6-37.5 s after).
        r.replay = try ReplayBenchmark.run(store: engine.store, scratchDirectory: config.directory, rebuilds: 3)
        engine.close()
        r.diskBytes = diskUsage(ofDirectory: dir).allocated
        return r
    }

    /// The counts of `classes` while a writer thread commits the churn `stream`
    /// continues with, in batches of `churnBatchSize`; with the writer's rate and
    /// where it left the stream.
    func countsUnderWrites(_ classes: [QueryClass], _ engine: TopicStoreEngine, _ stream: ChurnStream) throws
        -> (samples: [String: LatencySamples], writerRate: Double, stream: ChurnStream) {
        progress("topicstore: audience counts under concurrent churn writes")
        let handoff = Handoff(stream)
        let batch = config.churnBatchSize
        let writer = BackgroundWriter {
            var events: [Event] = []
            _ = handoff.value.next(commands: batch, into: &events)
            try engine.submit(events)
            return events.count
        }
        let samples = Result { try sample(forAtLeast: underWritesSeconds, classes, engine.counts) }
        let rate = try writer.stop().perSecond
        return (try samples.get(), rate, handoff.value)
    }

    /// The quiet audience counts alone, measured again on the topicstore store
    /// a kept run left in `config.directory` (run with the same devices and
    /// seed): opened as `topicstore serve` opens it, its caches filled by the
    /// counts, as in a whole run. Seconds instead of minutes, for work on the
    /// count path, and a way to see how this machine counts against the run's
    /// figures (the VM's host moves them by about half from one minute to the next).
    /// With `underWrites`, the counts are then measured again while a writer
    /// commits the churn that follows what the store holds, in the whole run's
    /// batches: the store keeps those commands.
    public func runCountsOnly(underWrites: Bool = false) throws -> BenchmarkReport {
        let started = monotonicNanos()
        let dir = config.directory + "/topicstore"
        guard FileManager.default.fileExists(atPath: dir + "/CURRENT") else {
            throw BenchmarkError("\(dir) holds no topicstore store: counts only measure the store a kept run left in its --dir")
        }
        let classes = QueryClass.standard(for: spec, quick: config.quick)
        let engine = try TopicStoreEngine(directory: dir, project: spec.project, mapSize: mapSize, maxBatch: 4096)
        defer { engine.close() }
        let store = engine.store, project = spec.project
        guard try store.read({ txn in try store.reader.project(named: project, txn) }) != nil else {
            throw BenchmarkError("\(dir) holds no project '\(project)': not a store a bench run wrote")
        }
        progress("topicstore: audience counts of the store in \(dir)")
        let answers = try answers(classes, engine.counts)
        // `all` holds every device of the workload but those churn dropped with all their topics.
        guard let all = answers[.anyOf([WorkloadSpec.allTopic])], all.total > spec.devices / 2, all.total <= spec.devices else {
            throw BenchmarkError("\(dir) does not hold this workload's devices: give the --devices and --seed of its run")
        }
        let quiet = try sample(classes, engine.counts)
        var loaded: [String: LatencySamples] = [:]
        var writerRate = 0.0
        if underWrites {
            // The churn after the commands the store holds: the install's two per device, then churn.
            let held = try store.read { txn in try store.log.bounds(txn)?.last } ?? 0
            var stream = ChurnStream(spec: spec)
            stream.skip(commands: Swift.max(0, Int(held) - 2 * spec.devices))
            (loaded, writerRate, _) = try countsUnderWrites(classes, engine, stream)
        }
        var report = BenchmarkReport(spec: spec, batchSize: config.batchSize)
        report.skippedSQLite = true
        report.rows = classes.map { c in
            ReportRow(name: "audience count: \(c.name)", unit: "", kind: .latency,
                      topicstore: quiet[c.name].map(Figure.latency), sqlite: nil)
        }
        if underWrites {
            report.rows += classes.map { c in
                ReportRow(name: "audience count under writes: \(c.name)", unit: "", kind: .latency,
                          topicstore: loaded[c.name].map(Figure.latency), sqlite: nil)
            }
            report.rows.append(ReportRow(name: "churn committed while counting", unit: "commands", kind: .rate,
                                         topicstore: Figure(writerRate), sqlite: nil))
        }
        report.notes.append("Counts only (--counts-only): the quiet counts of the store a kept run left in \(config.directory), "
                            + "opened again as `topicstore serve` opens it; no ingest, no SQLite, no goals."
                            + (underWrites ? " Under writes: while a writer commits the churn after what the store held, "
                               + "\(config.churnBatchSize) commands a commit (the store keeps them)." : ""))
        if let note = Self.clockNote(Array(quiet.values) + Array(loaded.values), sideBySide: false) { report.notes.append(note) }
        report.seconds = Double(monotonicNanos() - started) / 1e9
        return report
    }

    /// The store after the compaction an operator runs each night.
    struct NightlyCompaction {
        var diskBytes = 0
        var seconds = 0.0
        var records: UInt64 = 0
        var garbage = 0
    }

    /// `topicstore compact --retain 30d` on the store the phases above left: the run's
    /// events are all younger than the window, so the whole log is kept (in blocks).
    func runNightlyCompaction() throws -> NightlyCompaction {
        progress("topicstore: nightly compaction (compact --retain 30d)")
        let dir = config.directory + "/topicstore"
        let started = monotonicNanos()
        let report = try Compactor.run(directory: dir, options: Compactor.Options(retain: RetentionDuration(milliseconds: 30 * 86_400_000)))
        var n = NightlyCompaction()
        n.seconds = Double(monotonicNanos() - started) / 1e9
        n.diskBytes = diskUsage(ofDirectory: dir).allocated
        n.records = report.lastBefore.map { $0 - report.horizon } ?? 0
        n.garbage = report.garbageCommitted
        return n
    }

    func runRawLMDB() throws -> EngineResults {
        ProcessMemory.resetPeak()
        let dir = config.directory + "/raw-lmdb"
        var r = EngineResults()
        let raw = try RawLMDBLog(directory: dir, mapSize: mapSize)
        progress("raw LMDB log: install phase")
        let t0 = raw.environment.info().lastTransactionID
        // Encoding happens outside the timed part: the limit is LMDB's own append rate
        // (until 2026-12-02 the encoding was timed too, against this comment: the limit
        // then moved with the record encoder's speed).
        (r.installRate, r.installSubscriptionRate, r.installWrittenPerCommand) =
            try ingestInstall(prepare: { try raw.encode($0) }) { try raw.append($0) }
        r.commits = raw.environment.info().lastTransactionID - t0
        progress("raw LMDB log: churn phase")
        (r.churnRate, r.churnWrittenPerCommand, _) = try ingestChurn(prepare: { try raw.encode($0) }) { try raw.append($0) }
        r.peakRSS = ProcessMemory.peakResidentBytes()
        r.diskBytes = diskUsage(ofDirectory: dir).allocated
        return r
    }

    func runSQLite(_ classes: [QueryClass]) throws -> EngineResults {
        ProcessMemory.resetPeak()
        let dir = config.directory + "/sqlite"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var r = EngineResults()
        let sql = try SQLiteCompetitor(directory: dir)
        progress("SQLite: install phase")
        (r.installRate, r.installSubscriptionRate, r.installWrittenPerCommand) = try ingestInstall { try sql.apply($0) }
        progress("SQLite: churn phase")
        let churn: ChurnStream
        (r.churnRate, r.churnWrittenPerCommand, churn) = try ingestChurn { try sql.apply($0) }
        let reader = try sql.openReader()
        let ask = reader.counts as (PreparedQuery) throws -> AudienceTally
        progress("SQLite: audience counts")
        r.answers = try answers(classes, ask)
        r.quiet = try sample(classes, ask)
        progress("SQLite: token streaming")
        (r.streamRate, r.streamBytesRate, r.streamRecipients) = try medianRate { try reader.stream(topic: WorkloadSpec.allTopic, into: &$0) }
        progress("SQLite: audience counts under concurrent churn writes")
        let state = Handoff((sql, churn))
        let batch = config.churnBatchSize
        let writer = BackgroundWriter {
            var events: [Event] = []
            _ = state.value.1.next(commands: batch, into: &events)
            try state.value.0.apply(events)
            return events.count
        }
        let loaded = Result { try sample(forAtLeast: underWritesSeconds, classes, ask) }
        let w = try writer.stop()
        r.loaded = try loaded.get()
        r.loadedWriterRate = w.perSecond
        r.churnAfter = state.value.1
        r.peakRSS = ProcessMemory.peakResidentBytes()
        try sql.checkpoint()
        r.diskBytes = diskUsage(ofDirectory: dir).allocated
        return r
    }
}
