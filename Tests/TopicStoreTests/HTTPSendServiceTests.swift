import Foundation
import Testing

/// The /v1 endpoints a send service uses, with a server key.
@Suite("HTTP send-service endpoints")
struct HTTPSendServiceTests {
    /// Five devices: 3 android (a1..a3) and 2 ios (i1, i2); news: a1 a2 i1; sport: a3 i1 i2; n1 has no token.
    func populate(_ t: HTTPTestServer) throws {
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        for (d, p) in [("a1", "and"), ("a2", "android"), ("a3", "android"), ("i1", "ios"), ("i2", "ios")] {
            #expect(try c.request("POST", "/api/tokens", headers: h, text: #"{"device_id":"\#(d)","token":"tok-\#(d)","platform":"\#(p)"}"#).status == 200)
        }
        for (d, topics) in [("a1", "news"), ("a2", "news"), ("i1", "news\",\"sport"), ("a3", "sport"), ("i2", "sport"), ("n1", "news")] {
            #expect(try c.request("POST", "/api/register", headers: h, text: #"{"device_id":"\#(d)","topics":["\#(topics)"]}"#).status == 200)
        }
    }

    @Test func audienceCountsForTopicsAndExpressions() throws {
        let t = try HTTPTestServer()
        try populate(t)
        let seq = t.store.commitCounters.commands
        let r = try t.send("GET", "/v1/audience/count?topics=news,sport", key: t.serverKey)
        #expect(r.status == 200)
        let o = try #require(r.object)
        #expect(o["total"] as? Int == 6 && o["ios"] as? Int == 2 && o["android"] as? Int == 3 && o["withoutToken"] as? Int == 1)
        #expect(o["asOfSeq"] as? Int == seq)
        #expect(o["unknownTopics"] as? [String] == [])
        #expect(o["expr"] as? String == "(news OR sport)")
        // Items trimmed and empty ones dropped (the list is read as bytes): the same answer.
        let spaced = try #require(try t.send("GET", "/v1/audience/count?topics=%20news,,sport%09,%E3%80%80", key: t.serverKey).object)
        #expect((spaced as NSDictionary) == (o as NSDictionary))
        // An invalid code is named by its place in the list, whichever parameter it came in.
        #expect(try t.send("GET", "/v1/audience/count?topics=news,bad%20code", key: t.serverKey).errorFields?["topics.1"] != nil)
        #expect(try t.send("GET", "/v1/audience/count?topics=news&topics=sport,%C3%A9", key: t.serverKey).errorFields?["topics.2"] != nil)
        // Repeated parameter, and an unknown topic reported.
        let r2 = try t.send("GET", "/v1/audience/count?topics=news&topics=ghost", key: t.serverKey).object
        #expect(r2?["total"] as? Int == 4 && r2?["unknownTopics"] as? [String] == ["ghost"])
        // An expression in the query (spaces as + and %20) and in a POST body.
        let e = try t.send("GET", "/v1/audience/count?expr=news+AND%20NOT+platform:ios", key: t.serverKey).object
        #expect(e?["total"] as? Int == 3 && e?["ios"] as? Int == 0)
        let p = try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"expr":"(news OR sport) AND platform:android"}"#).object
        #expect(p?["total"] as? Int == 3)
        let p2 = try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":["sport"]}"#).object
        #expect(p2?["total"] as? Int == 3)
        // A posted list: plain codes as they are (no trimming in JSON), codes given as objects too.
        let p3 = try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":["news","sport"]}"#).object
        #expect(p3?["total"] as? Int == 6 && p3?["expr"] as? String == "(news OR sport)")
        // The plain shape read from the body's bytes, with JSON's white space, and the same list
        // with an escape or another key (read as an object): the same answer.
        for body in ["\n{ \"topics\" :\t[ \"news\" ,\r\n\"sport\" ] }\n", #"{"topics":["news","spor\u0074"]}"#,
                     #"{"topics":["news","sport"],"limit":5}"#] {
            let same = try #require(try t.send("POST", "/v1/audience/count", key: t.serverKey, json: body).object, "\(body)")
            #expect((same as NSDictionary) == (p3! as NSDictionary), "\(body)")
        }
        #expect(try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":[]}"#).errorFields?["topics"] != nil)
        #expect(try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":["news","bad code"]}"#).errorFields?["topics.1"] != nil)
        #expect(try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":["news"," sport"]}"#).errorFields?["topics.1"] != nil)
        let mixed = try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":["news",{"code":"sport"}]}"#).object
        #expect(mixed?["total"] as? Int == 6)
        #expect(try t.send("POST", "/v1/audience/count", key: t.serverKey, json: #"{"topics":["news",7]}"#).status == 422)
        // Bad queries are 422 with the field named.
        #expect(try t.send("GET", "/v1/audience/count", key: t.serverKey).errorFields?["topics"] != nil)
        #expect(try t.send("GET", "/v1/audience/count?expr=news+AND", key: t.serverKey).errorFields?["expr"] != nil)
        #expect(try t.send("GET", "/v1/audience/count?topics=a&expr=b", key: t.serverKey).status == 422)
    }

    @Test func audiencePagesWithResumableCursor() throws {
        let t = try HTTPTestServer()
        try populate(t)
        var seen: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            let path = "/v1/audience?topics=news,sport&limit=2" + (cursor.map { "&cursor=\($0)" } ?? "")
            let r = try t.send("GET", path, key: t.serverKey)
            #expect(r.status == 200)
            #expect(r.header("Content-Type") == "application/x-ndjson")
            let lines = r.text.split(separator: "\n")
            #expect(lines.count <= 2)
            #expect(r.header("X-Page-Count") == String(lines.count))
            for line in lines {
                let o = try #require((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])
                let d = try #require(o["device_id"] as? String)
                #expect(o["token"] as? String == "tok-\(d)")
                #expect(o["platform"] as? String == (d.hasPrefix("i") ? "ios" : "android"))
                seen.append(d)
            }
            // The first page is its own snapshot; after the change below, later pages are newer ones.
            if pages == 0 { #expect(r.header("X-As-Of-Seq") == r.header("X-Walk-As-Of-Seq")) }
            else { #expect(Int(r.header("X-As-Of-Seq") ?? "") ?? 0 > Int(r.header("X-Walk-As-Of-Seq") ?? "") ?? 0) }
            cursor = r.header("X-Next-Cursor")
            pages += 1
            // A change mid-walk: a new device joins (a higher ordinal, so it is still ahead).
            if pages == 1 {
                #expect(try t.send("POST", "/api/tokens", key: t.clientKey, json: #"{"device_id":"late","token":"tok-late","platform":"and"}"#).status == 200)
                #expect(try t.send("POST", "/api/register", key: t.clientKey, json: #"{"device_id":"late","topics":["news"]}"#).status == 200)
            }
        } while cursor != nil && pages < 10
        #expect(seen.count == Set(seen).count, "no device twice")
        #expect(Set(seen) == ["a1", "a2", "a3", "i1", "i2", "late"])
        #expect(pages == 3)
        #expect(try t.send("GET", "/v1/audience?topics=news&cursor=garbage", key: t.serverKey).errorFields?["cursor"] != nil)
        #expect(try t.send("GET", "/v1/audience?topics=news&limit=0", key: t.serverKey).errorFields?["limit"] != nil)
        // POST form of the query.
        let posted = try t.send("POST", "/v1/audience", key: t.serverKey, json: #"{"expr":"sport AND platform:ios","limit":10}"#)
        #expect(posted.text.split(separator: "\n").count == 2)
        #expect(posted.header("X-Next-Cursor") == nil)
    }

    /// The configured `audiencePageLimit` bounds the default page too, not only an explicit `limit`.
    @Test func theDefaultPageNeverExceedsTheConfiguredLimit() throws {
        let t = try HTTPTestServer { $0.audiencePageLimit = 2 }
        try populate(t)
        for r in [try t.send("GET", "/v1/audience?topics=news,sport", key: t.serverKey),
                  try t.send("POST", "/v1/audience", key: t.serverKey, json: #"{"topics":["news","sport"]}"#)] {
            #expect(r.status == 200, "\(r.text)")
            #expect(r.text.split(separator: "\n").count == 2, "\(r.text)")
            #expect(r.header("X-Page-Count") == "2")
            #expect(r.header("X-Next-Cursor") != nil)
        }
        #expect(try t.send("GET", "/v1/audience?topics=news,sport&limit=3", key: t.serverKey).errorFields?["limit"]
                == ["The limit must be an integer between 1 and 2."])
        // Walking with the default page still reaches everyone, two at a time.
        var seen: [String] = [], cursor: String?, pages = 0
        repeat {
            let r = try t.send("GET", "/v1/audience?topics=news,sport" + (cursor.map { "&cursor=\($0)" } ?? ""), key: t.serverKey)
            for line in r.text.split(separator: "\n") {
                let o = try #require((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])
                seen.append(try #require(o["device_id"] as? String))
            }
            cursor = r.header("X-Next-Cursor")
            pages += 1
        } while cursor != nil && pages < 10
        #expect(seen.sorted() == ["a1", "a2", "a3", "i1", "i2"] && pages == 3)
    }

    /// A cursor names the sequence its walk began at; one beyond the store's last sequence was not issued here.
    @Test func aCursorFromBeyondTheLastSequenceIsRefused() throws {
        let t = try HTTPTestServer()
        try populate(t)
        let last = try #require(t.send("GET", "/healthz").object?["lastSequence"] as? Int)
        #expect(last == t.store.commitCounters.commands)
        for cursor in ["7.999999", "0.\(last + 1)", "0.18446744073709551615"] {
            for r in [try t.send("GET", "/v1/audience?topics=news&cursor=\(cursor)", key: t.serverKey),
                      try t.send("POST", "/v1/audience", key: t.serverKey, json: #"{"topics":["news"],"cursor":"\#(cursor)"}"#)] {
                #expect(r.status == 422 && r.header("X-Walk-As-Of-Seq") == nil, "\(cursor): \(r.status) \(r.text)")
                #expect(r.errorFields?["cursor"] == ["The cursor names log sequence \(cursor.split(separator: ".")[1]), beyond this store's last sequence \(last); it was not issued by this store."],
                        "\(r.text)")
            }
        }
        // The current sequence and earlier ones are fine.
        for seq in [0, 1, last] {
            let r = try t.send("GET", "/v1/audience?topics=news&cursor=0.\(seq)", key: t.serverKey)
            #expect(r.status == 200 && r.header("X-Walk-As-Of-Seq") == String(seq), "\(r.status) \(r.text)")
        }
    }

    @Test func topicsAndDevice() throws {
        let t = try HTTPTestServer()
        try populate(t)
        let topics = try #require(t.send("GET", "/v1/topics", key: t.serverKey).object)
        let list = topics["topics"] as? [[String: Any]] ?? []
        #expect(list.map { $0["code"] as? String ?? "" } == ["news", "sport"])
        #expect(list.map { $0["subscribers"] as? Int ?? -1 } == [4, 3])
        let d = try #require(t.send("GET", "/v1/devices/i1", key: t.serverKey).object)
        #expect(d["device_id"] as? String == "i1" && d["platform"] as? String == "ios" && d["token"] as? String == "tok-i1")
        #expect(d["topics"] as? [String] == ["news", "sport"] && d["state"] as? String == "live")
        let n = try #require(t.send("GET", "/v1/devices/n1", key: t.serverKey).object)
        #expect(n["token"] is NSNull && n["state"] as? String == "no-token")
        // A device id with a slash, percent-encoded in the path.
        #expect(try t.send("POST", "/api/register", key: t.clientKey, json: #"{"device_id":"x/y","topics":["news"]}"#).status == 200)
        #expect(try t.send("GET", "/v1/devices/x%2Fy", key: t.serverKey).object?["device_id"] as? String == "x/y")
        // A slash at the end of an id is the id's, not the path's (a tenant review got device K for K%2F);
        // one literal trailing slash is the path's. A %00 is part of the id, not its end.
        for id in ["K", "K/"] {
            #expect(try t.send("POST", "/api/register", key: t.clientKey, json: #"{"device_id":"\#(id)","topics":["news"]}"#).status == 200)
        }
        #expect(try t.send("GET", "/v1/devices/K%2F", key: t.serverKey).object?["device_id"] as? String == "K/")
        #expect(try t.send("GET", "/v1/devices/K%2f/", key: t.serverKey).object?["device_id"] as? String == "K/")
        #expect(try t.send("GET", "/v1/devices/K/", key: t.serverKey).object?["device_id"] as? String == "K")
        #expect(try t.send("GET", "/v1/devices/K", key: t.serverKey).object?["device_id"] as? String == "K")
        #expect(try t.send("GET", "/v1/devices/K%00whatever", key: t.serverKey).status == 404)
        // Query arguments are decoded as before: %2C is a comma inside a code list, + a space.
        let encoded = try t.send("GET", "/v1/audience/count?topics=news%2Csport", key: t.serverKey)
        let plain = try t.send("GET", "/v1/audience/count?topics=news,sport", key: t.serverKey)
        let news = try t.send("GET", "/v1/audience/count?topics=news", key: t.serverKey)
        #expect(encoded.status == 200 && encoded.object?["total"] as? Int == plain.object?["total"] as? Int, "\(encoded.text)")
        #expect((encoded.object?["total"] as? Int ?? 0) > (news.object?["total"] as? Int ?? .max), "\(encoded.text) \(news.text)")
    }

    @Test func tokenRejectedFeedback() throws {
        let t = try HTTPTestServer()
        try populate(t)
        // Provider time after the tokens were registered (a rejection older than the token is ignored).
        let now = Int64(Date().timeIntervalSince1970 * 1000) + 1000
        // APNs 410 with its timestamp (ms).
        let apns = try t.send("POST", "/v1/feedback", key: t.serverKey,
                              json: #"{"provider":"apns","status":410,"reason":"Unregistered","token":"tok-i1","timestamp":\#(now)}"#)
        #expect(apns.status == 200, "\(apns.text)")
        #expect(apns.object?["accepted"] as? Int == 1)
        let d = try #require(t.send("GET", "/v1/devices/i1", key: t.serverKey).object)
        // Dated ahead of the store's clock: counted from when it was logged.
        let rejectedAt = (d["rejectedAt"] as? NSNumber)?.int64Value ?? 0
        #expect(d["state"] as? String == "rejected" && rejectedAt <= now && rejectedAt > now - 60_000, "\(d)")
        // FCM UNREGISTERED, a batch, timestamp in seconds accepted.
        let fcm = try t.send("POST", "/v1/feedback", key: t.serverKey,
                             json: #"[{"provider":"fcm","token":"tok-a1","timestamp":\#(now / 1000 + 1)},{"provider":"fcm","token":"tok-a2","at":\#(now)}]"#)
        #expect(fcm.status == 200 && fcm.object?["accepted"] as? Int == 2, "\(fcm.text)")
        #expect(try t.device("a1")?.state == "rejected")
        let counts = try #require(t.send("GET", "/v1/audience/count?topics=news", key: t.serverKey).object)
        #expect(counts["total"] as? Int == 4 && counts["android"] as? Int == 0 && counts["ios"] as? Int == 0)
        // A rejection older than the token's registration is stale and changes nothing.
        #expect(try t.send("POST", "/v1/feedback", key: t.serverKey, json: #"{"token":"tok-a3","timestamp":1764100807728}"#).status == 200)
        #expect(try t.device("a3")?.state == "live")
        // Invalid feedback: 422 with fields.
        let bad = try t.send("POST", "/v1/feedback", key: t.serverKey, json: #"{"provider":"mail","token":"x"}"#)
        #expect(bad.status == 422 && bad.errorFields?["provider"] != nil)
        let missing = try t.send("POST", "/v1/feedback", key: t.serverKey, json: #"[{"token":"x"},{"timestamp":1764100807728}]"#)
        #expect(missing.status == 422 && missing.errorFields?["0.timestamp"] != nil && missing.errorFields?["1.token"] != nil, "\(missing.text)")
    }

    /// A send service counting a list of users while their tokens change: each answer is the
    /// store's as of it, though the server holds each user's topic and what its device reaches.
    @Test func aListOfUsersIsCountedAsTheirTokensChange() throws {
        let t = try HTTPTestServer()
        let c = try t.client()
        let h = [("Content-Type", "application/json"), ("X-MPush-Token", t.clientKey)]
        func token(_ d: String, _ token: String, _ platform: String) throws {
            let r = try c.request("POST", "/api/tokens", headers: h, text: #"{"device_id":"\#(d)","token":"\#(token)","platform":"\#(platform)"}"#)
            #expect(r.status == 200)
        }
        for (d, p) in [("u1", "ios"), ("u2", "ios"), ("u3", "android")] { try token(d, "tok-\(d)", p) }
        for n in 1...4 {
            let body = #"{"device_id":"u\#(n)","topics":[{"code":"user.\#(n)","single":true},"all"]}"#
            #expect(try c.request("POST", "/api/register", headers: h, text: body).status == 200)
        }
        func counts(_ topics: String = "user.1,user.2,user.3,user.4") throws -> [Int] {
            let o = try #require(try t.send("GET", "/v1/audience/count?topics=\(topics)", key: t.serverKey).object)
            return ["total", "ios", "android", "withoutToken"].map { o[$0] as? Int ?? -1 }
        }
        #expect(try counts() == [4, 2, 1, 1])
        #expect(try counts() == [4, 2, 1, 1], "asked again")
        #expect(try counts("user.1") == [1, 1, 0, 0])

        let now = Int64(Date().timeIntervalSince1970 * 1000) + 1000
        let rejected = try t.send("POST", "/v1/feedback", key: t.serverKey,
                                  json: #"{"provider":"apns","status":410,"reason":"Unregistered","token":"tok-u1","timestamp":\#(now)}"#)
        #expect(rejected.status == 200)
        #expect(try counts() == [4, 1, 1, 2], "u1's token rejected")
        #expect(try counts("user.1") == [1, 0, 0, 1])
        try token("u2", "tok-u2b", "android")
        #expect(try counts() == [4, 0, 2, 2], "u2 moved to Android")
        try token("u4", "tok-u4", "ios")
        #expect(try counts() == [4, 1, 2, 1], "u4 got a token")
        try token("u5", "tok-u3", "android")
        #expect(try counts() == [4, 1, 1, 2], "u3's token went to another device")
        try token("u1", "tok-u1b", "ios")
        #expect(try counts() == [4, 2, 1, 1], "u1 registered again")
        #expect(try counts("user.1,user.1,user.5") == [1, 1, 0, 0], "a repeat counted once, an unknown code none")
        #expect(try counts("all") == [4, 2, 1, 1], "u5 is on no topic")
    }

    /// Errors name the fields the request has (`timestamp`, `0.token`), never the log record's (`at`).
    @Test func feedbackErrorsNameTheRequestFields() throws {
        let t = try HTTPTestServer()
        func fields(_ json: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: [String]] {
            let r = try t.send("POST", "/v1/feedback", key: t.serverKey, json: json)
            #expect(r.status == 422 && r.message == "The given data was invalid.", "\(r.text)", sourceLocation: sourceLocation)
            return r.errorFields ?? [:]
        }
        let missing = try fields(#"{"provider":"apns","token":"x"}"#)
        #expect(missing == ["timestamp": ["The timestamp field is required (the provider's time in milliseconds since 1970)."]])
        for bad in ["1", "0", "-5", "\"soon\"", "true", "99999999999999"] {
            let e = try fields(#"{"provider":"apns","token":"x","timestamp":\#(bad)}"#)
            #expect(Array(e.keys) == ["timestamp"], "\(bad): \(e)")
            #expect(e["timestamp"]?.allSatisfy { $0.contains("timestamp") && !$0.contains(" at ") } == true, "\(bad): \(e)")
        }
        // A provider's time more than an hour after the server's clock (a review sent one for the
        // year 2200: it would have stood against every registration of the token until then).
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 2 * 3_600_000
        for ahead in ["\(later)", "7258118399999"] {
            let e = try fields(#"{"provider":"apns","token":"x","timestamp":\#(ahead)}"#)
            #expect(e["timestamp"]?.first?.contains("after the server's clock") == true, "\(e)")
        }
        // `at` (the log's name, accepted as an alias) is named as sent.
        #expect(Array(try fields(#"{"token":"x","at":1}"#).keys) == ["at"])
        // An array names its items by index, even an array of one.
        #expect(Set(try fields(#"[{"token":"x"}]"#).keys) == ["0.timestamp"])
        #expect(Set(try fields(#"[{"token":"x","timestamp":1764100807728},{"timestamp":1}]"#).keys) == ["1.token", "1.timestamp"])
        #expect(Array(try fields(#"{"token":"","timestamp":1764100807728}"#).keys) == ["token"])
        #expect(Array(try fields(#"{"token":"x","timestamp":1764100807728,"reason":7}"#).keys) == ["reason"])
        #expect(Set(try fields(#"{"reason":7,"timestamp":"soon"}"#).keys) == ["token", "reason", "timestamp"])
        // An empty or oversized array has no field to name: the body is refused.
        for body in ["[]", "[" + Array(repeating: #"{"token":"x","timestamp":1764100807728}"#, count: 1001).joined(separator: ",") + "]"] {
            let r = try t.send("POST", "/v1/feedback", key: t.serverKey, json: body)
            #expect(r.status == 400 && r.message == "The request body must be one rejection or an array of 1 to 1000.", "\(r.text)")
            #expect(r.errorFields == nil)
        }
        #expect(t.store.commitCounters.commands == 0)
    }

    /// A reason is counted in code points, as a title is: one character of 65,537 bytes
    /// (an "e" with 32,768 combining accents) killed the server instead of being refused.
    @Test func feedbackReasonsAreCountedInCodePoints() throws {
        let t = try HTTPTestServer()
        func feedback(marks: Int) throws -> RawResponse {
            let reason = "e" + String(repeating: "\u{301}", count: marks)
            let body = try JSONSerialization.data(withJSONObject: ["token": "tok-z", "timestamp": 1_764_100_807_728, "reason": reason])
            return try t.send("POST", "/v1/feedback", key: t.serverKey, json: String(decoding: body, as: UTF8.self))
        }
        #expect(try feedback(marks: 255).status == 200)
        for marks in [256, 32_768] {
            let r = try feedback(marks: marks)
            #expect(r.status == 422 && r.errorFields == ["reason": ["The reason may not be greater than 256 characters."]], "\(marks): \(r.text)")
            #expect(try t.send("GET", "/healthz").status == 200)
        }
        #expect(t.store.commitCounters.commands == 1)
    }

    @Test func oneProjectCannotSeeAnother() throws {
        let t = try HTTPTestServer()
        try populate(t)
        try t.access.addProject("beta")
        let betaServer = try t.access.addKey(project: "beta", kind: .server).key
        let counts = try #require(t.send("GET", "/v1/audience/count?topics=news", key: betaServer).object)
        #expect(counts["project"] as? String == "beta" && counts["total"] as? Int == 0)
        #expect(try t.send("GET", "/v1/audience?topics=news", key: betaServer).body.isEmpty)
        #expect(try t.send("GET", "/v1/devices/a1", key: betaServer).status == 404)
        #expect((try t.send("GET", "/v1/topics", key: betaServer).object?["topics"] as? [Any])?.isEmpty == true)
        // Feedback with beta's key cannot reject demo's tokens.
        let now = Int64(Date().timeIntervalSince1970 * 1000) + 1000
        #expect(try t.send("POST", "/v1/feedback", key: betaServer, json: #"{"token":"tok-a3","timestamp":\#(now)}"#).status == 200)
        #expect(try t.device("a3")?.state == "live")
    }
}
