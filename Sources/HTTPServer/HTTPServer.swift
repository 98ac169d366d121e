internal import CMicroHTTPD
import Foundation

/// An HTTP/1.1 server on libmicrohttpd.
///
/// Handlers run on libmicrohttpd's threads. A handler that waits for something
/// (a durable commit, say) takes the `HTTPResponder` and answers later from any
/// thread: in the thread pool its connection is suspended meanwhile, so a few
/// threads serve many waiting connections; with a thread per connection, that
/// thread waits. The body is read whole before the handler runs; a body over
/// `Configuration.bodyLimit` is answered with `errorResponse(413)` and the
/// connection closed. Starting on an address another socket listens on fails
/// (`HTTPServerError`, "Address already in use"): the port is never shared.
public final class HTTPServer: Sendable {
    public enum Threading: Sendable, Hashable {
        /// A thread per connection (polled with `poll`): handlers may block freely.
        case threadPerConnection
        /// A pool of this many threads multiplexing connections with poll: a
        /// handler that answers later through its `HTTPResponder` suspends only
        /// its own connection, but one that blocks stalls its thread's other connections.
        case threadPool(Int)
    }

    public struct Configuration: Sendable {
        /// An IP address or host name (`127.0.0.1`, `::1`, `0.0.0.0`, `localhost`).
        public var host = "127.0.0.1"
        /// 0 picks a free port; `HTTPServer.port` tells which.
        public var port: UInt16 = 8080
        public var threading = Threading.threadPerConnection
        /// Largest request body read, in bytes; a larger one gets 413.
        public var bodyLimit = 1 << 20
        /// Largest body over `bodyLimit` read (and dropped) before its 413 is sent, so that a
        /// client writing all of it before reading sees the answer; a larger one is refused at
        /// its headers and the connection closed.
        public var drainLimit = 16 << 20
        public var connectionLimit = 1024
        /// Seconds an idle connection is kept.
        public var connectionTimeout = 60
        /// Per-connection buffer for the request line and headers. libmicrohttpd
        /// zeroes it between the requests of a keep-alive connection, so a large
        /// one costs time on every request; 16 KiB holds far more than any SDK sends.
        public var connectionMemoryLimit = 16 << 10
        /// The response the server itself sends: 413 (body too large) and 503 (shutting down).
        public var errorResponse: @Sendable (_ status: Int) -> HTTPResponse = { status in
            HTTPResponse(status: status, headers: ["Content-Type": "application/json"],
                         body: Array("{\"message\":\"\(HTTPResponse.reason(status))\"}".utf8))
        }
        /// Asked about a request that sends `Expect: 100-continue`, with its headers and
        /// no body yet: a response refuses it before the body is read (the client has
        /// not sent it; libmicrohttpd would answer `100 Continue`). Nil lets it go on.
        public var refusalBeforeBody: (@Sendable (HTTPRequest) -> HTTPResponse?)?
        public init() {}
    }

    /// What the access log and metrics learn about each finished request.
    public struct Completion: Sendable {
        public var method: String
        public var path: String
        public var remoteAddress: String
        public var status: Int
        public var requestBytes: Int
        public var responseBytes: Int
        /// From the start of the request to the end of the response, in seconds.
        public var duration: Double
        public var route: String?
        public var principal: String?
        /// False when the client went away or the server stopped before the response was sent.
        public var completedNormally: Bool
    }

    /// Answers at once.
    public typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse
    /// Answers through the responder, now or later (exactly once).
    public typealias DeferredHandler = @Sendable (HTTPRequest, HTTPResponder) -> Void

    private let core: ServerCore
    /// The port the server listens on.
    public let port: UInt16

    /// Starts listening at once.
    public convenience init(configuration: Configuration, handler: @escaping Handler,
                            onComplete: (@Sendable (Completion) -> Void)? = nil) throws {
        try self.init(configuration: configuration, deferredHandler: { request, responder in responder.respond(handler(request)) },
                      onComplete: onComplete)
    }

    /// Starts listening at once; `deferredHandler` answers each request through its responder.
    public init(configuration: Configuration, deferredHandler: @escaping DeferredHandler,
                onComplete: (@Sendable (Completion) -> Void)? = nil) throws {
        let core = ServerCore(configuration: configuration, handler: deferredHandler, onComplete: onComplete)
        port = try core.start()
        self.core = core
    }

    /// Requests started and not yet finished.
    public var activeRequests: Int { core.activeRequests }
    /// Open connections.
    public var connections: Int { core.connections }
    /// Whether `shutdown` has begun.
    public var isShuttingDown: Bool { core.isDraining }

    /// Stops accepting connections, answers requests that arrive on open
    /// connections with 503, waits up to `drainTimeout` seconds for requests in
    /// progress to finish (their handlers always run to the end), then closes
    /// every connection. Safe to call more than once.
    public func shutdown(drainTimeout: Double = 10) {
        core.shutdown(drainTimeout: drainTimeout)
    }

    deinit { core.shutdown(drainTimeout: 0) }
}

// MARK: - The libmicrohttpd side

/// Per-request state, kept in MHD's `con_cls` slot from the first callback to completion.
final class RequestState {
    let start = DispatchTime.now().uptimeNanoseconds
    let method: String
    /// The path percent-decoded, and as sent.
    let path: String
    let rawPath: String
    let version: String
    let remoteAddress: String
    var body: [UInt8] = []
    var received = 0
    var tooLarge = false
    /// The request began after shutdown started: it is refused with 503.
    var arrivedWhileDraining = false
    var responded = false
    var status = 0
    var responseBytes = 0
    var route: String?
    var principal: String?
    /// Set while the handler has not answered yet.
    var responder: HTTPResponder?

    init(method: String, rawPath: String, version: String, remoteAddress: String) {
        self.method = method
        self.path = PercentDecoding.decode(rawPath)
        self.rawPath = rawPath
        self.version = version
        self.remoteAddress = remoteAddress
    }
}

final class ServerCore: @unchecked Sendable {
    let configuration: HTTPServer.Configuration
    let handler: HTTPServer.DeferredHandler
    let onComplete: (@Sendable (HTTPServer.Completion) -> Void)?
    /// Whether waiting connections are suspended (the thread pool) rather than holding their thread.
    let suspends: Bool

    private let condition = NSCondition()
    private var daemon: OpaquePointer?
    private var inFlight = 0
    /// Connections suspended until their responder answers: the daemon must not stop while any is.
    private var suspendedConnections = 0
    private var draining = false
    private var stopped = false
    /// The listening socket `MHD_quiesce_daemon` gave back, closed after `MHD_stop_daemon`.
    private var quiescedSocket: Int32 = -1
    private var retainedSelf: Unmanaged<ServerCore>?

    init(configuration: HTTPServer.Configuration, handler: @escaping HTTPServer.DeferredHandler,
         onComplete: (@Sendable (HTTPServer.Completion) -> Void)?) {
        self.configuration = configuration
        self.handler = handler
        self.onComplete = onComplete
        if case .threadPool = configuration.threading { suspends = true } else { suspends = false }
    }

    /// Responders whose handler returned without an answer: at the end of a
    /// shutdown's drain they are answered 503, whatever they wait for.
    private var waitingResponders: [ObjectIdentifier: HTTPResponder] = [:]

    func startedWaiting(_ responder: HTTPResponder) {
        condition.lock()
        waitingResponders[ObjectIdentifier(responder)] = responder
        condition.unlock()
    }

    func stoppedWaiting(_ responder: HTTPResponder) {
        condition.lock()
        waitingResponders[ObjectIdentifier(responder)] = nil
        condition.unlock()
    }

    func suspended() {
        condition.lock()
        suspendedConnections += 1
        condition.unlock()
    }

    func resumed() {
        condition.lock()
        suspendedConnections -= 1
        if suspendedConnections == 0 { condition.broadcast() }
        condition.unlock()
    }

    var activeRequests: Int { condition.lock(); defer { condition.unlock() }; return inFlight }
    var isDraining: Bool { condition.lock(); defer { condition.unlock() }; return draining }
    var connections: Int {
        condition.lock(); defer { condition.unlock() }
        guard let daemon, !stopped else { return 0 }
        return Int(topicstore_mhd_connection_count(daemon))
    }

    func start() throws -> UInt16 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(configuration.host, String(configuration.port), &hints, &list)
        guard rc == 0, let first = list else {
            throw HTTPServerError("cannot resolve listen address \(configuration.host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        // Prefer IPv4 when a name resolves to both.
        var chosen = first
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let c = cursor {
            if c.pointee.ai_family == AF_INET { chosen = c; break }
            cursor = c.pointee.ai_next
        }

        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_ITC.rawValue
        var poolSize: UInt32 = 0
        switch configuration.threading {
        case .threadPerConnection:
            flags |= MHD_USE_THREAD_PER_CONNECTION.rawValue | MHD_USE_POLL.rawValue
        case .threadPool(let n):
            // poll, not epoll: libmicrohttpd 0.9.75's MHD_quiesce_daemon removes the listening
            // socket from each worker's epoll set while the worker may be removing it too, and
            // aborts the process when it loses that race (a shutdown under load). With poll a
            // worker just stops watching the socket.
            flags |= MHD_USE_POLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            poolSize = UInt32(max(1, n))
        }
        if chosen.pointee.ai_family == AF_INET6 { flags |= MHD_USE_IPv6.rawValue }

        let me = Unmanaged.passRetained(self)
        retainedSelf = me
        let daemon = topicstore_mhd_start(
            flags, chosen.pointee.ai_addr,
            { cls, connection, url, method, version, uploadData, uploadSize, conCls in
                guard let cls, let connection, let uploadSize, let conCls else { return .NO }
                let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
                return core.handle(connection, url: url, method: method, version: version,
                                   uploadData: uploadData, uploadSize: uploadSize, slot: conCls)
            }, me.toOpaque(),
            { cls, _, conCls, termination in
                guard let cls, let conCls, let raw = conCls.pointee else { return }
                conCls.pointee = nil
                let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
                let state = Unmanaged<RequestState>.fromOpaque(raw).takeRetainedValue()
                core.finish(state, normally: termination == .REQUEST_TERMINATED_COMPLETED_OK)
            }, me.toOpaque(),
            UInt32(configuration.connectionLimit), UInt32(configuration.connectionTimeout),
            configuration.connectionMemoryLimit, poolSize)
        guard let daemon else {
            let code = errno  // before anything else can change it: EADDRINUSE when the port is taken
            me.release()
            retainedSelf = nil
            let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
            throw HTTPServerError("cannot listen on \(host):\(configuration.port): \(String(cString: strerror(code)))")
        }
        self.daemon = daemon
        return topicstore_mhd_bound_port(daemon)
    }

    func shutdown(drainTimeout: Double) {
        condition.lock()
        guard let daemon, !stopped else { condition.unlock(); return }
        if !draining {
            draining = true
            // Stop accepting: the daemon gives the listening socket back, and shutting it down
            // refuses new connections at once. libmicrohttpd's threads may still be looking at
            // the descriptor, so it is closed only after MHD_stop_daemon (as its manual asks).
            quiescedSocket = MHD_quiesce_daemon(daemon)
            if quiescedSocket >= 0 { _ = Glibc.shutdown(quiescedSocket, Int32(SHUT_RD)) }
        }
        let deadline = Date().addingTimeInterval(drainTimeout)
        while inFlight > 0 && condition.wait(until: deadline) {}
        // Stopping the daemon with a suspended connection is not allowed. A request still
        // waiting for its answer at the deadline (a commit that does not end: a writer stuck
        // behind another process's write lock, or on damage) is answered 503 now, and its
        // answer when it comes is dropped (a responder answers once): SIGTERM must end.
        var answeredNow = 0
        while suspendedConnections > 0 || !waitingResponders.isEmpty {
            let waiting = Array(waitingResponders.values)
            condition.unlock()
            var unavailable = configuration.errorResponse(503)
            unavailable.headers.set("Retry-After", "1")
            for responder in waiting { responder.respond(unavailable) }
            answeredNow += waiting.count
            condition.lock()
            if suspendedConnections > 0 || !waitingResponders.isEmpty { _ = condition.wait(until: Date().addingTimeInterval(0.05)) }
        }
        // Their connections resumed: a moment to send those answers before the daemon stops.
        if answeredNow > 0 {
            let flush = Date().addingTimeInterval(1)
            while inFlight > 0 && condition.wait(until: flush) {}
        }
        stopped = true
        condition.unlock()
        // Joins the connection threads; requests still running finish their handler first.
        MHD_stop_daemon(daemon)
        condition.lock()
        if quiescedSocket >= 0 { close(quiescedSocket) }
        quiescedSocket = -1
        self.daemon = nil
        let me = retainedSelf
        retainedSelf = nil
        condition.unlock()
        me?.release()
    }

    // Called on an MHD thread for each step of a request.
    func handle(_ connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
                version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
                uploadSize: UnsafeMutablePointer<Int>, slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let raw = slot.pointee else {
            // First call: headers are in, the body (if any) is not.
            let state = RequestState(method: method.map { String(cString: $0) } ?? "",
                                     rawPath: url.map { String(cString: $0) } ?? "/",
                                     version: version.map { String(cString: $0) } ?? "",
                                     remoteAddress: Self.address(topicstore_mhd_client_address(connection)))
            slot.pointee = Unmanaged.passRetained(state).toOpaque()
            condition.lock()
            inFlight += 1
            state.arrivedWhileDraining = draining
            condition.unlock()
            if let text = MHD_lookup_connection_value(connection, .HEADER_KIND, "Content-Length"),
               let declared = Int(String(cString: text)), declared > configuration.bodyLimit {
                state.tooLarge = true
                // A client that sends its whole body before it reads (Python's http.client) saw the
                // connection closed under it and never the 413: a body up to `drainLimit` is read and
                // dropped first, unless the client waits for 100-continue; a bigger one is refused now.
                let waitsForContinue = MHD_lookup_connection_value(connection, .HEADER_KIND, "Expect")
                    .map { String(cString: $0).lowercased().contains("100-continue") } ?? false
                if declared > configuration.drainLimit || waitsForContinue {
                    return respond(connection, state, configuration.errorResponse(413), close: true)
                }
                return .YES
            }
            if let refusal = configuration.refusalBeforeBody,
               let expect = MHD_lookup_connection_value(connection, .HEADER_KIND, "Expect"),
               String(cString: expect).lowercased().contains("100-continue") {
                let headersOnly = HTTPRequest(method: state.method, path: state.path, rawPath: state.rawPath, version: state.version,
                                              headers: HTTPHeaders(entries: Self.values(connection, .HEADER_KIND)),
                                              query: Self.values(connection, .GET_ARGUMENT_KIND).map { (name: PercentDecoding.decode($0.name), value: PercentDecoding.decode($0.value)) },
                                              body: [], remoteAddress: state.remoteAddress)
                if let response = refusal(headersOnly) {
                    state.tooLarge = true  // whatever of the body still arrives is not kept
                    return respond(connection, state, response, close: true)
                }
            }
            return .YES
        }
        let state = Unmanaged<RequestState>.fromOpaque(raw).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            let n = uploadSize.pointee
            state.received += n
            if !state.tooLarge {
                if state.body.count + n > configuration.bodyLimit {
                    state.tooLarge = true
                    state.body = []
                } else if let uploadData {
                    UnsafeRawBufferPointer(start: uploadData, count: n).withMemoryRebound(to: UInt8.self) {
                        state.body.append(contentsOf: $0)
                    }
                }
            }
            uploadSize.pointee = 0
            return .YES
        }
        if let responder = state.responder {
            // Called again after a resume: the answer is in.
            guard let response = responder.takeAnswer() else { return .YES }
            state.responder = nil
            return respond(connection, state, response, close: isDraining)
        }
        if state.responded { return .YES }
        if state.tooLarge {
            return respond(connection, state, configuration.errorResponse(413), close: true)
        }
        if state.arrivedWhileDraining {
            var response = configuration.errorResponse(503)
            response.headers.set("Retry-After", "1")
            return respond(connection, state, response, close: true)
        }
        let request = HTTPRequest(method: state.method, path: state.path, rawPath: state.rawPath, version: state.version,
                                  headers: HTTPHeaders(entries: Self.values(connection, .HEADER_KIND)),
                                  query: Self.values(connection, .GET_ARGUMENT_KIND).map { (name: PercentDecoding.decode($0.name), value: PercentDecoding.decode($0.value)) },
                                  body: state.body, remoteAddress: state.remoteAddress)
        let responder = HTTPResponder(core: self, connection: connection)
        state.responder = responder
        handler(request, responder)
        guard let response = responder.handlerReturned() else { return .YES }
        state.responder = nil
        return respond(connection, state, response, close: isDraining)
    }

    private func respond(_ connection: OpaquePointer, _ state: RequestState, _ response: HTTPResponse, close: Bool) -> MHD_Result {
        state.responded = true
        state.status = response.status
        state.responseBytes = response.body.count
        state.route = response.route
        state.principal = response.principal
        let created = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                            .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse = created else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        for (name, value) in response.headers {
            _ = MHD_add_response_header(mhdResponse, name, value)
        }
        if close { _ = MHD_add_response_header(mhdResponse, "Connection", "close") }
        return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    }

    func finish(_ state: RequestState, normally: Bool) {
        condition.lock()
        inFlight -= 1
        if inFlight == 0 { condition.broadcast() }
        condition.unlock()
        guard let onComplete else { return }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - state.start) / 1e9
        onComplete(HTTPServer.Completion(method: state.method, path: state.path, remoteAddress: state.remoteAddress,
                                         status: state.responded ? state.status : 0,
                                         requestBytes: state.received, responseBytes: state.responseBytes,
                                         duration: elapsed, route: state.route, principal: state.principal,
                                         completedNormally: normally && state.responded))
    }

    /// The request's values of `kind` (headers, or the query's arguments) in
    /// the order they came. Appended to an array made with room for a request's
    /// usual number, through a pointer to it: through a collector object, its
    /// growing array (four reallocations for six headers) and the exclusivity
    /// checks of its property were 2.7k of every request's 5.8k here (callgrind).
    static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(name: String, value: String)] {
        var pairs: [(name: String, value: String)] = []
        pairs.reserveCapacity(16)
        withUnsafeMutablePointer(to: &pairs) { p in
            _ = MHD_get_connection_values(connection, kind, { cls, _, key, value in
                guard let cls, let key else { return .YES }
                cls.assumingMemoryBound(to: [(name: String, value: String)].self).pointee
                    .append((name: String(cString: key), value: value.map { String(cString: $0) } ?? ""))
                return .YES
            }, p)
        }
        return pairs
    }

    /// An IPv4 address as `inet_ntop` spells it (`a.b.c.d`, no leading zeros), by
    /// hand: `inet_ntop` formats it with `sprintf`, a tenth of the server's
    /// instructions for a count of one topic (the access log's client column).
    static func dottedQuad(_ address: UInt32) -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 15) { out in
            var at = 0
            for shift in stride(from: 24, through: 0, by: -8) {
                let part = UInt8(truncatingIfNeeded: address >> UInt32(shift))
                if part >= 100 { out[at] = UInt8(ascii: "0") + part / 100; at += 1 }
                if part >= 10 { out[at] = UInt8(ascii: "0") + part / 10 % 10; at += 1 }
                out[at] = UInt8(ascii: "0") + part % 10; at += 1
                if shift > 0 { out[at] = UInt8(ascii: "."); at += 1 }
            }
            return String(decoding: UnsafeBufferPointer(rebasing: out[0..<at]), as: UTF8.self)
        }
    }

    static func address(_ sa: UnsafePointer<sockaddr>?) -> String {
        guard let sa else { return "-" }
        switch Int32(sa.pointee.sa_family) {
        case AF_INET:
            return sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                dottedQuad(UInt32(bigEndian: sin.pointee.sin_addr.s_addr))
            }
        case AF_INET6:
            return sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin in
                var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
                var addr = sin.pointee.sin6_addr
                guard inet_ntop(AF_INET6, &addr, &buffer, socklen_t(buffer.count)) != nil else { return "-" }
                return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        default:
            return "-"
        }
    }
}
