internal import CNGHTTP2
import Foundation

/// Many HTTP/2 requests over few connections: libnghttp2 sessions driven
/// directly over non-blocking sockets with OpenSSL (ALPN h2), one `poll` loop.
/// Request headers are built once per batch as nghttp2 name/value pairs that
/// nghttp2 reads in place; per request only the `:path` (the APNs token) and
/// the body (the FCM message) change. Connections stay open from one `run` to
/// the next. Not thread-safe: it belongs to the delivery thread.
final class HTTP2Engine {
    /// Where requests go: scheme, host and port of a base URL.
    struct Endpoint: Hashable, Sendable {
        var tls: Bool
        var host: String
        var port: UInt16
        var authority: String {
            let h = host.contains(":") ? "[\(host)]" : host
            return (tls && port == 443) || (!tls && port == 80) ? h : "\(h):\(port)"
        }

        /// Parses `https://host[:port][/base]`; returns the endpoint and the base path ("" or "/base").
        static func parse(_ url: String) -> (Endpoint, basePath: String)? {
            let tls: Bool
            var rest: Substring
            if url.hasPrefix("https://") { tls = true; rest = url.dropFirst(8) }
            else if url.hasPrefix("http://") { tls = false; rest = url.dropFirst(7) }
            else { return nil }
            var base = ""
            if let slash = rest.firstIndex(of: "/") {
                base = String(rest[slash...])
                rest = rest[..<slash]
                while base.hasSuffix("/") { base.removeLast() }
            }
            var host = String(rest)
            var port: UInt16 = tls ? 443 : 80
            if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
                host = String(rest[rest.index(after: rest.startIndex)..<close])
                let after = rest[rest.index(after: close)...]
                if after.hasPrefix(":") { guard let p = UInt16(after.dropFirst()) else { return nil }; port = p }
            } else if let colon = rest.lastIndex(of: ":") {
                host = String(rest[..<colon])
                guard let p = UInt16(rest[rest.index(after: colon)...]) else { return nil }
                port = p
            }
            guard !host.isEmpty else { return nil }
            return (Endpoint(tls: tls, host: host, port: port), base)
        }
    }

    /// Bytes that outlive every request that points at them (a body or a path shared by a batch).
    final class SharedBody {
        let pointer: UnsafeMutableRawPointer
        let count: Int
        init(_ bytes: [UInt8]) {
            count = bytes.count
            pointer = UnsafeMutableRawPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            bytes.withUnsafeBytes { if let b = $0.baseAddress { pointer.copyMemory(from: b, byteCount: bytes.count) } }
        }
        convenience init(_ text: String) { self.init(Array(text.utf8)) }
        deinit { pointer.deallocate() }
    }

    /// A request's pseudo-headers and headers for one endpoint, encoded once as
    /// nghttp2 name/value pairs that point into one buffer (`:path` is filled per request).
    final class Headers {
        let endpoint: Endpoint
        fileprivate let storage: UnsafeMutablePointer<UInt8>
        fileprivate let nva: UnsafeMutablePointer<nghttp2_nv>
        fileprivate let count: Int
        /// Index of `:path` in `nva`.
        fileprivate static let pathIndex = 3

        init(endpoint: Endpoint, method: String = "POST", fields: [(name: String, value: String)]) {
            self.endpoint = endpoint
            var pairs: [(String, String)] = [(":method", method), (":scheme", endpoint.tls ? "https" : "http"),
                                             (":authority", endpoint.authority), (":path", "/")]
            for f in fields { pairs.append((f.name.lowercased(), f.value)) }
            let total = pairs.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count }
            storage = UnsafeMutablePointer<UInt8>.allocate(capacity: max(1, total))
            nva = UnsafeMutablePointer<nghttp2_nv>.allocate(capacity: pairs.count)
            count = pairs.count
            var offset = 0
            for (i, (name, value)) in pairs.enumerated() {
                let n = name.utf8.count, v = value.utf8.count
                _ = UnsafeMutableBufferPointer(start: storage + offset, count: n).initialize(from: name.utf8)
                _ = UnsafeMutableBufferPointer(start: storage + offset + n, count: v).initialize(from: value.utf8)
                nva[i] = nghttp2_nv(name: storage + offset, value: storage + offset + n, namelen: n, valuelen: v,
                                    flags: UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue))
                offset += n + v
            }
        }
        deinit {
            storage.deallocate()
            nva.deallocate()
        }
    }

    /// The request body: the same for a batch (APNs), a fixed prefix and suffix around the
    /// token (FCM; the token must need no escaping there), or bytes of its own.
    enum Body { case shared(SharedBody), token(prefix: SharedBody, token: String, suffix: SharedBody), owned([UInt8]) }

    /// The request path: fixed for a batch (FCM), or a fixed prefix and the device token (APNs).
    enum Path { case fixed(SharedBody), token(prefix: SharedBody, token: String) }

    struct Request {
        var headers: Headers
        var path: Path
        var body: Body
        /// The caller's index for this request.
        var tag: Int
        var attempt = 0
        /// Times this request was refused where nothing was answered (the caller's count).
        var refusals = 0
    }

    struct Response {
        /// 0 when the request failed before a complete response (`error` says why).
        var status: Int
        var body: [UInt8]
        /// The Retry-After header, when the server sent one.
        var retryAfter: String?
        var error: String?
        /// When this attempt was handed to the connection (ms since 1970; 0 when it never was):
        /// the time a rejection without a provider timestamp is dated.
        var sentAtMillis: Int64 = 0
        /// The server did not process the request (RST_STREAM REFUSED_STREAM, or a stream above
        /// the last stream id of its GOAWAY): safe to send again, and no answer from the provider.
        var refused = false
        /// When refused: the connection had answered other requests before (the server works
        /// there, it only would not take this one), rather than none at all.
        var refusedAfterAnswers = false
    }

    /// What to do after a response: nothing more, or try again after `delay` seconds.
    enum Next { case done, retry(Request, delay: Double) }

    // MARK: State

    fileprivate final class Slot {
        var request: Request?
        /// The connection the request is on (nil once it completed).
        var connection: Connection?
        var streamID: Int32 = 0
        var status = 0
        var body: [UInt8] = []
        var retryAfter: String?
        var error: String?
        var deadline = 0.0
        var resetAt = 0.0
        var sentAtMillis: Int64 = 0
        var refused = false
        var refusedAfterAnswers = false
        var active = false
        // What nghttp2 reads while the request is sent.
        var nva: UnsafeMutablePointer<nghttp2_nv>
        var nvaCapacity = 16
        var path: UnsafeMutablePointer<UInt8>
        var pathCapacity = 256
        var bodyPointer: UnsafeRawPointer?
        var bodyCount = 0
        var bodyOffset = 0
        var ownedBody: UnsafeMutableRawPointer?
        var ownedCapacity = 0
        /// The slot's own body buffer, at least `count` bytes.
        func bodyBuffer(_ count: Int) -> UnsafeMutableRawPointer {
            if let b = ownedBody, ownedCapacity >= count { return b }
            ownedBody?.deallocate()
            ownedCapacity = max(count, 1024)
            let b = UnsafeMutableRawPointer.allocate(byteCount: ownedCapacity, alignment: 1)
            ownedBody = b
            return b
        }
        init() {
            nva = .allocate(capacity: nvaCapacity)
            path = .allocate(capacity: pathCapacity)
        }
        deinit {
            nva.deallocate()
            path.deallocate()
            ownedBody?.deallocate()
        }
    }

    fileprivate final class Connection {
        enum State { case connecting, handshaking, open, closed }
        unowned let engine: HTTP2Engine
        let endpoint: Endpoint
        var fd: Int32 = -1
        var ssl: OpaquePointer?
        var session: OpaquePointer?
        var state = State.connecting
        var wantWrite = false
        var streams = 0
        /// Streams the server answered here.
        var answered = 0
        var goaway = false
        /// The server's first SETTINGS frame arrived.
        var settled = false
        let openedAt: Double
        /// When a stream last started here (0: never).
        var lastStart = 0.0
        var out: UnsafeMutablePointer<UInt8>
        var outCapacity = 256 << 10
        var outStart = 0
        var outEnd = 0
        init(engine: HTTP2Engine, endpoint: Endpoint, now: Double) {
            self.engine = engine
            self.endpoint = endpoint
            openedAt = now
            out = .allocate(capacity: outCapacity)
        }
        deinit { out.deallocate() }
    }

    private let sslContext: OpaquePointer?
    private let sslContextError: String?
    private let connectionsPerHost: Int
    private let maxConcurrentStreams: Int
    private let timeout: Double
    private let connectTimeout: Double
    private var slots: [Slot] = []
    private var free: [Int] = []
    private var connections: [Connection] = []
    /// Why the last connection to an endpoint failed before it was up, and until when that answers its requests.
    private var connectFailures: [Endpoint: (reason: String, until: Double)] = [:]
    /// Why connections failed before they were up since the run loop last looked, per endpoint.
    private var unsettledFailures: [Endpoint: String] = [:]
    /// Slots whose stream closed, in order, for the run loop to complete.
    private var finished: [Int] = []
    private let readBuffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 64 << 10)
    private let callbacks: OpaquePointer = makeCallbacks()
    private let options: OpaquePointer = {
        var o: OpaquePointer?
        nghttp2_option_new(&o)
        // Until the server's SETTINGS arrive, assume the 100 streams RFC 9113 recommends at least.
        nghttp2_option_set_peer_max_concurrent_streams(o, 100)
        return o!
    }()
    private static let ignoreSIGPIPE: Bool = { signal(SIGPIPE, SIG_IGN); return true }()

    /// Requests completed since the engine was made.
    private(set) var completed = 0
    /// Connections opened since the engine was made.
    private(set) var connectionsOpened = 0

    /// - Parameters:
    ///   - caFile: PEM CA bundle to verify servers with; nil: the system's CAs.
    ///   - connectionsPerHost: HTTP/2 connections per endpoint.
    ///   - maxConcurrentStreams: streams per connection at most (and never more than the server's SETTINGS allow).
    init(caFile: String?, connectionsPerHost: Int, maxConcurrentStreams: Int = 1000, timeoutSeconds: Double = 30) {
        self.connectionsPerHost = max(1, connectionsPerHost)
        self.maxConcurrentStreams = max(1, maxConcurrentStreams)
        timeout = timeoutSeconds
        connectTimeout = min(10, timeoutSeconds)
        // A write to a connection the server has closed must be an error (EPIPE), not the end of
        // the process: OpenSSL writes with write(2), which raises SIGPIPE. Servers ignore it anyway.
        _ = Self.ignoreSIGPIPE
        var error: String?
        let ctx = SSL_CTX_new(TLS_client_method())
        if let ctx {
            _ = topicstore_ssl_ctx_set_min_tls12(ctx)
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
            let loaded = caFile.map { SSL_CTX_load_verify_locations(ctx, $0, nil) } ?? SSL_CTX_set_default_verify_paths(ctx)
            if loaded != 1 { error = "cannot load the CA file \(caFile ?? "(system)"): \(Self.sslErrors())" }
            let alpn: [UInt8] = [2, UInt8(ascii: "h"), UInt8(ascii: "2")]
            _ = SSL_CTX_set_alpn_protos(ctx, alpn, UInt32(alpn.count))
        } else {
            error = "SSL_CTX_new failed: \(Self.sslErrors())"
        }
        sslContext = ctx
        sslContextError = error
    }

    deinit {
        for c in connections { close(c) }
        if let sslContext { SSL_CTX_free(sslContext) }
        nghttp2_session_callbacks_del(callbacks)
        nghttp2_option_del(options)
        readBuffer.deallocate()
    }

    /// The wall clock in milliseconds since 1970.
    static func wallMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    static func seconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    private static func sslErrors() -> String {
        var parts: [String] = []
        var buffer = [CChar](repeating: 0, count: 256)
        while case let e = ERR_get_error(), e != 0 {
            ERR_error_string_n(e, &buffer, buffer.count)
            parts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return parts.isEmpty ? "unknown TLS error" : parts.joined(separator: "; ")
    }

    // MARK: Running requests

    /// Requests for one endpoint that no connection can take yet (none has sent its SETTINGS, or
    /// every stream allowed is in use), oldest first, with when each began to wait.
    private struct WaitQueue {
        private var items: [(request: Request, since: Double)] = []
        private var head = 0
        var first: (request: Request, since: Double)? { head < items.count ? items[head] : nil }
        mutating func append(_ request: Request, since: Double) { items.append((request, since)) }
        mutating func removeFirst() {
            head += 1
            if head == items.count { items.removeAll(keepingCapacity: true); head = 0 }
            else if head > 1024 && head * 2 > items.count { items.removeFirst(head); head = 0 }
        }
    }

    /// Runs requests from `next` (nil when there are no more) with at most
    /// `maxInFlight` at once: streams sent, and requests waiting in the engine for a stream.
    /// `gate` says how long to wait before the next new request may start (0: now) — the rate
    /// limit. `completion` gets every response and may ask for a retry after a delay.
    ///
    /// A request waits in the engine while no connection to its host can take it: until a
    /// connection's SETTINGS arrive (a connection gets the connecting-and-TLS limit for them,
    /// then fails like one that could not be made), or a stream is free. Its request timeout
    /// starts when it is sent; waiting, it fails as a timeout only when the host has let no
    /// new stream start for as long as the request timeout (a server that allows none).
    ///
    /// Once `stopAt` gives a time (monotonic seconds, as `seconds()`), nothing more starts: the
    /// requests not yet sent and the retries asked for are dropped, the streams in flight get
    /// until that time to be answered (and completed as usual), and those still open then are
    /// given up — their connections closed, their requests not completed. Returns true when
    /// `next` ran dry and every request was completed, false when a stop ended the run first.
    @discardableResult
    func run(maxInFlight: Int, next: () -> Request?, gate: () -> Double, stopAt: () -> Double? = { nil },
             completion: (Request, Response) -> Next) -> Bool {
        var active = 0
        var waiting: [Endpoint: WaitQueue] = [:]
        var waitingCount = 0
        var ready: [Request] = []
        var delayed: [(due: Double, request: Request)] = []
        var exhausted = false
        var lastTimeoutCheck = Self.seconds()
        var stopDeadline: Double?

        func complete(_ request: Request, _ response: Response) {
            completed += 1
            switch completion(request, response) {
            case .done: break
            case .retry(let again, let delay): if stopDeadline == nil { delayed.append((Self.seconds() + delay, again)) }
            }
        }
        func failure(_ reason: String) -> Response { Response(status: 0, body: [], retryAfter: nil, error: reason) }

        // Notice connections the server closed while they were idle, before reusing them.
        if !connections.isEmpty { pump(timeoutMs: 0) }
        while true {
            var now = Self.seconds()
            if stopDeadline == nil, let deadline = stopAt() {
                stopDeadline = deadline
                ready.removeAll()
                delayed.removeAll()
                waiting.removeAll()
                waitingCount = 0
                exhausted = true
            }
            if let deadline = stopDeadline {
                if active == 0 { return false }
                if now >= deadline {
                    abandonStreams()
                    return false
                }
            }
            if stopDeadline == nil && !delayed.isEmpty {
                var keep: [(due: Double, request: Request)] = []
                for d in delayed { if d.due <= now { ready.append(d.request) } else { keep.append(d) } }
                delayed = keep
            }
            var gateWait = 0.0
            // The waiting requests first, oldest first per host, as far as streams are free.
            if waitingCount > 0 && stopDeadline == nil {
                waitingHosts: for endpoint in Array(waiting.keys) {
                    while let w = waiting[endpoint]?.first {
                        switch placement(for: endpoint, now: now) {
                        case .on(let c):
                            let wait = gate()
                            if wait > 0 { gateWait = wait; break waitingHosts }
                            waiting[endpoint]!.removeFirst()
                            waitingCount -= 1
                            start(w.request, on: c, now: now)
                            active += 1
                        case .wait:
                            continue waitingHosts
                        case .fail(let reason):
                            waiting[endpoint]!.removeFirst()
                            waitingCount -= 1
                            complete(w.request, failure(reason))
                        }
                    }
                }
            }
            starting: while stopDeadline == nil && gateWait == 0 && active + waitingCount < maxInFlight {
                var request: Request?
                if let r = ready.popLast() { request = r } else if !exhausted {
                    request = next()
                    if request == nil { exhausted = true }
                }
                guard let r = request else { break }
                switch placement(for: r.headers.endpoint, now: now) {
                case .on(let connection):
                    let wait = gate()
                    if wait > 0 { ready.append(r); gateWait = wait; break starting }
                    start(r, on: connection, now: now)
                    active += 1
                case .wait:
                    waiting[r.headers.endpoint, default: WaitQueue()].append(r, since: now)
                    waitingCount += 1
                case .fail(let reason):
                    complete(r, failure(reason))
                }
            }
            if active == 0 && waitingCount == 0 && ready.isEmpty && delayed.isEmpty && exhausted { return true }

            if finished.isEmpty {
                var timeoutMs = 100.0
                if gateWait > 0 { timeoutMs = min(timeoutMs, gateWait * 1000) }
                if let soonest = delayed.map(\.due).min() { timeoutMs = min(timeoutMs, max(0, (soonest - Self.seconds()) * 1000)) }
                if let deadline = stopDeadline { timeoutMs = min(timeoutMs, max(0, (deadline - Self.seconds()) * 1000)) }
                pump(timeoutMs: Int32(timeoutMs.rounded(.up)))
            }
            now = Self.seconds()
            if now - lastTimeoutCheck >= 0.1 {
                lastTimeoutCheck = now
                expire(now: now)
                // A waiting request fails as a timeout when its host, with a connection up, let no
                // stream start for the request timeout (while none is up, the connecting limit rules).
                if waitingCount > 0 {
                    for endpoint in Array(waiting.keys) {
                        let up = connections.lazy.filter { $0.endpoint == endpoint && $0.state == .open && $0.settled }
                        guard !up.isEmpty else { continue }
                        let progress = up.map(\.lastStart).max() ?? 0
                        while let w = waiting[endpoint]?.first, now - max(w.since, progress) > timeout {
                            waiting[endpoint]!.removeFirst()
                            waitingCount -= 1
                            complete(w.request, failure("timeout after \(timeout) s: \(endpoint.authority) allowed no stream"))
                        }
                    }
                }
            }
            // A connection that failed before it was up fails the requests waiting for its host
            // (unless another connection there is up): they back off and try again.
            if !unsettledFailures.isEmpty {
                for (endpoint, reason) in unsettledFailures where waiting[endpoint]?.first != nil {
                    guard !connections.contains(where: { $0.endpoint == endpoint && $0.state == .open && $0.settled }) else { continue }
                    while let w = waiting[endpoint]?.first {
                        waiting[endpoint]!.removeFirst()
                        waitingCount -= 1
                        complete(w.request, failure(reason))
                    }
                }
                unsettledFailures.removeAll()
            }
            while !finished.isEmpty {
                let batch = finished
                finished.removeAll(keepingCapacity: true)
                for index in batch {
                    let slot = slots[index]
                    let response = Response(status: slot.error == nil ? slot.status : 0, body: slot.body,
                                            retryAfter: slot.retryAfter, error: slot.error, sentAtMillis: slot.sentAtMillis,
                                            refused: slot.refused, refusedAfterAnswers: slot.refusedAfterAnswers)
                    let request = slot.request!
                    release(index)
                    active -= 1
                    complete(request, response)
                }
            }
        }
    }

    /// Closes every connection with a stream open; their requests are released uncompleted.
    private func abandonStreams() {
        for slot in slots where slot.active { if let c = slot.connection { fail(c, "stopped") } }
        for index in finished { release(index) }
        finished.removeAll()
        connections.removeAll { $0.state == .closed }
    }

    /// The connection a new request to `endpoint` goes on: the least busy one with a free
    /// stream, a new one while there are fewer than `connectionsPerHost`, or nil when all are full.
    private enum Placement { case on(Connection), wait, fail(String) }

    /// Where a new request to `endpoint` goes: the least busy connection with a free stream
    /// (a connection takes requests once the server's first SETTINGS arrived: its stream limit is
    /// known then), or wait for one — a new connection is opened while there are fewer than
    /// `connectionsPerHost`. When the last attempt to connect failed moments ago and none is up,
    /// the request fails at once with that reason (and the caller's retry backs off).
    private func placement(for endpoint: Endpoint, now: Double) -> Placement {
        var best: Connection?
        var count = 0
        for c in connections where c.endpoint == endpoint && c.state != .closed && !c.goaway {
            count += 1
            if c.settled, c.streams < limit(c), best == nil || c.streams < best!.streams { best = c }
        }
        if let best, best.streams == 0 || count >= connectionsPerHost { return .on(best) }
        if count == 0, let failure = connectFailures[endpoint] {
            if now < failure.until { return .fail(failure.reason) }
            connectFailures[endpoint] = nil
        }
        if count < connectionsPerHost { _ = open(endpoint, now: now) }
        return best.map { .on($0) } ?? .wait
    }

    private func limit(_ c: Connection) -> Int {
        let remote = Int(nghttp2_session_get_remote_settings(c.session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS))
        return min(maxConcurrentStreams, remote)
    }

    private func acquire() -> Int {
        if let i = free.popLast() { return i }
        slots.append(Slot())
        return slots.count - 1
    }

    private func release(_ index: Int) {
        let slot = slots[index]
        slot.request = nil
        slot.connection = nil
        slot.active = false
        free.append(index)
    }

    private static let readBody: nghttp2_data_source_read_callback = { _, _, buf, length, flags, source, _ in
        guard let buf, let flags, let raw = source?.pointee.ptr else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
        let slot = Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue()
        let n = min(length, slot.bodyCount - slot.bodyOffset)
        if n > 0, let p = slot.bodyPointer { buf.update(from: p.advanced(by: slot.bodyOffset).assumingMemoryBound(to: UInt8.self), count: n) }
        slot.bodyOffset += n
        if slot.bodyOffset >= slot.bodyCount { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return n
    }

    private func start(_ request: Request, on connection: Connection, now: Double) {
        let index = acquire()
        let slot = slots[index]
        slot.request = request
        slot.connection = connection
        slot.status = 0
        slot.body.removeAll(keepingCapacity: true)
        slot.retryAfter = nil
        slot.error = nil
        slot.deadline = now + timeout
        slot.resetAt = 0
        slot.refused = false
        slot.refusedAfterAnswers = false
        slot.sentAtMillis = Self.wallMillis()
        slot.active = true

        // Headers: the batch's pairs, with this request's :path.
        let h = request.headers
        if slot.nvaCapacity < h.count {
            slot.nva.deallocate()
            slot.nvaCapacity = h.count
            slot.nva = .allocate(capacity: h.count)
        }
        slot.nva.update(from: h.nva, count: h.count)
        var pathCount = 0
        var pathFlags = UInt8(NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue)
        switch request.path {
        case .fixed(let p):
            slot.nva[Headers.pathIndex].value = p.pointer.assumingMemoryBound(to: UInt8.self)
            pathCount = p.count
        case .token(let prefix, var token):
            let need = prefix.count + token.utf8.count
            if slot.pathCapacity < need {
                slot.path.deallocate()
                slot.pathCapacity = max(need, 2 * slot.pathCapacity)
                slot.path = .allocate(capacity: slot.pathCapacity)
            }
            slot.path.update(from: prefix.pointer.assumingMemoryBound(to: UInt8.self), count: prefix.count)
            token.withUTF8 { t in if let b = t.baseAddress { (slot.path + prefix.count).update(from: b, count: t.count) } }
            slot.nva[Headers.pathIndex].value = slot.path
            pathCount = need
            // Every path differs: keep them out of the HPACK table, where they would evict the auth header.
            pathFlags |= UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
        }
        slot.nva[Headers.pathIndex].valuelen = pathCount
        slot.nva[Headers.pathIndex].flags = pathFlags

        switch request.body {
        case .shared(let b):
            slot.bodyPointer = UnsafeRawPointer(b.pointer)
            slot.bodyCount = b.count
        case .token(let prefix, var token, let suffix):
            let count = prefix.count + token.utf8.count + suffix.count
            let body = slot.bodyBuffer(count)
            body.copyMemory(from: prefix.pointer, byteCount: prefix.count)
            token.withUTF8 { t in if let b = t.baseAddress { (body + prefix.count).copyMemory(from: b, byteCount: t.count) } }
            (body + prefix.count + token.utf8.count).copyMemory(from: suffix.pointer, byteCount: suffix.count)
            slot.bodyPointer = UnsafeRawPointer(body)
            slot.bodyCount = count
        case .owned(let bytes):
            let body = slot.bodyBuffer(bytes.count)
            bytes.withUnsafeBytes { if let b = $0.baseAddress { body.copyMemory(from: b, byteCount: bytes.count) } }
            slot.bodyPointer = UnsafeRawPointer(body)
            slot.bodyCount = bytes.count
        }
        slot.bodyOffset = 0

        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: Unmanaged.passUnretained(slot).toOpaque()),
                                             read_callback: Self.readBody)
        let id = nghttp2_submit_request(connection.session, nil, slot.nva, h.count, &provider,
                                        UnsafeMutableRawPointer(bitPattern: index + 1))
        if id < 0 {
            slot.error = "cannot submit the request: \(String(cString: nghttp2_strerror(id)))"
            slot.connection = nil
            finished.append(index)
            return
        }
        slot.streamID = id
        connection.streams += 1
        connection.lastStart = now
    }

    /// Requests past their deadline are reset (their stream closes with "timeout"); a
    /// connection that has not finished its handshake, or not sent its SETTINGS, in the
    /// connecting-and-TLS limit is dropped with its requests.
    private func expire(now: Double) {
        for c in connections where c.state != .closed && !c.settled && now - c.openedAt > connectTimeout {
            fail(c, c.state == .open ? "\(c.endpoint.authority) sent no HTTP/2 SETTINGS within \(connectTimeout) s"
                                     : "connection to \(c.endpoint.authority) timed out")
        }
        for slot in slots where slot.active && slot.deadline < now {
            guard let c = slot.connection, c.state != .closed else { continue }
            if slot.resetAt == 0 {
                slot.error = "timeout after \(timeout) s"
                slot.resetAt = now
                nghttp2_submit_rst_stream(c.session, UInt8(NGHTTP2_FLAG_NONE.rawValue), slot.streamID, NGHTTP2_CANCEL.rawValue)
                flush(c)
            } else if now - slot.resetAt > 2 {
                fail(c, "connection to \(c.endpoint.authority) stopped answering")
            }
        }
    }

    // MARK: Connections

    private func open(_ endpoint: Endpoint, now: Double) -> Connection {
        let c = Connection(engine: self, endpoint: endpoint, now: now)
        connections.append(c)
        connectionsOpened += 1
        var session: OpaquePointer?
        nghttp2_session_client_new2(&session, callbacks, Unmanaged.passUnretained(c).toOpaque(), options)
        c.session = session
        var settings = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
                        nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20)]
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        if let sslContextError { fail(c, sslContextError); return c }
        // Resolve and start a non-blocking connect; the TLS handshake follows in `pump`.
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var info: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &info)
        guard rc == 0, let ai = info else {
            fail(c, "cannot resolve \(endpoint.host): \(String(cString: gai_strerror(rc)))")
            return c
        }
        defer { freeaddrinfo(info) }
        let fd = socket(ai.pointee.ai_family, ai.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), ai.pointee.ai_protocol)
        guard fd >= 0 else { fail(c, "socket: \(String(cString: strerror(errno)))"); return c }
        c.fd = fd
        _ = topicstore_set_nonblocking(fd)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) != 0 && errno != EINPROGRESS {
            fail(c, "connect to \(endpoint.authority): \(String(cString: strerror(errno)))")
            return c
        }
        return c
    }

    /// After the TCP connect: start TLS (or HTTP/2 in clear text for http://).
    private func connected(_ c: Connection) {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len)
        if err != 0 { fail(c, "connect to \(c.endpoint.authority): \(String(cString: strerror(err)))"); return }
        guard c.endpoint.tls else { c.state = .open; flush(c); return }
        guard let ssl = SSL_new(sslContext) else { fail(c, "SSL_new: \(Self.sslErrors())"); return }
        c.ssl = ssl
        SSL_set_fd(ssl, c.fd)
        _ = topicstore_ssl_set_mode(ssl, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        var address = in6_addr()
        let isIP = inet_pton(AF_INET, c.endpoint.host, &address) == 1 || inet_pton(AF_INET6, c.endpoint.host, &address) == 1
        if isIP {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), c.endpoint.host)
        } else {
            _ = topicstore_ssl_set_sni(ssl, c.endpoint.host)
            SSL_set1_host(ssl, c.endpoint.host)
        }
        SSL_set_connect_state(ssl)
        c.state = .handshaking
        handshake(c)
    }

    private func handshake(_ c: Connection) {
        ERR_clear_error()
        let r = SSL_do_handshake(c.ssl)
        if r == 1 {
            var proto: UnsafePointer<UInt8>?
            var len: UInt32 = 0
            SSL_get0_alpn_selected(c.ssl, &proto, &len)
            guard let proto, len == 2, proto[0] == UInt8(ascii: "h"), proto[1] == UInt8(ascii: "2") else {
                fail(c, "\(c.endpoint.authority) did not negotiate HTTP/2 (ALPN h2)")
                return
            }
            c.state = .open
            c.wantWrite = false
            flush(c)
            return
        }
        switch SSL_get_error(c.ssl, r) {
        case SSL_ERROR_WANT_READ: c.wantWrite = false
        case SSL_ERROR_WANT_WRITE: c.wantWrite = true
        default:
            let verify = SSL_get_verify_result(c.ssl)
            let detail = verify != X509_V_OK ? String(cString: X509_verify_cert_error_string(verify)) : Self.sslErrors()
            fail(c, "TLS handshake with \(c.endpoint.authority) failed: \(detail)")
        }
    }

    /// Writes what is pending and what nghttp2 has to send, until the socket would block.
    private func flush(_ c: Connection) {
        guard c.state == .open else { return }
        while true {
            while c.outStart < c.outEnd {
                let n: Int
                if let ssl = c.ssl {
                    ERR_clear_error()
                    let w = SSL_write(ssl, c.out + c.outStart, Int32(c.outEnd - c.outStart))
                    if w <= 0 {
                        let e = SSL_get_error(ssl, w)
                        if e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ { c.wantWrite = true; return }
                        fail(c, "write to \(c.endpoint.authority): \(e == SSL_ERROR_SYSCALL ? String(cString: strerror(errno)) : Self.sslErrors())")
                        return
                    }
                    n = Int(w)
                } else {
                    n = write(c.fd, c.out + c.outStart, c.outEnd - c.outStart)
                    if n < 0 {
                        if errno == EAGAIN || errno == EINTR { c.wantWrite = true; return }
                        fail(c, "write to \(c.endpoint.authority): \(String(cString: strerror(errno)))")
                        return
                    }
                }
                c.outStart += n
            }
            c.outStart = 0
            c.outEnd = 0
            c.wantWrite = false
            // Gather frames into one buffer: one TLS record and one syscall for many requests.
            while c.outEnd < c.outCapacity - 32 << 10 {
                var chunk: UnsafePointer<UInt8>?
                let n = nghttp2_session_mem_send(c.session, &chunk)
                if n < 0 { fail(c, "HTTP/2: \(String(cString: nghttp2_strerror(Int32(n))))"); return }
                if n == 0 { break }
                if c.outEnd + n > c.outCapacity {
                    let bigger = UnsafeMutablePointer<UInt8>.allocate(capacity: c.outEnd + n)
                    bigger.update(from: c.out, count: c.outEnd)
                    c.out.deallocate()
                    c.out = bigger
                    c.outCapacity = c.outEnd + n
                }
                (c.out + c.outEnd).update(from: chunk!, count: n)
                c.outEnd += n
            }
            if c.outEnd == 0 { break }
        }
        if nghttp2_session_want_read(c.session) == 0 && nghttp2_session_want_write(c.session) == 0 {
            fail(c, "connection to \(c.endpoint.authority) closed (GOAWAY)")
        }
    }

    /// Reads everything available and hands it to nghttp2 (whose callbacks complete streams).
    private func readable(_ c: Connection) {
        while c.state == .open {
            let n: Int
            if let ssl = c.ssl {
                ERR_clear_error()
                let r = SSL_read(ssl, readBuffer, Int32(64 << 10))
                if r <= 0 {
                    let e = SSL_get_error(ssl, r)
                    if e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE { return }
                    fail(c, e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)
                         ? "connection closed by \(c.endpoint.authority)" : "read from \(c.endpoint.authority): \(Self.sslErrors())")
                    return
                }
                n = Int(r)
            } else {
                n = read(c.fd, readBuffer, 64 << 10)
                if n < 0 {
                    if errno == EAGAIN || errno == EINTR { return }
                    fail(c, "read from \(c.endpoint.authority): \(String(cString: strerror(errno)))")
                    return
                }
                if n == 0 { fail(c, "connection closed by \(c.endpoint.authority)"); return }
            }
            let used = nghttp2_session_mem_recv(c.session, readBuffer, n)
            if used < 0 { fail(c, "HTTP/2 from \(c.endpoint.authority): \(String(cString: nghttp2_strerror(Int32(used))))"); return }
        }
    }

    /// One poll over every connection; handles what is ready.
    private func pump(timeoutMs: Int32) {
        // What was submitted since the last pump goes out before we wait for answers.
        for c in connections where c.state == .open { flush(c) }
        var fds: [pollfd] = []
        var owners: [Connection] = []
        fds.reserveCapacity(connections.count)
        for c in connections where c.state != .closed && c.fd >= 0 {
            var events: Int16
            switch c.state {
            case .connecting: events = Int16(POLLOUT)
            case .handshaking: events = c.wantWrite ? Int16(POLLOUT) : Int16(POLLIN)
            default: events = Int16(POLLIN) | (c.wantWrite ? Int16(POLLOUT) : 0)
            }
            fds.append(pollfd(fd: c.fd, events: events, revents: 0))
            owners.append(c)
        }
        let ready = poll(&fds, nfds_t(fds.count), timeoutMs)
        if ready > 0 {
            for (i, c) in owners.enumerated() where fds[i].revents != 0 {
                let revents = fds[i].revents
                switch c.state {
                case .connecting: connected(c)
                case .handshaking: handshake(c)
                case .open:
                    if revents & Int16(POLLIN | POLLERR | POLLHUP) != 0 { readable(c) }
                    if c.state == .open { flush(c) }
                case .closed: break
                }
            }
        }
        for c in connections where c.state == .open { flush(c) }
        connections.removeAll { $0.state == .closed }
    }

    /// Drops a connection: every request still on it completes with `reason` (status 0).
    private func fail(_ c: Connection, _ reason: String) {
        guard c.state != .closed else { return }
        c.state = .closed
        if !c.settled {
            connectFailures[c.endpoint] = (reason, Self.seconds() + 0.25)
            unsettledFailures[c.endpoint] = reason
        }
        for (i, slot) in slots.enumerated() where slot.active && slot.connection === c {
            if slot.error == nil { slot.error = reason }
            slot.connection = nil
            slot.active = false
            finished.append(i)
        }
        close(c)
    }

    private func close(_ c: Connection) {
        c.state = .closed
        if let s = c.session { nghttp2_session_del(s); c.session = nil }
        if let ssl = c.ssl { SSL_free(ssl); c.ssl = nil }
        if c.fd >= 0 { Glibc.close(c.fd); c.fd = -1 }
    }

    // MARK: nghttp2 callbacks (user data: the Connection; stream user data: slot index + 1)

    private func slot(_ c: Connection, _ stream: Int32) -> (Int, Slot)? {
        guard let raw = nghttp2_session_get_stream_user_data(c.session, stream) else { return nil }
        let index = Int(bitPattern: raw) - 1
        guard index >= 0, index < slots.count, slots[index].active, slots[index].connection === c else { return nil }
        return (index, slots[index])
    }

    private static func makeCallbacks() -> OpaquePointer {
        var cbs: OpaquePointer?
        nghttp2_session_callbacks_new(&cbs)
        nghttp2_session_callbacks_set_on_header_callback(cbs) { session, frame, name, namelen, value, valuelen, _, user in
            guard let frame, let user, let name, let value, topicstore_frame_type(frame) == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
            let c = Unmanaged<Connection>.fromOpaque(user).takeUnretainedValue()
            guard c.state != .closed, let (_, slot) = c.engine.slot(c, topicstore_frame_stream_id(frame)) else { return 0 }
            if namelen == 7, name[0] == UInt8(ascii: ":"), name[1] == UInt8(ascii: "s") {
                var status = 0
                for i in 0..<valuelen { status = status * 10 + Int(value[i]) - 48 }
                slot.status = status
            } else if namelen == 11, memcmp(name, "retry-after", 11) == 0 {
                slot.retryAfter = String(decoding: UnsafeBufferPointer(start: value, count: valuelen), as: UTF8.self)
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs) { _, _, stream, data, len, user in
            guard let user, let data else { return 0 }
            let c = Unmanaged<Connection>.fromOpaque(user).takeUnretainedValue()
            guard c.state != .closed, let (_, slot) = c.engine.slot(c, stream) else { return 0 }
            // Provider error bodies are small; keep at most 64 KiB of anything else.
            if slot.body.count < 64 << 10 { slot.body.append(contentsOf: UnsafeBufferPointer(start: data, count: min(len, (64 << 10) - slot.body.count))) }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs) { _, stream, errorCode, user in
            guard let user else { return 0 }
            let c = Unmanaged<Connection>.fromOpaque(user).takeUnretainedValue()
            guard c.state != .closed, let (index, slot) = c.engine.slot(c, stream) else { return 0 }
            if errorCode == NGHTTP2_REFUSED_STREAM.rawValue && slot.error == nil {
                // Never processed: closed by the server's RST_STREAM, or above its GOAWAY's last stream id.
                slot.error = "stream refused by \(c.endpoint.authority)"
                slot.refused = true
                slot.refusedAfterAnswers = c.answered > 0
            } else if errorCode != NGHTTP2_NO_ERROR.rawValue || slot.status == 0, slot.error == nil {
                slot.error = "stream closed: \(String(cString: nghttp2_http2_strerror(errorCode)))"
            } else if slot.error == nil {
                c.answered += 1
            }
            slot.active = false
            slot.connection = nil
            c.streams -= 1
            c.engine.finished.append(index)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs) { _, frame, user in
            guard let frame, let user else { return 0 }
            let type = topicstore_frame_type(frame)
            if type == UInt8(NGHTTP2_GOAWAY.rawValue) {
                // No new streams here; the ones the server took finish, the others close refused.
                Unmanaged<Connection>.fromOpaque(user).takeUnretainedValue().goaway = true
            } else if type == UInt8(NGHTTP2_SETTINGS.rawValue) && topicstore_frame_flags(frame) & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 {
                Unmanaged<Connection>.fromOpaque(user).takeUnretainedValue().settled = true
            }
            return 0
        }
        return cbs!
    }
}
