import Foundation
import Testing

/// One Content-Type rule for every endpoint that reads a body (docs/http-api.md, "Request bodies"):
/// JSON types are JSON, a form is a form (or JSON when it starts with `{`), no type or a
/// generic one (`text/plain`, `application/octet-stream`) is sniffed, anything else is 400.
@Suite("HTTP Content-Type rule")
struct HTTPContentTypeTests {
    /// A body each endpoint accepts, and the key it needs.
    static func endpoints(_ t: HTTPTestServer) -> [(path: String, key: String, body: String)] {
        [("/api/register", t.clientKey, #"{"device_id":"D1","topics":["news"]}"#),
         ("/v1/feedback", t.serverKey, #"[{"provider":"apns","token":"tok-1","timestamp":1764100807728}]"#),
         ("/v1/feedback", t.serverKey, #"{"provider":"apns","token":"tok-1","timestamp":1764100807728}"#),
         ("/v1/audience/count", t.serverKey, #"{"topics":["news"]}"#),
         ("/api/send", t.serverKey, #"{"topics":["news"],"payload":{"body":"hello"}}"#)]
    }

    static let accepted: [String?] = [
        nil, "application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "text/json",
        "application/vnd.api+json",
        // What HTTP helpers send when the caller names no type (Dart's http labels a String
        // body text/plain; charset=utf-8): sniffed.
        "text/plain", "text/plain; charset=utf-8", "application/octet-stream",
        // curl -d labels JSON as a form.
        "application/x-www-form-urlencoded",
    ]

    static let refused = ["application/xml", "text/xml", "text/html", "multipart/form-data; boundary=x", "image/png", "text/csv", "bogus"]

    func post(_ t: HTTPTestServer, _ path: String, key: String, type: String?, body: String) throws -> RawResponse {
        var headers = [("X-MPush-Token", key)]
        if let type { headers.append(("Content-Type", type)) }
        return try t.client().request("POST", path, headers: headers, text: body)
    }

    @Test func everyBodyEndpointFollowsTheSameRule() throws {
        let t = try HTTPTestServer()
        for e in Self.endpoints(t) {
            for type in Self.accepted {
                let r = try post(t, e.path, key: e.key, type: type, body: e.body)
                #expect(r.status == 200, "\(e.path) with \(type ?? "no Content-Type"): \(r.status) \(r.text)")
            }
            for type in Self.refused {
                let r = try post(t, e.path, key: e.key, type: type, body: e.body)
                #expect(r.status == 400, "\(e.path) with \(type): \(r.status) \(r.text)")
                let media = type.split(separator: ";")[0]
                #expect(r.message == "The Content-Type \(media) is not supported: send application/json or application/x-www-form-urlencoded.",
                        "\(e.path): \(r.text)")
            }
        }
    }

    @Test func anUnsupportedTypeIsRefusedEvenWithoutABody() throws {
        let t = try HTTPTestServer()
        let r = try post(t, "/api/unregister-all", key: t.clientKey, type: "application/xml", body: "")
        #expect(r.status == 400, "\(r.text)")
        // Without a Content-Type an empty body is an empty object: the fields are named.
        #expect(try post(t, "/api/unregister-all", key: t.clientKey, type: nil, body: "").errorFields?["device_id"] != nil)
    }

    @Test func sniffedBodiesAreReadByTheirFirstByte() throws {
        let t = try HTTPTestServer()
        // A form body under a generic type is a form.
        for type in ["text/plain", "application/octet-stream", nil] {
            let r = try post(t, "/api/register", key: t.clientKey, type: type, body: "device_id=F1&topics[]=news")
            #expect(r.status == 200, "\(type ?? "none"): \(r.text)")
        }
        #expect(try t.device("F1")?.topics == ["news"])
        // Declared JSON is JSON, even when it does not look like it.
        #expect(try post(t, "/api/register", key: t.clientKey, type: "application/json", body: "device_id=F2&topics[]=news").status == 400)
    }
}
