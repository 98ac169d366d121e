import Foundation
import Replay
import TopicStore

/// `topicstore backup`: a consistent copy of a store, taken beside a running server.
enum BackupCommand: Command {
    static let spec = CommandSpec(
        name: "backup",
        summary: "copy the store, live or not, into a new directory that is a store itself",
        usage: "backup [--data DIR] --out DIR [--json]",
        options: [
            .init(name: "out", value: "DIR", help: "the backup's directory (must not exist or be empty; not inside --data)"),
        ],
        details: """
        The copy is taken in one LMDB read transaction (mdb_env_copy2, compacting), so it is the
        store as of one commit, while a server goes on writing: the log, the projections, the
        projects and API keys, provider credentials and queued notifications, CURRENT and the
        compaction snapshot the log continues from. The copy's file is then walked page by page.
        Do not copy a live store's files with cp: pages change under the copy.
        To restore: stop the server, move the store directory aside, put the backup directory in
        its place (or serve it with --data), and start the server; topicstore audit --data DIR
        checks it. A compaction that switches generations during the copy fails it (exit 1): run
        it again.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let out = arguments.value("out") else { throw UsageError(description: "--out DIR is required") }
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: readOnly)
        defer { store.close() }
        try store.requireLog()
        let report = try Backup.run(from: store, into: out)
        if arguments.json {
            var object: [String: Any] = ["out": report.directory, "generation": report.generation, "bytes": report.bytes,
                                         "seconds": report.seconds, "pagesChecked": report.pagesChecked]
            if let head = report.head { object["head"] = ["seq": head.sequence, "hash": head.hash.hex] }
            if let h = report.snapshotHorizon { object["snapshot"] = h }
            Console.printJSON(object)
        } else {
            let head = report.head.map { "log through seq \($0.sequence), head sha256 \($0.hash.hex)" } ?? "the log is empty"
            print(String(format: "backed up %@ into %@ in %.2f s: %@; %.1f MB, %d pages checked",
                         arguments.dataDirectory, out, report.seconds, head, Double(report.bytes) / 1e6, report.pagesChecked)
                  + (report.snapshotHorizon.map { "; with the compaction snapshot at seq \($0)" } ?? ""))
        }
        return .success
    }
}
