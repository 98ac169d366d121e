import Compaction
import Foundation
import Replay
import SubscriptionLog
import Testing
import TopicStore

/// What `compact` says: `--no-file` reports what it does (it trims no event),
/// a run without `--archive` says its removed events are kept nowhere, the
/// durations are documented as the parser takes them, and times are ISO 8601.
@Suite struct CompactionReportTests {
    /// A compacted store (a snapshot at its horizon) with more events after it.
    func compactedStore(_ dir: TemporaryDirectory) throws -> (horizon: UInt64, cut: Int64) {
        let (store, cut) = try storeWithCut(dir, before: 300, after: 60, seed: 31)
        store.close()
        var options = compactionOptions(keepingFrom: cut)
        options.garbage.devices = false; options.garbage.topics = false; options.garbage.tokens = false
        let report = try Compactor.run(directory: dir.sub("data"), options: options)
        #expect(report.horizon > 0 && report.generationAfter != "")
        return (report.horizon, cut)
    }

    /// `--no-file` trims no event (it writes no new file, and nothing is ever
    /// removed from the live one): it reports none removed, writes no snapshot
    /// or archive that the next run would throw away as leftovers, and keeps the
    /// snapshot the store's log continues from.
    @Test func noFileRemovesNoEventAndSaysSo() throws {
        let dir = TemporaryDirectory("nofile")
        let data = dir.sub("data")
        let (horizon, _) = try compactedStore(dir)
        let store = try TopicStore(directory: data)
        try submitWorkload(store, count: 40, seed: 77)
        try store.submitAndWait(Event(project: "alpha", body: .register(deviceID: "lonely", topics: [TopicSpec(code: "solo")])))
        try store.submitAndWait(Event(project: "alpha", body: .unregisterAll(deviceID: "lonely")))
        let boundsBefore = try store.read { txn in try store.log.bounds(txn) }
        store.close()

        // Everything but the last record is older than the window, so a full run would move the horizon.
        var options = Compactor.Options(retain: RetentionDuration(milliseconds: 0))
        options.compactFile = false
        let dry = try Compactor.run(directory: data, options: { var o = options; o.dryRun = true; return o }())
        #expect(dry.eventsRemoved == 0 && dry.horizon == horizon)
        #expect(dry.retentionHorizon == boundsBefore!.last - 1)

        let report = try Compactor.run(directory: data, options: options)
        #expect(report.eventsRemoved == 0, "reported \(report.eventsRemoved) events removed")
        #expect(report.horizon == horizon && report.previousHorizon == horizon)
        #expect(!report.logTrimmed)
        #expect(report.devicesForgotten >= 1, "garbage is still collected")
        #expect(Snapshot.horizons(inStore: data) == [horizon], "snapshots: \(Snapshot.horizons(inStore: data))")

        let after = try TopicStore(directory: data)
        let bounds = try after.read { txn in try after.log.bounds(txn) }
        #expect(bounds?.first == boundsBefore?.first, "the log was trimmed")
        let audit = try Audit.run(after)
        #expect(audit.isClean, "\(audit.logIssues.prefix(3)) \(audit.differences.prefix(3))")
        #expect(audit.snapshot?.sequence == horizon)
        after.close()

        // The next run finds nothing of it to clean up.
        let next = try Compactor.run(directory: data, options: { var o = options; o.dryRun = true; return o }())
        #expect(next.leftoversRemoved.isEmpty, "\(next.leftoversRemoved)")

        // The command line says the same, in text and in JSON.
        let text = try compactCLI(["compact", "--data", data, "--retain", "0", "--no-file"])
        #expect(text.status == 0, "\(text.error)")
        #expect(!text.output.contains("remove "), "\(text.output)")
        #expect(text.output.contains("not trimmed (--no-file)"), "\(text.output)")
        let json = try compactCLI(["compact", "--data", data, "--retain", "0", "--no-file", "--json"])
        #expect(json.status == 0, "\(json.error)")
        #expect(json.output.contains("\"eventsRemoved\":0") && json.output.contains("\"logTrimmed\":false"), "\(json.output)")
        #expect(Snapshot.horizons(inStore: data) == [horizon])

        // --archive has nothing to archive when no event is removed: refused, nothing written.
        let both = try compactCLI(["compact", "--data", data, "--retain", "0", "--no-file", "--archive", dir.sub("archive")])
        #expect(both.status == 2, "\(both.output) \(both.error)")
        #expect(both.error.contains("--no-file") && both.error.contains("--archive"), "\(both.error)")
        #expect(!FileManager.default.fileExists(atPath: dir.sub("archive")))
    }

    /// Without `--archive` the removed events are gone for good: the text report
    /// says so in one line (and how to keep them); JSON stays as it was.
    @Test func compactWithoutArchiveSaysTheEventsAreNotKept() throws {
        let dir = TemporaryDirectory("noarchive")
        let (store, _) = try storeWithCut(dir, before: 50, after: 5, seed: 2)
        store.close()
        let dry = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--dry-run"])
        #expect(dry.status == 0, "\(dry.error)")
        #expect(dry.output.components(separatedBy: "not archived").count == 2, "\(dry.output)")
        let json = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--dry-run", "--json"])
        #expect(!json.output.contains("not archived"), "\(json.output)")
        let archived = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0", "--dry-run", "--archive", dir.sub("a")])
        #expect(!archived.output.contains("not archived"), "\(archived.output)")
        let run = try compactCLI(["compact", "--data", dir.sub("data"), "--retain", "0"])
        #expect(run.status == 0, "\(run.error)")
        let line = run.output.split(separator: "\n").first { $0.contains("not archived") }
        #expect(line?.contains("--archive") == true, "\(run.output)")
    }

    /// Every unit the duration parser takes is in `compact --help` and in the
    /// usage error, seconds included.
    @Test func durationUnitsAreDocumentedAsParsed() throws {
        #expect(RetentionDuration(parsing: "2100s")?.milliseconds == 2_100_000)
        #expect(RetentionDuration(parsing: "1H30M")?.milliseconds == 5_400_000)
        let help = try compactCLI(["compact", "--help"])
        for unit in ["w", "d", "h", "m", "s", "ms"] {
            #expect(help.output.contains("\(unit) ") || help.output.contains("\(unit),") || help.output.contains("\(unit))"),
                    "unit \(unit) missing from --help")
        }
        #expect(help.output.contains("seconds"), "\(help.output)")
        let bad = try compactCLI(["compact", "--data", "/nonexistent", "--retain", "30x"])
        #expect(bad.status == 2)
        #expect(bad.error.contains("45s") || bad.error.contains("seconds"), "\(bad.error)")
        let docs = try String(contentsOfFile: packageRoot() + "/docs/compaction.md", encoding: .utf8)
        #expect(docs.contains("2100s") || docs.contains("45s"), "docs/compaction.md names no seconds")
    }

    /// A time before the horizon is named in ISO 8601 (`…T…Z`), as everywhere
    /// else, not in Foundation's `2026-11-30 21:02:00 +0000`.
    @Test func beforeHorizonErrorsPrintISOTimes() throws {
        let dir = TemporaryDirectory("horizon-iso")
        let (horizon, _) = try compactedStore(dir)
        let snapshot = try #require(try Snapshot.find(inStore: dir.sub("data"), horizon: horizon))
        var options = TopicStore.Options(); options.readOnly = true
        let live = try TopicStore(directory: dir.sub("data"), options: options)
        defer { live.close() }
        let early = snapshot.timestamp - 60_000
        do {
            try Replay.rebuild(from: live, to: .time(early), into: dir.sub("out"))
            Issue.record("a time before the horizon was replayed")
        } catch {
            let text = "\(error)"
            #expect(text.contains(TimeText.iso(early)), "\(text)")
            #expect(text.contains(TimeText.iso(snapshot.timestamp)), "\(text)")
            #expect(!text.contains("+0000"), "\(text)")
        }
        do {
            try Replay.rebuild(from: live, to: .sequence(horizon - 1), into: dir.sub("out2"))
            Issue.record("a sequence before the horizon was replayed")
        } catch {
            #expect("\(error)".contains(TimeText.iso(snapshot.timestamp)) && !"\(error)".contains("+0000"), "\(error)")
        }
    }
}

/// The package's root directory (this file is in Tests/TopicStoreTests).
func packageRoot() -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
}
