import Delivery
import Foundation
import TopicStore

/// `topicstore credentials set|list|remove`: APNs and FCM credentials per project.
enum CredentialsCommand: Command {
    static let spec = CommandSpec(
        name: "credentials",
        summary: "set, list or remove a project's APNs (.p8 token auth) and FCM (service account) credentials",
        usage: "credentials (set --project P (--apns-key-file F --key-id K --team-id T --bundle-id B (--sandbox|--production) | --fcm-service-account FILE) | list | remove --project P (--apns|--fcm)) [--data DIR] [--json]",
        options: [
            .init(name: "project", value: "P", help: "the project the credentials belong to"),
            .init(name: "apns-key-file", value: "F", help: "the AuthKey_<key id>.p8 file from Apple (EC P-256, PKCS#8 PEM)"),
            .init(name: "key-id", value: "K", help: "the 10-character key id of that key"),
            .init(name: "team-id", value: "T", help: "the Apple developer team id"),
            .init(name: "bundle-id", value: "B", help: "the app's bundle id (the apns-topic)"),
            .init(name: "sandbox", value: nil, help: "push through the development gateway"),
            .init(name: "production", value: nil, help: "push through the production gateway"),
            .init(name: "fcm-service-account", value: "FILE", help: "the Firebase service account JSON file"),
            .init(name: "apns", value: nil, help: "with remove: the APNs credentials"),
            .init(name: "fcm", value: nil, help: "with remove: the FCM credentials"),
        ],
        details: """
        Credentials live in the store's LMDB environment (table provider_credentials), so a running
        server uses new ones from its next batch. The private keys are stored as given: protect the
        data directory as you would the key files. The key is checked (it must load and sign) before it is stored.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let action = arguments.positionals.first else { throw UsageError(description: "say 'credentials set', 'credentials list' or 'credentials remove'") }
        // Checked before the store is opened (opening for writing creates one).
        guard ["set", "list", "remove"].contains(action) else { throw UsageError(description: "unknown action '\(action)' (set, list, remove)") }
        guard arguments.positionals.count == 1 else {
            throw UsageError(description: "unexpected argument '\(arguments.positionals[1])': 'topicstore credentials \(action)' takes only options (see --help)")
        }
        let store = try TopicStore(directory: arguments.dataDirectory, options: .auxiliaryOnly)
        defer { store.close() }
        let credentials = try CredentialStore(store: store)
        switch action {
        case "set":
            guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
            var done: [String] = []
            do {
                if let file = arguments.value("apns-key-file") {
                    guard let keyID = arguments.value("key-id"), let teamID = arguments.value("team-id"),
                          let bundleID = arguments.value("bundle-id") else {
                        throw UsageError(description: "--apns-key-file needs --key-id, --team-id and --bundle-id")
                    }
                    guard arguments.has("sandbox") != arguments.has("production") else {
                        throw UsageError(description: "say --sandbox or --production")
                    }
                    let pem = try String(contentsOfFile: file, encoding: .utf8)
                    try credentials.setAPNs(APNsCredentials(keyPEM: pem, keyID: keyID, teamID: teamID, bundleID: bundleID,
                                                            sandbox: arguments.has("sandbox")), project: project)
                    done.append("apns")
                }
                if let file = arguments.value("fcm-service-account") {
                    let c = try FCMCredentials(serviceAccountJSON: try Data(contentsOf: URL(fileURLWithPath: file)))
                    try credentials.setFCM(c, project: project)
                    done.append("fcm")
                }
            } catch let e as CredentialError {
                Console.printError(e.description)
                return .invalidInput
            } catch let e as CryptoError {
                Console.printError(e.description)
                return .invalidInput
            }
            guard !done.isEmpty else { throw UsageError(description: "give --apns-key-file … or --fcm-service-account FILE") }
            if arguments.json { Console.printJSON(["project": project, "set": done]) }
            else { print("set \(done.joined(separator: " and ")) credentials for project \(project)") }
            return .success
        case "list":
            var rows: [[String: Any]] = []
            for (project, provider) in try credentials.list() {
                var row: [String: Any] = ["project": project, "provider": provider]
                if provider == "apns", let c = try credentials.apns(project: project) {
                    row["keyID"] = c.keyID; row["teamID"] = c.teamID; row["bundleID"] = c.bundleID
                    row["environment"] = c.sandbox ? "sandbox" : "production"
                }
                if provider == "fcm", let c = try credentials.fcm(project: project) {
                    row["projectID"] = c.projectID; row["clientEmail"] = c.clientEmail; row["tokenURI"] = c.tokenURI
                }
                rows.append(row)
            }
            if arguments.json { Console.printJSON(rows) } else {
                for r in rows {
                    let details = r.filter { $0.key != "project" && $0.key != "provider" }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    print("\(r["project"]!)\t\(r["provider"]!)\t\(details.joined(separator: " "))")
                }
            }
            return .success
        case "remove":
            guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
            guard arguments.has("apns") != arguments.has("fcm") else { throw UsageError(description: "say --apns or --fcm") }
            let provider = arguments.has("apns") ? "apns" : "fcm"
            guard try credentials.remove(project: project, provider: provider) else {
                Console.printError("project \(project) has no \(provider) credentials")
                return .invalidInput
            }
            print("removed \(provider) credentials of project \(project)")
            return .success
        default:
            throw UsageError(description: "unknown action '\(action)' (set, list, remove)")
        }
    }
}
