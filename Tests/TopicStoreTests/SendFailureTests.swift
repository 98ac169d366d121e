import Delivery
import Foundation
import Notifications
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// Providers that misbehave: one that never lets a push through, a token endpoint that fails
/// for a moment, streams refused. Every notification still ends, with the reason it failed.
@Suite(.serialized) struct SendFailureTests {
    /// A server with `devices` (device id, token, platform) on topic `t`, credentials for the fake.
    static func server(_ fake: FakePushServer, devices: [(String, String, Platform)]) throws -> (HTTPTestServer, CredentialStore) {
        let server = try HTTPTestServer()
        var events: [Event] = []
        for (id, token, platform) in devices {
            events.append(Event(project: "demo", body: .token(deviceID: id, token: token, platform: platform)))
            events.append(Event(project: "demo", body: .register(deviceID: id, topics: [TopicSpec(code: "t")])))
        }
        for r in server.store.submitAndWait(events) { _ = try r.get() }
        let (apnsCredentials, fcmCredentials) = try fake.credentials()
        let credentials = try CredentialStore(store: server.store)
        try credentials.setAPNs(apnsCredentials, project: "demo")
        try credentials.setFCM(fcmCredentials, project: "demo")
        return (server, credentials)
    }

    /// A delivery worker for `server`'s queue, started (the caller stops it).
    static func startedWorker(_ server: HTTPTestServer, _ credentials: CredentialStore, _ configuration: DeliveryConfiguration) -> DeliveryWorker {
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        worker.start()
        return worker
    }

    static func send(_ server: HTTPTestServer, _ body: String = "hi") throws -> String {
        let accepted = try server.send("POST", "/api/send", key: server.serverKey, json: #"{"topics":["t"],"payload":{"body":"\#(body)"}}"#)
        return try #require(accepted.object?["notificationId"] as? String, "\(accepted.text)")
    }

    /// A provider that completes TLS and never sends its SETTINGS: each attempt gives up after the
    /// connecting limit, the push backs off and finally fails with the reason, and the queue moves on.
    @Test func aProviderThatNeverLetsAPushThroughFailsItAndTheQueueMovesOn() throws {
        let fake = try FakePushServer(extraArguments: ["--no-settings"])
        let (server, credentials) = try Self.server(fake, devices: [("i1", "ok-ios-1", .ios)])
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.requestTimeoutSeconds = 1
        configuration.maxAttempts = 2
        let worker = Self.startedWorker(server, credentials, configuration)
        defer { worker.stop() }
        let first = try Self.send(server, "first")
        let second = try Self.send(server, "second")
        // (Recorded before the worker is stopped: a worker that never finishes its batch never stops.)
        let completed = try? waitForCompletion(port: server.port, key: server.serverKey, id: first, timeout: 15)
        let status = try #require(completed, "the first notification never completed")
        #expect(status["failedCount"] as? Int == 1 && status["sentCount"] as? Int == 0)
        let reason = (status["failures"] as? [String: Int] ?? [:]).keys.first ?? ""
        #expect(reason.contains("sent no HTTP/2 SETTINGS") && reason.hasSuffix("after 2 attempts"), "\(reason)")
        // The next notification is not stuck behind it.
        let next = try waitForCompletion(port: server.port, key: server.serverKey, id: second, timeout: 15)
        #expect(next["failedCount"] as? Int == 1)
    }

    /// An APNs 410 dated before the token was registered is a stale answer: the store logs the
    /// rejection and ignores it (the token stays live), and `rejectedTokens` counts only the
    /// tokens a rejection stopped (a review saw 10 where 7 tokens were rejected).
    @Test func rejectedTokensCountsOnlyRejectionsTheStoreApplied() throws {
        let fake = try FakePushServer()
        let (server, credentials) = try Self.server(fake, devices: [("s0", "stale-ios-0", .ios), ("g1", "gone-ios-1", .ios), ("o2", "ok-ios-2", .ios)])
        defer { server.stop() }
        let worker = Self.startedWorker(server, credentials, fake.deliveryConfiguration())
        defer { worker.stop() }
        let first = try waitForCompletion(port: server.port, key: server.serverKey, id: try Self.send(server, "first"), timeout: 15)
        #expect(first["sentCount"] as? Int == 1 && first["failedCount"] as? Int == 2, "\(first)")
        #expect(first["failures"] as? [String: Int] == ["Unregistered": 2], "\(first["failures"] ?? "")")
        #expect(first["rejectedTokens"] as? Int == 1)
        // The stale one is still targeted, the other is not.
        let second = try waitForCompletion(port: server.port, key: server.serverKey, id: try Self.send(server, "second"), timeout: 15)
        #expect(second["totalDevices"] as? Int == 2 && second["rejectedTokens"] as? Int == 0, "\(second)")
    }

    /// GOAWAY after every 2 answers: the streams above its last stream id were never processed
    /// by the provider, so retrying them on a new connection uses up no attempt. Every push is
    /// answered exactly once (busy ones 429 then 200), with 2 attempts allowed.
    @Test func streamsRefusedByGoawayAreRetriedWithoutUsingAttempts() throws {
        let fake = try FakePushServer(extraArguments: ["--goaway-after", "2"])
        let tokens = (0..<40).map { $0 % 10 == 0 ? "busy-ios-\($0)" : "ok-ios-\($0)" }
        let (server, credentials) = try Self.server(fake, devices: tokens.enumerated().map { ("d\($0)", $1, .ios) })
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.maxAttempts = 2
        configuration.connectionsPerHost = 1
        let worker = Self.startedWorker(server, credentials, configuration)
        defer { worker.stop() }
        let id = try Self.send(server)
        let status = try waitForCompletion(port: server.port, key: server.serverKey, id: id, timeout: 30)
        #expect(status["sentCount"] as? Int == 40, "\(status["failures"] ?? "")")
        let answers = Dictionary(grouping: fake.requests(), by: { String($0.path.dropFirst("/3/device/".count)) }).mapValues { $0.map(\.status) }
        for t in tokens { #expect(answers[t] == (t.hasPrefix("busy") ? [429, 200] : [200]), "\(t): \(answers[t] ?? [])") }
    }

    /// A provider that refuses every stream (RST_STREAM REFUSED_STREAM, nothing ever answered):
    /// the refusals are not attempts, but they are bounded — the push ends, failed with the
    /// refusal as its reason (the last error), after the refusal cap.
    @Test func aProviderThatRefusesEveryStreamStillEnds() throws {
        let fake = try FakePushServer(extraArguments: ["--refuse-all"])
        let (server, credentials) = try Self.server(fake, devices: [("i1", "ok-ios-1", .ios)])
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.maxAttempts = 2
        configuration.retryMaxSeconds = 0.1
        let worker = Self.startedWorker(server, credentials, configuration)
        defer { worker.stop() }
        let id = try Self.send(server)
        let status = try waitForCompletion(port: server.port, key: server.serverKey, id: id, timeout: 30)
        #expect(status["failedCount"] as? Int == 1)
        let reason = (status["failures"] as? [String: Int] ?? [:]).keys.first ?? ""
        #expect(reason.contains("refused") && reason.hasSuffix("after \(DeliveryWorker.maxRefusals) refusals"), "\(reason)")
        #expect(fake.requests().count == DeliveryWorker.maxRefusals)
    }

    /// One send to two Android devices and an iPhone, delivered with maxAttempts 3 while the
    /// fake's OAuth2 token endpoint answers 503 to its first `tokenFailures` exchanges.
    static func sendToTwoAndroidsAndAnIPhone(tokenFailures: Int) throws -> (FakePushServer, [String: Any]) {
        let fake = try FakePushServer(extraArguments: ["--token-fail", "\(tokenFailures)"])
        let (server, credentials) = try Self.server(fake, devices: [("a1", "ok-and-1", .android), ("a2", "ok-and-2", .android),
                                                                    ("i1", "ok-ios-1", .ios)])
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.maxAttempts = 3
        let worker = Self.startedWorker(server, credentials, configuration)
        defer { worker.stop() }
        return (fake, try waitForCompletion(port: server.port, key: server.serverKey, id: try Self.send(server), timeout: 30))
    }

    /// The OAuth2 token endpoint answers 503 twice: the exchange is tried again with the
    /// pushes' backoff (within maxAttempts), and the Android devices get their push.
    @Test func aTransientTokenEndpointFailureIsRetried() throws {
        let (fake, status) = try Self.sendToTwoAndroidsAndAnIPhone(tokenFailures: 2)
        #expect(status["sentCount"] as? Int == 3, "\(status["failures"] ?? "")")
        #expect(fake.requests().filter { $0.path == "/token" }.map(\.status) == [503, 503, 200])
    }

    /// A token endpoint that stays down: maxAttempts exchanges, then the Android devices fail
    /// with its answer as the reason; the iOS device is not held back.
    @Test func aTokenEndpointThatStaysDownFailsAndroidAfterMaxAttempts() throws {
        let (fake, status) = try Self.sendToTwoAndroidsAndAnIPhone(tokenFailures: 100)
        #expect(status["sentCount"] as? Int == 1 && status["failedCount"] as? Int == 2)
        let failures = status["failures"] as? [String: Int] ?? [:]
        #expect(failures.count == 1 && failures.keys.allSatisfy { $0.contains("HTTP 503") && $0.hasSuffix("after 3 attempts") }, "\(failures)")
        #expect(fake.requests().filter { $0.path == "/token" }.count == 3)
    }

    /// A stop while the FCM token exchange hangs (the endpoint never answers): the exchange is
    /// abandoned at once rather than after its 20 s limit, and the Android device is not counted
    /// failed — it is left to the next start.
    @Test func aStopCutsAHangingTokenExchangeShort() throws {
        let fake = try FakePushServer(extraArguments: ["--no-settings"])
        let (server, credentials) = try Self.server(fake, devices: [("a1", "ok-and-1", .android)])
        defer { server.stop() }
        var configuration = fake.deliveryConfiguration()
        configuration.requestTimeoutSeconds = 20
        let worker = Self.startedWorker(server, credentials, configuration)
        let id = try Self.send(server)
        usleep(500_000)
        let start = Date()
        worker.stop(grace: 0.5)
        #expect(Date().timeIntervalSince(start) < 3, "stopped after \(Date().timeIntervalSince(start)) s")
        let status = try server.send("GET", "/api/notifications/\(id)", key: server.serverKey).object ?? [:]
        #expect(status["status"] as? String == "processing")
        #expect(status["sentCount"] as? Int == 0 && status["failedCount"] as? Int == 0, "\(status)")
    }
}
