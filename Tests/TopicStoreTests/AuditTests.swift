import EventJSON
import Foundation
import LMDB
import Projections
import Replay
import SubscriptionLog
import Testing
import TopicStore

@Suite("Audit")
struct AuditTests {
    @Test("a healthy store audits clean and names its head")
    func clean() throws {
        let dir = ReplayTempDir("clean")
        let store = try TopicStore(directory: dir.sub("live"))
        try HashChainTests.fill(store, count: 300, seed: 4)
        var options = Audit.Options()
        options.recordsPerReadTransaction = 41
        options.entriesPerComparison = 17   // many chunks
        let report = try Audit.run(store, options: options)
        #expect(report.isClean, "\(report.logIssues) \(report.differences.prefix(3))")
        #expect(report.head == (try store.read { txn in try store.chainHead(txn) }))
        #expect(report.recordsChecked == 300)
        let entries = try store.read { txn in try store.tables.all.reduce(0) { $0 + (try txn.statistics($1).entries) } }
        #expect(report.entriesCompared == entries)
    }

    /// An operator review found a killed audit's rebuild left in the temporary directory each time.
    @Test("an audit removes the rebuilds of killed audits, and only theirs")
    func abandonedScratch() throws {
        let dir = ReplayTempDir("scratch")
        let store = try TopicStore(directory: dir.sub("live"))
        try HashChainTests.fill(store, count: 20, seed: 5)
        let scratch = dir.sub("scratch")
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let dead = scratch + "/topicstore-audit-\(gone.processIdentifier)-DEADBEEF", alive = scratch + "/topicstore-audit-1-0000ABCD"
        let other = scratch + "/something-else"
        for d in [dead, alive, other] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        var options = Audit.Options()
        options.scratchDirectory = scratch
        #expect(try Audit.run(store, options: options).isClean)
        #expect(!FileManager.default.fileExists(atPath: dead))
        #expect(FileManager.default.fileExists(atPath: alive) && FileManager.default.fileExists(atPath: other))
    }

    @Test("tampered projections are reported entry by entry: project, topic or device, both sides")
    func tamperedProjections() throws {
        let dir = ReplayTempDir("tamper")
        let store = try TopicStore(directory: dir.sub("live"))
        try store.submitAndWait(Event(project: "alpha", body: .token(deviceID: "d1", token: "tokA", platform: .ios)))
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "d1", topics: [TopicSpec(code: "news")])))
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "d2", topics: [TopicSpec(code: "news")])))
        #expect(try Audit.run(store).isClean)
        // Someone removes d2's topic list and adds a stray device.
        let tables = store.tables
        try store.environment.write { txn in
            let d2: [UInt8] = [0, 0, 0, 1, 0, 0, 0, 1]
            #expect(try txn.delete(tables.deviceTopics, d2))
            // A device record with no token: flags, platform, token time, rejected at, device_id, empty token.
            let forged: [UInt8] = [0, 0] + [UInt8](repeating: 0, count: 16) + [0, 6] + Array("forged".utf8) + [0, 0]
            try txn.put(tables.devices, [0, 0, 0, 1, 0, 0, 0, 7], forged)
        }
        let report = try Audit.run(store)
        #expect(!report.isClean)
        #expect(report.logIssueCount == 0)
        #expect(report.differenceCount == 2)
        let membership = try #require(report.differences.first { $0.table == "device_topics" })
        #expect(membership.project == "alpha")
        #expect(membership.subject == "device d2 topics")
        #expect(membership.live == nil && membership.rebuilt == "news")
        let forged = try #require(report.differences.first { $0.table == "devices" })
        #expect(forged.subject == "device forged (ordinal 7)" && forged.rebuilt == nil)
        #expect(forged.live == "device_id forged, token none, platform none, state no-token, token time 0")
        #expect(report.differences.allSatisfy { $0.asOfSeq == 3 })
    }

    @Test("audit runs while a writer is writing, without blocking it, and finds nothing wrong")
    func auditWhileWriting() throws {
        let dir = ReplayTempDir("concurrent")
        let store = try TopicStore(directory: dir.sub("live"))
        try HashChainTests.fill(store, count: 2000, seed: 11)
        let stop = ReplayFlag()
        let counter = ReplayCounter()
        let writer = Thread {
            var workload = ReplayWorkload(seed: 12)
            while !stop.isSet {
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let events = (0..<10).map { _ in workload.next(now: now) }
                for r in store.submitAndWait(events) where (try? r.get()) != nil { counter.add() }
            }
            stop.done()
        }
        writer.start()
        while counter.value < 50 { Thread.sleep(forTimeInterval: 0.001) }
        var options = Audit.Options()
        options.recordsPerReadTransaction = 300
        options.entriesPerComparison = 50
        let before = counter.value
        // In the middle of the comparison, give the writer (up to 10 s on a busy machine)
        // to commit: it must not be blocked by the audit's bounded read transactions.
        var waited = false
        let report = try Audit.run(store, options: options) { p in
            guard p.phase == "compare", !waited else { return }
            waited = true
            let start = counter.value
            let deadline = Date().addingTimeInterval(10)
            while counter.value < start + 10 && Date() < deadline { Thread.sleep(forTimeInterval: 0.001) }
        }
        let during = counter.value - before
        stop.set()
        stop.waitDone()
        #expect(report.isClean, "\(report.logIssues.prefix(3)) \(report.differences.prefix(3))")
        #expect(during > 0, "the writer made no progress during the audit")
        #expect(report.comparedAsOf > 2000)
        // The audit caught up with writes made while it ran.
        #expect(report.recordsChecked == report.head!.sequence)
        #expect(try Audit.run(store).isClean)
    }

    @Test("export → import into an empty store reproduces the log, the chain head and every projection")
    func exportImportRoundTrip() throws {
        let dir = ReplayTempDir("roundtrip")
        let store = try TopicStore(directory: dir.sub("live"))
        try HashChainTests.fill(store, count: 700, seed: 21)
        var lines: [String] = []
        let summary = try Export.lines(from: store, recordsPerReadTransaction: 64) { lines.append($0) }
        #expect(summary.records == 700 && lines.count == 700)
        // The lines are in load's schema: the same events come back.
        let events = try store.read { txn -> [Event] in
            var out: [Event] = []
            try store.log.forEach(txn) { out.append($0.event); return true }
            return out
        }
        for (line, event) in zip(lines, events) { #expect(try EventJSONRoundTrip.event(line) == event) }

        let head: ChainHead? = try {
            // The importer holds its environment until it is released: one open copy per process.
            let importer = try Importer(creating: dir.sub("imported"), recordsPerCommit: 97)
            for (i, line) in lines.enumerated() { try importer.add(try Importer.record(fromLine: line, lineNumber: i + 1)) }
            return try importer.finish()
        }()
        #expect(head == (try store.read { txn in try store.chainHead(txn) }))
        let imported = try replayOpenReadOnly(dir.sub("imported"))
        #expect(replayDumpDifferences(try replayDumpTables(store), try replayDumpTables(imported)).isEmpty)
        #expect(try Audit.run(imported).isClean)

        // A range exports just that range.
        var part: [String] = []
        let s = try Export.lines(from: store, from: 100, through: 199) { part.append($0) }
        #expect(s.firstSequence == 100 && s.lastSequence == 199 && Array(part.dropLast()) == Array(lines[99..<198]))
        // Its last line carries the chain link there (a checkpoint), as the whole export's last does.
        let link = try store.read { txn in try store.chainLink(at: 200 - 1, txn) }
        #expect(part.last == String(lines[198].dropLast()) + ",\"link\":\"\(link.hex)\"}")
        #expect(lines.last?.hasSuffix(",\"link\":\"\(try store.read { txn in try store.chainHead(txn) }!.hash.hex)\"}") == true)
        // An import must start at 1 and be gap-free.
        let bad = try Importer(creating: dir.sub("bad"))
        #expect(throws: ReplayError.self) { try bad.add(try Importer.record(fromLine: lines[1], lineNumber: 1)) }
    }

    @Test("import keeps the records earlier versions let in: blank titles and device ids, titles counted in characters")
    func importKeepsOlderRecordsAsTheyAre() throws {
        // Commands are held to today's rules (a blank title is no title, a blank device id is
        // refused, titles count code points); a record already in a log is not a command, and
        // an import that refused or changed it would not rebuild the same log and chain.
        let dir = ReplayTempDir("older-records")
        let long = "e" + String(repeating: "\u{301}", count: 299)   // one character, 300 code points
        let events = [
            Event(project: "demo", body: .register(deviceID: "   ", topics: [TopicSpec(code: "a", title: ""), TopicSpec(code: "b", title: "  ")])),
            Event(project: "demo", body: .register(deviceID: "D1", topics: [TopicSpec(code: "c", title: long)])),
            Event(project: "demo", body: .token(deviceID: "   ", token: "t1", platform: .ios)),
            Event(project: "demo", body: .tokenRejected(token: "t1", rejectedAt: 1_764_100_807_728, reason: long)),
        ]
        let lines = events.enumerated().map { EventJSON.line(LogRecord(sequence: UInt64($0.offset + 1), timestamp: 1_764_100_000_000, event: $0.element)) }
        try {
            let importer = try Importer(creating: dir.sub("imported"))
            for (i, line) in lines.enumerated() { try importer.add(try Importer.record(fromLine: line, lineNumber: i + 1)) }
            _ = try importer.finish()
        }()
        let imported = try replayOpenReadOnly(dir.sub("imported"))
        #expect(try allRecords(imported).map(\.event) == events)
        #expect(try Audit.run(imported).isClean)
    }

    @Test("history: the device timeline and topic flow agree with replayed projections at every entry")
    func historyMatchesReplay() throws {
        let dir = ReplayTempDir("history")
        let store = try TopicStore(directory: dir.sub("live"))
        try HashChainTests.fill(store, count: 400, seed: 31)
        let timeline = try History.device("dev-3", project: "alpha", in: store, recordsPerReadTransaction: 29)
        let flow = try History.topic("news", project: "alpha", in: store, recordsPerReadTransaction: 29)
        #expect(timeline.entries.count > 10 && flow.points.count > 5)
        #expect(Set(timeline.entries.map(\.kind)).isSuperset(of: [.token, .register, .unregister]))
        var checked = 0
        for (i, entry) in timeline.entries.enumerated() where i % 3 == 0 || i == timeline.entries.count - 1 {
            let out = dir.sub("d\(entry.sequence)")
            try Replay.rebuild(from: store, to: .sequence(entry.sequence), into: out)
            let replayed = try replayOpenReadOnly(out)
            let info = try replayed.read { txn -> DeviceInfo? in
                guard let p = try replayed.reader.project(named: "alpha", txn) else { return nil }
                return try replayed.reader.device(p.id, deviceID: "dev-3", txn)
            }
            #expect(Set(info?.topics ?? []) == Set(entry.topics), "seq \(entry.sequence)")
            #expect((info?.record.state.rawValue ?? "absent") == entry.state, "seq \(entry.sequence) \(entry.kind)")
            #expect(info?.record.token == entry.token, "seq \(entry.sequence)")
            checked += 1
        }
        for (i, point) in flow.points.enumerated() where i % 4 == 0 || i == flow.points.count - 1 {
            let out = dir.sub("t\(point.sequence)")
            try Replay.rebuild(from: store, to: .sequence(point.sequence), into: out)
            let replayed = try replayOpenReadOnly(out)
            let subscribers = try replayed.read { txn -> Int in
                let p = try #require(try replayed.reader.project(named: "alpha", txn))
                let tid = try #require(try replayed.reader.topicID(p.id, code: "news", txn))
                return Int(try #require(try replayed.reader.topic(p.id, tid, txn)).subscribers)
            }
            #expect(subscribers == point.subscribers, "seq \(point.sequence)")
            checked += 1
        }
        #expect(checked > 8)
        let svg = SubscriberChart.svg(flow)
        #expect(svg.hasPrefix("<svg") && svg.contains("<path d=\"M") && svg.contains("subscribers") && svg.contains("time (UTC)"))
    }
}

/// The export schema is load's schema: decode a line as `load` does.
enum EventJSONRoundTrip {
    static func event(_ line: String) throws -> Event {
        try EventJSON.event(fromLine: line)
    }
}

final class ReplayFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false
    private let finished = DispatchSemaphore(value: 0)
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return flag }
    func set() { lock.lock(); flag = true; lock.unlock() }
    func done() { finished.signal() }
    func waitDone() { finished.wait() }
}

final class ReplayCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
    func add() { lock.lock(); n += 1; lock.unlock() }
}
