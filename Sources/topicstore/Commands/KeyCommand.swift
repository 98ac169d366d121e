import AccessControl
import Foundation
import TopicStore

/// `topicstore key add|revoke|list`: API keys of projects.
enum KeyCommand: Command {
    static let spec = CommandSpec(
        name: "key",
        summary: "issue, revoke or list API keys (client: membership only; server: everything)",
        usage: "key (add --project P --kind client|server [--value KEY] | revoke KEY_OR_ID | list [--project P] [--kind client|server]) [--data DIR] [--json]",
        options: [
            .init(name: "project", value: "P", help: "the project the key belongs to"),
            .init(name: "kind", value: "KIND", help: "client (ships in apps) or server (send services, operators)"),
            .init(name: "value", value: "KEY", help: "use this key (16 to 256 printable characters) instead of a random one"),
        ],
        details: """
        A key is printed once, when it is added; only its SHA-256 is stored. `key list` shows each
        key's id (the first 8 bytes of that hash), and `key revoke` takes the key or its id.
        Several keys may be active at once, so keys rotate without downtime: add the new one,
        deploy it, revoke the old one. A running server honours a change within a second.
        Revoking a key that is already revoked changes nothing and says so (exit 0; --json:
        "alreadyRevoked": true); an unknown key is invalid input (exit 5).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let action = arguments.positionals.first else { throw UsageError(description: "say 'key add', 'key revoke KEY' or 'key list'") }
        switch action {
        case "add":
            guard arguments.positionals.count == 1 else { throw UsageError(description: "key add takes options only (see --help)") }
            try arguments.accepts(only: ["project", "kind", "value"], in: "key add")
            guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
            guard let kindName = arguments.value("kind"), let kind = KeyKind(rawValue: kindName) else {
                throw UsageError(description: "--kind must be client or server")
            }
            try TopicStore.requireExisting(directory: arguments.dataDirectory)  // keys belong to a store's projects: never make one
            let store = try TopicStore(directory: arguments.dataDirectory, options: .auxiliaryOnly)
            defer { store.close() }
            let access = try AccessControl(store: store)
            do {
                let (key, info) = try access.addKey(project: project, kind: kind, value: arguments.value("value"))
                if arguments.json {
                    Console.printJSON(["key": key, "id": info.id, "project": info.project, "kind": info.kind.rawValue])
                } else {
                    print(key)
                    Console.printError("added \(kind) key \(info.id) for project \(project); it is shown only now")
                }
                return .success
            } catch let error as AccessError {
                Console.printError(error.description)
                return .invalidInput
            }
        case "revoke":
            guard arguments.positionals.count == 2 else { throw UsageError(description: "usage: topicstore key revoke KEY_OR_ID") }
            try arguments.accepts(only: [], in: "key revoke")
            try TopicStore.requireExisting(directory: arguments.dataDirectory)  // keys belong to a store's projects: never make one
            let store = try TopicStore(directory: arguments.dataDirectory, options: .auxiliaryOnly)
            defer { store.close() }
            let access = try AccessControl(store: store)
            do {
                let (info, wasActive) = try access.revokeReporting(arguments.positionals[1])
                if arguments.json {
                    var object = describe(info)
                    object["alreadyRevoked"] = !wasActive
                    Console.printJSON(object)
                } else if wasActive {
                    print("revoked \(info.kind) key \(info.id) of project \(info.project)")
                } else {
                    print("\(info.kind) key \(info.id) of project \(info.project) was already revoked "
                          + "(\(info.revokedAt.map(date) ?? "earlier")); nothing changed")
                }
                return .success
            } catch let error as AccessError {
                Console.printError(error.description)
                return .invalidInput
            }
        case "list":
            guard arguments.positionals.count == 1 else { throw UsageError(description: "usage: topicstore key list [--project P] [--kind KIND]") }
            try arguments.accepts(only: ["project", "kind"], in: "key list")
            let kind: KeyKind? = try arguments.value("kind").map { name throws(UsageError) in
                guard let k = KeyKind(rawValue: name) else { throw UsageError(description: "--kind must be client or server") }
                return k
            }
            var options = TopicStore.Options()
            options.readOnly = true
            let store = try TopicStore(directory: arguments.dataDirectory, options: options)
            let access = try AccessControl(store: store)
            let keys = try access.keys(project: arguments.value("project")).filter { kind == nil || $0.kind == kind }
            // A project with no keys lists none; one that does not exist is said to, as topics does.
            let unknown = try arguments.value("project").map { try access.project(named: $0) == nil } ?? false
            if unknown { Console.printError(Console.unknownProject(arguments.value("project")!) + "; it has no keys") }
            if arguments.json {
                var answer: [String: Any] = ["keys": keys.map(describe)]
                if unknown { answer["unknownProject"] = true }
                Console.printJSON(answer)
            } else {
                if keys.isEmpty { print("no keys") }
                for k in keys {
                    let state = k.revokedAt.map { "revoked \(date($0))" } ?? "active"
                    print("\(k.id)  \(k.project)  \(k.kind.rawValue.padding(toLength: 6, withPad: " ", startingAt: 0))  created \(date(k.createdAt))  \(state)")
                }
            }
            return .success
        default:
            throw UsageError(description: "unknown action '\(action)': use 'key add', 'key revoke' or 'key list'")
        }
    }

    static func describe(_ k: KeyInfo) -> [String: Any] {
        var object: [String: Any] = ["id": k.id, "project": k.project, "kind": k.kind.rawValue,
                                     "createdAt": k.createdAt, "active": k.isActive]
        if let r = k.revokedAt { object["revokedAt"] = r }
        return object
    }

    static func date(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
