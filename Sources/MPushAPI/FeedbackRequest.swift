import EventJSON
import Foundation
import HTTPServer
import SubscriptionLog

/// `POST /v1/feedback`: provider rejections — APNs 410 `{"reason":"Unregistered","timestamp":ms}`
/// or FCM `UNREGISTERED` — one object or an array of 1 to 1000, as `token-rejected` events.
///
/// Errors name the request's fields, not the log record's: `timestamp` (or `at`, when the
/// item used that alias), `token`, `reason`, `provider`; in an array each is prefixed with
/// the item's index (`0.timestamp`), however many items there are.
enum FeedbackRequest {
    static let maxItems = 1000
    /// How far after the server's clock a provider's time may be (clock skew). A rejection
    /// dated later stands against every registration of its token until then, so one from the
    /// future — a time in seconds taken for milliseconds, a bad clock — is refused.
    static let maxSkewMilliseconds: Int64 = 3_600_000

    static func events(_ request: HTTPRequest, project: String) throws -> [Event] {
        let (items, isArray) = try RequestBody.objectOrArray(request)
        // An array has no field name of its own to put in `errors`: its size is a body problem.
        guard (1...maxItems).contains(items.count) else {
            throw RequestBody.Problem(response: APIResponse.message(400, "The request body must be one rejection or an array of 1 to \(maxItems)."))
        }
        var events: [Event] = []
        var errors: [ValidationError] = []
        for (i, item) in items.enumerated() {
            do {
                events.append(try rejection(item, project: project))
            } catch {
                errors += error.errors.map { ValidationError(field: isArray ? "\(i).\($0.field)" : $0.field, message: $0.message) }
            }
        }
        guard errors.isEmpty else { throw InvalidCommand(errors) }
        return events
    }

    /// One rejection as a `token-rejected` event; errors name `item`'s own fields.
    static func rejection(_ item: [String: Any], project: String) throws(InvalidCommand) -> Event {
        let provider = (item["provider"] as? String)?.lowercased()
        if let provider, provider != "apns", provider != "fcm" {
            throw InvalidCommand([ValidationError(field: "provider", message: "The provider must be apns or fcm.")])
        }
        // The providers say `timestamp`; the log record (and `topicstore load`) says `at`.
        let timeField = item["timestamp"] == nil && item["at"] != nil ? "at" : "timestamp"
        var errors: [ValidationError] = []
        var at = Limits.rejectedAtRange.lowerBound  // stands in while the other fields are checked
        switch item[timeField] {
        case nil, is NSNull:
            errors.append(ValidationError(field: timeField,
                message: "The \(timeField) field is required (the provider's time in milliseconds since 1970)."))
        case let value?:
            if let ms = milliseconds(value), Limits.rejectedAtRange.contains(ms) {
                at = ms
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                if ms > now + maxSkewMilliseconds {
                    errors.append(ValidationError(field: timeField,
                        message: "The \(timeField) is \((ms - now) / 1000) s after the server's clock: a provider's time may be at most an hour ahead."))
                }
            } else {
                errors.append(ValidationError(field: timeField,
                    message: "The \(timeField) must be the provider's time in milliseconds (or seconds) since 1970, between the years 2000 and 2200."))
            }
        }
        var object: [String: Any] = ["project": project, "type": "token-rejected", "at": at]
        object["token"] = item["token"]
        object["reason"] = item["reason"] ?? (provider == "fcm" ? "UNREGISTERED" : provider == "apns" ? "Unregistered" : "")
        do {
            let event = try EventJSON.event(from: object)
            if errors.isEmpty { return event }
        } catch {
            errors = error.errors + errors
        }
        throw InvalidCommand(errors)
    }

    /// A provider time as milliseconds: an integer (number or decimal string) of milliseconds, or
    /// — APNs gives milliseconds, but a value below 10^11 can only be seconds — of seconds.
    static func milliseconds(_ value: Any) -> Int64? {
        let number: Double
        if let n = value as? NSNumber, !EventJSON.isBoolean(n) {
            number = n.doubleValue
        } else if let s = value as? String, let n = Int64(s) {
            number = Double(n)
        } else {
            return nil
        }
        guard number.isFinite, abs(number) < 9e15 else { return nil }
        if number > 0 && number < 1e11 { return Int64(number * 1000) }
        return number == number.rounded() ? Int64(number) : nil
    }
}
