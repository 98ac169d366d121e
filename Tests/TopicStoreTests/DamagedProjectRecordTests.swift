import Foundation
import LMDB
import SubscriptionLog
import Testing
import TopicStore

/// A project's record in `projects` (id, next device ordinal, next topic id)
/// damaged. A corruption review found every answer for the project turning 0
/// with exit 0 (its id led to nothing), and `serve` taking a write for it, growing
/// its recipient cache to the damaged ordinal (billions of entries) instead of
/// answering — every later write waited behind it, and SIGTERM waited for them.
@Suite struct DamagedProjectRecordTests: RunsTopicstore {
    static let clientKey = "tsc_projectrecordtestkey01"

    /// alpha and beta with devices and topics, an API client key for alpha; closed.
    func makeStore(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.sub("data")
        let store = try TopicStore(directory: path)
        var events: [Event] = []
        for project in ["alpha", "beta"] {
            for i in 0..<200 {
                events.append(Event(project: project, body: .token(deviceID: "\(project.prefix(1))\(i)", token: "tok-\(project)-\(i)", platform: .ios)))
                events.append(Event(project: project, body: .register(deviceID: "\(project.prefix(1))\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(i % 4)")])))
            }
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        store.close()
        #expect(try topicstore(["project", "add", "--data", path, "alpha"]).status == 0)
        #expect(try topicstore(["key", "add", "--data", path, "--project", "alpha", "--kind", "client", "--value", Self.clientKey]).status == 0)
        try? FileManager.default.removeItem(atPath: path + "/lock.mdb")
        return path
    }

    /// A copy of `store` with `bytes` written over alpha's project record from `offset`.
    func damaged(_ store: String, _ dir: TemporaryDirectory, _ name: String, at offset: Int, _ bytes: [UInt8]) throws -> String {
        let copy = try DataFileImage.copy(store, dir, name)
        let record = try #require(try DataFileImage(copy).entries("projects").first { $0.key == Array("alpha".utf8) })
        #expect(record.valueSize == 12)
        try DataFileImage.write(copy, at: record.valueOffset + offset, bytes)
        return copy
    }

    /// The review's bytes (id and next ordinal garbage), an id past those given out,
    /// a next ordinal past what the events could give, a next topic id below a topic's.
    static let damages: [(name: String, offset: Int, bytes: [UInt8])] = [
        ("id and ordinal", 0, [0xc6, 0xc1, 0x3c, 0x2e, 0xbb, 0x28, 0x7b, 0x48]),
        ("id", 0, [0, 0, 0, 9]),
        ("ordinal", 4, [0x00, 0x10, 0x00, 0x00]),
        ("topic id", 8, [0, 0, 0, 17]),
    ]

    @Test(arguments: 0..<4)
    func readsReportTheDamagedRecordInsteadOfAnsweringZero(damage: Int) throws {
        let dir = TemporaryDirectory("project-record")
        let store = try makeStore(dir)
        let d = Self.damages[damage]
        let copy = try damaged(store, dir, "damaged", at: d.offset, d.bytes)
        // A read uses the record's id only: damage there is reported by every read. The next
        // ordinal and topic id are the writer's (it refuses them, below); reads of the
        // project's data still answer, and `stats`, which checks every record, reports them.
        let idDamaged = d.offset == 0
        for command in [["audience", "--project", "alpha", "all"], ["topics", "--project", "alpha"], ["device", "--project", "alpha", "a2"], ["stats"]] {
            let run = try topicstore(command + ["--data", copy])
            if idDamaged || command == ["stats"] {
                #expect(run.status == 4, "\(d.name): \(command[0]): exit \(run.status): \(run.stdout.prefix(200)) \(run.stderr.prefix(300))")
                #expect(run.stderr.contains("projects/alpha"), "\(d.name): \(command[0]): \(run.stderr.prefix(300))")
            } else {
                #expect(run.status == 0, "\(d.name): \(command[0]): exit \(run.status): \(run.stderr.prefix(300))")
            }
        }
        if !idDamaged {
            // The writer takes no such record on trust: a command for the project is refused, naming it.
            let load = try topicstore(["load", "--data", copy, "-"], stdin: #"{"project":"alpha","type":"register","device_id":"new1","topics":["all"]}"#)
            #expect(load.status != 0 && load.stderr.contains("projects/alpha"), "\(d.name): load: exit \(load.status): \(load.stderr.prefix(300))")
        }
        // The other project answers as before.
        let beta = try topicstore(["audience", "--project", "beta", "--json", "all", "--data", copy])
        #expect(beta.status == 0 && beta.stdout.contains("\"total\":200"), "\(beta.stdout) \(beta.stderr)")
    }

    @Test func serveAnswersEveryWriteForTheProjectAndStopsOnSIGTERM() throws {
        let dir = TemporaryDirectory("project-record")
        let store = try makeStore(dir)
        let d = Self.damages[0]
        let copy = try damaged(store, dir, "damaged", at: d.offset, d.bytes)
        let serve = try ServeProcess(data: copy)
        let headers = [("Content-Type", "application/json"), ("X-MPush-Token", Self.clientKey)]
        for body in [#"{"device_id":"zz1","token":"zztok1","platform":"ios"}"#, #"{"device_id":"a2","topics":["news"]}"#] {
            let path = body.contains("token") ? "/api/tokens" : "/api/register"
            let started = Date()
            let answer = try RawHTTPClient(port: serve.port).request("POST", path, headers: headers, text: body)
            #expect(answer.status == 503, "\(path): \(answer.status) \(answer.text)")
            #expect(answer.text.contains("projects/alpha"), "\(answer.text)")
            #expect(Date().timeIntervalSince(started) < 5)
        }
        serve.signal(SIGTERM)
        #expect(serve.wait(timeout: 15) != nil, "serve still running 15 s after SIGTERM")
        // Nothing was appended for the damaged project.
        var options = TopicStore.Options()
        options.readOnly = true
        let s = try TopicStore(directory: copy, options: options)
        #expect(try s.read { txn in try s.log.bounds(txn)?.last } == 800)
    }
}
