import AccessControl
import Foundation
import HTTPServer
import Notifications

/// Everything `topicstore serve` can be told, from flags or a JSON config file:
///
/// ```json
/// {
///   "listen": "127.0.0.1:8080",
///   "data": "./data",
///   "threads": 4,
///   "connectionLimit": 1024,
///   "connectionTimeoutSeconds": 60,
///   "bodyLimitBytes": 1048576,
///   "rateLimit": {"client": {"perSecond": 50000, "burst": 100000},
///                 "server": {"perSecond": 1000, "burst": 2000}},
///   "accessLog": true,
///   "shutdownTimeoutSeconds": 10,
///   "keyCacheSeconds": 0.5,
///   "audiencePageLimit": 10000
/// }
/// ```
/// `threads` n ≥ 1 is a pool of n threads (default 4): a command waits for
/// its group commit with its connection suspended, not holding a thread; 0 is a
/// thread per connection; a negative or fractional n is refused.
/// A rate of 0 turns the limit off for that kind of key.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port: UInt16 = 8080
    public var dataDirectory = "./data"
    public var threads = 4
    public var connectionLimit = 1024
    /// A connection that sends nothing for this long is closed (idle keep-alive, or a client stalled mid-request).
    public var connectionTimeout = 60
    public var bodyLimit = 1 << 20
    /// A client key is shared by every install of an app, so its limit only guards against abuse.
    public var rateLimits: [KeyKind: RateLimit] = [.client: RateLimit(perSecond: 50_000, burst: 100_000),
                                                   .server: RateLimit(perSecond: 1000, burst: 2000)]
    public var accessLog = true
    public var shutdownTimeout = 10.0
    public var keyCacheSeconds = 0.5
    /// Largest `limit` of an audience page.
    public var audiencePageLimit = 10_000
    /// APNs/FCM delivery (`delivery` in the config file; see `DeliveryConfiguration`).
    public var delivery = DeliveryConfiguration()

    public init() {}

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    /// `HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT`.
    public mutating func setListen(_ text: String) throws(Invalid) {
        var host = host
        var portText = text
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw Invalid(description: "bad listen address '\(text)'") }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = String(text[text.index(after: close)...].drop { $0 == ":" })
        } else if let colon = text.lastIndex(of: ":") {
            let h = String(text[..<colon])
            if !h.isEmpty { host = h }
            portText = String(text[text.index(after: colon)...])
        }
        guard let port = UInt16(portText) else { throw Invalid(description: "bad port in listen address '\(text)'") }
        self.host = host
        self.port = port
    }

    /// Reads a JSON config file over the defaults.
    public mutating func load(file path: String) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw Invalid(description: "cannot read config file \(path): it does not exist")
        }
        guard !isDirectory.boolValue else { throw Invalid(description: "cannot read config file \(path): it is a directory") }
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw Invalid(description: "cannot read config file \(path): \(String(cString: strerror(errno)))")
        }
        let parsed: Any
        do { parsed = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) } catch {
            // Foundation's message names the character where the JSON goes wrong.
            let detail = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
            throw Invalid(description: "config file \(path) is not valid JSON" + (detail.map { ": \($0)" } ?? ""))
        }
        guard let object = parsed as? [String: Any] else {
            throw Invalid(description: "config file \(path) is not a JSON object")
        }
        let known: Set<String> = ["listen", "data", "threads", "connectionLimit", "connectionTimeoutSeconds", "bodyLimitBytes", "rateLimit",
                                  "accessLog", "shutdownTimeoutSeconds", "keyCacheSeconds", "audiencePageLimit", "delivery"]
        if let unknown = object.keys.first(where: { !known.contains($0) }) {
            throw Invalid(description: "config file \(path): unknown setting '\(unknown)'")
        }
        func number(_ key: String) throws(Invalid) -> Double? {
            guard let v = object[key] else { return nil }
            guard let n = v as? NSNumber, !(String(cString: n.objCType) == "c") else {
                throw Invalid(description: "config file \(path): '\(key)' must be a number")
            }
            return n.doubleValue
        }
        if let v = object["listen"] {
            guard let s = v as? String else { throw Invalid(description: "config file \(path): 'listen' must be a string") }
            try setListen(s)
        }
        if let v = object["data"] {
            guard let s = v as? String else { throw Invalid(description: "config file \(path): 'data' must be a string") }
            dataDirectory = s
        }
        if let n = try number("threads") {
            guard n >= 0, n == n.rounded(), n <= Double(Int32.max) else {
                throw Invalid(description: "config file \(path): 'threads' must be 0 (a thread per connection) or a positive number of pool threads, not \(DeliveryConfiguration.shown(n))")
            }
            threads = Int(n)
        }
        /// A whole number of at least 1: a count or a size (never converted unchecked: 1e30 would trap).
        func count(_ key: String) throws(Invalid) -> Int? {
            guard let n = try number(key) else { return nil }
            guard n >= 1, n == n.rounded(), n <= Double(Int32.max) else {
                throw Invalid(description: "config file \(path): '\(key)' must be a whole number from 1 to \(Int32.max), not \(DeliveryConfiguration.shown(n))")
            }
            return Int(n)
        }
        func seconds(_ key: String, atMost limit: Double = 86_400) throws(Invalid) -> Double? {
            guard let n = try number(key) else { return nil }
            guard n >= 0, n <= limit else {
                throw Invalid(description: "config file \(path): '\(key)' must be 0 to \(DeliveryConfiguration.shown(limit)) seconds, not \(DeliveryConfiguration.shown(n))")
            }
            return n
        }
        if let n = try count("connectionLimit") { connectionLimit = n }
        if let n = try number("connectionTimeoutSeconds") {
            // One message for every value refused (0 and 4000 alike).
            guard n >= 1, n <= 3600, n == n.rounded() else {
                throw Invalid(description: "config file \(path): 'connectionTimeoutSeconds' must be a whole number of seconds from 1 to 3600, not \(DeliveryConfiguration.shown(n))")
            }
            connectionTimeout = Int(n)
        }
        if let n = try count("bodyLimitBytes") { bodyLimit = n }
        if let n = try seconds("shutdownTimeoutSeconds") { shutdownTimeout = n }
        // A revoked key keeps working this long: more than a second is refused, not quietly cut to one.
        if let n = try seconds("keyCacheSeconds", atMost: 1) { keyCacheSeconds = n }
        if let n = try count("audiencePageLimit") { audiencePageLimit = n }
        if let v = object["accessLog"] {
            guard let b = v as? Bool else { throw Invalid(description: "config file \(path): 'accessLog' must be true or false") }
            accessLog = b
        }
        if let v = object["delivery"] {
            guard let d = v as? [String: Any] else { throw Invalid(description: "config file \(path): 'delivery' must be an object") }
            do { try delivery.load(d) } catch { throw Invalid(description: "config file \(path): \(error.description)") }
        }
        if let v = object["rateLimit"] {
            guard let limits = v as? [String: Any] else { throw Invalid(description: "config file \(path): 'rateLimit' must be an object") }
            for (kindName, spec) in limits {
                guard let kind = KeyKind(rawValue: kindName), let spec = spec as? [String: Any],
                      let rate = (spec["perSecond"] as? NSNumber)?.doubleValue, rate >= 0, rate <= 1e9 else {
                    throw Invalid(description: "config file \(path): rateLimit.\(kindName) must be {\"perSecond\": N, \"burst\": M} for client or server, N from 0 (off) to 1000000000")
                }
                let burst = (spec["burst"] as? NSNumber)?.doubleValue ?? max(1, rate)
                guard rate == 0 || (burst >= 1 && burst <= 1e9) else {
                    throw Invalid(description: "config file \(path): rateLimit.\(kindName).burst must be from 1 to 1000000000, not \(DeliveryConfiguration.shown(burst))")
                }
                rateLimits[kind] = RateLimit(perSecond: rate, burst: burst)
            }
        }
    }

    var httpConfiguration: HTTPServer.Configuration {
        var c = HTTPServer.Configuration()
        c.host = host
        c.port = port
        c.threading = threads >= 1 ? .threadPool(threads) : .threadPerConnection
        c.bodyLimit = bodyLimit
        c.connectionLimit = connectionLimit
        c.connectionTimeout = connectionTimeout
        c.errorResponse = { APIResponse.error($0) }
        return c
    }
}
