import EventJSON
import Foundation
import Projections
import SubscriptionLog
import TopicStore

/// `topicstore audience`: who a push to these topics (or this expression) reaches.
enum AudienceCommand: Command {
    static let spec = CommandSpec(
        name: "audience",
        summary: "count (or list with --tokens) the devices on any of TOPICs, or matching --expr",
        usage: "audience [--data DIR] --project P [--json] (TOPIC… | --expr EXPR) [--tokens]",
        options: [
            .init(name: "project", value: "P", help: "the project"),
            .init(name: "expr", value: "EXPR", help: "an audience expression, e.g. '(sport OR news) AND NOT user.12'"),
            .init(name: "tokens", value: nil, help: "stream the reachable recipients as NDJSON {device_id, platform, token}"),
        ],
        details: """
        Expressions: AND, OR, NOT (or & | !), parentheses, topic codes (quote unusual ones),
        and the built-in sets platform:ios, platform:android (live tokens) and devices:all.
        Counts come from one snapshot and name the log sequence it reflects (asOfSeq).
        A project the store does not know has an empty audience (exit 0); standard error
        says so, and --json adds "unknownProject": true.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
        let expression: AudienceExpression
        if let text = arguments.value("expr") {
            guard arguments.positionals.isEmpty else { throw UsageError(description: "give TOPICs or --expr, not both") }
            do { expression = try AudienceExpression(parsing: text) } catch { throw UsageError(description: error.description) }
        } else {
            for code in arguments.positionals where !Validation.isValidTopicCode(code) {
                throw UsageError(description: "'\(code)' is not a valid topic code")
            }
            guard let e = AudienceExpression.anyOf(arguments.positionals) else {
                throw UsageError(description: "name at least one TOPIC, or give --expr")
            }
            expression = e
        }
        var options = TopicStore.Options()
        options.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: options)
        let reader = store.reader
        let registered = Console.isRegistered(project, in: store)
        try store.read { txn in
            let unknownProject = try reader.project(named: project, txn) == nil && !registered
            if unknownProject { Console.printError(Console.unknownProject(project) + "; the answer is empty") }
            if arguments.has("tokens") {
                let audience = try reader.audience(project: project, expression, txn)
                let reachable = try reader.reachable(audience, txn)
                let out = OutputBuffer()
                let opening = Array("{\"device_id\":".utf8), closing: [UInt8] = [0x7D, 0x0A]
                let ios = Array(",\"platform\":\"ios\",\"token\":".utf8)
                let android = Array(",\"platform\":\"android\",\"token\":".utf8)
                try reader.forEachRecipient(projectID: audience.projectID, in: reachable, txn) { _, platform, id, token in
                    out.append { buffer in
                        buffer.append(contentsOf: opening)
                        JSONText.appendQuoted(id, to: &buffer)
                        buffer.append(contentsOf: platform == .ios ? ios : android)
                        JSONText.appendQuoted(token, to: &buffer)
                        buffer.append(contentsOf: closing)
                    }
                    return true
                }
                out.flush()
                return
            }
            let counts = try reader.counts(project: project, expression, txn)
            if arguments.json {
                var object: [String: Any] = ["asOfSeq": counts.asOfSeq, "total": counts.total, "ios": counts.ios,
                                             "android": counts.android, "withoutToken": counts.withoutToken]
                if !counts.unknownTopics.isEmpty { object["unknownTopics"] = counts.unknownTopics }
                if unknownProject { object["unknownProject"] = true }
                Console.printJSON(object)
            } else {
                print("\(counts.total) devices (ios \(counts.ios), android \(counts.android), without token \(counts.withoutToken)) as of seq \(counts.asOfSeq)")
                if !counts.unknownTopics.isEmpty { print("unknown topics: \(counts.unknownTopics.joined(separator: ", "))") }
            }
        }
        return .success
    }
}
