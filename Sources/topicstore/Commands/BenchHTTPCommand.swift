import Foundation
import Replay

/// `topicstore bench-http`: closed-loop load on a running server over
/// keep-alive connections, driven by one poll loop: durable registers
/// (`/api/register`), or with `--count` a send service's audience counts
/// (`/v1/audience/count`).
enum BenchHTTPCommand: Command {
    static let spec = CommandSpec(
        name: "bench-http",
        summary: "load a running server's /api/register (or /v1/audience/count) over keep-alive connections; report requests/s and latency",
        usage: "bench-http --key KEY [--count QUERY] [--listen HOST:PORT] [--connections N] [--seconds S] [--json]",
        options: [
            .init(name: "key", value: "KEY", help: "a client (or server) key of the server's project; a server key with --count"),
            .init(name: "count", value: "QUERY", help: "ask GET /v1/audience/count?QUERY instead (e.g. topics=news,sport), or POST it a JSON body ({\"topics\":[…]})"),
            .init(name: "listen", value: "HOST:PORT", help: "where the server listens (default 127.0.0.1:8080)"),
            .init(name: "connections", value: "N", help: "keep-alive connections, each with one request at a time (default 64)"),
            .init(name: "seconds", value: "S", help: "how long to run (default 10)"),
        ],
        details: """
        Each connection sends one register at a time (a new device_id, topics "all" and one of 50 others)
        and waits for its answer: every answer means a durable commit. Start a server first, e.g.
          topicstore serve --data /tmp/load --listen 127.0.0.1:18080
          topicstore bench-http --listen 127.0.0.1:18080 --key tsc_…
        With --count, each connection asks the same audience count over and over, as a send
        service resolving audiences does: a query (as given, already URL-encoded) with GET, or a
        JSON object (a QUERY that begins with '{') with POST:
          topicstore bench-http --listen 127.0.0.1:18080 --key tss_… --count 'topics=user.1,user.2'
          topicstore bench-http --listen 127.0.0.1:18080 --key tss_… --count '{"topics":["user.1","user.2"]}'
        Every answer must be a 200; any other is counted as an error (exit 1).
        """)

    static func run(_ arguments: Arguments) throws -> ExitCode {
        guard let key = arguments.value("key") else { throw UsageError(description: "--key is required") }
        let listen = arguments.value("listen") ?? "127.0.0.1:8080"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw UsageError(description: "--listen must be HOST:PORT, not '\(listen)'")
        }
        let host = String(listen[..<colon])
        let connections = try arguments.integer("connections") ?? 64
        let seconds = Double(try arguments.integer("seconds") ?? 10)
        guard connections > 0, seconds > 0 else { throw UsageError(description: "--connections and --seconds must be positive") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw UsageError(description: "'\(host)' is not an IPv4 address") }

        let request: LoadLoop.Request
        if let query = arguments.value("count") {
            guard query.hasPrefix("{") || (!query.isEmpty && query.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })) else {
                throw UsageError(description: "--count takes a URL-encoded query (no spaces), e.g. topics=news,sport, or a JSON object")
            }
            request = .count(query: query)
        } else {
            request = .register
        }
        let result = try LoadLoop(address: address, key: key, connections: connections, request: request).run(seconds: seconds)
        let sorted = result.latencies.sorted()
        guard !sorted.isEmpty else {
            Console.printError("no request was answered: is a server listening on \(listen)?")
            return .failure
        }
        let rate = Double(sorted.count) / result.seconds
        let p50 = sorted[sorted.count / 2], p99 = sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
        if arguments.json {
            Console.printJSON(["requests": sorted.count, "seconds": result.seconds, "requestsPerSecond": rate,
                               "p50Milliseconds": p50, "p99Milliseconds": p99, "errors": result.errors, "connections": connections,
                               "clientCPUSeconds": result.cpuSeconds])
        } else {
            print(String(format: "%d requests in %.1f s over %d connections: %.0f requests/s, p50 %.2f ms, p99 %.2f ms, %d errors (load generator: %.2f CPU-s)",
                         sorted.count, result.seconds, connections, rate, p50, p99, result.errors, result.cpuSeconds))
        }
        return result.errors == 0 ? .success : .failure
    }
}

/// The load generator: one thread, non-blocking sockets and poll, so that the
/// client takes as little of the machine's CPU as it can (the server runs on
/// the same two cores). Each connection sends one request, waits for the whole
/// answer, then sends the next.
final class LoadLoop {
    /// What each connection asks.
    enum Request {
        /// A register of a new device (a durable commit per answer).
        case register
        /// `GET /v1/audience/count?query`, or with a JSON object `POST` of it, the same each time.
        case count(query: String)
    }

    struct Result {
        var latencies: [Double] = []
        var errors = 0
        var cpuSeconds = 0.0
        /// From the first request to the last answer (the requests in flight at the deadline are waited for).
        var seconds = 0.0
    }

    private final class Connection {
        let fd: Int32
        let tag: [UInt8]
        var counter = 0
        var started: UInt64 = 0
        var waiting = false
        var received: [UInt8] = []
        var pending: [UInt8] = []
        init(fd: Int32, tag: [UInt8]) { self.fd = fd; self.tag = tag }
    }

    private let address: sockaddr_in
    private let request: Request
    /// A register's head up to its Content-Length value, or a count's whole request.
    private let head: [UInt8]
    private let connectionCount: Int

    init(address: sockaddr_in, key: String, connections: Int, request: Request = .register) {
        self.address = address
        self.request = request
        switch request {
        case .register:
            head = Array("POST /api/register HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-MPush-Token: \(key)\r\nContent-Length: ".utf8)
        case .count(let query) where query.hasPrefix("{"):
            head = Array("POST /v1/audience/count HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-MPush-Token: \(key)\r\nContent-Length: \(query.utf8.count)\r\n\r\n\(query)".utf8)
        case .count(let query):
            head = Array("GET /v1/audience/count?\(query) HTTP/1.1\r\nHost: bench\r\nX-MPush-Token: \(key)\r\n\r\n".utf8)
        }
        self.connectionCount = connections
    }

    func run(seconds: Double) throws -> Result {
        let run = Array(UUID().uuidString.prefix(8).utf8)
        var connections: [Connection] = []
        defer { for c in connections { close(c.fd) } }
        var polled: [pollfd] = []
        for i in 0..<connectionCount {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw LoadError("socket: \(String(cString: strerror(errno)))") }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            var target = address
            let connected = withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(fd)
                throw LoadError("cannot connect: \(String(cString: strerror(errno)))")
            }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            connections.append(Connection(fd: fd, tag: run + Array("-\(i)-".utf8)))
            polled.append(pollfd(fd: fd, events: Int16(POLLIN), revents: 0))
        }
        let cpuStart = ProcessCPUTime.now().total
        var result = Result()
        result.latencies.reserveCapacity(Int(seconds * 30_000))
        for (i, c) in connections.enumerated() where !send(c, &polled[i]) { result.errors += 1 }
        let begin = DispatchTime.now().uptimeNanoseconds
        let deadline = begin + UInt64(seconds * 1e9)
        // Answers still due at the deadline are waited for, up to this much longer.
        let drainDeadline = deadline + 30_000_000_000
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var open = connectionCount
        while open > 0 {
            let now = DispatchTime.now().uptimeNanoseconds
            if now >= deadline && !connections.contains(where: \.waiting) { break }
            if now >= drainDeadline {
                result.errors += connections.filter(\.waiting).count
                break
            }
            let n = poll(&polled, nfds_t(polled.count), 100)
            if n < 0 { if errno == EINTR { continue }; throw LoadError("poll: \(String(cString: strerror(errno)))") }
            guard n > 0 else { continue }
            for i in polled.indices where polled[i].revents != 0 {
                let c = connections[i]
                let revents = Int32(polled[i].revents)
                polled[i].revents = 0
                if revents & Int32(POLLOUT) != 0 { _ = flush(c, &polled[i]) }
                guard revents & Int32(POLLIN | POLLHUP | POLLERR) != 0 else { continue }
                var closed = false
                while true {
                    let got = recv(c.fd, &buffer, buffer.count, 0)
                    if got > 0 { c.received.append(contentsOf: buffer[0..<got]); continue }
                    if got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                    if got < 0 && errno == EINTR { continue }
                    closed = true
                    break
                }
                if closed {
                    // The server closed or reset it: this connection stops.
                    result.errors += 1
                    c.waiting = false
                    polled[i].fd = -1
                    open -= 1
                    continue
                }
                guard let (ok, length) = Self.completeResponse(c.received) else { continue }
                let end = DispatchTime.now().uptimeNanoseconds
                result.latencies.append(Double(end - c.started) / 1e6)
                c.waiting = false
                if !ok { result.errors += 1 }
                c.received.removeFirst(length)
                c.counter += 1
                if end < deadline, !send(c, &polled[i]) { result.errors += 1 }
            }
        }
        result.cpuSeconds = ProcessCPUTime.now().total - cpuStart
        result.seconds = Double(DispatchTime.now().uptimeNanoseconds - begin) / 1e9
        return result
    }

    /// Queues the next request on `c`, starts its clock and writes what the socket takes.
    private func send(_ c: Connection, _ entry: inout pollfd) -> Bool {
        switch request {
        case .register:
            var body: [UInt8] = Array(#"{"device_id":"load-"#.utf8)
            body += c.tag
            body += Array(String(c.counter).utf8)
            body += Array(#"","topics":["all","t"#.utf8)
            body += Array(String(c.counter % 50).utf8)
            body += Array(#""]}"#.utf8)
            c.pending = head + Array(String(body.count).utf8) + [0x0D, 0x0A, 0x0D, 0x0A] + body
        case .count:
            c.pending = head
        }
        c.started = DispatchTime.now().uptimeNanoseconds
        c.waiting = true
        return flush(c, &entry)
    }

    /// Writes what is pending; polls for writability while the socket is full.
    private func flush(_ c: Connection, _ entry: inout pollfd) -> Bool {
        while !c.pending.isEmpty {
            let n = c.pending.withUnsafeBytes { Foundation.send(c.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 { c.pending.removeFirst(n); continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                entry.events = Int16(POLLIN | POLLOUT)
                return true
            }
            return false
        }
        entry.events = Int16(POLLIN)
        return true
    }

    /// nil while the response is incomplete; otherwise whether it was a 200 and its length in bytes.
    static func completeResponse(_ bytes: [UInt8]) -> (Bool, Int)? {
        guard bytes.count >= 16 else { return nil }
        var headEnd = -1
        var i = 3
        while i < bytes.count {
            if bytes[i] == 0x0A && bytes[i - 1] == 0x0D && bytes[i - 2] == 0x0A && bytes[i - 3] == 0x0D { headEnd = i + 1; break }
            i += 1
        }
        guard headEnd > 0 else { return nil }
        let head = String(decoding: bytes[0..<headEnd], as: UTF8.self).lowercased()
        var length = 0
        for line in head.split(separator: "\r\n") where line.hasPrefix("content-length:") {
            length = Int(line.dropFirst("content-length:".count).filter { $0 != " " && $0 != "\t" }) ?? 0
        }
        guard bytes.count >= headEnd + length else { return nil }
        return (head.hasPrefix("http/1.1 200"), headEnd + length)
    }
}

/// A load run that could not go on (the message says why).
struct LoadError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
