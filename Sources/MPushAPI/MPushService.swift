import AccessControl
import EventJSON
import Foundation
import HTTPServer
import LMDB
import Notifications
import Projections
import SubscriptionLog
import Synchronization
import TopicStore

/// The request handler: routes, authentication, rate limits, and the bridge to
/// the store. It runs on libmicrohttpd's threads; commands that append to the
/// log are answered from the writer thread once durable (`TopicStore.submit`),
/// so no server thread waits for a commit. Nothing runs on the Swift cooperative pool.
final class MPushService: Sendable {
    let store: TopicStore
    let access: AccessControl
    let configuration: ServerConfiguration
    let limiter = RateLimiter()
    let metrics = Metrics()
    /// Notifications queued by `POST /api/send` (delivered by a `DeliveryWorker` when one runs).
    let sendQueue: SendQueue
    private let serverBox = ServerBox()
    /// When a failure that every write meets (a full disk, a damaged head) was last written to standard error.
    private let writeFailureLogged = Mutex<Date?>(nil)

    init(store: TopicStore, access: AccessControl, configuration: ServerConfiguration, sendQueue: SendQueue) {
        self.store = store
        self.access = access
        self.configuration = configuration
        self.sendQueue = sendQueue
    }

    func attach(_ server: HTTPServer?) { serverBox.set(server) }

    /// What a route gives: a response now, or events to commit and the
    /// response to send once every one of them is durable.
    private enum Answer {
        case response(HTTPResponse)
        case commit([Event], @Sendable ([Receipt]) -> HTTPResponse)
    }

    /// Answers `request` through `responder`: at once, or — for the commands
    /// that append to the log — from the writer thread when the group commit
    /// that holds them is durable, so no server thread waits for the disk.
    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        guard let (route, parameter) = Route.match(rawPath: request.rawPath) else {
            return responder.respond(APIResponse.error(404))
        }
        var who: String?
        let answer = answer(route, parameter, request, principal: &who)
        let principal = who
        @Sendable func send(_ response: HTTPResponse) {
            var response = response
            response.route = route.rawValue
            response.principal = principal
            responder.respond(response)
        }
        switch answer {
        case .response(let response):
            send(response)
        case .commit(let events, let then):
            store.submit(events) { [self] results in
                do {
                    send(then(try results.map { try $0.get() }))
                } catch {
                    send(response(for: error))
                }
            }
        }
    }

    /// What a request's headers alone decide: the method, Accept, the key and its permission.
    private enum Gate {
        /// With the key's id when the key was known (the access log names it).
        case refused(HTTPResponse, keyID: String? = nil)
        /// Go on, as this key (nil for the public routes).
        case open(Credential?)
    }

    private func gate(_ route: Route, _ request: HTTPRequest) -> Gate {
        guard route.methods.contains(request.method) else {
            return .refused(APIResponse.message(405, "The \(request.method) method is not supported for this route. Supported methods: \(route.methods.joined(separator: ", ")).",
                                                headers: ["Allow": route.methods.joined(separator: ", ")]))
        }
        if !Self.acceptsJSON(request, route: route) { return .refused(APIResponse.error(406)) }
        if route.access == .public { return .open(nil) }
        guard let key = request.headers["X-MPush-Token"]?.trimmingHTTPSpace, !key.isEmpty else {
            return .refused(APIResponse.error(401))
        }
        let credential: Credential?
        do { credential = try access.authenticate(key) } catch { return .refused(serverError(error)) }
        guard let credential else { return .refused(APIResponse.message(401, "The project token is invalid.")) }
        if route.access == .server && credential.kind != .server { return .refused(APIResponse.error(403), keyID: credential.keyID) }
        return .open(credential)
    }

    /// For `Expect: 100-continue`: the answer a request gets from its headers alone, so a
    /// client without a valid key is refused before it sends the body. Nil: send it.
    func refusalBeforeBody(_ request: HTTPRequest) -> HTTPResponse? {
        guard let (route, _) = Route.match(rawPath: request.rawPath) else { return APIResponse.error(404) }
        guard case .refused(var response, let keyID) = gate(route, request) else { return nil }
        response.route = route.rawValue
        response.principal = keyID
        return response
    }

    private func answer(_ route: Route, _ parameter: String?, _ request: HTTPRequest, principal: inout String?) -> Answer {
        let credential: Credential?
        switch gate(route, request) {
        case .refused(let response, let keyID):
            principal = keyID
            return .response(response)
        case .open(let c): credential = c
        }
        switch route {
        case .health: return .response(health())
        case .metrics:
            return .response(HTTPResponse(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4; charset=utf-8"],
                                          body: Array(metrics.render(store: store, server: serverBox.server).utf8)))
        case .openAPI:
            return .response(HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: Array(OpenAPIDocument.json.utf8)))
        default: break
        }
        guard let credential else { return .response(APIResponse.error(401)) }  // (only public routes have none)
        principal = credential.keyID
        return authorized(route, parameter, request, credential)
    }

    /// A key that may use `route` (see `gate`): the rate limit, then the route itself.
    private func authorized(_ route: Route, _ parameter: String?, _ request: HTTPRequest, _ credential: Credential) -> Answer {
        if let limit = configuration.rateLimits[credential.kind] {
            switch limiter.take(key: credential.keyID, limit: limit) {
            case .limited(let retryAfter):
                return .response(APIResponse.message(429, "Too Many Attempts.",
                                                     headers: ["Retry-After": String(retryAfter), "X-RateLimit-Limit": String(Int(limit.perSecond)),
                                                               "X-RateLimit-Remaining": "0"]))
            case .allowed:
                break
            }
        }
        do {
            switch route {
            case .tokens: return try membership("token", request, credential)
            case .register: return try membership("register", request, credential)
            case .unregister: return try membership("unregister", request, credential)
            case .unregisterAll: return try membership("unregister-all", request, credential)
            case .audienceCount: return .response(try audienceCount(request, credential))
            case .audience: return .response(try audiencePage(request, credential))
            case .topics: return .response(try topics(request, credential))
            case .device: return .response(try device(parameter ?? "", credential))
            case .feedback: return try feedback(request, credential)
            case .send: return .response(try send(request, credential))
            case .notification: return .response(try notificationStatus(parameter ?? "", credential))
            case .notificationOpen: return .response(try notificationOpen(parameter ?? "", request, credential))
            case .health, .metrics, .openAPI: return .response(APIResponse.error(404))
            }
        } catch {
            return .response(response(for: error))
        }
    }

    /// The response for a request that failed with `error`.
    private func response(for error: any Error) -> HTTPResponse {
        switch error {
        case let problem as RequestBody.Problem: return problem.response
        case let invalid as InvalidCommand: return APIResponse.invalid(invalid.errors)
        default: return serverError(error)
        }
    }

    // MARK: Membership (MPush v2)

    private func membership(_ type: String, _ request: HTTPRequest, _ credential: Credential) throws -> Answer {
        if let event = try RequestBody.plainCommand(request, project: credential.project, type: type) {
            return .commit([event]) { _ in APIResponse.success() }
        }
        var object = try RequestBody.object(request)
        // The key decides the project: a body cannot name another one.
        object["project"] = credential.project
        object["type"] = type
        let event = try EventJSON.event(from: object)
        return .commit([event]) { _ in APIResponse.success() }
    }

    // MARK: Send service

    private struct AudienceQuery {
        /// The `topics` given, when the audience is any of them (not `expr`);
        /// every code valid (`audienceQuery` refuses the request otherwise).
        /// Kept as their bytes: a count of a list reads them in place.
        var topics: TopicCodeList?
        /// `expr` parsed, when it was given (not `topics`).
        var parsed: AudienceExpression?
        var limit: Int
        var cursor: String?

        /// The audience as an expression: `expr`, or the chain of ORs the list of
        /// topics means (built only where it is asked for: a count of a list is
        /// answered from the list).
        var expression: AudienceExpression { parsed ?? AudienceExpression.anyOf(topics?.strings ?? [])! }
    }

    /// `topics` (a JSON array, or comma-separated / repeated in the query) or `expr`.
    private func audienceQuery(_ request: HTTPRequest) throws -> AudienceQuery {
        var topics = TopicCodeList()
        var expr: String?
        var limitValue: Any?
        var cursor: String?
        var errors: [ValidationError] = []
        if request.method == "POST", let list = try RequestBody.plainTopicList(request) {
            topics = list
        } else if request.method == "POST" {
            let object = try RequestBody.object(request)
            if let codes = object["topics"] as? [String] {
                // Plain codes, as a list of users is sent: copied into the list as they are
                // (checked below), with no topic spec made of each.
                topics = TopicCodeList(codes)
            } else if let t = object["topics"] {
                var topicErrors: [ValidationError] = []
                if let specs = EventJSON.topicSpecs(t, into: &topicErrors) { topics = TopicCodeList(specs.map(\.code)) }
                errors += topicErrors
            }
            if let e = object["expr"] {
                if let s = e as? String { expr = s } else { errors.append(ValidationError(field: "expr", message: "The expr must be a string.")) }
            }
            limitValue = object["limit"]
            if let c = object["cursor"] {
                if let s = c as? String { cursor = s } else if !(c is NSNull) { errors.append(ValidationError(field: "cursor", message: "The cursor must be a string.")) }
            }
        } else {
            for value in request.queryValues("topics") { Self.appendCommaSeparated(value, to: &topics) }
            expr = request.queryValue("expr")
            limitValue = request.queryValue("limit")
            cursor = request.queryValue("cursor")
        }
        // The default page is 1000, never more than the configured limit.
        var limit = min(1000, configuration.audiencePageLimit)
        if let v = limitValue, !(v is NSNull) {
            let n: Int? = (v as? String).flatMap { Int($0) } ?? ((v as? NSNumber).flatMap { EventJSON.isBoolean($0) ? nil : $0.intValue })
            if let n, (1...configuration.audiencePageLimit).contains(n) { limit = n } else {
                errors.append(ValidationError(field: "limit", message: "The limit must be an integer between 1 and \(configuration.audiencePageLimit)."))
            }
        }
        var parsed: AudienceExpression?
        switch (topics.isEmpty, expr) {
        case (false, nil):
            topics.forEachCode { i, code in
                if !Validation.isValidTopicCode(code) {
                    errors.append(ValidationError(field: "topics.\(i)", message: "The topic code is invalid."))
                }
            }
            if topics.count > 1000 { errors.append(ValidationError(field: "topics", message: "The topics may not have more than 1000 items.")) }
        case (true, let text?):
            do { parsed = try AudienceExpression(parsing: text) } catch {
                errors.append(ValidationError(field: "expr", message: error.description))
            }
        case (false, _?):
            errors.append(ValidationError(field: "topics", message: "Give topics or expr, not both."))
        case (true, nil):
            if errors.isEmpty { errors.append(ValidationError(field: "topics", message: "The topics field is required when expr is not present.")) }
        }
        guard errors.isEmpty, parsed != nil || !topics.isEmpty else { throw InvalidCommand(errors) }
        return AudienceQuery(topics: topics.isEmpty ? nil : topics, parsed: parsed, limit: limit, cursor: cursor)
    }

    /// Where UTF-8 `bytes` (valid, whole characters: a String's bytes cut at
    /// ASCII bytes) are without the whitespace around them (`.whitespaces`:
    /// spaces, tabs and Unicode's space separators, as Foundation trims them);
    /// nil when nothing is left. Foundation's trimming bridged each item to an
    /// `NSString` (a fifth of the server's time for a count of a list of 100
    /// users); an item that begins and ends with a printable ASCII character,
    /// as every valid topic code does, has nothing to trim.
    static func trimmedRange(_ bytes: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        func plain(_ b: UInt8?) -> Bool { b.map { $0 > 0x20 && $0 < 0x80 } ?? false }
        if plain(bytes.first), plain(bytes.last) { return 0..<bytes.count }
        let scalars = String(decoding: bytes, as: UTF8.self).unicodeScalars
        var start = 0, end = bytes.count
        for s in scalars {
            guard CharacterSet.whitespaces.contains(s) else { break }
            start += UTF8.width(s)
        }
        guard start < end else { return nil }
        for s in scalars.reversed() {
            guard CharacterSet.whitespaces.contains(s) else { break }
            end -= UTF8.width(s)
        }
        return start..<end
    }

    /// The items of a comma-separated `value`, trimmed, empty ones dropped,
    /// appended to `list`: the value's bytes copied once, each item cut from
    /// them. Split at the comma's byte in one pass over the bytes: split by
    /// `Character` (grapheme clusters), a list of 100 users' codes was a
    /// quarter of the server's time for its count, and the generic split of
    /// its UTF-8 view a fifth still; made into a String each, the items were
    /// a fifth again. (A comma followed by a combining mark is one cluster
    /// there, an item boundary here; no valid topic code holds either.)
    static func appendCommaSeparated(_ value: String, to list: inout TopicCodeList) {
        var value = value
        value.withUTF8 { bytes in
            guard let p = bytes.baseAddress else { return }
            let base = list.appendBytes(UnsafeRawBufferPointer(bytes))
            list.reserveCodes(bytes.count / 4 + 1)
            var start = 0
            while start <= bytes.count {
                // The next comma (`memchr`: a byte at a time, the loop was as much as the rest).
                let comma = memchr(p + start, Int32(UInt8(ascii: ",")), bytes.count - start)
                let end = comma.map { UnsafeRawPointer($0) - UnsafeRawPointer(p) } ?? bytes.count
                if end > start, let item = trimmedRange(UnsafeBufferPointer(rebasing: bytes[start..<end])) {
                    list.appendCode(base + start + item.lowerBound ..< base + start + item.upperBound)
                }
                start = end + 1
            }
        }
    }

    private func audienceCount(_ request: HTTPRequest, _ credential: Credential) throws -> HTTPResponse {
        let query = try audienceQuery(request)
        // A list of topics is counted and described as it is: the serving caches answer
        // a list of per-user topics without the chain of ORs its expression is.
        let counts: AudienceCounts, expr: String
        if let topics = query.topics, let text = AudienceExpression.description(ofAnyOf: topics, allValid: true) {
            counts = try store.counts(project: credential.project, anyOf: topics)
            expr = text
        } else {
            counts = try store.counts(project: credential.project, query.expression)
            expr = query.expression.description
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": APIResponse.jsonType],
                            body: AudienceCountJSON.encode(project: credential.project, counts, expr: expr))
    }

    /// One NDJSON page of reachable recipients in ascending ordinal order.
    ///
    /// Snapshot semantics: every page is read from one fresh snapshot and
    /// reports it in `X-As-Of-Seq`; the cursor carries the next ordinal and the
    /// first page's sequence (`X-Walk-As-Of-Seq`). Walking ordinals upward, no
    /// device is delivered twice; a device that joins during the walk is
    /// delivered if its ordinal is still ahead of the cursor; one that leaves
    /// before its page is read is not. When `X-As-Of-Seq` equals
    /// `X-Walk-As-Of-Seq` on the last page, the whole walk was one snapshot.
    private func audiencePage(_ request: HTTPRequest, _ credential: Credential) throws -> HTTPResponse {
        let query = try audienceQuery(request)
        var from: UInt32 = 0
        var walkSeq: UInt64?
        if let cursor = query.cursor {
            guard let parsed = AudienceCursor(cursor) else {
                throw InvalidCommand([ValidationError(field: "cursor", message: "The cursor is not one this server issued.")])
            }
            from = parsed.ordinal
            walkSeq = parsed.walkSequence
        }
        let reader = store.reader
        var body: [UInt8] = []
        var count = 0
        var next: UInt32?
        // A line's fixed bytes, from the binary: appended from arrays, each append retained
        // and released its array (a sixth of a page's CPU).
        func bytes(_ s: StaticString) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount) }
        let opening = bytes("{\"device_id\":"), closing = bytes("}\n")
        let ios = bytes(",\"platform\":\"ios\",\"token\":"), android = bytes(",\"platform\":\"android\",\"token\":")
        let asOf = try store.read { txn -> UInt64 in
            let audience = try reader.audience(project: credential.project, query.expression, txn)
            if let walkSeq, walkSeq > audience.asOfSeq {
                // Sequences only grow: a walk cannot have begun after this snapshot. The cursor
                // comes from another store (or one restored from an older backup).
                throw InvalidCommand([ValidationError(field: "cursor",
                    message: "The cursor names log sequence \(walkSeq), beyond this store's last sequence \(audience.asOfSeq); it was not issued by this store.")])
            }
            let reachable = try reader.reachable(audience, txn)
            if !reachable.isEmpty {
                body.reserveCapacity(min(query.limit, reachable.count) * 160)  // a line is ~60 + id + token bytes
                try reader.forEachRecipient(projectID: audience.projectID, in: reachable, from: from, txn) { ordinal, platform, id, token in
                    if count == query.limit { next = ordinal; return false }
                    body.append(contentsOf: opening)
                    JSONText.appendQuoted(id, to: &body)
                    body.append(contentsOf: platform == .ios ? ios : android)
                    JSONText.appendQuoted(token, to: &body)
                    body.append(contentsOf: closing)
                    count += 1
                    return true
                }
            }
            return audience.asOfSeq
        }
        var headers: HTTPHeaders = ["Content-Type": "application/x-ndjson", "X-As-Of-Seq": String(asOf),
                                    "X-Walk-As-Of-Seq": String(walkSeq ?? asOf), "X-Page-Count": String(count)]
        if let next { headers.add("X-Next-Cursor", AudienceCursor(ordinal: next, walkSequence: walkSeq ?? asOf).text) }
        return HTTPResponse(status: 200, headers: headers, body: body)
    }

    /// The most topics one page of `GET /v1/topics` holds, and the page without `limit`.
    static let topicPageLimit = 10_000
    static let topicPageDefault = 1000

    /// One page of the project's topics in code order: `limit` (1…10,000, default 1,000),
    /// `prefix` (codes that start with it), `after` (the previous page's `next`).
    private func topics(_ request: HTTPRequest, _ credential: Credential) throws -> HTTPResponse {
        var errors: [ValidationError] = []
        var limit = Self.topicPageDefault
        if let text = request.queryValue("limit") {
            if let n = Int(text), (1...Self.topicPageLimit).contains(n) { limit = n } else {
                errors.append(ValidationError(field: "limit", message: "The limit must be an integer between 1 and \(Self.topicPageLimit)."))
            }
        }
        let prefix = request.queryValue("prefix") ?? ""
        if !prefix.isEmpty && !Validation.isValidTopicCode(prefix) {
            errors.append(ValidationError(field: "prefix", message: "The prefix must be the start of a topic code (ASCII letters, digits and . _ - ~ @ / + = #, at most 128)."))
        }
        let after = request.queryValue("after")
        if let after, !Validation.isValidTopicCode(after) {
            errors.append(ValidationError(field: "after", message: "The after field must be a topic code (the next of the previous page)."))
        }
        guard errors.isEmpty else { throw InvalidCommand(errors) }
        let reader = store.reader
        let (asOf, page) = try store.read { txn -> (UInt64, TopicPage) in
            let asOf = try reader.appliedSequence(txn)
            guard let p = try reader.project(named: credential.project, txn) else { return (asOf, TopicPage(topics: [], next: nil)) }
            return (asOf, try reader.topicPage(p.id, prefix: prefix, after: after, limit: limit, txn))
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": APIResponse.jsonType],
                            body: TopicListJSON.encode(project: credential.project, asOf: asOf, topics: page.topics, next: page.next))
    }

    private func device(_ deviceID: String, _ credential: Credential) throws -> HTTPResponse {
        let reader = store.reader
        let (asOf, info) = try store.read { txn -> (UInt64, DeviceInfo?) in
            let asOf = try reader.appliedSequence(txn)
            guard let p = try reader.project(named: credential.project, txn) else { return (asOf, nil) }
            return (asOf, try reader.device(p.id, deviceID: deviceID, txn))
        }
        guard let info else { return APIResponse.message(404, "The device was not found.") }
        let r = info.record
        var object: [String: Any] = ["project": credential.project, "asOfSeq": asOf, "device_id": r.deviceID,
                                     "state": r.state.rawValue, "topics": info.topics.sorted()]
        object["token"] = r.token ?? NSNull()
        object["platform"] = r.platform.map { "\($0)" } ?? NSNull()
        if let at = r.rejectedAt { object["rejectedAt"] = at }
        return APIResponse.json(200, object)
    }

    /// Provider feedback (`FeedbackRequest`): committed, then answered with the count and the last sequence.
    private func feedback(_ request: HTTPRequest, _ credential: Credential) throws -> Answer {
        let events = try FeedbackRequest.events(request, project: credential.project)
        return .commit(events) { receipts in
            APIResponse.json(200, ["status_code": 0, "accepted": receipts.count, "sequence": receipts.map(\.sequence).max() ?? 0])
        }
    }

    // MARK: Operations

    private func health() -> HTTPResponse {
        if serverBox.server?.isShuttingDown == true { return APIResponse.error(503) }
        do {
            try store.checkFileIsPresent()
            let (seq, logEnd) = try store.read { txn in (try store.tables.appliedSequence(txn), try store.log.sequenceRange(txn)?.upperBound) }
            // Reads work, writes do not: not healthy for apps whose commands fail.
            // A damaged last record: no write can be chained onto it, and it does not heal by itself.
            do { try store.checkHead() } catch let error as StoreError {
                guard case .corruptHead(_, let sequence, _) = error else { throw error }
                return APIResponse.json(503, ["status": "corrupt", "error": "\(error)", "sequence": sequence, "lastSequence": seq])
            }
            // Commits fail on damage (a projection value, meta/appliedSeq, a page): it does not heal by itself.
            if let f = store.writeFailure, let damaged = f.damaged {
                return APIResponse.json(503, ["status": "corrupt", "error": f.error, "damaged": damaged, "failedCommits": f.failedCommits,
                                              "since": TimeText.iso(Int64(f.since.timeIntervalSince1970 * 1000)), "lastSequence": seq])
            }
            // The projections are folded in the transaction that appends: behind or ahead of the log,
            // one of the two is damaged (meta/appliedSeq, or the log's tree), and every write will fail.
            if let logEnd, logEnd != seq {
                let error = StoreError.damaged(path: store.directory, what: "meta/appliedSeq",
                                               reason: "the projections are at seq \(seq), but the log ends at seq \(logEnd): one of them is damaged")
                return APIResponse.json(503, ["status": "corrupt", "error": "\(error)", "damaged": "meta/appliedSeq", "lastSequence": seq])
            }
            if let f = store.writeFailure {
                return APIResponse.json(503, ["status": "failing", "error": f.error, "failedCommits": f.failedCommits,
                                              "since": TimeText.iso(Int64(f.since.timeIntervalSince1970 * 1000)), "lastSequence": seq],
                                        headers: ["Retry-After": "10"])
            }
            return APIResponse.json(200, ["status": "ok", "lastSequence": seq])
        } catch {
            return serverError(error)
        }
    }

    private func serverError(_ error: any Error) -> HTTPResponse {
        if case StoreError.closed = error { return APIResponse.error(503) }
        if case StoreError.storageFull = error {
            // Every command fails the same way until there is room: say so once in a while, not per request.
            if logsWriteFailureNow() {
                let count = store.writeFailure?.failedCommits ?? 1
                AccessLog.toStandardError("topicstore serve: error: \(error) (\(count) commit(s) failed so far; /healthz says failing until one succeeds)")
            }
            return APIResponse.message(503, "The store cannot write: its disk is full. Retry later.", headers: ["Retry-After": "10"])
        }
        if case StoreError.corruptHead(_, let sequence, _) = error {
            if logsWriteFailureNow() { AccessLog.toStandardError("topicstore serve: error: \(error) (/healthz says corrupt)") }
            return APIResponse.message(503, "The store cannot write: log record \(sequence), at the log's end, is damaged. See /healthz.")
        }
        // Damage met on the way (a projection value, meta/appliedSeq, a page LMDB cannot use): it does
        // not heal by itself, so 503 naming it (and /healthz says corrupt once a commit failed on it).
        if case .damaged(_, let what, _)? = TopicStore.damage(in: error, directory: store.directory) {
            if logsWriteFailureNow() { AccessLog.toStandardError("topicstore serve: error: \(TopicStore.damage(in: error, directory: store.directory)!)") }
            return APIResponse.json(503, ["message": "The store is damaged (\(what)). See /healthz.", "damaged": what])
        }
        AccessLog.toStandardError("topicstore serve: error: \(error)")
        return APIResponse.error(500)
    }

    /// Whether to log a failure every write meets (a full disk, a damaged head): once per 10 s, not per request.
    private func logsWriteFailureNow() -> Bool {
        let now = Date()
        return writeFailureLogged.withLock { last -> Bool in
            guard last.map({ now.timeIntervalSince($0) >= 10 }) ?? true else { return false }
            last = now
            return true
        }
    }

    /// Clients that send Accept must accept JSON (or NDJSON / text for those routes); no Accept is fine.
    /// A range with `q=0` excludes what it names (RFC 9110 §12.4.2), even beside a wider range.
    static func acceptsJSON(_ request: HTTPRequest, route: Route) -> Bool {
        let values = request.headers.values("Accept")
        guard !values.isEmpty else { return true }
        // What the SDKs and most clients send, one plain range: decided from its bytes. The
        // parse below (splits, lowercased copies, Foundation's `range(of:)`) was an eighth of
        // the server's instructions for a count of a list of 100 users.
        if values.count == 1, isPlainJSONOrAny(values[0]) { return true }
        return acceptsJSON(values, route: route)
    }

    /// `acceptsJSON` of the Accept values given, parsed as RFC 9110 reads them.
    static func acceptsJSON(_ values: [String], route: Route) -> Bool {
        let ranges = values.flatMap { $0.split(separator: ",") }.map { item -> (range: String, excluded: Bool) in
            let parts = item.split(separator: ";")
            let range = parts.first.map { $0.trimmingHTTPSpace.lowercased() } ?? ""
            let excluded = parts.dropFirst().contains { p in
                let pair = p.split(separator: "=", maxSplits: 1).map { $0.trimmingHTTPSpace.lowercased() }
                return pair.count == 2 && pair[0] == "q" && (Double(pair[1]) ?? 1) == 0
            }
            return (range, excluded)
        }
        if ranges.allSatisfy({ $0.range.isEmpty }) { return true }
        let specific: (String) -> Bool = { r in r.contains("json") || (route == .metrics && r == "text/plain") }
        let wide: (String) -> Bool = { r in r == "*/*" || r == "application/*" || (route == .metrics && r == "text/*") }
        // The most specific range decides: a JSON type named with q=0 is refused even beside */*.
        if ranges.contains(where: { specific($0.range) }) {
            return ranges.contains { specific($0.range) && !$0.excluded }
        }
        return ranges.contains { wide($0.range) && !$0.excluded }
    }

    /// Whether an Accept value is exactly `application/json` or `*/*` (in any
    /// case, no parameters, no spaces): a range that accepts JSON at any route.
    static func isPlainJSONOrAny(_ value: String) -> Bool {
        value.withUTF8Bytes { ASCIIText.equalsIgnoringCase($0, "application/json") || ASCIIText.equalsIgnoringCase($0, "*/*") }
    }
}

/// `<ordinal>.<walk sequence>`: where the next page starts and the snapshot the walk began in.
struct AudienceCursor {
    var ordinal: UInt32
    var walkSequence: UInt64

    init(ordinal: UInt32, walkSequence: UInt64) {
        self.ordinal = ordinal
        self.walkSequence = walkSequence
    }

    init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let o = UInt32(parts[0]), let s = UInt64(parts[1]) else { return nil }
        ordinal = o
        walkSequence = s
    }

    var text: String { "\(ordinal).\(walkSequence)" }
}

/// The running server, set once it has started (for /metrics and /healthz).
final class ServerBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: HTTPServer?
    func set(_ server: HTTPServer?) { lock.lock(); value = server; lock.unlock() }
    var server: HTTPServer? { lock.lock(); defer { lock.unlock() }; return value }
}
