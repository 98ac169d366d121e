import Foundation
import MPushAPI
import Projections
import SubscriptionLog
import TopicStore

/// `topicstore topics`: a project's topics with subscriber counts.
enum TopicsCommand: Command {
    static let spec = CommandSpec(
        name: "topics",
        summary: "list a project's topics with their subscriber counts",
        usage: "topics [--data DIR] --project P [--prefix P] [--after CODE] [--limit N] [--json]",
        options: [.init(name: "project", value: "P", help: "the project"),
                  .init(name: "prefix", value: "P", help: "only the topics whose code starts with P"),
                  .init(name: "after", value: "CODE", help: "start after this code (the next of the page before)"),
                  .init(name: "limit", value: "N", help: "at most N topics (N ≥ 1); when more follow, the last line (or --json's next) says where to go on")],
        details: """
        Topics are listed by code. A project the store does not know has no topics (exit 0);
        standard error says so, and --json adds "unknownProject": true.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
        let prefix = arguments.value("prefix") ?? ""
        let after = arguments.value("after")
        let limit = try arguments.integer("limit")
        if let limit, limit < 1 { throw UsageError(description: "--limit must be at least 1, not \(limit)") }
        if !prefix.isEmpty && !Validation.isValidTopicCode(prefix) {
            throw UsageError(description: "--prefix must be the start of a topic code (ASCII letters, digits and . _ - ~ @ / + = #), not '\(prefix)'")
        }
        if let after, !Validation.isValidTopicCode(after) { throw UsageError(description: "--after must be a topic code, not '\(after)'") }
        let paged = !prefix.isEmpty || after != nil || limit != nil
        var options = TopicStore.Options()
        options.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: options)
        let reader = store.reader
        let registered = Console.isRegistered(project, in: store)
        let (asOf, page, known) = try store.read { txn -> (UInt64, TopicPage, Bool) in
            let asOf = try store.tables.appliedSequence(txn)
            guard let p = try reader.project(named: project, txn) else { return (asOf, TopicPage(topics: [], next: nil), registered) }
            // The whole list walks the topics in id order (sequential pages) and sorts them;
            // a page or a prefix walks the codes in order instead.
            if !paged { return (asOf, TopicPage(topics: try reader.topics(p.id, txn), next: nil), true) }
            return (asOf, try reader.topicPage(p.id, prefix: prefix, after: after, limit: limit ?? Int.max, txn), true)
        }
        let topics = page.topics
        if !known { Console.printError(Console.unknownProject(project) + "; the answer is empty") }
        if arguments.json {
            var json = TopicListJSON.encode(project: project, asOf: asOf, topics: topics, next: page.next)
            // The HTTP API's shape (…,"topics":[…]}), and for scripts the field
            // audience --json has too; it sorts after "topics", so it goes last.
            if !known, json.last == UInt8(ascii: "}") { json.insert(contentsOf: Array(",\"unknownProject\":true".utf8), at: json.count - 1) }
            FileHandle.standardOutput.write(Data(json + [0x0A]))
        } else {
            let sorted = topics.sorted { $0.record.code < $1.record.code }
            print("\(sorted.count) topic\(sorted.count == 1 ? "" : "s") in \(project) as of seq \(asOf)")
            for t in sorted {
                // Codes are plain ASCII; a title may hold anything, a newline or a NUL included.
                print("  \(t.record.code)  \(t.record.subscribers) subscriber\(t.record.subscribers == 1 ? "" : "s")  \(Console.quoted(t.record.title))\(t.record.single ? "  single" : "")")
            }
            if let next = page.next { print("more topics follow: --after \(next)") }
        }
        return .success
    }
}
