import Benchmarks
import Foundation

/// `topicstore bench`: topicstore against SQLite and the raw LMDB limit, on one generated workload.
enum BenchCommand: Command {
    static let spec = CommandSpec(
        name: "bench",
        summary: "benchmark ingest, audience counts and token streaming against SQLite and raw LMDB",
        usage: "bench [--devices N] [--seed S] [--dir DIR] [--keep] [--skip-sqlite] [--quick] [--json] | bench --counts-only --dir DIR [--devices N] [--seed S] [--under-writes] [--json]",
        options: [
            .init(name: "devices", value: "N", help: "devices in the generated workload (default 1000000; 10000…10000000)"),
            .init(name: "seed", value: "S", help: "workload seed (default 42): the same seed gives the same events"),
            .init(name: "dir", value: "DIR", help: "where the databases go (default a new temporary directory)"),
            .init(name: "keep", value: nil, help: "keep the databases afterwards (a given --dir is always kept)"),
            .init(name: "skip-sqlite", value: nil, help: "measure topicstore and the LMDB limit only"),
            .init(name: "quick", value: nil, help: "a 20,000-device smoke run with short query budgets (CI)"),
            .init(name: "batch", value: "N", help: "commands per durable batch for every engine (default 1000)"),
            .init(name: "counts-only", value: nil, help: "measure the quiet audience counts again on the store a kept run left in --dir"),
            .init(name: "under-writes", value: nil, help: "with --counts-only: then the counts while a writer commits the workload's churn"),
        ],
        details: """
        One run measures, on the same data: durable ingest (TopicStore.submitAndWait, group commit)
        next to the same encoded records appended with MDB_APPEND to a bare LMDB log and next to
        SQLite (WAL, synchronous=FULL); audience count latency p50/p99 for `all`, 3 mid topics,
        100 single topics and an expression, quiet and while a writer commits churn; token
        streaming for `all` next to a bare cursor walk; bytes on disk; peak RSS. It ends with
        the goals of issues 2 and 6 marked met or missed. Run a release build:
          swift build -c release && .build/release/topicstore bench
        Progress goes to standard error. --data is ignored (bench uses its own directories).

        --counts-only opens DIR/topicstore of an earlier run (give its --devices and --seed)
        as `topicstore serve` opens it and measures the quiet audience counts alone, in
        seconds: for work on the count path, or to see how this machine counts today.
        With --under-writes it then measures them while a writer commits the churn that
        follows what the store holds, as a whole run does (those commands stay in the store).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        let quick = arguments.has("quick")
        let devices = try arguments.integer("devices") ?? (quick ? 20_000 : 1_000_000)
        guard (1_000...100_000_000).contains(devices) else {
            throw UsageError(description: "--devices must be between 1000 and 100000000")
        }
        var seed: UInt64 = 42
        if let text = arguments.value("seed") {
            guard let s = UInt64(text) else { throw UsageError(description: "--seed must be a non-negative integer, not '\(text)'") }
            seed = s
        }
        let batch = try arguments.integer("batch") ?? 1000
        guard (1...100_000).contains(batch) else { throw UsageError(description: "--batch must be between 1 and 100000") }

        let given = arguments.value("dir")
        let countsOnly = arguments.has("counts-only")
        let underWrites = arguments.has("under-writes")
        if underWrites && !countsOnly { throw UsageError(description: "--under-writes goes with --counts-only") }
        let directory: String
        if countsOnly {
            guard let given else { throw UsageError(description: "--counts-only needs --dir: the directory of a kept run") }
            directory = given
        } else if let given {
            directory = given
            if FileManager.default.fileExists(atPath: given),
               !((try? FileManager.default.contentsOfDirectory(atPath: given)) ?? []).isEmpty {
                throw UsageError(description: "--dir \(given) is not empty; bench needs a fresh directory")
            }
        } else {
            directory = NSTemporaryDirectory() + "topicstore-bench-\(getpid())-\(UInt64(Date().timeIntervalSince1970))"
        }
        let remove = given == nil && !arguments.has("keep")
        defer { if remove { try? FileManager.default.removeItem(atPath: directory) } }

        var config = BenchmarkConfig(spec: WorkloadSpec(devices: devices, seed: seed), directory: directory)
        config.skipSQLite = arguments.has("skip-sqlite")
        config.quick = quick
        config.batchSize = batch
        let started = Date()
        let runner = BenchmarkRunner(config: config) { message in
            let t = String(format: "%7.1fs ", Date().timeIntervalSince(started))
            FileHandle.standardError.write(Data((t + message + "\n").utf8))
        }
        let report = try countsOnly ? runner.runCountsOnly(underWrites: underWrites) : runner.run()
        if arguments.json {
            print(report.json)
        } else {
            print(report.text)
            if !remove && !countsOnly { print("Databases kept in \(directory)") }
        }
        return report.disagreements.isEmpty ? .success : .verificationFailed
    }
}
