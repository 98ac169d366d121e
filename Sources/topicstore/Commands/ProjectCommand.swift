import AccessControl
import Foundation
import TopicStore

/// `topicstore project add NAME` and `topicstore project list`.
enum ProjectCommand: Command {
    static let spec = CommandSpec(
        name: "project",
        summary: "add a project (API keys are issued per project) or list them",
        usage: "project (add NAME | list) [--data DIR] [--json]",
        options: [],
        details: """
        A project name is 1 to 64 of a-z 0-9 _ - . ; a key never reaches another project's data.
        Then issue keys with: topicstore key add --project NAME --kind client|server
        Adding a project that exists changes nothing: a notice on standard error, exit 0
        (--json: "created": false, with the existing project's createdAt). An invalid
        name is invalid input (exit 5).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let action = arguments.positionals.first else { throw UsageError(description: "say 'project add NAME' or 'project list'") }
        switch action {
        case "add":
            guard arguments.positionals.count == 2 else { throw UsageError(description: "usage: topicstore project add NAME") }
            let store = try TopicStore(directory: arguments.dataDirectory, options: .auxiliaryOnly)
            defer { store.close() }
            let access = try AccessControl(store: store)
            let name = arguments.positionals[1]
            do {
                let project = try access.addProject(name)
                if arguments.json { Console.printJSON(["project": project.name, "createdAt": project.createdAt, "created": true]) }
                else { print("created project \(project.name); add keys with: topicstore key add --project \(project.name) --kind client|server") }
                return .success
            } catch AccessError.projectExists(let name) {
                // What was asked for is the case already: a provisioning script run twice succeeds.
                let existing = try access.project(named: name)
                if arguments.json {
                    Console.printJSON(["project": name, "createdAt": existing?.createdAt as Any? ?? NSNull(), "created": false])
                } else {
                    Console.printError("project '\(name)' already exists (created \(existing.map { KeyCommand.date($0.createdAt) } ?? "earlier")); nothing changed")
                }
                return .success
            } catch let error as AccessError {
                Console.printError(error.description)
                return .invalidInput
            }
        case "list":
            guard arguments.positionals.count == 1 else { throw UsageError(description: "usage: topicstore project list") }
            var options = TopicStore.Options()
            options.readOnly = true
            let store = try TopicStore(directory: arguments.dataDirectory, options: options)
            let access = try AccessControl(store: store)
            let projects = try access.projects()
            let keys = try access.keys()
            if arguments.json {
                Console.printJSON(["projects": projects.map { p -> [String: Any] in
                    ["name": p.name, "createdAt": p.createdAt,
                     "activeKeys": keys.filter { $0.project == p.name && $0.isActive }.count]
                }])
            } else {
                if projects.isEmpty { print("no projects (topicstore serve creates 'demo' on its first run)") }
                for p in projects {
                    let active = keys.filter { $0.project == p.name && $0.isActive }
                    print("\(p.name)  created \(KeyCommand.date(p.createdAt))  \(active.filter { $0.kind == .client }.count) client / \(active.filter { $0.kind == .server }.count) server keys active")
                }
            }
            return .success
        default:
            throw UsageError(description: "unknown action '\(action)': use 'project add NAME' or 'project list'")
        }
    }
}
