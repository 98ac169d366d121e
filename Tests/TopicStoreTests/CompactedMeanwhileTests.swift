import Foundation
import Replay
import Testing
import TopicStore

/// A compaction that switches generations while a long read runs removes records the read
/// has not reached: a send-service review got "gap … exit 4" (damage) from an export and an
/// audit running beside the nightly compaction. It is now said as what it is, to be re-run.
@Suite struct CompactedMeanwhileTests: RunsTopicstore {
    func store(_ dir: TemporaryDirectory) throws -> String {
        let lines = (0..<3_000).map { #"{"project":"demo","type":"register","device_id":"d\#($0)","topics":["all"]}"# }
        return try loadedStore(dir, lines.joined(separator: "\n") + "\n")
    }

    func openReadOnly(_ data: String) throws -> TopicStore {
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        return try TopicStore(directory: data, options: readOnly)
    }

    func compact(_ data: String) throws {
        let run = try topicstore(["compact", "--data", data, "--retain", "0"])
        #expect(run.status == 0, "\(run.stderr)")
    }

    @Test func anExportAcrossACompactionSaysSo() throws {
        let dir = TemporaryDirectory("compacted-meanwhile")
        let data = try store(dir)
        let store = try openReadOnly(data)
        defer { store.close() }
        var lines = 0, compacted = false
        do {
            try Export.lines(from: store, recordsPerReadTransaction: 500) { _ in
                lines += 1
                if lines == 500 && !compacted { compacted = true; try compact(data) }
            }
            Issue.record("the export ended without noticing the compaction")
        } catch ReplayError.compactedMeanwhile {
        }
        #expect(compacted && lines >= 500)
    }

    @Test func anAuditAcrossACompactionSaysSo() throws {
        let dir = TemporaryDirectory("compacted-meanwhile")
        let data = try store(dir)
        let store = try openReadOnly(data)
        defer { store.close() }
        var options = Audit.Options()
        options.recordsPerReadTransaction = 500
        options.memoryBudget = nil
        var compacted = false
        do {
            let report = try Audit.run(store, options: options) { p in
                if p.phase == "rebuild" && p.done >= 500 && !compacted { compacted = true; try? compact(data) }
            }
            // The rebuild may have read everything before the switch: then it is clean.
            #expect(report.isClean, "\(report.logIssues) \(report.differences.prefix(2))")
        } catch ReplayError.compactedMeanwhile {
        }
        #expect(compacted)
    }
}
