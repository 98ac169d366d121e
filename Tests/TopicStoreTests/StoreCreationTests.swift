import Foundation
import Replay
import Synchronization
import Testing
import SubscriptionLog
import TopicStore

/// Several processes started at once on a store that does not exist yet (a deploy
/// script starting `serve` beside a `load`, or several loads): one of them creates
/// it, the others wait for it and open it. None takes the half-made directory for
/// something that is not a store (a lock.mdb and no data.mdb yet, or a data.mdb
/// without its tables), and every command of every one is in the store.
@Suite(.serialized) struct StoreCreationTests: RunsTopicstore {
    @Test func processesStartedTogetherOnANewStoreAllOpenIt() throws {
        let writers = 6
        for round in 0..<8 {
            let dir = TemporaryDirectory("create-race")
            let data = dir.sub("data")
            let runs = Mutex<[Int: TopicstoreRun]>([:])
            DispatchQueue.concurrentPerform(iterations: writers + 2) { i in
                let run: TopicstoreRun
                if i < writers {
                    let lines = (0..<20).map { #"{"project":"demo","type":"register","device_id":"w\#(i)-\#($0)","topics":["all"]}"# }
                    run = (try? topicstore(["load", "--data", data, "-"], stdin: lines.joined(separator: "\n") + "\n"))
                        ?? TopicstoreRun(status: -1, stdout: "", stderr: "did not run")
                } else {
                    // Readers beside the creation: a store, or no store yet, never "not a topicstore database".
                    usleep(UInt32(i - writers) * 20_000)
                    run = (try? topicstore(["stats", "--data", data, "--json"])) ?? TopicstoreRun(status: -1, stdout: "", stderr: "did not run")
                }
                runs.withLock { $0[i] = run }
            }
            for (i, run) in runs.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
                if i < writers {
                    #expect(run.status == 0, "round \(round), load \(i): \(run.stderr)")
                } else {
                    let noStoreYet = run.status == 3 && run.stderr.contains("does not exist")
                    #expect(run.status == 0 || noStoreYet, "round \(round), stats \(i - writers): \(run.status) \(run.stderr)")
                }
            }
            var readOnly = TopicStore.Options()
            readOnly.readOnly = true
            let store = try TopicStore(directory: data, options: readOnly)
            defer { store.close() }
            #expect(try allRecords(store).count == writers * 20, "round \(round)")
            let audit = try Audit.run(store)
            #expect(audit.isClean, "round \(round): \(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
        }
    }

    /// A store holds the providers' private keys: its files are never world-readable,
    /// neither when made nor in the generation a file compaction switches to.
    @Test func theStoresFilesAreNotWorldReadable() throws {
        let dir = TemporaryDirectory("create-modes")
        let data = dir.sub("data")
        let old = umask(0o022)
        defer { umask(old) }
        let store = try TopicStore(directory: data)
        try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "d1", topics: [TopicSpec(code: "all")])))
        store.close()
        func mode(_ path: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
        }
        #expect(try mode(data + "/data.mdb") == 0o640)
        #expect(try mode(data + "/lock.mdb") & 0o007 == 0)
        let run = try topicstore(["compact", "--data", data, "--retain", "0", "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let reopened = try TopicStore(directory: data)
        let generation = reopened.environmentDirectory
        reopened.close()
        #expect(generation != data, "the compaction did not switch generations")
        #expect(try mode(generation + "/data.mdb") == 0o640)
        #expect(try mode(generation + "/lock.mdb") & 0o007 == 0)
    }
}
