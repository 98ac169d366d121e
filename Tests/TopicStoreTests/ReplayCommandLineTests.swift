import Foundation
import LMDB
import SubscriptionLog
import Testing
import TopicStore

/// `audit`, `history`, `export` and `replay` as an operator runs them on damaged,
/// compacted and projections-only stores: what they report, advise and exit with.
@Suite struct ReplayCommandLineTests: RunsTopicstore {
    func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    /// Six records with explicit times: D2's token is rejected at seq 5.
    static let commands = """
    {"project":"demo","type":"token","device_id":"D1","token":"tokA","platform":"ios","ts":1769936400000}
    {"project":"demo","type":"register","device_id":"D1","topics":["news"],"ts":1769936401000}
    {"project":"demo","type":"token","device_id":"D2","token":"tokB","platform":"android","ts":1770717600000}
    {"project":"demo","type":"register","device_id":"D2","topics":["news"],"ts":1770717605000}
    {"project":"demo","type":"token-rejected","token":"tokB","at":1772150400000,"reason":"Unregistered","ts":1772236801000}
    {"project":"demo","type":"register","device_id":"D3","topics":["news"],"ts":1772366400000}
    """

    /// Flips one bit inside record `seq`'s fields (its checksum no longer matches).
    static func damage(_ data: String, _ seq: UInt64) throws {
        let store = try TopicStore(directory: data)
        defer { store.close() }
        try store.environment.write { txn in
            var bytes = Array(try #require(try txn.get(store.log.database, EventLog.key(seq))))
            bytes[21] ^= 0x01
            try txn.put(store.log.database, EventLog.key(seq), bytes)
        }
    }

    // MARK: a damaged head

    /// It exited 1 with a one-line error and no report.
    @Test func auditReportsADamagedHeadLikeAnyOtherRecord() throws {
        let dir = TemporaryDirectory("audit-head")
        let data = try loadedStore(dir, Self.commands)
        try Self.damage(data, 6)
        let j = try topicstore(["audit", "--data", data, "--json"])
        #expect(j.status == 4, "\(j.status) \(j.stderr)")
        let report = json(j.stdout)
        let issues = report["logIssues"] as? [[String: Any]] ?? []
        #expect(issues.count == 1 && issues.first?["seq"] as? Int == 6 && issues.first?["kind"] as? String == "checksum", "\(j.stdout)")
        #expect(report["ok"] as? Bool == false)
        let text = try topicstore(["audit", "--data", data])
        #expect(text.status == 4 && text.stdout.contains("log seq 6: checksum"), "\(text.stdout) \(text.stderr)")
    }

    /// `serve` answered 500 to every write with /healthz ok: it now refuses to start.
    @Test func serveRefusesAStoreWhoseHeadIsDamaged() throws {
        let dir = TemporaryDirectory("serve-head")
        let data = try loadedStore(dir, Self.commands)
        try Self.damage(data, 6)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.executable("topicstore"))
        process.arguments = ["serve", "--data", data, "--listen", "127.0.0.1:0", "--quiet"]
        let err = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = err
        try process.run()
        let deadline = Date().addingTimeInterval(20)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            Issue.record("serve started on a store whose last record is damaged")
            return
        }
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 4, "\(stderr)")
        #expect(stderr.contains("log record 6 of") && stderr.contains("checksum") && stderr.contains("topicstore audit"), "\(stderr)")
    }

    // MARK: an anchor before the compaction horizon

    /// The advice said to import the archive with --expect-head, which compares only the
    /// final head: a valid anchor inside the archive failed. The advice given now works.
    @Test func anAnchorBeforeTheHorizonGetsAdviceThatWorks() throws {
        let dir = TemporaryDirectory("anchor-horizon")
        let data = try loadedStore(dir, Self.commands)
        let link = try {
            var o = TopicStore.Options(); o.readOnly = true
            let store = try TopicStore(directory: data, options: o)
            defer { store.close() }
            return try store.read { txn in try store.chainLink(at: 5 - 1, txn) }
        }()
        let anchor = "4:\(link.hex)"
        let compact = try topicstore(["compact", "--data", data, "--retain", "0", "--archive", dir.sub("archive")])
        #expect(compact.status == 0, "\(compact.stderr)")
        let audit = try topicstore(["audit", "--data", data, "--expect-head", anchor])
        #expect(audit.status == 4)
        #expect(audit.stdout.contains("without --expect-head") && audit.stdout.contains("topicstore audit --data NEW --expect-head \(anchor)"),
                "\(audit.stdout)")
        // Following it: import the archive as it is, then audit the anchor there.
        let archive = try #require(try FileManager.default.contentsOfDirectory(atPath: dir.sub("archive")).first { $0.hasSuffix(".jsonl.zst") })
        let imported = try topicstore(["import", "--data", dir.sub("new"), dir.sub("archive") + "/" + archive])
        #expect(imported.status == 0, "\(imported.stdout) \(imported.stderr)")
        let check = try topicstore(["audit", "--data", dir.sub("new"), "--expect-head", anchor])
        #expect(check.status == 0, "\(check.stdout)")
    }

    // MARK: what an auditor's review found

    /// A damaged log record: the advice was to replay the log into a new directory, which
    /// stops at the same record (exit 4). It now names the replay that keeps what is before it,
    /// and that replay works; a FAILED audit no longer offers its head for anchoring.
    @Test func aDamagedRecordGetsAdviceThatWorks() throws {
        let dir = TemporaryDirectory("damaged-advice")
        let data = try loadedStore(dir, Self.commands)
        try Self.damage(data, 4)
        let history = try topicstore(["history", "--data", data, "--project", "demo", "--device", "D2"])
        #expect(history.status == 4, "\(history.stderr)")
        let advice = "topicstore replay --data \(data) --to-seq 3 --out NEWDIR"
        #expect(history.stderr.contains(advice), "\(history.stderr)")
        let replay = try topicstore(["replay", "--data", data, "--to-seq", "3", "--out", dir.sub("kept")])
        #expect(replay.status == 0, "\(replay.stderr)")
        #expect(try topicstore(["audit", "--data", dir.sub("kept")]).status == 0)
        let audit = try topicstore(["audit", "--data", data])
        #expect(audit.status == 4 && audit.stdout.contains("FAILED"), "\(audit.stdout)")
        // The damaged record keeps 8 bytes of its link, and no record after it its whole link: the
        // head's link cannot be computed, so none is offered.
        #expect(audit.stdout.contains("head: its link cannot be computed") && !audit.stdout.contains("anchor it"), "\(audit.stdout)")
        let clean = try topicstore(["audit", "--data", dir.sub("kept")])
        #expect(clean.stdout.contains("anchor it"), "\(clean.stdout)")
    }

    /// An import whose head differed from --expect-head exited 4 and left the store it had
    /// imported, which audited clean and offered that head for anchoring.
    @Test func anImportWithAnotherHeadLeavesNothing() throws {
        let dir = TemporaryDirectory("import-head")
        let data = try loadedStore(dir, Self.commands)
        let export = try topicstore(["export", "--data", data])
        #expect(export.status == 0)
        let good = try topicstore(["import", "--data", dir.sub("good"), "--json", "-"], stdin: export.stdout)
        #expect(good.status == 0, "\(good.stderr)")
        let head = try #require(json(good.stdout)["head"] as? [String: Any])
        let hash = try #require(head["hash"] as? String)
        let wrong = "6:" + String(repeating: "0", count: 64)
        let bad = try topicstore(["import", "--data", dir.sub("bad"), "--expect-head", wrong, "-"], stdin: export.stdout)
        #expect(bad.status == 4)
        #expect(bad.stdout.contains("differs from --expect-head") && bad.stdout.contains("nothing imported"), "\(bad.stdout)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("bad")), "the new directory is removed")
        // Into an existing empty directory: left empty.
        try FileManager.default.createDirectory(atPath: dir.sub("empty"), withIntermediateDirectories: true)
        #expect(try topicstore(["import", "--data", dir.sub("empty"), "--expect-head", wrong, "-"], stdin: export.stdout).status == 4)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.sub("empty")) == [])
        let right = try topicstore(["import", "--data", dir.sub("right"), "--expect-head", "6:\(hash)", "-"], stdin: export.stdout)
        #expect(right.status == 0, "\(right.stdout) \(right.stderr)")
    }

    /// An altered head in snapshot.json: audit blamed the intact first record after the
    /// horizon ("hash chain broken"), and a replay to the horizon copied the forged head
    /// into a store that audited clean. Both now say the manifest disagrees with the
    /// store's meta (written by the same compaction), exit 4.
    @Test func anAlteredSnapshotManifestIsNamed() throws {
        let dir = TemporaryDirectory("snapshot-manifest")
        let data = try loadedStore(dir, Self.commands)
        let compact = try topicstore(["compact", "--data", data, "--retain", "0"])
        #expect(compact.status == 0, "\(compact.stderr)")
        let manifest = data + "/snapshots/5/snapshot.json"
        let text = try String(contentsOfFile: manifest, encoding: .utf8)
        let object = try #require(json(text) as [String: Any]?)
        let head = try #require(object["head"] as? String)
        #expect(try topicstore(["audit", "--data", data]).status == 0)
        let forged = String(head.dropLast()) + (head.last == "0" ? "1" : "0")
        try text.replacingOccurrences(of: head, with: forged).write(toFile: manifest, atomically: true, encoding: .utf8)

        let audit = try topicstore(["audit", "--data", data])
        #expect(audit.status == 4)
        #expect(audit.stderr.contains("snapshot.json gives the head at seq 5 as \(forged)") && audit.stderr.contains(head),
                "\(audit.stdout) \(audit.stderr)")
        let replay = try topicstore(["replay", "--data", data, "--to-seq", "5", "--out", dir.sub("out")])
        #expect(replay.status == 4 && replay.stderr.contains("snapshot.json"), "\(replay.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("out") + "/CURRENT"))
    }

    /// An archive altered in one line could only be found by its final head, after importing
    /// everything. Exports (and so archives) now carry the chain link every 4,096 records and
    /// on their last line; import checks each and names the interval, exit 4, nothing left.
    @Test func anAlteredLineIsLocatedByTheExportsCheckpoints() throws {
        let dir = TemporaryDirectory("checkpoints")
        let commands = (0..<5_000).map { i in
            #"{"project":"demo","type":"register","device_id":"D\#(i % 700)","topics":["t\#(i % 13)"]}"#
        }.joined(separator: "\n")
        let data = try loadedStore(dir, commands)
        let export = try topicstore(["export", "--data", data])
        #expect(export.status == 0)
        var lines = export.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 5_000)
        let withLink = lines.indices.filter { lines[$0].contains(#""link":""#) }.map { $0 + 1 }
        #expect(withLink == [4_096, 5_000], "\(withLink)")
        let audit = try topicstore(["audit", "--data", data, "--json"])
        let head = try #require(json(audit.stdout)["head"] as? [String: Any])
        #expect(lines[4_999].contains(#""link":"\#(head["hash"] as? String ?? "?")""#))
        // Untouched, it imports to the same head; `load` takes the same lines as commands.
        #expect(try topicstore(["import", "--data", dir.sub("same"), "-"], stdin: export.stdout).status == 0)
        #expect(try topicstore(["load", "--data", dir.sub("loaded"), "-"], stdin: export.stdout).status == 0)

        lines[4_499] = lines[4_499].replacingOccurrences(of: #""code":"t"#, with: #""code":"x"#)
        let altered = try topicstore(["import", "--data", dir.sub("altered"), "-"], stdin: lines.joined(separator: "\n"))
        #expect(altered.status == 4)
        #expect(altered.stderr.contains("line 5000 (seq 5000)") && altered.stderr.contains("from seq 4097 through 5000 was altered")
                && altered.stderr.contains("the checkpoint at seq 4096 matched"), "\(altered.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("altered")))
        lines[9] = lines[9].replacingOccurrences(of: #""code":"t"#, with: #""code":"x"#)
        let early = try topicstore(["import", "--data", dir.sub("early"), "-"], stdin: lines.joined(separator: "\n"))
        #expect(early.status == 4 && early.stderr.contains("from seq 1 through 4096"), "\(early.stderr)")
    }

    /// A log of the version before the chain, then chained records: its export carried
    /// checkpoints an import could not reproduce (it chains the old records), and import
    /// claimed tampering (a review). Old records are marked and stop the checkpoints.
    @Test func anExportOfALegacyLogImports() throws {
        let dir = TemporaryDirectory("legacy-export")
        let path = dir.sub("data")
        do {
            let store = try TopicStore(directory: path)
            defer { store.close() }
            try store.environment.write { txn in
                var link = ChainHash.genesis
                for seq in 1...10 as ClosedRange<UInt64> {
                    let record = LogRecord(sequence: seq, timestamp: 1_770_000_000_000 + Int64(seq),
                                           event: Event(project: "alpha", body: .register(deviceID: "d\(seq)", topics: [TopicSpec(code: "news")])))
                    let bytes = seq <= 5 ? try RecordCodec.encodeLegacyV1(record) : try RecordCodec.encode(record, chainingFrom: &link)
                    try txn.put(store.log.database, EventLog.key(seq), bytes, flags: .append)
                }
            }
        }
        let export = try topicstore(["export", "--data", path])
        #expect(export.status == 0, "\(export.stderr)")
        let lines = export.stdout.split(separator: "\n")
        #expect(lines.prefix(5).allSatisfy { $0.contains(#""unchained":true"#) } && !lines.dropFirst(5).contains { $0.contains("unchained") })
        #expect(!export.stdout.contains(#""link""#), "no checkpoint after an unchained record")
        let imported = try topicstore(["import", "--data", dir.sub("imported"), "-"], stdin: export.stdout)
        #expect(imported.status == 0, "\(imported.stdout) \(imported.stderr)")
        // An archive of the chained part alone, after the old records: its checkpoints are not checked either.
        let tail = try topicstore(["export", "--data", path, "--from-seq", "6"])
        #expect(tail.stdout.contains(#""link""#))
        let joined = lines.prefix(5).joined(separator: "\n") + "\n" + tail.stdout
        #expect(try topicstore(["import", "--data", dir.sub("joined"), "-"], stdin: joined).status == 0)
    }

    // MARK: a projections-only store

    /// `replay --projections-only` writes projections and no log: `topics` answered from them
    /// while history said "never created", audit listed differences and load appended to it.
    @Test func aProjectionsOnlyStoreSaysWhatItIs() throws {
        let dir = TemporaryDirectory("projections-only")
        let data = try loadedStore(dir, Self.commands)
        let po = dir.sub("po")
        let replay = try topicstore(["replay", "--data", data, "--to-seq", "6", "--out", po, "--projections-only"])
        #expect(replay.status == 0, "\(replay.stderr)")
        let topics = try topicstore(["topics", "--data", po, "--project", "demo"])
        #expect(topics.status == 0 && topics.stdout.contains("news  3 subscribers"), "\(topics.stdout)")
        let refusals: [[String]] = [
            ["history", "--data", po, "--project", "demo", "--topic", "news"],
            ["history", "--data", po, "--project", "demo", "--device", "D1"],
            ["audit", "--data", po],
            ["audit", "--data", po, "--json"],
            ["export", "--data", po],
            ["replay", "--data", po, "--to-seq", "6", "--out", dir.sub("again")],
        ]
        for args in refusals {
            let r = try topicstore(args)
            #expect(r.status == 1 && r.stdout.isEmpty, "\(args): \(r.status) \(r.stdout)")
            #expect(r.stderr.contains("\(po) holds projections only (as of seq 6) and no log"), "\(args): \(r.stderr)")
        }
        let load = try topicstore(["load", "--data", po, "-"], stdin: #"{"project":"demo","type":"register","device_id":"Z","topics":["news"]}"#)
        #expect(load.status == 1 && load.stderr.contains("holds projections only"), "\(load.stdout) \(load.stderr)")
        let stats = try topicstore(["stats", "--data", po])
        #expect(stats.stdout.contains("log: empty, projections at seq 6"), "\(stats.stdout)")
    }

    // MARK: history of an unknown project

    @Test func historyNamesAnUnknownProject() throws {
        let dir = TemporaryDirectory("history-noproject")
        let data = try loadedStore(dir, Self.commands)
        for what in [["--device", "D1"], ["--topic", "news"]] {
            let text = try topicstore(["history", "--data", data, "--project", "dmeo"] + what)
            #expect(text.status == 0)
            #expect(text.stderr.contains("no project named dmeo in this store"), "\(what): \(text.stderr)")
            let j = try topicstore(["history", "--data", data, "--project", "dmeo", "--json"] + what)
            #expect(j.status == 0 && json(j.stdout)["unknownProject"] as? Bool == true, "\(what): \(j.stdout)")
            let known = try topicstore(["history", "--data", data, "--project", "demo", "--json"] + what)
            #expect(known.stderr.isEmpty && json(known.stdout)["unknownProject"] == nil, "\(what): \(known.stdout)")
        }
    }

    // MARK: export

    @Test func exportAtTheHorizonSaysAtOrBefore() throws {
        let dir = TemporaryDirectory("export-at-horizon")
        let data = try loadedStore(dir, Self.commands)
        #expect(try topicstore(["compact", "--data", data, "--retain", "0"]).status == 0)
        let r = try topicstore(["export", "--data", data, "--to-seq", "5"])
        #expect(r.status == 1 && r.stderr.contains("--to-seq 5 is at or before the compaction horizon, seq 5"), "\(r.stderr)")
    }

    /// It stopped with the corruption alone; the records before it can still be exported.
    @Test func exportStoppedByADamagedRecordSaysHowToGetTheRest() throws {
        let dir = TemporaryDirectory("export-damaged")
        let data = try loadedStore(dir, Self.commands)
        try Self.damage(data, 4)
        let r = try topicstore(["export", "--data", data])
        #expect(r.status == 4, "corruption, as audit reports it")
        #expect(r.stderr.contains("sequence 4") && r.stderr.contains("--to-seq 3") && r.stderr.contains("--from-seq 5"), "\(r.stderr)")
        let before = try topicstore(["export", "--data", data, "--to-seq", "3"])
        #expect(before.status == 0 && before.stdout.split(separator: "\n").count == 3)
    }

    // MARK: audit --scratch

    /// It created every missing directory of the path.
    @Test func auditScratchCreatesOnlyItsLastComponent() throws {
        let dir = TemporaryDirectory("audit-scratch")
        let data = try loadedStore(dir, Self.commands)
        let deep = dir.sub("missing/scratch")
        let refused = try topicstore(["audit", "--data", data, "--scratch", deep])
        #expect(refused.status == 1 && refused.stderr.contains(dir.sub("missing")), "\(refused.status) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("missing")))
        let ok = try topicstore(["audit", "--data", data, "--scratch", dir.sub("scratch")])
        #expect(ok.status == 0, "\(ok.stdout) \(ok.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("scratch")), "the scratch directory it made was left behind")
    }
}
