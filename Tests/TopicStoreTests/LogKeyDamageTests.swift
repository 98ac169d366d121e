import Foundation
import SubscriptionLog
import Testing
import TopicStore

/// A log record's key (its sequence) damaged in place: the record sits where it
/// always was, between its neighbours, under a number that is not its own. A
/// corruption review found a key made smaller killing `audit` and `replay`
/// ("Range requires lowerBound <= upperBound"), and one made larger ending
/// `export` and `history` silently at the record before it (exit 0) and `audit`'s
/// verification there, so later damage went unreported.
@Suite struct LogKeyDamageTests: RunsTopicstore {
    static let events = 3_000
    static let damagedSequence: UInt64 = 1_500

    /// A closed store of 3,000 events (log records 1…3000 on many leaf pages).
    func makeStore(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.sub("data")
        let store = try TopicStore(directory: path)
        var events: [Event] = []
        for i in 0..<(Self.events / 2) {
            events.append(Event(project: "demo", body: .token(deviceID: "d\(i)", token: "tok-\(i)", platform: .ios)))
            events.append(Event(project: "demo", body: .register(deviceID: "d\(i)", topics: [TopicSpec(code: "all"), TopicSpec(code: "t\(i % 5)")])))
        }
        for r in store.submitAndWait(events) { _ = try r.get() }
        store.close()
        return path
    }

    /// A copy of `store` with the key of record `sequence` rewritten to `key`.
    func withKey(_ store: String, _ dir: TemporaryDirectory, _ name: String, of sequence: UInt64, _ key: UInt64) throws -> String {
        let damaged = try DataFileImage.copy(store, dir, name)
        let entry = try #require(try DataFileImage(damaged).entries("log").first { $0.key == EventLog.key(sequence) })
        try DataFileImage.write(damaged, at: entry.keyOffset, EventLog.key(key))
        return damaged
    }

    /// One bit of the value of record `sequence` flipped (its checksum then fails).
    func damageValue(_ store: String, of sequence: UInt64) throws {
        let image = try DataFileImage(store)
        let entry = try #require(try image.entries("log").first { $0.key == EventLog.key(sequence) })
        let at = entry.valueOffset + 12
        try DataFileImage.write(store, at: at, [image.bytes[at] ^ 0x01])
    }

    @Test func aKeyMadeSmallerIsALogIssueNamingKeyAndRecord() throws {
        let dir = TemporaryDirectory("logkey")
        let store = try makeStore(dir)
        // 1500 is 0x05DC: a bit of its key's byte 6 cleared makes it 476 (0x01DC).
        let damaged = try withKey(store, dir, "smaller", of: Self.damagedSequence, 476)
        let audit = try topicstore(["audit", "--data", damaged])
        #expect(audit.status == 4, "exit \(audit.status): \(audit.stderr.prefix(300))")
        #expect(audit.stdout.contains("log: \(Self.events) records checked"), "every record is still verified: \(audit.stdout)")
        #expect(audit.stdout.contains("log seq 1500: misplaced:") && audit.stdout.contains("key 476"), "\(audit.stdout)")
        #expect(audit.stdout.contains("head: seq \(Self.events) "), "\(audit.stdout)")
        let json = try topicstore(["audit", "--data", damaged, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let issues = object["logIssues"] as? [[String: Any]] ?? []
        #expect(issues.contains { $0["seq"] as? Int == 1500 && $0["kind"] as? String == "misplaced" }, "\(issues)")
        // A rebuild past it stops there, saying where; one before it is whole.
        let past = try topicstore(["replay", "--data", damaged, "--to-seq", "2000", "--out", dir.sub("r1")])
        #expect(past.status == 4, "exit \(past.status): \(past.stderr.prefix(300))")
        #expect(past.stderr.contains("1500") && past.stderr.contains("476"), "\(past.stderr)")
        #expect(try topicstore(["replay", "--data", damaged, "--to-seq", "1000", "--out", dir.sub("r2")]).status == 0)
        let export = try topicstore(["export", "--data", damaged])
        #expect(export.status == 4 && export.stderr.contains("1500"), "exit \(export.status): \(export.stderr)")
        #expect(export.stdout.split(separator: "\n").count == 1_499)
    }

    @Test func aKeyMadeLargerStopsExportAndHistoryLoudlyAndAuditVerifiesPastIt() throws {
        let dir = TemporaryDirectory("logkey")
        let store = try makeStore(dir)
        // A bit of byte 4 set: the key reads 2^33 + 1500, past the log's last record.
        let damaged = try withKey(store, dir, "larger", of: Self.damagedSequence, 1 << 33 | Self.damagedSequence)
        let export = try topicstore(["export", "--data", damaged])
        #expect(export.status == 4, "exit \(export.status): \(export.stderr)")
        #expect(export.stdout.split(separator: "\n").count == 1_499)
        #expect(export.stderr.contains("1500") && export.stderr.contains("--from-seq 1501"), "\(export.stderr)")
        let from = try topicstore(["export", "--data", damaged, "--from-seq", "1400"])
        #expect(from.status == 4 && from.stderr.contains("1500"), "exit \(from.status): \(from.stderr)")
        let history = try topicstore(["history", "--data", damaged, "--project", "demo", "--topic", "all"])
        #expect(history.status == 4 && history.stderr.contains("1500"), "exit \(history.status): \(history.stderr)")
        let device = try topicstore(["history", "--data", damaged, "--project", "demo", "--device", "d900"])
        #expect(device.status == 4 && device.stderr.contains("1500"), "exit \(device.status): \(device.stderr)")
        // A second, independent damage after it is found too.
        try damageValue(damaged, of: 2_500)
        let audit = try topicstore(["audit", "--data", damaged])
        #expect(audit.status == 4, "exit \(audit.status): \(audit.stderr.prefix(300))")
        #expect(audit.stdout.contains("log seq 1500: misplaced:"), "\(audit.stdout)")
        #expect(audit.stdout.contains("log seq 2500: checksum:"), "\(audit.stdout)")
        #expect(audit.stdout.contains("log: \(Self.events) records checked"), "\(audit.stdout)")
        #expect(audit.stdout.contains("head: seq \(Self.events) "), "\(audit.stdout)")
    }

    @Test func aRecordMissingAfterItsNeighbourIsAGapThatStopsExport() throws {
        // No key damaged: record 1500 deleted, as a gap in the log. export stopped silently at 1499.
        let dir = TemporaryDirectory("logkey")
        let store = try makeStore(dir)
        do {
            let s = try TopicStore(directory: store)
            _ = try s.environment.write { txn in try txn.delete(s.log.database, EventLog.key(Self.damagedSequence)) }
            s.close()
        }
        let export = try topicstore(["export", "--data", store])
        #expect(export.status == 4, "exit \(export.status): \(export.stderr)")
        #expect(export.stderr.contains("1500") && export.stderr.contains("missing"), "\(export.stderr)")
        let audit = try topicstore(["audit", "--data", store])
        #expect(audit.status == 4 && audit.stdout.contains("log seq 1501: gap:"), "\(audit.stdout)")
    }

    @Test(arguments: [1, 2] as [UInt64])
    func randomKeyBitsNeverKillAuditReplayExportOrHistory(seed: UInt64) throws {
        let dir = TemporaryDirectory("logkey")
        let store = try makeStore(dir)
        let entries = try DataFileImage(store).entries("log")
        var rng = SeededRandom(seed: seed)
        for round in 0..<6 {
            let damaged = try DataFileImage.copy(store, dir, "random\(round)")
            let entry = entries[1 + rng.int(entries.count - 2)]
            let at = entry.keyOffset + 4 + rng.int(4)
            try DataFileImage.write(damaged, at: at, [try DataFileImage(damaged).bytes[at] ^ UInt8(1 << rng.int(8))])
            for command in [["audit"], ["replay", "--to-seq", "3000", "--out", dir.sub("out\(round)")], ["export"], ["history", "--project", "demo", "--topic", "all"]] {
                let run = try topicstore(command + ["--data", damaged])
                #expect(run.status == 4, "\(command[0]) with key \(entry.key) damaged at \(at): exit \(run.status): \(run.stderr.prefix(300))")
            }
        }
    }
}
