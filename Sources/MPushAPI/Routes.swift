import HTTPServer

/// Every route of the API, with its methods and who may call it.
enum Route: String, CaseIterable, Sendable {
    case tokens = "/api/tokens"
    case register = "/api/register"
    case unregister = "/api/unregister"
    case unregisterAll = "/api/unregister-all"
    case audienceCount = "/v1/audience/count"
    case audience = "/v1/audience"
    case topics = "/v1/topics"
    case device = "/v1/devices/{device_id}"
    case feedback = "/v1/feedback"
    case send = "/api/send"
    case notification = "/api/notifications/{id}"
    case notificationOpen = "/api/notifications/{id}/opens"
    case health = "/healthz"
    case metrics = "/metrics"
    case openAPI = "/openapi.json"

    enum Access { case `public`, membership, server }

    var access: Access {
        switch self {
        case .tokens, .register, .unregister, .unregisterAll, .notificationOpen: return .membership
        case .audienceCount, .audience, .topics, .device, .feedback, .send, .notification: return .server
        case .health, .metrics, .openAPI: return .public
        }
    }

    var methods: [String] {
        switch self {
        case .tokens, .register, .unregister, .unregisterAll, .feedback, .send, .notificationOpen: return ["POST"]
        case .audienceCount, .audience: return ["GET", "POST"]
        case .topics, .device, .health, .metrics, .openAPI, .notification: return ["GET", "HEAD"]
        }
    }

    /// The routes without an id in their path, by their path: `Route(rawValue:)`
    /// compared a path with each raw value in turn (and `String.count` counted its
    /// characters), 1.6k of every request's instructions (callgrind).
    private static let byPath: [String: Route] =
        Dictionary(uniqueKeysWithValues: allCases.filter { !$0.rawValue.contains("{") }.map { ($0.rawValue, $0) })

    /// The route for a request's path as sent (`HTTPRequest.rawPath`) and, for `/v1/devices/…`
    /// and `/api/notifications/…`, the id in it. Ids are decoded after the path is split, so
    /// `%2F` is a slash inside an id and `/` is not; one trailing `/` is dropped first.
    static func match(rawPath: String) -> (Route, String?)? {
        var raw = rawPath
        if raw.utf8.count > 1, raw.utf8.last == UInt8(ascii: "/") { raw.removeLast() }
        let p = PercentDecoding.decode(raw)
        if let r = byPath[p] { return (r, nil) }
        let notifications = "/api/notifications/"
        if raw.hasPrefix(notifications) {
            let rest = raw.dropFirst(notifications.count)
            if rest.hasSuffix("/opens") {
                let id = rest.dropLast("/opens".count)
                if !id.isEmpty && !id.contains("/") { return (.notificationOpen, PercentDecoding.decode(String(id))) }
            } else if !rest.isEmpty && !rest.contains("/") {
                return (.notification, PercentDecoding.decode(String(rest)))
            }
        }
        let prefix = "/v1/devices/"
        if raw.hasPrefix(prefix) {
            let id = PercentDecoding.decode(String(raw.dropFirst(prefix.count)))
            if !id.isEmpty { return (.device, id) }
        }
        return nil
    }
}
