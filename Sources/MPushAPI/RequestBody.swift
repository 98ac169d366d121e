import Foundation
import HTTPServer

/// Turns a request body into a JSON-like object, whatever way the SDK sent it.
enum RequestBody {
    struct Problem: Error {
        var response: HTTPResponse
    }

    /// JSON (any `charset`, any `+json` type) or form-encoded; without a usable
    /// Content-Type the body is sniffed. An empty body is an empty object.
    static func object(_ request: HTTPRequest) throws(Problem) -> [String: Any] {
        let body = request.body
        let firstByte = body.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }
        guard firstByte != nil else { return [:] }
        let media = (request.headers["Content-Type"] ?? "")
            .split(separator: ";", maxSplits: 1).first.map { $0.trimmingHTTPSpace.lowercased() } ?? ""
        let isJSON: Bool
        switch media {
        case "application/json", "text/json":
            isJSON = true
        case "application/x-www-form-urlencoded":
            // curl -d and some HTTP helpers label JSON as a form; a form never starts with '{'.
            isJSON = firstByte == 0x7B
        case "", "text/plain", "application/octet-stream":
            isJSON = firstByte == 0x7B || firstByte == 0x5B  // { or [
        default:
            if media.hasSuffix("+json") { isJSON = true; break }
            throw Problem(response: APIResponse.message(400,
                "The request body must be application/json or application/x-www-form-urlencoded."))
        }
        if isJSON { return try json(body) }
        do {
            return try FormDecoding.object(from: body)
        } catch {
            throw Problem(response: APIResponse.message(400, error.message))
        }
    }

    static func json(_ body: [UInt8]) throws(Problem) -> [String: Any] {
        // JSONSerialization guesses UTF-16/32 from the first bytes; the API speaks UTF-8 only.
        guard String(validating: body, as: UTF8.self) != nil else {
            throw Problem(response: APIResponse.message(400, "The request body is not valid UTF-8."))
        }
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(body), options: [])
        } catch {
            throw Problem(response: APIResponse.message(400, "The request body is not valid JSON."))
        }
        guard let object = parsed as? [String: Any] else {
            throw Problem(response: APIResponse.message(400, "The request body must be a JSON object."))
        }
        return object
    }
}
