import EventJSON
import Foundation
import Projections
import SubscriptionLog
import HTTPServer

/// Turns a request body into a JSON-like object, whatever way the SDK sent it.
///
/// One rule for every endpoint that reads a body, by the media type of `Content-Type`
/// (case and parameters such as `charset` ignored):
///
/// - `application/json`, `text/json`, any `…+json`: JSON.
/// - `application/x-www-form-urlencoded`, `text/plain`, `application/octet-stream`, or no
///   Content-Type: JSON when the body starts with `{` or `[`, else a form. curl `-d` labels
///   JSON as a form, and HTTP helpers label a body the caller gave no type as `text/plain`
///   (Dart's `http`, which the Flutter SDK uses) or `application/octet-stream`.
/// - Anything else (`application/xml`, `multipart/form-data`, …): 400, whatever the body.
///
/// An empty body is an empty object.
enum RequestBody {
    struct Problem: Error {
        var response: HTTPResponse
    }

    enum Format { case json, form }

    /// How the body is to be read; nil when it is empty. Throws for an unsupported Content-Type.
    static func format(_ request: HTTPRequest) throws(Problem) -> Format? {
        let contentType = request.headers["Content-Type"] ?? ""
        // What the SDKs send, decided from its bytes: the split, trim and lowercased copy
        // below were 10.6k instructions of every posted count or register.
        if isJSONMediaType(contentType) { return bodyFormat(request.body, declared: .json) }
        let media = contentType
            .split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first.map { $0.trimmingHTTPSpace.lowercased() } ?? ""
        let declared: Format?
        switch media {
        case "application/json", "text/json":
            declared = .json
        case "", "application/x-www-form-urlencoded", "text/plain", "application/octet-stream":
            declared = nil
        default:
            guard media.hasSuffix("+json") else {
                throw Problem(response: APIResponse.message(400,
                    "The Content-Type \(media) is not supported: send application/json or application/x-www-form-urlencoded."))
            }
            declared = .json
        }
        return bodyFormat(request.body, declared: declared)
    }

    /// The format of `body` (nil when it holds only white space): `declared`, or by its first byte.
    private static func bodyFormat(_ body: [UInt8], declared: Format?) -> Format? {
        guard let first = body.first(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }) else { return nil }
        return declared ?? (first == 0x7B || first == 0x5B ? .json : .form)  // { or [
    }

    /// Whether a Content-Type value's media type (before any `;`, without the
    /// spaces and tabs around it, in any case) is `application/json`, as `format`
    /// reads it (`application/json; charset=utf-8` is).
    static func isJSONMediaType(_ value: String) -> Bool {
        value.withUTF8Bytes { bytes in
            var end = 0
            while end < bytes.count, bytes[end] != UInt8(ascii: ";") { end += 1 }
            var start = 0
            while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
            while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
            return ASCIIText.equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), "application/json")
        }
    }

    /// The body as an object (JSON or form).
    static func object(_ request: HTTPRequest) throws(Problem) -> [String: Any] {
        switch try format(request) {
        case nil: return [:]
        case .json: return try json(request.body)
        case .form: return try form(request.body)
        }
    }

    /// A membership command read straight from a JSON body of the common shape
    /// (`EventJSON.plainRequestEvent`: `{"device_id":"D1","topics":["news"]}`),
    /// with the project and type given; nil for a body of another shape or
    /// format, or not UTF-8, to be read through `object`, which gives the errors.
    /// Throws as `format` does. (Through `object`, an app's register spent a
    /// quarter of its instructions building an `[String: Any]` and casting its
    /// values back.)
    static func plainCommand(_ request: HTTPRequest, project: String, type: String) throws(Problem) -> Event? {
        try readPlain(request) { EventJSON.plainRequestEvent($0, project: project, type: type) }
    }

    /// The list of topics a posted audience of the plainest shape gives
    /// (`PostedTopicList`: `{"topics":["user.1",…]}`), cut from the body's
    /// bytes; nil for a body of another shape or format, or not UTF-8, to be read
    /// through `object`. Throws as `format` does.
    static func plainTopicList(_ request: HTTPRequest) throws(Problem) -> TopicCodeList? {
        try readPlain(request, PostedTopicList.codes)
    }

    /// What `read` makes of a JSON body's bytes, once they are known to be
    /// UTF-8; nil for a body that is not JSON (or empty) or not UTF-8, which
    /// `object` reads and refuses with its errors. Throws as `format` does.
    private static func readPlain<R>(_ request: HTTPRequest, _ read: (UnsafeBufferPointer<UInt8>) -> R?) throws(Problem) -> R? {
        guard try format(request) == .json else { return nil }
        return request.body.withUnsafeBufferPointer { body in
            String(validating: body, as: UTF8.self) == nil ? nil : read(body)
        }
    }

    /// The body as one object or, in JSON, an array of objects.
    static func objectOrArray(_ request: HTTPRequest) throws(Problem) -> (items: [[String: Any]], isArray: Bool) {
        switch try format(request) {
        case nil: return ([[:]], false)
        case .form: return ([try form(request.body)], false)
        case .json:
            switch try parse(request.body) {
            case let object as [String: Any]: return ([object], false)
            case let array as [[String: Any]]: return (array, true)
            default: throw Problem(response: APIResponse.message(400, "The request body must be a JSON object or an array of objects."))
            }
        }
    }

    /// The raw JSON bytes of a body that must be JSON (a form is refused).
    static func jsonBytes(_ request: HTTPRequest) throws(Problem) -> [UInt8] {
        if try format(request) == .form {
            throw Problem(response: APIResponse.message(400, "The request body must be JSON."))
        }
        return request.body
    }

    static func json(_ body: [UInt8]) throws(Problem) -> [String: Any] {
        guard let object = try parse(body) as? [String: Any] else {
            throw Problem(response: APIResponse.message(400, "The request body must be a JSON object."))
        }
        return object
    }

    private static func parse(_ body: [UInt8]) throws(Problem) -> Any {
        // JSONSerialization guesses UTF-16/32 from the first bytes; the API speaks UTF-8 only.
        guard String(validating: body, as: UTF8.self) != nil else {
            throw Problem(response: APIResponse.message(400, "The request body is not valid UTF-8."))
        }
        // The plainest bodies (objects, arrays, strings without escapes) are read directly.
        if let plain = PlainJSON.value(body) { return plain }
        do {
            // Fragments too: `42` or `null` is valid JSON, refused below as not an object.
            return try JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed])
        } catch {
            throw Problem(response: APIResponse.message(400, "The request body is not valid JSON."))
        }
    }

    private static func form(_ body: [UInt8]) throws(Problem) -> [String: Any] {
        do {
            return try FormDecoding.object(from: body)
        } catch {
            throw Problem(response: APIResponse.message(400, error.message))
        }
    }
}
