import Foundation
import Replay
import TopicStore

/// `topicstore replay`: the projections as of a past sequence or time, in a new store directory.
enum ReplayCommand: Command {
    static let spec = CommandSpec(
        name: "replay",
        summary: "rebuild the store as of a sequence or time into a new directory (the live one is only read)",
        usage: "replay [--data DIR] (--to-seq N | --at TIME) --out DIR [--projections-only] [--memory-budget MIB] [--json]",
        options: [
            .init(name: "to-seq", value: "N", help: "through log sequence N (0: before the first event)"),
            .init(name: "at", value: "TIME", help: "through the last event at or before TIME: 2026-03-01T12:00:00Z (seconds and a zone required; fraction optional), 2026-03-01 (midnight UTC), or ms since 1970"),
            .init(name: "out", value: "DIR", help: "the new store directory (must not exist or be empty)"),
            .init(name: "projections-only", value: nil, help: "write only the projections, not the log records"),
            .init(name: "commit-every", value: "N", help: "records folded per batch (default 200000)"),
            .init(name: "memory-budget", value: "MIB", help: "memory the build may hold before it is written in rounds (default a third of RAM, at most 8192; 0: write through every batch, the old way)"),
            .init(name: "benchmark", value: nil, help: "measure the rebuild rate and audit time of --data (no --out)"),
            .init(name: "generate", value: "DEVICES", help: "with --benchmark: first write a workload of DEVICES devices into --data (new)"),
            .init(name: "rebuilds", value: "N", help: "with --benchmark: rebuild N times and report the median (default 1)"),
        ],
        details: """
        The output is an ordinary store: audience, topics, device and stats answer questions
        about the past there, e.g. topicstore audience --data DIR news --project demo.
        Replay folds the log with the same function the live write path uses, reading it in
        bounded read transactions so a serving store is never held back. The projections are
        built in memory and each table is written once, in key order, at the end (or in rounds
        when the build outgrows --memory-budget); the output is fsynced once.
        With --benchmark, --memory-budget applies to the rebuild measured.
        --at is read strictly: a date (2026-03-01, midnight UTC), a date and time with seconds
        and a zone (2026-03-01T12:00:00Z, 2026-03-01T12:00:00.250+01:00), or a bare integer,
        which is milliseconds since 1970 (seconds since 1970 are refused with the milliseconds
        they stand for); every form must lie between 2000 and 2200. Anything else, trailing
        text included, is refused with exit 2.
        """)

    /// --memory-budget in bytes: the default without it, nil (write through) for 0.
    static func memoryBudget(_ arguments: Arguments) throws -> Int? {
        guard let mib = try arguments.integer("memory-budget") else { return Replay.Options.defaultMemoryBudget }
        guard mib >= 0 else { throw UsageError(description: "--memory-budget must not be negative") }
        return mib == 0 ? nil : mib << 20
    }

    static func run(_ arguments: Arguments) throws -> ExitCode {
        if arguments.has("benchmark") {
            if let n = try arguments.integer("generate") {
                guard n > 0 else { throw UsageError(description: "--generate must be positive") }
                let bar = ProgressBar(arguments: arguments)
                let started = Date()
                let events = try ReplayBenchmark.generateWorkload(into: arguments.dataDirectory, devices: n, progress: bar.update)
                bar.finish()
                if !arguments.json { print(String(format: "generated %llu events for %d devices in %.1f s", events, n, Date().timeIntervalSince(started))) }
            }
            let store = try TopicStore(directory: arguments.dataDirectory, options: .longRead)
            let rebuilds = try arguments.integer("rebuilds") ?? 1
            guard rebuilds > 0 else { throw UsageError(description: "--rebuilds must be positive") }
            let r = try ReplayBenchmark.run(store: store, memoryBudget: try memoryBudget(arguments), rebuilds: rebuilds)
            if arguments.json {
                Console.printJSON(["events": r.events, "rebuildSeconds": r.rebuildSeconds, "writeSeconds": r.writeSeconds, "eventsPerSecond": r.eventsPerSecond,
                                   "rebuildRates": r.rebuildRates, "userSeconds": r.userSeconds, "kernelSeconds": r.kernelSeconds,
                                   "auditSeconds": r.auditSeconds, "auditClean": r.auditClean])
            } else {
                print(r.summary)
            }
            return .success
        }
        guard let out = arguments.value("out") else { throw UsageError(description: "--out DIR is required") }
        let point: Replay.Point
        switch (try arguments.sequence("to-seq"), arguments.value("at")) {
        case (let n?, nil):
            point = .sequence(n)
        case (nil, let time?):
            point = .time(try TimeArgument.milliseconds(time, option: "at"))
        default:
            throw UsageError(description: "give one of --to-seq N or --at TIME")
        }
        let store = try TopicStore(directory: arguments.dataDirectory, options: .longRead)
        var options = Replay.Options()
        options.includeLog = !arguments.has("projections-only")
        options.memoryBudget = try memoryBudget(arguments)
        if let n = try arguments.integer("commit-every") {
            guard n > 0 else { throw UsageError(description: "--commit-every must be positive") }
            options.recordsPerCommit = n
        }
        let bar = ProgressBar(arguments: arguments)
        let report = try Replay.rebuild(from: store, to: point, into: out, options: options, progress: bar.update)
        bar.finish()
        if arguments.json {
            var object: [String: Any] = ["out": report.directory, "throughSeq": report.through, "events": report.events,
                                         "seconds": report.seconds, "eventsPerSecond": report.eventsPerSecond,
                                         "writeSeconds": report.writeSeconds, "rounds": report.rounds]
            if let t = report.throughTimestamp { object["throughTime"] = t }
            Console.printJSON(object)
        } else {
            var text = "rebuilt \(report.events) events into \(report.directory) as of seq \(report.through)"
            if let t = report.throughTimestamp { text += " (\(TimeArgument.iso(t)))" }
            text += String(format: " in %.2f s, %.0f events/s", report.seconds, report.eventsPerSecond)
            if report.rounds > 0 { text += " (written in \(report.rounds + 1) rounds: see --memory-budget)" }
            print(text)
        }
        return .success
    }
}
