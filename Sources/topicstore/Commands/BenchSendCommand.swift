import Delivery
import Foundation
import Notifications
import Replay
import SubscriptionLog
import TopicStore

/// `topicstore bench-send`: one send to a large audience against APNs/FCM
/// endpoints (the test fakes), end to end through the queue and the worker.
enum BenchSendCommand: Command {
    static let spec = CommandSpec(
        name: "bench-send",
        summary: "benchmark a send to a large audience against APNs/FCM endpoints (the fakes of scripts/bench-send)",
        usage: "bench-send --apns-url URL --fcm-url URL --apns-key-file F --fcm-service-account F [--ca FILE] [--devices N] [--batch N] [--in-flight N] [--connections N] [--rejected-every N] [--data DIR] [--json]",
        options: [
            .init(name: "devices", value: "N", help: "audience size (default 1000000; half iOS, half Android, all on topic 'all')"),
            .init(name: "apns-url", value: "URL", help: "APNs base URL (the fake)"),
            .init(name: "fcm-url", value: "URL", help: "FCM base URL (the fake); its token URI is taken from the service account"),
            .init(name: "apns-key-file", value: "F", help: "an EC P-256 .p8 key the fake accepts"),
            .init(name: "fcm-service-account", value: "F", help: "a service account JSON the fake accepts"),
            .init(name: "ca", value: "FILE", help: "CA bundle for the fake's TLS certificate"),
            .init(name: "batch", value: "N", help: "devices per durable progress step (default 20000)"),
            .init(name: "in-flight", value: "N", help: "concurrent HTTP/2 streams (default 1000)"),
            .init(name: "connections", value: "N", help: "connections per host (default 2; the streams are spread over them)"),
            .init(name: "rejected-every", value: "N", help: "every Nth pair of devices (one iOS, one Android) has tokens the fakes reject (gone… → APNs 410, unreg… → FCM UNREGISTERED; default 100, 0 = none)"),
        ],
        details: """
        Loads the audience into the store (once: a store that already has it is reused), then queues
        one notification to 'all' and waits for it to complete. Reports pushes per second from the
        send request to completion, and the time from the send request to the first push answered 200.
        Without --data the store is a temporary directory, removed afterwards.
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let apnsURL = arguments.value("apns-url"), let fcmURL = arguments.value("fcm-url"),
              let apnsKey = arguments.value("apns-key-file"), let serviceAccount = arguments.value("fcm-service-account") else {
            throw UsageError(description: "--apns-url, --fcm-url, --apns-key-file and --fcm-service-account are required")
        }
        let devices = try arguments.integer("devices") ?? 1_000_000
        let rejectedEvery = try arguments.integer("rejected-every") ?? 100
        let temporary = arguments.values["data"] == nil
        let directory = temporary ? NSTemporaryDirectory() + "topicstore-bench-send-\(UUID().uuidString)" : arguments.dataDirectory
        defer { if temporary { try? FileManager.default.removeItem(atPath: directory) } }
        let project = "bench"

        // 1. The audience, loaded without fsync (an import that can be redone).
        var loadSeconds = 0.0
        do {
            var options = TopicStore.Options()
            options.durability = .noSync
            let store = try TopicStore(directory: directory, options: options)
            let reader = store.reader
            let existing = try store.read { txn in try reader.project(named: project, txn).map { Int($0.nextOrdinal) } ?? 0 }
            if existing < devices {
                let start = Date()
                var events: [Event] = []
                events.reserveCapacity(20_000)
                for i in existing..<devices {
                    let id = "device-\(i)"
                    let ios = i % 2 == 0
                    // A realistic mix: a few tokens the providers reject, which come back as token-rejected events.
                    let rejected = rejectedEvery > 0 && (i / 2) % rejectedEvery == rejectedEvery - 1
                    let token = ios ? String(format: rejected ? "gone%060x" : "ok%062x", i)
                                    : (rejected ? "unreg-fcm-\(i)-" : "ok-fcm-\(i)-") + String(repeating: "x", count: 140)
                    events.append(Event(project: project, body: .token(deviceID: id, token: token, platform: ios ? .ios : .android)))
                    events.append(Event(project: project, body: .register(deviceID: id, topics: [TopicSpec(code: "all")])))
                    if events.count >= 20_000 {
                        for r in store.submitAndWait(events) { _ = try r.get() }
                        events.removeAll(keepingCapacity: true)
                    }
                }
                for r in store.submitAndWait(events) { _ = try r.get() }
                loadSeconds = Date().timeIntervalSince(start)
            }
            store.close()
        }

        // 2. Durable store, credentials, worker.
        let store = try TopicStore(directory: directory)
        defer { store.close() }
        let credentials = try CredentialStore(store: store)
        try credentials.setAPNs(APNsCredentials(keyPEM: try String(contentsOfFile: apnsKey, encoding: .utf8), keyID: "BENCHKEY01",
                                                teamID: "BENCHTEAM1", bundleID: "com.example.bench", sandbox: false), project: project)
        try credentials.setFCM(try FCMCredentials(serviceAccountJSON: try Data(contentsOf: URL(fileURLWithPath: serviceAccount))), project: project)
        var configuration = DeliveryConfiguration()
        configuration.apnsProductionURL = apnsURL
        configuration.fcmURL = fcmURL
        configuration.caFile = arguments.value("ca")
        configuration.batchSize = try arguments.integer("batch") ?? 20_000
        configuration.maxInFlight = try arguments.integer("in-flight") ?? 1000
        configuration.connectionsPerHost = try arguments.integer("connections") ?? 2
        let queue = try SendQueue(store: store)
        let worker = DeliveryWorker(queue: queue, credentials: credentials, configuration: configuration)
        worker.start()
        defer { worker.stop() }

        // 3. One send to everybody, timed from the request; the process's CPU time over the same span
        //    says what the sender itself costs per push, whatever the fake's speed.
        let cpu0 = ProcessCPUTime.now().total
        let t0 = DispatchTime.now().uptimeNanoseconds
        let payload = try JSONParser.parse(Array(#"{"title":"Bench","body":"Hello from topicstore","badge":1,"custom":{"k":"v"}}"#.utf8))
        let (record, _) = try queue.enqueue(project: project, topics: ["all"], expression: .topic("all"), exprText: nil, payload: payload)
        let queuedAt = DispatchTime.now().uptimeNanoseconds
        var last = record
        var lastPrint = 0.0
        while last.status != .completed {
            usleep(20_000)
            last = try queue.record(id: record.id) ?? last
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e9
            if !arguments.json && elapsed - lastPrint >= 5 {
                lastPrint = elapsed
                Console.printError(String(format: "  %.0fs: %d sent, %d failed of %d", elapsed, last.sentCount, last.failedCount, last.totalDevices))
            }
            if let e = worker.lastErrorMessage, elapsed > 5, last.sentCount == 0 { throw CredentialError("delivery failed: \(e)") }
        }
        let done = DispatchTime.now().uptimeNanoseconds
        let cpu = ProcessCPUTime.now().total - cpu0
        let total = Double(done - t0) / 1e9
        let first = worker.firstPushTime(of: record.id).map { Double($0 - t0) / 1e9 }
        let rate = Double(last.sentCount + last.failedCount) / total
        let pushes = Double(last.sentCount + last.failedCount)
        let perCPUSecond = cpu > 0 ? pushes / cpu : 0
        let report: [String: Any] = [
            "devices": last.totalDevices, "sent": last.sentCount, "failed": last.failedCount, "failures": last.failures,
            "enqueueSeconds": Double(queuedAt - t0) / 1e9, "firstPushSeconds": first ?? -1, "totalSeconds": total,
            "pushesPerSecond": rate.rounded(), "batch": configuration.batchSize, "inFlight": configuration.maxInFlight,
            "connectionsPerHost": configuration.connectionsPerHost, "loadSeconds": loadSeconds,
            "senderCPUSeconds": cpu, "rejectedTokens": last.rejectedTokens, "pushesPerSenderCPUSecond": perCPUSecond.rounded(),
        ]
        if arguments.json { Console.printJSON(report) } else {
            print(String(format: "bench-send: %d devices, %d sent, %d failed in %.2f s: %.0f pushes/s end to end",
                         last.totalDevices, last.sentCount, last.failedCount, total, rate))
            print(String(format: "  queued (audience resolved, pinned, durable) after %.3f s; first push answered after %.3f s",
                         Double(queuedAt - t0) / 1e9, first ?? -1))
            print(String(format: "  topicstore used %.2f s of CPU (%.0f %% of one core): %.0f pushes per CPU-second of the sender",
                         cpu, 100 * cpu / total, perCPUSecond))
            if !last.failures.isEmpty { print("  failures: \(last.failures); \(last.rejectedTokens) token-rejected events back in the log") }
        }
        // Every device answered, and the only failures are the rejected tokens of the mix.
        let expected: Set<String> = ["Unregistered", "UNREGISTERED"]
        let clean = last.sentCount + last.failedCount == last.totalDevices && last.failures.keys.allSatisfy { expected.contains($0) }
        return clean ? .success : .failure
    }
}
