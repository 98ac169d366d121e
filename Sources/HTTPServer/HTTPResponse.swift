/// A complete response. `route` and `principal` are not sent: they label the
/// request in the access log and metrics.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// The route template that answered (`/api/register`, `/v1/devices/{device_id}`).
    public var route: String?
    /// Who asked (a key id), for the access log.
    public var principal: String?

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [],
                route: String? = nil, principal: String? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.route = route
        self.principal = principal
    }

    /// The standard reason phrase of `status`.
    public static func reason(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 406: return "Not Acceptable"
        case 413: return "Payload Too Large"
        case 415: return "Unsupported Media Type"
        case 422: return "Unprocessable Entity"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status \(status)"
        }
    }
}
