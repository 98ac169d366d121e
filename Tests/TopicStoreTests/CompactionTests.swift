import Compaction
import Foundation
import LMDB
import Replay
import SubscriptionLog
import Testing
import TopicStore

@Suite struct CompactionFormatTests {
    @Test func durationsParseAndPrint() {
        #expect(RetentionDuration(parsing: "30d")?.milliseconds ?? -1 == Int64(30 * 86_400_000))
        #expect(RetentionDuration(parsing: "12h")?.milliseconds ?? -1 == Int64(12 * 3_600_000))
        #expect(RetentionDuration(parsing: "90m")?.milliseconds ?? -1 == Int64(90 * 60_000))
        #expect(RetentionDuration(parsing: "1d12h")?.milliseconds ?? -1 == Int64(36 * 3_600_000))
        #expect(RetentionDuration(parsing: "2w")?.milliseconds ?? -1 == Int64(14 * 86_400_000))
        #expect(RetentionDuration(parsing: "500ms")?.milliseconds ?? -1 == Int64(500))
        #expect(RetentionDuration(parsing: "0")?.milliseconds ?? -1 == Int64(0))
        for bad in ["", "30", "d", "3x", "-1d", "1.5d", "99999999999999999999d"] {
            #expect(RetentionDuration(parsing: bad) == nil, "\(bad) parsed")
        }
        #expect(RetentionDuration(parsing: "1d12h")?.description == "1d12h")
        #expect(RetentionDuration(parsing: "90m")?.description == "1h30m")
    }

    @Test func zstdRoundTripsStreamsAndConcatenatedFrames() throws {
        let dir = TemporaryDirectory("zstd")
        var rng = SeededRandom(seed: 5)
        // Compressible text and incompressible noise, several MB, in two frames back to back.
        var first: [UInt8] = []
        for i in 0..<120_000 { first += Array("{\"seq\":\(i),\"project\":\"demo\",\"type\":\"register\"}\n".utf8) }
        let second: [UInt8] = (0..<1_500_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let path = dir.sub("x.zst")
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        for part in [first, second] {
            let z = try ZstdCompressor(fd: fd, level: 3)
            try z.write(part)
            try z.finish()
        }
        close(fd)
        let compressed = [UInt8](FileManager.default.contents(atPath: path)!)
        #expect(ZstdFormat.hasMagic(compressed))
        #expect(compressed.count < first.count / 5 + second.count + 1000)
        #expect(try ZstdDecompressor.decompress(compressed) == first + second)

        let input = try MaybeCompressedInput(path: path)
        var streamed: [UInt8] = []
        while try input.read(into: &streamed) {}
        #expect(input.isCompressed)
        #expect(streamed == first + second)

        // A truncated file is an error, not a short success.
        let cut = dir.sub("cut.zst")
        _ = FileManager.default.createFile(atPath: cut, contents: Data(compressed[0..<compressed.count / 3]))
        let truncated = try MaybeCompressedInput(path: cut)
        var partial: [UInt8] = []
        #expect(throws: ZstdError.self) { while try truncated.read(into: &partial) {} }
        // Plain input passes through untouched.
        let plain = dir.sub("plain.jsonl")
        _ = FileManager.default.createFile(atPath: plain, contents: Data(first))
        let p = try MaybeCompressedInput(path: plain)
        var same: [UInt8] = []
        while try p.read(into: &same) {}
        #expect(!p.isCompressed && same == first)
    }

    @Test func archiveRangesParse() {
        #expect(Archive.fileName(from: 1, to: 250) == "log-1-250.jsonl.zst")
        #expect(Archive.range(ofFileName: "log-1-250.jsonl.zst") == 1...250)
        #expect(Archive.range(ofFileName: "log-9-2.jsonl.zst") == nil)
        #expect(Archive.range(ofFileName: "log-1-2.jsonl") == nil)
    }
}

@Suite struct CompactionTests {
    /// Root's nightly cron compacting the store of a server that runs as a
    /// service user would leave it files it cannot open: refused, naming both
    /// users. A dry run writes nothing and is allowed. (Needs root to hand the
    /// file to another user; CI and these machines run as root.)
    @Test func compactionRefusesAStoreOfAnotherUser() throws {
        guard geteuid() == 0 else { return }
        let dir = TemporaryDirectory("compact-owner")
        let (store, cut) = try storeWithCut(dir, before: 80, after: 20, seed: 5)
        store.close()
        let data = TopicStore.generationDirectory(dir.sub("data"), try TopicStore.activeGeneration(in: dir.sub("data"))) + "/data.mdb"
        #expect(chown(data, 65534, 65534) == 0)
        let options = compactionOptions(keepingFrom: cut)
        do {
            _ = try Compactor.run(directory: dir.sub("data"), options: options)
            Issue.record("compacted another user's store")
        } catch let error as CompactionError {
            #expect("\(error)".contains("belongs to") && "\(error)".contains("uid 65534") && "\(error)".contains("uid 0"), "\(error)")
        }
        #expect(try TopicStore.activeGeneration(in: dir.sub("data")) == "", "nothing was switched")
        var dry = options
        dry.dryRun = true
        #expect(try Compactor.run(directory: dir.sub("data"), options: dry).dryRun)
        #expect(chown(data, 0, 0) == 0)
        #expect(try Compactor.run(directory: dir.sub("data"), options: options).generationAfter != "")
    }

    /// A process started while a compaction runs (the server spawning a child, a parallel test)
    /// must not inherit the compaction's lock: it would keep the store "busy" for as long as it
    /// lives, and every later compaction would be refused. Foundation's `Process` closes the
    /// descriptors it sees open when it prepares the spawn; one opened by another thread after
    /// that is inherited unless it is close-on-exec. (Found by CI: a test's second compaction was
    /// refused while the suite's other tests were starting children.) At every step of a run,
    /// each descriptor open on the store's files is close-on-exec.
    @Test func everyDescriptorACompactionHoldsIsCloseOnExec() throws {
        let dir = TemporaryDirectory("compact-cloexec")
        let (store, cut) = try storeWithCut(dir, before: 40, after: 10, seed: 9)
        store.close()
        final class Seen: @unchecked Sendable { var steps: [String] = []; var inherited: [String] = [] }
        let seen = Seen()
        let root = URL(fileURLWithPath: dir.path).resolvingSymlinksInPath().path
        var options = compactionOptions(keepingFrom: cut, archive: dir.sub("archive"))
        options.testHook = { step in
            seen.steps.append(step)
            for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
                guard let fd = Int32(name),
                      let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
                      target.hasPrefix(root) else { continue }
                let flags = fcntl(fd, F_GETFD)
                if flags >= 0, flags & FD_CLOEXEC == 0 { seen.inherited.append("\(step): fd \(fd) on \(target)") }
            }
        }
        _ = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(seen.steps.contains("copy") && seen.steps.contains("switch"), "\(seen.steps)")
        #expect(seen.inherited.isEmpty, "\(seen.inherited)")
    }

    /// A store with `before` events, then a cut time, then `after` more events.
    func makeStore(_ dir: TemporaryDirectory, before: Int, after: Int, seed: UInt64) throws -> (TopicStore, Int64) {
        try storeWithCut(dir, before: before, after: after, seed: seed)
    }

    /// Tokens changed in random device order leave the devices table's leaves part empty
    /// (LMDB splits a full leaf in two and never packs them again); the new generation is
    /// written with full leaves, holding the same projections.
    @Test func theNewGenerationIsPacked() throws {
        let dir = TemporaryDirectory("compact-packed")
        let store = try TopicStore(directory: dir.sub("data"))
        let ids = (0..<4_000).map { "device-\($0)" }
        for start in stride(from: 0, to: ids.count, by: 500) {
            let batch = ids[start..<start + 500].map { Event(project: "p", body: .token(deviceID: $0, token: "short-\($0)", platform: .ios)) }
            for r in store.submitAndWait(batch) { _ = try r.get() }
        }
        var random = SeededRandom(seed: 9)
        for _ in 0..<8 {
            let batch = (0..<500).map { _ -> Event in
                let id = random.pick(ids)
                return Event(project: "p", body: .token(deviceID: id, token: id + "." + String(repeating: "t", count: 60 + random.int(100)), platform: .android))
            }
            for r in store.submitAndWait(batch) { _ = try r.get() }
        }
        let devices = store.tables.devices
        let leavesBefore = try store.read { txn in try txn.statistics(devices).leafPages }
        let dumpBefore = try ProjectionDump.of(store)
        store.close()

        let report = try Compactor.run(directory: dir.sub("data"), options: Compactor.Options(retain: RetentionDuration(milliseconds: 0)))
        #expect(report.generationAfter != report.generationBefore)
        let after = try TopicStore(directory: dir.sub("data"))
        defer { after.close() }
        let (leavesAfter, entries) = try after.read { txn in
            let s = try txn.statistics(after.tables.devices)
            return (s.leafPages, s.entries)
        }
        #expect(entries == ids.count)
        #expect(leavesAfter * 5 < leavesBefore * 4, "devices: \(leavesBefore) leaves before, \(leavesAfter) after")
        var dumpAfter = try ProjectionDump.of(after)
        dumpAfter.tables["meta"]?.removeValue(forKey: Array("compactedHead".utf8))
        #expect(dumpAfter == dumpBefore, "\(dumpAfter.differences(from: dumpBefore))")
        let audit = try Audit.run(after)
        #expect(audit.isClean, "\(audit.logIssues) \(audit.differences)")
    }

    /// A snapshot's pages are as full as a packed copy of it would make them: written
    /// once in key order by a rebuild from nothing (no packed copy is then made), or
    /// packed after a rebuild on top of the previous snapshot.
    @Test func snapshotsArePacked() throws {
        let dir = TemporaryDirectory("compact-snapshot-packed")
        let store = try TopicStore(directory: dir.sub("data"))
        var random = SeededRandom(seed: 11)
        func churn(_ commands: Int) throws {
            let batch = (0..<commands).map { _ -> Event in
                let id = "device-\(random.int(6_000))"
                return random.int(2) == 0
                    ? Event(project: "p", body: .token(deviceID: id, token: id + "." + String(repeating: "t", count: 60 + random.int(100)), platform: .android))
                    : Event(project: "p", body: .register(deviceID: id, topics: [TopicSpec(code: "t\(random.int(300))")]))
            }
            for start in stride(from: 0, to: batch.count, by: 500) {
                for r in store.submitAndWait(Array(batch[start..<min(start + 500, batch.count)])) { _ = try r.get() }
            }
        }
        func isPacked(_ snapshotDirectory: String) throws {
            var options = Environment.Options()
            options.readOnly = true
            options.maxDatabases = 32
            let env = try Environment(path: snapshotDirectory, options: options)
            let packed = dir.sub("packed-\(UInt64.random(in: 0..<UInt64.max))")
            try FileManager.default.createDirectory(atPath: packed, withIntermediateDirectories: true)
            _ = try PackedCopy.copy(env, to: packed)
            let copy = try Environment(path: packed, options: options)
            let (mine, theirs) = (try env.checkStructure(), try copy.checkStructure())
            #expect(mine.isSound && theirs.isSound)
            for table in theirs.tables where !table.name.hasPrefix("(") {
                let held = try #require(mine.tables.first { $0.name == table.name })
                #expect(held.entries == table.entries && held.leafPages <= table.leafPages + 1,
                        "\(table.name): \(held.leafPages) leaf pages for \(held.entries) entries, packed \(table.leafPages) for \(table.entries)")
            }
            #expect(mine.tables.first { $0.name == "devices" }.map { $0.entries > 1_000 } == true)
        }
        func newestSnapshot() throws -> String {
            let folder = Snapshot.folder(inStore: dir.sub("data"))
            let horizons = try FileManager.default.contentsOfDirectory(atPath: folder).compactMap(UInt64.init)
            return Snapshot.directory(inStore: dir.sub("data"), horizon: try #require(horizons.max()))
        }
        try churn(12_000)
        store.close()
        // The first compaction rebuilds from nothing, in one round: written in key order.
        _ = try Compactor.run(directory: dir.sub("data"), options: Compactor.Options(retain: RetentionDuration(milliseconds: 0)))
        try isPacked(try newestSnapshot())
        // The next continues from that snapshot: its rebuild inserts in random key order, then packs.
        // Tokens of random devices grow: rewritten in place, their pages split.
        let again = try TopicStore(directory: dir.sub("data"))
        let first = try newestSnapshot()
        let grown = (0..<4_000).map { _ -> Event in
            let id = "device-\(random.int(6_000))"
            return Event(project: "p", body: .token(deviceID: id, token: id + "." + String(repeating: "g", count: 200 + random.int(200)), platform: .android))
        }
        for r in again.submitAndWait(grown) { _ = try r.get() }
        again.close()
        _ = try Compactor.run(directory: dir.sub("data"), options: Compactor.Options(retain: RetentionDuration(milliseconds: 0)))
        let second = try newestSnapshot()
        #expect(second != first)
        try isPacked(second)
        let after = try TopicStore(directory: dir.sub("data"))
        defer { after.close() }
        #expect(try Audit.run(after).isClean)
    }

    @Test func compactionKeepsTheWindowSnapshotsTheHorizonAndArchivesTheRest() throws {
        let dir = TemporaryDirectory("compact")
        let (store, cut) = try makeStore(dir, before: 600, after: 150, seed: 11)
        let recordsBefore = try allRecords(store)
        let horizonExpected = recordsBefore.last(where: { $0.timestamp <= cut })!.sequence
        let liveBefore = try ProjectionDump.of(store)
        store.close()

        var options = compactionOptions(keepingFrom: cut, archive: dir.sub("archive"))
        options.garbage = GarbageRules()
        options.garbage.devices = false; options.garbage.topics = false; options.garbage.tokens = false
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(report.horizon == horizonExpected)
        #expect(report.eventsRemoved == horizonExpected)
        #expect(report.eventsArchived == horizonExpected)
        #expect(report.generationAfter != report.generationBefore)
        #expect(report.databaseBytesAfter > 0 && report.databaseBytesAfter < report.databaseBytesBefore)

        let after = try TopicStore(directory: dir.sub("data"))
        defer { after.close() }
        let records = try allRecords(after)
        // Sequence numbers never change: the log is the old tail, record for record.
        #expect(records == Array(recordsBefore.drop(while: { $0.sequence <= horizonExpected })))
        // The projections are untouched; meta gains the chain head at the horizon.
        var afterDump = try ProjectionDump.of(after)
        let compactedHead = afterDump.tables["meta"]?.removeValue(forKey: Array("compactedHead".utf8))
        #expect(compactedHead?.count == 40)
        #expect(afterDump == liveBefore, "\(afterDump.differences(from: liveBefore))")

        // Audit starts from the snapshot and is clean; its head is the old head.
        let audit = try Audit.run(after)
        #expect(audit.isClean, "\(audit.logIssues) \(audit.differences)")
        #expect(audit.snapshot?.sequence == horizonExpected)
        #expect(audit.head?.sequence == recordsBefore.last!.sequence)

        // Replay from the horizon equals the live state; before it is an error naming it.
        var o = Replay.Options(); o.includeLog = false
        try Replay.rebuild(from: after, to: .end, into: dir.sub("replay-end"), options: o)
        let replayed = try TopicStore(directory: dir.sub("replay-end"), options: { var x = TopicStore.Options(); x.readOnly = true; return x }())
        #expect(try ProjectionDump.of(replayed) == ProjectionDump.of(after))
        replayed.close()
        #expect(throws: ReplayError.self) { try Replay.rebuild(from: after, to: .sequence(horizonExpected - 1), into: dir.sub("too-early")) }
        do {
            try Replay.rebuild(from: after, to: .sequence(horizonExpected - 1), into: dir.sub("too-early-2"))
        } catch {
            #expect("\(error)".contains("horizon, seq \(horizonExpected)"), "\(error)")
        }
        // As of the horizon: exactly the snapshot, with log copy and snapshot, a store whose audit passes.
        try Replay.rebuild(from: after, to: .sequence(horizonExpected + 20), into: dir.sub("mid"))
        let mid = try TopicStore(directory: dir.sub("mid"))
        let midAudit = try Audit.run(mid)
        #expect(midAudit.isClean, "\(midAudit.logIssues) \(midAudit.differences)")
        #expect(try mid.read { txn in try mid.tables.appliedSequence(txn) } == horizonExpected + 20)
        mid.close()

        // The archive holds the removed events exactly and imports to the snapshot's head.
        let archived = try Archive.records(at: report.archivePath!)
        #expect(archived == Array(recordsBefore.prefix(Int(horizonExpected))))
        let imported = try compactCLI(["import", "--data", dir.sub("imported"), "--json", report.archivePath!])
        #expect(imported.status == 0, "\(imported.error)")
        let snapshot = try Snapshot.find(inStore: dir.sub("data"), horizon: horizonExpected)!
        #expect(imported.output.contains(snapshot.head.hash.hex))
        // And `load` reads the compressed archive as commands.
        let loaded = try compactCLI(["load", "--data", dir.sub("loaded"), "--json", report.archivePath!])
        #expect(loaded.status == 0, "\(loaded.error)")
        #expect(loaded.output.contains("\"applied\":\(horizonExpected)"), "\(loaded.output)")

        // A second compaction moves the horizon on from the first snapshot.
        let second = try Compactor.run(directory: dir.sub("data"), options: {
            var x = options; x.now = nowMilliseconds() + 86_400_000 - 1; x.archiveDirectory = dir.sub("archive"); return x
        }(), store: after)
        #expect(second.horizon == recordsBefore.last!.sequence - 1, "the log keeps its last record")
        #expect(second.previousHorizon == horizonExpected)
        #expect(Snapshot.horizons(inStore: dir.sub("data")) == [second.horizon])
        let chained = try Audit.run(after)
        #expect(chained.isClean, "\(chained.logIssues) \(chained.differences)")
        #expect(try Archive.records(at: second.archivePath!).map(\.sequence) == Array((horizonExpected + 1)...second.horizon))
    }

    @Test func garbageRulesAppendEventsAndReplayEqualsLive() throws {
        let dir = TemporaryDirectory("gc")
        let store = try TopicStore(directory: dir.sub("data"))
        let events: [Event] = [
            Event(project: "p", body: .register(deviceID: "empty", topics: [TopicSpec(code: "gone")])),
            Event(project: "p", body: .unregisterAll(deviceID: "empty")),                      // no token, no topic
            Event(project: "p", body: .token(deviceID: "live", token: "t-live", platform: .ios)),
            Event(project: "p", body: .register(deviceID: "live", topics: [TopicSpec(code: "kept")])),
            Event(project: "p", body: .token(deviceID: "rej", token: "t-rej", platform: .android)),
            Event(project: "p", body: .register(deviceID: "rej", topics: [TopicSpec(code: "kept")])),
            Event(project: "p", body: .token(deviceID: "rej-alone", token: "t-alone", platform: .ios)),
            Event(project: "p", body: .token(deviceID: "fresh-rej", token: "t-fresh", platform: .ios)),
        ]
        for e in events { try store.submitAndWait(e) }
        // Rejections (provider time after the token times, or the fold ignores them as stale).
        usleep(5_000)
        let later = nowMilliseconds() + 1
        for t in ["t-rej", "t-alone", "t-fresh"] {
            try store.submitAndWait(Event(project: "p", body: .tokenRejected(token: t, rejectedAt: later, reason: "Unregistered")))
        }
        usleep(20_000)
        let cut = nowMilliseconds()
        usleep(20_000)
        try store.submitAndWait(Event(project: "p", body: .register(deviceID: "live", topics: [TopicSpec(code: "kept")])))

        var options = compactionOptions(keepingFrom: cut)
        // Grace ends between the rejections and "now": every rejection above is past it…
        options.garbage.rejectedGrace = RetentionDuration(milliseconds: options.now! - later - 10)
        let report = try Compactor.run(directory: dir.sub("data"), options: options, store: store)
        // empty (no token, no topic) and rej-alone and fresh-rej (rejected, no topic) are forgotten;
        // rej keeps its topic, so only its token expires; topic "gone" has no subscriber and no recent event.
        #expect(report.devicesForgotten == 3)
        #expect(report.tokensExpired == 1)
        #expect(report.topicsDropped == 1)
        let reader = store.reader
        try store.read { txn in
            let pid = try reader.project(named: "p", txn)!.id
            #expect(try reader.ordinal(pid, deviceID: "empty", txn) == nil)
            #expect(try reader.ordinal(pid, deviceID: "rej-alone", txn) == nil)
            #expect(try reader.device(pid, deviceID: "rej", txn)?.record.token == nil)
            #expect(try reader.device(pid, deviceID: "rej", txn)?.topics == ["kept"])
            #expect(try reader.device(pid, deviceID: "live", txn)?.record.token == "t-live")
            #expect(try reader.topicID(pid, code: "gone", txn) == nil)
            #expect(try reader.topicID(pid, code: "kept", txn) != nil)
        }
        let types = try allRecords(store).map(\.event.body.typeName)
        #expect(types.filter { $0 == "forget-device" }.count == 3)
        #expect(types.filter { $0 == "drop-topic" }.count == 1)
        #expect(types.filter { $0 == "expire-token" }.count == 1)
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(audit.logIssues) \(audit.differences)")

        // Rules can be switched off: a second run with them off collects nothing.
        var off = compactionOptions(keepingFrom: nowMilliseconds())
        off.garbage.devices = false; off.garbage.topics = false; off.garbage.tokens = false
        try store.submitAndWait(Event(project: "p", body: .unregisterAll(deviceID: "live")))
        try store.submitAndWait(Event(project: "p", body: .register(deviceID: "x", topics: [TopicSpec(code: "y")])))
        try store.submitAndWait(Event(project: "p", body: .unregisterAll(deviceID: "x")))
        let quiet = try Compactor.run(directory: dir.sub("data"), options: off, store: store)
        #expect(quiet.devicesForgotten == 0 && quiet.topicsDropped == 0 && quiet.tokensExpired == 0)
        store.close()
    }

    @Test func dryRunChangesNoByte() throws {
        let dir = TemporaryDirectory("dry")
        let (store, cut) = try makeStore(dir, before: 300, after: 50, seed: 3)
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "lonely", topics: [TopicSpec(code: "solo")])))
        try store.submitAndWait(Event(project: "alpha", body: .unregisterAll(deviceID: "lonely")))
        store.close()
        let before = fileContents(under: dir.path)
        var options = compactionOptions(keepingFrom: cut, archive: dir.sub("archive"))
        options.dryRun = true
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(report.dryRun)
        #expect(report.eventsRemoved > 0)
        #expect(report.devicesForgotten >= 1)
        let after = fileContents(under: dir.path)
        #expect(Set(after.keys) == Set(before.keys), "files appeared or vanished: \(Set(after.keys).symmetricDifference(before.keys))")
        for (name, bytes) in before { #expect(after[name] == bytes, "\(name) changed") }

        // The CLI dry run too, with --json.
        let cli = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--dry-run", "--json"])
        #expect(cli.status == 0, "\(cli.error)")
        #expect(cli.output.contains("\"dryRun\":true"))
        let again = fileContents(under: dir.path)
        for (name, bytes) in before { #expect(again[name] == bytes, "\(name) changed by the CLI dry run") }
    }
}
