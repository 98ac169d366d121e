import Foundation
import MPushAPI
import Projections
import TopicStore

/// `topicstore topics`: a project's topics with subscriber counts.
enum TopicsCommand: Command {
    static let spec = CommandSpec(
        name: "topics",
        summary: "list a project's topics with their subscriber counts",
        usage: "topics [--data DIR] --project P [--json]",
        options: [.init(name: "project", value: "P", help: "the project")],
        details: """
        A project the store does not know has no topics (exit 0); standard error says so,
        and --json adds "unknownProject": true.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
        var options = TopicStore.Options()
        options.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: options)
        let reader = store.reader
        let (asOf, topics, known) = try store.read { txn -> (UInt64, [TopicInfo], Bool) in
            let asOf = try store.tables.appliedSequence(txn)
            guard let p = try reader.project(named: project, txn) else { return (asOf, [], false) }
            return (asOf, try reader.topics(p.id, txn), true)
        }
        if !known { Console.printError(Console.unknownProject(project) + "; the answer is empty") }
        if arguments.json {
            var json = TopicListJSON.encode(project: project, asOf: asOf, topics: topics)
            // The HTTP API's shape (…,"topics":[…]}), and for scripts the field
            // audience --json has too; it sorts after "topics", so it goes last.
            if !known, json.last == UInt8(ascii: "}") { json.insert(contentsOf: Array(",\"unknownProject\":true".utf8), at: json.count - 1) }
            FileHandle.standardOutput.write(Data(json + [0x0A]))
        } else {
            let sorted = topics.sorted { $0.record.code < $1.record.code }
            print("\(sorted.count) topics in \(project) as of seq \(asOf)")
            for t in sorted {
                print("  \(t.record.code)  \(t.record.subscribers) subscribers  \"\(t.record.title)\"\(t.record.single ? "  single" : "")")
            }
        }
        return .success
    }
}
