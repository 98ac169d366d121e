import AccessControl
import Delivery
import Foundation
import TopicStore

/// `topicstore credentials set|list|remove`: APNs and FCM credentials per project.
enum CredentialsCommand: Command {
    static let spec = CommandSpec(
        name: "credentials",
        summary: "set, list or remove a project's APNs (.p8 token auth) and FCM (service account) credentials",
        usage: "credentials (set --project P (--apns-key-file F --key-id K --team-id T --bundle-id B (--sandbox|--production) | --fcm-service-account FILE) | list [--project P] | remove --project P (--apns|--fcm)) [--data DIR] [--json]",
        options: [
            .init(name: "project", value: "P", help: "the project the credentials belong to"),
            .init(name: "apns-key-file", value: "F", help: "the AuthKey_<key id>.p8 file from Apple (EC P-256, PKCS#8 PEM)"),
            .init(name: "key-id", value: "K", help: "the 10-character key id of that key"),
            .init(name: "team-id", value: "T", help: "the 10-character team id of your Apple developer account"),
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
        let allowed = ["set": ["project", "apns-key-file", "key-id", "team-id", "bundle-id", "sandbox", "production", "fcm-service-account"],
                       "list": ["project"], "remove": ["project", "apns", "fcm"]]
        try arguments.accepts(only: allowed[action] ?? [], in: "credentials \(action)")
        // Usage is checked, and the files read, before the store is opened.
        var apns: APNsCredentials?, fcmAccount: Data?, project: String?
        if action == "set" {
            guard let p = arguments.value("project") else { throw UsageError(description: "--project is required") }
            project = p
            if let file = arguments.value("apns-key-file") {
                guard let keyID = arguments.value("key-id"), let teamID = arguments.value("team-id"),
                      let bundleID = arguments.value("bundle-id") else {
                    throw UsageError(description: "--apns-key-file needs --key-id, --team-id and --bundle-id")
                }
                try appleID(keyID, option: "key-id", what: "key id Apple shows for the key")
                try appleID(teamID, option: "team-id", what: "team id of your Apple developer account")
                guard arguments.has("sandbox") != arguments.has("production") else {
                    throw UsageError(description: "say --sandbox or --production")
                }
                apns = APNsCredentials(keyPEM: String(decoding: try readFile(file), as: UTF8.self), keyID: keyID, teamID: teamID,
                                       bundleID: bundleID, sandbox: arguments.has("sandbox"))
            }
            if let file = arguments.value("fcm-service-account") { fcmAccount = try readFile(file) }
            guard apns != nil || fcmAccount != nil else { throw UsageError(description: "give --apns-key-file … or --fcm-service-account FILE") }
        }
        try TopicStore.requireExisting(directory: arguments.dataDirectory)  // credentials belong to a store's projects: never make one
        let store = try TopicStore(directory: arguments.dataDirectory, options: .auxiliaryOnly)
        defer { store.close() }
        let credentials = try CredentialStore(store: store)
        switch action {
        case "set":
            guard let project else { throw UsageError(description: "--project is required") }
            // As `key add`: credentials for a project that does not exist would never be used.
            guard try AccessControl(store: store).project(named: project) != nil else {
                Console.printError(AccessError.noSuchProject(project).description)
                return .invalidInput
            }
            var done: [String] = []
            do {
                if let apns {
                    try credentials.setAPNs(apns, project: project)
                    done.append("apns")
                }
                if let fcmAccount {
                    try credentials.setFCM(try FCMCredentials(serviceAccountJSON: fcmAccount), project: project)
                    done.append("fcm")
                }
            } catch let e as CredentialError {
                Console.printError(e.description)
                return .invalidInput
            } catch let e as CryptoError {
                Console.printError(e.description)
                return .invalidInput
            }
            if arguments.json { Console.printJSON(["project": project, "set": done]) }
            else { print("set \(done.joined(separator: " and ")) credentials for project \(project)") }
            return .success
        case "list":
            var rows: [[String: Any]] = []
            for (project, provider) in try credentials.list() where arguments.value("project").map({ $0 == project }) ?? true {
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
            // As `key add`: a project that does not exist is invalid input, not "nothing to remove".
            guard try AccessControl(store: store).project(named: project) != nil else {
                Console.printError(AccessError.noSuchProject(project).description)
                return .invalidInput
            }
            // Removing what is already absent changes nothing and says so, as `key revoke` of a revoked key.
            let removed = try credentials.remove(project: project, provider: provider)
            if arguments.json {
                Console.printJSON(["project": project, "provider": provider, "removed": removed])
            } else if removed {
                print("removed \(provider) credentials of project \(project)")
            } else {
                print("project \(project) has no \(provider) credentials: nothing to remove")
            }
            return .success
        default:
            throw UsageError(description: "unknown action '\(action)' (set, list, remove)")
        }
    }

    /// APNs key ids and team ids are 10 letters or digits (a key file is AuthKey_<key id>.p8).
    static func appleID(_ value: String, option: String, what: String) throws {
        guard value.utf8.count == 10, value.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else {
            throw UsageError(description: "--\(option) must be the 10-character \(what) (letters and digits), not '\(value)'")
        }
    }

    /// A key file's bytes; a file that cannot be read is a usage error that says why in plain words.
    static func readFile(_ path: String) throws -> Data {
        var info = stat()
        if stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR { throw UsageError(description: "cannot read \(path): it is a directory") }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let why: String
            switch errno {
            case ENOENT: why = "no such file"
            case EACCES: why = "permission denied"
            default: why = String(cString: strerror(errno))
            }
            throw UsageError(description: "cannot read \(path): \(why)")
        }
        let handle = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        do {
            return try handle.readToEnd() ?? Data()
        } catch {
            throw UsageError(description: "cannot read \(path): \(error.localizedDescription)")
        }
    }
}
