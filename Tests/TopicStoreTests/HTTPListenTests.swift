import Foundation
import HTTPServer
import Testing

/// One server per address: a second one on a port in use must refuse to start,
/// never share the port and split the traffic (SO_REUSEPORT).
@Suite("HTTP listening")
struct HTTPListenTests {
    static func ok(_ text: String) -> HTTPServer.Handler {
        { _ in HTTPResponse(status: 200, headers: ["Content-Type": "text/plain"], body: Array(text.utf8)) }
    }

    @Test(arguments: [HTTPServer.Threading.threadPerConnection, .threadPool(2)])
    func aSecondServerOnABusyPortFails(threading: HTTPServer.Threading) throws {
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threading = threading
        let first = try HTTPServer(configuration: configuration, handler: Self.ok("first"))
        defer { first.shutdown(drainTimeout: 0) }
        configuration.port = first.port
        var second: HTTPServer?
        let error = #expect(throws: HTTPServerError.self) {
            second = try HTTPServer(configuration: configuration, handler: Self.ok("second"))
        }
        second?.shutdown(drainTimeout: 0)
        #expect(error?.description == "cannot listen on 127.0.0.1:\(first.port): Address already in use", "\(String(describing: error))")
        // The first server still gets every request.
        for _ in 0..<8 {
            #expect(try RawHTTPClient(port: first.port).request("GET", "/").text == "first")
        }
    }

    /// Every header and query argument reaches the handler, in order, repeated ones each
    /// time and more than the room made for them at first (16), names and values as sent.
    @Test func headersAndQueryArgumentsReachTheHandlerAsSent() throws {
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        let server = try HTTPServer(configuration: configuration, handler: { request in
            var lines = request.headers.map { "\($0.name)=\($0.value)" }
            lines += request.query.map { "?\($0.name)=\($0.value)" }
            lines.append("X-Rep: " + request.headers.values("X-Rep").joined(separator: "|"))
            return HTTPResponse(status: 200, headers: ["Content-Type": "text/plain"], body: Array(lines.joined(separator: "\n").utf8))
        })
        defer { server.shutdown(drainTimeout: 0) }
        var headers = (0..<20).map { ("X-H\($0)", "v\($0) é") }
        headers.insert(("X-Rep", "a"), at: 3)
        headers.append(("x-rep", "b"))
        headers.append(("X-Empty", ""))
        let text = try RawHTTPClient(port: server.port).request("GET", "/p?a=1&b=%20two&a=3&flag", headers: headers).text
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let sent = lines.filter { $0.hasPrefix("X-") || $0.hasPrefix("x-") }.filter { !$0.hasPrefix("X-Rep: ") }
        #expect(sent == headers.map { "\($0.0)=\($0.1)" }, "\(text)")
        #expect(lines.filter { $0.hasPrefix("?") } == ["?a=1", "?b= two", "?a=3", "?flag="], "\(text)")
        #expect(lines.last == "X-Rep: a|b")
    }

    /// Shutdown stops the listening socket while the pool's threads are busy with requests.
    /// On libmicrohttpd's epoll loop that races the workers, and losing the race aborted
    /// the process ("Failed to remove listen FD from epoll set"). Stopped again and again
    /// under load, the server stops cleanly and refuses new connections.
    @Test func aThreadPoolServerStopsCleanlyUnderLoad() throws {
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threading = .threadPool(4)
        for _ in 0..<150 {
            let server = try HTTPServer(configuration: configuration, handler: Self.ok("up"))
            let port = server.port
            let group = DispatchGroup()
            for _ in 0..<6 {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    // New connections and keep-alive requests until the server is gone.
                    for _ in 0..<200 {
                        guard let client = try? RawHTTPClient(port: port) else { return }
                        for _ in 0..<5 { guard (try? client.request("GET", "/")) != nil else { break } }
                    }
                }
            }
            usleep(UInt32.random(in: 1_000...20_000))
            server.shutdown(drainTimeout: 0)
            #expect(throws: (any Error).self) { _ = try RawHTTPClient(port: port).request("GET", "/") }
            #expect(group.wait(timeout: .now() + 20) == .success)
        }
    }

    @Test func aSecondServeOnABusyPortExitsWithAnError() throws {
        let dir = TemporaryDirectory("listen")
        let first = try ServeProcess(data: dir.sub("a"))
        let second = try runWithDeadline(["serve", "--data", dir.sub("b"), "--listen", "127.0.0.1:\(first.port)", "--quiet"])
        #expect(second.status == 1, "\(second)")
        #expect(second.stderr.contains("cannot listen on 127.0.0.1:\(first.port): Address already in use"), "\(second.stderr)")
        #expect(!second.stdout.contains("listening on"), "\(second.stdout)")
        #expect(try RawHTTPClient(port: first.port).request("GET", "/healthz").status == 200)
        first.signal(SIGTERM)
        #expect(first.wait() == 0)
    }
}
