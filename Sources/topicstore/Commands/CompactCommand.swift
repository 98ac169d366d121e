import Compaction
import Foundation
import Replay
import TopicStore

/// `topicstore compact`: bound the log (snapshot at the horizon, optional archive),
/// collect garbage, and write the store into a fresh, compact file generation.
enum CompactCommand: Command {
    static let spec = CommandSpec(
        name: "compact",
        summary: "keep only the retention window in the log (snapshot + archive), collect garbage, shrink the file",
        usage: "compact [--data DIR] --retain DURATION [--archive DIR] [--dry-run] [--json] [garbage options]",
        options: [
            .init(name: "retain", value: "DURATION", help: "keep the events of the last DURATION (30d, 12h, 90m, 2100s, 1d12h; see below)"),
            .init(name: "archive", value: "DIR", help: "first write the removed events to DIR/log-FROM-TO.jsonl.zst (verified)"),
            .init(name: "dry-run", value: nil, help: "report what would happen; change nothing"),
            .init(name: "gc-devices", value: nil, help: "forget devices with neither a token nor a topic (default)"),
            .init(name: "no-gc-devices", value: nil, help: "keep them"),
            .init(name: "gc-topics", value: nil, help: "drop topics with no subscriber and no event in the window (default)"),
            .init(name: "no-gc-topics", value: nil, help: "keep them"),
            .init(name: "topic-idle", value: "DURATION", help: "how long a topic must have had no event (default: --retain)"),
            .init(name: "gc-tokens", value: nil, help: "clear tokens rejected more than --rejected-grace ago (default)"),
            .init(name: "no-gc-tokens", value: nil, help: "keep them"),
            .init(name: "rejected-grace", value: "DURATION", help: "grace period of a rejected token (default 30d)"),
            .init(name: "no-file", value: nil, help: "collect garbage only: no new file generation, so no event leaves the log (no snapshot; not with --archive)"),
            .init(name: "archive-level", value: "N", help: "zstd level of the archive (1-19, default 3)"),
            .init(name: "no-log-blocks", value: nil, help: "keep each log record of the new file an entry of its own (default: compressed blocks of records)"),
            .init(name: "benchmark", value: nil, help: "generate a churned workload into --data (new) and compact it; report"),
            .init(name: "devices", value: "N", help: "with --benchmark: devices (default 1000000)"),
        ],
        details: """
        The horizon is the last event at or before now minus --retain. The projections at the
        horizon and the hash-chain head there become a snapshot (DIR/snapshots/HORIZON/); the log
        keeps only the events after it, with their sequence numbers. Replay and audit start from
        the snapshot; asking replay for an earlier point is an error naming the horizon.
        Garbage is removed by appending forget-device, drop-topic and expire-token events, so a
        replay equals the live state (256 per write transaction, so a running server's writer
        gets its turn between them). The store is then copied into a new file generation
        (DIR/gNNNNNN), caught up with what a running server wrote meanwhile, and switched to
        while writers wait (3 ms at 1M devices, measured; tens of ms with a busy server); the
        server keeps its in-memory indexes across the switch. Killed at any moment, the store
        stays in its before or its after state; the next run removes what the killed one left.
        Safe to run from cron beside `topicstore serve`.
        Before writing anything it estimates the free space the run needs at its peak (about
        twice the file plus the snapshot; --dry-run prints it) and refuses, exit 1, when the
        filesystem does not have it. A phase that fails anyway (a full disk, an I/O error)
        removes what the run wrote and says which phase failed and what the store holds.
        Without --archive the removed events are kept nowhere (the text report says so).
        DURATION (--retain, --topic-idle, --rejected-grace) is one or more NUMBER+UNIT parts with
        nothing between them, UNIT w (weeks), d (days), h (hours), m (minutes), s (seconds) or
        ms (milliseconds), in either case: 30d, 12h, 90m, 2100s, 1d12h; a bare 0 is zero.
        """)

    static func duration(_ arguments: Arguments, _ name: String) throws -> RetentionDuration? {
        guard let text = arguments.value(name) else { return nil }
        guard let d = RetentionDuration(parsing: text) else {
            throw UsageError(description: "--\(name) must be a duration like 30d, 12h, 90m, 45s or 1d12h (units w, d, h, m, s, ms), not '\(text)'")
        }
        return d
    }

    static func flag(_ arguments: Arguments, _ name: String) throws -> Bool {
        switch (arguments.has("gc-\(name)"), arguments.has("no-gc-\(name)")) {
        case (true, true): throw UsageError(description: "--gc-\(name) and --no-gc-\(name) contradict each other")
        case (_, true): return false
        default: return true
        }
    }

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard arguments.positionals.isEmpty else { throw UsageError(description: "compact takes no positional arguments") }
        let bar = ProgressBar(arguments: arguments)
        if arguments.has("benchmark") {
            let devices = try arguments.integer("devices") ?? 1_000_000
            guard devices > 0 else { throw UsageError(description: "--devices must be positive") }
            let result = try CompactionBenchmark.run(directory: arguments.dataDirectory, devices: devices,
                                                     archive: arguments.value("archive"), progress: bar.update)
            bar.finish()
            if arguments.json { Console.printJSON(result.json) } else { print(result.summary) }
            return .success
        }
        guard let retain = try duration(arguments, "retain") else {
            throw UsageError(description: "--retain DURATION is required (for example --retain 30d)")
        }
        var options = Compactor.Options(retain: retain)
        options.archiveDirectory = arguments.value("archive")
        options.dryRun = arguments.has("dry-run")
        options.compactFile = !arguments.has("no-file")
        options.logBlocks = !arguments.has("no-log-blocks")
        if !options.compactFile, options.archiveDirectory != nil {
            throw UsageError(description: "--no-file removes no event from the log, so --archive has nothing to archive: give one or the other")
        }
        options.garbage.devices = try flag(arguments, "devices")
        options.garbage.topics = try flag(arguments, "topics")
        options.garbage.tokens = try flag(arguments, "tokens")
        options.garbage.topicIdle = try duration(arguments, "topic-idle")
        if let grace = try duration(arguments, "rejected-grace") { options.garbage.rejectedGrace = grace }
        if let level = try arguments.integer("archive-level") {
            guard (1...19).contains(level) else { throw UsageError(description: "--archive-level must be 1…19") }
            options.archiveLevel = Int32(level)
        }
        let report: Compactor.Report
        do {
            report = try Compactor.run(directory: arguments.dataDirectory, options: options, progress: bar.update)
        } catch CompactionError.busy(let directory) {
            // Its own code, so a cron wrapper tells "another run has it" from a failure.
            bar.finish()
            Console.printError(CompactionError.busy(directory).description + ": nothing was done")
            return .busy
        } catch {
            bar.finish()
            throw error
        }
        bar.finish()
        if arguments.json {
            Console.printJSON(CompactionReportFormat.json(report))
        } else {
            print(CompactionReportFormat.text(report))
        }
        return .success
    }
}
