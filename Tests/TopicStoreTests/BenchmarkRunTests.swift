import Benchmarks
import Foundation
import Testing
import TopicStore

/// The benchmark runs end to end: through the library, and as `topicstore bench --quick`.
@Suite(.serialized) struct BenchmarkRunTests {
    @Test func runnerMeasuresEveryFigureAndChecksEveryGoal() throws {
        let dir = TemporaryDirectory("bench-run")
        var config = BenchmarkConfig(spec: WorkloadSpec(devices: 3_000, seed: 9), directory: dir.sub("run"))
        config.quick = true
        config.batchSize = 250
        let report = try BenchmarkRunner(config: config).run()

        #expect(report.disagreements.isEmpty, "\(report.disagreements)")
        // Every query asked of both engines after their phases, then again side by side.
        #expect(report.comparedQueries == 2 * (1 + 3 + 1 + 20 + 100 + 1 + 100 + 1))
        #expect(report.rows.count == 36)
        for row in report.rows {
            #expect((row.topicstore?.value ?? 0) > 0, "\(row.name): topicstore figure")
            if !row.name.hasPrefix("replay") && !row.name.hasSuffix("nightly compaction") {
                #expect((row.sqlite?.value ?? 0) > 0, "\(row.name): SQLite figure")
            }
            if row.kind == .latency {
                #expect((row.topicstore?.p99 ?? 0) >= row.topicstore!.value, "\(row.name): p99 ≥ p50")
                #expect((row.topicstore?.samples ?? 0) >= 3)
            }
        }
        // The store as the nightly compaction leaves it: every event kept, in blocks.
        let nightly = try #require(report.row("bytes on disk after the nightly compaction"))
        #expect(nightly.note.contains("compressed blocks") && nightly.note.contains("every event kept"))
        // The whole store, in its generation's directory: not a few KiB of CURRENT (a first run said 4.0 KiB).
        let ingested = try #require(report.row("bytes on disk")?.topicstore?.value)
        #expect((nightly.topicstore?.value ?? 0) > ingested / 5, "\(nightly.topicstore?.value ?? 0) against \(ingested)")
        for name in ["durable ingest, install phase", "token streaming, all", "bytes on disk", "peak RSS"] {
            #expect((report.row(name)?.limit?.value ?? 0) > 0, "\(name): LMDB limit figure")
        }
        #expect(report.goals.count == 9)
        // The goals follow from the figures.
        let ingest = report.row("durable ingest, install phase")!
        #expect(report.goals[0].met == (ingest.ofLimit! >= 0.25))
        let stream = report.row("token streaming, all")!
        #expect(report.goals[1].met == (stream.ofLimit! >= 0.5))
        #expect(report.goals[7].met == (ingest.timesSQLite! >= 5))
        // Side by side: every class asked of both engines, its goal the worst of those ratios.
        let paired = report.rows.filter { $0.name.hasPrefix("audience count side by side: ") }
        #expect(paired.count == 8)
        #expect(paired.first?.note.contains("alternating") == true)
        let worstPaired = paired.compactMap(\.timesSQLite).min()!
        #expect(report.goals[5].name.hasPrefix("audience counts vs SQLite side by side"))
        #expect(report.goals[5].met == (worstPaired >= 100))
        // The replay of the benchmark store, audited clean.
        let replay = try #require(report.row("replay: rebuild from the log"))
        #expect(replay.note.contains("was clean"))
        // Three rebuilds at this size, and the figure the median one's: "(12k, 15k, 14k events/s, …".
        let listed = try #require(replay.note.firstRange(of: "the median of 3 rebuilds (").map { range in
            replay.note[range.upperBound...].prefix { $0 != "e" }
        })
        let rates = listed.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces).dropLast()) }
        #expect(rates.count == 3, "\(replay.note)")
        #expect(rates.sorted()[1] == ((replay.topicstore?.value ?? 0) / 1000).rounded(), "\(replay.note)")
        #expect(report.goals[8].met == ((replay.topicstore?.value ?? 0) >= 1_000_000))

        let json = try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any]
        #expect((json?["rows"] as? [Any])?.count == 36)
        #expect(((json?["workload"] as? [String: Any])?["devices"] as? Int) == 3_000)
        #expect(report.text.contains("| audience count: all |"))
        // Every latency leaves out the clock's own read, calibrated in this run, and says so.
        #expect(report.notes.contains { $0.hasPrefix("Latencies leave out the clock's own read") && $0.contains("side-by-side block") })
        // The directories it measured exist with data in them.
        #expect(diskUsage(ofDirectory: dir.sub("run/topicstore")).allocated > 0)
        #expect(diskUsage(ofDirectory: dir.sub("run/raw-lmdb")).allocated > 0)
        #expect(diskUsage(ofDirectory: dir.sub("run/sqlite")).allocated > 0)
    }

    /// A sample is the call's time less one read of the clock: timing nothing gives
    /// about nothing, where the bare interval between two reads is the clock's cost.
    @Test func aTimedCallLeavesOutTheClocksOwnRead() {
        let timer = CallTimer()
        #expect(timer.clockNanos > 0)
        var empty = (0..<20_000).map { _ in timer.time {} }
        empty.sort()
        #expect(empty[empty.count / 2] <= timer.clockNanos / 2, "median \(empty[empty.count / 2]) ns, clock \(timer.clockNanos) ns")
        // A call that takes a known time is timed as that, not that and the clock.
        var slept = (0..<20).map { _ in timer.time { usleep(2_000) } }
        slept.sort()
        #expect(slept[10] >= 2_000_000 && slept[10] < 2_000_000 + 10_000_000)
        var samples = LatencySamples()
        samples.note(timer)
        #expect(samples.clockNanos == timer.clockNanos...timer.clockNanos)
    }

    /// Issue 6's goal for 10M devices, the store at most 4 GiB on disk, is checked in a
    /// run of that size and not in one of another size (whose store says nothing of it).
    @Test func theStoreGoalIsCheckedAtTenMillionDevicesFromTheBytesOnDisk() {
        let gib = 1 << 30
        #expect(GoalCheck.storeAtTenMillion(devices: 1_000_000, diskBytes: gib, afterCompaction: gib) == nil)
        #expect(GoalCheck.storeAtTenMillion(devices: 9_999_999, diskBytes: gib, afterCompaction: gib) == nil)
        #expect(GoalCheck.storeAtTenMillion(devices: 20_000_000, diskBytes: gib, afterCompaction: gib) == nil)
        let measured = GoalCheck.storeAtTenMillion(devices: 10_000_000, diskBytes: 7_806_000_000, afterCompaction: 5_000_000_000)
        #expect(measured?.met == false)
        #expect(measured?.measured == "4.66 GiB (7.27 GiB right after the ingest)")
        #expect(measured?.target == "≤ 4 GiB")
        #expect(measured?.name.hasPrefix("bytes on disk at 10M devices after the nightly compaction") == true)
        // Checked on the compacted store, as an operator keeps it.
        #expect(GoalCheck.storeAtTenMillion(devices: 10_000_000, diskBytes: 6 * gib, afterCompaction: 4 * gib)?.met == true)
        #expect(GoalCheck.storeAtTenMillion(devices: 10_000_000, diskBytes: 4 * gib, afterCompaction: 4 * gib + 4096)?.met == false)
    }

    @Test func benchQuickRunsEndToEndFromTheCommandLine() throws {
        let binary = BuiltProducts.executable("topicstore")
        try #require(FileManager.default.isExecutableFile(atPath: binary), "topicstore is built beside the tests")
        let dir = TemporaryDirectory("bench-cli")
        let run = try runBench(binary, ["--quick", "--json", "--dir", dir.sub("b")])
        let progress = run.err
        #expect(run.status == 0, "stderr: \(progress)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any])
        #expect(((json["workload"] as? [String: Any])?["devices"] as? Int) == 20_000)
        let cross = json["crossCheck"] as? [String: Any]
        #expect((cross?["disagreements"] as? [Any])?.isEmpty == true)
        #expect((cross?["compared"] as? Int) == 2 * (1 + 3 + 1 + 20 + 100 + 1 + 100 + 1))
        #expect((json["goals"] as? [Any])?.count == 9)
        #expect(progress.contains("SQLite: token streaming"))

        // A non-empty --dir is refused with a usage error.
        #expect(try runBench(binary, ["--quick", "--dir", dir.sub("b")]).status == 2)

        // The quiet counts again, on the store the run kept: every class measured, nothing else.
        let counted = try runBench(binary, ["--quick", "--counts-only", "--json", "--dir", dir.sub("b")])
        #expect(counted.status == 0, "stderr: \(counted.err)")
        let countsJSON = try #require(try JSONSerialization.jsonObject(with: Data(counted.out.utf8)) as? [String: Any])
        let rows = try #require(countsJSON["rows"] as? [[String: Any]])
        #expect(rows.count == 8)
        for row in rows {
            #expect((row["name"] as? String)?.hasPrefix("audience count: ") == true)
            #expect((((row["topicstore"] as? [String: Any])?["p50Nanos"]) as? Double ?? 0) > 0, "\(row)")
        }
        #expect((countsJSON["goals"] as? [Any])?.isEmpty == true)
        // Then under writes: the churn after what the store holds is committed meanwhile, and kept.
        let logEnd = { () throws -> UInt64 in
            let store = try TopicStore(directory: dir.sub("b") + "/topicstore")
            defer { store.close() }
            return try store.read { txn in try store.log.bounds(txn)?.last ?? 0 }
        }
        let before = try logEnd()
        let loaded = try runBench(binary, ["--quick", "--counts-only", "--under-writes", "--json", "--dir", dir.sub("b")])
        #expect(loaded.status == 0, "stderr: \(loaded.err)")
        let loadedJSON = try #require(try JSONSerialization.jsonObject(with: Data(loaded.out.utf8)) as? [String: Any])
        let loadedRows = try #require(loadedJSON["rows"] as? [[String: Any]])
        let underWrites = loadedRows.filter { ($0["name"] as? String)?.hasPrefix("audience count under writes: ") == true }
        #expect(loadedRows.count == 17 && underWrites.count == 8)
        for row in underWrites {
            #expect((((row["topicstore"] as? [String: Any])?["p50Nanos"]) as? Double ?? 0) > 0, "\(row)")
        }
        let written = try logEnd() - before
        let rate = (loadedRows.last?["topicstore"] as? [String: Any])?["value"] as? Double ?? 0
        #expect(written > 0 && rate > 0, "the writer committed churn (\(written) commands, \(rate)/s)")
        #expect(try runBench(binary, ["--quick", "--under-writes", "--dir", dir.sub("c")]).status == 2, "only with --counts-only")
        // No kept store, or another workload's: refused, and nothing is created.
        let missing = try runBench(binary, ["--quick", "--counts-only", "--dir", dir.sub("none")])
        #expect(missing.status == 1)
        #expect(missing.err.contains("holds no topicstore store"), "\(missing.err)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("none")))
        let other = try runBench(binary, ["--quick", "--counts-only", "--devices", "50000", "--dir", dir.sub("b")])
        #expect(other.status == 1)
        #expect(other.err.contains("give the --devices and --seed of its run"), "\(other.err)")
        #expect(try runBench(binary, ["--counts-only"]).status == 2)
    }

    private func runBench(_ binary: String, _ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["bench"] + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self), message)
    }
}
