@testable import Delivery
import Foundation
import Notifications
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// Notifications of different projects go out side by side on the worker's lanes: one tenant's
/// token endpoint that never answers, or its rate limit, held up every other tenant's sends when
/// one thread delivered everything (a tenant review waited 123 s behind a hanging token_uri).
@Suite(.serialized) struct SendLanesTests {
    /// A TCP port that accepts connections (the kernel's backlog) and never answers.
    final class SilentListener {
        let fd: Int32
        let port: UInt16
        init() throws {
            let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard bound == 0, listen(s, 16) == 0 else { close(s); throw POSIXError(.EADDRINUSE) }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &length) } }
            fd = s
            port = UInt16(bigEndian: address.sin_port)
        }
        deinit { close(fd) }
    }

    static func events(_ project: String, _ devices: [(String, String, Platform)]) -> [Event] {
        devices.flatMap { id, token, platform in
            [Event(project: project, body: .token(deviceID: id, token: token, platform: platform)),
             Event(project: project, body: .register(deviceID: id, topics: [TopicSpec(code: "t")]))]
        }
    }

    static func enqueue(_ server: HTTPTestServer, _ project: String) throws -> String {
        let payload = try JSONParser.parse(Array(#"{"body":"hi"}"#.utf8))
        return try server.server.sendQueue.enqueue(project: project, topics: ["t"], expression: try #require(AudienceExpression.anyOf(["t"])), exprText: nil, payload: payload).record.id
    }

    /// Waits until notification `id` is completed; the seconds it took from now.
    static func completion(_ server: HTTPTestServer, _ id: String, timeout: Double = 30) throws -> Double {
        let start = Date()
        while Date().timeIntervalSince(start) < timeout {
            if try server.server.sendQueue.record(id: id)?.status == .completed { return Date().timeIntervalSince(start) }
            usleep(20_000)
        }
        return .infinity
    }

    @Test func aHangingTokenEndpointHoldsUpOnlyItsOwnProject() throws {
        let fake = try FakePushServer()
        let silent = try SilentListener()
        let server = try HTTPTestServer()
        defer { server.stop() }
        for r in server.store.submitAndWait(Self.events("gamma", [("g1", "ok-and-1", .android)]) + Self.events("beta", [("b1", "ok-ios-1", .ios)])) {
            _ = try r.get()
        }
        let (apnsCredentials, _) = try fake.credentials()
        var account = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: fake.serviceAccountFile))) as? [String: Any])
        account["token_uri"] = "http://127.0.0.1:\(silent.port)/token"
        let credentials = try CredentialStore(store: server.store)
        try credentials.setFCM(try FCMCredentials(serviceAccountJSON: try JSONSerialization.data(withJSONObject: account)), project: "gamma")
        try credentials.setAPNs(apnsCredentials, project: "beta")
        var configuration = fake.deliveryConfiguration()
        configuration.requestTimeoutSeconds = 3
        configuration.maxAttempts = 2  // gamma's exchange: two tries of 3 s and a backoff
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        worker.start()
        defer { worker.stop() }
        let gamma = try Self.enqueue(server, "gamma")
        usleep(200_000)  // gamma's lane is in its token exchange
        let beta = try Self.enqueue(server, "beta")
        let betaTook = try Self.completion(server, beta)
        #expect(betaTook < 2.5, "beta's send waited \(betaTook) s")
        #expect(try server.server.sendQueue.record(id: gamma)?.status != .completed, "gamma's exchange ended before beta's push")
        let gammaTook = try Self.completion(server, gamma)
        #expect(gammaTook < 30)
        let status = try #require(try server.server.sendQueue.record(id: gamma))
        #expect(status.failedCount == 1 && status.failures.keys.first?.contains("after 2 attempts") == true, "\(status.failures)")
        #expect(try server.server.sendQueue.record(id: beta)?.sentCount == 1)
    }

    @Test func oneProjectsRateLimitDoesNotPaceAnother() throws {
        let fake = try FakePushServer()
        let server = try HTTPTestServer()
        defer { server.stop() }
        let many = (0..<60).map { ("a\($0)", "ok-ios-a\($0)", Platform.ios) }
        for r in server.store.submitAndWait(Self.events("alpha", many) + Self.events("beta", [("b1", "ok-ios-b1", .ios)])) { _ = try r.get() }
        let (apnsCredentials, _) = try fake.credentials()
        let credentials = try CredentialStore(store: server.store)
        for p in ["alpha", "beta"] { try credentials.setAPNs(apnsCredentials, project: p) }
        var configuration = fake.deliveryConfiguration()
        configuration.ratePerSecond = 20  // alpha's 60 pushes take about 3 s
        configuration.rateBurst = 1
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        worker.start()
        defer { worker.stop() }
        let alpha = try Self.enqueue(server, "alpha")
        let alphaAgain = try Self.enqueue(server, "alpha")
        usleep(100_000)
        let beta = try Self.enqueue(server, "beta")
        let betaTook = try Self.completion(server, beta)
        #expect(betaTook < 1.5, "beta's send waited \(betaTook) s")
        // A project's notifications still go out one after the other, oldest first.
        _ = try Self.completion(server, alphaAgain)
        let first = try #require(try server.server.sendQueue.record(id: alpha)), second = try #require(try server.server.sendQueue.record(id: alphaAgain))
        #expect(first.sentCount == 60 && second.sentCount == 60)
        #expect(try #require(first.completedAt) <= (try #require(second.completedAt)))
        let times = fake.requestTimes().filter { $0.path.hasPrefix("/3/device/ok-ios-a") }.map(\.t)
        #expect(times.count == 120)
        // Paced as one project: 120 pushes at 20/s take about 6 s, not 3 (two lanes would share nothing).
        #expect((times.max() ?? 0) - (times.min() ?? 0) > 4.5, "\(times.min() ?? 0)…\(times.max() ?? 0)")
    }
}
