import Foundation
import Notifications
import Testing

/// Payload bytes per platform for every example of the two seeds.
@Suite struct SendRenderingTests {
    static let id = "5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58"

    func render(_ payload: String) throws -> (apns: String, fcm: String) {
        let content = try NotificationContent(payload: try JSONParser.parse(Array(payload.utf8)))
        return (String(decoding: PayloadRenderer.apnsPayload(content, messageID: Self.id), as: UTF8.self),
                String(decoding: PayloadRenderer.fcmData(content, messageID: Self.id), as: UTF8.self))
    }

    @Test func seed000BasicNotification() throws {
        let r = try render(#"{"body": "Hello"}"#)
        #expect(r.apns == #"{"aps":{"alert":{"body":"Hello"}},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58"}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","body":"Hello","custom":"{}"}"#)
    }

    @Test func seed000BadgeAndSound() throws {
        let r = try render(#"{"title": "News!", "body": "Hello", "badge": 2, "sound": "sound.aiff"}"#)
        #expect(r.apns == #"{"aps":{"alert":{"title":"News!","body":"Hello"},"badge":2,"sound":"sound.aiff"},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58"}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","title":"News!","body":"Hello","badge":"2","sound":"sound.aiff","custom":"{}"}"#)
    }

    @Test func seed000Image() throws {
        let r = try render(#"{"body": "Message with Image", "mutable_content": 1, "custom": {"media_url": "https://link-to-image.com"}}"#)
        #expect(r.apns == #"{"aps":{"alert":{"body":"Message with Image"},"mutable-content":1},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","media_url":"https://link-to-image.com"}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","body":"Message with Image","custom":"{\"media_url\":\"https://link-to-image.com\"}"}"#)
    }

    @Test func seed000Localization() throws {
        let r = try render(#"{"loc_key": "LOCALIZED_PUSH", "loc_args": ["Name", "Surname"]}"#)
        #expect(r.apns == #"{"aps":{"alert":{"loc-key":"LOCALIZED_PUSH","loc-args":["Name","Surname"]}},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58"}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","loc_key":"LOCALIZED_PUSH","loc_args":"[\"Name\",\"Surname\"]","custom":"{}"}"#)
    }

    static let richPayload = #"""
    {"title": "A pastry on us", "subtitle": "South Congress",
     "body": "Pick any pastry with your next order. It's in your wallet until November 12.",
     "campaign_id": "e4a09b27-7d13-4c5e-9f82-31b6c0d8a4f1",
     "image_url": "https://cdn.unplugdining.com/demo/campaigns/fall-pastry.jpg",
     "thumbnail_url": "https://cdn.unplugdining.com/demo/campaigns/fall-pastry-thumb.jpg",
     "deep_link": "yourapp://wallet/7e3a9c51-0b8d-4f2e-a6c4-5d1b9e7f3a28",
     "buttons": [{"id": "primary", "label": "See my wallet", "action": "open_screen", "url": "yourapp://wallet/7e3a9c51-0b8d-4f2e-a6c4-5d1b9e7f3a28"},
                 {"id": "secondary", "label": "Not now", "action": "close", "url": null}],
     "channel_id": "marketing"}
    """#
    /// Seed 004's APNs payload, compacted.
    static let richAPNs = #"{"aps":{"alert":{"title":"A pastry on us","subtitle":"South Congress","body":"Pick any pastry with your next order. It's in your wallet until November 12."},"mutable-content":1,"category":"UNPLUG_TWO_BUTTONS"},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","campaign_id":"e4a09b27-7d13-4c5e-9f82-31b6c0d8a4f1","image_url":"https://cdn.unplugdining.com/demo/campaigns/fall-pastry.jpg","deep_link":"yourapp://wallet/7e3a9c51-0b8d-4f2e-a6c4-5d1b9e7f3a28","buttons":[{"id":"primary","label":"See my wallet","action":"open_screen","url":"yourapp://wallet/7e3a9c51-0b8d-4f2e-a6c4-5d1b9e7f3a28"},{"id":"secondary","label":"Not now","action":"close","url":null}]}"#
    /// Seed 004's FCM data, compacted.
    static let richFCM = #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","campaign_id":"e4a09b27-7d13-4c5e-9f82-31b6c0d8a4f1","title":"A pastry on us","body":"Pick any pastry with your next order. It's in your wallet until November 12.","image_url":"https://cdn.unplugdining.com/demo/campaigns/fall-pastry.jpg","thumbnail_url":"https://cdn.unplugdining.com/demo/campaigns/fall-pastry-thumb.jpg","deep_link":"yourapp://wallet/7e3a9c51-0b8d-4f2e-a6c4-5d1b9e7f3a28","buttons":"[{\"id\":\"primary\",\"label\":\"See my wallet\",\"action\":\"open_screen\",\"url\":\"yourapp://wallet/7e3a9c51-0b8d-4f2e-a6c4-5d1b9e7f3a28\"},{\"id\":\"secondary\",\"label\":\"Not now\",\"action\":\"close\",\"url\":null}]","channel_id":"marketing"}"#

    @Test func seed004RichPush() throws {
        let r = try render(Self.richPayload)
        #expect(r.apns == Self.richAPNs)
        #expect(r.fcm == Self.richFCM)
        // One button: the one-button category.
        let one = try render(#"{"body":"b","buttons":[{"id":"primary","label":"Open","action":"open_url","url":"https://x"}]}"#)
        #expect(one.apns.contains(#""category":"UNPLUG_ONE_BUTTON""#))
        // Seed 004's APNs payload names the category beside its buttons: the same push.
        let named = Self.richPayload.replacingOccurrences(of: #""channel_id": "marketing"}"#,
                                                          with: #""channel_id": "marketing", "category": "UNPLUG_TWO_BUTTONS"}"#)
        #expect(named != Self.richPayload)
        #expect(try render(named) == r)
        // A category the buttons contradict is refused, naming both.
        let wrong = named.replacingOccurrences(of: "UNPLUG_TWO_BUTTONS", with: "UNPLUG_ONE_BUTTON")
        #expect(throws: (any Error).self) { try render(wrong) }
        do { _ = try render(wrong) } catch { #expect("\(error)".contains("UNPLUG_TWO_BUTTONS"), "\(error)") }
    }

    @Test func seed004SilentInAppFetch() throws {
        let r = try render(#"{"silent": true, "inapp": true}"#)
        #expect(r.apns == #"{"aps":{"content-available":1},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","inapp":1}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","silent":"1","inapp":"1"}"#)
        let content = try NotificationContent(payload: try JSONParser.parse(Array(#"{"silent":true}"#.utf8)))
        let headers = PayloadRenderer.apnsHeaders(content, bundleID: "com.example.app")
        #expect(headers.map { "\($0.0): \($0.1)" } == ["apns-push-type: background", "apns-priority: 5", "apns-topic: com.example.app"])
    }

    /// `inapp` on a push with something to show is a visible push whose tap opens the in-app
    /// message (seed 004's open intent carries `inapp`); alone, it is the silent fetch.
    @Test func inAppOnAVisiblePush() throws {
        let r = try render(#"{"title":"Your reward","body":"Tap to see it","inapp":true}"#)
        #expect(r.apns == #"{"aps":{"alert":{"title":"Your reward","body":"Tap to see it"}},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","inapp":1}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","title":"Your reward","body":"Tap to see it","inapp":"1","custom":"{}"}"#)
        let visible = try NotificationContent(payload: try JSONParser.parse(Array(#"{"body":"b","inapp":true,"silent":false}"#.utf8)))
        #expect(!visible.silent && visible.inapp)
        #expect(PayloadRenderer.apnsHeaders(visible, bundleID: "b").first?.1 == "alert")
        let fetch = try render(#"{"inapp": true}"#)
        #expect(fetch.apns == #"{"aps":{"content-available":1},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","inapp":1}"#)
        #expect(fetch.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","silent":"1","inapp":"1"}"#)
    }

    @Test func apnsHeadersAndFCMEnvelope() throws {
        let content = try NotificationContent(payload: try JSONParser.parse(Array(#"{"body":"x","collapse_id":7,"expiration_at":1900000000,"priority":"high"}"#.utf8)))
        let headers = PayloadRenderer.apnsHeaders(content, bundleID: "com.example.app")
        #expect(headers.map { "\($0.0): \($0.1)" } == ["apns-push-type: alert", "apns-priority: 10", "apns-expiration: 1900000000",
                                                        "apns-collapse-id: 7", "apns-topic: com.example.app"])
        var out: [UInt8] = []
        PayloadRenderer.fcmMessage(token: "T1", data: Array(#"{"a":"b"}"#.utf8), priority: "high", ttlSeconds: 60, into: &out)
        #expect(String(decoding: out, as: UTF8.self) == #"{"message":{"token":"T1","data":{"a":"b"},"android":{"priority":"high","ttl":"60s"}}}"#)
        // The delivery worker splices a plain token between the parts made once per batch: the same bytes.
        let parts = PayloadRenderer.fcmMessageParts(data: Array(#"{"a":"b"}"#.utf8), priority: "high", ttlSeconds: 60)
        #expect(PayloadRenderer.isPlainJSONString("T1"))
        #expect(parts.prefix + Array("T1".utf8) + parts.suffix == out)
        // A token that needs escaping (printable ASCII allows " and \) is not plain, and fcmMessage escapes it.
        #expect(!PayloadRenderer.isPlainJSONString(#"a"b"#) && !PayloadRenderer.isPlainJSONString(#"a\b"#))
        var escaped: [UInt8] = []
        PayloadRenderer.fcmMessage(token: #"a"b\c"#, data: Array("{}".utf8), priority: "normal", ttlSeconds: nil, into: &escaped)
        #expect(String(decoding: escaped, as: UTF8.self) == #"{"message":{"token":"a\"b\\c","data":{},"android":{"priority":"normal"}}}"#)
    }

    /// FCM takes an Android TTL of at most 4 weeks: an `expiration_at` further ahead is sent as the maximum.
    @Test func fcmTTLIsClampedToFourWeeks() throws {
        func ttl(_ seconds: Int64?) -> String {
            var out: [UInt8] = []
            PayloadRenderer.fcmMessage(token: "T", data: Array("{}".utf8), priority: "normal", ttlSeconds: seconds, into: &out)
            return String(decoding: out, as: UTF8.self)
        }
        #expect(PayloadRenderer.fcmMaxTTLSeconds == 2_419_200)
        #expect(ttl(103_931_282) == #"{"message":{"token":"T","data":{},"android":{"priority":"normal","ttl":"2419200s"}}}"#)
        #expect(ttl(2_419_201).contains(#""ttl":"2419200s""#))
        #expect(ttl(2_419_200).contains(#""ttl":"2419200s""#))
        #expect(ttl(3600).contains(#""ttl":"3600s""#))
        #expect(ttl(-5).contains(#""ttl":"0s""#))
        #expect(!ttl(nil).contains("ttl"))
    }

    @Test func validationNamesEveryField() throws {
        func problems(_ json: String) -> [String] {
            do { _ = try NotificationContent(payload: try JSONParser.parse(Array(json.utf8))); return [] } catch let e as SendProblems {
                return e.problems.map(\.field)
            } catch { return ["unexpected \(error)"] }
        }
        #expect(problems(#"{"title":"no body"}"#) == ["payload.body"])
        #expect(problems(#"{"body":"x","badge":-1}"#) == ["payload.badge"])
        #expect(problems(#"{"body":"x","custom":{"aps":1}}"#) == ["payload.custom.aps"])
        #expect(problems(#"{"body":"x","buttons":[{"id":"third","label":"","action":"jump"}]}"#) == ["payload.buttons.0.id", "payload.buttons.0.label", "payload.buttons.0.action"])
        #expect(problems(#"{"silent":true,"body":"x"}"#) == ["payload.body"])
        #expect(problems(#"{"body":"x","colour":"red"}"#) == ["payload.colour"])
        // An explicit silent:false with inapp is a visible push, so it needs its body.
        #expect(problems(#"{"inapp":true,"silent":false}"#) == ["payload.body"])
        #expect(problems(#"{"silent":true,"inapp":true,"title":"x"}"#) == ["payload.title"])
        // The app opens an open_screen button's url: it needs one (a close button takes none).
        #expect(problems(#"{"body":"x","buttons":[{"id":"primary","label":"Go","action":"open_screen"}]}"#) == ["payload.buttons.0.url"])
        #expect(problems(#"{"body":"x","buttons":[{"id":"primary","label":"No","action":"close"}]}"#) == [])
        // A button key the renderers would drop is refused, like any unknown payload key.
        #expect(problems(#"{"body":"x","buttons":[{"id":"primary","label":"Go","action":"open_url","url":"u","icon":"star"}]}"#) == ["payload.buttons.0.icon"])
        // Only the keys APNs has beside the custom ones at the top level are reserved.
        #expect(problems(#"{"body":"x","custom":{"title":"t","sound":"s","badge":1}}"#) == [])
        #expect(problems(#"{"body":"x","custom":{"image_url":"u","inapp":1}}"#) == ["payload.custom.image_url", "payload.custom.inapp"])
        // Blank texts are no texts, as MPush's TrimStrings and ConvertEmptyStringsToNull make them.
        #expect(problems(#"{"body":"   "}"#) == ["payload.body"])
        #expect(problems(#"{"body":"\t\u200b ","loc_key":" "}"#) == ["payload.body"])
        // A silent push is a content-available push: false there contradicts it.
        #expect(problems(#"{"silent":true,"content_available":false}"#) == ["payload.content_available"])
        #expect(problems(#"{"silent":true,"content_available":true}"#) == [])
    }

    @Test func textsAreTrimmedAsMPushReadsThem() throws {
        let r = try render(#"{"title":"  News! ","subtitle":" ","body":"\u200bHello \n"}"#)
        #expect(r.apns == #"{"aps":{"alert":{"title":"News!","body":"Hello"}},"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58"}"#)
        #expect(r.fcm == #"{"message_id":"5b81d3e0-2c4f-4a96-8e17-d0f9a3b62c58","title":"News!","body":"Hello","custom":"{}"}"#)
    }

    @Test func sizeLimitSaysByHowMuch() throws {
        let custom = String(repeating: "a", count: 4200)
        let content = try NotificationContent(payload: try JSONParser.parse(Array("{\"body\":\"x\",\"custom\":{\"k\":\"\(custom)\"}}".utf8)))
        let problems = PayloadRenderer.checkSizes(content, messageID: Self.id)
        let apnsSize = PayloadRenderer.apnsPayload(content, messageID: Self.id).count
        #expect(problems.first?.message == "The APNs payload would be \(apnsSize) bytes, \(apnsSize - 4096) over the 4096-byte limit.")
        #expect(problems.count == 2)
        let small = try NotificationContent(payload: try JSONParser.parse(Array(#"{"body":"x"}"#.utf8)))
        #expect(PayloadRenderer.checkSizes(small, messageID: Self.id).isEmpty)
    }

    @Test func orderedJSONRoundTrip() throws {
        let text = #"{"z":1,"a":[true,false,null,-1.5e3],"m":"\u00e9\n\"\\/"}"#
        let v = try JSONParser.parse(Array(text.utf8))
        #expect(v.text == #"{"z":1,"a":[true,false,null,-1.5e3],"m":"é\n\"\\/"}"#)
        #expect(throws: JSONSyntaxError.self) { try JSONParser.parse(Array(#"{"a":01}"#.utf8)) }
    }
}
