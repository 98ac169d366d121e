import Foundation
import Replay
import Testing
import TopicStore

/// Projections ahead of every record the log holds: a compaction snapshot copied out and
/// audited as a store (an operator review, following the audit's own advice to restore
/// "from a compaction snapshot"), or a log that ends early. The audit spun for ever once
/// more than a read transaction's worth of records were missing, and below that reported
/// every entry as a difference; it now says which records are missing.
@Suite struct AuditOfMissingRecordsTests: RunsTopicstore {
    func snapshotCopy(_ dir: TemporaryDirectory, devices: Int) throws -> String {
        let lines = (0..<devices).map { #"{"project":"demo","type":"register","device_id":"d\#($0)","topics":["all"]}"# }
        let data = try loadedStore(dir, lines.joined(separator: "\n") + "\n")
        let compact = try topicstore(["compact", "--data", data, "--retain", "0"])
        #expect(compact.status == 0, "\(compact.stderr)")
        let snapshots = data + "/snapshots"
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: snapshots).first)
        let copy = dir.sub("copy")
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: snapshots + "/" + name + "/data.mdb", toPath: copy + "/data.mdb")
        return copy
    }

    @Test(arguments: [50_000, 10])
    func aSnapshotAuditedAsAStoreNamesTheMissingRecords(recordsPerReadTransaction: Int) throws {
        let dir = TemporaryDirectory("audit-missing")
        let copy = try snapshotCopy(dir, devices: 300)
        var readOnly = TopicStore.Options()
        readOnly.readOnly = true
        let store = try TopicStore(directory: copy, options: readOnly)
        defer { store.close() }
        var options = Audit.Options()
        options.recordsPerReadTransaction = recordsPerReadTransaction
        let report = try Audit.run(store, options: options)
        #expect(!report.isClean)
        #expect(report.differenceCount == 0, "no entry is a difference: \(report.differences.prefix(3))")
        #expect(report.logIssues.contains { $0.kind == .missingStart && $0.missing == 1...299 }, "\(report.logIssues)")
    }

    @Test func theCommandAnswersAtOnce() throws {
        let dir = TemporaryDirectory("audit-missing")
        let copy = try snapshotCopy(dir, devices: 300)
        let audit = try runWithDeadline(["audit", "--data", copy], seconds: 30)
        #expect(audit.status == 4, "\(String(describing: audit.status)) \(audit.stdout.prefix(500))")
        #expect(audit.stdout.contains("missing-start") && audit.stdout.contains("compaction snapshot"), "\(audit.stdout.prefix(800))")
    }
}
