import AccessControl
import Foundation
import MPushAPI
import Testing
import TopicStore

/// A fresh directory per test, removed when released.
final class HTTPTestDirectory: @unchecked Sendable {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "topicstore-http-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A response as it came off the wire.
struct RawResponse: Sendable {
    var status: Int
    var headers: [(String, String)]
    var body: [UInt8]

    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    var text: String { String(decoding: body, as: UTF8.self) }
    /// The body as a JSON object, or nil when it is not one.
    var object: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
    }
    var message: String? { object?["message"] as? String }
    var errorFields: [String: [String]]? { object?["errors"] as? [String: [String]] }
}

struct RawHTTPError: Error, CustomStringConvertible {
    var description: String
}

/// A minimal HTTP/1.1 client over a plain socket: it sends exactly the bytes
/// asked for (header case, duplicates, broken bodies), and keeps the connection.
final class RawHTTPClient {
    private var fd: Int32 = -1
    private var buffer: [UInt8] = []
    let port: UInt16

    init(port: UInt16) throws {
        self.port = port
        try connect()
    }

    deinit { if fd >= 0 { close(fd) } }

    private func connect() throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw RawHTTPError(description: "socket failed") }
        var tv = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            close(fd)
            fd = -1
            throw RawHTTPError(description: "connect to port \(port) failed: errno \(errno)")
        }
    }

    func send(raw bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw RawHTTPError(description: "send failed: errno \(errno)") }
            offset += n
        }
    }

    /// Sends a request; `Content-Length` is added unless `headers` has it or `contentLength` is false.
    func request(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [],
                 contentLength: Bool = true) throws -> RawResponse {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if contentLength && !headers.contains(where: { $0.0.lowercased() == "content-length" }) && (method != "GET" || !body.isEmpty) {
            head += "Content-Length: \(body.count)\r\n"
        }
        head += "\r\n"
        try send(raw: Array(head.utf8) + body)
        return try readResponse()
    }

    func request(_ method: String, _ path: String, headers: [(String, String)] = [], text: String) throws -> RawResponse {
        try request(method, path, headers: headers, body: Array(text.utf8))
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { throw RawHTTPError(description: n == 0 ? "connection closed" : "recv failed: errno \(errno)") }
        buffer.append(contentsOf: chunk[0..<n])
    }

    func readResponse() throws -> RawResponse {
        let separator: [UInt8] = [13, 10, 13, 10]
        var headEnd: Int?
        while headEnd == nil {
            if buffer.count >= 4 {
                for i in 0...(buffer.count - 4) where Array(buffer[i..<i + 4]) == separator { headEnd = i; break }
            }
            if headEnd == nil { try fill() }
        }
        let head = String(decoding: buffer[0..<headEnd!], as: UTF8.self)
        buffer.removeFirst(headEnd! + 4)
        let lines = head.components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw RawHTTPError(description: "bad status line \(lines[0])") }
        var headers: [(String, String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let length = headers.first { $0.0.lowercased() == "content-length" }.flatMap { Int($0.1) } ?? 0
        while buffer.count < length { try fill() }
        let body = Array(buffer[0..<length])
        buffer.removeFirst(length)
        return RawResponse(status: status, headers: headers, body: body)
    }
}

/// A store, its access tables and an MPush server on an ephemeral loopback port.
final class HTTPTestServer: @unchecked Sendable {
    let directory = HTTPTestDirectory()
    let store: TopicStore
    let access: AccessControl
    let server: MPushServer
    let clientKey: String
    let serverKey: String
    private let logLock = NSLock()
    private var logLines: [String] = []

    init(configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
        var options = TopicStore.Options()
        options.cachesRecipients = true  // as `topicstore serve` runs
        store = try TopicStore(directory: directory.path, options: options)
        access = try AccessControl(store: store)
        guard let demo = try access.bootstrap(project: "demo") else { throw RawHTTPError(description: "bootstrap did nothing") }
        clientKey = demo.client
        serverKey = demo.server
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory.path
        configure(&configuration)
        let box = LogBox()
        server = try MPushServer(store: store, access: access, configuration: configuration, log: { box.append($0) })
        logBox = box
    }
    private let logBox: LogBox

    var accessLog: [String] { logBox.lines }
    var port: UInt16 { server.port }

    func client() throws -> RawHTTPClient { try RawHTTPClient(port: server.port) }

    /// One request on a fresh connection.
    func send(_ method: String, _ path: String, key: String? = nil, headers: [(String, String)] = [],
              json: String? = nil, form: String? = nil) throws -> RawResponse {
        var h = headers
        if let key { h.append(("X-MPush-Token", key)) }
        var body: [UInt8] = []
        if let json { h.append(("Content-Type", "application/json")); body = Array(json.utf8) }
        if let form { h.append(("Content-Type", "application/x-www-form-urlencoded")); body = Array(form.utf8) }
        return try client().request(method, path, headers: h, body: body)
    }

    /// Reads one device of project `project` straight from the store.
    func device(_ deviceID: String, project: String = "demo") throws -> (token: String?, platform: String?, topics: [String], state: String)? {
        let reader = store.reader
        return try store.read { txn in
            guard let p = try reader.project(named: project, txn),
                  let d = try reader.device(p.id, deviceID: deviceID, txn) else { return nil }
            return (d.record.token, d.record.platform.map { "\($0)" }, d.topics.sorted(), d.record.state.rawValue)
        }
    }

    func stop() {
        server.shutdown()
        store.close()
    }

    deinit { stop() }
}

final class LogBox: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [String] = []
    func append(_ s: String) { lock.lock(); storage.append(s); lock.unlock() }
    var lines: [String] { lock.lock(); defer { lock.unlock() }; return storage }
}

/// The `topicstore` binary built next to the test bundle.
enum TopicstoreBinary {
    static var path: String? {
        if let p = ProcessInfo.processInfo.environment["TOPICSTORE_BINARY"] { return p }
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        candidates += Bundle.allBundles.map { $0.bundleURL.deletingLastPathComponent() }
        for dir in candidates {
            let p = dir.appendingPathComponent("topicstore").path
            if FileManager.default.isExecutableFile(atPath: p) { return p }
        }
        return nil
    }
}

/// `topicstore serve` as a child process on an ephemeral port.
final class ServeProcess: @unchecked Sendable {
    let process = Process()
    let port: UInt16
    let clientKey: String?
    let serverKey: String?
    private let stdoutPipe = Pipe()
    private let stderrPipe = Pipe()

    init(data: String, extra: [String] = []) throws {
        guard let binary = TopicstoreBinary.path else { throw RawHTTPError(description: "the topicstore binary was not found next to the tests") }
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve", "--data", data, "--listen", "127.0.0.1:0", "--quiet"] + extra
        process.standardOutput = stdoutPipe
        process.standardError = stderrPipe
        try process.run()
        var text = ""
        let handle = stdoutPipe.fileHandleForReading
        let deadline = Date().addingTimeInterval(20)
        while !text.contains("listening on") || !text.hasSuffix("\n") {
            let chunk = handle.availableData
            if chunk.isEmpty {
                let stderr = String(decoding: stderrPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                throw RawHTTPError(description: "serve exited before listening: \(text) \(stderr)")
            }
            text += String(decoding: chunk, as: UTF8.self)
            if Date() > deadline { throw RawHTTPError(description: "serve did not start: \(text)") }
        }
        func after(_ marker: String) -> String? {
            text.components(separatedBy: "\n").first { $0.contains(marker) }?.split(separator: " ").last.map(String.init)
        }
        guard let p = after("listening on")?.split(separator: ":").last.flatMap({ UInt16($0) }) else {
            throw RawHTTPError(description: "no port in: \(text)")
        }
        port = p
        clientKey = after("client key")
        serverKey = after("server key")
    }

    func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits for exit; returns the status.
    func wait(timeout: Double = 20) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
    }
}

/// Runs the `topicstore` binary to the end and returns (status, stdout).
func runTopicstore(_ arguments: [String]) throws -> (Int32, String) {
    guard let binary = TopicstoreBinary.path else { throw RawHTTPError(description: "the topicstore binary was not found next to the tests") }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: binary)
    p.arguments = arguments
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle.nullDevice
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// The `topicstore` binary run to its end, or killed after `seconds` (a server
/// that should have refused to start would otherwise run for ever).
func runWithDeadline(_ arguments: [String], seconds: Double = 30) throws -> (status: Int32?, stdout: String, stderr: String) {
    guard let binary = TopicstoreBinary.path else { throw RawHTTPError(description: "the topicstore binary was not found next to the tests") }
    let dir = TemporaryDirectory("run")
    let process = Process()
    process.executableURL = URL(fileURLWithPath: binary)
    process.arguments = arguments
    // Files, not pipes: nothing to drain while waiting.
    _ = FileManager.default.createFile(atPath: dir.sub("out"), contents: nil)
    _ = FileManager.default.createFile(atPath: dir.sub("err"), contents: nil)
    let out = try FileHandle(forWritingTo: URL(fileURLWithPath: dir.sub("out")))
    let err = try FileHandle(forWritingTo: URL(fileURLWithPath: dir.sub("err")))
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(20_000) }
    let finished = !process.isRunning
    if !finished { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
    try out.close()
    try err.close()
    let stdout = (try? String(contentsOfFile: dir.sub("out"), encoding: .utf8)) ?? ""
    let stderr = (try? String(contentsOfFile: dir.sub("err"), encoding: .utf8)) ?? ""
    return (finished ? process.terminationStatus : nil, stdout, stderr)
}
