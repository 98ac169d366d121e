import Foundation
import Replay
import TopicStore

/// `topicstore export`: the log as JSON Lines, in the schema `load` and `import` read.
enum ExportCommand: Command {
    static let spec = CommandSpec(
        name: "export",
        summary: "write log records as JSON Lines (load's schema plus seq and ts) to standard output",
        usage: "export [--data DIR] [--from-seq N] [--to-seq M]",
        options: [
            .init(name: "from-seq", value: "N", help: "first sequence (default the log's first: 1, or after the compaction horizon)"),
            .init(name: "to-seq", value: "M", help: "last sequence (default the end of the log; past it is an error, exit 1)"),
        ],
        details: """
        `topicstore import --data NEW FILE` rebuilds the same store from a full export (same
        sequences, times, chain head and projections); `topicstore load` applies the lines
        as new commands instead. A record that does not decode, a record missing (a gap) or a
        key out of order stops the export (exit 4) after the lines before it; the message gives
        the --to-seq and --from-seq that export around it.
        On a compacted log, the export starts after the compaction horizon (standard error says
        so); a --from-seq or --to-seq at or before the horizon is an error (exit 1) naming it:
        those events are in the compaction archive, if one was kept.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        let askedFrom = try arguments.sequence("from-seq")
        let askedThrough = try arguments.sequence("to-seq")
        for (name, n) in [("from-seq", askedFrom), ("to-seq", askedThrough)] where n == 0 {
            throw UsageError(description: "--\(name) 0: the log's sequences start at 1")
        }
        var from = askedFrom ?? 1
        let through = askedThrough ?? .max
        guard from <= through else { throw UsageError(description: "--from-seq \(from) is after --to-seq \(through)") }
        let store = try TopicStore(directory: arguments.dataDirectory, options: .longRead)
        // A compacted log starts after its horizon: asking for what is before it is an
        // error (an empty export would read as "no events"), not asking starts after it.
        let horizon = try Replay.horizon(of: store)
        if horizon > 0 {
            let time = (try? Replay.snapshot(of: store))??.timestamp
            if let asked = askedFrom, asked <= horizon {
                throw ReplayError.notAfterHorizon(requested: "--from-seq \(asked)", horizon: horizon, horizonTime: time)
            }
            if let asked = askedThrough, asked <= horizon {
                throw ReplayError.notAfterHorizon(requested: "--to-seq \(asked)", horizon: horizon, horizonTime: time)
            }
            if askedFrom == nil {
                from = horizon + 1
                Console.printError("the log was compacted at seq \(horizon): exporting from seq \(horizon + 1) (the events before are in the compaction archive, if one was kept)")
            }
        }
        // Past the log's end is an error, as for replay: an empty or shorter export would read as "no more events".
        let last = try store.read { txn in try store.log.bounds(txn)?.last } ?? horizon
        for case let n? in [askedFrom, askedThrough] where n > last { throw ReplayError.beyondLog(requested: n, last: last) }
        let bar = ProgressBar(arguments: arguments)
        let out = OutputBuffer()
        let newline: [UInt8] = [0x0A]
        try Export.lineBytes(from: store, from: from, through: through, progress: bar.update) { line in
            out.write(bytes: line)
            out.write(bytes: newline)
        }
        out.flush()
        bar.finish()
        return .success
    }
}
