@testable import Delivery
import Foundation
import Notifications
import Testing

/// The push engine (nghttp2 over OpenSSL) against the Python fake: what the delivery worker relies
/// on beyond the answers themselves — TLS verification, the server's stream limit, GOAWAY and
/// reconnection, timeouts. The answers and their meaning are covered end to end by SendDeliveryTests.
@Suite(.serialized) struct HTTP2EngineTests {
    /// APNs requests to the fake for `tokens`, with a valid provider token.
    static func apnsRequests(_ fake: FakePushServer, tokens: [String]) throws -> [HTTP2Engine.Request] {
        let (apnsCredentials, _) = try fake.credentials()
        let provider = try APNsProvider(credentials: apnsCredentials, configuration: fake.deliveryConfiguration())
        let content = try NotificationContent(payload: try JSONParser.parse(Array(#"{"body":"hi"}"#.utf8)))
        let headers = try provider.headers(for: content)
        let body = HTTP2Engine.SharedBody(Array(#"{"aps":{"alert":{"body":"hi"}}}"#.utf8))
        return tokens.enumerated().map { i, t in
            HTTP2Engine.Request(headers: headers, path: .token(prefix: provider.pathPrefix, token: t), body: .shared(body), tag: i)
        }
    }

    /// Runs `requests`; transport failures (status 0) are retried up to `attempts` times. The last response per tag.
    static func run(_ engine: HTTP2Engine, _ requests: [HTTP2Engine.Request], maxInFlight: Int = 100,
                    attempts: Int = 1) -> [Int: HTTP2Engine.Response] {
        var index = 0
        var responses: [Int: HTTP2Engine.Response] = [:]
        engine.run(maxInFlight: maxInFlight, next: {
            defer { index += 1 }
            return index < requests.count ? requests[index] : nil
        }, gate: { 0 }, completion: { request, response in
            responses[request.tag] = response
            if response.status == 0 && request.attempt + 1 < attempts {
                var again = request
                again.attempt += 1
                return .retry(again, delay: 0.01)
            }
            return .done
        })
        return responses
    }

    /// `run` on a thread of its own, so a run that never ends fails the test instead of hanging it:
    /// nil when it has not returned within `seconds` (the thread is left behind).
    static func run(within seconds: Double, _ engine: HTTP2Engine, _ requests: [HTTP2Engine.Request],
                    attempts: Int = 1) -> [Int: HTTP2Engine.Response]? {
        final class Box: @unchecked Sendable {
            let engine: HTTP2Engine, requests: [HTTP2Engine.Request], attempts: Int
            var result: [Int: HTTP2Engine.Response]?
            let done = DispatchSemaphore(value: 0)
            init(_ e: HTTP2Engine, _ r: [HTTP2Engine.Request], _ a: Int) { engine = e; requests = r; attempts = a }
        }
        let box = Box(engine, requests, attempts)
        Thread { box.result = HTTP2EngineTests.run(box.engine, box.requests, attempts: box.attempts); box.done.signal() }.start()
        return box.done.wait(timeout: .now() + seconds) == .success ? box.result : nil
    }

    @Test func answersStatusesBodiesAndRetryAfter() throws {
        let fake = try FakePushServer(log: false)
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 2)
        let r = Self.run(engine, try Self.apnsRequests(fake, tokens: ["ok1", "gone1", "bad1", "busy1", "down1"]))
        #expect(r[0]?.status == 200 && r[0]?.error == nil)
        #expect(r[1]?.status == 410)
        let gone = try JSONParser.parse(r[1]?.body ?? [])
        #expect(gone["reason"]?.stringValue == "Unregistered" && (gone["timestamp"]?.integer() ?? 0) > 1_700_000_000_000)
        #expect(r[2]?.status == 400 && String(decoding: r[2]?.body ?? [], as: UTF8.self) == #"{"reason":"BadDeviceToken"}"#)
        #expect(r[3]?.status == 429 && r[3]?.retryAfter == "1")
        #expect(r[4]?.status == 500)
        // Classified as the worker sees them.
        #expect(APNsProvider.classify(r[3]!) == .retry(after: 1, reason: "429 TooManyRequests"))
        // The connections stay for the next run.
        let again = Self.run(engine, try Self.apnsRequests(fake, tokens: ["ok2"]))
        #expect(again[0]?.status == 200)
        #expect(engine.connectionsOpened <= 2)
    }

    /// A rejection without the provider's timestamp (APNs BadDeviceToken, FCM UNREGISTERED) is
    /// dated when the push was sent: a device registering again while the answer is on its way
    /// registered after the rejection and must stay live.
    @Test func rejectionsWithoutATimestampAreDatedWhenSent() throws {
        let fake = try FakePushServer(delayMs: 400, log: false)
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1)
        let before = HTTP2Engine.wallMillis()
        let r = Self.run(engine, try Self.apnsRequests(fake, tokens: ["bad1"]))
        let after = HTTP2Engine.wallMillis()
        #expect(after - before >= 400)
        guard case .rejected(let at, "BadDeviceToken")? = r[0].map(APNsProvider.classify) else {
            Issue.record("not a rejection: \(String(describing: r[0]))"); return
        }
        #expect(at >= before && at < before + 300, "dated \(at - before) ms after the send began, answered after \(after - before) ms")
    }

    @Test func refusesAServerItCannotVerify() throws {
        let fake = try FakePushServer(log: false)
        // Another CA than the one that signed the fake's certificate.
        let other = try FakePushServer(log: false)
        let engine = HTTP2Engine(caFile: other.caFile, connectionsPerHost: 1)
        let r = Self.run(engine, try Self.apnsRequests(fake, tokens: ["ok1", "ok2"]))
        for i in 0..<2 {
            #expect(r[i]?.status == 0)
            #expect(r[i]?.error?.contains("TLS handshake") == true, "\(r[i]?.error ?? "nil")")
        }
        #expect(APNsProvider.classify(r[0]!) == .retry(after: nil, reason: "transport: \(r[0]!.error!)"))
        // With the right CA the same requests go through.
        let good = Self.run(HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1), try Self.apnsRequests(fake, tokens: ["ok1"]))
        #expect(good[0]?.status == 200)
    }

    @Test func keepsToTheServersStreamLimit() throws {
        // The fake allows 3 streams and answers each after 150 ms. The engine must hold the other
        // requests itself — a request's timeout (0.6 s) counts from when it is sent, so all 18 get
        // their 200. Handed to nghttp2 at once they would queue there, and the last would time out
        // before they were ever sent (6 rounds × 150 ms).
        let fake = try FakePushServer(delayMs: 150, extraArguments: ["--max-streams", "3"])
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1, timeoutSeconds: 0.6)
        let tokens = (0..<18).map { "ok\($0)" }
        let r = Self.run(engine, try Self.apnsRequests(fake, tokens: tokens), maxInFlight: 50)
        #expect(r.count == 18)
        #expect(r.values.allSatisfy { $0.status == 200 }, "\(r.values.compactMap(\.error))")
        #expect(engine.connectionsOpened == 1)
        #expect(fake.requests().count == 18)
    }

    @Test func reconnectsAfterGoaway() throws {
        // The fake answers 7 requests per connection, then sends GOAWAY and closes: the streams it
        // did not take close refused and are retried on a new connection; nothing is lost.
        let fake = try FakePushServer(extraArguments: ["--goaway-after", "7"])
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1)
        let tokens = (0..<50).map { "ok\($0)" }
        let r = Self.run(engine, try Self.apnsRequests(fake, tokens: tokens), maxInFlight: 20, attempts: 10)
        #expect(r.count == 50)
        #expect(r.values.allSatisfy { $0.status == 200 }, "\(r.values.filter { $0.status != 200 }.map { $0.error ?? "" })")
        #expect(engine.connectionsOpened >= 50 / 7)
        // Each device answered once: refused streams were never processed by the fake.
        let paths = fake.requests().map(\.path)
        #expect(Set(paths).count == 50)
    }

    @Test func survivesConnectionsResetMidWrite() throws {
        // The fake closes each connection (no GOAWAY) after 5 answers while the engine is still
        // writing 32 KiB bodies: the writes and reads fail, the streams fail as transport errors,
        // and the retries on new connections get every answer.
        let fake = try FakePushServer(log: false, extraArguments: ["--close-after", "5"])
        let base = try Self.apnsRequests(fake, tokens: (0..<40).map { "ok\($0)" })
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 32 << 10)
        let requests = base.map { r in HTTP2Engine.Request(headers: r.headers, path: r.path, body: .owned(big), tag: r.tag) }
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1)
        var failures = 0
        var index = 0
        var answered: [Int: Int] = [:]
        engine.run(maxInFlight: 40, next: {
            defer { index += 1 }
            return index < requests.count ? requests[index] : nil
        }, gate: { 0 }, completion: { request, response in
            answered[request.tag] = response.status
            guard response.status == 0, request.attempt < 50 else { return .done }
            failures += 1
            var again = request
            again.attempt += 1
            return .retry(again, delay: 0.01)
        })
        #expect(answered.count == 40 && answered.values.allSatisfy { $0 == 200 }, "\(answered.values.sorted())")
        #expect(failures > 0 && engine.connectionsOpened > 1)
    }

    @Test func timesOutASlowServer() throws {
        let fake = try FakePushServer(delayMs: 3000, log: false)
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1, timeoutSeconds: 0.3)
        let start = Date()
        let r = Self.run(engine, try Self.apnsRequests(fake, tokens: ["ok1", "ok2"]))
        #expect(Date().timeIntervalSince(start) < 2.5)
        #expect(r[0]?.status == 0 && r[0]?.error?.contains("timeout") == true, "\(r[0]?.error ?? "nil")")
        #expect(r[1]?.status == 0)
    }

    /// A server that completes TLS (ALPN h2) and then says nothing, not even its SETTINGS: the
    /// connection is given the connecting-and-TLS limit (here the 1 s request timeout, at most
    /// 10 s) to send them, then fails its pushes like a connection that could not be made.
    @Test func failsAConnectionThatNeverSendsSettings() throws {
        let fake = try FakePushServer(log: false, extraArguments: ["--no-settings"])
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 2, timeoutSeconds: 1)
        let start = Date()
        let r = try #require(Self.run(within: 8, engine, try Self.apnsRequests(fake, tokens: ["ok1", "ok2", "ok3"])),
                             "the run never ended: the pushes wait for SETTINGS forever")
        #expect(Date().timeIntervalSince(start) < 4)
        #expect(r.count == 3)
        for (_, response) in r {
            #expect(response.status == 0 && response.error?.contains("SETTINGS") == true, "\(response.error ?? "nil")")
        }
    }

    /// A server whose SETTINGS allow no stream at all (SETTINGS_MAX_CONCURRENT_STREAMS 0, never
    /// raised): a push waiting for a stream fails as a timeout once the host has allowed none
    /// for the request timeout (keepsToTheServersStreamLimit: waiting while others are answered is fine).
    @Test func failsPushesWhenTheServerAllowsNoStream() throws {
        let fake = try FakePushServer(log: false, extraArguments: ["--max-streams", "0"])
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1, timeoutSeconds: 1)
        let start = Date()
        let r = try #require(Self.run(within: 8, engine, try Self.apnsRequests(fake, tokens: ["ok1", "ok2", "ok3"])),
                             "the run never ended: the pushes wait for a stream forever")
        #expect(Date().timeIntervalSince(start) < 4)
        #expect(r.count == 3)
        for (_, response) in r {
            #expect(response.status == 0 && response.error?.contains("timeout") == true, "\(response.error ?? "nil")")
            #expect(APNsProvider.classify(response) == .retry(after: nil, reason: "transport: \(response.error ?? "")"))
        }
    }

    /// Asked to stop, a run starts nothing more and lets the streams in flight finish within the
    /// grace: one push at a time, answered after 0.4 s, stop asked after 0.1 s with 3 s of grace —
    /// the first push is answered, the other two are never sent, and the run says it did not finish.
    @Test func stopsStartingNewPushesAndLetsTheInFlightOnesFinish() throws {
        let fake = try FakePushServer(delayMs: 400)
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1)
        let requests = try Self.apnsRequests(fake, tokens: ["ok1", "ok2", "ok3"])
        let start = HTTP2Engine.seconds()
        var index = 0
        var answered: [Int: Int] = [:]
        let finished = engine.run(maxInFlight: 1, next: {
            defer { index += 1 }
            return index < requests.count ? requests[index] : nil
        }, gate: { 0 }, stopAt: { HTTP2Engine.seconds() - start > 0.1 ? start + 3 : nil }, completion: { request, response in
            answered[request.tag] = response.status
            return .done
        })
        #expect(!finished)
        #expect(HTTP2Engine.seconds() - start < 1.5)
        #expect(answered == [0: 200])
        #expect(fake.requests().map(\.path) == ["/3/device/ok1"])
    }

    /// Streams still unanswered when the grace is over are given up: not completed (the caller
    /// pushes them again another time), and nothing is retried after the stop.
    @Test func givesUpTheStreamsInFlightWhenTheGraceIsOver() throws {
        let fake = try FakePushServer(delayMs: 5000, log: false)
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 1)
        let requests = try Self.apnsRequests(fake, tokens: ["ok1", "ok2"])
        let start = HTTP2Engine.seconds()
        var index = 0
        var completions = 0
        let finished = engine.run(maxInFlight: 10, next: {
            defer { index += 1 }
            return index < requests.count ? requests[index] : nil
        }, gate: { 0 }, stopAt: { HTTP2Engine.seconds() - start > 0.1 ? start + 0.6 : nil }, completion: { _, _ in
            completions += 1
            return .done
        })
        #expect(!finished)
        let elapsed = HTTP2Engine.seconds() - start
        #expect(elapsed >= 0.55 && elapsed < 1.5, "\(elapsed) s")
        #expect(completions == 0)
    }

    @Test func failsFastWhenNothingListens() throws {
        // A port with no server: connection refused, reported per request, and the run ends.
        let fake = try FakePushServer(log: false)
        let port = fake.port
        let requests = try Self.apnsRequests(fake, tokens: ["ok1", "ok2", "ok3"])
        fake.stop()
        let engine = HTTP2Engine(caFile: fake.caFile, connectionsPerHost: 2)
        let r = Self.run(engine, requests, attempts: 3)
        #expect(r.count == 3)
        #expect(r.values.allSatisfy { $0.status == 0 && $0.error?.contains("127.0.0.1:\(port)") == true })
    }

    @Test func speaksCleartextHTTP2ForHTTPURLs() throws {
        let fake = try FakePushServer(extraArguments: ["--plain"])
        var configuration = fake.deliveryConfiguration()
        configuration.apnsProductionURL = "http://127.0.0.1:\(fake.port)"
        let (apnsCredentials, _) = try fake.credentials()
        var credentials = apnsCredentials
        credentials.sandbox = false
        let provider = try APNsProvider(credentials: credentials, configuration: configuration)
        let content = try NotificationContent(payload: try JSONParser.parse(Array(#"{"body":"hi"}"#.utf8)))
        let body = HTTP2Engine.SharedBody(Array(#"{"aps":{"alert":{"body":"hi"}}}"#.utf8))
        let request = HTTP2Engine.Request(headers: try provider.headers(for: content),
                                          path: .token(prefix: provider.pathPrefix, token: "gone1"), body: .shared(body), tag: 0)
        let r = Self.run(HTTP2Engine(caFile: nil, connectionsPerHost: 1), [request])
        #expect(r[0]?.status == 410, "\(r[0]?.error ?? "nil")")
        #expect(fake.requests().first?.path == "/3/device/gone1")
    }

    @Test func parsesEndpoints() {
        let (e, base) = HTTP2Engine.Endpoint.parse("https://api.push.apple.com")!
        #expect(e == HTTP2Engine.Endpoint(tls: true, host: "api.push.apple.com", port: 443) && base == "" && e.authority == "api.push.apple.com")
        let (f, fbase) = HTTP2Engine.Endpoint.parse("http://127.0.0.1:8443/prefix/")!
        #expect(!f.tls && f.port == 8443 && fbase == "/prefix" && f.authority == "127.0.0.1:8443")
        let (g, _) = HTTP2Engine.Endpoint.parse("https://[::1]:9000")!
        #expect(g.host == "::1" && g.port == 9000 && g.authority == "[::1]:9000")
        #expect(HTTP2Engine.Endpoint.parse("ftp://x") == nil)
        #expect(HTTP2Engine.Endpoint.parse("https://host:notaport") == nil)
    }
}
