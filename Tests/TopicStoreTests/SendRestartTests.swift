import AccessControl
import Delivery
import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// kill -9 of `topicstore serve` in the middle of a send: the restarted server
/// resumes from the durable cursor and completes; repeats stay within one batch.
@Suite(.serialized) struct SendRestartTests {
    @Test func killedServerResumesAndCompletes() throws {
        let fake = try FakePushServer(delayMs: 10)
        let directory = HTTPTestDirectory()
        let devices = 3000, batch = 100
        let serverKey: String
        do {
            let store = try TopicStore(directory: directory.path)
            let access = try AccessControl(store: store)
            serverKey = try #require(try access.bootstrap(project: "demo")).server
            var events: [Event] = []
            for i in 0..<devices {
                let ios = i % 2 == 0
                events.append(Event(project: "demo", body: .token(deviceID: "d\(i)", token: "ok-\(ios ? "ios" : "and")-\(i)", platform: ios ? .ios : .android)))
                events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "all")])))
            }
            for r in store.submitAndWait(events) { _ = try r.get() }
            let (a, f) = try fake.credentials()
            let credentials = try CredentialStore(store: store)
            try credentials.setAPNs(a, project: "demo")
            try credentials.setFCM(f, project: "demo")
            store.close()
        }
        let config = directory.path + "/serve.json"
        let delivery: [String: Any] = ["apnsSandboxURL": fake.url, "apnsProductionURL": fake.url, "fcmURL": fake.url, "caFile": fake.caFile,
                                       "batchSize": batch, "maxInFlight": 10, "retryBaseSeconds": 0.05]
        try JSONSerialization.data(withJSONObject: ["delivery": delivery]).write(to: URL(fileURLWithPath: config))

        let first = try ServeProcess(data: directory.path, extra: ["--config", config])
        let accepted = try RawHTTPClient(port: first.port).request("POST", "/api/send", headers: [("X-MPush-Token", serverKey), ("Content-Type", "application/json")],
                                                                    text: #"{"topics":["all"],"payload":{"title":"Restart","body":"resumes"}}"#)
        #expect(accepted.status == 200, "\(accepted.text)")
        let id = try #require(accepted.object?["notificationId"] as? String)
        // Wait until some but not all progress is durable, then kill -9.
        let deadline = Date().addingTimeInterval(30)
        var sentBeforeKill = 0
        while Date() < deadline {
            let s = try RawHTTPClient(port: first.port).request("GET", "/api/notifications/\(id)", headers: [("X-MPush-Token", serverKey)])
            sentBeforeKill = s.object?["sentCount"] as? Int ?? 0
            if sentBeforeKill >= 500 { break }
            usleep(20_000)
        }
        first.signal(SIGKILL)
        _ = first.wait()
        #expect(sentBeforeKill >= 500 && sentBeforeKill < devices, "killed at \(sentBeforeKill) of \(devices)")
        let pushedBeforeRestart = fake.requests().count

        let second = try ServeProcess(data: directory.path, extra: ["--config", config])
        let status = try waitForCompletion(port: second.port, key: serverKey, id: id)
        #expect(status["sentCount"] as? Int == devices)
        #expect(status["failedCount"] as? Int == 0)
        #expect(status["totalDevices"] as? Int == devices)

        let requests = fake.requests()
        var perToken: [String: Int] = [:]
        for r in requests {
            let token = r.path.hasPrefix("/3/device/") ? String(r.path.dropFirst("/3/device/".count))
                : ((try? JSONSerialization.jsonObject(with: Data(r.body.utf8)) as? [String: Any])?["message"] as? [String: Any])?["token"] as? String ?? ""
            perToken[token, default: 0] += 1
        }
        perToken["", default: 0] = 0
        perToken.removeValue(forKey: "")
        #expect(perToken.count == devices)             // at least once per device
        let repeats = perToken.values.reduce(0) { $0 + $1 - 1 }
        #expect(repeats <= batch, "\(repeats) repeats")  // at most the batch in flight at the kill
        #expect(pushedBeforeRestart < requests.count)
        second.signal(SIGTERM)
        #expect(second.wait() == 0)
    }
}
