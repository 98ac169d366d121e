import Projections
import TopicStore

/// `topicstore device`: one device with its token, platform, state and topics.
enum DeviceCommand: Command {
    static let spec = CommandSpec(
        name: "device",
        summary: "show one device: token, platform, state and topics",
        usage: "device [--data DIR] --project P [--json] DEVICE_ID",
        options: [.init(name: "project", value: "P", help: "the project")])

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let project = arguments.value("project") else { throw UsageError(description: "--project is required") }
        guard arguments.positionals.count == 1 else { throw UsageError(description: "name one DEVICE_ID") }
        let deviceID = arguments.positionals[0]
        var options = TopicStore.Options()
        options.readOnly = true
        let store = try TopicStore(directory: arguments.dataDirectory, options: options)
        let reader = store.reader
        let registered = Console.isRegistered(project, in: store)
        let (asOf, info, known) = try store.read { txn -> (UInt64, DeviceInfo?, Bool) in
            let asOf = try store.tables.appliedSequence(txn)
            guard let p = try reader.project(named: project, txn) else { return (asOf, nil, registered) }
            return (asOf, try reader.device(p.id, deviceID: deviceID, txn), true)
        }
        guard let info else {
            if arguments.json {
                var object = ["error": "device not found", "device_id": deviceID, "project": project] as [String: Any]
                if !known { object["unknownProject"] = true }
                Console.printJSON(object)
            } else {
                Console.printError("no device '\(deviceID)' in project \(project)" + (known ? "" : ": " + Console.unknownProject(project)))
            }
            return .failure
        }
        let r = info.record
        let topics = info.topics.sorted()  // as GET /v1/devices/{id} lists them
        if arguments.json {
            var object: [String: Any] = ["project": project, "device_id": r.deviceID, "state": r.state.rawValue,
                                         "topics": topics, "asOfSeq": asOf]
            object["token"] = r.token ?? NSNullValue.null
            object["platform"] = r.platform.map { "\($0)" } ?? NSNullValue.null
            if let at = r.rejectedAt { object["rejectedAt"] = at }
            Console.printJSON(object)
        } else {
            print("device \(r.deviceID) in \(project) as of seq \(asOf)")
            print("  state:    \(r.state.rawValue)")
            print("  platform: \(r.platform.map { "\($0)" } ?? "-")")
            print("  token:    \(r.token ?? "-")")
            if let at = r.rejectedAt { print("  rejected at: \(at) (provider time, ms)") }
            print("  topics:   \(topics.isEmpty ? "-" : topics.joined(separator: ", "))")
        }
        return .success
    }
}
