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
            .init(name: "from-seq", value: "N", help: "first sequence (default 1)"),
            .init(name: "to-seq", value: "M", help: "last sequence (default the end of the log)"),
        ],
        details: """
        `topicstore import --data NEW FILE` rebuilds the same store from a full export (same
        sequences, times, chain head and projections); `topicstore load` applies the lines
        as new commands instead. A record that does not decode stops the export (exit 1).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        func sequence(_ name: String) throws -> UInt64? {
            guard let text = arguments.value(name) else { return nil }
            guard let n = UInt64(text) else { throw UsageError(description: "--\(name) must be a sequence number, not '\(text)'") }
            return n
        }
        let from = try sequence("from-seq") ?? 1
        let through = try sequence("to-seq") ?? .max
        guard from <= through else { throw UsageError(description: "--from-seq is after --to-seq") }
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: readOnly)
        let bar = ProgressBar(arguments: arguments)
        let out = OutputBuffer()
        let newline: [UInt8] = [0x0A]
        try Export.lines(from: store, from: from, through: through, progress: bar.update) { line in
            out.write(line)
            out.write(bytes: newline)
        }
        out.flush()
        bar.finish()
        return .success
    }
}
