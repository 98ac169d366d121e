import Foundation
import Replay
import Testing
import TopicStore

/// A compaction that switches generations while a long read runs removes, in the new
/// generation, records the read has not reached: a send-service review got "gap … exit 4"
/// (damage) from an export and an audit running beside the nightly compaction. The CLI's
/// long reads stay on the generation they opened (`TopicStore.Options.longRead`) and finish;
/// a store that follows the switch says what happened, to be run again.
@Suite struct CompactedMeanwhileTests: RunsTopicstore {
    func store(_ dir: TemporaryDirectory, devices: Int = 3_000) throws -> String {
        let lines = (0..<devices).map { #"{"project":"demo","type":"register","device_id":"d\#($0)","topics":["all"]}"# }
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

    @Test func aStoreThatFollowsTheSwitchSaysSo() throws {
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

    @Test func anExportStaysOnItsGeneration() throws {
        let dir = TemporaryDirectory("compacted-meanwhile")
        let data = try store(dir)
        let before: [String] = try {
            let s = try openReadOnly(data)
            defer { s.close() }
            var all: [String] = []
            try Export.lines(from: s) { all.append($0) }
            return all
        }()
        let store = try TopicStore(directory: data, options: .longRead)
        defer { store.close() }
        let generation = store.generation
        var lines: [String] = []
        try Export.lines(from: store, recordsPerReadTransaction: 500) { line in
            lines.append(line)
            if lines.count == 500 { try compact(data) }
        }
        #expect(try TopicStore.activeGeneration(in: data) != generation, "the compaction did not switch generations")
        #expect(lines == before)
    }

    @Test func anAuditStaysOnItsGeneration() throws {
        let dir = TemporaryDirectory("compacted-meanwhile")
        let data = try store(dir)
        let store = try TopicStore(directory: data, options: .longRead)
        defer { store.close() }
        var options = Audit.Options()
        options.recordsPerReadTransaction = 500
        options.memoryBudget = nil
        var compacted = false
        let report = try Audit.run(store, options: options) { p in
            if p.phase == "rebuild" && p.done >= 500 && !compacted { compacted = true; try? compact(data) }
        }
        #expect(compacted)
        #expect(report.isClean, "\(report.logIssues) \(report.differences.prefix(2))")
        #expect(report.recordsChecked == 3_000 && report.projectionsCompared)
    }

    /// A second compaction removes the snapshot the first one's generation continues from:
    /// a replay of that generation begun after it cannot start, and says why (not "missing
    /// snapshot", exit 4, which is what a damaged store says).
    @Test func aSnapshotRemovedByTheNextCompactionIsNotDamage() throws {
        let dir = TemporaryDirectory("compacted-meanwhile")
        let data = try store(dir, devices: 200)
        try compact(data)
        _ = try topicstore(["load", "--data", data, "-"], stdin: #"{"project":"demo","type":"unregister-all","device_id":"d1"}"# + "\n")
        let store = try TopicStore(directory: data, options: .longRead)
        defer { store.close() }
        try compact(data)
        do {
            _ = try Replay.rebuild(from: store, to: .end, into: dir.sub("out"))
            Issue.record("the replay ran without the snapshot its log continues from")
        } catch ReplayError.compactedMeanwhile {
        }
        #expect(!FileManager.default.fileExists(atPath: dir.sub("out")))
    }

    /// The CLI's export, its reader blocked on a full pipe while a compaction runs to the end.
    @Test func theExportCommandFinishesAcrossACompaction() throws {
        let dir = TemporaryDirectory("compacted-meanwhile")
        // More than one read transaction's records (50,000), so the export reads again after the switch.
        let data = try store(dir, devices: 60_000)
        let export = Process()
        export.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
        export.arguments = ["export", "--data", data]
        let out = Pipe(), err = Pipe()
        export.standardOutput = out
        export.standardError = err
        try export.run()
        let reader = out.fileHandleForReading
        // The first bytes: it is exporting, and blocks once the pipe is full (its output is ~7 MB).
        var received = try reader.read(upToCount: 4096) ?? Data()
        try compact(data)
        while let more = try reader.read(upToCount: 1 << 20), !more.isEmpty { received.append(more) }
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        export.waitUntilExit()
        #expect(export.terminationStatus == 0, "\(stderr)")
        let lines = String(decoding: received, as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 60_000)
        #expect(lines.last?.contains(#""seq":60000"#) == true)
    }
}
