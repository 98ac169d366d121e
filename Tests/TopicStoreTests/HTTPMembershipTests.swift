import Foundation
import Testing

/// The MPush v2 membership endpoints, spoken to over real HTTP the ways the
/// SDKs in the field speak them.
@Suite("HTTP membership endpoints")
struct HTTPMembershipTests {
    /// Success exactly as every SDK checks it.
    func expectSuccess(_ r: RawResponse, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(r.status == 200, "\(r.status) \(r.text)", sourceLocation: sourceLocation)
        #expect(r.header("Content-Type") == "application/json", sourceLocation: sourceLocation)
        #expect(r.text == "{\"status_code\":0}", sourceLocation: sourceLocation)
        #expect((r.object?["status_code"] as? NSNumber)?.intValue == 0 && r.object?["errors"] == nil, sourceLocation: sourceLocation)
    }

    @Test func tokenBodyShapesAndPlatforms() throws {
        let t = try HTTPTestServer()
        let c = try t.client()  // one keep-alive connection for all of them
        // JSON with charset, keys in another order, extra `os` field, platform `and`.
        expectSuccess(try c.request("POST", "/api/tokens",
            headers: [("Content-Type", "application/json; charset=utf-8"), ("X-MPush-Token", t.clientKey), ("X-MPush-Version", "2"),
                      ("Accept", "application/json")],
            text: #"{"platform":"and","os":"android 14","token":"fcm-1","device_id":"A1"}"#))
        // JSON without charset and without X-MPush-Version; lower-case header names.
        expectSuccess(try c.request("POST", "/api/tokens",
            headers: [("content-type", "application/json"), ("x-mpush-token", t.clientKey)],
            text: #"{"device_id":"I1","token":"apns-1","platform":"ios"}"#))
        // Form-encoded, platform `android`, upper-case header names, ignored headers and a duplicated Accept.
        expectSuccess(try c.request("POST", "/api/tokens",
            headers: [("CONTENT-TYPE", "application/x-www-form-urlencoded"), ("X-MPUSH-TOKEN", t.clientKey),
                      ("Authorization", "Bearer something"), ("X-MBurger-Version", "3"), ("X-Nooko-Version", "1"),
                      ("Accept", "application/json"), ("Accept", "application/json")],
            text: "device_id=A2&token=fcm%3A2%2B&platform=android"))
        #expect(try t.device("A1")?.platform == "android")
        #expect(try t.device("A1")?.token == "fcm-1")
        #expect(try t.device("I1")?.platform == "ios")
        #expect(try t.device("A2")?.token == "fcm:2+")
        #expect(try t.device("A2")?.state == "live")
    }

    @Test func registerTopicShapes() throws {
        let t = try HTTPTestServer()
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        // Real array of objects, single as JSON bool; `\/` escapes in a code.
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"""
            {"device_id":"D1","topics":[{"code":"all","title":"All Users","single":false},{"code":"user.1","title":"User 1","single":true},{"code":"news\/it"}]}
            """#))
        #expect(try t.device("D1")?.topics == ["all", "news/it", "user.1"])
        // Array of plain codes.
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"topics":["sport","all"],"device_id":"D2"}"#))
        #expect(try t.device("D2")?.topics == ["all", "sport"])
        // topics as a string that contains JSON, single as 0/1 and "true"/"false".
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"""
            {"device_id":"D3","topics":"[{\"code\":\"a\",\"single\":1},{\"code\":\"b\",\"single\":\"false\"},{\"code\":\"c\",\"single\":\"true\"},{\"code\":\"d\",\"single\":0}]"}
            """#))
        #expect(try t.device("D3")?.topics == ["a", "b", "c", "d"])
        // Form body with topics as a JSON string (the Android SDK's way).
        let topicsJSON = #"[{"code":"promo","title":"Promo","single":false}]"#
        let encoded = topicsJSON.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        expectSuccess(try c.request("POST", "/api/register",
            headers: [("Content-Type", "application/x-www-form-urlencoded; charset=UTF-8"), ("X-MPush-Token", t.clientKey)],
            text: "device_id=D4&topics=\(encoded)"))
        #expect(try t.device("D4")?.topics == ["promo"])
        // PHP-style form arrays: topics[]=… and topics[0][code]=….
        expectSuccess(try c.request("POST", "/api/register",
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-MPush-Token", t.clientKey)],
            text: "device_id=D5&topics%5B%5D=x&topics%5B%5D=y"))
        #expect(try t.device("D5")?.topics == ["x", "y"])
        expectSuccess(try c.request("POST", "/api/register",
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-MPush-Token", t.clientKey)],
            text: "device_id=D6&topics[0][code]=p&topics[0][single]=1&topics[1][code]=q&topics[1][title]=Q+topic"))
        #expect(try t.device("D6")?.topics == ["p", "q"])
        // Titles and single flags reached the topic registry.
        let topics = try t.send("GET", "/v1/topics", key: t.serverKey).object?["topics"] as? [[String: Any]] ?? []
        let byCode = Dictionary(uniqueKeysWithValues: topics.map { ($0["code"] as? String ?? "", $0) })
        #expect(byCode["user.1"]?["single"] as? Bool == true)
        #expect(byCode["all"]?["title"] as? String == "All Users")
        #expect(byCode["all"]?["subscribers"] as? Int == 2)
        #expect(byCode["a"]?["single"] as? Bool == true)
        #expect(byCode["b"]?["single"] as? Bool == false)
        #expect(byCode["c"]?["single"] as? Bool == true)
        #expect(byCode["q"]?["title"] as? String == "Q topic")
        #expect(byCode["news/it"] != nil)
    }

    @Test func unregisterOldAndNewShapesAndUnregisterAll() throws {
        let t = try HTTPTestServer()
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"D1","topics":["all","ios","news","sport"]}"#))
        // Old version: plain codes; unknown codes ignored.
        expectSuccess(try c.request("POST", "/api/unregister", headers: h, text: #"{"device_id":"D1","topics":["all","nope"]}"#))
        #expect(try t.device("D1")?.topics == ["ios", "news", "sport"])
        // New version: objects with a code.
        expectSuccess(try c.request("POST", "/api/unregister", headers: h, text: #"{"device_id":"D1","topics":[{"code":"ios"}]}"#))
        #expect(try t.device("D1")?.topics == ["news", "sport"])
        // Form, topics as JSON string.
        expectSuccess(try c.request("POST", "/api/unregister",
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-MPush-Token", t.clientKey)],
            text: "device_id=D1&topics=%5B%22news%22%5D"))
        #expect(try t.device("D1")?.topics == ["sport"])
        expectSuccess(try c.request("POST", "/api/unregister-all", headers: h, text: #"{"device_id":"D1"}"#))
        #expect(try t.device("D1")?.topics == [])
    }

    func titles(_ t: HTTPTestServer) throws -> [String: (title: String, single: Bool)] {
        let topics = try t.send("GET", "/v1/topics", key: t.serverKey).object?["topics"] as? [[String: Any]] ?? []
        return Dictionary(uniqueKeysWithValues: topics.map { ($0["code"] as? String ?? "", ($0["title"] as? String ?? "?", $0["single"] as? Bool ?? false)) })
    }

    /// `single` is true/false, 1/0 or their strings; any other number is refused as 2 is.
    /// 0.5 was read as 0 and turned a single topic into a group without a word.
    @Test func singleRefusesEveryNumberButZeroAndOne() throws {
        let t = try HTTPTestServer()
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"P3","topics":[{"code":"p3","single":true}]}"#))
        for bad in ["0.5", "2", "-1", "1.5", "1e-9", #""yes""#, #""0.5""#] {
            let r = try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"P3","topics":[{"code":"p3","single":\#(bad)}]}"#)
            #expect(r.status == 422 && r.errorFields == ["topics.0.single": ["The single field must be true or false."]], "\(bad): \(r.text)")
        }
        #expect(try titles(t)["p3"]?.single == true)
        for (value, single) in [("0", false), (#""1""#, true), (#""false""#, false), ("true", true), (#""0""#, false), ("1", true)] {
            expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"P3","topics":[{"code":"p3","single":\#(value)}]}"#))
            #expect(try titles(t)["p3"]?.single == single, "\(value)")
        }
    }

    /// MPush is a Laravel app (TrimStrings, ConvertEmptyStringsToNull): a title is trimmed, and an
    /// empty or blank one is no title, so a new topic is titled with its code and an existing one
    /// keeps its title.
    @Test func aBlankTitleIsNoTitle() throws {
        let t = try HTTPTestServer()
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        expectSuccess(try c.request("POST", "/api/register", headers: h,
            text: #"{"device_id":"P5","topics":[{"code":"p5","title":""},{"code":"p6","title":"   "},{"code":"p7","title":"Seven"},{"code":"p9","title":"\u200b\t\u3000"}]}"#))
        expectSuccess(try c.request("POST", "/api/register", headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-MPush-Token", t.clientKey)],
            text: "device_id=P5&topics[0][code]=p8&topics[0][title]=&topics[1][code]=p7&topics[1][title]=+"))
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"P5","topics":[{"code":"p7","title":""}]}"#))
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"P5","topics":[{"code":"p10","title":" Padded "}]}"#))
        let all = try titles(t)
        #expect(all.mapValues { $0.title } == ["p5": "p5", "p6": "p6", "p7": "Seven", "p8": "p8", "p9": "p9", "p10": "Padded"])
    }

    /// A device id of nothing but whitespace is no device id; one with content is kept exactly
    /// as sent (trimming it would make an existing device another one).
    @Test func aBlankDeviceIDIsRequired() throws {
        let t = try HTTPTestServer()
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        for id in ["   ", #"\u200b"#, #" \u3000\u00a0 "#, #"\ufeff"#] {
            for (path, rest) in [("/api/register", #","topics":["a"]"#), ("/api/tokens", #","token":"t1","platform":"ios""#),
                                 ("/api/unregister", #","topics":["a"]"#), ("/api/unregister-all", "")] {
                let r = try c.request("POST", path, headers: h, text: #"{"device_id":"\#(id)"\#(rest)}"#)
                #expect(r.status == 422 && r.errorFields == ["device_id": ["The device id field is required."]], "\(path) \(id): \(r.text)")
            }
        }
        let form = try c.request("POST", "/api/register", headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-MPush-Token", t.clientKey)],
                                 text: "device_id=+++&topics[]=a")
        #expect(form.status == 422 && form.errorFields?["device_id"] != nil, "\(form.text)")
        #expect(t.store.commitCounters.commands == 0)
        expectSuccess(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":" D1 ","topics":["a"]}"#))
        #expect(try t.device(" D1 ")?.topics == ["a"])
        #expect(try t.device("D1") == nil)
    }

    @Test func aServerKeyMayUseMembershipEndpoints() throws {
        let t = try HTTPTestServer()
        expectSuccess(try t.send("POST", "/api/register", key: t.serverKey, json: #"{"device_id":"S1","topics":["all"]}"#))
        #expect(try t.device("S1")?.topics == ["all"])
    }

    @Test func aBodyCannotNameAnotherProject() throws {
        let t = try HTTPTestServer()
        try t.access.addProject("other")
        let otherClient = try t.access.addKey(project: "other", kind: .client).key
        expectSuccess(try t.send("POST", "/api/register", key: otherClient,
                                 json: #"{"project":"demo","type":"unregister-all","device_id":"X1","topics":["t"]}"#))
        #expect(try t.device("X1", project: "demo") == nil)
        #expect(try t.device("X1", project: "other")?.topics == ["t"])
    }
}
