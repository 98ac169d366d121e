internal import CCurl
import Foundation

/// One blocking HTTPS request through libcurl: the OAuth2 token exchange for
/// FCM, a few times an hour — not the push path (that is `HTTP2Engine`).
enum HTTPFetch {
    struct Response {
        /// 0 when the transfer failed before a response.
        var status: Int
        var body: [UInt8]
        var error: String?
        /// The Retry-After header, when the server sent one.
        var retryAfter: String?
    }

    private static let globalInit: Bool = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK }()

    private final class Sink { var body: [UInt8] = []; var retryAfter: String? }

    private static let onData: topicstore_curl_data_cb = { data, size, count, user in
        let n = size * count
        guard let user, let data else { return n }
        Unmanaged<Sink>.fromOpaque(user).takeUnretainedValue().body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n))
        return n
    }

    private static let onHeader: topicstore_curl_data_cb = { data, size, count, user in
        let n = size * count
        guard let user, let data else { return n }
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: n), as: UTF8.self)
        if line.lowercased().hasPrefix("retry-after:") {
            Unmanaged<Sink>.fromOpaque(user).takeUnretainedValue().retryAfter =
                String(line.dropFirst("retry-after:".count)).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return n
    }

    /// POSTs `body`; `abort` is asked every 0.1 s while the transfer runs, and true ends it at
    /// once (status 0, "aborted") — a stopping server does not wait out the timeout.
    static func post(url: String, headers: [String], body: [UInt8], caFile: String?, timeoutSeconds: Double = 30,
                     abort: () -> Bool = { false }) -> Response {
        _ = globalInit
        guard let easy = curl_easy_init() else { return Response(status: 0, body: [], error: "curl_easy_init failed") }
        defer { curl_easy_cleanup(easy) }
        let sink = Sink()
        var list: UnsafeMutablePointer<curl_slist>?
        for h in headers { list = curl_slist_append(list, h) }
        defer { curl_slist_free_all(list) }
        _ = url.withCString { topicstore_easy_ptr(easy, CURLOPT_URL, $0) }
        _ = topicstore_easy_ptr(easy, CURLOPT_HTTPHEADER, UnsafeRawPointer(list))
        _ = topicstore_easy_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = topicstore_easy_long(easy, CURLOPT_TIMEOUT_MS, Int(timeoutSeconds * 1000))
        _ = topicstore_easy_callback(easy, CURLOPT_WRITEFUNCTION, onData)
        _ = topicstore_easy_ptr(easy, CURLOPT_WRITEDATA, Unmanaged.passUnretained(sink).toOpaque())
        _ = topicstore_easy_callback(easy, CURLOPT_HEADERFUNCTION, onHeader)
        _ = topicstore_easy_ptr(easy, CURLOPT_HEADERDATA, Unmanaged.passUnretained(sink).toOpaque())
        if let caFile { _ = caFile.withCString { topicstore_easy_ptr(easy, CURLOPT_CAINFO, $0) } }
        _ = topicstore_easy_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
        _ = topicstore_easy_ptr(easy, CURLOPT_COPYPOSTFIELDS, body)
        // The multi interface, one handle: the same transfer as curl_easy_perform, in steps that can be abandoned.
        guard let multi = curl_multi_init() else { return Response(status: 0, body: [], error: "curl_multi_init failed") }
        defer { curl_multi_cleanup(multi) }
        curl_multi_add_handle(multi, easy)
        defer { curl_multi_remove_handle(multi, easy) }
        var result = CURLE_OK
        var running: Int32 = 1
        transfer: while true {
            if curl_multi_perform(multi, &running) != CURLM_OK { result = CURLE_FAILED_INIT; break }
            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi, &queued) {
                if message.pointee.msg == CURLMSG_DONE { result = message.pointee.data.result; break transfer }
            }
            if running == 0 { break }
            if abort() { return Response(status: 0, body: [], error: "aborted: the server is stopping") }
            _ = curl_multi_poll(multi, nil, 0, 100, nil)
        }
        var status = 0
        _ = topicstore_easy_info_long(easy, CURLINFO_RESPONSE_CODE, &status)
        return Response(status: result == CURLE_OK ? status : 0, body: sink.body,
                        error: result == CURLE_OK ? nil : String(cString: curl_easy_strerror(result)), retryAfter: sink.retryAfter)
    }
}
