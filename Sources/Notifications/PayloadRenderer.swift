/// The bytes each provider gets for one notification.
///
/// APNs: `aps` (alert with title, subtitle, body and the localization keys;
/// badge, sound, mutable-content, content-available, category, thread-id),
/// then `message_id`, the rich keys (seed 004) and the custom keys at the top
/// level, where the SDKs' notification extensions read them.
///
/// FCM HTTP v1: a data-only message (no `notification` block), every value a
/// string; `custom` as a JSON object string, `"{}"` when empty (what the MPush
/// Android SDK parses with JSONObject); buttons as a JSON string; `channel_id`.
public enum PayloadRenderer {
    /// What both providers allow for a payload (APNs body; FCM `data`).
    public static let sizeLimit = 4096
    /// The longest Android TTL FCM accepts: 4 weeks.
    public static let fcmMaxTTLSeconds: Int64 = 2_419_200

    // MARK: APNs

    public static func apnsPayload(_ c: NotificationContent, messageID: String) -> [UInt8] {
        var aps: [JSONMember] = []
        if c.silent {
            aps.append(JSONMember("content-available", .number("1")))
        } else {
            var alert: [JSONMember] = []
            if let t = c.title { alert.append(JSONMember("title", .string(t))) }
            if let t = c.subtitle { alert.append(JSONMember("subtitle", .string(t))) }
            if let t = c.body { alert.append(JSONMember("body", .string(t))) }
            if let t = c.titleLocKey { alert.append(JSONMember("title-loc-key", .string(t))) }
            if let a = c.titleLocArgs { alert.append(JSONMember("title-loc-args", .array(a.map { .string($0) }))) }
            if let t = c.locKey { alert.append(JSONMember("loc-key", .string(t))) }
            if let a = c.locArgs { alert.append(JSONMember("loc-args", .array(a.map { .string($0) }))) }
            if let t = c.actionLocKey { alert.append(JSONMember("action-loc-key", .string(t))) }
            if let t = c.launchImage { alert.append(JSONMember("launch-image", .string(t))) }
            aps.append(JSONMember("alert", .object(alert)))
            if let b = c.badge { aps.append(JSONMember("badge", .number(String(b)))) }
            if let s = c.sound { aps.append(JSONMember("sound", .string(s))) }
            // The notification extension must run to attach an image or relabel buttons.
            if c.mutableContent || !c.buttons.isEmpty || c.imageURL != nil { aps.append(JSONMember("mutable-content", .number("1"))) }
            if c.contentAvailable { aps.append(JSONMember("content-available", .number("1"))) }
            if let cat = buttonCategory(c) ?? c.category { aps.append(JSONMember("category", .string(cat))) }
            if let t = c.threadID { aps.append(JSONMember("thread-id", .string(t))) }
        }
        var top: [JSONMember] = [JSONMember("aps", .object(aps)), JSONMember("message_id", .string(messageID))]
        if let v = c.campaignID { top.append(JSONMember("campaign_id", .string(v))) }
        if let v = c.imageURL { top.append(JSONMember("image_url", .string(v))) }
        if let v = c.deepLink { top.append(JSONMember("deep_link", .string(v))) }
        if !c.buttons.isEmpty { top.append(JSONMember("buttons", .array(c.buttons.map(\.json)))) }
        if c.inapp { top.append(JSONMember("inapp", .number("1"))) }
        top += c.custom
        return JSONValue.object(top).bytes
    }

    static func buttonCategory(_ c: NotificationContent) -> String? {
        NotificationContent.category(forButtons: c.buttons.count)
    }

    /// The request headers besides authorization: push type, priority, expiration, collapse id, topic.
    public static func apnsHeaders(_ c: NotificationContent, bundleID: String) -> [(String, String)] {
        let background = c.silent
        var h: [(String, String)] = [("apns-push-type", background ? "background" : "alert"),
                                     ("apns-priority", background ? "5" : "10")]  // Apple requires 5 for background pushes
        if let e = c.expirationAt { h.append(("apns-expiration", String(e))) }
        if let id = c.collapseID { h.append(("apns-collapse-id", id)) }
        h.append(("apns-topic", bundleID))
        return h
    }

    // MARK: FCM

    /// The `data` map of the FCM v1 message, in a fixed key order.
    public static func fcmData(_ c: NotificationContent, messageID: String) -> [UInt8] {
        var d: [JSONMember] = [JSONMember("message_id", .string(messageID))]
        func s(_ k: String, _ v: String?) { if let v { d.append(JSONMember(k, .string(v))) } }
        func args(_ k: String, _ v: [String]?) { if let v { d.append(JSONMember(k, .string(JSONValue.array(v.map { .string($0) }).text))) } }
        s("campaign_id", c.campaignID)
        if c.silent {
            s("silent", "1")
            if c.inapp { s("inapp", "1") }
        } else {
            s("title", c.title)
            s("body", c.body)
            s("badge", c.badge.map { String($0) })
            s("sound", c.sound)
            s("title_loc_key", c.titleLocKey)
            args("title_loc_args", c.titleLocArgs)
            s("loc_key", c.locKey)
            args("loc_args", c.locArgs)
            s("action_loc_key", c.actionLocKey)
            s("launch_image", c.launchImage)
            s("image_url", c.imageURL)
            s("thumbnail_url", c.thumbnailURL)
            s("deep_link", c.deepLink)
            if !c.buttons.isEmpty { s("buttons", JSONValue.array(c.buttons.map(\.json)).text) }
            s("channel_id", c.channelID)
            if c.inapp { s("inapp", "1") }
        }
        // The MPush Android SDK reads `custom` with `new JSONObject(custom)`: a plain push always
        // carries it as a JSON object string, "{}" when empty (JSONObject refuses "[]"); rich and
        // silent pushes (seed 004's app reads top-level keys) carry it only when there is something in it.
        if !c.custom.isEmpty {
            d.append(JSONMember("custom", .string(JSONValue.object(c.custom).text)))
        } else if !c.isRich && !c.silent {
            d.append(JSONMember("custom", .string("{}")))
        }
        return JSONValue.object(d).bytes
    }

    /// The whole FCM v1 request body for one token: `{"message":{"token","data","android"}}`.
    /// `ttlSeconds` comes from `expiration_at` at the time of sending, clamped to 0…`fcmMaxTTLSeconds`.
    public static func fcmMessage(token: String, data: [UInt8], priority: String, ttlSeconds: Int64?, into out: inout [UInt8]) {
        let parts = fcmMessageParts(data: data, priority: priority, ttlSeconds: ttlSeconds)
        out.append(contentsOf: parts.prefix)
        JSONWriter.appendStringContents(token, to: &out)
        out.append(contentsOf: parts.suffix)
    }

    /// The FCM v1 request body around the token, made once per batch: `prefix` ends inside the
    /// token's quotes and `suffix` starts there, so a body is prefix ‖ escaped token ‖ suffix.
    public static func fcmMessageParts(data: [UInt8], priority: String, ttlSeconds: Int64?) -> (prefix: [UInt8], suffix: [UInt8]) {
        var suffix: [UInt8] = [0x22]
        suffix.append(contentsOf: fcmData)
        suffix.append(contentsOf: data)
        suffix.append(contentsOf: Array(",\"android\":{\"priority\":\"\(priority == "high" ? "high" : "normal")\"".utf8))
        // FCM refuses a TTL over 4 weeks: an expiration_at further ahead is sent as the maximum
        // (the notification stays deliverable as long as FCM allows); one in the past as 0.
        if let ttl = ttlSeconds { suffix.append(contentsOf: Array(",\"ttl\":\"\(min(max(0, ttl), fcmMaxTTLSeconds))s\"".utf8)) }
        suffix.append(contentsOf: [0x7D, 0x7D, 0x7D])
        return (fcmPrefix + [0x22], suffix)
    }

    /// True when `token` goes into a JSON string unchanged (no quote, backslash or control character).
    public static func isPlainJSONString(_ token: String) -> Bool {
        var t = token  // withUTF8 wants a var; a native string is not copied
        return t.withUTF8 { bytes in !bytes.contains { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C } }
    }

    private static let fcmPrefix = Array("{\"message\":{\"token\":".utf8)
    private static let fcmData = Array(",\"data\":".utf8)

    // MARK: Limits

    /// Both renderings, checked against the 4 KB provider limits.
    public static func checkSizes(_ c: NotificationContent, messageID: String) -> [SendProblem] {
        var problems: [SendProblem] = []
        let apns = apnsPayload(c, messageID: messageID).count
        if apns > sizeLimit {
            problems.append(SendProblem(field: "payload", message: "The APNs payload would be \(apns) bytes, \(apns - sizeLimit) over the \(sizeLimit)-byte limit."))
        }
        let fcm = fcmData(c, messageID: messageID).count
        if fcm > sizeLimit {
            problems.append(SendProblem(field: "payload", message: "The FCM data would be \(fcm) bytes, \(fcm - sizeLimit) over the \(sizeLimit)-byte limit."))
        }
        return problems
    }
}
