import Foundation
import LMDB
import Projections
import Replay
import SubscriptionLog
import Synchronization
import Testing
import TopicStore

/// The in-memory build (the default for replay, audit and import) against the
/// write-through build and the live store, including builds written in many
/// budget rounds, where removals must delete what an earlier round wrote.
@Suite("Replay memory build")
struct ReplayMemoryBuildTests {
    /// Random commands plus, every batch, a device and a topic made to be
    /// forgotten and dropped two batches later and a token rejected and expired,
    /// so removals reach entries written in earlier rounds.
    static func runWorkload(_ store: TopicStore, seed: UInt64, batches: Int) throws -> [UInt64: ReplayTableDump] {
        var workload = ReplayWorkload(seed: seed)
        var dumps: [UInt64: ReplayTableDump] = [:]
        for batch in 0..<batches {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            var events = (0..<25).map { _ in workload.next(now: now) }
            let project = workload.projects[batch % 2]
            events += [
                Event(project: project, body: .register(deviceID: "gone-\(batch)", topics: [TopicSpec(code: "temp-\(batch)")])),
                Event(project: project, body: .token(deviceID: "expiring-\(batch)", token: "old-\(batch)", platform: .android)),
                Event(project: project, body: .tokenRejected(token: "old-\(batch)", rejectedAt: now + 60_000, reason: "Unregistered")),
            ]
            if batch >= 2 {
                let earlier = batch - 2
                let p = workload.projects[earlier % 2]
                events += [
                    Event(project: p, body: .unregisterAll(deviceID: "gone-\(earlier)")),
                    Event(project: p, body: .forgetDevice(deviceID: "gone-\(earlier)")),
                    Event(project: p, body: .dropTopic(code: "temp-\(earlier)")),
                    Event(project: p, body: .expireToken(token: "old-\(earlier)")),
                ]
            }
            var last: UInt64 = 0
            for result in store.submitAndWait(events) { last = try result.get().sequence }
            dumps[last] = try replayDumpTables(store)
        }
        return dumps
    }

    /// Rebuilds `store` through `last` in one round, in a round per read
    /// transaction of `recordsPerReadTransaction` records, and (when asked)
    /// written through, expecting every table to equal `live`.
    static func expectRebuildsEqual(_ live: ReplayTableDump, _ store: TopicStore, through last: UInt64, in dir: ReplayTempDir,
                                    recordsPerReadTransaction: Int, writeThrough: Bool) throws {
        var builds: [String: Replay.Options] = [:]
        var oneRound = Replay.Options()
        oneRound.memoryBudget = 1 << 30
        builds["one-round"] = oneRound
        var rounds = Replay.Options()
        rounds.memoryBudget = 1
        rounds.recordsPerReadTransaction = recordsPerReadTransaction
        builds["rounds"] = rounds
        if writeThrough {
            var through = Replay.Options()
            through.memoryBudget = nil
            builds["write-through"] = through
        }
        for (name, options) in builds.sorted(by: { $0.key < $1.key }) {
            let out = dir.sub(name)
            try Replay.rebuild(from: store, to: .sequence(last), into: out, options: options)
            let diff = replayDumpDifferences(live, try replayDumpTables(try replayOpenReadOnly(out)))
            #expect(diff.isEmpty, "\(name): \(diff.prefix(5))")
        }
    }

    @Test("memory build equals write-through and live at many points, in one round and in many", arguments: [11, 12] as [UInt64])
    func memoryBuildEqualsWriteThroughAndLive(seed: UInt64) throws {
        let dir = ReplayTempDir("memory-build-\(seed)")
        let store = try TopicStore(directory: dir.sub("live"))
        let dumps = try Self.runWorkload(store, seed: seed, batches: 12)
        let points = dumps.keys.sorted()
        // The removals really happened, and to entries of earlier batches.
        let final = dumps[points.last!]!
        let devices = try final["devices"]!.values.map { v in try v.withUnsafeBytes { try DeviceRecord(decoding: $0, at: "test") } }
        func hasDevice(_ id: String) -> Bool { devices.contains { $0.deviceID == id } }
        #expect(hasDevice("gone-11"))
        #expect(!hasDevice("gone-1"))
        #expect(!final["topic_codes"]!.keys.contains { String(decoding: $0.dropFirst(4), as: UTF8.self) == "temp-1" })
        #expect(devices.contains { $0.token != nil } && !devices.contains { $0.token == "old-1" }, "no device holds the expired token")

        for (i, seq) in points.enumerated() where i % 3 == 2 || i == points.count - 1 {
            var builds: [String: Replay.Options] = [:]
            var oneRound = Replay.Options()
            oneRound.memoryBudget = 1 << 30
            builds["one-round"] = oneRound
            var rounds = Replay.Options()
            rounds.memoryBudget = 1            // a round after every commit
            rounds.recordsPerCommit = 20
            rounds.recordsPerReadTransaction = 13
            builds["rounds"] = rounds
            var through = Replay.Options()
            through.memoryBudget = nil
            through.recordsPerCommit = 20
            builds["write-through"] = through
            var projectionsOnly = rounds
            projectionsOnly.includeLog = false
            builds["rounds-projections-only"] = projectionsOnly

            for (name, options) in builds.sorted(by: { $0.key < $1.key }) {
                let out = dir.sub("\(name)-\(seq)")
                let report = try Replay.rebuild(from: store, to: .sequence(seq), into: out, options: options)
                #expect(report.through == seq)
                switch name {
                case "one-round", "write-through": #expect(report.rounds == 0)
                default: #expect(report.rounds >= Int(seq) / 40, "\(name): \(report.rounds) rounds for \(seq) records")
                }
                let replayed = try replayOpenReadOnly(out)
                var live = dumps[seq]!
                if !options.includeLog { live["log"] = [:] }
                let diff = replayDumpDifferences(live, try replayDumpTables(replayed))
                #expect(diff.isEmpty, "\(name) at seq \(seq): \(diff.prefix(5))")
                // The first write of a build into the empty store lays the file out
                // itself (`PageFileWriter`): a file LMDB's own checks walk clean, with
                // no free page, as no commit of LMDB's made it (the later rounds' do).
                let structure = try replayed.environment.checkStructure()
                #expect(structure.isSound, "\(name) at seq \(seq): \(structure.issues.prefix(3))")
                if name == "one-round" { #expect(structure.freePages == 0, "one-round at seq \(seq)") }
            }
        }
    }

    /// The log reader's thread frees the chunks the fold hands back after it has read the log,
    /// until the rebuild closes the pipeline: a rebuild that did not close it would leave the
    /// thread waiting for ever, one per rebuild.
    @Test("every rebuild's log reader thread ends")
    func readerThreadsEnd() throws {
        let dir = ReplayTempDir("memory-build-reader-threads")
        let store = try TopicStore(directory: dir.sub("live"))
        _ = try Self.runWorkload(store, seed: 13, batches: 3)
        /// Threads of this process named for the replay reader (`ChunkPipeline.threadName`).
        @Sendable func readerThreads() -> Int {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            return tasks.filter { task in
                let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
                return comm == "replay-reader\n"
            }.count
        }
        // The name reaches the kernel: while a rebuild reads, its reader is there to be counted.
        let seen = Mutex(false), stop = Mutex(false)
        let watcher = Thread {
            while !stop.withLock({ $0 }) {
                if readerThreads() > 0 { seen.withLock { $0 = true } }
                Thread.sleep(forTimeInterval: 0.0005)
            }
        }
        watcher.start()
        defer { stop.withLock { $0 = true } }
        for i in 0..<40 {
            let report = try Replay.rebuild(from: store, to: .end, into: dir.sub("out-\(i)"))
            #expect(report.events > 0)
        }
        let watchUntil = Date().addingTimeInterval(10)
        while !seen.withLock({ $0 }) && Date() < watchUntil {
            _ = try Replay.rebuild(from: store, to: .end, into: dir.sub("out-watched-\(UUID())"))
        }
        stop.withLock { $0 = true }
        #expect(seen.withLock { $0 }, "no thread named replay-reader was seen")
        // Tests running beside this one rebuild too: a few reader threads may be alive, not forty.
        let deadline = Date().addingTimeInterval(10)
        while readerThreads() >= 20 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(readerThreads() < 20)
    }

    /// A build finds topic lists by device ordinal and writes device_topics in
    /// that order without sorting: lists created out of ordinal order, in
    /// projects seen in the opposite order of their ids, must still come out
    /// in key order and equal to the write-through build.
    @Test("memberships created out of ordinal order, across projects, build the same tables")
    func membershipsOutOfOrder() throws {
        let dir = ReplayTempDir("memory-build-memberships")
        let store = try TopicStore(directory: dir.sub("live"))
        var events: [Event] = []
        for p in ["zeta", "alpha"] {  // zeta gets the lower project id
            for d in 0..<6 { events.append(Event(project: p, body: .token(deviceID: "\(p)-\(d)", token: "t-\(p)-\(d)", platform: .ios))) }
        }
        // Topic lists appear from the highest ordinal down, the projects interleaved.
        for d in (0..<6).reversed() {
            for p in ["alpha", "zeta"] {
                events.append(Event(project: p, body: .register(deviceID: "\(p)-\(d)", topics: [TopicSpec(code: "news"), TopicSpec(code: "t\(d % 3)")])))
            }
        }
        events.append(Event(project: "alpha", body: .unregisterAll(deviceID: "alpha-3")))
        events.append(Event(project: "zeta", body: .unregister(deviceID: "zeta-4", codes: ["news"])))
        events.append(Event(project: "zeta", body: .register(deviceID: "zeta-new", topics: [TopicSpec(code: "news")])))
        var last: UInt64 = 0
        for result in store.submitAndWait(events) { last = try result.get().sequence }
        let live = try replayDumpTables(store)
        #expect(live["device_topics"]!.count == 12)

        try Self.expectRebuildsEqual(live, store, through: last, in: dir, recordsPerReadTransaction: 5, writeThrough: true)
    }

    /// A build remembers recently resolved topic codes: a code dropped and
    /// created again (a new topic id) must not resolve to the old id, in one
    /// round or across rounds, and two projects' equal codes stay apart.
    @Test("a topic code dropped and created again resolves to its new topic in a build")
    func topicCodeRecreated() throws {
        let dir = ReplayTempDir("memory-build-codes")
        let store = try TopicStore(directory: dir.sub("live"))
        var events: [Event] = []
        for p in ["one", "two"] {
            events.append(Event(project: p, body: .register(deviceID: "d-\(p)", topics: [TopicSpec(code: "news"), TopicSpec(code: "promo")])))
        }
        events += [
            Event(project: "one", body: .unregister(deviceID: "d-one", codes: ["promo"])),
            Event(project: "one", body: .dropTopic(code: "promo")),
            Event(project: "one", body: .register(deviceID: "d-one", topics: [TopicSpec(code: "promo", title: "Promotions")])),
            Event(project: "one", body: .register(deviceID: "d-other", topics: [TopicSpec(code: "promo"), TopicSpec(code: "news")])),
            Event(project: "two", body: .unregister(deviceID: "d-two", codes: ["promo"])),
        ]
        var last: UInt64 = 0
        for result in store.submitAndWait(events) { last = try result.get().sequence }
        let live = try replayDumpTables(store)
        #expect(live["topics"]!.count == 4)  // one: news and the new promo; two: news, promo

        try Self.expectRebuildsEqual(live, store, through: last, in: dir, recordsPerReadTransaction: 2, writeThrough: false)
    }

    @Test("an audit whose rebuild is written in many rounds is clean, and still finds a difference")
    func auditAcrossRounds() throws {
        let dir = ReplayTempDir("memory-build-audit")
        let store = try TopicStore(directory: dir.sub("live"))
        _ = try Self.runWorkload(store, seed: 13, batches: 8)
        var options = Audit.Options()
        options.memoryBudget = 1
        options.recordsPerCommit = 17
        options.scratchDirectory = dir.sub("scratch")
        try FileManager.default.createDirectory(atPath: options.scratchDirectory, withIntermediateDirectories: true)
        let clean = try Audit.run(store, options: options)
        #expect(clean.isClean, "\(clean.logIssues.prefix(3)) \(clean.differences.prefix(3))")
        #expect(clean.entriesCompared > 100)

        // A projection entry changed behind the fold's back must show up.
        let tables = store.tables
        try store.environment.write { txn in
            // pid 1, then (schema 11) 0x7F + the code's length, then the code.
            try txn.put(tables.topicCodes, [0, 0, 0, 1, 0x7F + 6] + Array("forged".utf8), [0, 0, 0, 16])
        }
        let dirty = try Audit.run(store, options: options)
        #expect(!dirty.isClean)
        #expect(dirty.differenceCount == 1)
        #expect(dirty.differences.first?.table == "topic_codes")
    }
}
