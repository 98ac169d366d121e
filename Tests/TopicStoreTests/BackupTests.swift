import Foundation
import Testing
import TopicStore

/// `topicstore backup`: a copy taken beside a writer in another process is a store that
/// audits clean, with its projects and keys; a compacted store's copy has its snapshot.
/// (An operator review found no backup procedure, and 5 in 6 `cp -a` copies of a store
/// under load damaged.)
@Suite struct BackupTests: RunsTopicstore {
    static func lines(_ range: Range<Int>) -> String {
        range.map { #"{"project":"demo","type":"register","device_id":"d\#($0)","topics":["all","t\#($0 % 7)"]}"# }.joined(separator: "\n") + "\n"
    }

    @Test func aBackupTakenBesideAWriterIsAStoreThatAuditsClean() throws {
        let dir = TemporaryDirectory("backup")
        let data = try loadedStore(dir, Self.lines(0..<2_000))
        #expect(try topicstore(["project", "add", "--data", data, "demo"]).status == 0)
        #expect(try topicstore(["key", "add", "--data", data, "--project", "demo", "--kind", "server", "--value", "tss_backuptestkey000001"]).status == 0)
        try Self.lines(2_000..<60_000).write(toFile: dir.sub("more.jsonl"), atomically: true, encoding: .utf8)
        guard let binary = TopicstoreBinary.path else { Issue.record("no binary"); return }
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: binary)
        writer.arguments = ["load", "--data", data, "--batch", "100", dir.sub("more.jsonl")]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        usleep(100_000)
        let backup = try topicstore(["backup", "--data", data, "--out", dir.sub("copy"), "--json"])
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0, "the writer ran beside the backup")
        #expect(backup.status == 0, "\(backup.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(backup.stdout.utf8)) as? [String: Any])
        let head = try #require((report["head"] as? [String: Any])?["seq"] as? Int)
        #expect(head >= 2_000 && head <= 60_000, "\(report)")
        let audit = try topicstore(["audit", "--data", dir.sub("copy")])
        #expect(audit.status == 0, "\(audit.stdout)")
        let stats = try topicstore(["stats", "--data", dir.sub("copy"), "--json"])
        #expect(stats.stdout.contains("\"lastSeq\":\(head),") && stats.stdout.contains("\"appliedSeq\":\(head),"), "\(stats.stdout.prefix(300))")
        let keys = try topicstore(["key", "list", "--data", dir.sub("copy"), "--project", "demo", "--json"])
        #expect(keys.status == 0 && keys.stdout.contains("server"), "the keys come along: \(keys.stdout)")
    }

    @Test func aCompactedStoresBackupHasItsSnapshotAndRefusalsTouchNothing() throws {
        let dir = TemporaryDirectory("backup")
        let data = try loadedStore(dir, Self.lines(0..<500))
        #expect(try topicstore(["compact", "--data", data, "--retain", "0"]).status == 0)
        #expect(try topicstore(["load", "--data", data, "-"], stdin: Self.lines(500..<600)).status == 0)
        let backup = try topicstore(["backup", "--data", data, "--out", dir.sub("copy")])
        #expect(backup.status == 0 && backup.stdout.contains("with the compaction snapshot at seq"), "\(backup.stdout) \(backup.stderr)")
        let audit = try topicstore(["audit", "--data", dir.sub("copy")])
        #expect(audit.status == 0, "\(audit.stdout)")
        let before = try FileManager.default.contentsOfDirectory(atPath: data).sorted()
        for out in [data + "/inside", dir.sub("copy")] {
            let refused = try topicstore(["backup", "--data", data, "--out", out])
            #expect(refused.status == 1, "\(out): \(refused.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: data).sorted() == before)
        #expect(try topicstore(["audit", "--data", dir.sub("copy")]).status == 0, "the refused backup left the earlier one alone")
    }
}
