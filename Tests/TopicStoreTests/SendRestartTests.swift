import AccessControl
@testable import Delivery
import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// kill -9 of `topicstore serve` in the middle of a send: the restarted server
/// resumes from the durable cursor and completes; repeats stay within one batch.
@Suite(.serialized) struct SendRestartTests {
    /// A closed store in `directory`: the demo project's keys (the server key is returned),
    /// device d<i> with token i on topic `all`, and the fake's APNs and FCM credentials.
    static func makeStore(_ directory: String, _ fake: FakePushServer, tokens: [(String, Platform)]) throws -> String {
        let store = try TopicStore(directory: directory)
        defer { store.close() }
        let serverKey = try #require(try AccessControl(store: store).bootstrap(project: "demo")).server
        var events: [Event] = []
        for (i, (token, platform)) in tokens.enumerated() {
            events.append(Event(project: "demo", body: .token(deviceID: "d\(i)", token: token, platform: platform)))
            events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "all")])))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        let (a, f) = try fake.credentials()
        let credentials = try CredentialStore(store: store)
        try credentials.setAPNs(a, project: "demo")
        try credentials.setFCM(f, project: "demo")
        return serverKey
    }

    @Test func killedServerResumesAndCompletes() throws {
        let fake = try FakePushServer(delayMs: 10)
        let directory = HTTPTestDirectory()
        let devices = 3000, batch = 100
        let serverKey = try Self.makeStore(directory.path, fake, tokens: (0..<devices).map { i in
            i % 2 == 0 ? ("ok-ios-\(i)", .ios) : ("ok-and-\(i)", .android)
        })
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

    /// SIGTERM while a push backs off before its next attempt (20 s): the server starts no new
    /// attempt, commits what is finished and exits within shutdownTimeoutSeconds. The cursor
    /// stops at the first device not finished, which is pushed again after a restart; the ones
    /// before it and the ones after it that were finished (sent, or rejected: its event is in the
    /// log) are not — a review saw a SIGTERM repeat every push of the batch after a slow one —
    /// and the counts count each device once.
    @Test func sigtermDuringBackoffStopsWithinTheShutdownTimeout() throws {
        let fake = try FakePushServer()
        let directory = HTTPTestDirectory()
        let serverKey = try Self.makeStore(directory.path, fake, tokens: ["ok-ios-0", "down-ios-1", "ok-ios-2", "gone-ios-3"].map { ($0, .ios) })
        func config(_ name: String, _ delivery: [String: Any]) throws -> String {
            var d: [String: Any] = ["apnsSandboxURL": fake.url, "apnsProductionURL": fake.url, "fcmURL": fake.url, "caFile": fake.caFile]
            d.merge(delivery) { $1 }
            let path = directory.path + "/" + name
            try JSONSerialization.data(withJSONObject: ["delivery": d, "shutdownTimeoutSeconds": 2]).write(to: URL(fileURLWithPath: path))
            return path
        }
        let slow = try config("slow.json", ["maxAttempts": 6, "retryBaseSeconds": 20, "retryMaxSeconds": 60])
        let first = try ServeProcess(data: directory.path, extra: ["--config", slow])
        let accepted = try RawHTTPClient(port: first.port).request("POST", "/api/send", headers: [("X-MPush-Token", serverKey), ("Content-Type", "application/json")],
                                                                    text: #"{"topics":["all"],"payload":{"body":"stop"}}"#)
        let id = try #require(accepted.object?["notificationId"] as? String, "\(accepted.text)")
        let deadline = Date().addingTimeInterval(10)
        while fake.requests().count < 4 && Date() < deadline { usleep(20_000) }
        #expect(fake.requests().count == 4)
        let stopAsked = Date()
        first.signal(SIGTERM)
        let exit = first.wait(timeout: 8)
        #expect(exit == 0, "serve had not exited \(Date().timeIntervalSince(stopAsked)) s after SIGTERM")
        #expect(Date().timeIntervalSince(stopAsked) < 5)
        if exit == nil { first.signal(SIGKILL); _ = first.wait() }

        let quick = try config("quick.json", ["maxAttempts": 2, "retryBaseSeconds": 0.05])
        let second = try ServeProcess(data: directory.path, extra: ["--config", quick])
        let status = try waitForCompletion(port: second.port, key: serverKey, id: id, timeout: 20)
        #expect(status["sentCount"] as? Int == 2 && status["failedCount"] as? Int == 2, "\(status)")
        #expect(status["failures"] as? [String: Int] == ["500 InternalServerError after 2 attempts": 1, "Unregistered": 1], "\(status)")
        #expect(status["rejectedTokens"] as? Int == 1)
        let pushes = Dictionary(grouping: fake.requests(), by: \.path).mapValues(\.count)
        #expect(pushes == ["/3/device/ok-ios-0": 1, "/3/device/down-ios-1": 3, "/3/device/ok-ios-2": 1, "/3/device/gone-ios-3": 1], "\(pushes)")
        second.signal(SIGTERM)
        #expect(second.wait() == 0)
    }

    /// A crash after a batch's rejections are committed and before its cursor is: the batch is
    /// read again, its rejected device is no longer live — and must still count as the rejection
    /// it was (reason and rejectedTokens), not as "token no longer live", nor be pushed again.
    @Test func aCrashBetweenTheRejectionsAndTheCursorStillCountsThem() throws {
        let fake = try FakePushServer()
        let (server, credentials) = try SendFailureTests.server(fake, devices: [("x0", "gone-ios-1", .ios), ("x1", "ok-ios-2", .ios)])
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.batchSize = 10
        struct Crash: Error {}
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        var crashes = 0
        worker.beforeCursorCommit = {
            crashes += 1
            if crashes == 1 { throw Crash() }
        }
        worker.start()
        defer { worker.stop() }
        let accepted = try server.send("POST", "/api/send", key: server.serverKey, json: #"{"topics":["t"],"payload":{"body":"hi"}}"#)
        let id = try #require(accepted.object?["notificationId"] as? String)
        let status = try waitForCompletion(port: server.port, key: server.serverKey, id: id, timeout: 20)
        #expect(crashes == 2)
        #expect(status["sentCount"] as? Int == 1 && status["failedCount"] as? Int == 1)
        #expect(status["failures"] as? [String: Int] == ["Unregistered": 1], "\(status["failures"] ?? "")")
        #expect(status["rejectedTokens"] as? Int == 1)
        let pushes = Dictionary(grouping: fake.requests(), by: \.path).mapValues(\.count)
        #expect(pushes == ["/3/device/gone-ios-1": 1, "/3/device/ok-ios-2": 2], "\(pushes)")
    }
}
