import SubscriptionLog

/// One button of a rich push (seed 004): at most two per notification.
public struct PushButton: Sendable, Equatable {
    public enum Action: String, Sendable { case openScreen = "open_screen", openURL = "open_url", close }
    public var id: String
    public var label: String
    public var action: Action
    public var url: String?

    /// The keys a button takes.
    static let keys: Set<String> = ["id", "label", "action", "url"]

    /// `{"id","label","action","url"}`, url null when absent (a close button): seed 004's shape.
    var json: JSONValue {
        .object([JSONMember("id", .string(id)), JSONMember("label", .string(label)),
                 JSONMember("action", .string(action.rawValue)), JSONMember("url", url.map { .string($0) } ?? .null)])
    }
}

/// A field-level problem with a send request (reported as 422).
public struct SendProblem: Error, Sendable, Equatable {
    public var field: String
    public var message: String
    public init(field: String, message: String) {
        self.field = field
        self.message = message
    }
}

/// What a notification says, validated: the MPush payload keys (seed 000) and
/// the rich-push extension (seed 004).
public struct NotificationContent: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var badge: Int64?
    public var sound: String?
    public var titleLocKey: String?
    public var titleLocArgs: [String]?
    public var locKey: String?
    public var locArgs: [String]?
    public var actionLocKey: String?
    public var launchImage: String?
    public var mutableContent = false
    public var contentAvailable = false
    public var category: String?

    /// The iOS notification category the app registers for this many buttons (seed 004).
    static func category(forButtons count: Int) -> String? {
        switch count {
        case 0: return nil
        case 1: return "UNPLUG_ONE_BUTTON"
        default: return "UNPLUG_TWO_BUTTONS"
        }
    }
    public var threadID: String?
    public var collapseID: String?
    /// Seconds since 1970 (UTC) after which the providers may drop it.
    public var expirationAt: Int64?
    /// `payload.custom`, members in the sender's order.
    public var custom: [JSONMember] = []
    // Rich push (seed 004).
    public var campaignID: String?
    public var imageURL: String?
    public var thumbnailURL: String?
    public var deepLink: String?
    public var buttons: [PushButton] = []
    public var channelID: String?
    // Silent push: tells the app to fetch in-app messages.
    public var silent = false
    public var inapp = false
    /// "normal" or "high".
    public var priority = "normal"

    /// The rich layout of seed 004: the app reads rich keys at the top level on both platforms.
    public var isRich: Bool {
        !buttons.isEmpty || imageURL != nil || thumbnailURL != nil || deepLink != nil || campaignID != nil || channelID != nil
    }

    public init() {}

    static let alertKeys = ["title", "subtitle", "body", "badge", "sound", "title_loc_key", "title_loc_args", "loc_key", "loc_args",
                            "action_loc_key", "launch_image", "mutable_content", "category", "thread_id", "image_url",
                            "thumbnail_url", "deep_link", "buttons", "channel_id"]
    public static let knownKeys: Set<String> = Set(alertKeys + ["content_available", "collapse_id", "expiration_at", "custom",
                                                         "campaign_id", "silent", "inapp", "priority"])
    /// The keys `custom` may not take: APNs gets the custom keys at the top level of its
    /// payload, beside these (which the app's notification extension reads there). FCM gets
    /// `custom` as one JSON string, where no key can collide.
    static let reservedCustomKeys: Set<String> = ["aps", "message_id", "campaign_id", "image_url", "deep_link", "buttons", "inapp"]

    /// Validates `payload` (the request's `payload` object). Every problem is reported, field by field.
    public init(payload: JSONValue) throws(SendProblems) {
        var problems: [SendProblem] = []
        guard case .object(let members) = payload else {
            throw SendProblems([SendProblem(field: "payload", message: "The payload must be an object.")])
        }
        func add(_ field: String, _ message: String) { problems.append(SendProblem(field: "payload.\(field)", message: message)) }
        for m in members where !Self.knownKeys.contains(m.key) {
            add(m.key, "The payload.\(m.key) field is not a payload key (put your own data in payload.custom).")
        }
        func string(_ key: String, max: Int = 2048) -> String? {
            guard let v = payload[key], !v.isNull else { return nil }
            guard let s = v.stringValue else { add(key, "The payload.\(key) must be a string."); return nil }
            if s.utf8.count > max { add(key, "The payload.\(key) may not be greater than \(max) bytes.") }
            return s
        }
        func stringArray(_ key: String) -> [String]? {
            guard let v = payload[key], !v.isNull else { return nil }
            guard case .array(let items) = v else { add(key, "The payload.\(key) must be an array of strings."); return nil }
            var out: [String] = []
            for item in items {
                switch item {
                case .string(let s): out.append(s)
                case .number(let t): out.append(t)  // loc args are format values: numbers are sent as their text
                default: add(key, "The payload.\(key) must be an array of strings."); return nil
                }
            }
            return out
        }
        func flag(_ key: String) -> Bool {
            guard let v = payload[key], !v.isNull else { return false }
            guard let b = v.boolean() else { add(key, "The payload.\(key) must be true, false, 1 or 0."); return false }
            return b
        }
        /// thread_id and collapse_id: the seed says int; strings are what APNs takes, so both are accepted.
        func identifier(_ key: String, max: Int) -> String? {
            guard let v = payload[key], !v.isNull else { return nil }
            let s: String
            if let i = v.integer() { s = String(i) } else if let t = v.stringValue, !t.isEmpty { s = t } else {
                add(key, "The payload.\(key) must be an integer or a non-empty string."); return nil
            }
            if s.utf8.count > max { add(key, "The payload.\(key) may not be greater than \(max) bytes.") }
            return s
        }

        // Texts as MPush reads them (Laravel's TrimStrings, then ConvertEmptyStringsToNull): trimmed,
        // and nothing left is no text. The MPush table makes body a required string, so a body of
        // spaces is no body (nor a blank loc_key).
        title = string("title").flatMap(Validation.trimmed)
        subtitle = string("subtitle").flatMap(Validation.trimmed)
        body = string("body", max: 4096).flatMap(Validation.trimmed)
        if let v = payload["badge"], !v.isNull {
            if let n = v.integer(), n >= 0, n <= Int64(Int32.max) { badge = n } else { add("badge", "The payload.badge must be a whole number of at least 0.") }
        }
        sound = string("sound")
        titleLocKey = string("title_loc_key")
        titleLocArgs = stringArray("title_loc_args")
        locKey = string("loc_key").flatMap(Validation.trimmed)
        locArgs = stringArray("loc_args")
        actionLocKey = string("action_loc_key")
        launchImage = string("launch_image")
        mutableContent = flag("mutable_content")
        contentAvailable = flag("content_available")
        category = string("category", max: 256)
        threadID = identifier("thread_id", max: 256)
        collapseID = identifier("collapse_id", max: 64)
        if let v = payload["expiration_at"], !v.isNull {
            if let n = v.integer(), n >= 0, n < 7_258_118_400 { expirationAt = n } else {
                add("expiration_at", "The payload.expiration_at must be a UNIX timestamp in seconds.")
            }
        }
        if let v = payload["custom"], !v.isNull {
            switch v {
            case .object(let m):
                custom = m
                for member in m where Self.reservedCustomKeys.contains(member.key) {
                    problems.append(SendProblem(field: "payload.custom.\(member.key)", message: "The key \(member.key) is reserved for the notification itself."))
                }
            case .array(let a) where a.isEmpty: custom = []   // what PHP clients send for an empty map
            default: add("custom", "The payload.custom must be an object.")
            }
        }
        campaignID = string("campaign_id", max: 256)
        imageURL = string("image_url")
        thumbnailURL = string("thumbnail_url")
        deepLink = string("deep_link")
        channelID = string("channel_id", max: 256)
        if let v = payload["buttons"], !v.isNull {
            if case .array(let items) = v {
                if items.count > 2 { add("buttons", "The payload.buttons may not have more than 2 items.") }
                for (i, item) in items.prefix(2).enumerated() {
                    let f = "buttons.\(i)"
                    guard case .object(let keys) = item else { add(f, "Each button must be an object."); continue }
                    for k in keys where !PushButton.keys.contains(k.key) {
                        add("\(f).\(k.key)", "The \(k.key) field is not a button key (a button has id, label, action and url).")
                    }
                    let id = item["id"]?.stringValue
                    let label = item["label"]?.stringValue
                    let action = item["action"]?.stringValue.flatMap(PushButton.Action.init(rawValue:))
                    var url: String?
                    if let u = item["url"], !u.isNull {
                        if let s = u.stringValue { url = s } else { add("\(f).url", "The url must be a string or null.") }
                    }
                    if id != "primary" && id != "secondary" { add("\(f).id", "The id must be primary or secondary.") }
                    if label?.isEmpty ?? true { add("\(f).label", "The label field is required.") }
                    if action == nil { add("\(f).action", "The action must be open_screen, open_url or close.") }
                    // The app opens a button's url for both (seed 004: optString("url")); only close takes none.
                    if action == .openURL && url == nil { add("\(f).url", "An open_url button needs a url.") }
                    if action == .openScreen && url == nil { add("\(f).url", "An open_screen button needs a url (the screen's deep link).") }
                    if let id, let label, let action, !label.isEmpty {
                        if buttons.contains(where: { $0.id == id }) { add("\(f).id", "Two buttons have the id \(id).") }
                        buttons.append(PushButton(id: id, label: label, action: action, url: url))
                    }
                }
            } else {
                add("buttons", "The payload.buttons must be an array.")
            }
        }
        // Buttons choose the category; seed 004's own payload names it beside them, which agrees.
        if let category, !buttons.isEmpty {
            if let chosen = Self.category(forButtons: buttons.count), category != chosen {
                add("category", "The payload.category \(category) does not match the \(buttons.count) button(s) given: they choose \(chosen).")
            }
        }
        // `inapp` marks a push that leads to an in-app message. Without `silent` it is the silent
        // in-app fetch when it carries nothing to show, and a visible push whose tap opens the
        // in-app message when it has a title or body (seed 004 passes `inapp` to its open intent).
        inapp = flag("inapp")
        if let v = payload["silent"], !v.isNull {
            silent = flag("silent")
        } else {
            silent = inapp && !Self.alertKeys.contains { payload[$0].map { !$0.isNull } ?? false }
        }
        if let p = string("priority") {
            if p == "normal" || p == "high" { priority = p } else { add("priority", "The payload.priority must be normal or high.") }
        }
        if silent {
            for key in Self.alertKeys where payload[key].map({ !$0.isNull }) ?? false {
                add(key, "A silent push carries no \(key).")
            }
            // A silent push is a background push: content-available is what makes it one.
            if let v = payload["content_available"], v.boolean() == false {
                add("content_available", "A silent push is content-available: content_available cannot be false.")
            }
        } else if body == nil && locKey == nil && !problems.contains(where: { $0.field == "payload.body" || $0.field == "payload.loc_key" }) {
            // One message per problem: a body of the wrong type is already reported.
            add("body", "The payload.body field is required.")
        }
        guard problems.isEmpty else { throw SendProblems(problems) }
    }
}

public struct SendProblems: Error, Sendable {
    public var problems: [SendProblem]
    public init(_ problems: [SendProblem]) { self.problems = problems }
}
