import Delivery
import Foundation
import Notifications
import Projections
import SubscriptionLog
import Testing
import TopicStore

/// End to end: POST /api/send over HTTP, delivery to the fake APNs/FCM over HTTP/2 + TLS,
/// status counts, rejected tokens in the log and out of the next audience, opens.
@Suite(.serialized) struct SendDeliveryTests {
    @Test func sendDeliversCountsAndFeedsRejectionsBack() throws {
        let fake = try FakePushServer()
        let server = try HTTPTestServer()
        defer { server.stop() }
        let store = server.store
        // iOS: ok, 410, BadDeviceToken, 429-then-ok, 500-then-ok; Android: ok, UNREGISTERED, INVALID_ARGUMENT, 429-then-ok, always 500.
        let devices: [(String, String, Platform, [String])] = [
            ("i1", "ok-ios-1", .ios, ["fall", "news"]), ("i2", "gone-ios-2", .ios, ["fall"]), ("i3", "bad-ios-3", .ios, ["fall", "news"]),
            ("i4", "busy-ios-4", .ios, ["fall"]), ("i5", "err-ios-5", .ios, ["news"]),
            ("a1", "ok-and-1", .android, ["fall", "news"]), ("a2", "unreg-and-2", .android, ["fall"]), ("a3", "invalid-and-3", .android, ["news"]),
            ("a4", "busy-and-4", .android, ["fall"]), ("a5", "down-and-5", .android, ["fall"]),
            ("n1", "", .ios, ["fall"]),  // no token: in the audience, not reachable
        ]
        var events: [Event] = []
        for (id, token, platform, topics) in devices {
            if !token.isEmpty { events.append(Event(project: "demo", body: .token(deviceID: id, token: token, platform: platform))) }
            events.append(Event(project: "demo", body: .register(deviceID: id, topics: topics.map { TopicSpec(code: $0) })))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }

        let (apnsCredentials, fcmCredentials) = try fake.credentials()
        let credentials = try CredentialStore(store: store)
        try credentials.setAPNs(apnsCredentials, project: "demo")
        try credentials.setFCM(fcmCredentials, project: "demo")
        var configuration = fake.deliveryConfiguration()
        configuration.maxAttempts = 3
        configuration.batchSize = 3  // several durable progress steps
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        worker.start()
        defer { worker.stop() }

        let body = "{\"topics\":[\"fall\",\"news\"],\"payload\":\(SendRenderingTests.richPayload)}"
        let accepted = try server.send("POST", "/api/send", key: server.serverKey, json: body)
        #expect(accepted.status == 200, "\(accepted.text)")
        let id = try #require(accepted.object?["notificationId"] as? String)
        #expect(accepted.object?["status"] as? String == "accepted")
        #expect(accepted.object?["message"] as? String == "Notification queued for processing")

        let status = try waitForCompletion(port: server.port, key: server.serverKey, id: id)
        #expect(status["totalDevices"] as? Int == 10)
        #expect(status["iosCount"] as? Int == 5)
        #expect(status["androidCount"] as? Int == 5)
        #expect(status["sentCount"] as? Int == 5)   // ok-ios-1, busy-ios-4, err-ios-5, ok-and-1, busy-and-4
        #expect(status["failedCount"] as? Int == 5)  // gone, bad, unreg, invalid, down
        #expect(status["rejectedTokens"] as? Int == 4)
        #expect(status["topics"] as? [String] == ["fall", "news"])
        #expect(status["priority"] as? String == "normal")
        #expect((status["completedAt"] as? Int ?? 0) >= (status["createdAt"] as? Int ?? .max))
        let failures = status["failures"] as? [String: Int] ?? [:]
        #expect(failures["Unregistered"] == 1 && failures["BadDeviceToken"] == 1 && failures["UNREGISTERED"] == 1 && failures["INVALID_ARGUMENT"] == 1)
        #expect(failures["500 INTERNAL after 3 attempts"] == 1, "\(failures)")
        #expect((status["notification"] as? [String: Any])?["title"] as? String == "A pastry on us")

        // Exact bytes on the wire, per platform, with the notification id as message_id.
        let requests = fake.requests()
        let apns = requests.filter { $0.path == "/3/device/ok-ios-1" }
        #expect(apns.count == 1)
        #expect(apns.first?.body == SendRenderingTests.richAPNs.replacingOccurrences(of: SendRenderingTests.id, with: id))
        #expect(apns.first?.headers["apns-topic"] == "com.example.app")
        #expect(apns.first?.headers["apns-push-type"] == "alert")
        #expect(apns.first?.headers["apns-priority"] == "10")
        let fcm = requests.filter { $0.path == "/v1/projects/fake-project/messages:send" && $0.body.contains("\"ok-and-1\"") }
        let data = SendRenderingTests.richFCM.replacingOccurrences(of: SendRenderingTests.id, with: id)
        #expect(fcm.first?.body == "{\"message\":{\"token\":\"ok-and-1\",\"data\":\(data),\"android\":{\"priority\":\"normal\"}}}")
        // Retries: 429 then 200 (Retry-After honoured), 500 then 200, always-500 tried maxAttempts times.
        #expect(requests.filter { $0.path == "/3/device/busy-ios-4" }.map(\.status) == [429, 200])
        #expect(requests.filter { $0.path == "/3/device/err-ios-5" }.map(\.status) == [500, 200])
        #expect(requests.filter { $0.body.contains("\"down-and-5\"") }.count == 3)
        #expect(requests.filter { $0.path == "/token" }.count == 1)  // the access token is reused
        // The no-token device was never pushed.
        #expect(!requests.contains { $0.path.hasSuffix("/3/device/") })

        // Rejected tokens are token-rejected events in the log; the next audience skips them.
        var rejected: [String: (Int64, String)] = [:]
        try store.read { txn in
            try store.log.forEach(from: 1, txn) { record in
                if case .tokenRejected(let token, let at, let reason) = record.event.body { rejected[token] = (at, reason) }
                return true
            }
        }
        #expect(Set(rejected.keys) == ["gone-ios-2", "bad-ios-3", "unreg-and-2", "invalid-and-3"])
        // The APNs 410 timestamp, not our clock.
        let gone = try #require(requests.first { $0.path == "/3/device/gone-ios-2" })
        let goneAt = (try? JSONSerialization.jsonObject(with: Data(gone.response.utf8)) as? [String: Any])?["timestamp"] as? Int64
        #expect(goneAt != nil && rejected["gone-ios-2"]?.0 == goneAt)
        #expect(rejected["gone-ios-2"]?.1 == "Unregistered")
        let count = try server.send("GET", "/v1/audience/count?topics=fall,news", key: server.serverKey)
        #expect(count.object?["ios"] as? Int == 3)
        #expect(count.object?["android"] as? Int == 3)
        let again = try server.send("POST", "/api/send", key: server.serverKey, json: #"{"topics":["fall","news"],"payload":{"body":"again"}}"#)
        let second = try waitForCompletion(port: server.port, key: server.serverKey, id: try #require(again.object?["notificationId"] as? String))
        #expect(second["totalDevices"] as? Int == 6)

        // Open tracking, once per (device, button).
        let open = try server.send("POST", "/api/notifications/\(id)/opens", key: server.clientKey, json: #"{"device_id":"i1"}"#)
        #expect(open.status == 200)
        _ = try server.send("POST", "/api/notifications/\(id)/opens", key: server.clientKey, json: #"{"device_id":"i1"}"#)
        _ = try server.send("POST", "/api/notifications/\(id)/opens", key: server.clientKey, json: #"{"device_id":"a1","button":"primary"}"#)
        let badButton = try server.send("POST", "/api/notifications/\(id)/opens", key: server.clientKey, json: #"{"device_id":"a1","button":"third"}"#)
        #expect(badButton.status == 422)
        let after = try server.send("GET", "/api/notifications/\(id)", key: server.serverKey)
        #expect(after.object?["opens"] as? Int == 1)
        #expect(after.object?["buttonOpens"] as? [String: Int] == ["primary": 1])
    }

    /// The per-project rate limit really paces pushes: after the burst, no faster than `perSecond`,
    /// and not much slower either. Without the limit these 80 pushes take a few milliseconds.
    @Test func rateLimitPacesPushes() throws {
        let fake = try FakePushServer()
        let server = try HTTPTestServer()
        defer { server.stop() }
        let n = 80
        var events: [Event] = []
        for i in 0..<n {
            let ios = i % 2 == 0
            events.append(Event(project: "demo", body: .token(deviceID: "r\(i)", token: "ok-rate-\(i)", platform: ios ? .ios : .android)))
            events.append(Event(project: "demo", body: .register(deviceID: "r\(i)", topics: [TopicSpec(code: "rate")])))
        }
        for r in server.store.submitAndWait(events) { _ = try r.get() }
        let (apnsCredentials, fcmCredentials) = try fake.credentials()
        let credentials = try CredentialStore(store: server.store)
        try credentials.setAPNs(apnsCredentials, project: "demo")
        try credentials.setFCM(fcmCredentials, project: "demo")
        var configuration = fake.deliveryConfiguration()
        let rate = 40.0, burst = 4
        try configuration.load(["rateLimit": ["perSecond": rate, "burst": burst]])  // as `serve --config` reads it
        #expect(configuration.ratePerSecond == rate && configuration.rateBurst == Double(burst))
        configuration.batchSize = 30  // the bucket carries across batches
        let worker = DeliveryWorker(queue: server.server.sendQueue, credentials: credentials, configuration: configuration, log: { _ in })
        worker.start()
        defer { worker.stop() }

        let accepted = try server.send("POST", "/api/send", key: server.serverKey, json: #"{"topics":["rate"],"payload":{"body":"paced"}}"#)
        let id = try #require(accepted.object?["notificationId"] as? String)
        let status = try waitForCompletion(port: server.port, key: server.serverKey, id: id)
        #expect(status["sentCount"] as? Int == n)

        let times = fake.requestTimes().filter { $0.path != "/token" }.map(\.t).sorted()
        try #require(times.count == n)
        // Token bucket: at most burst + rate·t pushes in any first t seconds. The times are the fake
        // provider's (another process): under a loaded machine it may record the first push 25 ms late
        // and the next ones at once, so 100 ms of its clock is allowed (4 pushes at 40/s).
        let t0 = times[0]
        let early = times.enumerated().first { k, t in Double(k + 1) > Double(burst) + rate * ((t - t0) * 1.1 + 0.1) + 1 }
        #expect(early == nil, "push \((early?.offset ?? 0) + 1) at +\((early?.element ?? t0) - t0) s: faster than \(rate)/s")
        // The paced part runs at the configured rate (slower only by scheduling noise).
        let paced = Double(n - burst - 1) / (times[n - 1] - times[burst])
        #expect(paced <= rate * 1.1, "\(paced) pushes/s against a limit of \(rate)")
        #expect(paced >= rate * 0.6, "\(paced) pushes/s: much slower than the limit of \(rate)")
    }

    /// Opens count only devices the notification was addressed to (its pinned audience):
    /// an unknown device, one outside the audience, one without a token at the send, or one
    /// that joined afterwards answers 200 with counted:false and leaves the counts alone.
    @Test func opensCountOnlyDevicesTheNotificationWasAddressedTo() throws {
        let server = try HTTPTestServer()
        defer { server.stop() }
        for (d, p) in [("i1", "ios"), ("a1", "android")] {
            #expect(try server.send("POST", "/api/tokens", key: server.clientKey, json: #"{"device_id":"\#(d)","token":"tok-\#(d)","platform":"\#(p)"}"#).status == 200)
        }
        #expect(try server.send("POST", "/api/register", key: server.clientKey, json: #"{"device_id":"i1","topics":["news"]}"#).status == 200)
        #expect(try server.send("POST", "/api/register", key: server.clientKey, json: #"{"device_id":"a1","topics":["sport"]}"#).status == 200)
        #expect(try server.send("POST", "/api/register", key: server.clientKey, json: #"{"device_id":"n1","topics":["news"]}"#).status == 200)  // no token
        let sent = try server.send("POST", "/api/send", key: server.serverKey,
                                   json: #"{"topics":["news"],"payload":{"body":"x","buttons":[{"id":"primary","label":"Go","action":"close"}]}}"#)
        let id = try #require(sent.object?["notificationId"] as? String, "\(sent.text)")
        #expect(sent.object?["totalDevices"] as? Int == 1)
        #expect(try server.send("POST", "/api/tokens", key: server.clientKey, json: #"{"device_id":"late","token":"tok-late","platform":"ios"}"#).status == 200)
        #expect(try server.send("POST", "/api/register", key: server.clientKey, json: #"{"device_id":"late","topics":["news"]}"#).status == 200)
        func open(_ json: String) throws -> RawResponse {
            try server.send("POST", "/api/notifications/\(id)/opens", key: server.clientKey, json: json)
        }
        for outsider in ["Q1", "a1", "n1", "late"] {
            for json in [#"{"device_id":"\#(outsider)"}"#, #"{"device_id":"\#(outsider)","button":"primary"}"#] {
                let r = try open(json)
                #expect(r.status == 200 && r.object?["counted"] as? Bool == false, "\(json): \(r.status) \(r.text)")
            }
        }
        let first = try open(#"{"device_id":"i1"}"#)
        #expect(first.status == 200 && first.object?["counted"] as? Bool == true, "\(first.text)")
        #expect(try open(#"{"device_id":"i1"}"#).object?["counted"] as? Bool == false)
        #expect(try open(#"{"device_id":"i1","button":"primary"}"#).object?["counted"] as? Bool == true)
        let status = try server.send("GET", "/api/notifications/\(id)", key: server.serverKey).object
        #expect(status?["opens"] as? Int == 1)
        #expect(status?["buttonOpens"] as? [String: Int] == ["primary": 1])
    }

    /// docs/http-api.md: an empty body is an empty object, so /api/send names its required fields in a 422.
    @Test func anEmptySendBodyNamesTheRequiredFields() throws {
        let server = try HTTPTestServer()
        defer { server.stop() }
        for headers in [[("Content-Type", "application/json")], [("Content-Type", "application/json; charset=utf-8")], []] {
            let r = try server.send("POST", "/api/send", key: server.serverKey, headers: headers)
            #expect(r.status == 422, "\(headers): \(r.status) \(r.text)")
            #expect(r.message == "The given data was invalid.")
            #expect(r.errorFields?["topics"] == ["The topics field is required."], "\(r.text)")
            #expect(r.errorFields?["payload.body"]?.first == "The payload.body field is required.", "\(r.text)")
        }
        // Whitespace only is empty too; a form is still refused (send takes JSON).
        #expect(try server.send("POST", "/api/send", key: server.serverKey, json: " \r\n").status == 422)
        #expect(try server.send("POST", "/api/send", key: server.serverKey, form: "topics=all").status == 400)
    }

    /// /api/send validation: one message per problem, unknown top-level keys refused like
    /// unknown payload keys, an empty body string is no body (the MPush table: a required string).
    @Test func sendValidationIsOneMessagePerProblem() throws {
        let server = try HTTPTestServer()
        defer { server.stop() }
        func errors(_ json: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: [String]] {
            let r = try server.send("POST", "/api/send", key: server.serverKey, json: json)
            #expect(r.status == 422, "\(json): \(r.status) \(r.text)", sourceLocation: sourceLocation)
            #expect(r.message == "The given data was invalid.", sourceLocation: sourceLocation)
            return r.errorFields ?? [:]
        }
        #expect(try errors("") == ["topics": ["The topics field is required."], "payload.body": ["The payload.body field is required."]])
        // No payload: payload.body once.
        #expect(try errors(#"{"topics":["all"]}"#) == ["payload.body": ["The payload.body field is required."]])
        // A body of the wrong type is one problem, not two.
        #expect(try errors(#"{"topics":["all"],"payload":{"body":5}}"#) == ["payload.body": ["The payload.body must be a string."]])
        #expect(try errors(#"{"topics":["all"],"payload":{"loc_key":7}}"#) == ["payload.loc_key": ["The payload.loc_key must be a string."]])
        // The MPush table makes body a required string: an empty one is no body.
        #expect(try errors(#"{"topics":["all"],"payload":{"body":""}}"#) == ["payload.body": ["The payload.body field is required."]])
        #expect(try errors(#"{"topics":["all"],"payload":{"body":"","loc_key":""}}"#) == ["payload.body": ["The payload.body field is required."]])
        // Unknown top-level keys are refused; priority belongs in the payload.
        #expect(try errors(#"{"topics":["all"],"priority":"high","payload":{"body":"x"}}"#)
                == ["priority": ["The priority field is not a send field: a send takes topics (or expr) and payload; priority goes in payload.priority."]])
        #expect(try errors(#"{"topics":["all"],"colour":"red","payload":{"body":"x"}}"#)
                == ["colour": ["The colour field is not a send field: a send takes topics (or expr) and payload."]])
        // Valid JSON nested too deeply is said as such, not as invalid JSON.
        let deep = try server.send("POST", "/api/send", key: server.serverKey,
                                   json: #"{"topics":["all"],"payload":{"body":"x","custom":{"a":"# + String(repeating: "[", count: 70) + String(repeating: "]", count: 70) + "}}}")
        #expect(deep.status == 400 && deep.message == "The request body is nested more than 64 levels deep.", "\(deep.text)")
        #expect(try errors(#"{"topics":["all"],"payload":{"body":"x","collapse_id":""}}"#)
                == ["payload.collapse_id": ["The payload.collapse_id must be an integer or a non-empty string."]])
        // What the spec lists still works: a loc_key without body, and expr as our extension.
        #expect(try server.send("POST", "/api/send", key: server.serverKey, json: #"{"topics":["all"],"payload":{"loc_key":"K"}}"#).status == 200)
        #expect(try server.send("POST", "/api/send", key: server.serverKey, json: #"{"expr":"all","payload":{"body":"x","priority":"high"}}"#).status == 200)
    }

    @Test func sendValidationAndAccess() throws {
        let server = try HTTPTestServer()
        defer { server.stop() }
        let client = try server.send("POST", "/api/send", key: server.clientKey, json: #"{"topics":["all"],"payload":{"body":"x"}}"#)
        #expect(client.status == 403)
        let noBody = try server.send("POST", "/api/send", key: server.serverKey, json: #"{"topics":["all"],"payload":{"title":"x"}}"#)
        #expect(noBody.status == 422)
        #expect(noBody.errorFields?["payload.body"] == ["The payload.body field is required."])
        let big = String(repeating: "é", count: 1100)
        let tooBig = try server.send("POST", "/api/send", key: server.serverKey,
                                     json: "{\"topics\":[\"all\"],\"payload\":{\"body\":\"\(big)\",\"title\":\"\(big.prefix(1000))\"}}")
        #expect(tooBig.status == 422)
        let message = tooBig.errorFields?["payload"]?.first ?? ""
        #expect(message.contains("over the 4096-byte limit"), "\(tooBig.text)")
        let missing = try server.send("GET", "/api/notifications/00000000-0000-0000-0000-000000000000", key: server.serverKey)
        #expect(missing.status == 404)
        // Nobody subscribed: completed at once with zero devices.
        let empty = try server.send("POST", "/api/send", key: server.serverKey, json: #"{"expr":"nobody AND NOT devices:all","payload":{"body":"x"}}"#)
        #expect(empty.status == 200, "\(empty.text)")
        #expect(empty.object?["unknownTopics"] as? [String] == ["nobody"], "\(empty.text)")
        let status = try server.send("GET", "/api/notifications/\(empty.object?["notificationId"] as? String ?? "")", key: server.serverKey)
        #expect(status.object?["status"] as? String == "completed")
        #expect(status.object?["totalDevices"] as? Int == 0)
    }
}
