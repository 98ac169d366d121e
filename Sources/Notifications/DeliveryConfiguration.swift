import Foundation

/// How notifications are delivered (the `delivery` object of `topicstore serve --config`):
///
/// ```json
/// "delivery": {
///   "enabled": true,
///   "apnsProductionURL": "https://api.push.apple.com",
///   "apnsSandboxURL": "https://api.sandbox.push.apple.com",
///   "fcmURL": "https://fcm.googleapis.com",
///   "fcmTokenURI": null,
///   "caFile": null,
///   "batchSize": 5000,
///   "maxInFlight": 1000,
///   "connectionsPerHost": 2,
///   "lanes": 4,
///   "maxAttempts": 4,
///   "retryBaseSeconds": 0.5,
///   "retryMaxSeconds": 30,
///   "requestTimeoutSeconds": 30,
///   "rateLimit": {"perSecond": 0, "burst": 0}
/// }
/// ```
/// `fcmTokenURI` null means the service account's own `token_uri`; `caFile`
/// null means the system's CA bundle. A rate of 0 is no per-project limit.
public struct DeliveryConfiguration: Sendable, Equatable {
    public var enabled = true
    public var apnsProductionURL = "https://api.push.apple.com"
    public var apnsSandboxURL = "https://api.sandbox.push.apple.com"
    public var fcmURL = "https://fcm.googleapis.com"
    public var fcmTokenURI: String?
    public var caFile: String?
    /// Devices per durable progress step: the most that can be pushed twice after a crash.
    public var batchSize = 5000
    /// Concurrent HTTP/2 streams in flight (over all connections).
    public var maxInFlight = 1000
    public var connectionsPerHost = 2
    /// Delivery threads, each with its own connections, delivering one notification at a time:
    /// notifications of different projects go out side by side, one project's on one lane.
    public var lanes = 4
    /// Tries per device on 429, 5xx and transport errors (the first one included).
    public var maxAttempts = 4
    public var retryBaseSeconds = 0.5
    public var retryMaxSeconds = 30.0
    public var requestTimeoutSeconds = 30.0
    /// Pushes per second per project (token bucket); 0 = no limit.
    public var ratePerSecond = 0.0
    public var rateBurst = 0.0

    public init() {}

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public mutating func load(_ object: [String: Any]) throws(Invalid) {
        let known: Set<String> = ["enabled", "apnsProductionURL", "apnsSandboxURL", "fcmURL", "fcmTokenURI", "caFile", "batchSize",
                                  "maxInFlight", "connectionsPerHost", "lanes", "maxAttempts", "retryBaseSeconds", "retryMaxSeconds",
                                  "requestTimeoutSeconds", "rateLimit"]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw Invalid(description: "unknown delivery setting '\(unknown)'")
        }
        func url(_ key: String) throws(Invalid) -> String? {
            guard let v = object[key], !(v is NSNull) else { return nil }
            guard let s = v as? String, s.hasPrefix("http://") || s.hasPrefix("https://") else {
                throw Invalid(description: "delivery.\(key) must be an http(s) URL")
            }
            return s.hasSuffix("/") ? String(s.dropLast()) : s
        }
        /// A number in `range`, said as a config file would say it (`0`, not `0.0`).
        func number(_ key: String, _ range: ClosedRange<Double>, whole: Bool, unit: String) throws(Invalid) -> Double? {
            guard let v = object[key] else { return nil }
            let n = (v as? NSNumber).flatMap { String(cString: $0.objCType) != "c" ? $0.doubleValue : nil }
            guard let n, range.contains(n), !whole || n == n.rounded() else {
                let what = whole ? "a whole number from \(Self.shown(range.lowerBound)) to \(Self.shown(range.upperBound))"
                                 : "from \(Self.shown(range.lowerBound)) to \(Self.shown(range.upperBound))"
                throw Invalid(description: "delivery.\(key) must be \(what)\(unit)" + (n.map { ", not \(Self.shown($0))" } ?? ""))
            }
            return n
        }
        func count(_ key: String, _ range: ClosedRange<Double>) throws(Invalid) -> Int? {
            try number(key, range, whole: true, unit: "").map { Int($0) }
        }
        func seconds(_ key: String, _ range: ClosedRange<Double>) throws(Invalid) -> Double? {
            try number(key, range, whole: false, unit: " seconds")
        }
        if let v = object["enabled"] {
            guard let b = v as? Bool else { throw Invalid(description: "delivery.enabled must be true or false") }
            enabled = b
        }
        if let u = try url("apnsProductionURL") { apnsProductionURL = u }
        if let u = try url("apnsSandboxURL") { apnsSandboxURL = u }
        if let u = try url("fcmURL") { fcmURL = u }
        if object["fcmTokenURI"] != nil { fcmTokenURI = try url("fcmTokenURI") }
        if let v = object["caFile"] {
            if v is NSNull { caFile = nil } else if let s = v as? String { caFile = s } else { throw Invalid(description: "delivery.caFile must be a path") }
        }
        if let n = try count("batchSize", 1...1_000_000) { batchSize = n }
        if let n = try count("maxInFlight", 1...100_000) { maxInFlight = n }
        if let n = try count("connectionsPerHost", 1...64) { connectionsPerHost = n }
        if let n = try count("lanes", 1...64) { lanes = n }
        if let n = try count("maxAttempts", 1...20) { maxAttempts = n }
        if let n = try seconds("retryBaseSeconds", 0...60) { retryBaseSeconds = n }
        if let n = try seconds("retryMaxSeconds", 0...3600) { retryMaxSeconds = n }
        if let n = try seconds("requestTimeoutSeconds", 1...600) { requestTimeoutSeconds = n }
        if let v = object["rateLimit"] {
            guard let o = v as? [String: Any], let rate = (o["perSecond"] as? NSNumber)?.doubleValue, rate >= 0 else {
                throw Invalid(description: "delivery.rateLimit must be {\"perSecond\": N, \"burst\": M}")
            }
            ratePerSecond = rate
            rateBurst = (o["burst"] as? NSNumber)?.doubleValue ?? rate
        }
    }

    /// A number as a config file would say it: `0`, not `0.0` (also for
    /// `ServerConfiguration`'s messages, which hold this section).
    public static func shown(_ n: Double) -> String {
        n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
    }
}
