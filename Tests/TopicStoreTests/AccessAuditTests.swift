import Foundation
import Testing
import TopicStore

/// `audit` reads the access tables too (projects and API keys, which `serve`
/// trusts for every request). A corruption review found a key's project name
/// damaged ("alpha" → "alVha") passing audit with exit 0 while serve answered that
/// key for a project that does not exist.
@Suite struct AccessAuditTests: RunsTopicstore {
    static let clientKey = "tsc_accessaudittestkey0001", serverKey = "tss_accessaudittestkey0001"

    func makeStore(_ dir: TemporaryDirectory) throws -> String {
        let data = try loadedStore(dir, #"{"project":"alpha","type":"token","device_id":"a1","token":"t1","platform":"ios"}"# + "\n")
        for p in ["alpha", "beta"] { #expect(try topicstore(["project", "add", "--data", data, p]).status == 0) }
        #expect(try topicstore(["key", "add", "--data", data, "--project", "alpha", "--kind", "client", "--value", Self.clientKey]).status == 0)
        #expect(try topicstore(["key", "add", "--data", data, "--project", "alpha", "--kind", "server", "--value", Self.serverKey]).status == 0)
        try? FileManager.default.removeItem(atPath: data + "/lock.mdb")
        return data
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    @Test func aSoundStoreChecksEveryAccessRecord() throws {
        let dir = TemporaryDirectory("access-audit")
        let data = try makeStore(dir)
        let audit = try topicstore(["audit", "--data", data])
        #expect(audit.status == 0, "\(audit.stdout) \(audit.stderr)")
        #expect(audit.stdout.contains("access: 2 projects, 2 keys checked, 0 issue(s)"), "\(audit.stdout)")
    }

    @Test func undecodableRecordsAndKeysOfMissingProjectsAreReported() throws {
        let dir = TemporaryDirectory("access-audit")
        let store = try makeStore(dir)
        let data = try DataFileImage.copy(store, dir, "damaged")
        let image = try DataFileImage(data)
        let keys = try image.entries("access_keys")
        #expect(keys.count == 2)
        // The first key's project name: "alpha" → "alVha" (its record still decodes).
        let renamed = keys[0], renamedID = Self.hex(renamed.key.prefix(8))
        #expect(image.value(renamed).suffix(5) == Array("alpha".utf8))
        try DataFileImage.write(data, at: renamed.valueOffset + 18 + 2, [Character("V").asciiValue!])
        // The second key's kind byte garbage: it does not decode.
        let garbled = keys[1], garbledID = Self.hex(garbled.key.prefix(8))
        try DataFileImage.write(data, at: garbled.valueOffset + 1, [0xEE])
        // beta's project record: an unknown format version.
        let beta = try #require(try image.entries("access_projects").first { $0.key == Array("beta".utf8) })
        try DataFileImage.write(data, at: beta.valueOffset, [0x07])

        let audit = try topicstore(["audit", "--data", data])
        #expect(audit.status == 4, "exit \(audit.status): \(audit.stdout) \(audit.stderr)")
        #expect(audit.stdout.contains("access: 2 projects, 2 keys checked, 3 issue(s)"), "\(audit.stdout)")
        #expect(audit.stdout.contains("access_keys/\(renamedID): its project 'alVha' does not exist"), "\(audit.stdout)")
        #expect(audit.stdout.contains("access_keys/\(garbledID): does not decode"), "\(audit.stdout)")
        #expect(audit.stdout.contains("access_projects/beta: does not decode"), "\(audit.stdout)")
        let json = try topicstore(["audit", "--data", data, "--json"])
        #expect(json.status == 4)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let issues = (object["access"] as? [String: Any])?["issues"] as? [[String: Any]] ?? []
        #expect(issues.contains { $0["table"] as? String == "access_keys" && $0["key"] as? String == renamedID }, "\(issues)")
        #expect(object["ok"] as? Bool == false)

        // serve on the same file: neither key is trusted; each request gets 503 naming the
        // damaged key (it answered the renamed key for project 'alVha', and 500 for the other).
        let server = try ServeProcess(data: data)
        var answers = ""
        for key in [Self.clientKey, Self.serverKey] {
            let response = try RawHTTPClient(port: server.port).request("GET", "/v1/topics", headers: [("X-MPush-Token", key)])
            #expect(response.status == 503, "\(response.status) \(response.text)")
            answers += response.text
        }
        #expect(answers.contains("access_keys/\(renamedID)") && answers.contains("access_keys/\(garbledID)"), "\(answers)")
        let renamedResponse = try RawHTTPClient(port: server.port).request("POST", "/api/unregister-all", headers: [
            ("X-MPush-Token", Self.clientKey), ("Content-Type", "application/json")], text: #"{"device_id":"a1"}"#)
        #expect(renamedResponse.status == 503, "\(renamedResponse.status) \(renamedResponse.text)")
        server.signal(SIGTERM)
        #expect(server.wait() == 0)
        let device = try topicstore(["device", "--data", data, "--project", "alpha", "a1", "--json"])
        #expect(device.status == 0 && device.stdout.contains("\"t1\""), "the refused command changed nothing: \(device.stdout)")
    }
}
