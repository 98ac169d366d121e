import Foundation

/// `topicstore bench-http`: closed-loop load on a running server's
/// `/api/register`, from keep-alive connections on their own threads.
enum BenchHTTPCommand: Command {
    static let spec = CommandSpec(
        name: "bench-http",
        summary: "load a running server's /api/register over keep-alive connections; report requests/s and latency",
        usage: "bench-http --key CLIENT_KEY [--listen HOST:PORT] [--connections N] [--seconds S] [--json]",
        options: [
            .init(name: "key", value: "KEY", help: "a client (or server) key of the server's project"),
            .init(name: "listen", value: "HOST:PORT", help: "where the server listens (default 127.0.0.1:8080)"),
            .init(name: "connections", value: "N", help: "keep-alive connections, one thread each (default 64)"),
            .init(name: "seconds", value: "S", help: "how long to run (default 10)"),
        ],
        details: """
        Each connection sends one register at a time (a new device_id, topics "all" and one of 50 others)
        and waits for its answer: every answer means a durable commit. Start a server first, e.g.
          topicstore serve --data /tmp/load --listen 127.0.0.1:18080
          topicstore bench-http --listen 127.0.0.1:18080 --key tsc_…
        """)

    final class Tally: @unchecked Sendable {
        let lock = NSLock()
        var latencies: [Double] = []
        var errors = 0
        func add(_ l: [Double], _ e: Int) { lock.lock(); latencies += l; errors += e; lock.unlock() }
    }

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

        let tally = Tally()
        let group = DispatchGroup()
        let deadline = Date().addingTimeInterval(seconds)
        let run = UUID().uuidString.prefix(8)
        for c in 0..<connections {
            group.enter()
            let target = address
            Thread.detachNewThread {
                defer { group.leave() }
                let (latencies, errors) = Self.connection(target, key: key, tag: "\(run)-\(c)", until: deadline)
                tally.add(latencies, errors)
            }
        }
        group.wait()
        let sorted = tally.latencies.sorted()
        guard !sorted.isEmpty else {
            Console.printError("no request was answered: is a server listening on \(listen)?")
            return .failure
        }
        let rate = Double(sorted.count) / seconds
        let p50 = sorted[sorted.count / 2], p99 = sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
        if arguments.json {
            Console.printJSON(["requests": sorted.count, "seconds": seconds, "requestsPerSecond": rate,
                               "p50Milliseconds": p50, "p99Milliseconds": p99, "errors": tally.errors, "connections": connections])
        } else {
            print(String(format: "%d requests in %.0f s over %d connections: %.0f requests/s, p50 %.2f ms, p99 %.2f ms, %d errors",
                         sorted.count, seconds, connections, rate, p50, p99, tally.errors))
        }
        return tally.errors == 0 ? .success : .failure
    }

    /// One keep-alive connection sending registers until `deadline`.
    static func connection(_ address: sockaddr_in, key: String, tag: String, until deadline: Date) -> ([Double], Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return ([], 1) }
        defer { close(fd) }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var target = address
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return ([], 1) }
        var latencies: [Double] = []
        var errors = 0
        var buffer = [UInt8](repeating: 0, count: 4096)
        var i = 0
        while Date() < deadline {
            let body = #"{"device_id":"load-\#(tag)-\#(i)","topics":["all","t\#(i % 50)"]}"#
            let request = "POST /api/register HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-MPush-Token: \(key)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
            let start = DispatchTime.now().uptimeNanoseconds
            let bytes = Array(request.utf8)
            guard bytes.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == bytes.count else { return (latencies, errors + 1) }
            // Read one response: headers, then Content-Length bytes of body.
            var received: [UInt8] = []
            while true {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { return (latencies, errors + 1) }
                received += buffer[0..<n]
                if let complete = Self.completeResponse(received) {
                    if !complete { errors += 1 }
                    break
                }
            }
            latencies.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
            i += 1
        }
        return (latencies, errors)
    }

    /// nil while the response is incomplete; otherwise whether it was a 200.
    static func completeResponse(_ bytes: [UInt8]) -> Bool? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return nil }
        let head = text[..<end.lowerBound].lowercased()
        var length = 0
        for line in head.split(separator: "\r\n") where line.hasPrefix("content-length:") {
            length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        guard text.utf8.count - text.utf8.distance(from: text.startIndex, to: end.upperBound) >= length else { return nil }
        return head.hasPrefix("http/1.1 200")
    }
}
