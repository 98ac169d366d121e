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

    /// Devices per project in the store's projections (a project the commands named).
    static func deviceCounts(_ store: TopicStore) throws -> [String: Int] {
        let reader = store.reader
        return try store.read { txn in
            var counts: [String: Int] = [:]
            for (name, record) in try reader.projects(txn) { counts[name] = try reader.knownDevices(record.id, txn).count }
            return counts
        }
    }

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
                // Commands loaded before the project was added already hold devices of it.
                let devices = try deviceCounts(store)[name]
                if arguments.json {
                    Console.printJSON(["project": project.name, "createdAt": project.createdAt, "created": true, "devices": devices ?? 0])
                } else {
                    let held = devices.map { " (the store already holds \($0) device(s) of it)" } ?? ""
                    print("created project \(project.name)\(held); add keys with: topicstore key add --project \(project.name) --kind client|server")
                }
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
            let devices = try deviceCounts(store)
            // Data without a project entry: commands loaded (load, import) for a name never added.
            let unregistered = devices.keys.filter { name in !projects.contains { $0.name == name } }.sorted()
            if arguments.json {
                var list = projects.map { p -> [String: Any] in
                    ["name": p.name, "createdAt": p.createdAt, "devices": devices[p.name] ?? 0,
                     "activeKeys": keys.filter { $0.project == p.name && $0.isActive }.count]
                }
                list += unregistered.map { ["name": $0, "devices": devices[$0] ?? 0, "activeKeys": 0, "added": false] }
                Console.printJSON(["projects": list])
            } else {
                if projects.isEmpty && unregistered.isEmpty { print("no projects (topicstore serve creates 'demo' on its first run)") }
                for p in projects {
                    let active = keys.filter { $0.project == p.name && $0.isActive }
                    print("\(p.name)  created \(KeyCommand.date(p.createdAt))  \(devices[p.name] ?? 0) devices  \(active.filter { $0.kind == .client }.count) client / \(active.filter { $0.kind == .server }.count) server keys active")
                }
                for name in unregistered {
                    print("\(name)  \(devices[name] ?? 0) devices, not added (no API keys): topicstore project add \(name)")
                }
            }
            return .success
        default:
            throw UsageError(description: "unknown action '\(action)': use 'project add NAME' or 'project list'")
        }
    }
}
