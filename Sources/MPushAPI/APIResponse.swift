import Foundation
import HTTPServer
import SubscriptionLog

/// The response shapes of the MPush API: JSON objects, always, for every status.
public enum APIResponse {
    static let jsonType = "application/json"

    /// Success as every MPush SDK accepts it: 200, `{"status_code":0}`.
    static func success() -> HTTPResponse {
        HTTPResponse(status: 200, headers: ["Content-Type": jsonType], body: Array("{\"status_code\":0}".utf8))
    }

    /// `object` as JSON (sorted keys, `/` unescaped).
    static func json(_ status: Int, _ object: Any, headers: HTTPHeaders = HTTPHeaders()) -> HTTPResponse {
        var h = headers
        h.set("Content-Type", jsonType)
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data("{\"message\":\"Server Error.\"}".utf8)
        return HTTPResponse(status: status, headers: h, body: Array(data))
    }

    /// `{"message": …}` with `status`.
    public static func message(_ status: Int, _ text: String, headers: HTTPHeaders = HTTPHeaders()) -> HTTPResponse {
        json(status, ["message": text], headers: headers)
    }

    /// The default message of each error status, in the wording of the MPush docs.
    public static func error(_ status: Int) -> HTTPResponse {
        switch status {
        case 400: return message(400, "Your request is invalid.")
        case 401: return message(401, "The project token is not present.")
        case 403: return message(403, "This action is unauthorized.")
        case 404: return message(404, "The requested resource can not be found.")
        case 405: return message(405, "You tried to use an invalid method.")
        case 406: return message(406, "You requested a format that isn't json.")
        case 413: return message(413, "The request body is too large.")
        case 429: return message(429, "Too Many Attempts.")
        case 500: return message(500, "Server Error.")
        case 503: return message(503, "Service Unavailable.", headers: ["Retry-After": "1"])
        default: return message(status, HTTPResponse.reason(status))
        }
    }

    /// 422 `{"message":"The given data was invalid.","errors":{field:[messages]}}`.
    static func invalid(_ errors: [ValidationError]) -> HTTPResponse {
        var grouped: [String: [String]] = [:]
        for e in errors { grouped[e.field, default: []].append(e.message) }
        return json(422, ["message": "The given data was invalid.", "errors": grouped])
    }

    static func invalid(field: String, _ message: String) -> HTTPResponse {
        invalid([ValidationError(field: field, message: message)])
    }
}
