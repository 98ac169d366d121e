import Compaction
import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// Compaction and the free space it needs: refused up front when it does not
/// fit, and, when a phase fails anyway (ENOSPC or any other error), what the
/// run wrote is removed, the store is unchanged (or, after its switch,
/// committed), and the message names the phase.
@Suite(.serialized) struct CompactionSpaceTests {
    static let reason: Comment = "mounting a tmpfs needs root and mount permission (CAP_SYS_ADMIN)"

    /// What a store directory holds besides its active generation and the snapshot it needs.
    static func strayFiles(_ data: String, archive: String? = nil) throws -> [String] {
        let active = try TopicStore.activeGeneration(in: data)
        var stray: [String] = []
        for name in try FileManager.default.contentsOfDirectory(atPath: data) {
            if name.hasPrefix(".compact-copy") || name.hasPrefix(".tmp") { stray.append(name) }
            if TopicStore.isGenerationName(name), name != active { stray.append(name) }
            if !active.isEmpty, name == "data.mdb" { stray.append(name) }
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: Snapshot.folder(inStore: data))) ?? [] where name.hasPrefix(".") {
            stray.append("snapshots/" + name)
        }
        if let archive {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: archive)) ?? [] where name.hasPrefix(".") {
                stray.append("archive/" + name)
            }
        }
        return stray
    }

    /// The store is as it was: same generation, same log, the snapshot it needs and no other, audit clean.
    static func expectUnchanged(_ data: String, generation: String, firstSequence: UInt64?, horizon: UInt64,
                                archive: String? = nil, _ round: String) throws {
        #expect(try TopicStore.activeGeneration(in: data) == generation, "\(round): the generation moved")
        #expect(try strayFiles(data, archive: archive) == [], "\(round): left behind")
        #expect(Snapshot.horizons(inStore: data) == (horizon > 0 ? [horizon] : []), "\(round): snapshots \(Snapshot.horizons(inStore: data))")
        if let archive {
            let ranges = ((try? FileManager.default.contentsOfDirectory(atPath: archive)) ?? []).compactMap(Archive.range(ofFileName:))
            #expect(ranges.allSatisfy { $0.upperBound <= horizon }, "\(round): an archive of events still in the log: \(ranges)")
        }
        let store = try TopicStore(directory: data)
        defer { store.close() }
        #expect(try store.read { txn in try store.log.bounds(txn)?.first } == firstSequence, "\(round): the log was trimmed")
        let audit = try Audit.run(store)
        #expect(audit.isClean, "\(round): \(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
    }

    /// A store with garbage (an empty device and an empty topic), compacted once
    /// (so it has a snapshot its log continues from), with more events after.
    static func compactedStore(in data: String) throws -> (horizon: UInt64, cut: Int64) {
        let store = try TopicStore(directory: data)
        try submitWorkload(store, count: 4000, seed: 41)
        usleep(20_000)
        var options = compactionOptions(keepingFrom: nowMilliseconds())
        options.checksSpace = false
        let first = try Compactor.run(directory: data, options: options, store: store)
        try submitWorkload(store, count: 4000, seed: 42)
        // Some bulk: devices with long tokens (a few MB of file, so the copies are more than the margin).
        for batch in 0..<20 {
            let events = (0..<1000).map { i in
                Event(project: "bulk", body: .token(deviceID: "bulk-\(batch)-\(i)", token: String(repeating: "\(batch)x\(i)", count: 20),
                                                    platform: .ios))
            }
            for r in store.submitAndWait(events) { _ = try r.get() }
        }
        for r in store.submitAndWait([
            Event(project: "alpha", body: .register(deviceID: "lonely", topics: [TopicSpec(code: "solo")])),
            Event(project: "alpha", body: .unregisterAll(deviceID: "lonely")),
        ]) { _ = try r.get() }
        usleep(20_000)
        let cut = nowMilliseconds()
        usleep(20_000)
        try submitWorkload(store, count: 100, seed: 43)
        store.close()
        #expect(first.horizon > 0)
        return (first.horizon, cut)
    }

    /// A copy of `compactedStore(in:)` at `data`. The store is made once, and
    /// each of the sixteen cases below compacts its own copy: made for each,
    /// it was most of the suite's 98 s, which runs serialized and was the last
    /// to finish in CI.
    static func copyOfCompactedStore(at data: String) throws -> (horizon: UInt64, cut: Int64) {
        let made = try template.get()
        try FileManager.default.copyItem(atPath: made.data, toPath: data)
        return (made.horizon, made.cut)
    }

    private static let template = Result { () throws -> (data: String, horizon: UInt64, cut: Int64) in
        let root = templateRoot()
        // A static is never deinitialized: the directory goes when the test process exits.
        atexit { try? FileManager.default.removeItem(atPath: CompactionSpaceTests.templateRoot()) }
        let made = try compactedStore(in: root + "/data")
        return (root + "/data", made.horizon, made.cut)
    }

    private static func templateRoot() -> String { NSTemporaryDirectory() + "compact-template-\(getpid())" }

    /// A run that does not fit is refused before it writes anything, naming what it
    /// needs and what is free, and what to do; it runs once there is room.
    @Test(.enabled(if: SmallFilesystem.canMount, reason)) func aRunThatDoesNotFitIsRefusedAndChangesNothing() throws {
        let fs = try SmallFilesystem(megabytes: 160)
        let data = fs.sub("data")
        let (horizon, cut) = try Self.copyOfCompactedStore(at: data)
        let options = compactionOptions(keepingFrom: cut, archive: fs.sub("archive"))
        let plan = try Compactor.run(directory: data, options: { var o = options; o.dryRun = true; return o }())
        #expect(plan.space.needed > 0 && plan.space.fits, "\(plan.space)")

        // Something else takes the room: enough is left to collect garbage, not to compact.
        #expect(plan.space.neededGarbageOnly + (2 << 20) < plan.space.needed, "\(plan.space)")
        let filler = fs.sub("filler")
        let size = fs.available - (plan.space.neededGarbageOnly + plan.space.needed) / 2
        #expect(FileManager.default.createFile(atPath: filler, contents: Data(count: size)))
        let generation = try TopicStore.activeGeneration(in: data)
        let before = fileContents(under: data)
        // What a killed run left (never the store's) goes even so: it would keep the disk full.
        let leftover = data + "/.compact-copy-99999"
        try FileManager.default.createDirectory(atPath: leftover, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: leftover + "/data.mdb", contents: Data(count: 100_000)))
        do {
            _ = try Compactor.run(directory: data, options: options)
            Issue.record("a run that does not fit was not refused")
        } catch let error as CompactionError {
            let text = "\(error)"
            #expect(text.contains("Leftovers of an interrupted run were removed") && text.contains(".compact-copy-99999"), "\(text)")
            #expect(text.contains("not enough free space") && text.contains("Nothing of the store was changed"), "\(text)")
            #expect(text.contains(CompactionReportFormat.bytes(plan.space.needed)), "\(text)")
            #expect(text.contains("--no-file") && text.contains("--archive"), "\(text)")
        }
        let after = fileContents(under: data)
        #expect(Set(after.keys) == Set(before.keys), "\(Set(after.keys).symmetricDifference(before.keys))")
        for (name, bytes) in before { #expect(after[name] == bytes, "\(name) changed") }
        #expect(!FileManager.default.fileExists(atPath: fs.sub("archive")))

        // The command line: exit 1, the same message; --dry-run says so too.
        let cli = try compactCLI(["compact", "--data", data, "--retain", "0", "--archive", fs.sub("archive")])
        #expect(cli.status == 1, "\(cli.output) \(cli.error)")
        #expect(cli.error.contains("not enough free space"), "\(cli.error)")
        let dry = try compactCLI(["compact", "--data", data, "--retain", "0", "--dry-run"])
        #expect(dry.output.contains("NOT ENOUGH"), "\(dry.output)")
        // Garbage only fits.
        var garbageOnly = options
        garbageOnly.archiveDirectory = nil
        garbageOnly.compactFile = false
        #expect(try Compactor.run(directory: data, options: garbageOnly).devicesForgotten >= 1)

        try FileManager.default.removeItem(atPath: filler)
        let report = try Compactor.run(directory: data, options: options)
        #expect(report.horizon > horizon && report.generationAfter != generation)
        #expect(try Self.strayFiles(data) == [])
    }

    /// Small records removed and large ones kept: the share of the log removed, counted in
    /// records, said the new file would be 33.8 MB where it took 128.2 MB (a review). The
    /// estimate of the new file now walks the kept records and bounds it.
    @Test func theNewFileEstimateBoundsLargeKeptRecords() throws {
        let dir = TemporaryDirectory("space-bound")
        let data = dir.sub("data")
        let title = String(repeating: "T", count: 200)
        do {
            let store = try TopicStore(directory: data)
            defer { store.close() }
            for b in 0..<20 {
                let batch = (0..<1_000).map { i in
                    Event(project: "p", body: .token(deviceID: "d\(b * 1_000 + i)", token: "k\(b * 1_000 + i)", platform: .ios))
                }
                for r in store.submitAndWait(batch) { _ = try r.get() }
            }
            usleep(20_000)
            let cut = nowMilliseconds()
            try "\(cut)".write(toFile: dir.sub("cut"), atomically: true, encoding: .utf8)
            usleep(20_000)
            for b in 0..<3 {
                let batch = (0..<500).map { i in
                    Event(project: "p", body: .register(deviceID: "d\(b * 500 + i)",
                                                        topics: (0..<40).map { TopicSpec(code: "t\($0)", title: title + "\(b)") }))
                }
                for r in store.submitAndWait(batch) { _ = try r.get() }
            }
        }
        let cut = Int64(try String(contentsOfFile: dir.sub("cut"), encoding: .utf8))!
        // Records kept one an entry, as the estimate assumes: in blocks they take about half,
        // and the count-based share below would bound them too.
        var options = compactionOptions(keepingFrom: cut)
        options.logBlocks = false
        let report = try Compactor.run(directory: data, options: options)
        #expect(report.eventsRemoved == 20_000)
        let generation = try TopicStore.activeGeneration(in: data)
        let size = try FileManager.default.attributesOfItem(atPath: TopicStore.generationDirectory(data, generation) + "/data.mdb")[.size] as? Int ?? 0
        #expect(report.space.newFileBytes >= size, "estimated \(report.space.newFileBytes), the new file took \(size)")
        // The count-based share would not have bounded it.
        #expect(report.space.copyBytes - report.space.logBytesRemoved < size, "\(report.space)")
    }

    /// The disk fills up (another program) just as a phase begins: the phase fails with
    /// ENOSPC, the run removes what it wrote, the store is unchanged and audits clean,
    /// and the next run, with room again, compacts.
    @Test(.enabled(if: SmallFilesystem.canMount, reason),
          arguments: ["garbage", "snapshot", "archive", "copy", "catch-up"])
    func aDiskThatFillsUpDuringAPhaseLeavesNothingBehind(_ step: String) throws {
        let fs = try SmallFilesystem(megabytes: 160)
        let data = fs.sub("data"), archive = fs.sub("archive")
        let (horizon, cut) = try Self.copyOfCompactedStore(at: data)
        let store = try TopicStore(directory: data)
        let generation = store.generation
        let first = try store.read { txn in try store.log.bounds(txn)?.first }
        var options = compactionOptions(keepingFrom: cut, archive: archive)
        options.catchUpThreshold = 0
        final class Filler: @unchecked Sendable { var path: String? }
        let filler = Filler()
        options.testHook = { at in
            guard at == step else { return }
            // Records for the catch-up to fold, written while there is still room.
            if at == "catch-up" { try submitWorkload(store, count: 50, seed: 44) }
            filler.path = fs.fill()
        }
        var message = ""
        do {
            let report = try Compactor.run(directory: data, options: options, store: store)
            Issue.record("\(step): the run succeeded on a full disk (\(report.generationAfter))")
        } catch {
            message = "\(error)"
        }
        let after = try store.read { txn in try store.log.bounds(txn)?.first }
        store.close()
        if let path = filler.path { try FileManager.default.removeItem(atPath: path) }
        #expect(message.contains("No space left on device"), "\(step): \(message)")
        #expect(message.contains("The store is unchanged"), "\(step): \(message)")
        #expect(message.contains("compaction failed in the "), "\(step): \(message)")
        #expect(after == first)
        try Self.expectUnchanged(data, generation: generation, firstSequence: first, horizon: horizon, archive: archive, step)

        var again = options
        again.testHook = nil
        let report = try Compactor.run(directory: data, options: again)
        #expect(report.generationAfter != generation, "\(step): the next run did not compact")
        #expect(try Self.strayFiles(data, archive: archive) == [], "\(step)")
    }

    /// Any error at any step (an injected one here): before the switch commits, the run
    /// removes what it wrote and the store is unchanged; after it, the store is the new
    /// generation and the message says the compaction is committed.
    @Test(arguments: ["garbage", "snapshot", "snapshot-written", "archive", "archive-written", "copy",
                      "copy-generation", "catch-up", "switch", "switched", "cleanup"])
    func aFailureAtAnyStepRemovesWhatTheRunWrote(_ step: String) throws {
        struct Injected: Error, CustomStringConvertible { var description: String { "injected failure" } }
        let dir = TemporaryDirectory("compact-fail")
        let data = dir.sub("data"), archive = dir.sub("archive")
        let (horizon, cut) = try Self.copyOfCompactedStore(at: data)
        let generation = try TopicStore.activeGeneration(in: data)
        let first = try { () throws -> UInt64? in
            let s = try TopicStore(directory: data); defer { s.close() }
            return try s.read { txn in try s.log.bounds(txn)?.first }
        }()
        var options = compactionOptions(keepingFrom: cut, archive: archive)
        options.testHook = { if $0 == step { throw Injected() } }
        var message = ""
        do {
            _ = try Compactor.run(directory: data, options: options)
            Issue.record("\(step): no failure")
        } catch {
            message = "\(error)"
        }
        #expect(message.contains("injected failure"), "\(step): \(message)")
        let phase = ["garbage": "garbage", "snapshot": "snapshot", "snapshot-written": "snapshot", "archive": "archive",
                     "archive-written": "archive", "copy": "new file generation",
                     "copy-generation": "new file generation", "catch-up": "catch-up", "switch": "switch",
                     "switched": "cleanup", "cleanup": "cleanup"][step]!
        #expect(message.contains("in the \(phase) phase"), "\(step): \(message)")
        if step == "switched" || step == "cleanup" {
            #expect(message.contains("committed"), "\(step): \(message)")
            #expect(try TopicStore.activeGeneration(in: data) != generation)
            let store = try TopicStore(directory: data)
            let audit = try Audit.run(store)
            #expect(audit.isClean, "\(step): \(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
            #expect((audit.snapshot?.sequence ?? 0) > horizon)
            store.close()
        } else {
            #expect(message.contains("The store is unchanged"), "\(step): \(message)")
            if step != "garbage" { #expect(message.contains("garbage event"), "\(step): the committed garbage is not mentioned: \(message)") }
            try Self.expectUnchanged(data, generation: generation, firstSequence: first, horizon: horizon, archive: archive, step)
        }
        var again = options
        again.testHook = nil
        let report = try Compactor.run(directory: data, options: again)
        #expect(try Self.strayFiles(data, archive: archive) == [], "\(step): after the next run")
        #expect(Snapshot.horizons(inStore: data) == [report.horizon])
    }
}
