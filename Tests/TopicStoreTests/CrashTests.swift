import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// A child process writes under concurrent load and is killed with SIGKILL at
/// random moments. Afterwards every acknowledged command must be in the log,
/// sequences gap-free, and the projections must equal a fold of the log.
@Suite struct CrashTests {
    struct Ack: Hashable { var sequence: UInt64; var deviceID: String }

    /// Runs the stress writer until killed; returns the acknowledgements it printed.
    func runAndKill(directory: String, prefix: String, after milliseconds: Int, mapSize: Int? = nil) throws -> [Ack] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore-stress"))
        process.arguments = [directory, "4", prefix] + (mapSize.map { [String($0)] } ?? [])
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        usleep(UInt32(milliseconds * 1000))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal, "the writer was killed, not finished")
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return output.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            // A line cut by the kill is not an acknowledgement anyone saw in full.
            guard parts.count == 3, parts[0] == "ack", let seq = UInt64(parts[1]) else { return nil }
            return Ack(sequence: seq, deviceID: String(parts[2]))
        }
    }

    @Test func killedWriterLosesNothingAcknowledged() throws {
        let dir = TemporaryDirectory("crash")
        let data = dir.sub("data")
        var rng = SeededRandom(seed: UInt64(Date().timeIntervalSince1970))
        var allAcks: [Ack] = []
        for round in 0..<5 {
            // A small map in round 2 makes the killed writer grow it too.
            let delay = 150 + Int(rng.next() % 450)
            let acks = try runAndKill(directory: data, prefix: "r\(round)", after: delay, mapSize: round == 2 ? 1 << 20 : nil)
            #expect(!acks.isEmpty, "round \(round): the writer acknowledged nothing in \(delay) ms")
            allAcks += acks

            let store = try TopicStore(directory: data)
            defer { store.close() }
            let log = store.log
            try store.read { txn in
                let bounds = try log.bounds(txn)
                var expected: UInt64 = 1
                try log.forEach(txn) { record in
                    #expect(record.sequence == expected, "gap in the log at \(expected)")
                    expected = record.sequence + 1
                    return true
                }
                #expect(bounds?.last == expected - 1)
                #expect(try store.tables.appliedSequence(txn) == bounds?.last, "projections behind or ahead of the log")
                for ack in allAcks {
                    let record = try log.record(at: ack.sequence, txn)
                    #expect(record?.event.body.deviceID == ack.deviceID, "acknowledged seq \(ack.sequence) lost or changed")
                }
            }
            let live = try ProjectionDump.of(store)
            let rebuilt = try foldLog(of: store, into: dir.sub("fold-\(round)"))
            #expect(live == rebuilt, "round \(round): \(live.differences(from: rebuilt))")
        }
    }
}
