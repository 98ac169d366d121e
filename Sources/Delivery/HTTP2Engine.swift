internal import CCurl
import Foundation

/// Many HTTP/2 requests over few connections: one libcurl multi handle,
/// multiplexed streams (`CURLPIPE_MULTIPLEX`, `PIPEWAIT`), connections kept in
/// the multi handle's cache from one `run` to the next. Not thread-safe: it
/// belongs to the delivery thread.
final class HTTP2Engine {
    /// Request headers as one curl_slist, shared by every request of a batch.
    final class Headers {
        fileprivate let list: UnsafeMutablePointer<curl_slist>?
        init(_ lines: [String]) {
            var l: UnsafeMutablePointer<curl_slist>? = nil
            for line in lines { l = curl_slist_append(l, line) }
            list = l
        }
        deinit { curl_slist_free_all(list) }
    }

    /// A request body shared by many requests (the APNs payload is the same for every device).
    final class SharedBody {
        let pointer: UnsafeMutableRawPointer
        let count: Int
        init(_ bytes: [UInt8]) {
            count = bytes.count
            pointer = UnsafeMutableRawPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            bytes.withUnsafeBytes { if let b = $0.baseAddress { pointer.copyMemory(from: b, byteCount: bytes.count) } }
        }
        deinit { pointer.deallocate() }
    }

    enum Body { case shared(SharedBody), owned([UInt8]) }

    struct Request {
        var url: String
        var headers: Headers
        var body: Body
        /// The caller's index for this request.
        var tag: Int
        var attempt = 0
    }

    struct Response {
        /// 0 when the transfer failed before a response.
        var status: Int
        var body: [UInt8]
        var headerBlock: [UInt8]
        var error: String?

        /// A response header's value (case-insensitive name), last one wins.
        func header(_ name: String) -> String? {
            let text = String(decoding: headerBlock, as: UTF8.self)
            var found: String?
            for line in text.split(whereSeparator: { $0 == "\r" || $0 == "\n" }) {
                guard let colon = line.firstIndex(of: ":") else { continue }
                if line[..<colon].lowercased() == name.lowercased() {
                    found = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
            }
            return found
        }
    }

    /// What to do after a response: nothing more, or try again after `delay` seconds.
    enum Next { case done, retry(Request, delay: Double) }

    private final class Slot {
        let easy: UnsafeMutableRawPointer
        var request: Request?
        var body: [UInt8] = []
        var headerBlock: [UInt8] = []
        var ownedBody: UnsafeMutableRawPointer?
        var ownedCapacity = 0
        init(easy: UnsafeMutableRawPointer) { self.easy = easy }
        deinit { ownedBody?.deallocate() }
    }

    private static let globalInit: Bool = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK }()

    private let multi: UnsafeMutableRawPointer
    private var slots: [Slot] = []
    private var free: [Int] = []
    private let caFile: String?
    private let timeoutMs: Int
    /// Transfers finished since the engine was made.
    private(set) var completed = 0

    init(caFile: String?, connectionsPerHost: Int, maxConcurrentStreams: Int = 1000, timeoutSeconds: Double = 30) {
        _ = Self.globalInit
        multi = curl_multi_init()
        self.caFile = caFile
        self.timeoutMs = Int(timeoutSeconds * 1000)
        _ = topicstore_multi_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = topicstore_multi_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, connectionsPerHost)
        _ = topicstore_multi_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, maxConcurrentStreams)
    }

    deinit {
        for s in slots {
            curl_multi_remove_handle(multi, s.easy)
            curl_easy_cleanup(s.easy)
        }
        curl_multi_cleanup(multi)
    }

    private static let onData: topicstore_curl_data_cb = { data, size, count, user in
        let n = size * count
        guard let user, let data else { return n }
        let slot = Unmanaged<Slot>.fromOpaque(user).takeUnretainedValue()
        slot.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n))
        return n
    }

    private static let onHeader: topicstore_curl_data_cb = { data, size, count, user in
        let n = size * count
        guard let user, let data else { return n }
        let slot = Unmanaged<Slot>.fromOpaque(user).takeUnretainedValue()
        slot.headerBlock.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n))
        return n
    }

    private func makeSlot() -> Int {
        let easy = curl_easy_init()!
        let slot = Slot(easy: easy)
        let me = Unmanaged.passUnretained(slot).toOpaque()
        _ = topicstore_easy_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        _ = topicstore_easy_long(easy, CURLOPT_PIPEWAIT, 1)
        _ = topicstore_easy_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = topicstore_easy_long(easy, CURLOPT_TIMEOUT_MS, timeoutMs)
        _ = topicstore_easy_long(easy, CURLOPT_CONNECTTIMEOUT_MS, 10_000)
        _ = topicstore_easy_callback(easy, CURLOPT_WRITEFUNCTION, Self.onData)
        _ = topicstore_easy_ptr(easy, CURLOPT_WRITEDATA, me)
        _ = topicstore_easy_callback(easy, CURLOPT_HEADERFUNCTION, Self.onHeader)
        _ = topicstore_easy_ptr(easy, CURLOPT_HEADERDATA, me)
        _ = topicstore_easy_ptr(easy, CURLOPT_PRIVATE, UnsafeRawPointer(bitPattern: slots.count + 1))
        if let caFile { _ = caFile.withCString { topicstore_easy_ptr(easy, CURLOPT_CAINFO, $0) } }
        slots.append(slot)
        return slots.count - 1
    }

    private func start(_ request: Request) {
        let index = free.popLast() ?? makeSlot()
        let slot = slots[index]
        slot.request = request
        slot.body.removeAll(keepingCapacity: true)
        slot.headerBlock.removeAll(keepingCapacity: true)
        let easy = slot.easy
        _ = request.url.withCString { topicstore_easy_ptr(easy, CURLOPT_URL, $0) }
        _ = topicstore_easy_ptr(easy, CURLOPT_HTTPHEADER, UnsafeRawPointer(request.headers.list))
        switch request.body {
        case .shared(let b):
            _ = topicstore_easy_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(b.count))
            _ = topicstore_easy_ptr(easy, CURLOPT_POSTFIELDS, b.pointer)
        case .owned(let bytes):
            if slot.ownedCapacity < bytes.count {
                slot.ownedBody?.deallocate()
                slot.ownedCapacity = max(bytes.count, 1024)
                slot.ownedBody = UnsafeMutableRawPointer.allocate(byteCount: slot.ownedCapacity, alignment: 1)
            }
            bytes.withUnsafeBytes { if let b = $0.baseAddress { slot.ownedBody!.copyMemory(from: b, byteCount: bytes.count) } }
            _ = topicstore_easy_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count))
            _ = topicstore_easy_ptr(easy, CURLOPT_POSTFIELDS, slot.ownedBody)
        }
        curl_multi_add_handle(multi, easy)
    }

    /// Runs requests from `next` (nil when there are no more) with at most
    /// `maxInFlight` streams at once. `gate` says how long to wait before the
    /// next new request may start (0: now) — the rate limit. `completion` gets
    /// every response and may ask for a retry after a delay.
    func run(maxInFlight: Int, next: () -> Request?, gate: () -> Double, completion: (Request, Response) -> Next) {
        var inFlight = 0
        var ready: [Request] = []
        var delayed: [(due: Double, request: Request)] = []
        var exhausted = false
        var running: Int32 = 0
        while true {
            let now = Self.seconds()
            if !delayed.isEmpty {
                var keep: [(due: Double, request: Request)] = []
                for d in delayed { if d.due <= now { ready.append(d.request) } else { keep.append(d) } }
                delayed = keep
            }
            var gateWait = 0.0
            while inFlight < maxInFlight {
                var request: Request?
                if let r = ready.popLast() { request = r } else if !exhausted {
                    request = next()
                    if request == nil { exhausted = true }
                }
                guard let r = request else { break }
                let wait = gate()
                if wait > 0 { ready.append(r); gateWait = wait; break }
                start(r)
                inFlight += 1
            }
            if inFlight == 0 && ready.isEmpty && delayed.isEmpty && exhausted { return }

            curl_multi_perform(multi, &running)
            var finished = 0
            var remaining: Int32 = 0
            while let msg = curl_multi_info_read(multi, &remaining) {
                guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
                let result = msg.pointee.data.result
                var privateValue: UnsafeMutableRawPointer?
                _ = topicstore_easy_info_ptr(easy, CURLINFO_PRIVATE, &privateValue)
                let index = Int(bitPattern: privateValue) - 1
                let slot = slots[index]
                var status = 0
                _ = topicstore_easy_info_long(easy, CURLINFO_RESPONSE_CODE, &status)
                curl_multi_remove_handle(multi, easy)
                let error: String? = result == CURLE_OK ? nil : String(cString: curl_easy_strerror(result))
                let response = Response(status: result == CURLE_OK ? status : 0, body: slot.body, headerBlock: slot.headerBlock, error: error)
                let request = slot.request!
                slot.request = nil
                free.append(index)
                inFlight -= 1
                finished += 1
                completed += 1
                switch completion(request, response) {
                case .done: break
                case .retry(let r, let delay): delayed.append((Self.seconds() + delay, r))
                }
            }
            if finished == 0 {
                var timeout = 100.0
                if gateWait > 0 { timeout = min(timeout, gateWait * 1000) }
                if let soonest = delayed.map(\.due).min() { timeout = min(timeout, max(0, (soonest - Self.seconds()) * 1000)) }
                if inFlight > 0 {
                    curl_multi_poll(multi, nil, 0, Int32(max(1, timeout)), nil)
                } else if timeout > 0 {
                    usleep(UInt32(timeout * 1000))
                }
            }
        }
    }

    static func seconds() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// One blocking request outside the multi handle (the OAuth2 token exchange).
    static func fetch(url: String, headers: [String], body: [UInt8], caFile: String?, timeoutSeconds: Double = 30) -> Response {
        _ = globalInit
        let easy = curl_easy_init()!
        defer { curl_easy_cleanup(easy) }
        let slot = Slot(easy: easy)
        let me = Unmanaged.passUnretained(slot).toOpaque()
        let h = Headers(headers)
        _ = url.withCString { topicstore_easy_ptr(easy, CURLOPT_URL, $0) }
        _ = topicstore_easy_ptr(easy, CURLOPT_HTTPHEADER, UnsafeRawPointer(h.list))
        _ = topicstore_easy_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = topicstore_easy_long(easy, CURLOPT_TIMEOUT_MS, Int(timeoutSeconds * 1000))
        _ = topicstore_easy_callback(easy, CURLOPT_WRITEFUNCTION, onData)
        _ = topicstore_easy_ptr(easy, CURLOPT_WRITEDATA, me)
        _ = topicstore_easy_callback(easy, CURLOPT_HEADERFUNCTION, onHeader)
        _ = topicstore_easy_ptr(easy, CURLOPT_HEADERDATA, me)
        if let caFile { _ = caFile.withCString { topicstore_easy_ptr(easy, CURLOPT_CAINFO, $0) } }
        _ = topicstore_easy_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
        _ = topicstore_easy_ptr(easy, CURLOPT_COPYPOSTFIELDS, body)
        let result = curl_easy_perform(easy)
        var status = 0
        _ = topicstore_easy_info_long(easy, CURLINFO_RESPONSE_CODE, &status)
        withExtendedLifetime(h) {}
        return Response(status: result == CURLE_OK ? status : 0, body: slot.body, headerBlock: slot.headerBlock,
                        error: result == CURLE_OK ? nil : String(cString: curl_easy_strerror(result)))
    }
}
