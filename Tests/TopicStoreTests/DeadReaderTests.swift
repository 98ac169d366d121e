import Foundation
import LMDB
import SubscriptionLog
import Testing
import TopicStore

/// A reader killed inside its read transaction (`kill -9` of an export, or of a
/// compaction planning) leaves its slot in lock.mdb pinning that snapshot: LMDB
/// reuses no page freed after it. A review found a running server's data.mdb
/// growing with every write until it restarted; the writer now clears such slots.
@Suite struct DeadReaderTests {
    @Test func aReaderKilledInItsTransactionIsClearedByTheWriter() throws {
        let dir = TemporaryDirectory("dead-reader")
        let store = try TopicStore(directory: dir.path)
        defer { store.close() }
        var events: [Event] = []
        for i in 0..<40_000 {
            events.append(Event(project: "demo", body: .register(deviceID: "device-\(i)", topics: [TopicSpec(code: "t\(i % 50)")])))
        }
        for start in stride(from: 0, to: events.count, by: 4_000) {
            for r in store.submitAndWait(Array(events[start..<start + 4_000])) { _ = try r.get() }
        }
        func holdsSnapshot(_ pid: Int32) throws -> Bool {
            try store.environment.readerSlots().contains { $0.pid == pid && $0.transactionID != nil }
        }
        // An export, stopped while it holds a read transaction, then killed there.
        var victim: Int32 = 0
        for _ in 0..<20 where victim == 0 {
            let export = Process()
            export.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
            export.arguments = ["export", "--data", dir.path]
            export.standardOutput = FileHandle.nullDevice
            try export.run()
            let pid = export.processIdentifier
            while export.isRunning {
                guard try holdsSnapshot(pid) else { continue }
                kill(pid, SIGSTOP)
                if try holdsSnapshot(pid) {
                    kill(pid, SIGKILL)
                    victim = pid
                    break
                }
                kill(pid, SIGCONT)
            }
            export.waitUntilExit()
        }
        try #require(victim != 0, "an export caught inside a read transaction")
        #expect(try holdsSnapshot(victim), "the dead process's slot still pins its snapshot")
        // The writer goes on committing; within a second or so it clears the slot.
        let deadline = ContinuousClock.now + .seconds(10)
        var commits = 0
        while try holdsSnapshot(victim), ContinuousClock.now < deadline {
            try store.submitAndWait(Event(project: "demo", body: .register(deviceID: "late-\(commits)", topics: [TopicSpec(code: "late")])))
            commits += 1
            usleep(20_000)
        }
        #expect(try !holdsSnapshot(victim), "after \(commits) commits the dead reader's slot is still there")
    }
}
