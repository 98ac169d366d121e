import Delivery
import Foundation
import Notifications
import Testing

/// The Python fake APNs/FCM server (Tests/Fakes/fake_push.py) with a test CA made by openssl at test time.
final class FakePushServer: @unchecked Sendable {
    let directory: String
    let port: UInt16
    let process = Process()
    private let stdinPipe = Pipe()
    var url: String { "https://127.0.0.1:\(port)" }
    var caFile: String { directory + "/ca.pem" }
    var apnsKeyFile: String { directory + "/apns.p8" }
    var logFile: String { directory + "/requests.jsonl" }
    var serviceAccountFile: String { directory + "/service-account.json" }

    static var fakesDirectory: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fakes").path
    }

    /// `extraArguments`: more fake_push.py options (`--max-streams N`, `--goaway-after N`).
    init(delayMs: Double = 0, log: Bool = true, extraArguments: [String] = []) throws {
        directory = NSTemporaryDirectory() + "topicstore-fake-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let pki = Process()
        pki.executableURL = URL(fileURLWithPath: "/bin/bash")
        pki.arguments = [Self.fakesDirectory + "/make_test_pki.sh", directory]
        try pki.run()
        pki.waitUntilExit()
        guard pki.terminationStatus == 0 else { throw RawHTTPError(description: "make_test_pki.sh failed") }
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        var args = ["python3", Self.fakesDirectory + "/fake_push.py", "--cert", directory + "/server.pem", "--key", directory + "/server.key",
                    "--apns-public", directory + "/apns_pub.pem", "--fcm-public", directory + "/fcm_pub.pem", "--delay-ms", String(delayMs)]
        args += log ? ["--log", directory + "/requests.jsonl"] : ["--no-log"]
        args += extraArguments
        process.arguments = args
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = stdinPipe
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        var text = ""
        let deadline = Date().addingTimeInterval(20)
        while !text.contains("\n") {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { throw RawHTTPError(description: "the fake push server exited (is python3 with h2 and cryptography installed?)") }
            text += String(decoding: chunk, as: UTF8.self)
            if Date() > deadline { throw RawHTTPError(description: "the fake push server did not start") }
        }
        guard let p = text.split(separator: " ").last.flatMap({ UInt16($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            throw RawHTTPError(description: "no port from the fake: \(text)")
        }
        port = p
        let account: [String: Any] = ["type": "service_account", "project_id": "fake-project", "private_key_id": "k1",
                                      "private_key": try String(contentsOfFile: directory + "/fcm.key", encoding: .utf8),
                                      "client_email": "sender@fake-project.iam.gserviceaccount.com", "token_uri": url + "/token"]
        try JSONSerialization.data(withJSONObject: account).write(to: URL(fileURLWithPath: serviceAccountFile))
    }

    /// Every request the fake saw: path, status, headers, body.
    func requests() -> [(path: String, status: Int, headers: [String: String], body: String, response: String)] {
        // Read a copy with read(2): the fake appends to this file while we look, and a
        // memory-mapped read of a file that grows can fault.
        guard let handle = FileHandle(forReadingAtPath: logFile) else { return [] }
        defer { try? handle.close() }
        let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        return text.split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return (o["path"] as? String ?? "", o["status"] as? Int ?? 0, o["headers"] as? [String: String] ?? [:], o["body"] as? String ?? "", o["response"] as? String ?? "")
        }
    }

    /// When the fake answered each request (seconds since 1970), in the order it answered them.
    func requestTimes() -> [(path: String, t: Double)] {
        guard let handle = FileHandle(forReadingAtPath: logFile) else { return [] }
        defer { try? handle.close() }
        let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        return text.split(separator: "\n").compactMap { line in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let path = o["path"] as? String, let t = o["t"] as? Double else { return nil }
            return (path, t)
        }
    }

    func deliveryConfiguration() -> DeliveryConfiguration {
        var c = DeliveryConfiguration()
        c.apnsProductionURL = url
        c.apnsSandboxURL = url
        c.fcmURL = url
        c.caFile = caFile
        c.retryBaseSeconds = 0.05
        return c
    }

    func credentials() throws -> (APNsCredentials, FCMCredentials) {
        (APNsCredentials(keyPEM: try String(contentsOfFile: apnsKeyFile, encoding: .utf8), keyID: "ABC123DEFG", teamID: "TEAM123456",
                         bundleID: "com.example.app", sandbox: true),
         try FCMCredentials(serviceAccountJSON: try Data(contentsOf: URL(fileURLWithPath: serviceAccountFile))))
    }

    func stop() {
        try? stdinPipe.fileHandleForWriting.close()
        if process.isRunning { process.terminate(); process.waitUntilExit() }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Polls `GET /api/notifications/{id}` until it says completed.
func waitForCompletion(port: UInt16, key: String, id: String, timeout: Double = 60) throws -> [String: Any] {
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        let r = try RawHTTPClient(port: port).request("GET", "/api/notifications/\(id)", headers: [("X-MPush-Token", key)])
        guard r.status == 200, let o = r.object else { throw RawHTTPError(description: "status \(r.status): \(r.text)") }
        if o["status"] as? String == "completed" { return o }
        if Date() > deadline { throw RawHTTPError(description: "not completed in time: \(r.text)") }
        usleep(50_000)
    }
}
