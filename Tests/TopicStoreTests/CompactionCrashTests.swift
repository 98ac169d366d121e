import Compaction
import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Compaction beside a writer in another process, and compaction killed with
/// SIGKILL at random moments: the store must always open, audit clean, and hold
/// every acknowledged command (in the log, or — below the horizon — in the archive).
@Suite(.serialized) struct CompactionCrashTests {
    struct Ack: Hashable { var sequence: UInt64; var deviceID: String }

    /// The stress writer (prints `ack SEQ DEVICE` per durable command) as a child process.
    final class StressWriter {
        let process = Process()
        let pipe = Pipe()
        init(directory: String, prefix: String) throws {
            process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore-stress"))
            process.arguments = [directory, "3", prefix]
            process.standardOutput = pipe
            try process.run()
        }
        /// Output read before the kill (by `waitForAcknowledgement`).
        private var early = Data()
        /// Blocks until it has acknowledged at least one command (true), or exited.
        func waitForAcknowledgement() -> Bool {
            while !String(decoding: early, as: UTF8.self).contains("ack ") {
                let chunk = pipe.fileHandleForReading.availableData  // blocks until output or end of file
                if chunk.isEmpty { return false }
                early.append(chunk)
            }
            return true
        }
        /// Kills it and returns what it acknowledged (lines cut by the kill are not acknowledgements).
        func kill() -> [Ack] {
            Foundation.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let text = String(decoding: early + pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            return text.split(separator: "\n").compactMap { line in
                let parts = line.split(separator: " ")
                guard parts.count == 3, parts[0] == "ack", let seq = UInt64(parts[1]) else { return nil }
                return Ack(sequence: seq, deviceID: String(parts[2]))
            }
        }
    }

    /// Every acknowledged command is in the log, or below the horizon in an archive.
    func checkAcknowledged(_ acks: [Ack], store: TopicStore, archive: String?, round: String) throws {
        let log = store.log
        let first = try store.read { txn in try log.bounds(txn)?.first } ?? 1
        var archived: [UInt64: String] = [:]
        if let archive, first > 1 {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: archive)) ?? [] {
                guard let range = Archive.range(ofFileName: name), range.upperBound < first else { continue }
                for r in try Archive.records(at: (archive as NSString).appendingPathComponent(name)) {
                    archived[r.sequence] = r.event.body.deviceID
                }
            }
        }
        try store.read { txn in
            for ack in acks {
                if ack.sequence >= first {
                    let record = try log.record(at: ack.sequence, txn)
                    #expect(record?.event.body.deviceID == ack.deviceID, "\(round): acknowledged seq \(ack.sequence) lost or changed")
                } else if archive != nil {
                    #expect(archived[ack.sequence] == ack.deviceID, "\(round): acknowledged seq \(ack.sequence) is neither in the log nor archived")
                }
            }
        }
    }

    @Test func compactionBesideAWriterInAnotherProcess() throws {
        let dir = TemporaryDirectory("compact-writer")
        let data = dir.sub("data")
        let writer = try StressWriter(directory: data, prefix: "w")
        usleep(400_000)
        let cut = nowMilliseconds() - 100
        var options = compactionOptions(keepingFrom: cut, archive: dir.sub("archive"))
        options.catchUpThreshold = 50
        let report = try Compactor.run(directory: data, options: options)
        usleep(200_000)  // the writer goes on in the new generation
        let acks = writer.kill()
        #expect(report.horizon > 0 && report.generationAfter != report.generationBefore)
        #expect(report.writePauseSeconds < 1.0, "writers were held \(report.writePauseSeconds) s")
        #expect(acks.contains { $0.sequence > report.lastBefore! + UInt64(report.recordsAtSwitch) },
                "the writer committed nothing after the switch")

        let store = try TopicStore(directory: data)
        defer { store.close() }
        #expect(store.generation == report.generationAfter)
        try checkAcknowledged(acks, store: store, archive: dir.sub("archive"), round: "beside a writer")
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues.prefix(5)) \(audit.differences.prefix(5))")
        #expect(audit.snapshot?.sequence == report.horizon)
        #expect(!FileManager.default.fileExists(atPath: data + "/data.mdb"), "the old generation was not removed")
    }

    @Test func compactionKilledAtRandomMomentsLeavesABeforeOrAfterStore() throws {
        let dir = TemporaryDirectory("compact-kill")
        let data = dir.sub("data")
        let archive = dir.sub("archive")
        var rng = SeededRandom(seed: UInt64(Date().timeIntervalSince1970))
        var acks: [Ack] = []
        var states: Set<String> = []
        for round in 0..<6 {
            let writer = try StressWriter(directory: data, prefix: "k\(round)")
            usleep(250_000)
            let compact = Process()
            compact.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
            compact.arguments = ["compact", "--data", data, "--retain", "0", "--archive", archive, "--json"]
            compact.standardOutput = Pipe()
            compact.standardError = Pipe()
            try compact.run()
            let delay = 10 + Int(rng.next() % 400)
            usleep(UInt32(delay * 1000))
            kill(compact.processIdentifier, SIGKILL)
            compact.waitUntilExit()
            states.insert(compact.terminationReason == .uncaughtSignal ? "killed" : "finished")
            acks += writer.kill()

            let store = try TopicStore(directory: data)
            try checkAcknowledged(acks, store: store, archive: archive, round: "round \(round) (kill after \(delay) ms)")
            let audit = try Audit.run(store)
            #expect(audit.isClean, "round \(round), kill after \(delay) ms: \(audit.logIssues.prefix(5)) \(audit.differences.prefix(5))")
            store.close()
        }
        // The next run removes what killed ones left and finishes.
        let final = try compactCLI(["compact", "--data", data, "--retain", "0", "--archive", archive, "--json"])
        #expect(final.status == 0, "\(final.error)")
        let store = try TopicStore(directory: data)
        defer { store.close() }
        try checkAcknowledged(acks, store: store, archive: archive, round: "final")
        let audit = try Audit.run(store)
        #expect(audit.isClean, "final: \(audit.logIssues.prefix(5)) \(audit.differences.prefix(5))")
        let names = try FileManager.default.contentsOfDirectory(atPath: data).sorted()
        #expect(names.filter { TopicStore.isGenerationName($0) } == [store.generation], "leftover generations: \(names)")
        #expect(Snapshot.horizons(inStore: data).count == 1)
        #expect(!names.contains { $0.hasPrefix(".compact-copy") })
        // The archives tile the removed range exactly.
        let ranges = try FileManager.default.contentsOfDirectory(atPath: archive).compactMap(Archive.range(ofFileName:)).sorted { $0.lowerBound < $1.lowerBound }
        var next: UInt64 = 1
        for r in ranges {
            #expect(r.lowerBound == next, "archives \(ranges) do not tile 1…")
            next = r.upperBound + 1
        }
        #expect(next == (try store.read { txn in try store.log.bounds(txn)?.first }), "archives end at the horizon")
        print("kill test outcomes: \(states.sorted())")
    }
}
