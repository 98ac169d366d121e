import Foundation
import Notifications

/// What a provider's answer means for one device.
enum PushOutcome: Equatable {
    case sent
    /// The token is dead: a token-rejected event at `at` (ms: the provider's time when given, else when the push was sent).
    case rejected(at: Int64, reason: String)
    /// 429, 5xx or a transport error: try again (after Retry-After seconds when given).
    case retry(after: Double?, reason: String)
    /// The provider never processed the push (a refused stream): send it again, no attempt used.
    /// `afterAnswers`: the connection had answered others (the provider works, it is cycling
    /// connections); otherwise it is one refusal where nothing is answered, and those are capped.
    case refused(reason: String, afterAnswers: Bool)
    /// The provider token / access token was refused: get a new one and try again.
    case reauthenticate(reason: String)
    case failed(reason: String)
}

extension HTTP2Engine.Response {
    /// When a rejection without the provider's own timestamp is dated: when the push was sent,
    /// not when the answer came back. A device that registers its token again while the answer
    /// is on its way registered it after the rejection, and stays live (the fold's rule).
    var rejectionTime: Int64 { sentAtMillis > 0 ? sentAtMillis : HTTP2Engine.wallMillis() }
}

/// A response without a status: a refused stream, or a transport error to retry.
func transportOutcome(_ r: HTTP2Engine.Response) -> PushOutcome {
    let reason = "transport: \(r.error ?? "no response")"
    return r.refused ? .refused(reason: reason, afterAnswers: r.refusedAfterAnswers) : .retry(after: nil, reason: reason)
}

/// Retry-After: seconds, or an HTTP date.
func retryAfter(_ value: String?) -> Double? {
    guard let v = value?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
    if let s = Double(v) { return max(0, s) }
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
    return f.date(from: v).map { max(0, $0.timeIntervalSinceNow) }
}

/// APNs over HTTP/2 with token-based authentication.
final class APNsProvider {
    let credentials: APNsCredentials
    let baseURL: String
    let endpoint: HTTP2Engine.Endpoint
    /// `/3/device/`, to which each request appends its token.
    let pathPrefix: HTTP2Engine.SharedBody
    private let key: SigningKey
    private var token: (jwt: String, issuedAt: Int64)?
    /// Apple wants a provider token refreshed at most once per 20 minutes and at least once an hour.
    static let tokenLifetime: Int64 = 50 * 60

    init(credentials: APNsCredentials, configuration: DeliveryConfiguration) throws {
        self.credentials = credentials
        baseURL = credentials.sandbox ? configuration.apnsSandboxURL : configuration.apnsProductionURL
        guard let (endpoint, base) = HTTP2Engine.Endpoint.parse(baseURL) else { throw CredentialError("not an http(s) URL: \(baseURL)") }
        self.endpoint = endpoint
        pathPrefix = HTTP2Engine.SharedBody(base + "/3/device/")
        key = try SigningKey(pem: credentials.keyPEM)
    }

    /// The cached ES256 provider token, signed again when older than 50 minutes (or when forced).
    func authorization(force: Bool = false) throws -> String {
        let now = Int64(Date().timeIntervalSince1970)
        if !force, let t = token, now - t.issuedAt < Self.tokenLifetime { return t.jwt }
        let jwt = try JWT.apns(key: key, keyID: credentials.keyID, teamID: credentials.teamID, issuedAt: now)
        token = (jwt, now)
        return jwt
    }

    var signedTokens = 0

    /// The headers of every push of a batch (all but the path), encoded once.
    func headers(for content: NotificationContent, force: Bool = false) throws -> HTTP2Engine.Headers {
        var fields: [(name: String, value: String)] = [("authorization", "bearer \(try authorization(force: force))")]
        for (k, v) in PayloadRenderer.apnsHeaders(content, bundleID: credentials.bundleID) { fields.append((k, v)) }
        fields.append(("content-type", "application/json"))
        return HTTP2Engine.Headers(endpoint: endpoint, fields: fields)
    }

    static func classify(_ r: HTTP2Engine.Response) -> PushOutcome {
        if r.status == 0 { return transportOutcome(r) }
        if r.status == 200 { return .sent }
        let json = try? JSONParser.parse(r.body)
        let reason = json?["reason"]?.stringValue ?? "HTTP \(r.status)"
        switch (r.status, reason) {
        case (410, _):
            // Unregistered: the token stopped being valid at `timestamp` (ms).
            return .rejected(at: json?["timestamp"]?.integer() ?? r.rejectionTime, reason: reason)
        case (400, "BadDeviceToken"):
            return .rejected(at: r.rejectionTime, reason: reason)
        case (403, "ExpiredProviderToken"), (403, "InvalidProviderToken"):
            return .reauthenticate(reason: reason)
        case (429, _), (500...599, _):
            return .retry(after: retryAfter(r.retryAfter), reason: "\(r.status) \(reason)")
        default:
            return .failed(reason: "\(r.status) \(reason)")
        }
    }
}

/// The OAuth2 token exchange failed. `retryable`: a transport error, 429 or 5xx — worth trying
/// again like a push (after `retryAfter` seconds when the endpoint said so); else the
/// credentials themselves were refused.
struct TokenExchangeError: Error, CustomStringConvertible {
    var description: String
    var retryable: Bool
    var retryAfter: Double?
}

/// FCM HTTP v1 with a service account: RS256 assertion → OAuth2 access token.
final class FCMProvider {
    let credentials: FCMCredentials
    let sendURL: String
    let endpoint: HTTP2Engine.Endpoint
    /// `/v1/projects/<id>/messages:send`, the path of every push.
    let sendPath: HTTP2Engine.SharedBody
    let tokenURI: String
    let caFile: String?
    /// The token exchange's limit: the request timeout.
    let timeout: Double
    private let key: SigningKey
    private var access: (token: String, expiresAt: Double)?
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    init(credentials: FCMCredentials, configuration: DeliveryConfiguration) throws {
        self.credentials = credentials
        sendURL = configuration.fcmURL + "/v1/projects/\(credentials.projectID)/messages:send"
        guard let (endpoint, base) = HTTP2Engine.Endpoint.parse(configuration.fcmURL) else {
            throw CredentialError("not an http(s) URL: \(configuration.fcmURL)")
        }
        self.endpoint = endpoint
        sendPath = HTTP2Engine.SharedBody(base + "/v1/projects/\(credentials.projectID)/messages:send")
        tokenURI = configuration.fcmTokenURI ?? credentials.tokenURI
        caFile = configuration.caFile
        timeout = configuration.requestTimeoutSeconds
        key = try SigningKey(pem: credentials.privateKeyPEM)
    }

    /// The cached access token, exchanged again five minutes before it expires (or when forced).
    func accessToken(force: Bool = false, abort: () -> Bool = { false }) throws -> String {
        let now = Date().timeIntervalSince1970
        if !force, let a = access, now < a.expiresAt - 300 { return a.token }
        let assertion = try JWT.serviceAccount(key: key, keyID: credentials.privateKeyID, clientEmail: credentials.clientEmail,
                                               tokenURI: tokenURI, scope: Self.scope, issuedAt: Int64(now))
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        let r = HTTPFetch.post(url: tokenURI, headers: ["content-type: application/x-www-form-urlencoded"], body: Array(form.utf8),
                               caFile: caFile, timeoutSeconds: timeout, abort: abort)
        guard r.status == 200, let json = try? JSONParser.parse(r.body), let token = json["access_token"]?.stringValue else {
            throw TokenExchangeError(
                description: "the FCM token exchange at \(tokenURI) failed: \(r.error ?? "HTTP \(r.status) \(String(decoding: r.body.prefix(200), as: UTF8.self))")",
                retryable: r.status == 0 || r.status == 429 || (500...599).contains(r.status), retryAfter: retryAfter(r.retryAfter))
        }
        let lifetime = Double(json["expires_in"]?.integer() ?? 3600)
        access = (token, now + lifetime)
        return token
    }

    func headers(force: Bool = false, abort: () -> Bool = { false }) throws -> HTTP2Engine.Headers {
        HTTP2Engine.Headers(endpoint: endpoint, fields: [("authorization", "Bearer \(try accessToken(force: force, abort: abort))"),
                                                         ("content-type", "application/json; charset=utf-8")])
    }

    static func classify(_ r: HTTP2Engine.Response) -> PushOutcome {
        if r.status == 0 { return transportOutcome(r) }
        if r.status == 200 { return .sent }
        let json = try? JSONParser.parse(r.body)
        let error = json?["error"]
        let status = error?["status"]?.stringValue ?? "HTTP \(r.status)"
        var errorCode: String?
        var tokenField = false
        if case .array(let details)? = error?["details"] {
            for d in details {
                if let c = d["errorCode"]?.stringValue { errorCode = c }
                if case .array(let violations)? = d["fieldViolations"] {
                    for v in violations where v["field"]?.stringValue == "message.token" { tokenField = true }
                }
            }
        }
        let message = error?["message"]?.stringValue ?? ""
        if errorCode == "UNREGISTERED" || status == "NOT_FOUND" && r.status == 404 {
            return .rejected(at: r.rejectionTime, reason: "UNREGISTERED")
        }
        if status == "INVALID_ARGUMENT" && (tokenField || message.lowercased().contains("registration token")) {
            return .rejected(at: r.rejectionTime, reason: "INVALID_ARGUMENT")
        }
        switch r.status {
        case 401: return .reauthenticate(reason: "401 \(status)")
        case 429, 500...599: return .retry(after: retryAfter(r.retryAfter), reason: "\(r.status) \(errorCode ?? status)")
        default: return .failed(reason: "\(r.status) \(errorCode ?? status)")
        }
    }
}
