import AccessControl
import Foundation
import HTTPServer
import Notifications
import Projections
import SubscriptionLog

/// `POST /api/send`, `GET /api/notifications/{id}`, `POST /api/notifications/{id}/opens`.
extension MPushService {
    /// The request body as an ordered JSON object (payload key order is kept for rendering).
    /// An empty body is an empty object (the rule of every endpoint): the 422 then names the required fields.
    private func orderedJSON(_ request: HTTPRequest) throws -> JSONValue {
        guard try RequestBody.format(request) != nil else { return .object([]) }
        let bytes = try RequestBody.jsonBytes(request)
        let value: JSONValue
        do { value = try JSONParser.parse(bytes) } catch where error.isTooDeep {
            throw RequestBody.Problem(response: APIResponse.message(400, "The request body is nested more than \(JSONSyntaxError.maxDepth) levels deep."))
        } catch {
            throw RequestBody.Problem(response: APIResponse.message(400, "The request body is not valid JSON."))
        }
        guard case .object = value else {
            throw RequestBody.Problem(response: APIResponse.message(400, "The request body must be a JSON object."))
        }
        return value
    }

    /// The top-level keys of a send body.
    static let sendKeys: Set<String> = ["topics", "expr", "payload"]

    static func invalid(_ problems: [SendProblem]) -> InvalidCommand {
        InvalidCommand(problems.map { ValidationError(field: $0.field, message: $0.message) })
    }

    /// Queues a notification: topics (any of) or `expr`, and a payload. Answers once it is durable.
    func send(_ request: HTTPRequest, _ credential: Credential) throws -> HTTPResponse {
        let body = try orderedJSON(request)
        var problems: [SendProblem] = []
        // The MPush table lists topics and payload (expr is ours): anything else is refused, as unknown
        // payload keys are, rather than dropped — a top-level "priority" would otherwise be lost silently.
        if case .object(let members) = body {
            for m in members where !Self.sendKeys.contains(m.key) {
                var message = "The \(m.key) field is not a send field: a send takes topics (or expr) and payload"
                message += NotificationContent.knownKeys.contains(m.key) ? "; \(m.key) goes in payload.\(m.key)." : "."
                problems.append(SendProblem(field: m.key, message: message))
            }
        }
        var topics: [String] = []
        var exprText: String?
        if let t = body["topics"], !t.isNull {
            if case .array(let items) = t {
                for (i, item) in items.enumerated() {
                    // MPush topics are codes; the SDK's object form {code: …} is accepted too.
                    if let code = item.stringValue ?? item["code"]?.stringValue, Validation.isValidTopicCode(code) {
                        if !topics.contains(code) { topics.append(code) }
                    } else {
                        problems.append(SendProblem(field: "topics.\(i)", message: "The topic code is invalid."))
                    }
                }
                if items.count > 1000 { problems.append(SendProblem(field: "topics", message: "The topics may not have more than 1000 items.")) }
            } else {
                problems.append(SendProblem(field: "topics", message: "The topics must be an array."))
            }
        }
        if let e = body["expr"], !e.isNull {
            if let s = e.stringValue { exprText = s } else { problems.append(SendProblem(field: "expr", message: "The expr must be a string.")) }
        }
        var expression: AudienceExpression?
        switch (topics.isEmpty, exprText) {
        case (false, nil): expression = AudienceExpression.anyOf(topics)
        case (true, let text?):
            do { expression = try AudienceExpression(parsing: text) } catch {
                problems.append(SendProblem(field: "expr", message: error.description))
            }
        case (false, _?): problems.append(SendProblem(field: "topics", message: "Give topics or expr, not both."))
        case (true, nil):
            if !problems.contains(where: { $0.field.hasPrefix("topics") }) {
                problems.append(SendProblem(field: "topics", message: "The topics field is required."))
            }
        }
        var payload = JSONValue.object([])  // missing: validated as {}, which names payload.body once
        if let p = body["payload"], !p.isNull { payload = p }
        if case .object = payload {
            do { _ = try NotificationContent(payload: payload) } catch { problems += error.problems }
        } else if body["payload"] != nil {
            problems.append(SendProblem(field: "payload", message: "The payload must be an object."))
        }
        guard problems.isEmpty, let expression else { throw Self.invalid(problems) }
        let record: NotificationRecord, unknownTopics: [String]
        do {
            (record, unknownTopics) = try sendQueue.enqueue(project: credential.project, topics: topics, expression: expression,
                                           exprText: exprText, payload: payload)
        } catch let p as SendProblems {
            throw Self.invalid(p.problems)
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: JSONValue.object([
            JSONMember("notificationId", .string(record.id)), JSONMember("status", .string("accepted")),
            JSONMember("message", .string("Notification queued for processing")),
            JSONMember("asOfSeq", .number(String(record.asOfSeq))), JSONMember("totalDevices", .number(String(record.totalDevices))),
            // As the count answers: a misspelled topic is an empty set, said here rather than found by polling.
            JSONMember("unknownTopics", .array(unknownTopics.map { .string($0) })),
        ]).bytes)
    }

    func notificationStatus(_ id: String, _ credential: Credential) throws -> HTTPResponse {
        guard let record = try sendQueue.record(id: id.lowercased(), project: credential.project) else {
            return APIResponse.message(404, "The notification was not found.")
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: record.statusDocument.bytes)
    }

    /// An app reports an open (or a button tap): `{"device_id": "…", "button": "primary"?}`.
    func notificationOpen(_ id: String, _ request: HTTPRequest, _ credential: Credential) throws -> HTTPResponse {
        let object = try RequestBody.object(request)
        var errors: [ValidationError] = []
        let deviceID = object["device_id"] as? String
        if deviceID == nil || deviceID!.isEmpty || deviceID!.utf8.count > 256 {
            errors.append(ValidationError(field: "device_id", message: "The device id field is required (1–256 bytes)."))
        }
        var button: String?
        if let b = object["button"], !(b is NSNull) {
            if let s = b as? String { button = s } else { errors.append(ValidationError(field: "button", message: "The button must be a string.")) }
        }
        guard errors.isEmpty, let deviceID else { throw InvalidCommand(errors) }
        switch try sendQueue.recordOpen(id: id.lowercased(), project: credential.project, deviceID: deviceID, button: button) {
        case .unknownNotification: return APIResponse.message(404, "The notification was not found.")
        case .unknownButton: throw InvalidCommand([ValidationError(field: "button", message: "The notification has no button with that id.")])
        case .counted: return APIResponse.json(200, ["status_code": 0, "counted": true])
        case .alreadyCounted, .notAddressed: return APIResponse.json(200, ["status_code": 0, "counted": false])
        }
    }
}
