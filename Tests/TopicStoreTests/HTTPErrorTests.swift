import MPushAPI
import Foundation
import Testing

/// Every error comes back as a JSON object in the MPush shapes.
@Suite("HTTP error shapes")
struct HTTPErrorTests {
    func expectJSONError(_ r: RawResponse, _ status: Int, _ message: String? = nil,
                         sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(r.status == status, "\(r.status) \(r.text)", sourceLocation: sourceLocation)
        #expect(r.header("Content-Type") == "application/json", sourceLocation: sourceLocation)
        #expect(r.object != nil, "not a JSON object: \(r.text)", sourceLocation: sourceLocation)
        #expect(r.object?["status_code"] == nil, sourceLocation: sourceLocation)
        if let message { #expect(r.message == message, sourceLocation: sourceLocation) }
        else { #expect(!(r.message ?? "").isEmpty, sourceLocation: sourceLocation) }
    }

    @Test func authenticationErrors() throws {
        let t = try HTTPTestServer()
        let body = #"{"device_id":"D1","token":"t","platform":"ios"}"#
        expectJSONError(try t.send("POST", "/api/tokens", json: body), 401, "The project token is not present.")
        expectJSONError(try t.send("POST", "/api/tokens", key: "", json: body), 401, "The project token is not present.")
        expectJSONError(try t.send("POST", "/api/tokens", key: "tsc_not_a_real_key_at_all", json: body), 401)
        // The key is read from X-MPush-Token only, not from Authorization.
        expectJSONError(try t.send("POST", "/api/tokens", headers: [("Authorization", "Bearer \(t.clientKey)")], json: body), 401)
        // A client key on every server endpoint.
        for (method, path) in [("GET", "/v1/audience/count?topics=a"), ("GET", "/v1/audience?topics=a"), ("GET", "/v1/topics"),
                               ("GET", "/v1/devices/D1"), ("POST", "/v1/feedback")] {
            expectJSONError(try t.send(method, path, key: t.clientKey, json: method == "POST" ? "{}" : nil), 403, "This action is unauthorized.")
        }
        #expect(try t.device("D1") == nil)
    }

    @Test func validationErrors() throws {
        let t = try HTTPTestServer()
        func check(_ path: String, _ json: String, fields: [String], sourceLocation: SourceLocation = #_sourceLocation) throws {
            let r = try t.send("POST", path, key: t.clientKey, json: json)
            expectJSONError(r, 422, "The given data was invalid.", sourceLocation: sourceLocation)
            let errors = r.errorFields ?? [:]
            #expect(Set(errors.keys) == Set(fields), "\(r.text)", sourceLocation: sourceLocation)
            #expect(errors.values.allSatisfy { !$0.isEmpty }, sourceLocation: sourceLocation)
        }
        try check("/api/tokens", "{}", fields: ["device_id", "token", "platform"])
        try check("/api/tokens", #"{"device_id":"D","token":"t","platform":"windows"}"#, fields: ["platform"])
        try check("/api/tokens", #"{"device_id":7,"token":"t","platform":"ios"}"#, fields: ["device_id"])
        try check("/api/register", #"{"device_id":"D"}"#, fields: ["topics"])
        try check("/api/register", #"{"device_id":"D","topics":[]}"#, fields: ["topics"])
        try check("/api/register", #"{"device_id":"D","topics":"not json"}"#, fields: ["topics"])
        try check("/api/register", #"{"device_id":"D","topics":[{"code":"ok"},{"code":"bad code"}]}"#, fields: ["topics.1.code"])
        try check("/api/register", #"{"device_id":"D","topics":[{"code":"a","single":"maybe"}]}"#, fields: ["topics.0.single"])
        try check("/api/unregister", #"{"topics":["a"]}"#, fields: ["device_id"])
        try check("/api/unregister-all", #"{}"#, fields: ["device_id"])
        // An empty body is an empty object: every required field is named.
        let empty = try t.client().request("POST", "/api/unregister-all", headers: [("X-MPush-Token", t.clientKey)])
        expectJSONError(empty, 422, "The given data was invalid.")
        #expect(t.store.commitCounters.commands == 0)
    }

    /// Titles are counted as MPush counts them (Laravel `max:256`, `mb_strlen`): in code points.
    /// Counted in characters, an "e" carrying 32,768 combining accents was one character of
    /// 65,537 bytes, more than a log record's field holds: the server died (SIGILL) on it.
    @Test func titlesAreCountedInCodePoints() throws {
        let t = try HTTPTestServer()
        func title(marks: Int) -> String { "e" + String(repeating: "\u{301}", count: marks) }
        func register(_ title: String) throws -> RawResponse {
            let body = try JSONSerialization.data(withJSONObject: ["device_id": "Z1", "topics": [["code": "zalgo", "title": title]]])
            return try t.send("POST", "/api/register", key: t.clientKey, json: String(decoding: body, as: UTF8.self))
        }
        func expectRefused(_ r: RawResponse, sourceLocation: SourceLocation = #_sourceLocation) {
            expectJSONError(r, 422, "The given data was invalid.", sourceLocation: sourceLocation)
            #expect(r.errorFields == ["topics.0.title": ["The title may not be greater than 256 characters."]], "\(r.text)",
                    sourceLocation: sourceLocation)
        }
        // One character of 256 code points is a title of 256; one of 257 is refused as 257 letters are.
        #expect(try register(title(marks: 255)).status == 200)
        expectRefused(try register(title(marks: 256)))
        expectRefused(try register(String(repeating: "a", count: 257)))
        // 65,537 bytes, as JSON and as a form: refused, and the server answers the next request.
        expectRefused(try register(title(marks: 32_768)))
        #expect(try t.send("GET", "/healthz").status == 200)
        let encoded = title(marks: 32_768).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        expectRefused(try t.send("POST", "/api/register", key: t.clientKey,
                                 form: "device_id=Z1&topics[0][code]=zalgo&topics[0][title]=\(encoded)"))
        #expect(try t.send("GET", "/healthz").status == 200)
        let topics = try t.send("GET", "/v1/topics", key: t.serverKey).object?["topics"] as? [[String: Any]] ?? []
        #expect(topics.count == 1 && topics.first?["title"] as? String == title(marks: 255))
        #expect(t.store.commitCounters.commands == 1)
    }

    @Test func malformedBodies() throws {
        let t = try HTTPTestServer()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        let c = try t.client()
        for body: [UInt8] in [Array(#"{"device_id":"D1","topics":["a""#.utf8),   // truncated
                              Array("{device_id: D1}".utf8),                         // not JSON
                              Array(#"["D1"]"#.utf8),                                // not an object
                              [0x7B, 0x22, 0x64, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D],  // not UTF-8
                              // not UTF-8 in a body of the plain shape read in one pass
                              Array(#"{"device_id":"D"#.utf8) + [0xFF] + Array(#"","topics":["news"]}"#.utf8)] {
            expectJSONError(try c.request("POST", "/api/register", headers: h, body: body), 400)
        }
        // Valid JSON that is not an object is named as such, not as invalid JSON.
        for body in ["null", #""str""#, "42", "[1,2]"] {
            let r = try c.request("POST", "/api/register", headers: h, text: body)
            expectJSONError(r, 400)
            #expect(r.text.contains("must be a JSON object"), "\(body): \(r.text)")
        }
        // Not UTF-8 in a form body either.
        expectJSONError(try c.request("POST", "/api/register",
                                      headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-MPush-Token", t.clientKey)],
                                      body: Array("device_id=%FF%FE&topics=a".utf8)), 400)
        expectJSONError(try c.request("POST", "/api/register",
                                      headers: [("Content-Type", "multipart/form-data; boundary=x"), ("X-MPush-Token", t.clientKey)],
                                      text: "--x--"), 400)
        #expect(t.store.commitCounters.commands == 0)
    }

    @Test func routingErrors() throws {
        let t = try HTTPTestServer()
        expectJSONError(try t.send("GET", "/nothing/here"), 404)
        expectJSONError(try t.send("POST", "/api/register/extra", key: t.clientKey, json: "{}"), 404)
        let wrongMethod = try t.send("GET", "/api/register", key: t.clientKey)
        expectJSONError(wrongMethod, 405)
        #expect(wrongMethod.header("Allow") == "POST")
        expectJSONError(try t.send("DELETE", "/v1/topics", key: t.serverKey), 405)
        expectJSONError(try t.send("POST", "/api/register", key: t.clientKey, headers: [("Accept", "text/html")],
                                   json: #"{"device_id":"D","topics":["a"]}"#), 406, "You requested a format that isn't json.")
        // q=0 excludes what it names, also beside a wider range; a q above 0 accepts.
        for accept in ["application/json;q=0, text/html", "application/json; q=0.0, */*", "*/*;q=0"] {
            expectJSONError(try t.send("POST", "/api/register", key: t.clientKey, headers: [("Accept", accept)],
                                       json: #"{"device_id":"D","topics":["a"]}"#), 406, "You requested a format that isn't json.")
        }
        for accept in ["application/json;q=0.5, text/html", "text/html;q=0, */*", "application/*"] {
            let r = try t.send("POST", "/api/register", key: t.clientKey, headers: [("Accept", accept)], json: #"{"device_id":"D","topics":["a"]}"#)
            #expect(r.status == 200, "\(accept): \(r.status)")
        }
        #expect(t.store.commitCounters.commands == 3, "only the accepted requests changed anything")
        expectJSONError(try t.send("GET", "/v1/devices/nobody", key: t.serverKey), 404)
    }

    /// With `Expect: 100-continue` a request its headers already refuse (no key, a wrong
    /// one, a client key on a server route, a wrong method) is answered before the body
    /// is sent; one they allow gets `100 Continue`, then its answer.
    @Test func expectContinueIsRefusedBeforeTheBody() throws {
        let t = try HTTPTestServer()
        let body = #"{"device_id":"E1","topics":["a"]}"#
        func head(_ method: String, _ path: String, _ key: String?) -> [UInt8] {
            var text = "\(method) \(path) HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
            if let key { text += "X-MPush-Token: \(key)\r\n" }
            return Array((text + "Content-Length: \(body.utf8.count)\r\n\r\n").utf8)
        }
        for (method, path, key, status) in [("POST", "/api/register", nil, 401), ("POST", "/api/register", "tsc_nosuchkey0000000000", 401),
                                            ("POST", "/api/send", t.clientKey, 403), ("PUT", "/api/register", t.clientKey, 405),
                                            ("POST", "/api/nothing", t.clientKey, 404)] as [(String, String, String?, Int)] {
            let client = try RawHTTPClient(port: t.server.port)
            try client.send(raw: head(method, path, key))
            let r = try client.readResponse()  // the body was never sent
            #expect(r.status == status, "\(method) \(path): \(r.status)")
        }
        let client = try RawHTTPClient(port: t.server.port)
        try client.send(raw: head("POST", "/api/register", t.clientKey))
        #expect(try client.readResponse().status == 100)
        try client.send(raw: Array(body.utf8))
        #expect(try client.readResponse().status == 200)
        #expect(t.store.commitCounters.commands == 1)
    }

    /// Each 404 names what was not found, and docs/http-api.md lists exactly those bodies.
    @Test func notFoundBodiesAreTheDocumentedOnes() throws {
        let t = try HTTPTestServer()
        let cases: [(what: String, response: RawResponse, message: String)] = [
            ("unknown path", try t.send("GET", "/v1/nosuch", key: t.serverKey), "The requested resource can not be found."),
            ("unknown device", try t.send("GET", "/v1/devices/nosuch", key: t.serverKey), "The device was not found."),
            ("unknown notification", try t.send("GET", "/api/notifications/nosuch", key: t.serverKey), "The notification was not found."),
        ]
        let docs = try String(contentsOfFile: HTTPErrorTests.repositoryFile("docs/http-api.md"), encoding: .utf8)
        let rows = docs.split(separator: "\n").filter { $0.hasPrefix("| 404 |") }
        for c in cases {
            expectJSONError(c.response, 404, c.message)
            let body = "`\(c.response.text)`"
            #expect(rows.contains { $0.contains(c.what) && $0.contains(body) }, "docs/http-api.md has no 404 row for \(c.what) with \(body): \(rows)")
        }
    }

    static func repositoryFile(_ path: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(path).path
    }

    @Test func bodyLimitGives413() throws {
        let t = try HTTPTestServer { $0.bodyLimit = 1024 }
        let big = #"{"device_id":"D1","topics":["a"],"pad":""# + String(repeating: "x", count: 4000) + "\"}"
        // Declared length over the limit: answered before the body is read.
        let r = try t.send("POST", "/api/register", key: t.clientKey, json: big)
        expectJSONError(r, 413)
        // Chunked body over the limit (no Content-Length): read, discarded, answered 413.
        let c = try t.client()
        var chunked = "POST /api/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-MPush-Token: \(t.clientKey)\r\nTransfer-Encoding: chunked\r\n\r\n"
        for _ in 0..<4 { chunked += "400\r\n" + String(repeating: " ", count: 1024) + "\r\n" }
        chunked += "0\r\n\r\n"
        try c.send(raw: Array(chunked.utf8))
        expectJSONError(try c.readResponse(), 413)
        // A client that writes a large body whole before it reads (Python's http.client): the body
        // is read and dropped, then the 413 comes (a wire review got a broken pipe, never the 413).
        let whole = try t.client()
        let body = [UInt8](repeating: 0x20, count: 12 << 20)
        let eager = try whole.request("POST", "/api/register", headers: [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)], body: body)
        expectJSONError(eager, 413)
        // One that waits for 100-continue is answered at once, before any of its body.
        let waiting = try t.client()
        try waiting.send(raw: Array("POST /api/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-MPush-Token: \(t.clientKey)\r\nContent-Length: \(4 << 20)\r\nExpect: 100-continue\r\n\r\n".utf8))
        expectJSONError(try waiting.readResponse(), 413)
        // Under the limit still works.
        let ok = try t.send("POST", "/api/register", key: t.clientKey, json: #"{"device_id":"D1","topics":["a"]}"#)
        #expect(ok.status == 200)
        #expect(try t.device("D1")?.topics == ["a"])
    }

    @Test func rateLimitGives429WithRetryAfter() throws {
        let t = try HTTPTestServer { $0.rateLimits[.client] = RateLimit(perSecond: 0.5, burst: 3) }
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        var statuses: [Int] = []
        var limited: RawResponse?
        for i in 0..<5 {
            let r = try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"R\#(i)","topics":["a"]}"#)
            statuses.append(r.status)
            if r.status == 429 { limited = r }
        }
        #expect(statuses == [200, 200, 200, 429, 429])
        let r = try #require(limited)
        expectJSONError(r, 429, "Too Many Attempts.")
        let retry = try #require(r.header("Retry-After").flatMap { Int($0) })
        #expect(retry >= 1 && retry <= 2)
        // Limits are per key: the server key is not limited by the client key's use.
        #expect(try t.send("GET", "/v1/topics", key: t.serverKey).status == 200)
        #expect(try t.device("R3") == nil)
    }

    @Test func rateLimitHoldsUnderConcurrency() throws {
        let t = try HTTPTestServer { $0.rateLimits[.client] = RateLimit(perSecond: 1, burst: 10) }
        let ok = LogBox()
        let start = Date()
        DispatchQueue.concurrentPerform(iterations: 8) { c in
            guard let client = try? t.client() else { return }
            for i in 0..<10 {
                let r = try? client.request("POST", "/api/register", headers: [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)],
                                            text: #"{"device_id":"P\#(c)-\#(i)","topics":["a"]}"#)
                if r?.status == 200 { ok.append("ok") }
            }
        }
        let allowed = 10 + Int(Date().timeIntervalSince(start).rounded(.up))
        #expect(ok.lines.count >= 10 && ok.lines.count <= allowed, "\(ok.lines.count) accepted, at most \(allowed) allowed")
        #expect(t.store.commitCounters.commands == ok.lines.count)
    }
}

